// The C++ half of libnixl_telemetry_cpp_plugin_host.so: drives an exporter of one of NIXL's own C++
// telemetry plug-ins (plug-in API version 2) behind the plain C functions declared in
// include/nixl_telemetry_cpp_bridge.h. Every function here catches every exception: nothing
// unwinds into the Rust library.
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "nixl_cpp_plugin_v2.hpp"
#include "nixl_telemetry_cpp_bridge.h"

namespace {

/** Copies `text` into `buf` (at most `len` bytes, NUL-terminated). */
void
copyOut(const std::string &text, char *buf, size_t len) noexcept {
    if (buf == nullptr || len == 0) {
        return;
    }
    const size_t n = text.size() < len - 1 ? text.size() : len - 1;
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
}

/** Longest name or version string a plug-in object may report before it is thought damaged. */
constexpr size_t maxPluginString = 4096;

/** One agent's exporter and what is needed to report its failures once. */
struct bridgedExporter {
    std::unique_ptr<nixlTelemetryExporter> exporter;
    nixl_telemetry_cpp_bridge_log_fn_t log;
    std::string agent;
    bool reportedStatus = false;
    bool reportedThrow = false;

    void
    say(int32_t level, const std::string &message) const noexcept {
        if (log != nullptr) {
            log(level, message.c_str());
        }
    }
};

const nixlTelemetryPlugin *
asPlugin(const void *plugin) noexcept {
    return static_cast<const nixlTelemetryPlugin *>(plugin);
}

} // namespace

extern "C" {

uint32_t
nixl_telemetry_cpp_bridge_abi_impl(void) noexcept {
    return NIXL_TELEMETRY_CPP_BRIDGE_ABI;
}

int32_t
nixl_telemetry_cpp_bridge_inspect_impl(const void *plugin,
                                       char *name,
                                       size_t name_len,
                                       char *version,
                                       size_t version_len,
                                       char *error,
                                       size_t error_len) noexcept {
    try {
        if (plugin == nullptr) {
            copyOut("nixl_telemetry_plugin_init returned NULL", error, error_len);
            return NIXL_TELEMETRY_ERR_INVALID_PARAM;
        }
        const nixlTelemetryPlugin *p = asPlugin(plugin);
        if (p->api_version != nixl_telemetry_plugin_api_version::V2) {
            copyOut("plug-in API version " + std::to_string(static_cast<unsigned>(p->api_version)) +
                        ", expected 2",
                    error,
                    error_len);
            return NIXL_TELEMETRY_ERR_MISMATCH;
        }
        if (p->create_exporter == nullptr) {
            copyOut("its plug-in object has no exporter creator (create_exporter is NULL)",
                    error,
                    error_len);
            return NIXL_TELEMETRY_ERR_MISMATCH;
        }
        if (p->getName().size() > maxPluginString || p->getVersion().size() > maxPluginString) {
            copyOut("its plug-in object's name or version is not a valid string", error, error_len);
            return NIXL_TELEMETRY_ERR_MISMATCH;
        }
        copyOut(p->getName(), name, name_len);
        copyOut(p->getVersion(), version, version_len);
        return NIXL_TELEMETRY_SUCCESS;
    }
    catch (...) {
        copyOut("reading the plug-in object failed", error, error_len);
        return NIXL_TELEMETRY_ERR_UNKNOWN;
    }
}

int32_t
nixl_telemetry_cpp_bridge_create_impl(const void *plugin,
                                      const char *agent_name,
                                      size_t max_events_buffered,
                                      nixl_telemetry_cpp_bridge_log_fn_t log,
                                      void **state,
                                      char *error,
                                      size_t error_len) noexcept {
    if (plugin == nullptr || agent_name == nullptr || state == nullptr) {
        copyOut("NULL argument", error, error_len);
        return NIXL_TELEMETRY_ERR_INVALID_PARAM;
    }
    *state = nullptr;
    try {
        const nixlTelemetryExporterInitParams params{agent_name, max_events_buffered};
        std::unique_ptr<nixlTelemetryExporter> exporter = asPlugin(plugin)->create_exporter(params);
        if (!exporter) {
            copyOut("the plug-in's creator returned no exporter (the plug-in logged why)",
                    error,
                    error_len);
            return NIXL_TELEMETRY_ERR_UNKNOWN;
        }
        *state = new bridgedExporter{std::move(exporter), log, agent_name};
        return NIXL_TELEMETRY_SUCCESS;
    }
    catch (const nixlTelemetryBindFailed &e) {
        copyOut(e.what(), error, error_len);
        return NIXL_TELEMETRY_ERR_BIND_FAILED;
    }
    catch (const std::exception &e) {
        copyOut(std::string("the exporter's constructor threw: ") + e.what(), error, error_len);
        return NIXL_TELEMETRY_ERR_UNKNOWN;
    }
    catch (...) {
        copyOut("the exporter's constructor threw an exception that is not a std::exception",
                error,
                error_len);
        return NIXL_TELEMETRY_ERR_UNKNOWN;
    }
}

size_t
nixl_telemetry_cpp_bridge_export_impl(void *state,
                                      const nixl_telemetry_event_t *events,
                                      size_t count) noexcept {
    if (state == nullptr || (events == nullptr && count != 0)) {
        return 0;
    }
    auto *bridged = static_cast<bridgedExporter *>(state);
    size_t kept = 0;
    size_t done = 0;
    try {
        bridged->exporter->withBatch([&] {
            for (; done < count; ++done) {
                const nixlTelemetryEvent event(
                    static_cast<nixl_telemetry_event_type_t>(events[done].event_type),
                    events[done].value);
                nixl_status_t status;
                try {
                    status = bridged->exporter->exportEvent(event);
                }
                catch (const std::exception &e) {
                    if (!bridged->reportedThrow) {
                        bridged->reportedThrow = true;
                        bridged->say(NIXL_TELEMETRY_LOG_WARN,
                                     "telemetry exporter of agent " + bridged->agent +
                                         ": exportEvent threw: " + e.what() +
                                         " (such events are counted as lost; said once)");
                    }
                    continue;
                }
                if (status == NIXL_SUCCESS) {
                    ++kept;
                } else if (!bridged->reportedStatus) {
                    bridged->reportedStatus = true;
                    bridged->say(NIXL_TELEMETRY_LOG_WARN,
                                 "telemetry exporter of agent " + bridged->agent +
                                     ": exportEvent returned status " +
                                     std::to_string(static_cast<int>(status)) +
                                     " (such events are counted as lost; said once)");
                }
            }
        });
    }
    catch (...) {
        // Only a non-std exception from exportEvent gets here: the rest of the batch is lost.
        if (!bridged->reportedThrow) {
            bridged->reportedThrow = true;
            bridged->say(NIXL_TELEMETRY_LOG_WARN,
                         "telemetry exporter of agent " + bridged->agent +
                             ": exportEvent threw an exception that is not a std::exception; " +
                             std::to_string(count - done) +
                             " events of this batch are counted as lost (said once)");
        }
    }
    return kept;
}

void
nixl_telemetry_cpp_bridge_destroy_impl(void *state) noexcept {
    // Destructors are noexcept: one that throws ends the process, in NIXL as here.
    delete static_cast<bridgedExporter *>(state);
}

} // extern "C"
