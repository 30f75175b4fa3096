/*
 * The constants of nixl_telemetry.h as a C (and C++) program sees them: record and stats
 * layouts, event numbers and names, status and log-level values; and which library the
 * program runs against (the shared build must map libnixl_telemetry.so, the static build must
 * not).
 */
#include "check.h"

static_assert(sizeof(nixl_telemetry_event_t) == 16, "ring record is 16 bytes");
static_assert(offsetof(nixl_telemetry_event_t, value) == 8, "value at offset 8");
static_assert(sizeof(nixl_telemetry_stats_t) == 6 * sizeof(uint64_t), "six u64 counters");
static_assert(sizeof(nixl_telemetry_status_t) == 4, "status is int32_t");
static_assert(NIXL_TELEMETRY_EVENT_TYPE_COUNT == 22, "22 event types");

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
    static const char *const names[22] = {
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
        "agent_err_xfer_stalled",
    };
    for (uint32_t i = 0; i < 22; i++) {
        const char *n = nixl_telemetry_event_name(i);
        CHECK(n != NULL);
        if (strcmp(n, names[i]) != 0) {
            fprintf(stderr, "event %" PRIu32 ": got name '%s', expected '%s'\n", i, n, names[i]);
        }
        CHECK(strcmp(n, names[i]) == 0);
        CHECK(nixl_telemetry_event_name(i) == n); /* static storage, stable pointer */
    }
    CHECK(nixl_telemetry_event_name(22) == NULL);
    CHECK(nixl_telemetry_event_name(NIXL_TELEMETRY_EVENT_TYPE_COUNT) == NULL);
    CHECK(nixl_telemetry_event_name(UINT32_MAX) == NULL);

    CHECK(NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES == 0);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_XFER_TIME == 6);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_XFER_POST_TIME == 7);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_POSTED == 8);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_ERR_NO_TELEMETRY == 19);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_TELEMETRY_EVENTS_DROPPED == 20);
    CHECK(NIXL_TELEMETRY_EVENT_AGENT_ERR_XFER_STALLED == 21);
    CHECK(NIXL_TELEMETRY_ERR_XFER_STALLED == -13);
    CHECK(NIXL_TELEMETRY_RING_VERSION_4 == 4 && NIXL_TELEMETRY_RING_VERSION_5 == 5);
    CHECK(NIXL_TELEMETRY_SUCCESS == 0 && NIXL_TELEMETRY_EMPTY == 1);
    CHECK(NIXL_TELEMETRY_ERR_NOT_POSTED == -1 && NIXL_TELEMETRY_ERR_NO_TELEMETRY == -12);
    CHECK(NIXL_TELEMETRY_ERR_BIND_FAILED == -100 && NIXL_TELEMETRY_ERR_DROPPED == -101);
    CHECK(NIXL_TELEMETRY_LOG_ERROR == 1 && NIXL_TELEMETRY_LOG_WARN == 2 &&
          NIXL_TELEMETRY_LOG_INFO == 3 && NIXL_TELEMETRY_LOG_DEBUG == 4 &&
          NIXL_TELEMETRY_LOG_TRACE == 5);
}

int main(void) {
    tests_begin();
    RUN(test_linkage);
    RUN(test_constants_and_names);
    return tests_end();
}
