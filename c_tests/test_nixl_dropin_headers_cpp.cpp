// NIXL's sources as they compile without NIXL's telemetry core: `#include "telemetry.h"` and
// `"telemetry_event.h"` find the package's drop-ins (include/nixl_dropin/, first on the include
// path), NIXL's other headers are the stand-ins in nixl_standin/. Checks what NIXL's code and
// tests use from those two headers against the library itself, and that the library's messages
// reach NIXL's logger without any call (telemetry.h routes them when the program starts).
#include "telemetry.h"
#include "telemetry_event.h"

#include "check.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#ifdef NIXL_STANDIN_TELEMETRY_EVENT
#error "telemetry_event.h came from the stand-ins, not from include/nixl_dropin"
#endif
#ifndef NIXL_STANDIN_TELEMETRY_EXPORTER
#error "NIXL's telemetry/telemetry_exporter.h (stand-in) was not included by telemetry.h"
#endif

static_assert(TELEMETRY_VERSION == 4, "the ring layout version");
static_assert(sizeof(nixlTelemetryEvent) == 16, "NIXL's event record is 16 bytes");
static_assert(nixl_telemetry_event_type_count == 22, "22 event types");
static_assert(nixlEnumStrings::telemetryEventTypeStr(
                  nixl_telemetry_event_type_t::AGENT_XFER_TIME) == "agent_xfer_time",
              "the names are constexpr, as in NIXL");

static void
names_agree_with_the_library() {
    for (uint32_t t = 0; t <= nixl_telemetry_event_type_count; ++t) {
        const auto type = static_cast<nixl_telemetry_event_type_t>(t);
        const std::string_view name = nixlEnumStrings::telemetryEventTypeStr(type);
        const char *label = nixlEnumStrings::telemetryErrorStatusLabel(type);
        const nixlTelemetryMetricDescriptor series = nixlEnumStrings::telemetryMetricDescriptor(type);
        if (t == nixl_telemetry_event_type_count) {
            CHECK(name == "unknown_event" && label == nullptr && series.counterName == nullptr);
            continue;
        }
        CHECK(name == nixl_telemetry_event_name(t));
        const bool error = (t >= NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_POSTED &&
                            t <= NIXL_TELEMETRY_EVENT_AGENT_ERR_NO_TELEMETRY) ||
                           t == NIXL_TELEMETRY_EVENT_AGENT_ERR_XFER_STALLED;
        CHECK((label != nullptr) == error);
        CHECK((series.counterName != nullptr) == !error);
        if (error) {
            // "agent_err_<label>" is the event name.
            CHECK(name == "agent_err_" + std::string(label));
        } else {
            CHECK(std::string(series.counterName).rfind(std::string(name), 0) == 0);
        }
    }
    for (size_t i = 0; i < telemetry_error_event_types.size(); ++i) {
        const auto status = static_cast<nixl_status_t>(-static_cast<int>(i) - 1);
        CHECK(telemetry_error_event_types[i] == nixlTelemetryEventTypeForStatus(status));
    }
    CHECK(std::strcmp(TELEMETRY_BUFFER_SIZE_VAR, "NIXL_TELEMETRY_BUFFER_SIZE") == 0);
}

static void
messages_reach_nixls_logger() {
    standinLog::clear();
    // NIXL aborts here; this library logs an error: it must arrive as NIXL_ERROR.
    CHECK(nixlTelemetryEventTypeForStatus(NIXL_SUCCESS) ==
          nixl_telemetry_event_type_t::AGENT_ERR_UNKNOWN);
    CHECK(standinLog::count(standinLog::ERROR, "nixlTelemetryEventTypeForStatus") == 1);
}

static void
ring_records_are_nixl_events(const std::string &dir) {
    {
        nixlTelemetry telemetry("dropin-agent", "BUFFER");
        telemetry.addXferStats(std::chrono::microseconds(120), true, 4096,
                               std::chrono::microseconds(8));
        telemetry.updateErrorCount(NIXL_ERR_BACKEND);
    }
    nixl_telemetry_ring_t *ring = nullptr;
    CHECK(nixl_telemetry_ring_open((dir + "/dropin-agent").c_str(), &ring) ==
          NIXL_TELEMETRY_SUCCESS);
    const nixlTelemetryEvent expected[] = {
        {nixl_telemetry_event_type_t::AGENT_XFER_POST_TIME, 8},
        {nixl_telemetry_event_type_t::AGENT_XFER_TIME, 120},
        {nixl_telemetry_event_type_t::AGENT_TX_BYTES, 4096},
        {nixl_telemetry_event_type_t::AGENT_TX_REQUESTS_NUM, 1},
        {nixl_telemetry_event_type_t::AGENT_ERR_BACKEND, 1},
    };
    for (const nixlTelemetryEvent &want : expected) {
        nixl_telemetry_event_t record;
        CHECK(nixl_telemetry_ring_pop(ring, &record) == NIXL_TELEMETRY_SUCCESS);
        nixlTelemetryEvent got;
        std::memcpy(&got, &record, sizeof(got));
        CHECK(got.eventType_ == want.eventType_ && got.value_ == want.value_);
    }
    nixl_telemetry_event_t record;
    CHECK(nixl_telemetry_ring_pop(ring, &record) == NIXL_TELEMETRY_EMPTY);
    nixl_telemetry_ring_close(ring);
}

int
main() {
    char dir_template[] = "/tmp/nixl-dropin-headers-XXXXXX";
    const std::string dir = mkdtemp(dir_template);
    setenv("NIXL_TELEMETRY_DIR", dir.c_str(), 1);
    setenv("NIXL_TELEMETRY_RUN_INTERVAL", "3600000", 1);
    unsetenv("NIXL_TELEMETRY_EXPORTER");
    unsetenv("NIXL_TELEMETRY_ENABLE");
    unsetenv("NIXL_TELEMETRY_BUFFER_SIZE");
    unsetenv("NIXL_TELEMETRY_ENABLED_METRICS");

    names_agree_with_the_library();
    messages_reach_nixls_logger();
    ring_records_are_nixl_events(dir);

    rm_rf(dir.c_str());
    std::printf("test_nixl_dropin_headers_cpp: all checks passed\n");
    return 0;
}
