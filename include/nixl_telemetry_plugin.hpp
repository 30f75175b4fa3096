/*
 * Writing a nixl-telemetry exporter plug-in in C++ (plug-in API version 3).
 *
 * Write a class with
 *   - a constructor taking `const nixl::telemetry::pluginParams &` (agent name, staging
 *     capacity, host logging); throw std::invalid_argument for a bad configuration value,
 *     nixl::telemetry::bindFailed when a scrape port is held by another process (benign: the
 *     agent runs without a sink), anything else for other failures;
 *   - `exportEvent(const nixl_telemetry_event_t &)` returning void (the event counts as kept),
 *     bool (true = kept) or an integral status (0 = kept);
 *   - optionally `onBatchBegin()` and `onBatchEnd()`, called around each flushed batch;
 * then, in exactly one source file of the shared library libtelemetry_exporter_<NAME>.so:
 *
 *   NIXL_TELEMETRY_CPP_PLUGIN(MyExporter, "<NAME>", "1.0.0")
 *
 * Every exception is caught at the C boundary: a throwing constructor fails creation with its
 * message; a throwing exportEvent loses that event (counted by the host) and the batch goes on.
 */
#ifndef NIXL_TELEMETRY_PLUGIN_HPP
#define NIXL_TELEMETRY_PLUGIN_HPP

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "nixl_telemetry_plugin.h"

namespace nixl {
namespace telemetry {

/** Thrown by an exporter constructor when its scrape port is held by another process. */
class bindFailed : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/** What the exporter constructor receives. */
struct pluginParams {
    std::string agentName;
    size_t maxEventsBuffered;
    nixl_telemetry_plugin_log_fn_t hostLog;
    nixl_telemetry_plugin_event_name_fn_t hostEventName;

    /** Logs through the host (level: 1 error, 2 warning, 3 info, 4 debug, 5 trace). */
    void
    log(int level, const std::string &message) const noexcept {
        if (hostLog != nullptr) {
            hostLog(level, message.c_str());
        }
    }

    /** The event's name, or "unknown_event_<n>". */
    std::string
    eventName(uint32_t type) const {
        const char *name = hostEventName != nullptr ? hostEventName(type) : nullptr;
        return name != nullptr ? std::string(name) : "unknown_event_" + std::to_string(type);
    }
};

namespace detail {

template<class T, class = void> struct hasBatchBegin : std::false_type {};
template<class T>
struct hasBatchBegin<T, std::void_t<decltype(std::declval<T &>().onBatchBegin())>>
    : std::true_type {};

template<class T, class = void> struct hasBatchEnd : std::false_type {};
template<class T>
struct hasBatchEnd<T, std::void_t<decltype(std::declval<T &>().onBatchEnd())>>
    : std::true_type {};

inline void
copyMessage(char *buf, size_t len, const char *message) noexcept {
    if (buf == nullptr || len == 0) {
        return;
    }
    const size_t n = std::min(std::strlen(message), len - 1);
    std::memcpy(buf, message, n);
    buf[n] = '\0';
}

/** The exporter object plus the host services it was created with. */
template<class Exporter> struct instance {
    pluginParams params;
    Exporter exporter;
    explicit instance(const pluginParams &p) : params(p), exporter(params) {}
};

template<class Exporter>
nixl_telemetry_status_t
create(const nixl_telemetry_plugin_params_t *params,
       void **state,
       char *error_buf,
       size_t error_len) noexcept {
    if (params == nullptr || state == nullptr || params->agent_name == nullptr) {
        copyMessage(error_buf, error_len, "NULL argument to create");
        return NIXL_TELEMETRY_ERR_INVALID_PARAM;
    }
    try {
        // Fields beyond struct_size do not exist in an older host's struct.
        auto has = [params](size_t offset, size_t size) {
            return params->struct_size >= offset + size;
        };
        pluginParams p{params->agent_name,
                       params->max_events_buffered,
                       has(offsetof(nixl_telemetry_plugin_params_t, host_log),
                           sizeof(params->host_log)) ?
                           params->host_log :
                           nullptr,
                       has(offsetof(nixl_telemetry_plugin_params_t, host_event_name),
                           sizeof(params->host_event_name)) ?
                           params->host_event_name :
                           nullptr};
        *state = new instance<Exporter>(p);
        return NIXL_TELEMETRY_SUCCESS;
    }
    catch (const bindFailed &e) {
        copyMessage(error_buf, error_len, e.what());
        return NIXL_TELEMETRY_ERR_BIND_FAILED;
    }
    catch (const std::invalid_argument &e) {
        copyMessage(error_buf, error_len, e.what());
        return NIXL_TELEMETRY_ERR_INVALID_PARAM;
    }
    catch (const std::exception &e) {
        copyMessage(error_buf, error_len, e.what());
        return NIXL_TELEMETRY_ERR_UNKNOWN;
    }
    catch (...) {
        copyMessage(error_buf, error_len, "unknown C++ exception in exporter constructor");
        return NIXL_TELEMETRY_ERR_UNKNOWN;
    }
}

template<class Exporter>
bool
exportOne(instance<Exporter> &self, const nixl_telemetry_event_t &event) {
    using result = decltype(self.exporter.exportEvent(event));
    if constexpr (std::is_void_v<result>) {
        self.exporter.exportEvent(event);
        return true;
    } else if constexpr (std::is_same_v<result, bool>) {
        return self.exporter.exportEvent(event);
    } else {
        return static_cast<long long>(self.exporter.exportEvent(event)) == 0;
    }
}

template<class Exporter>
void
hook(instance<Exporter> &self, bool begin) noexcept {
    try {
        if constexpr (hasBatchBegin<Exporter>::value) {
            if (begin) self.exporter.onBatchBegin();
        }
        if constexpr (hasBatchEnd<Exporter>::value) {
            if (!begin) self.exporter.onBatchEnd();
        }
    }
    catch (const std::exception &e) {
        self.params.log(2, std::string("telemetry exporter batch hook threw: ") + e.what());
    }
    catch (...) {
        self.params.log(2, "telemetry exporter batch hook threw an unknown exception");
    }
}

template<class Exporter>
size_t
exportBatch(void *state, const nixl_telemetry_event_t *events, size_t count) noexcept {
    if (state == nullptr || (events == nullptr && count > 0)) {
        return 0;
    }
    auto &self = *static_cast<instance<Exporter> *>(state);
    size_t kept = 0;
    bool warned = false;
    hook(self, true);
    for (size_t i = 0; i < count; ++i) {
        try {
            kept += exportOne(self, events[i]) ? 1 : 0;
        }
        catch (const std::exception &e) {
            if (!warned) {
                self.params.log(2, std::string("telemetry exporter threw: ") + e.what());
                warned = true;
            }
        }
        catch (...) {
            if (!warned) {
                self.params.log(2, "telemetry exporter threw an unknown exception");
                warned = true;
            }
        }
    }
    hook(self, false);
    return kept;
}

template<class Exporter>
void
destroy(void *state) noexcept {
    try {
        delete static_cast<instance<Exporter> *>(state);
    }
    catch (...) {
    }
}

} // namespace detail

/** The static descriptor of a C++ exporter class (used by NIXL_TELEMETRY_CPP_PLUGIN). */
template<class Exporter>
const nixl_telemetry_plugin_desc_t *
pluginDescriptor(const char *name, const char *version) noexcept {
    static const nixl_telemetry_plugin_desc_t descriptor = {
        NIXL_TELEMETRY_PLUGIN_API_VERSION,
        static_cast<uint32_t>(sizeof(nixl_telemetry_plugin_desc_t)),
        name,
        version,
        &detail::create<Exporter>,
        &detail::exportBatch<Exporter>,
        &detail::destroy<Exporter>,
    };
    return &descriptor;
}

} // namespace telemetry
} // namespace nixl

/** Defines the plug-in entry point for exporter class `cls` named `name` (a string literal). */
#define NIXL_TELEMETRY_CPP_PLUGIN(cls, name, version)                                       \
    extern "C" __attribute__((visibility("default"))) const nixl_telemetry_plugin_desc_t *       \
    nixl_telemetry_plugin_init(void) {                                                     \
        return ::nixl::telemetry::pluginDescriptor<cls>(name, version);                    \
    }

#endif /* NIXL_TELEMETRY_PLUGIN_HPP */
