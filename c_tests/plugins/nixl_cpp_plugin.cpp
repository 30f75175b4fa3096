// Test plug-in written the way NIXL writes its own C++ telemetry plug-ins (plug-in API version
// 2): an exporter class derived from nixlTelemetryExporter, the nixlTelemetryPluginCreator
// template and the two extern "C" entry points, against cpp-plugin-host/include/nixl_cpp_plugin_v2.hpp.
// The library loads it through its C++ bridge.
//
// What the host does is appended to $NIXL_TELEMETRY_CSV_DIR/<agent>.nixlcpp, one line each:
// "create <maxEventsBuffered>", "begin", "<type> <value>", "end", "destroy". The agent name
// chooses a behaviour: "bind-*" throws nixlTelemetryBindFailed from the constructor, "fail-*"
// throws std::runtime_error (the creator logs it and returns no exporter); otherwise
// exportEvent throws for the value 13 and returns NIXL_ERR_BACKEND for the value 7.
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include "nixl_cpp_plugin_v2.hpp"

namespace {

bool
startsWith(const std::string &s, const char *prefix) {
    return s.rfind(prefix, 0) == 0;
}

std::string
logPath(const nixlTelemetryExporterInitParams &params) {
    const char *dir = std::getenv("NIXL_TELEMETRY_CSV_DIR");
    if (dir == nullptr) {
        throw std::invalid_argument("NIXL_TELEMETRY_CSV_DIR is not set");
    }
    return std::string(dir) + "/" + params.agentName + ".nixlcpp";
}

class recordingExporter : public nixlTelemetryExporter {
public:
    explicit recordingExporter(const nixlTelemetryExporterInitParams &params)
        : nixlTelemetryExporter(params) {
        if (startsWith(params.agentName, "bind-")) {
            throw nixlTelemetryBindFailed("port 9090 is already in use (test)");
        }
        if (startsWith(params.agentName, "fail-")) {
            throw std::runtime_error("cannot start the test exporter");
        }
        out_.open(logPath(params), std::ios::app);
        out_ << "create " << getMaxEventsBuffered() << '\n' << std::flush;
    }

    ~recordingExporter() override {
        out_ << "destroy\n" << std::flush;
    }

    nixl_status_t
    exportEvent(const nixlTelemetryEvent &event) override {
        if (event.value_ == 13) {
            throw std::runtime_error("thirteen");
        }
        if (event.value_ == 7) {
            return NIXL_ERR_BACKEND;
        }
        out_ << static_cast<uint32_t>(event.eventType_) << ' ' << event.value_ << '\n';
        return NIXL_SUCCESS;
    }

private:
    void
    onBatchBegin() noexcept override {
        out_ << "begin\n";
    }

    void
    onBatchEnd() noexcept override {
        out_ << "end\n" << std::flush;
    }

    std::ofstream out_;
};

} // namespace

extern "C" NIXL_TELEMETRY_PLUGIN_EXPORT nixlTelemetryPlugin *
nixl_telemetry_plugin_init() {
    return nixlTelemetryPluginCreator<recordingExporter>::create(
        nixl_telemetry_plugin_api_version::V2, "nixlcpp", "2.5.0");
}

extern "C" NIXL_TELEMETRY_PLUGIN_EXPORT void
nixl_telemetry_plugin_fini() {}
