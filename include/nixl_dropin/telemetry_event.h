/*
 * nixl-telemetry's drop-in for NIXL's internal header telemetry_event.h (src/core/telemetry/),
 * for a NIXL build that removes its telemetry core and links libnixl_telemetry: put
 * include/nixl_dropin/ on NIXL's include path where src/core/telemetry/ was. NIXL's public
 * telemetry/telemetry_exporter.h, its plug-ins and its tests include this header by that name.
 *
 * It declares what NIXL's header declares, with the same names, types and values, written for
 * this library: the variable names, TELEMETRY_VERSION (the ring layout, 4), the event-type
 * enum (token for token as in nixl_telemetry.hpp's fallback, and as in NIXL's header with its
 * open pull request #2047, AGENT_ERR_XFER_STALLED = 21 appended; NIXL's merged enum ends one
 * earlier), the type count and mask, nixlTelemetryEventTypeForStatus (defined in
 * libnixl_telemetry), the error and metric type lists, the exporters' series descriptor and
 * nixlEnumStrings, and the 16-byte event record nixlTelemetryEvent. Requires NIXL's
 * nixl_types.h.
 */
#ifndef NIXL_SRC_CORE_TELEMETRY_TELEMETRY_EVENT_H
#define NIXL_SRC_CORE_TELEMETRY_TELEMETRY_EVENT_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nixl_types.h"
#include "../nixl_telemetry.h"

constexpr char TELEMETRY_BUFFER_SIZE_VAR[] = "NIXL_TELEMETRY_BUFFER_SIZE";
constexpr char TELEMETRY_RUN_INTERVAL_VAR[] = "NIXL_TELEMETRY_RUN_INTERVAL";
constexpr char TELEMETRY_ENABLED_METRICS_VAR[] = "NIXL_TELEMETRY_ENABLED_METRICS";

/**
 * The layout version of the BUFFER ring file NIXL writes (this library writes it by default, and
 * version 5 of NIXL's open pull request #2018 when NIXL_TELEMETRY_RING_VERSION says so; it reads
 * both).
 */
constexpr inline int TELEMETRY_VERSION = 4;

enum class nixl_telemetry_event_type_t : uint32_t {
    AGENT_TX_BYTES = 0,
    AGENT_RX_BYTES = 1,
    AGENT_TX_REQUESTS_NUM = 2,
    AGENT_RX_REQUESTS_NUM = 3,
    AGENT_MEMORY_REGISTERED = 4,
    AGENT_MEMORY_DEREGISTERED = 5,
    AGENT_XFER_TIME = 6,
    AGENT_XFER_POST_TIME = 7,
    AGENT_ERR_NOT_POSTED = 8,
    AGENT_ERR_INVALID_PARAM = 9,
    AGENT_ERR_BACKEND = 10,
    AGENT_ERR_NOT_FOUND = 11,
    AGENT_ERR_MISMATCH = 12,
    AGENT_ERR_NOT_ALLOWED = 13,
    AGENT_ERR_REPOST_ACTIVE = 14,
    AGENT_ERR_UNKNOWN = 15,
    AGENT_ERR_NOT_SUPPORTED = 16,
    AGENT_ERR_REMOTE_DISCONNECT = 17,
    AGENT_ERR_CANCELED = 18,
    AGENT_ERR_NO_TELEMETRY = 19,
    AGENT_TELEMETRY_EVENTS_DROPPED = 20,
    AGENT_ERR_XFER_STALLED = 21,
};

/** The number of event types (the stalled transfer, appended after the dropped-events report, is
 * the last). */
inline constexpr std::size_t nixl_telemetry_event_type_count = NIXL_TELEMETRY_EVENT_TYPE_COUNT;

static_assert(nixl_telemetry_event_type_count ==
                  static_cast<std::size_t>(nixl_telemetry_event_type_t::AGENT_ERR_XFER_STALLED) +
                      1,
              "the event-type enum and the C header's NIXL_TELEMETRY_EVENT_TYPE_COUNT differ");

/** One flag per event type, indexed by its value. */
using nixl_telemetry_metric_mask_t = std::array<bool, nixl_telemetry_event_type_count>;

/** The error event of a negative nixl_status_t; defined in libnixl_telemetry. */
[[nodiscard]] nixl_telemetry_event_type_t
nixlTelemetryEventTypeForStatus(nixl_status_t s);

/**
 * The twelve error events of NIXL's merged sources, in the order of their statuses (-1 ... -12):
 * what NIXL's exporters make series of. AGENT_ERR_XFER_STALLED is left out, as NIXL's merged
 * prometheus_mp store (its slots end at AGENT_TELEMETRY_EVENTS_DROPPED, a static_assert checks
 * these lists against them) has no slot for it; this library records a stalled transfer as
 * AGENT_ERR_UNKNOWN unless NIXL_TELEMETRY_XFER_STALLED_EVENT is true.
 */
inline constexpr std::array<nixl_telemetry_event_type_t, 12> telemetry_error_event_types = [] {
    std::array<nixl_telemetry_event_type_t, 12> types{};
    for (std::size_t i = 0; i < types.size(); ++i) {
        types[i] = static_cast<nixl_telemetry_event_type_t>(
            NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_POSTED + i);
    }
    return types;
}();

/** The nine events that are not errors, each with series of its own. */
inline constexpr std::array<nixl_telemetry_event_type_t, 9> telemetry_metric_event_types = {
    nixl_telemetry_event_type_t::AGENT_TX_BYTES,
    nixl_telemetry_event_type_t::AGENT_RX_BYTES,
    nixl_telemetry_event_type_t::AGENT_TX_REQUESTS_NUM,
    nixl_telemetry_event_type_t::AGENT_RX_REQUESTS_NUM,
    nixl_telemetry_event_type_t::AGENT_MEMORY_REGISTERED,
    nixl_telemetry_event_type_t::AGENT_MEMORY_DEREGISTERED,
    nixl_telemetry_event_type_t::AGENT_XFER_TIME,
    nixl_telemetry_event_type_t::AGENT_XFER_POST_TIME,
    nixl_telemetry_event_type_t::AGENT_TELEMETRY_EVENTS_DROPPED,
};

static_assert(telemetry_error_event_types.size() + telemetry_metric_event_types.size() + 1 ==
                  nixl_telemetry_event_type_count,
              "every event type but AGENT_ERR_XFER_STALLED is one of NIXL's errors or metrics");

/** The errors' one counter family, labelled by status. */
inline constexpr const char *telemetry_error_family_name = "agent_errors_total";
/** Its HELP text. */
inline constexpr const char *telemetry_error_family_help = "Cumulative error count by status";

/** The series an exporter derives from one event type (nullptr: the type has no such series). */
struct nixlTelemetryMetricDescriptor {
    const char *counterName;
    const char *counterHelp;
    const char *gaugeName;
    const char *gaugeHelp;
    const char *histogramName;
    const char *histogramHelp;
};

namespace nixlEnumStrings {
namespace nixlTelemetryDropin {
/** What NIXL's names and series are for one event type, indexed by its value. */
struct eventNames {
    const char *name;
    const char *statusLabel;
    nixlTelemetryMetricDescriptor series;
};

inline constexpr eventNames byType[NIXL_TELEMETRY_EVENT_TYPE_COUNT] = {
    {"agent_tx_bytes",
     nullptr,
     {"agent_tx_bytes_total",
      "Number of bytes sent by the agent",
      "agent_tx_last_bytes",
      "Bytes sent by the last request",
      nullptr,
      nullptr}},
    {"agent_rx_bytes",
     nullptr,
     {"agent_rx_bytes_total",
      "Number of bytes received by the agent",
      "agent_rx_last_bytes",
      "Bytes received by the last request",
      nullptr,
      nullptr}},
    {"agent_tx_requests_num",
     nullptr,
     {"agent_tx_requests_num_total",
      "Number of requests sent by the agent",
      nullptr,
      nullptr,
      nullptr,
      nullptr}},
    {"agent_rx_requests_num",
     nullptr,
     {"agent_rx_requests_num_total",
      "Number of requests received by the agent",
      nullptr,
      nullptr,
      nullptr,
      nullptr}},
    {"agent_memory_registered",
     nullptr,
     {"agent_memory_registered_total",
      "Cumulative memory registered",
      "agent_memory_registered_last_bytes",
      "Memory registered by the last operation",
      nullptr,
      nullptr}},
    {"agent_memory_deregistered",
     nullptr,
     {"agent_memory_deregistered_total",
      "Cumulative memory deregistered",
      "agent_memory_deregistered_last_bytes",
      "Memory deregistered by the last operation",
      nullptr,
      nullptr}},
    {"agent_xfer_time",
     nullptr,
     {"agent_xfer_time_total",
      "Cumulative sum of transfer time from start to completion",
      "agent_xfer_time",
      "Transfer time of the last request",
      "agent_xfer_time_us",
      "Distribution of transfer time from start to completion, in microseconds"}},
    {"agent_xfer_post_time",
     nullptr,
     {"agent_xfer_post_time_total",
      "Cumulative sum of time from start to posting to the back-end",
      "agent_xfer_post_time",
      "Post time of the last request",
      "agent_xfer_post_time_us",
      "Distribution of time from start to posting to the back-end, in microseconds"}},
    {"agent_err_not_posted", "not_posted", {}},
    {"agent_err_invalid_param", "invalid_param", {}},
    {"agent_err_backend", "backend", {}},
    {"agent_err_not_found", "not_found", {}},
    {"agent_err_mismatch", "mismatch", {}},
    {"agent_err_not_allowed", "not_allowed", {}},
    {"agent_err_repost_active", "repost_active", {}},
    {"agent_err_unknown", "unknown", {}},
    {"agent_err_not_supported", "not_supported", {}},
    {"agent_err_remote_disconnect", "remote_disconnect", {}},
    {"agent_err_canceled", "canceled", {}},
    {"agent_err_no_telemetry", "no_telemetry", {}},
    {"agent_telemetry_events_dropped",
     nullptr,
     {"agent_telemetry_events_dropped_total",
      "Cumulative telemetry events dropped at the producer-side staging queue",
      nullptr,
      nullptr,
      nullptr,
      nullptr}},
    {"agent_err_xfer_stalled", "xfer_stalled", {}},
};
} // namespace nixlTelemetryDropin

/** The event's name ("agent_tx_bytes", ...), "unknown_event" for another value. */
[[nodiscard]] constexpr std::string_view
telemetryEventTypeStr(const nixl_telemetry_event_type_t type) noexcept {
    const auto i = static_cast<std::size_t>(type);
    return i < nixl_telemetry_event_type_count ? nixlTelemetryDropin::byType[i].name
                                               : "unknown_event";
}

/** An error event's `status` label ("backend", ...); nullptr for the other events. */
[[nodiscard]] constexpr const char *
telemetryErrorStatusLabel(const nixl_telemetry_event_type_t type) noexcept {
    const auto i = static_cast<std::size_t>(type);
    return i < nixl_telemetry_event_type_count ? nixlTelemetryDropin::byType[i].statusLabel
                                               : nullptr;
}

/** The event's series (all nullptr for errors and unknown values). */
[[nodiscard]] constexpr nixlTelemetryMetricDescriptor
telemetryMetricDescriptor(const nixl_telemetry_event_type_t type) noexcept {
    const auto i = static_cast<std::size_t>(type);
    return i < nixl_telemetry_event_type_count ? nixlTelemetryDropin::byType[i].series
                                               : nixlTelemetryMetricDescriptor{};
}
} // namespace nixlEnumStrings

/** One event as an exporter receives it and the ring stores it: nixl_telemetry_event_t's layout. */
struct nixlTelemetryEvent {
    nixl_telemetry_event_type_t eventType_;
    uint64_t value_;

    nixlTelemetryEvent() noexcept = default;

    nixlTelemetryEvent(nixl_telemetry_event_type_t event_type, uint64_t value) noexcept
        : eventType_(event_type),
          value_(value) {}
};

static_assert(sizeof(nixlTelemetryEvent) == sizeof(nixl_telemetry_event_t) &&
                  alignof(nixlTelemetryEvent) == alignof(nixl_telemetry_event_t),
              "nixlTelemetryEvent is the 16-byte ring record");

#endif /* NIXL_SRC_CORE_TELEMETRY_TELEMETRY_EVENT_H */
