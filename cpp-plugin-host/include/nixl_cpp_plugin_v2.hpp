/*
 * NIXL's C++ telemetry plug-in interface, plug-in API version 2, declared for the C++ bridge
 * (cpp-plugin-host/src/bridge.cpp) and for test plug-ins shaped like NIXL's own. Written from the
 * documented interface (class layouts on libstdc++, Itanium ABI), not copied from NIXL:
 *
 *   nixlTelemetryExporterInitParams  { std::string agentName; size_t maxEventsBuffered; }
 *   nixlTelemetryExporter            vptr + const size_t; vtable: complete dtor, deleting dtor,
 *                                    exportEvent (pure), onBatchBegin, onBatchEnd (private)
 *   nixlTelemetryPlugin              api_version, create_exporter, name_, version_ (80 bytes)
 *   extern "C" nixlTelemetryPlugin *nixl_telemetry_plugin_init();  void nixl_telemetry_plugin_fini();
 *
 * As in include/nixl_telemetry.hpp, NIXL's own declarations win: when NIXL's
 * telemetry_event.h, telemetry/telemetry_exporter.h or telemetry/telemetry_plugin.h were
 * included first, their part is not declared again here.
 *
 * This header is not installed: plug-ins for this library use nixl_telemetry_plugin.h(pp)
 * (plug-in API version 3); NIXL's existing plug-ins are loaded through the bridge.
 */
#ifndef NIXL_CPP_PLUGIN_V2_HPP
#define NIXL_CPP_PLUGIN_V2_HPP

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "nixl_telemetry.hpp"

#ifndef NIXL_SRC_CORE_TELEMETRY_TELEMETRY_EVENT_H
/** NIXL's event record: the 16-byte ring record (type, 4 bytes of padding, value). */
struct nixlTelemetryEvent {
    nixl_telemetry_event_type_t eventType_;
    uint64_t value_;

    nixlTelemetryEvent() noexcept = default;

    nixlTelemetryEvent(nixl_telemetry_event_type_t event_type, uint64_t value) noexcept
        : eventType_(event_type),
          value_(value) {}
};
#endif

static_assert(sizeof(nixlTelemetryEvent) == 16 && sizeof(nixl_telemetry_event_t) == 16,
              "NIXL's event record and nixl_telemetry_event_t are the same 16 bytes");

#ifndef NIXL_SRC_API_CPP_TELEMETRY_TELEMETRY_EXPORTER_H
/** What NIXL's core passes to an exporter's constructor. */
struct nixlTelemetryExporterInitParams {
    std::string agentName;
    size_t maxEventsBuffered;
};

/** NIXL's exporter base class: one exportEvent call per event, inside withBatch. */
class nixlTelemetryExporter {
public:
    explicit nixlTelemetryExporter(const nixlTelemetryExporterInitParams &init_params) noexcept
        : maxEventsBuffered_(init_params.maxEventsBuffered) {}
    nixlTelemetryExporter(nixlTelemetryExporter &&) = delete;
    nixlTelemetryExporter(const nixlTelemetryExporter &) = delete;
    void
    operator=(nixlTelemetryExporter &&) = delete;
    void
    operator=(const nixlTelemetryExporter &) = delete;

    virtual ~nixlTelemetryExporter() = default;

    /** The staging capacity the core was configured with. */
    [[nodiscard]] size_t
    getMaxEventsBuffered() const noexcept {
        return maxEventsBuffered_;
    }

    /** Exports one event. */
    virtual nixl_status_t
    exportEvent(const nixlTelemetryEvent &event) = 0;

    /** Runs `body` between onBatchBegin() and onBatchEnd() (the latter also on exception). */
    template<typename Body>
    void
    withBatch(Body &&body) {
        const batchScope scope{*this};
        body();
    }

private:
    /** Calls onBatchBegin on construction and onBatchEnd on destruction. */
    class batchScope {
    public:
        explicit batchScope(nixlTelemetryExporter &exporter) noexcept : exporter_(exporter) {
            exporter_.onBatchBegin();
        }

        ~batchScope() {
            exporter_.onBatchEnd();
        }

        batchScope(const batchScope &) = delete;
        batchScope &
        operator=(const batchScope &) = delete;

    private:
        nixlTelemetryExporter &exporter_;
    };

    virtual void
    onBatchBegin() noexcept {}

    virtual void
    onBatchEnd() noexcept {}

    const size_t maxEventsBuffered_;
};
#endif

#ifndef NIXL_SRC_API_CPP_TELEMETRY_TELEMETRY_PLUGIN_H
/** NIXL's plug-in API versions; NIXL's loader, and the bridge, accept V2 only. */
enum class nixl_telemetry_plugin_api_version : unsigned int {
    V1 = 1,
    V2 = 2,
};

/** Creates one agent's exporter; throws nixlTelemetryBindFailed on a port collision. */
using exporter_creator_fn_t =
    std::unique_ptr<nixlTelemetryExporter> (*)(const nixlTelemetryExporterInitParams &init_params);

/** The object a NIXL C++ plug-in's nixl_telemetry_plugin_init() returns. */
class nixlTelemetryPlugin {
public:
    nixl_telemetry_plugin_api_version api_version;
    exporter_creator_fn_t create_exporter;

    nixlTelemetryPlugin(nixl_telemetry_plugin_api_version version,
                        std::string_view name,
                        std::string_view ver,
                        exporter_creator_fn_t create) noexcept
        : api_version(version),
          create_exporter(create),
          name_(name),
          version_(ver) {}

    /** The exporter's name. */
    const std::string &
    getName() const noexcept {
        return name_;
    }

    /** The plug-in's version. */
    const std::string &
    getVersion() const noexcept {
        return version_;
    }

private:
    std::string name_;
    std::string version_;
};

/** Default visibility for the entry points. */
#define NIXL_TELEMETRY_PLUGIN_EXPORT __attribute__((visibility("default")))

/**
 * The function-static plug-in object of exporter class `exporterType`, whose creator lets
 * nixlTelemetryBindFailed through and turns any other exception into a message on stderr (NIXL
 * logs it) and a null exporter.
 */
template<typename exporterType> class nixlTelemetryPluginCreator {
public:
    /** Returns the plug-in object (created on first use). */
    static nixlTelemetryPlugin *
    create(nixl_telemetry_plugin_api_version api_version,
           std::string_view name,
           std::string_view version) {
        static nixlTelemetryPlugin plugin_instance(api_version, name, version, createExporter);
        return &plugin_instance;
    }

private:
    static std::unique_ptr<nixlTelemetryExporter>
    createExporter(const nixlTelemetryExporterInitParams &init_params) {
        try {
            return std::make_unique<exporterType>(init_params);
        }
        catch (const nixlTelemetryBindFailed &) {
            throw;
        }
        catch (const std::exception &e) {
            std::fprintf(stderr, "Failed to create exporter: %s\n", e.what());
            return nullptr;
        }
    }
};

extern "C" {
/** The plug-in's entry point: its static plug-in object, or NULL. */
NIXL_TELEMETRY_PLUGIN_EXPORT nixlTelemetryPlugin *
nixl_telemetry_plugin_init();

/** Called by NIXL when it unloads the plug-in (this library never unloads plug-ins). */
NIXL_TELEMETRY_PLUGIN_EXPORT void
nixl_telemetry_plugin_fini();
}
#endif

#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI && __SIZEOF_POINTER__ == 8
// The sizes the documented layout gives on libstdc++ (its C++11 string ABI, 64-bit): an
// argument against a member or base out of place on either side of the bridge.
static_assert(sizeof(nixlTelemetryExporterInitParams) == 40, "NIXL's init parameters: 40 bytes");
static_assert(sizeof(nixlTelemetryExporter) == 16, "NIXL's exporter base: vptr + size_t");
static_assert(sizeof(nixlTelemetryPlugin) == 80, "NIXL's plug-in object: 80 bytes");
#endif

#endif /* NIXL_CPP_PLUGIN_V2_HPP */
