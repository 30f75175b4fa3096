// Test plug-in written in C++ with nixl_telemetry_plugin.hpp whose exportEvent throws for every
// odd value: the host must survive, count those events as lost and keep the others. Kept
// events are appended as "<type> <value>" lines to $NIXL_TELEMETRY_CSV_DIR/<agent>.kept.
// With THROWING_PLUGIN_FAIL_CREATE set, the constructor throws.
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include "nixl_telemetry_plugin.hpp"

class throwingExporter {
public:
    explicit throwingExporter(const nixl::telemetry::pluginParams &params) {
        if (std::getenv("THROWING_PLUGIN_FAIL_CREATE") != nullptr) {
            throw std::runtime_error("constructor failed on purpose");
        }
        const char *dir = std::getenv("NIXL_TELEMETRY_CSV_DIR");
        if (dir == nullptr) {
            throw std::invalid_argument("NIXL_TELEMETRY_CSV_DIR is not set");
        }
        out_.open(std::string(dir) + "/" + params.agentName + ".kept");
    }

    int
    exportEvent(const nixl_telemetry_event_t &event) {
        if (event.value % 2 == 1) {
            throw std::runtime_error("odd value " + std::to_string(event.value));
        }
        out_ << event.event_type << ' ' << event.value << '\n';
        return 0;
    }

    void
    onBatchEnd() {
        out_.flush();
        ++batches_;
    }

private:
    std::ofstream out_;
    int batches_ = 0;
};

NIXL_TELEMETRY_CPP_PLUGIN(throwingExporter, "throwing", "1.0.0")
