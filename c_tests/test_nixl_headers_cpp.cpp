// nixl_telemetry.hpp next to NIXL's own telemetry headers (stand-ins with NIXL's guards and
// declarations, on the include path as in a NIXL build): ours is included FIRST and finds
// them itself (__has_include), then NIXL's are included again; nothing is declared twice, and
// the library's exception and mapping are NIXL's types. NIXL's logger is found the same way,
// so the route into it exists although common/nixl_log.h is never included here.
#include "nixl_telemetry.hpp"

#include "nixl_types.h"
#include "telemetry/telemetry_exporter.h"
#include "telemetry_event.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "check.h"

#if !defined(NIXL_STANDIN_TELEMETRY_EXPORTER) || !defined(NIXL_STANDIN_TELEMETRY_EVENT)
#error "nixl_telemetry.hpp did not take NIXL's declarations from the include path"
#endif

int
main() {
    setenv("NIXL_TELEMETRY_RUN_INTERVAL", "3600000", 1);
    unsetenv("NIXL_TELEMETRY_DIR");
    unsetenv("NIXL_TELEMETRY_EXPORTER");
    CHECK(nixlTelemetryEventTypeForStatus(NIXL_ERR_CANCELED) ==
          nixl_telemetry_event_type_t::AGENT_ERR_CANCELED);
    nixlTelemetryRouteLogsToNixl();
    standinLog::clear();
    CHECK(nixlTelemetryEventTypeForStatus(NIXL_SUCCESS) ==
          nixl_telemetry_event_type_t::AGENT_ERR_UNKNOWN);
    CHECK(standinLog::count(standinLog::ERROR, "nixlTelemetryEventTypeForStatus") == 1);
    nixlTelemetrySetLogSink(nullptr);
    CHECK(nixl_telemetry_add_plugin_dir(NIXL_TEST_PLUGIN_DIR) == NIXL_TELEMETRY_SUCCESS);
    bool caught = false;
    try {
        nixlTelemetry telemetry("headers-agent", "bindfail");
    }
    catch (const nixlTelemetryBindFailed &e) { // NIXL's class (the stand-in's)
        caught = std::string(e.what()).find("could not be bound") != std::string::npos;
    }
    CHECK(caught);
    nixlTelemetry telemetry("headers-agent", "NOP");
    telemetry.updateErrorCount(NIXL_ERR_MISMATCH);
    std::printf("test_nixl_headers_cpp: all checks passed\n");
    return 0;
}
