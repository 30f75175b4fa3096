/*
 * Events through the BUFFER exporter into the shared-memory ring and back through the ring
 * reader: the ring file, invalid arguments on a live handle, the order and values of every event
 * type and error status, the stats counters, a second writer refused, a new run resetting the
 * ring, and NIXL_TELEMETRY_ENABLED_METRICS skipping deactivated metrics.
 */
#include "check.h"

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

    nixl_telemetry_ring_t *r = SENTINEL_RING;
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK(r != NULL && r != SENTINEL);
    CHECK_U64(nixl_telemetry_ring_capacity(r), 4096);
    CHECK_U64(nixl_telemetry_ring_len(r), 0);
    EXPECT_EVENTS(r, NULL, NULL, 0);
    CHECK_STATUS(nixl_telemetry_ring_pop(r, NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("'out'");

    /* A second writer for the same agent and directory is refused; the ring stays ours. */
    nixl_telemetry_t *t2 = SENTINEL_HANDLE;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t2), NIXL_TELEMETRY_ERR_NOT_ALLOWED);
    CHECK(t2 == NULL);
    CHECK_LAST_ERROR_HAS("already being written");

    /* Invalid arguments on a live handle. */
    CHECK_STATUS(nixl_telemetry_update_data(t, 22, 1), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("22");
    CHECK_STATUS(nixl_telemetry_update_data(t, UINT32_MAX, 1), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    static const int32_t bad_status[] = {0, 1, -14, 2, -100, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof bad_status / sizeof bad_status[0]; i++) {
        CHECK_STATUS(nixl_telemetry_update_error(t, bad_status[i]),
                     NIXL_TELEMETRY_ERR_INVALID_PARAM);
    }
    CHECK_STATUS(nixl_telemetry_update_error(t, -14), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("-14");

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
    CHECK_LAST_ERROR_HAS("-14");
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

    /* Every event type through update_data, every error status through update_error. A stalled
     * transfer (event 21, status -13) is recorded as agent_err_unknown (15):
     * NIXL_TELEMETRY_XFER_STALLED_EVENT is unset. */
    {
        uint32_t types[22 + 13];
        uint64_t values[22 + 13];
        size_t n = 0;
        for (uint32_t i = 0; i < NIXL_TELEMETRY_EVENT_TYPE_COUNT; i++) {
            CHECK_STATUS(nixl_telemetry_update_data(t, i, 1000 + i), NIXL_TELEMETRY_SUCCESS);
            types[n] = i == NIXL_TELEMETRY_EVENT_AGENT_ERR_XFER_STALLED
                           ? NIXL_TELEMETRY_EVENT_AGENT_ERR_UNKNOWN
                           : i;
            values[n++] = 1000 + i;
        }
        for (int32_t status = -1; status >= -12; status--) {
            CHECK_STATUS(nixl_telemetry_update_error(t, status), NIXL_TELEMETRY_SUCCESS);
            types[n] = (uint32_t)(7 - status); /* -1 -> 8 (agent_err_not_posted) ... -12 -> 19 */
            values[n++] = 1;
        }
        CHECK_STATUS(nixl_telemetry_update_error(t, NIXL_TELEMETRY_ERR_XFER_STALLED),
                     NIXL_TELEMETRY_SUCCESS);
        types[n] = NIXL_TELEMETRY_EVENT_AGENT_ERR_UNKNOWN;
        values[n++] = 1;
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
    CHECK_U64(s.events_accepted, 14 + 35 + 4);
    CHECK_U64(s.events_exported, 14 + 35 + 4);
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

int main(void) {
    tests_begin();
    RUN(test_buffer_round_trip);
    RUN(test_enabled_metrics);
    return tests_end();
}
