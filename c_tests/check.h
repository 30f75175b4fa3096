/*
 * Shared by the C ABI test programs of libnixl_telemetry that include it: the CHECK macros, the
 * test runner and the helpers more than one program uses (environment, temporary files, ring
 * reading, stats, log capture). Every .c file in c_tests/ is a program of its own (CMakeLists.txt
 * finds them by glob), built against the shared and against the static library, as C11 and as
 * C++17: this header is written in the common subset of the two languages. Include it first.
 *
 * The environment is process-global and read by nixl_telemetry_create, so the programs are
 * single-threaded (setenv/unsetenv between cases) except where a test starts threads itself.
 */
#ifndef NIXL_C_TESTS_CHECK_H
#define NIXL_C_TESTS_CHECK_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "nixl_telemetry.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------- */
/* Checking                                                                                 */
/* ---------------------------------------------------------------------------------------- */

static unsigned long g_checks;

static inline void fail_at(const char *file, int line, const char *what) {
    char err[2048];
    size_t n = nixl_telemetry_last_error(err, sizeof err);
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, what);
    fprintf(stderr, "  nixl_telemetry_last_error (%zu bytes): %s\n", n, n ? err : "(none)");
    fflush(stderr);
    exit(1);
}

static inline const char *status_name(nixl_telemetry_status_t s) {
    switch (s) {
    case NIXL_TELEMETRY_SUCCESS: return "SUCCESS";
    case NIXL_TELEMETRY_EMPTY: return "EMPTY";
    case NIXL_TELEMETRY_ERR_NOT_POSTED: return "ERR_NOT_POSTED";
    case NIXL_TELEMETRY_ERR_INVALID_PARAM: return "ERR_INVALID_PARAM";
    case NIXL_TELEMETRY_ERR_BACKEND: return "ERR_BACKEND";
    case NIXL_TELEMETRY_ERR_NOT_FOUND: return "ERR_NOT_FOUND";
    case NIXL_TELEMETRY_ERR_MISMATCH: return "ERR_MISMATCH";
    case NIXL_TELEMETRY_ERR_NOT_ALLOWED: return "ERR_NOT_ALLOWED";
    case NIXL_TELEMETRY_ERR_REPOST_ACTIVE: return "ERR_REPOST_ACTIVE";
    case NIXL_TELEMETRY_ERR_UNKNOWN: return "ERR_UNKNOWN";
    case NIXL_TELEMETRY_ERR_NOT_SUPPORTED: return "ERR_NOT_SUPPORTED";
    case NIXL_TELEMETRY_ERR_REMOTE_DISCONNECT: return "ERR_REMOTE_DISCONNECT";
    case NIXL_TELEMETRY_ERR_CANCELED: return "ERR_CANCELED";
    case NIXL_TELEMETRY_ERR_NO_TELEMETRY: return "ERR_NO_TELEMETRY";
    case NIXL_TELEMETRY_ERR_BIND_FAILED: return "ERR_BIND_FAILED";
    case NIXL_TELEMETRY_ERR_DROPPED: return "ERR_DROPPED";
    case NIXL_TELEMETRY_ERR_UNWRITABLE: return "ERR_UNWRITABLE";
    case NIXL_TELEMETRY_ERR_FORKED: return "ERR_FORKED";
    case NIXL_TELEMETRY_ERR_PANIC: return "ERR_PANIC";
    default: return "?";
    }
}

/* The calling thread's last error, in a static buffer (main thread only). */
static inline const char *last_error(void) {
    static char buf[2048];
    buf[0] = '\0';
    nixl_telemetry_last_error(buf, sizeof buf);
    return buf;
}

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        g_checks++;                                                                          \
        if (!(cond)) fail_at(__FILE__, __LINE__, #cond);                                     \
    } while (0)

#define CHECK_U64(actual, expected)                                                          \
    do {                                                                                     \
        uint64_t a_ = (uint64_t)(actual), e_ = (uint64_t)(expected);                         \
        g_checks++;                                                                          \
        if (a_ != e_) {                                                                      \
            char what_[512];                                                                 \
            snprintf(what_, sizeof what_, "%s == %s (got %" PRIu64 ", expected %" PRIu64 ")", \
                     #actual, #expected, a_, e_);                                            \
            fail_at(__FILE__, __LINE__, what_);                                              \
        }                                                                                    \
    } while (0)

#define CHECK_STATUS(call, expected)                                                         \
    do {                                                                                     \
        nixl_telemetry_status_t s_ = (call);                                                 \
        nixl_telemetry_status_t x_ = (expected);                                             \
        g_checks++;                                                                          \
        if (s_ != x_) {                                                                      \
            char what_[512];                                                                 \
            snprintf(what_, sizeof what_, "%s returned %d (%s), expected %d (%s)", #call,    \
                     (int)s_, status_name(s_), (int)x_, status_name(x_));                    \
            fail_at(__FILE__, __LINE__, what_);                                              \
        }                                                                                    \
    } while (0)

/* The last error must contain `needle`. */
#define CHECK_LAST_ERROR_HAS(needle)                                                         \
    do {                                                                                     \
        g_checks++;                                                                          \
        if (!strstr(last_error(), (needle))) {                                               \
            char what_[512];                                                                 \
            snprintf(what_, sizeof what_, "last error contains \"%s\"", (needle));           \
            fail_at(__FILE__, __LINE__, what_);                                              \
        }                                                                                    \
    } while (0)

/* Something that is not NULL, to prove that failures reset out parameters to NULL. C++ does
 * not convert void * implicitly, hence one spelling per handle type. */
static inline void *sentinel(void) {
    static char storage[16];
    return storage;
}
#define SENTINEL (sentinel())
#define SENTINEL_HANDLE ((nixl_telemetry_t *)SENTINEL)
#define SENTINEL_RING ((nixl_telemetry_ring_t *)SENTINEL)

/* ---------------------------------------------------------------------------------------- */
/* Running                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* First thing in main. */
static inline void tests_begin(void) {
    /* The log threshold is read once: pin it to the default so the callback checks hold. */
    CHECK(setenv("NIXL_LOG_LEVEL", "WARN", 1) == 0);
    setvbuf(stdout, NULL, _IONBF, 0);
}

static inline void run_test(const char *name, void (*test)(void)) {
    printf("[ RUN  ] %s\n", name);
    test();
    printf("[  OK  ] %s\n", name);
}
#define RUN(test) run_test(#test, test)

/* main's return value (a failed check has already exited with 1). */
static inline int tests_end(void) {
    printf("all %lu checks passed\n", g_checks);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Environment and files                                                                    */
/* ---------------------------------------------------------------------------------------- */

static inline void env_clear(void) {
    static const char *const k_env_vars[] = {
        "NIXL_TELEMETRY_ENABLE",      "NIXL_TELEMETRY_BUFFER_SIZE", "NIXL_TELEMETRY_RUN_INTERVAL",
        "NIXL_TELEMETRY_EXPORTER",    "NIXL_TELEMETRY_DIR",         "NIXL_TELEMETRY_ENABLED_METRICS",
    };
    for (size_t i = 0; i < sizeof k_env_vars / sizeof k_env_vars[0]; i++) {
        CHECK(unsetenv(k_env_vars[i]) == 0);
    }
}

static inline void env_set(const char *name, const char *value) {
    CHECK(setenv(name, value, 1) == 0);
}

/* The BUFFER exporter writing to `dir`, flushing every `interval` ms. */
static inline void buffer_env(const char *dir, const char *interval) {
    env_clear();
    env_set("NIXL_TELEMETRY_EXPORTER", "BUFFER");
    env_set("NIXL_TELEMETRY_DIR", dir);
    env_set("NIXL_TELEMETRY_RUN_INTERVAL", interval);
}

static inline char *make_tmpdir(void) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    size_t n = strlen(tmp) + 32;
    char *dir = (char *)malloc(n);
    CHECK(dir != NULL);
    snprintf(dir, n, "%s/nixl-abi-XXXXXX", tmp);
    CHECK(mkdtemp(dir) != NULL);
    return dir;
}

static inline char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = (char *)malloc(n);
    CHECK(p != NULL);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static inline int path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static inline void rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
                char *child = path_join(path, e->d_name);
                rm_rf(child);
                free(child);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

static inline void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (len) CHECK(fwrite(data, 1, len, f) == len);
    CHECK(fclose(f) == 0);
}

/* Reads a whole file; returns a malloc'ed buffer (NULL when missing), its size in *len. */
static inline unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long size = ftell(f);
    CHECK(size >= 0);
    CHECK(fseek(f, 0, SEEK_SET) == 0);
    unsigned char *buf = (unsigned char *)malloc((size_t)size + 1);
    CHECK(buf != NULL);
    if (size) CHECK(fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    *len = (size_t)size;
    return buf;
}

/* The file still exists and holds exactly `len` bytes equal to `data`. */
static inline int file_equals(const char *path, const unsigned char *data, size_t len) {
    size_t n = 0;
    unsigned char *now = read_file(path, &n);
    if (!now) return 0;
    int same = n == len && memcmp(now, data, len) == 0;
    free(now);
    return same;
}

/* ---------------------------------------------------------------------------------------- */
/* Rings, stats and log messages                                                            */
/* ---------------------------------------------------------------------------------------- */

/* NIXL v4 ring layout. */
enum {
    RING_HEADER = 40,
    RING_RECORD = 16,
};

/* Pops exactly the `n` expected events, then EMPTY. */
static inline void expect_events_at(const char *file, int line, nixl_telemetry_ring_t *r,
                                    const uint32_t *types, const uint64_t *values, size_t n) {
    char what[256];
    for (size_t i = 0; i < n; i++) {
        nixl_telemetry_event_t e = {0xDEAD, 0xDEAD};
        nixl_telemetry_status_t s = nixl_telemetry_ring_pop(r, &e);
        g_checks++;
        if (s != NIXL_TELEMETRY_SUCCESS || e.event_type != types[i] || e.value != values[i]) {
            snprintf(what, sizeof what,
                     "event %zu: pop returned %d (%s) type %" PRIu32 " value %" PRIu64
                     ", expected type %" PRIu32 " value %" PRIu64,
                     i, (int)s, status_name(s), e.event_type, e.value, types[i], values[i]);
            fail_at(file, line, what);
        }
    }
    nixl_telemetry_event_t e = {0xBEEF, 0xBEEF};
    nixl_telemetry_status_t s = nixl_telemetry_ring_pop(r, &e);
    g_checks++;
    if (s != NIXL_TELEMETRY_EMPTY || e.event_type != 0xBEEF || e.value != 0xBEEF) {
        snprintf(what, sizeof what,
                 "after %zu events: pop returned %d (%s) type %" PRIu32 " value %" PRIu64
                 ", expected EMPTY with *out unchanged",
                 n, (int)s, status_name(s), e.event_type, e.value);
        fail_at(file, line, what);
    }
}
#define EXPECT_EVENTS(r, types, values, n) expect_events_at(__FILE__, __LINE__, r, types, values, n)

static inline nixl_telemetry_stats_t get_stats(const nixl_telemetry_t *t) {
    nixl_telemetry_stats_t s;
    memset(&s, 0xAB, sizeof s);
    CHECK_STATUS(nixl_telemetry_get_stats(t, &s), NIXL_TELEMETRY_SUCCESS);
    return s;
}

/* What a log callback installed with `&capture` as user data has seen. */
struct log_capture {
    int calls;
    int warnings;
    int32_t last_level;
    void *seen_user_data;
    char last_message[1024];
};

static inline void capture_log(int32_t level, const char *message, void *user_data) {
    struct log_capture *c = (struct log_capture *)user_data;
    c->calls++;
    if (level == NIXL_TELEMETRY_LOG_WARN) c->warnings++;
    c->last_level = level;
    c->seen_user_data = user_data;
    snprintf(c->last_message, sizeof c->last_message, "%s", message ? message : "(null)");
}

#endif /* NIXL_C_TESTS_CHECK_H */
