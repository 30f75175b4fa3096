// NIXL's usage of its telemetry, reproduced against nixl-telemetry's headers: a translation
// unit that includes (a stand-in for) NIXL's nixl_types.h and logger first, then every public
// header of ours; both nixlTelemetry constructors, the status mapping, the bind exception,
// the options of the C ABI, and the logging bridge into NIXL's logger. An unread ring that
// overflows (NIXL's BufferOverflowHandling) must produce no warning: NIXL's test main fails a
// run on any unexpected warning.
#include "nixl_standin/nixl_types.h"
#include "nixl_standin/common/nixl_log.h"

#include "nixl_telemetry.hpp"
#include "nixl_telemetry.h"
#include "nixl_telemetry_fpm.h"
#include "nixl_telemetry_plugin.h"
#include "nixl_telemetry_plugin.hpp"

#include "check.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <sys/stat.h>
#include <unistd.h>

// NIXL's name and ours coexist in one translation unit.
static_assert(std::is_same<nixl_telemetry_plugin_t, std::string>::value,
              "nixl_telemetry_plugin_t is NIXL's std::string");
static_assert(std::is_base_of<std::runtime_error, nixlTelemetryBindFailed>::value,
              "nixlTelemetryBindFailed is a std::runtime_error");
static_assert(std::is_same<std::underlying_type<nixl_telemetry_event_type_t>::type,
                           uint32_t>::value,
              "NIXL's event type is a uint32_t enum");

static off_t
file_size(const std::string &path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

static void
status_mapping() {
    for (int s = -1; s >= -12; --s) {
        const auto t = nixlTelemetryEventTypeForStatus(static_cast<nixl_status_t>(s));
        CHECK(static_cast<uint32_t>(t) == static_cast<uint32_t>(7 - s));
    }
    CHECK(nixlTelemetryEventTypeForStatus(NIXL_ERR_BACKEND) ==
          nixl_telemetry_event_type_t::AGENT_ERR_BACKEND);
    CHECK(nixlTelemetryEventTypeForStatus(NIXL_ERR_NO_TELEMETRY) ==
          nixl_telemetry_event_type_t::AGENT_ERR_NO_TELEMETRY);
    // NIXL aborts here; this library logs an error (through the bridge) and says UNKNOWN.
    standinLog::clear();
    CHECK(nixlTelemetryEventTypeForStatus(NIXL_SUCCESS) ==
          nixl_telemetry_event_type_t::AGENT_ERR_UNKNOWN);
    CHECK(standinLog::count(standinLog::ERROR, "nixlTelemetryEventTypeForStatus") == 1);
    // NIXL_ERR_XFER_STALLED (-13, NIXL's open pull request #2047): AGENT_ERR_UNKNOWN unless
    // NIXL_TELEMETRY_XFER_STALLED_EVENT is true.
    const auto stalled = static_cast<nixl_status_t>(NIXL_TELEMETRY_ERR_XFER_STALLED);
    CHECK(nixlTelemetryEventTypeForStatus(stalled) ==
          nixl_telemetry_event_type_t::AGENT_ERR_UNKNOWN);
    setenv("NIXL_TELEMETRY_XFER_STALLED_EVENT", "true", 1);
    CHECK(nixlTelemetryEventTypeForStatus(stalled) ==
          nixl_telemetry_event_type_t::AGENT_ERR_XFER_STALLED);
    unsetenv("NIXL_TELEMETRY_XFER_STALLED_EVENT");
    CHECK(standinLog::count(standinLog::ERROR, "nixlTelemetryEventTypeForStatus") == 1);
}

static void
unread_overflowing_ring_does_not_warn(const std::string &dir) {
    setenv("NIXL_TELEMETRY_BUFFER_SIZE", "4", 1);
    standinLog::clear();
    {
        // NIXL's telemetryTest.BufferOverflowHandling, word for word but for the names.
        nixlTelemetry telemetry("overflow-agent", "BUFFER");
        for (int i = 0; i < 10; ++i) {
            telemetry.updateTxBytes(i * 100);
        }
        telemetry.flush();
        for (int i = 0; i < 10; ++i) {
            telemetry.updateRxBytes(i);
        }
        CHECK(telemetry.stats().events_dropped == 12);
    } // destroy: the final flush meets the full, never-read ring
    CHECK(file_size(dir + "/overflow-agent") == 40 + 16 * 4);
    CHECK(standinLog::count(standinLog::WARNING) == 0);
    CHECK(standinLog::count(standinLog::ERROR) == 0);
    CHECK(standinLog::count(standinLog::INFO, "no reader") == 1);
    unsetenv("NIXL_TELEMETRY_BUFFER_SIZE");
}

static void
constructors(const std::string &dir) {
    // NIXL's constructor records whatever NIXL_TELEMETRY_ENABLE says (the agent decided).
    setenv("NIXL_TELEMETRY_ENABLE", "false", 1);
    {
        nixlTelemetry telemetry("ctor-agent", "BUFFER");
        telemetry.updateMemoryRegistered(4096);
        telemetry.addXferStats(std::chrono::microseconds(100), true, 1 << 20,
                               std::chrono::microseconds(7));
        telemetry.updateErrorCount(NIXL_ERR_BACKEND);
        telemetry.flush();
        const nixl_telemetry_stats_t s = telemetry.stats();
        CHECK(s.events_accepted == 6 && s.events_exported == 6);
    }
    CHECK(file_size(dir + "/ctor-agent") == 40 + 16 * 4096);
    auto nop = std::make_unique<nixlTelemetry>("nop-agent", "NOP");
    nop->updateTxRequestsNum(1);
    nop.reset();
    // create() follows the environment: ENABLE=false means no telemetry.
    standinLog::clear();
    CHECK(nixlTelemetry::create("create-agent") == nullptr);
    unsetenv("NIXL_TELEMETRY_ENABLE");
    CHECK(nixlTelemetry::create("create-agent") != nullptr);

    // Genuine errors throw what NIXL throws.
    bool threw = false;
    try {
        nixlTelemetry telemetry("", "NOP");
    }
    catch (const std::invalid_argument &e) {
        threw = std::string(e.what()).find("non-empty agent name") != std::string::npos;
    }
    CHECK(threw);
    threw = false;
    try {
        nixlTelemetry telemetry("agent", "no_such_exporter");
    }
    catch (const nixlTelemetryBindFailed &) {
        CHECK(!"not a bind failure");
    }
    catch (const std::runtime_error &e) {
        threw = std::string(e.what()).find("no_such_exporter") != std::string::npos;
    }
    CHECK(threw);

    // Every option of the C ABI, through the C++ constructor.
    nixl_telemetry_options_t options{};
    options.exporter_name = "BUFFER";
    options.buffer_size = 8;
    options.run_interval_ms = 3600000;
    options.dir = dir.c_str();
    options.enabled_metrics = "agent_tx_*";
    {
        nixlTelemetry telemetry("options-agent", options);
        telemetry.updateRxBytes(1); // deactivated: not counted
        telemetry.updateTxBytes(2);
        CHECK(telemetry.stats().events_accepted == 1);
    }
    CHECK(file_size(dir + "/options-agent") == 40 + 16 * 8);
}

static void
bind_collision() {
    CHECK(nixl_telemetry_add_plugin_dir(NIXL_TEST_PLUGIN_DIR) == NIXL_TELEMETRY_SUCCESS);
    // The constructor throws NIXL's exception, without logging (NIXL's create() logs).
    standinLog::clear();
    bool caught = false;
    try {
        nixlTelemetry telemetry("bind-agent", "bindfail");
    }
    catch (const nixlTelemetryBindFailed &e) {
        caught = std::string(e.what()).find("could not be bound") != std::string::npos;
    }
    CHECK(caught);
    CHECK(standinLog::count(standinLog::WARNING) == 0);
    // create() returns nullptr after one warning: the agent runs without a sink.
    setenv("NIXL_TELEMETRY_EXPORTER", "bindfail", 1);
    CHECK(nixlTelemetry::create("bind-agent") == nullptr);
    CHECK(standinLog::count(standinLog::WARNING, "without a telemetry sink") == 1);
    unsetenv("NIXL_TELEMETRY_EXPORTER");
}

static void
c_options() {
    nixl_telemetry_t *t = reinterpret_cast<nixl_telemetry_t *>(1);
    // A caller built against a newer header (larger struct) is refused, clearly.
    struct {
        nixl_telemetry_options_t options;
        uint64_t newer_field;
    } newer{};
    newer.options.struct_size = sizeof(newer);
    CHECK(nixl_telemetry_create_with_options("c-agent", &newer.options, &t) ==
          NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == nullptr);
    char message[256];
    nixl_telemetry_last_error(message, sizeof(message));
    CHECK(std::string(message).find("struct_size") != std::string::npos);
    // An older caller: only the exporter name (the fields after it read as unset).
    nixl_telemetry_options_t older{};
    older.struct_size = offsetof(nixl_telemetry_options_t, buffer_size);
    older.exporter_name = "NOP";
    older.buffer_size = 0xdead; // beyond the declared size: ignored
    CHECK(nixl_telemetry_create_with_options("c-agent", &older, &t) == NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_destroy(t);
    // NULL options: everything from the environment.
    CHECK(nixl_telemetry_create_with_options("c-agent", nullptr, &t) == NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_destroy(t);
    nixl_telemetry_options_t bad{};
    bad.struct_size = sizeof(bad);
    bad.exporter_name = "BUFFER";
    bad.buffer_size = uint64_t(1) << 40;
    CHECK(nixl_telemetry_create_with_options("c-agent", &bad, &t) ==
          NIXL_TELEMETRY_ERR_INVALID_PARAM);
}

int
main() {
    char dir_template[] = "/tmp/nixl-dropin-XXXXXX";
    const std::string dir = mkdtemp(dir_template);
    setenv("NIXL_TELEMETRY_DIR", dir.c_str(), 1);
    setenv("NIXL_TELEMETRY_RUN_INTERVAL", "3600000", 1);
    setenv("NIXL_LOG_LEVEL", "INFO", 1);
    unsetenv("NIXL_TELEMETRY_EXPORTER");
    unsetenv("NIXL_TELEMETRY_ENABLE");
    unsetenv("NIXL_TELEMETRY_BUFFER_SIZE");
    unsetenv("NIXL_TELEMETRY_ENABLED_METRICS");

    nixlTelemetryRouteLogsToNixl();
    status_mapping();
    unread_overflowing_ring_does_not_warn(dir);
    constructors(dir);
    bind_collision();
    c_options();
    nixlTelemetrySetLogSink(nullptr);

    rm_rf(dir.c_str());
    std::printf("test_nixl_dropin_cpp: all checks passed\n");
    return 0;
}
