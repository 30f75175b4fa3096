/*
 * Eight producer threads on one collector with a small staging queue and a 1 ms flush
 * interval: every call returns SUCCESS or DROPPED, and the stats account for every event.
 */
#include "check.h"

#include <pthread.h>

enum { THREADS = 8, CALLS_PER_THREAD = 20000 };

struct producer {
    nixl_telemetry_t *t;
    unsigned id;
    uint64_t ok, dropped, other;
};

static void *produce(void *arg) {
    struct producer *p = (struct producer *)arg;
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
        struct producer p = {t, i, 0, 0, 0};
        producers[i] = p;
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

int main(void) {
    tests_begin();
    RUN(test_threads);
    return tests_end();
}
