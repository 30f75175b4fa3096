/*
 * How failures are reported: the thread-local nixl_telemetry_last_error (lengths, truncation,
 * per-thread messages) and NULL arguments to every function, which return a status (and reset
 * out parameters), never crash.
 */
#include "check.h"

#include <pthread.h>

struct thread_error {
    size_t len_before;
    char buf_before[8];
    size_t len_after;
    char message_after[256];
};

static void *fresh_thread_last_error(void *arg) {
    struct thread_error *te = (struct thread_error *)arg;
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
    nixl_telemetry_t *t = SENTINEL_HANDLE;
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

    nixl_telemetry_ring_t *r = SENTINEL_RING;
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
    /* ring_pop(live reader, NULL) is checked in test_events.c (test_buffer_round_trip). */

    CHECK_U64(nixl_telemetry_ring_capacity(NULL), 0);
    CHECK_U64(nixl_telemetry_ring_len(NULL), 0);
    nixl_telemetry_ring_close(NULL); /* no-op */

    nixl_telemetry_set_log_callback(NULL, NULL); /* back to stderr: fine when already there */
    nixl_telemetry_set_log_callback(NULL, SENTINEL);
}

int main(void) {
    tests_begin();
    RUN(test_last_error);
    RUN(test_null_arguments);
    return tests_end();
}
