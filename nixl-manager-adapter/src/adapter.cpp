// The C++ half of the NIXL plug-in adapter (see src/lib.rs): NIXL's C++ exporter interface
// (plug-in API version 2, as declared in cpp-plugin-host/include/nixl_cpp_plugin_v2.hpp) over one of
// this library's plain C plug-ins (API version 3). Nothing here throws into the Rust half.
#include <dlfcn.h>

#include <climits>
#include <cstdlib>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "nixl_cpp_plugin_v2.hpp"

// Both headers declare the entry point nixl_telemetry_plugin_init, each with its own ABI's
// type; this file defines neither (the Rust half defines NIXL's), so the C one is renamed away.
#define nixl_telemetry_plugin_init nixl_telemetry_plugin_init_of_the_c_plugin
#include "nixl_telemetry_plugin.h"
#undef nixl_telemetry_plugin_init

extern "C" {
/** What the Rust half gives this half: the library's services, by pointer rather than by
 *  exported symbol, so the adapter exports only NIXL's two entry points. */
typedef struct {
    /** The static name of an event type, or NULL. */
    const char *(*event_name)(uint32_t event_type);
    /** Logs through the library (stderr, threshold NIXL_LOG_LEVEL). */
    void (*log)(int32_t level, const char *message);
    /** The library's host services table, passed on to the plug-in. */
    const nixl_telemetry_plugin_host_t *host;
    /** Checks a plug-in file as the library's loader does: 0 or an error status. */
    int32_t (*check)(const char *path);
} nixl_telemetry_nixl_adapter_services_t;

nixlTelemetryPlugin *
nixl_telemetry_nixl_adapter_init_impl(const nixl_telemetry_nixl_adapter_services_t *services) noexcept;
}

namespace {

/** The Rust half's services, set by the first nixl_telemetry_nixl_adapter_init_impl. */
const nixl_telemetry_nixl_adapter_services_t *services_ = nullptr;

void
say(int32_t level, const std::string &message) noexcept {
    if (services_ != nullptr) {
        services_->log(level, message.c_str());
    }
}

/** The C plug-in this adapter presents, opened once. */
struct presentedPlugin {
    std::string name;
    std::string path;
    const nixl_telemetry_plugin_desc_t *desc = nullptr;
};

/** Splits this shared library's path into the exporter name and the C plug-in's path. */
bool
locate(presentedPlugin &plugin, std::string &why) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&nixl_telemetry_nixl_adapter_init_impl), &info) == 0 ||
        info.dli_fname == nullptr) {
        why = "cannot find the adapter's own file (dladdr failed)";
        return false;
    }
    const std::string self = info.dli_fname;
    const std::string prefix = "libtelemetry_exporter_";
    const size_t slash = self.rfind('/');
    const std::string file = slash == std::string::npos ? self : self.substr(slash + 1);
    const std::string dir = slash == std::string::npos ? "." : self.substr(0, slash);
    if (file.rfind(prefix, 0) != 0 || file.size() <= prefix.size() + 3 ||
        file.compare(file.size() - 3, 3, ".so") != 0) {
        why = self + " is not named libtelemetry_exporter_<NAME>.so";
        return false;
    }
    plugin.name = file.substr(prefix.size(), file.size() - prefix.size() - 3);
    char real[PATH_MAX];
    if (realpath(dir.c_str(), real) == nullptr) {
        why = "cannot resolve the adapter's directory " + dir;
        return false;
    }
    const std::string adapters = real;
    const size_t up = adapters.rfind('/');
    plugin.path = (up == 0 || up == std::string::npos ? std::string() : adapters.substr(0, up)) +
                  "/" + file;
    return true;
}

/** Opens the C plug-in one directory up, if it is trusted, and checks its descriptor. */
bool
open(presentedPlugin &plugin, std::string &why) {
    // The library's own checks first: nothing of an untrusted file runs.
    if (services_->check(plugin.path.c_str()) != NIXL_TELEMETRY_SUCCESS) {
        why = "refused to load " + plugin.path + " (see the previous message)";
        return false;
    }
    void *handle = dlopen(plugin.path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle == nullptr) {
        const char *e = dlerror();
        why = "cannot load " + plugin.path + ": " + (e != nullptr ? e : "unknown error");
        return false;
    }
    auto init = reinterpret_cast<nixl_telemetry_plugin_init_fn_t>(
        dlsym(handle, "nixl_telemetry_plugin_init"));
    const nixl_telemetry_plugin_desc_t *desc = init != nullptr ? init() : nullptr;
    if (desc == nullptr || desc->api_version != NIXL_TELEMETRY_PLUGIN_API_VERSION ||
        desc->struct_size < sizeof(nixl_telemetry_plugin_desc_t) || desc->create == nullptr ||
        desc->export_batch == nullptr || desc->destroy == nullptr) {
        why = plugin.path + " is not an exporter plug-in of API version " +
              std::to_string(NIXL_TELEMETRY_PLUGIN_API_VERSION);
        return false;
    }
    plugin.desc = desc;
    return true;
}

/** The presented plug-in (desc NULL after an error, which is logged once). */
const presentedPlugin &
presented() {
    static const presentedPlugin plugin = [] {
        presentedPlugin p;
        std::string why;
        if (!locate(p, why) || !open(p, why)) {
            p.desc = nullptr;
            say(NIXL_TELEMETRY_LOG_ERROR, "NIXL plug-in adapter: " + why);
        }
        return p;
    }();
    return plugin;
}

/** NIXL's exporter class over one agent's state in the C plug-in. */
class adaptedExporter : public nixlTelemetryExporter {
public:
    explicit adaptedExporter(const nixlTelemetryExporterInitParams &params)
        : nixlTelemetryExporter(params),
          desc_(presented().desc),
          agent_(params.agentName) {
        nixl_telemetry_plugin_params_t c_params{};
        c_params.struct_size = sizeof(c_params);
        c_params.agent_name = agent_.c_str();
        c_params.max_events_buffered = params.maxEventsBuffered;
        c_params.host_log = services_->log;
        c_params.host_event_name = services_->event_name;
        c_params.host = services_->host;
        char message[1024] = {0};
        const nixl_telemetry_status_t status =
            desc_->create(&c_params, &state_, message, sizeof(message));
        message[sizeof(message) - 1] = '\0';
        if (status == NIXL_TELEMETRY_ERR_BIND_FAILED) {
            throw nixlTelemetryBindFailed(message);
        }
        if (status != NIXL_TELEMETRY_SUCCESS) {
            throw std::runtime_error("Failed to create telemetry exporter " +
                                     presented().name + ": " + message);
        }
    }

    ~adaptedExporter() override {
        desc_->destroy(state_);
    }

    nixl_status_t
    exportEvent(const nixlTelemetryEvent &event) override {
        const nixl_telemetry_event_t record{static_cast<uint32_t>(event.eventType_), event.value_};
        if (inBatch_) {
            batch_.push_back(record);
            return NIXL_SUCCESS;
        }
        return exportNow(&record, 1) == 1 ? NIXL_SUCCESS : NIXL_ERR_BACKEND;
    }

private:
    void
    onBatchBegin() noexcept override {
        batch_.clear();
        inBatch_ = true;
    }

    void
    onBatchEnd() noexcept override {
        inBatch_ = false;
        // Also an empty batch: the C plug-in's idle tick.
        exportNow(batch_.data(), batch_.size());
        batch_.clear();
    }

    size_t
    exportNow(const nixl_telemetry_event_t *events, size_t count) noexcept {
        const size_t kept = desc_->export_batch(state_, events, count);
        if (kept < count && !reportedLoss_) {
            reportedLoss_ = true;
            say(NIXL_TELEMETRY_LOG_WARN,
                "telemetry exporter " + presented().name + " for agent '" + agent_ +
                    "' could not keep " + std::to_string(count - kept) +
                    " events; further losses are not reported");
        }
        return kept;
    }

    const nixl_telemetry_plugin_desc_t *desc_;
    std::string agent_;
    void *state_ = nullptr;
    std::vector<nixl_telemetry_event_t> batch_;
    bool inBatch_ = false;
    bool reportedLoss_ = false;
};

} // namespace

extern "C" nixlTelemetryPlugin *
nixl_telemetry_nixl_adapter_init_impl(const nixl_telemetry_nixl_adapter_services_t *services) noexcept {
    if (services == nullptr) {
        return nullptr;
    }
    services_ = services;
    try {
        const presentedPlugin &plugin = presented();
        if (plugin.desc == nullptr) {
            return nullptr;
        }
        return nixlTelemetryPluginCreator<adaptedExporter>::create(
            nixl_telemetry_plugin_api_version::V2,
            plugin.name,
            plugin.desc->version != nullptr ? plugin.desc->version : "");
    }
    catch (...) {
        say(NIXL_TELEMETRY_LOG_ERROR, "NIXL plug-in adapter: initialisation failed");
        return nullptr;
    }
}
