/*
 * C ABI test of libnixl_telemetry: uses every function of nixl_telemetry.h as a C program
 * would. Built twice, against the shared and against the static library.
 *
 * The environment is process-global and read by nixl_telemetry_create, so the test is
 * single-threaded (setenv/unsetenv between cases) except for the pthread section.
 *
 * NIXL_TELEMETRY_FIXTURES names the directory of ring files written by NIXL itself; the test
 * reads copies of them and never modifies the originals.
 */
#define _POSIX_C_SOURCE 200809L

#include "nixl_telemetry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------- */
/* Checking                                                                                 */
/* ---------------------------------------------------------------------------------------- */

static unsigned long g_checks;

static void fail_at(const char *file, int line, const char *what) {
    char err[2048];
    size_t n = nixl_telemetry_last_error(err, sizeof err);
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, what);
    fprintf(stderr, "  nixl_telemetry_last_error (%zu bytes): %s\n", n, n ? err : "(none)");
    fflush(stderr);
    exit(1);
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

static const char *status_name(nixl_telemetry_status_t s) {
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
    default: return "?";
    }
}

/* The calling thread's last error, in a static buffer (main thread only). */
static const char *last_error(void) {
    static char buf[2048];
    buf[0] = '\0';
    nixl_telemetry_last_error(buf, sizeof buf);
    return buf;
}

/* Something that is not NULL, to prove that failures reset out parameters to NULL. */
static char g_sentinel_storage[16];
#define SENTINEL ((void *)g_sentinel_storage)

/* ---------------------------------------------------------------------------------------- */
/* Environment and files                                                                    */
/* ---------------------------------------------------------------------------------------- */

static const char *const k_env_vars[] = {
    "NIXL_TELEMETRY_ENABLE",      "NIXL_TELEMETRY_BUFFER_SIZE", "NIXL_TELEMETRY_RUN_INTERVAL",
    "NIXL_TELEMETRY_EXPORTER",    "NIXL_TELEMETRY_DIR",         "NIXL_TELEMETRY_ENABLED_METRICS",
};

static void env_clear(void) {
    for (size_t i = 0; i < sizeof k_env_vars / sizeof k_env_vars[0]; i++) {
        CHECK(unsetenv(k_env_vars[i]) == 0);
    }
}

static void env_set(const char *name, const char *value) {
    CHECK(setenv(name, value, 1) == 0);
}

static char *make_tmpdir(void) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    size_t n = strlen(tmp) + 32;
    char *dir = malloc(n);
    CHECK(dir != NULL);
    snprintf(dir, n, "%s/nixl-abi-XXXXXX", tmp);
    CHECK(mkdtemp(dir) != NULL);
    return dir;
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    CHECK(p != NULL);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Number of entries in `dir`, excluding "." and "..". */
static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    }
    closedir(d);
    return n;
}

static void rm_rf(const char *path) {
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

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (len) CHECK(fwrite(data, 1, len, f) == len);
    CHECK(fclose(f) == 0);
}

/* Reads a whole file; returns a malloc'ed buffer (NULL when missing), its size in *len. */
static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long size = ftell(f);
    CHECK(size >= 0);
    CHECK(fseek(f, 0, SEEK_SET) == 0);
    unsigned char *buf = malloc((size_t)size + 1);
    CHECK(buf != NULL);
    if (size) CHECK(fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    *len = (size_t)size;
    return buf;
}

static void copy_file(const char *from, const char *to) {
    size_t len = 0;
    unsigned char *data = read_file(from, &len);
    if (!data) {
        fprintf(stderr, "cannot read fixture %s: %s\n", from, strerror(errno));
    }
    CHECK(data != NULL);
    write_file(to, data, len);
    free(data);
}

/* The file still exists and holds exactly `len` bytes equal to `data`. */
static int file_equals(const char *path, const unsigned char *data, size_t len) {
    size_t n = 0;
    unsigned char *now = read_file(path, &n);
    if (!now) return 0;
    int same = n == len && memcmp(now, data, len) == 0;
    free(now);
    return same;
}

/* NIXL v4 ring layout. */
enum {
    RING_HEADER = 40,
    RING_RECORD = 16,
};

static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, sizeof v); }
static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, sizeof v); }
static void put_i32(unsigned char *p, int32_t v) { memcpy(p, &v, sizeof v); }
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A ring image: header plus `records` zeroed records (calloc'ed, `*len` bytes). */
static unsigned char *ring_image(uint64_t write_pos, uint64_t read_pos, int32_t version,
                                 uint64_t capacity, uint64_t mask, size_t records, size_t *len) {
    *len = RING_HEADER + records * RING_RECORD;
    unsigned char *b = calloc(1, *len);
    CHECK(b != NULL);
    put_u64(b + 0, write_pos);
    put_u64(b + 8, read_pos);
    put_i32(b + 16, version);
    put_i32(b + 20, 4);
    put_u64(b + 24, capacity);
    put_u64(b + 32, mask);
    return b;
}

/* Pops exactly the `n` expected events, then EMPTY. */
static void expect_events_at(const char *file, int line, nixl_telemetry_ring_t *r,
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

static nixl_telemetry_stats_t get_stats(const nixl_telemetry_t *t) {
    nixl_telemetry_stats_t s;
    memset(&s, 0xAB, sizeof s);
    CHECK_STATUS(nixl_telemetry_get_stats(t, &s), NIXL_TELEMETRY_SUCCESS);
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* Log callback                                                                             */
/* ---------------------------------------------------------------------------------------- */

struct log_capture {
    int calls;
    int warnings;
    int32_t last_level;
    void *seen_user_data;
    char last_message[1024];
};

static void capture_log(int32_t level, const char *message, void *user_data) {
    struct log_capture *c = user_data;
    c->calls++;
    if (level == NIXL_TELEMETRY_LOG_WARN) c->warnings++;
    c->last_level = level;
    c->seen_user_data = user_data;
    snprintf(c->last_message, sizeof c->last_message, "%s", message ? message : "(null)");
}

/* ---------------------------------------------------------------------------------------- */
/* Tests                                                                                    */
/* ---------------------------------------------------------------------------------------- */

_Static_assert(sizeof(nixl_telemetry_event_t) == 16, "ring record is 16 bytes");
_Static_assert(offsetof(nixl_telemetry_event_t, value) == 8, "value at offset 8");
_Static_assert(sizeof(nixl_telemetry_stats_t) == 6 * sizeof(uint64_t), "six u64 counters");
_Static_assert(sizeof(nixl_telemetry_status_t) == 4, "status is int32_t");
_Static_assert(NIXL_TELEMETRY_EVENT_TYPE_COUNT == 21, "21 event types");

static void test_linkage(void) {
    /* The shared build must have libnixl_telemetry.so mapped, the static build must not. */
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return;
    char line[4096];
    int mapped = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "libnixl_telemetry.so")) mapped = 1;
    }
    fclose(f);
#if defined(NIXL_TEST_LINKAGE_shared)
    CHECK(mapped);
#elif defined(NIXL_TEST_LINKAGE_static)
    CHECK(!mapped);
#else
    (void)mapped;
#endif
}

static void test_constants_and_names(void) {
    static const char *const names[21] = {
        "agent_tx_bytes",
        "agent_rx_bytes",
        "agent_tx_requests_num",
        "agent_rx_requests_num",
        "agent_memory_registered",
        "agent_memory_deregistered",
        "agent_xfer_time",
        "agent_xfer_post_time",
        "agent_err_not_posted",
        "agent_err_invalid_param",
        "agent_err_backend",
        "agent_err_not_found",
        "agent_err_mismatch",
        "agent_err_not_allowed",
        "agent_err_repost_active",
        "agent_err_unknown",
        "agent_err_not_supported",
        "agent_err_remote_disconnect",
        "agent_err_canceled",
        "agent_err_no_telemetry",
        "agent_telemetry_events_dropped",
    };
    for (uint32_t i = 0; i < 21; i++) {
        const char *n = nixl_telemetry_event_name(i);
        CHECK(n != NULL);
        if (strcmp(n, names[i]) != 0) {
            fprintf(stderr, "event %" PRIu32 ": got name '%s', expected '%s'\n", i, n, names[i]);
        }
        CHECK(strcmp(n, names[i]) == 0);
        CHECK(nixl_telemetry_event_name(i) == n); /* static storage, stable pointer */
    }
    CHECK(nixl_telemetry_event_name(21) == NULL);
    CHECK(nixl_telemetry_event_name(NIXL_TELEMETRY_EVENT_TYPE_COUNT) == NULL);
    CHECK(nixl_telemetry_event_name(UINT32_MAX) == NULL);

    CHECK(NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES == 0);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_XFER_TIME == 6);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_XFER_POST_TIME == 7);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_POSTED == 8);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_ERR_NO_TELEMETRY == 19);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_TELEMETRY_EVENTS_DROPPED == 20);
    CHECK(NIXL_TELEMETRY_SUCCESS == 0 && NIXL_TELEMETRY_EMPTY == 1);
    CHECK(NIXL_TELEMETRY_ERR_NOT_POSTED == -1 && NIXL_TELEMETRY_ERR_NO_TELEMETRY == -12);
    CHECK(NIXL_TELEMETRY_ERR_BIND_FAILED == -100 && NIXL_TELEMETRY_ERR_DROPPED == -101);
    CHECK(NIXL_TELEMETRY_LOG_ERROR == 1 && NIXL_TELEMETRY_LOG_WARN == 2 &&
          NIXL_TELEMETRY_LOG_INFO == 3 && NIXL_TELEMETRY_LOG_DEBUG == 4 &&
          NIXL_TELEMETRY_LOG_TRACE == 5);
}

struct thread_error {
    size_t len_before;
    char buf_before[8];
    size_t len_after;
    char message_after[256];
};

static void *fresh_thread_last_error(void *arg) {
    struct thread_error *te = arg;
    memset(te->buf_before, 'x', sizeof te->buf_before);
    te->len_before = nixl_telemetry_last_error(te->buf_before, sizeof te->buf_before);
    /* Fail on this thread: the main thread's message must not change. */
    (void)nixl_telemetry_flush(NULL);
    te->len_after = nixl_telemetry_last_error(te->message_after, sizeof te->message_after);
    return NULL;
}

static void test_last_error(void) {
    /* Produce a known message on this thread. */
    CHECK_STATUS(nixl_telemetry_update_data(NULL, 0, 1), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    char full[512];
    size_t n = nixl_telemetry_last_error(NULL, 0);
    CHECK(n > 10);
    CHECK(n < sizeof full);
    CHECK_U64(nixl_telemetry_last_error(NULL, 100), n); /* NULL buffer: nothing written */

    char buf[64];
    memset(buf, 'Z', sizeof buf);
    CHECK_U64(nixl_telemetry_last_error(buf, 0), n); /* len 0: nothing written */
    CHECK(buf[0] == 'Z');

    memset(full, 'Z', sizeof full);
    CHECK_U64(nixl_telemetry_last_error(full, n + 1), n); /* exact fit */
    CHECK(strlen(full) == n);
    CHECK(full[n + 1] == 'Z');
    CHECK(strstr(full, "nixl_telemetry_update_data") != NULL);
    CHECK(strstr(full, "'t'") != NULL);
    CHECK(strstr(full, "NULL") != NULL);

    memset(buf, 'Z', sizeof buf);
    CHECK_U64(nixl_telemetry_last_error(buf, 5), n); /* truncated: 4 bytes + NUL */
    CHECK(buf[4] == '\0');
    CHECK(strncmp(buf, full, 4) == 0);
    CHECK(buf[5] == 'Z');

    memset(buf, 'Z', sizeof buf);
    CHECK_U64(nixl_telemetry_last_error(buf, 1), n); /* only the NUL fits */
    CHECK(buf[0] == '\0');
    CHECK(buf[1] == 'Z');

    char shorter[512];
    memset(shorter, 'Z', sizeof shorter);
    CHECK_U64(nixl_telemetry_last_error(shorter, n), n); /* one short: last byte dropped */
    CHECK(strlen(shorter) == n - 1);
    CHECK(strncmp(shorter, full, n - 1) == 0);
    CHECK(shorter[n] == 'Z');

    /* Successful calls do not clear the message. */
    CHECK(nixl_telemetry_event_name(0) != NULL);
    nixl_telemetry_destroy(NULL);
    CHECK_U64(nixl_telemetry_last_error(NULL, 0), n);

    /* The message is per thread: a new thread starts with none. */
    struct thread_error te;
    memset(&te, 0, sizeof te);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fresh_thread_last_error, &te) == 0);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_U64(te.len_before, 0);
    CHECK(te.buf_before[0] == '\0');
    CHECK(te.len_after > 0);
    CHECK(strstr(te.message_after, "nixl_telemetry_flush") != NULL);
    /* ... and its failure did not touch this thread's message. */
    CHECK(strcmp(last_error(), full) == 0);
}

static void test_null_arguments(void) {
    env_clear();
    nixl_telemetry_t *t = SENTINEL;
    CHECK_STATUS(nixl_telemetry_create(NULL, true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("agent_name");
    CHECK_STATUS(nixl_telemetry_create("agent", true, NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("'out'");
    CHECK_STATUS(nixl_telemetry_create(NULL, false, NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);

    nixl_telemetry_destroy(NULL); /* no-op */

    CHECK_STATUS(nixl_telemetry_update_data(NULL, 0, 1), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("nixl_telemetry_update_data");
    CHECK_STATUS(nixl_telemetry_update_error(NULL, -1), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("nixl_telemetry_update_error");
    CHECK_STATUS(nixl_telemetry_add_xfer_stats(NULL, 1, true, 2, 3),
                 NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("nixl_telemetry_add_xfer_stats");
    CHECK_STATUS(nixl_telemetry_flush(NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("nixl_telemetry_flush");

    nixl_telemetry_stats_t st;
    memset(&st, 0x5A, sizeof st);
    CHECK_STATUS(nixl_telemetry_get_stats(NULL, &st), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("nixl_telemetry_get_stats");
    CHECK_STATUS(nixl_telemetry_get_stats(NULL, NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);

    /* get_stats with a live handle and a NULL out. */
    env_set("NIXL_TELEMETRY_ENABLE", "y");
    env_set("NIXL_TELEMETRY_EXPORTER", "NOP");
    CHECK_STATUS(nixl_telemetry_create("nulls", false, &t), NIXL_TELEMETRY_SUCCESS);
    CHECK(t != NULL);
    CHECK_STATUS(nixl_telemetry_get_stats(t, NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("'out'");
    nixl_telemetry_destroy(t);
    env_clear();

    nixl_telemetry_ring_t *r = SENTINEL;
    CHECK_STATUS(nixl_telemetry_ring_open(NULL, &r), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(r == NULL);
    CHECK_LAST_ERROR_HAS("'path'");
    CHECK_STATUS(nixl_telemetry_ring_open("/nonexistent/ring", NULL),
                 NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("'out'");
    CHECK_STATUS(nixl_telemetry_ring_open(NULL, NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);

    nixl_telemetry_event_t e = {7, 7};
    CHECK_STATUS(nixl_telemetry_ring_pop(NULL, &e), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(e.event_type == 7 && e.value == 7);
    CHECK_LAST_ERROR_HAS("nixl_telemetry_ring_pop");
    CHECK_STATUS(nixl_telemetry_ring_pop(NULL, NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    /* ring_pop(live reader, NULL) is checked in test_buffer_round_trip. */

    CHECK_U64(nixl_telemetry_ring_capacity(NULL), 0);
    CHECK_U64(nixl_telemetry_ring_len(NULL), 0);
    nixl_telemetry_ring_close(NULL); /* no-op */

    nixl_telemetry_set_log_callback(NULL, NULL); /* back to stderr: fine when already there */
    nixl_telemetry_set_log_callback(NULL, SENTINEL);
}

static void test_not_requested(void) {
    env_clear();
    nixl_telemetry_t *t = SENTINEL;

    /* NIXL_TELEMETRY_ENABLE unset, capture false: not requested, nothing created. */
    CHECK_STATUS(nixl_telemetry_create("agent", false, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("not requested");

    /* ENABLE false with capture true: NO_TELEMETRY plus exactly one warning to the callback. */
    struct log_capture cap;
    memset(&cap, 0, sizeof cap);
    nixl_telemetry_set_log_callback(capture_log, &cap);
    env_set("NIXL_TELEMETRY_ENABLE", "n");
    t = SENTINEL;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
    CHECK(t == NULL);
    CHECK(cap.calls == 1);
    CHECK(cap.warnings == 1);
    CHECK(cap.last_level == NIXL_TELEMETRY_LOG_WARN);
    CHECK(cap.seen_user_data == &cap);
    CHECK(strstr(cap.last_message, "NIXL_TELEMETRY_ENABLE") != NULL);

    /* ENABLE false with capture false: no warning. */
    t = SENTINEL;
    CHECK_STATUS(nixl_telemetry_create("agent", false, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
    CHECK(t == NULL);
    CHECK(cap.calls == 1);

    /* Every false word, case-insensitive. */
    static const char *const no_words[] = {"n", "NO", "off", "False", "disable", "0"};
    for (size_t i = 0; i < sizeof no_words / sizeof no_words[0]; i++) {
        env_set("NIXL_TELEMETRY_ENABLE", no_words[i]);
        t = SENTINEL;
        CHECK_STATUS(nixl_telemetry_create("agent", false, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
        CHECK(t == NULL);
    }
    CHECK(cap.calls == 1);

    /* Back to stderr: the callback sees nothing more (the warning goes to stderr). */
    nixl_telemetry_set_log_callback(NULL, NULL);
    env_set("NIXL_TELEMETRY_ENABLE", "off");
    fprintf(stderr, "(expected: one telemetry warning on stderr follows)\n");
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
    CHECK(cap.calls == 1);

    /* Every true word, with capture false: ENABLE decides (NOP exporter, nothing written). */
    static const char *const yes_words[] = {"y", "Yes", "ON", "true", "ENABLE", "1"};
    env_set("NIXL_TELEMETRY_EXPORTER", "NOP");
    for (size_t i = 0; i < sizeof yes_words / sizeof yes_words[0]; i++) {
        env_set("NIXL_TELEMETRY_ENABLE", yes_words[i]);
        t = NULL;
        CHECK_STATUS(nixl_telemetry_create("agent", false, &t), NIXL_TELEMETRY_SUCCESS);
        CHECK(t != NULL);
        nixl_telemetry_destroy(t);
    }
    /* ENABLE unset, capture true: requested by the agent. */
    CHECK(unsetenv("NIXL_TELEMETRY_ENABLE") == 0);
    t = NULL;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_SUCCESS);
    CHECK(t != NULL);
    nixl_telemetry_destroy(t);
    env_clear();
}

struct env_case {
    const char *var;
    const char *value;
    const char *message; /* must appear in the last error */
};

static void test_invalid_env(void) {
    static const struct env_case cases[] = {
        {"NIXL_TELEMETRY_ENABLE", "maybe", "NIXL_TELEMETRY_ENABLE='maybe'"},
        {"NIXL_TELEMETRY_ENABLE", "", "NIXL_TELEMETRY_ENABLE"},
        {"NIXL_TELEMETRY_ENABLE", " yes", "NIXL_TELEMETRY_ENABLE"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "0", "NIXL_TELEMETRY_BUFFER_SIZE"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "12abc", "NIXL_TELEMETRY_BUFFER_SIZE='12abc'"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "-4", "NIXL_TELEMETRY_BUFFER_SIZE='-4'"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", " 64", "NIXL_TELEMETRY_BUFFER_SIZE"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "", "NIXL_TELEMETRY_BUFFER_SIZE"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "99999999999", "NIXL_TELEMETRY_BUFFER_SIZE"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "18446744073709551616", "NIXL_TELEMETRY_BUFFER_SIZE"},
        {"NIXL_TELEMETRY_RUN_INTERVAL", "-1", "NIXL_TELEMETRY_RUN_INTERVAL='-1'"},
        {"NIXL_TELEMETRY_RUN_INTERVAL", "0", "NIXL_TELEMETRY_RUN_INTERVAL"},
        {"NIXL_TELEMETRY_RUN_INTERVAL", "100ms", "NIXL_TELEMETRY_RUN_INTERVAL='100ms'"},
        {"NIXL_TELEMETRY_RUN_INTERVAL", "1.5", "NIXL_TELEMETRY_RUN_INTERVAL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        env_clear();
        env_set("NIXL_TELEMETRY_ENABLE", "y");
        env_set("NIXL_TELEMETRY_EXPORTER", "NOP");
        env_set(cases[i].var, cases[i].value);
        nixl_telemetry_t *t = SENTINEL;
        nixl_telemetry_status_t s = nixl_telemetry_create("agent", true, &t);
        if (s != NIXL_TELEMETRY_ERR_INVALID_PARAM) {
            fprintf(stderr, "case %s='%s'\n", cases[i].var, cases[i].value);
        }
        CHECK_STATUS(s, NIXL_TELEMETRY_ERR_INVALID_PARAM);
        CHECK(t == NULL);
        if (!strstr(last_error(), cases[i].message)) {
            fprintf(stderr, "case %s='%s': message lacks \"%s\"\n", cases[i].var,
                    cases[i].value, cases[i].message);
        }
        CHECK_LAST_ERROR_HAS(cases[i].message);
    }

    char *dir = make_tmpdir();

    /* BUFFER needs a power-of-two size; nothing is created. */
    env_clear();
    env_set("NIXL_TELEMETRY_ENABLE", "y");
    env_set("NIXL_TELEMETRY_EXPORTER", "BUFFER");
    env_set("NIXL_TELEMETRY_DIR", dir);
    env_set("NIXL_TELEMETRY_BUFFER_SIZE", "12");
    nixl_telemetry_t *t = SENTINEL;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("NIXL_TELEMETRY_BUFFER_SIZE");
    CHECK_LAST_ERROR_HAS("power of 2");
    CHECK(dir_entries(dir) == 0);

    /* ... while NOP accepts any size, also in hexadecimal. */
    env_set("NIXL_TELEMETRY_EXPORTER", "NOP");
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_destroy(t);
    env_set("NIXL_TELEMETRY_BUFFER_SIZE", "0x40");
    env_set("NIXL_TELEMETRY_RUN_INTERVAL", "0X10");
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_destroy(t);
    CHECK(dir_entries(dir) == 0);

    /* BUFFER without a directory, or with an empty one. */
    env_clear();
    env_set("NIXL_TELEMETRY_ENABLE", "y");
    env_set("NIXL_TELEMETRY_EXPORTER", "BUFFER");
    t = SENTINEL;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("NIXL_TELEMETRY_DIR");
    env_set("NIXL_TELEMETRY_DIR", "");
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("NIXL_TELEMETRY_DIR");

    /* An unknown exporter is NOT_FOUND (plug-in names are case-sensitive). */
    env_clear();
    env_set("NIXL_TELEMETRY_ENABLE", "y");
    env_set("NIXL_TELEMETRY_EXPORTER", "nosuch");
    t = SENTINEL;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_NOT_FOUND);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("Failed to load telemetry plugin: nosuch");
    env_set("NIXL_TELEMETRY_EXPORTER", "buffer");
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_NOT_FOUND);

    /* Bad agent names whatever the exporter: empty, not UTF-8. */
    env_set("NIXL_TELEMETRY_EXPORTER", "NOP");
    t = SENTINEL;
    CHECK_STATUS(nixl_telemetry_create("", true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == NULL);
    t = SENTINEL;
    CHECK_STATUS(nixl_telemetry_create("bad\xff", true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("UTF-8");

    env_clear();
    rm_rf(dir);
    free(dir);
}

static void test_hostile_agent_names(void) {
    char *base = make_tmpdir();
    char *dir = path_join(base, "rings");
    char *sub = path_join(dir, "a");
    CHECK(mkdir(dir, 0700) == 0);
    CHECK(mkdir(sub, 0700) == 0); /* so that "a/b" would be creatable without the check */

    env_clear();
    env_set("NIXL_TELEMETRY_ENABLE", "y");
    env_set("NIXL_TELEMETRY_EXPORTER", "BUFFER");
    env_set("NIXL_TELEMETRY_DIR", dir);
    env_set("NIXL_TELEMETRY_RUN_INTERVAL", "3600000");

    static const char *const names[] = {"../x", "a/b", ".", "..", "../../x", "/tmp/x", "a/"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        nixl_telemetry_t *t = SENTINEL;
        nixl_telemetry_status_t s = nixl_telemetry_create(names[i], true, &t);
        if (s != NIXL_TELEMETRY_ERR_INVALID_PARAM) fprintf(stderr, "agent name '%s'\n", names[i]);
        CHECK_STATUS(s, NIXL_TELEMETRY_ERR_INVALID_PARAM);
        CHECK(t == NULL);
        CHECK_LAST_ERROR_HAS("agent name");
        if (t && t != SENTINEL) nixl_telemetry_destroy(t);
    }
    /* Nothing was created anywhere: base holds only rings/, rings/ only a/, a/ nothing. */
    CHECK(dir_entries(base) == 1);
    CHECK(dir_entries(dir) == 1);
    CHECK(dir_entries(sub) == 0);

    /* A name that is fine creates exactly DIR/<name>. */
    nixl_telemetry_t *t = NULL;
    CHECK_STATUS(nixl_telemetry_create("..fine", true, &t), NIXL_TELEMETRY_SUCCESS);
    char *ok = path_join(dir, "..fine");
    CHECK(path_exists(ok));
    nixl_telemetry_destroy(t);
    free(ok);

    /* A symbolic link in place of the ring file is refused and left alone. */
    char *target = path_join(base, "target");
    char *link = path_join(dir, "linked");
    write_file(target, "keep", 4);
    CHECK(symlink(target, link) == 0);
    t = SENTINEL;
    CHECK_STATUS(nixl_telemetry_create("linked", true, &t), NIXL_TELEMETRY_ERR_NOT_ALLOWED);
    CHECK(t == NULL);
    CHECK(file_equals(target, (const unsigned char *)"keep", 4));
    free(target);
    free(link);

    env_clear();
    rm_rf(base);
    free(sub);
    free(dir);
    free(base);
}

static void buffer_env(const char *dir, const char *interval) {
    env_clear();
    env_set("NIXL_TELEMETRY_EXPORTER", "BUFFER");
    env_set("NIXL_TELEMETRY_DIR", dir);
    env_set("NIXL_TELEMETRY_RUN_INTERVAL", interval);
}

static void test_buffer_round_trip(void) {
    char *dir = make_tmpdir();
    buffer_env(dir, "3600000");

    nixl_telemetry_t *t = NULL;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_SUCCESS);
    CHECK(t != NULL);

    char *path = path_join(dir, "agent");
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK_U64(st.st_size, RING_HEADER + 4096 * RING_RECORD);
    CHECK_U64(st.st_mode & 0777, 0600);

    nixl_telemetry_ring_t *r = SENTINEL;
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK(r != NULL && r != SENTINEL);
    CHECK_U64(nixl_telemetry_ring_capacity(r), 4096);
    CHECK_U64(nixl_telemetry_ring_len(r), 0);
    EXPECT_EVENTS(r, NULL, NULL, 0);
    CHECK_STATUS(nixl_telemetry_ring_pop(r, NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("'out'");

    /* A second writer for the same agent and directory is refused; the ring stays ours. */
    nixl_telemetry_t *t2 = SENTINEL;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t2), NIXL_TELEMETRY_ERR_NOT_ALLOWED);
    CHECK(t2 == NULL);
    CHECK_LAST_ERROR_HAS("already being written");

    /* Invalid arguments on a live handle. */
    CHECK_STATUS(nixl_telemetry_update_data(t, 21, 1), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("21");
    CHECK_STATUS(nixl_telemetry_update_data(t, UINT32_MAX, 1), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    static const int32_t bad_status[] = {0, 1, -13, 2, -100, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof bad_status / sizeof bad_status[0]; i++) {
        CHECK_STATUS(nixl_telemetry_update_error(t, bad_status[i]),
                     NIXL_TELEMETRY_ERR_INVALID_PARAM);
    }
    CHECK_STATUS(nixl_telemetry_update_error(t, -13), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("-13");

    /* The recorded sequence. */
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, 100),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 200),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_TX_REQUESTS_NUM, 1),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_MEMORY_REGISTERED, 4096),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(
        nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_MEMORY_DEREGISTERED, 2048),
        NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_error(t, -3), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_add_xfer_stats(t, 500, true, 1024, 50), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_add_xfer_stats(t, 700, false, 2048, 70), NIXL_TELEMETRY_SUCCESS);

    /* Nothing is exported before a flush (the interval is an hour). */
    CHECK_U64(nixl_telemetry_ring_len(r), 0);
    nixl_telemetry_stats_t s = get_stats(t);
    CHECK_U64(s.events_accepted, 14);
    CHECK_U64(s.events_dropped, 0);
    CHECK_U64(s.events_exported, 0);
    CHECK_U64(s.events_lost, 0);
    CHECK_U64(s.flushes, 0);
    CHECK_U64(s.drop_reports, 0);

    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    /* Successful calls did not clear the earlier message. */
    CHECK_LAST_ERROR_HAS("-13");
    CHECK_U64(nixl_telemetry_ring_len(r), 14);
    {
        static const uint32_t types[] = {0, 1, 2, 4, 5, 10, 7, 6, 0, 2, 7, 6, 1, 3};
        static const uint64_t values[] = {100, 200, 1,    4096, 2048, 1, 50,
                                          500, 1024, 1, 70,   700,  2048, 1};
        EXPECT_EVENTS(r, types, values, 14);
    }
    CHECK_U64(nixl_telemetry_ring_len(r), 0);
    s = get_stats(t);
    CHECK_U64(s.events_accepted, 14);
    CHECK_U64(s.events_dropped, 0);
    CHECK_U64(s.events_exported, 14);
    CHECK_U64(s.events_lost, 0);
    CHECK_U64(s.flushes, 1);
    CHECK_U64(s.drop_reports, 0);

    /* An empty flush exports nothing. */
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    EXPECT_EVENTS(r, NULL, NULL, 0);
    CHECK_U64(get_stats(t).flushes, 2);

    /* Every event type through update_data, every error status through update_error. */
    {
        uint32_t types[21 + 12];
        uint64_t values[21 + 12];
        size_t n = 0;
        for (uint32_t i = 0; i < NIXL_TELEMETRY_EVENT_TYPE_COUNT; i++) {
            CHECK_STATUS(nixl_telemetry_update_data(t, i, 1000 + i), NIXL_TELEMETRY_SUCCESS);
            types[n] = i;
            values[n++] = 1000 + i;
        }
        for (int32_t status = -1; status >= -12; status--) {
            CHECK_STATUS(nixl_telemetry_update_error(t, status), NIXL_TELEMETRY_SUCCESS);
            types[n] = (uint32_t)(7 - status); /* -1 -> 8 (agent_err_not_posted) ... -12 -> 19 */
            values[n++] = 1;
        }
        CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
        CHECK_U64(nixl_telemetry_ring_len(r), n);
        EXPECT_EVENTS(r, types, values, n);
    }
    /* Large values survive unchanged. */
    CHECK_STATUS(nixl_telemetry_add_xfer_stats(t, UINT64_MAX, true, UINT64_MAX - 1, 0),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    {
        static const uint32_t types[] = {7, 6, 0, 2};
        static const uint64_t values[] = {0, UINT64_MAX, UINT64_MAX - 1, 1};
        EXPECT_EVENTS(r, types, values, 4);
    }
    s = get_stats(t);
    CHECK_U64(s.events_accepted, 14 + 33 + 4);
    CHECK_U64(s.events_exported, 14 + 33 + 4);
    CHECK_U64(s.events_lost, 0);

    nixl_telemetry_ring_close(r);
    nixl_telemetry_destroy(t);

    /* The ring file stays after destroy; a new reader sees nothing unread. */
    r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(nixl_telemetry_ring_capacity(r), 4096);
    CHECK_U64(nixl_telemetry_ring_len(r), 0);
    nixl_telemetry_ring_close(r);

    /* A new writer of the same agent resets the ring of the previous run. */
    t = NULL;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_data(t, 3, 33), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    {
        static const uint32_t types[] = {3};
        static const uint64_t values[] = {33};
        EXPECT_EVENTS(r, types, values, 1);
    }
    nixl_telemetry_ring_close(r);
    nixl_telemetry_destroy(t);

    env_clear();
    rm_rf(dir);
    free(path);
    free(dir);
}

static void test_enabled_metrics(void) {
    char *dir = make_tmpdir();
    buffer_env(dir, "3600000");
    env_set("NIXL_TELEMETRY_ENABLED_METRICS", " agent_xfer_time , agent_rx_* ");
    nixl_telemetry_t *t = NULL;
    CHECK_STATUS(nixl_telemetry_create("m", true, &t), NIXL_TELEMETRY_SUCCESS);
    /* Deactivated metrics are skipped with SUCCESS, not counted as drops. */
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, 1),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_error(t, -1), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_add_xfer_stats(t, 5, true, 10, 1), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_add_xfer_stats(t, 6, false, 20, 2), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 7),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    char *path = path_join(dir, "m");
    nixl_telemetry_ring_t *r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    {
        static const uint32_t types[] = {6, 6, 1, 3, 1};
        static const uint64_t values[] = {5, 6, 20, 1, 7};
        EXPECT_EVENTS(r, types, values, 5);
    }
    nixl_telemetry_stats_t s = get_stats(t);
    CHECK_U64(s.events_accepted, 5);
    CHECK_U64(s.events_dropped, 0);
    CHECK_U64(s.events_exported, 5);
    nixl_telemetry_ring_close(r);
    nixl_telemetry_destroy(t);
    env_clear();
    rm_rf(dir);
    free(path);
    free(dir);
}

static void test_drop_accounting(void) {
    char *dir = make_tmpdir();
    buffer_env(dir, "3600000");
    env_set("NIXL_TELEMETRY_BUFFER_SIZE", "1024");
    nixl_telemetry_t *t = NULL;
    CHECK_STATUS(nixl_telemetry_create("drops", true, &t), NIXL_TELEMETRY_SUCCESS);
    for (uint64_t i = 0; i < 1022; i++) {
        CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, i),
                     NIXL_TELEMETRY_SUCCESS);
    }
    /* Two free slots: every 4-event transfer batch is refused whole. */
    for (int i = 0; i < 10; i++) {
        CHECK_STATUS(nixl_telemetry_add_xfer_stats(t, 1, i % 2 == 0, 1, 1),
                     NIXL_TELEMETRY_ERR_DROPPED);
    }
    nixl_telemetry_stats_t s = get_stats(t);
    CHECK_U64(s.events_accepted, 1022);
    CHECK_U64(s.events_dropped, 40);
    CHECK_U64(s.drop_reports, 0);

    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    char *path = path_join(dir, "drops");
    nixl_telemetry_ring_t *r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(nixl_telemetry_ring_capacity(r), 1024);
    CHECK_U64(nixl_telemetry_ring_len(r), 1023);
    {
        static uint32_t types[1023];
        static uint64_t values[1023];
        for (size_t i = 0; i < 1022; i++) {
            types[i] = NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES;
            values[i] = i;
        }
        types[1022] = NIXL_TELEMETRY_EVENT_AGENT_TELEMETRY_EVENTS_DROPPED;
        values[1022] = 40;
        EXPECT_EVENTS(r, types, values, 1023);
    }
    s = get_stats(t);
    CHECK_U64(s.events_accepted, 1022);
    CHECK_U64(s.events_dropped, 40);
    CHECK_U64(s.events_exported, 1023);
    CHECK_U64(s.events_lost, 0);
    CHECK_U64(s.flushes, 1);
    CHECK_U64(s.drop_reports, 1);

    /* No new drops: no new report. */
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    EXPECT_EVENTS(r, NULL, NULL, 0);
    CHECK_U64(get_stats(t).drop_reports, 1);

    /* The queue is empty again: the next transfer is accepted. */
    CHECK_STATUS(nixl_telemetry_add_xfer_stats(t, 9, false, 8, 7), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    {
        static const uint32_t types[] = {7, 6, 1, 3};
        static const uint64_t values[] = {7, 9, 8, 1};
        EXPECT_EVENTS(r, types, values, 4);
    }
    nixl_telemetry_ring_close(r);
    nixl_telemetry_destroy(t);
    free(path);

    /* A reader that is behind: the ring keeps capacity-1 events, the rest are lost and
     * counted, with one warning for the collector's lifetime. */
    env_set("NIXL_TELEMETRY_BUFFER_SIZE", "4");
    struct log_capture cap;
    memset(&cap, 0, sizeof cap);
    nixl_telemetry_set_log_callback(capture_log, &cap);
    t = NULL;
    CHECK_STATUS(nixl_telemetry_create("lossy", true, &t), NIXL_TELEMETRY_SUCCESS);
    for (uint64_t i = 0; i < 6; i++) {
        CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, i),
                     i < 4 ? NIXL_TELEMETRY_SUCCESS : NIXL_TELEMETRY_ERR_DROPPED);
    }
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    s = get_stats(t);
    CHECK_U64(s.events_accepted, 4);
    CHECK_U64(s.events_dropped, 2);
    CHECK_U64(s.drop_reports, 1);
    CHECK_U64(s.events_exported, 3);
    CHECK_U64(s.events_lost, 2);
    CHECK_U64(s.events_exported + s.events_lost, s.events_accepted + s.drop_reports);
    CHECK(cap.warnings == 1);
    CHECK(cap.seen_user_data == &cap);
    CHECK(strstr(cap.last_message, "lossy") != NULL);
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 9),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(get_stats(t).events_lost, 3);
    CHECK(cap.warnings == 1); /* later losses are counted silently */
    path = path_join(dir, "lossy");
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    {
        static const uint32_t types[] = {1, 1, 1};
        static const uint64_t values[] = {0, 1, 2};
        EXPECT_EVENTS(r, types, values, 3);
    }
    nixl_telemetry_ring_close(r);
    nixl_telemetry_destroy(t);
    nixl_telemetry_set_log_callback(NULL, NULL);

    env_clear();
    rm_rf(dir);
    free(path);
    free(dir);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_destroy_and_periodic_flush(void) {
    char *dir = make_tmpdir();

    /* Staged events with an hour-long interval appear after destroy (the final flush). */
    buffer_env(dir, "3600000");
    nixl_telemetry_t *t = NULL;
    CHECK_STATUS(nixl_telemetry_create("late", true, &t), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 9),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_add_xfer_stats(t, 30, true, 40, 10), NIXL_TELEMETRY_SUCCESS);
    char *path = path_join(dir, "late");
    nixl_telemetry_ring_t *r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(nixl_telemetry_ring_len(r), 0);
    nixl_telemetry_destroy(t);
    CHECK_U64(nixl_telemetry_ring_len(r), 5);
    {
        static const uint32_t types[] = {1, 7, 6, 0, 2};
        static const uint64_t values[] = {9, 10, 30, 40, 1};
        EXPECT_EVENTS(r, types, values, 5);
    }
    nixl_telemetry_ring_close(r);
    free(path);

    /* A short interval: the flush thread exports without an explicit flush. */
    buffer_env(dir, "10");
    t = NULL;
    CHECK_STATUS(nixl_telemetry_create("periodic", true, &t), NIXL_TELEMETRY_SUCCESS);
    path = path_join(dir, "periodic");
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, 77),
                 NIXL_TELEMETRY_SUCCESS);
    for (int i = 0; i < 2000 && nixl_telemetry_ring_len(r) == 0; i++) sleep_ms(5);
    {
        static const uint32_t types[] = {0};
        static const uint64_t values[] = {77};
        EXPECT_EVENTS(r, types, values, 1);
    }
    CHECK(get_stats(t).flushes >= 1);
    nixl_telemetry_ring_close(r);
    nixl_telemetry_destroy(t);

    env_clear();
    rm_rf(dir);
    free(path);
    free(dir);
}

/* ring_open refuses a bad file with `expected` and leaves it byte-for-byte unchanged. */
static void expect_open_refused_at(const char *file, int line, const char *path,
                                   const unsigned char *data, size_t len,
                                   nixl_telemetry_status_t expected, const char *message) {
    char what[512];
    nixl_telemetry_ring_t *r = SENTINEL;
    nixl_telemetry_status_t s = nixl_telemetry_ring_open(path, &r);
    g_checks++;
    if (s != expected) {
        snprintf(what, sizeof what, "ring_open(%s) returned %d (%s), expected %d (%s)", path,
                 (int)s, status_name(s), (int)expected, status_name(expected));
        fail_at(file, line, what);
    }
    g_checks++;
    if (r != NULL) fail_at(file, line, "*out is NULL after a failed ring_open");
    g_checks++;
    if (message && !strstr(last_error(), message)) {
        snprintf(what, sizeof what, "ring_open(%s): last error contains \"%s\"", path, message);
        fail_at(file, line, what);
    }
    g_checks++;
    if (data && !file_equals(path, data, len)) {
        snprintf(what, sizeof what, "ring_open(%s) left the file unchanged", path);
        fail_at(file, line, what);
    }
}
#define EXPECT_OPEN_REFUSED(path, data, len, expected, message) \
    expect_open_refused_at(__FILE__, __LINE__, path, data, len, expected, message)

static void test_ring_open_bad_files(void) {
    char *dir = make_tmpdir();
    size_t len = 0;
    unsigned char *img;

    char *missing = path_join(dir, "missing");
    EXPECT_OPEN_REFUSED(missing, NULL, 0, NIXL_TELEMETRY_ERR_NOT_FOUND, "missing");
    CHECK(!path_exists(missing));
    free(missing);

    char *empty = path_join(dir, "empty");
    write_file(empty, "", 0);
    EXPECT_OPEN_REFUSED(empty, (const unsigned char *)"", 0, NIXL_TELEMETRY_ERR_MISMATCH, NULL);
    free(empty);

    char *tiny = path_join(dir, "tiny");
    write_file(tiny, "0123456789", 10);
    EXPECT_OPEN_REFUSED(tiny, (const unsigned char *)"0123456789", 10,
                        NIXL_TELEMETRY_ERR_MISMATCH, "too small");
    free(tiny);

    char *v3 = path_join(dir, "version3");
    img = ring_image(2, 0, 3, 16, 15, 16, &len);
    put_u32(img + RING_HEADER, 5);
    put_u64(img + RING_HEADER + 8, 55);
    write_file(v3, img, len);
    EXPECT_OPEN_REFUSED(v3, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "version");
    CHECK(path_exists(v3));
    free(img);
    free(v3);

    char *v0 = path_join(dir, "version0");
    img = ring_image(0, 0, 0, 16, 15, 16, &len);
    write_file(v0, img, len);
    EXPECT_OPEN_REFUSED(v0, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "version");
    free(img);
    free(v0);

    char *cap12 = path_join(dir, "cap12");
    img = ring_image(0, 0, 4, 12, 11, 12, &len);
    write_file(cap12, img, len);
    EXPECT_OPEN_REFUSED(cap12, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "power of two");
    free(img);
    free(cap12);

    char *cap0 = path_join(dir, "cap0");
    img = ring_image(0, 0, 4, 0, 0, 4, &len);
    write_file(cap0, img, len);
    EXPECT_OPEN_REFUSED(cap0, img, len, NIXL_TELEMETRY_ERR_MISMATCH, NULL);
    free(img);
    free(cap0);

    char *badmask = path_join(dir, "badmask");
    img = ring_image(0, 0, 4, 16, 7, 16, &len);
    write_file(badmask, img, len);
    EXPECT_OPEN_REFUSED(badmask, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "mask");
    free(img);
    free(badmask);

    char *trunc = path_join(dir, "truncated");
    img = ring_image(3, 0, 4, 16, 15, 8, &len); /* 16 records announced, 8 present */
    write_file(trunc, img, len);
    EXPECT_OPEN_REFUSED(trunc, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "truncated");
    free(img);
    img = ring_image(0, 0, 4, 16, 15, 0, &len); /* header only */
    write_file(trunc, img, len);
    EXPECT_OPEN_REFUSED(trunc, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "truncated");
    free(img);
    img = ring_image(0, 0, 4, 16, 15, 16, &len); /* one byte short */
    write_file(trunc, img, len - 1);
    EXPECT_OPEN_REFUSED(trunc, img, len - 1, NIXL_TELEMETRY_ERR_MISMATCH, "truncated");
    free(img);
    /* Capacities whose size overflows or exceeds any file. */
    img = ring_image(0, 0, 4, (uint64_t)1 << 62, ((uint64_t)1 << 62) - 1, 4, &len);
    write_file(trunc, img, len);
    EXPECT_OPEN_REFUSED(trunc, img, len, NIXL_TELEMETRY_ERR_MISMATCH, NULL);
    free(img);
    img = ring_image(0, 0, 4, (uint64_t)1 << 63, ((uint64_t)1 << 63) - 1, 4, &len);
    write_file(trunc, img, len);
    EXPECT_OPEN_REFUSED(trunc, img, len, NIXL_TELEMETRY_ERR_MISMATCH, NULL);
    free(img);
    free(trunc);

    /* A directory is not a ring (the exact status is not specified; it must fail). */
    nixl_telemetry_ring_t *r = SENTINEL;
    CHECK(nixl_telemetry_ring_open(dir, &r) < 0);
    CHECK(r == NULL);

    /* Unreadable for a non-root user: NOT_ALLOWED. */
    if (geteuid() != 0) {
        char *locked = path_join(dir, "locked");
        img = ring_image(0, 0, 4, 8, 7, 8, &len);
        write_file(locked, img, len);
        CHECK(chmod(locked, 0400) == 0);
        EXPECT_OPEN_REFUSED(locked, img, len, NIXL_TELEMETRY_ERR_NOT_ALLOWED, NULL);
        free(img);
        free(locked);
    }

    /* A valid hand-written ring: garbage padding ignored, larger file accepted, read_pos
     * written back to the file, the rest untouched. */
    char *good = path_join(dir, "good");
    img = ring_image(3, 0, 4, 8, 7, 9, &len); /* one extra trailing record */
    for (uint32_t i = 0; i < 3; i++) {
        unsigned char *rec = img + RING_HEADER + i * RING_RECORD;
        put_u32(rec, 10 + i);
        put_u32(rec + 4, 0xFFFFFFFFu); /* padding: must be ignored */
        put_u64(rec + 8, 100 + i);
    }
    write_file(good, img, len);
    r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(good, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(nixl_telemetry_ring_capacity(r), 8);
    CHECK_U64(nixl_telemetry_ring_len(r), 3);
    {
        static const uint32_t types[] = {10, 11, 12};
        static const uint64_t values[] = {100, 101, 102};
        EXPECT_EVENTS(r, types, values, 3);
    }
    nixl_telemetry_ring_close(r);
    {
        size_t n = 0;
        unsigned char *now = read_file(good, &n);
        CHECK(now != NULL);
        CHECK_U64(n, len);
        CHECK_U64(get_u64(now + 8), 3); /* read_pos advanced to write_pos */
        put_u64(img + 8, 3);
        CHECK(memcmp(now, img, len) == 0);
        free(now);
    }
    free(img);
    free(good);

    rm_rf(dir);
    free(dir);
}

static void check_fixture(const char *fixtures, const char *tmp, const char *name,
                          uint64_t capacity, const uint32_t *types, const uint64_t *values,
                          size_t n, uint64_t final_read_pos) {
    char *orig = path_join(fixtures, name);
    char *copy = path_join(tmp, name);
    size_t orig_len = 0;
    unsigned char *orig_data = read_file(orig, &orig_len);
    if (!orig_data) fprintf(stderr, "fixture %s is missing\n", orig);
    CHECK(orig_data != NULL);
    CHECK_U64(orig_len, RING_HEADER + capacity * RING_RECORD);
    copy_file(orig, copy);

    nixl_telemetry_ring_t *r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(copy, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(nixl_telemetry_ring_capacity(r), capacity);
    CHECK_U64(nixl_telemetry_ring_len(r), n);
    EXPECT_EVENTS(r, types, values, n);
    CHECK_U64(nixl_telemetry_ring_len(r), 0);
    nixl_telemetry_ring_close(r);

    /* Popping advanced read_pos in the copy; the original is untouched. */
    size_t copy_len = 0;
    unsigned char *copy_data = read_file(copy, &copy_len);
    CHECK(copy_data != NULL);
    CHECK_U64(copy_len, orig_len);
    CHECK_U64(get_u64(copy_data + 8), final_read_pos);
    CHECK(memcmp(copy_data, orig_data, 8) == 0);                                  /* write_pos */
    CHECK(memcmp(copy_data + 16, orig_data + 16, orig_len - 16) == 0);           /* the rest */
    CHECK(file_equals(orig, orig_data, orig_len));
    free(copy_data);
    free(orig_data);
    free(copy);
    free(orig);
}

static void test_fixtures(void) {
    const char *fixtures = getenv("NIXL_TELEMETRY_FIXTURES");
    if (!fixtures || !*fixtures) {
        fprintf(stderr, "NIXL_TELEMETRY_FIXTURES is not set (ctest sets it): cannot read the "
                        "NIXL-written ring fixtures\n");
    }
    CHECK(fixtures != NULL && *fixtures);
    char *tmp = make_tmpdir();
    {
        uint32_t types[12];
        uint64_t values[12];
        for (uint32_t i = 0; i < 12; i++) {
            types[i] = 8 + i;
            values[i] = 1008 + i;
        }
        check_fixture(fixtures, tmp, "nixl-ring-v4-cap16-wrapped.bin", 16, types, values, 12, 4);
    }
    {
        uint32_t types[7];
        uint64_t values[7];
        for (uint32_t i = 0; i < 7; i++) {
            types[i] = NIXL_TELEMETRY_EVENT_AGENT_XFER_TIME;
            values[i] = 50u * i;
        }
        check_fixture(fixtures, tmp, "nixl-ring-v4-cap8-full.bin", 8, types, values, 7, 7);
    }
    check_fixture(fixtures, tmp, "nixl-ring-v4-cap4096-empty.bin", 4096, NULL, NULL, 0, 0);
    rm_rf(tmp);
    free(tmp);
}

/* ---------------------------------------------------------------------------------------- */
/* Threads                                                                                  */
/* ---------------------------------------------------------------------------------------- */

enum { THREADS = 8, CALLS_PER_THREAD = 20000 };

struct producer {
    nixl_telemetry_t *t;
    unsigned id;
    uint64_t ok, dropped, other;
};

static void *produce(void *arg) {
    struct producer *p = arg;
    for (unsigned i = 0; i < CALLS_PER_THREAD; i++) {
        nixl_telemetry_status_t s =
            nixl_telemetry_add_xfer_stats(p->t, i, (i + p->id) % 2 == 0, (uint64_t)i * 8, i / 2);
        if (s == NIXL_TELEMETRY_SUCCESS) {
            p->ok++;
        } else if (s == NIXL_TELEMETRY_ERR_DROPPED) {
            p->dropped++;
        } else {
            p->other++;
        }
    }
    return NULL;
}

static void test_threads(void) {
    env_clear();
    env_set("NIXL_TELEMETRY_ENABLE", "y");
    env_set("NIXL_TELEMETRY_EXPORTER", "NOP");
    env_set("NIXL_TELEMETRY_BUFFER_SIZE", "256");
    env_set("NIXL_TELEMETRY_RUN_INTERVAL", "1");
    nixl_telemetry_t *t = NULL;
    CHECK_STATUS(nixl_telemetry_create("threads", false, &t), NIXL_TELEMETRY_SUCCESS);
    env_clear(); /* no environment changes while the producers run */

    struct producer producers[THREADS];
    pthread_t threads[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        producers[i] = (struct producer){t, i, 0, 0, 0};
        CHECK(pthread_create(&threads[i], NULL, produce, &producers[i]) == 0);
    }
    uint64_t ok = 0, dropped = 0, other = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
        ok += producers[i].ok;
        dropped += producers[i].dropped;
        other += producers[i].other;
    }
    CHECK_U64(other, 0);
    CHECK_U64(ok + dropped, (uint64_t)THREADS * CALLS_PER_THREAD);

    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_stats_t s = get_stats(t);
    printf("threads: accepted %" PRIu64 " dropped %" PRIu64 " exported %" PRIu64
           " lost %" PRIu64 " flushes %" PRIu64 " drop_reports %" PRIu64 "\n",
           s.events_accepted, s.events_dropped, s.events_exported, s.events_lost, s.flushes,
           s.drop_reports);
    CHECK_U64(s.events_accepted + s.events_dropped, (uint64_t)THREADS * CALLS_PER_THREAD * 4);
    CHECK_U64(s.events_dropped % 4, 0);
    CHECK_U64(s.events_accepted, ok * 4);
    CHECK_U64(s.events_dropped, dropped * 4);
    CHECK_U64(s.events_exported, s.events_accepted + s.drop_reports);
    CHECK_U64(s.events_lost, 0);
    CHECK(s.flushes >= 1);
    CHECK(s.drop_reports <= s.flushes);
    CHECK((s.drop_reports == 0) == (s.events_dropped == 0));
    nixl_telemetry_destroy(t);
}

/* ---------------------------------------------------------------------------------------- */

int main(void) {
    /* The log threshold is read once: pin it to the default so the callback checks hold. */
    CHECK(setenv("NIXL_LOG_LEVEL", "WARN", 1) == 0);
    setvbuf(stdout, NULL, _IONBF, 0);

#define RUN(test)                                                                            \
    do {                                                                                     \
        printf("[ RUN  ] %s\n", #test);                                                      \
        test();                                                                              \
        printf("[  OK  ] %s\n", #test);                                                      \
    } while (0)

    RUN(test_linkage);
    RUN(test_constants_and_names);
    RUN(test_last_error);
    RUN(test_null_arguments);
    RUN(test_not_requested);
    RUN(test_invalid_env);
    RUN(test_hostile_agent_names);
    RUN(test_buffer_round_trip);
    RUN(test_enabled_metrics);
    RUN(test_drop_accounting);
    RUN(test_destroy_and_periodic_flush);
    RUN(test_ring_open_bad_files);
    RUN(test_fixtures);
    RUN(test_threads);

    printf("all %lu checks passed\n", g_checks);
    return 0;
}
