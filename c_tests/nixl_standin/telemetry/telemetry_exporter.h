/*
 * Test stand-in for NIXL's public telemetry/telemetry_exporter.h (same include guard): the
 * bind-collision exception and the exporter init parameters, as NIXL declares them.
 */
#ifndef NIXL_SRC_API_CPP_TELEMETRY_TELEMETRY_EXPORTER_H
#define NIXL_SRC_API_CPP_TELEMETRY_TELEMETRY_EXPORTER_H

#include "nixl_types.h"
#include "telemetry_event.h"

#include <stdexcept>
#include <string>

class nixlTelemetryBindFailed : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct nixlTelemetryExporterInitParams {
    std::string agentName;
    size_t maxEventsBuffered;
};

/* Marks that the stand-in, not nixl_telemetry.hpp, declared the exception. */
#define NIXL_STANDIN_TELEMETRY_EXPORTER 1

#endif
