/*
 * A collector's lifetime: staging-queue drops (counted, reported as one event per flush, whole
 * transfer batches refused), ring-full losses behind a slow reader (counted, one warning),
 * the final flush on destroy and the periodic flush thread.
 */
#include "check.h"

#include <time.h>

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

    /* A full ring: it keeps capacity-1 events, the rest are lost and counted. One slot is kept
     * for the drop report, so the report of losses is never itself what is lost. While no
     * reader has ever read the ring, losses are not warned about (one INFO message: telemetry
     * on with no reader attached is normal); once a reader has read, a full ring means it is
     * behind: one warning for the collector's lifetime. */
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
    CHECK(cap.warnings == 0); /* nobody reads the ring */
    path = path_join(dir, "lossy");
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    {
        static const uint32_t types[] = {1, 1, NIXL_TELEMETRY_EVENT_AGENT_TELEMETRY_EVENTS_DROPPED};
        static const uint64_t values[] = {0, 1, 2};
        EXPECT_EVENTS(r, types, values, 3);
    }
    /* The reader has read; it now falls behind: the ring fills, the next event is lost. */
    for (uint64_t i = 0; i < 3; i++) {
        CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, i),
                     NIXL_TELEMETRY_SUCCESS);
    }
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 9),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(get_stats(t).events_lost, 3);
    CHECK(cap.warnings == 1);
    CHECK(cap.seen_user_data == &cap);
    CHECK(strstr(cap.last_message, "lossy") != NULL);
    CHECK(strstr(cap.last_message, "not keeping up") != NULL);
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 10),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(get_stats(t).events_lost, 4);
    CHECK(cap.warnings == 1); /* later losses are counted silently */
    /* The ring's reader sees the same count, from the loss file beside the ring (written by the
     * next flush at the latest). */
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    uint64_t lost = 0;
    CHECK_STATUS(nixl_telemetry_ring_lost(r, &lost), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(lost, 4);
    CHECK_STATUS(nixl_telemetry_ring_lost(r, NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_STATUS(nixl_telemetry_ring_lost(NULL, &lost), NIXL_TELEMETRY_ERR_INVALID_PARAM);
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

int main(void) {
    tests_begin();
    RUN(test_drop_accounting);
    RUN(test_destroy_and_periodic_flush);
    return tests_end();
}
