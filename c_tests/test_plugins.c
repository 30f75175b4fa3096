/*
 * Exporter plug-ins loaded by name through the C ABI: the example CSV plug-in (C), the example
 * Rust plug-in (found in <libdir>/plugins, the default search directory, or NIXL_PLUGIN_DIR),
 * a C++ plug-in whose exportEvent throws, a NIXL C++ plug-in (version 2, through the C++
 * bridge), a version-2 object without a creator, a library that is not a plug-in, a missing plug-in and a benign bind collision.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nixl_telemetry.h"

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            char msg_[1024];                                                           \
            nixl_telemetry_last_error(msg_, sizeof msg_);                              \
            fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n", __FILE__,    \
                    __LINE__, #cond, msg_);                                            \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static int warnings;
static char last_warning[1024];

static void
on_log(int32_t level, const char *message, void *user_data) {
    (void)user_data;
    if (level <= NIXL_TELEMETRY_LOG_WARN) {
        ++warnings;
        snprintf(last_warning, sizeof last_warning, "%s", message);
    }
}

static char *
last_error(void) {
    static char buf[2048];
    nixl_telemetry_last_error(buf, sizeof buf);
    return buf;
}

static char *
read_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static nixl_telemetry_t *
create_with(const char *exporter, const char *agent, nixl_telemetry_status_t expect) {
    setenv("NIXL_TELEMETRY_EXPORTER", exporter, 1);
    nixl_telemetry_t *t = (nixl_telemetry_t *)0x1;
    nixl_telemetry_status_t s = nixl_telemetry_create(agent, true, &t);
    if (s != expect) {
        fprintf(stderr, "create(%s) returned %d, expected %d: %s\n", exporter, s, expect,
                last_error());
        exit(1);
    }
    CHECK((s == NIXL_TELEMETRY_SUCCESS) == (t != NULL));
    return t;
}

static void
produce(nixl_telemetry_t *t) {
    CHECK(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_MEMORY_REGISTERED, 4096) == 0);
    CHECK(nixl_telemetry_add_xfer_stats(t, 120, true, 1048576, 8) == 0);
    CHECK(nixl_telemetry_update_error(t, -3) == 0);
}

int
main(void) {
    char dir_template[] = "/tmp/nixl-plugins-XXXXXX";
    char *dir = mkdtemp(dir_template);
    CHECK(dir != NULL);
    setenv("NIXL_TELEMETRY_CSV_DIR", dir, 1);
    setenv("NIXL_TELEMETRY_EXAMPLE_RUST_DIR", dir, 1);
    setenv("NIXL_TELEMETRY_RUN_INTERVAL", "3600000", 1);
    unsetenv("NIXL_TELEMETRY_ENABLE");
    unsetenv("NIXL_TELEMETRY_DIR");
    nixl_telemetry_set_log_callback(on_log, NULL);
    CHECK(nixl_telemetry_add_plugin_dir(NIXL_TEST_PLUGIN_DIR) == NIXL_TELEMETRY_SUCCESS);
    CHECK(nixl_telemetry_add_plugin_dir("/no/such/dir") == NIXL_TELEMETRY_ERR_NOT_FOUND);
    CHECK(nixl_telemetry_add_plugin_dir(NULL) == NIXL_TELEMETRY_ERR_INVALID_PARAM);

    /* The example C plug-in receives exactly the events produced, in order. */
    nixl_telemetry_t *t = create_with("csv", "agent-c", NIXL_TELEMETRY_SUCCESS);
    produce(t);
    nixl_telemetry_destroy(t);
    char path[4096];
    snprintf(path, sizeof path, "%s/agent-c.csv", dir);
    const char *csv = read_file(path);
    CHECK(csv != NULL);
    CHECK(strcmp(csv, "event_type,event,value\n"
                      "4,agent_memory_registered,4096\n"
                      "7,agent_xfer_post_time,8\n"
                      "6,agent_xfer_time,120\n"
                      "0,agent_tx_bytes,1048576\n"
                      "2,agent_tx_requests_num,1\n"
                      "10,agent_err_backend,1\n") == 0);
    unlink(path);

    /* The example Rust plug-in, from the default directory <libdir>/plugins. */
    t = create_with("example_rust", "agent-r", NIXL_TELEMETRY_SUCCESS);
    produce(t);
    nixl_telemetry_destroy(t);
    snprintf(path, sizeof path, "%s/agent-r.events", dir);
    const char *lines = read_file(path);
    CHECK(lines != NULL);
    CHECK(strcmp(lines, "agent_memory_registered 4096\n"
                        "agent_xfer_post_time 8\n"
                        "agent_xfer_time 120\n"
                        "agent_tx_bytes 1048576\n"
                        "agent_tx_requests_num 1\n"
                        "agent_err_backend 1\n") == 0);
    unlink(path);

    /* A C++ plug-in whose exportEvent throws: the process survives; throws count as lost. */
    warnings = 0;
    t = create_with("throwing", "agent-x", NIXL_TELEMETRY_SUCCESS);
    for (uint64_t v = 0; v < 10; ++v) {
        CHECK(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, v) == 0);
    }
    CHECK(nixl_telemetry_flush(t) == 0);
    nixl_telemetry_stats_t stats;
    CHECK(nixl_telemetry_get_stats(t, &stats) == 0);
    CHECK(stats.events_exported == 5 && stats.events_lost == 5);
    nixl_telemetry_destroy(t);
    CHECK(warnings >= 1);
    snprintf(path, sizeof path, "%s/agent-x.kept", dir);
    const char *kept = read_file(path);
    CHECK(kept != NULL && strcmp(kept, "1 0\n1 2\n1 4\n1 6\n1 8\n") == 0);
    unlink(path);
    setenv("THROWING_PLUGIN_FAIL_CREATE", "1", 1);
    create_with("throwing", "agent-y", NIXL_TELEMETRY_ERR_UNKNOWN);
    CHECK(strstr(last_error(), "constructor failed on purpose") != NULL);
    unsetenv("THROWING_PLUGIN_FAIL_CREATE");

#ifdef NIXL_TEST_LINKAGE_static
    /*
     * Linked statically, this program's own directory (and its plugins/) is the build
     * directory, which has no bridge: it comes from NIXL_PLUGIN_DIR. Without that, a version-2
     * plug-in is refused with the bridge's name and where it was sought.
     */
    {
        const char *plugin_dir = getenv("NIXL_PLUGIN_DIR");
        CHECK(plugin_dir != NULL);
        char saved[4096];
        snprintf(saved, sizeof saved, "%s", plugin_dir);
        unsetenv("NIXL_PLUGIN_DIR");
        create_with("nixlcpp", "agent-2", NIXL_TELEMETRY_ERR_NOT_FOUND);
        CHECK(strstr(last_error(), "libnixl_telemetry_cpp_plugin_host.so") != NULL);
        CHECK(strstr(last_error(), "plug-in API version 2") != NULL);
        CHECK(strstr(last_error(), NIXL_TEST_PLUGIN_DIR) != NULL);
        setenv("NIXL_PLUGIN_DIR", saved, 1);
    }
#endif

    /*
     * A NIXL C++ plug-in (API version 2), through the C++ bridge: NIXL's init parameters, one
     * withBatch per flush (also an empty one), exportEvent per event in order; an event whose
     * exportEvent throws or fails counts as lost (one warning for each kind, one for the loss);
     * destroyed once.
     */
    warnings = 0;
    setenv("NIXL_TELEMETRY_BUFFER_SIZE", "64", 1);
    t = create_with("nixlcpp", "agent-2", NIXL_TELEMETRY_SUCCESS);
    unsetenv("NIXL_TELEMETRY_BUFFER_SIZE");
    produce(t);
    CHECK(nixl_telemetry_flush(t) == 0);
    CHECK(nixl_telemetry_flush(t) == 0);
    CHECK(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 7) == 0);
    CHECK(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 13) == 0);
    CHECK(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 14) == 0);
    CHECK(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 13) == 0);
    CHECK(nixl_telemetry_flush(t) == 0);
    CHECK(nixl_telemetry_get_stats(t, &stats) == 0);
    CHECK(stats.events_exported == 7 && stats.events_lost == 3);
    nixl_telemetry_destroy(t);
    CHECK(warnings == 3);
    snprintf(path, sizeof path, "%s/agent-2.nixlcpp", dir);
    const char *nixl_log = read_file(path);
    CHECK(nixl_log != NULL);
    CHECK(strcmp(nixl_log, "create 64\n"
                           "begin\n4 4096\n7 8\n6 120\n0 1048576\n2 1\n10 1\nend\n"
                           "begin\nend\n"
                           "begin\n1 14\nend\n"
                           "begin\nend\n"
                           "destroy\n") == 0);
    unlink(path);
    /* The exporter's constructor throws nixlTelemetryBindFailed: a benign bind collision. */
    warnings = 0;
    create_with("nixlcpp", "bind-2", NIXL_TELEMETRY_ERR_BIND_FAILED);
    CHECK(warnings == 1 && strstr(last_warning, "port 9090 is already in use (test)") != NULL);
    /* It throws anything else: NIXL's creator logs it and returns no exporter. */
    create_with("nixlcpp", "fail-2", NIXL_TELEMETRY_ERR_UNKNOWN);
    CHECK(strstr(last_error(), "returned no exporter") != NULL);
    CHECK(strstr(last_error(), "nixlcpp") != NULL);
    /* A version-2 object without a creator is refused with a plain explanation. */
    create_with("nixlv2", "agent-v", NIXL_TELEMETRY_ERR_MISMATCH);
    CHECK(strstr(last_error(), "API version 2") != NULL);
    CHECK(strstr(last_error(), "no exporter creator") != NULL);

    /* A library without the entry point. */
    create_with("notaplugin", "agent-n", NIXL_TELEMETRY_ERR_MISMATCH);
    CHECK(strstr(last_error(), "not a telemetry exporter plug-in") != NULL);

    /* A missing plug-in lists the directories searched. */
    create_with("nosuch", "agent-m", NIXL_TELEMETRY_ERR_NOT_FOUND);
    CHECK(strstr(last_error(), "libtelemetry_exporter_nosuch.so") != NULL);
    CHECK(strstr(last_error(), NIXL_TEST_PLUGIN_DIR) != NULL);

    /* A benign bind collision: no handle, exactly one warning, not an error. */
    warnings = 0;
    create_with("bindfail", "agent-b", NIXL_TELEMETRY_ERR_BIND_FAILED);
    CHECK(warnings == 1);
    CHECK(strstr(last_warning, "could not be bound") != NULL);
    CHECK(strstr(last_warning, "without a telemetry sink") != NULL);

    nixl_telemetry_set_log_callback(NULL, NULL);
    rmdir(dir);
    printf("test_plugins: all checks passed\n");
    return 0;
}
