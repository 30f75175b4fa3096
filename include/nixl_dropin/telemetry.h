/*
 * nixl-telemetry's drop-in for NIXL's internal header telemetry.h (src/core/telemetry/): NIXL's
 * agent and tests include it for the nixlTelemetry class, which nixl_telemetry.hpp provides
 * over libnixl_telemetry. Put include/nixl_dropin/ on NIXL's include path where
 * src/core/telemetry/ was (see the README, "Using it inside NIXL").
 *
 * Inside NIXL (its common/nixl_log.h is on the include path) this header also routes the
 * library's messages into NIXL's logger, once per process when the program starts, so they
 * appear with NIXL's own and NIXL's tests see them as they saw its telemetry core's; NIXL's
 * sources need not call nixlTelemetryRouteLogsToNixl() themselves.
 */
#ifndef NIXL_SRC_CORE_TELEMETRY_TELEMETRY_H
#define NIXL_SRC_CORE_TELEMETRY_TELEMETRY_H

#include "nixl_types.h"
#include "telemetry_event.h"
#if __has_include("telemetry/telemetry_exporter.h")
#include "telemetry/telemetry_exporter.h"
#endif
#if __has_include("common/nixl_log.h")
#include "common/nixl_log.h"
#endif
#include "../nixl_telemetry.hpp"

#ifdef __NIXL_LOG_H
/** Set when the program starts: the library's messages go to NIXL's logger. */
inline const bool nixlTelemetryLogsRoutedToNixl = [] {
    nixlTelemetryRouteLogsToNixl();
    return true;
}();
#endif

#endif /* NIXL_SRC_CORE_TELEMETRY_TELEMETRY_H */
