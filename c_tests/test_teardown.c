/*
 * The C ABI called during process teardown, from an atexit handler that runs after the main
 * thread's thread-local storage is gone (as C++ global destructors do): failures must still
 * return their status, and a destroy whose final flush loses events must log and return
 * normally. An abort here would show as a failed test (SIGABRT).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nixl_telemetry.h"

static nixl_telemetry_t *late_handle;
static char ring_dir[64];

static void
at_exit(void) {
    if (nixl_telemetry_update_error(NULL, -2) != NIXL_TELEMETRY_ERR_INVALID_PARAM) {
        fprintf(stderr, "teardown: unexpected status from a failing call\n");
        _exit(3);
    }
    char buf[256];
    nixl_telemetry_last_error(buf, sizeof buf);
    /* Six staged events into a 4-slot ring: the final flush loses some and warns. */
    nixl_telemetry_destroy(late_handle);
    char path[128];
    snprintf(path, sizeof path, "%s/late", ring_dir);
    unlink(path);
    rmdir(ring_dir);
    fprintf(stderr, "test_teardown: all checks passed\n");
}

int
main(void) {
    snprintf(ring_dir, sizeof ring_dir, "/tmp/nixl-teardown-XXXXXX");
    if (mkdtemp(ring_dir) == NULL) {
        return 1;
    }
    setenv("NIXL_TELEMETRY_DIR", ring_dir, 1);
    setenv("NIXL_TELEMETRY_BUFFER_SIZE", "4", 1);
    setenv("NIXL_TELEMETRY_RUN_INTERVAL", "3600000", 1);
    unsetenv("NIXL_TELEMETRY_EXPORTER");
    unsetenv("NIXL_TELEMETRY_ENABLE");
    if (nixl_telemetry_create("late", true, &late_handle) != NIXL_TELEMETRY_SUCCESS) {
        return 1;
    }
    for (uint64_t v = 0; v < 6; ++v) {
        nixl_telemetry_update_data(late_handle, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, v);
    }
    /* A failure on the main thread fills its last-error slot before teardown. */
    if (nixl_telemetry_update_error(NULL, -2) != NIXL_TELEMETRY_ERR_INVALID_PARAM) {
        return 1;
    }
    atexit(at_exit);
    return 0;
}
