/*
 * nixl-telemetry C++ drop-in: NIXL's public telemetry interface (the nixlTelemetry class, the
 * nixlTelemetryBindFailed exception, nixl_telemetry_event_type_t and
 * nixlTelemetryEventTypeForStatus), implemented over the C ABI of libnixl_telemetry
 * (nixl_telemetry.h).
 *
 *   auto telemetry = nixlTelemetry::create("agent-0");   // nullptr: run without telemetry
 *   if (telemetry) {
 *       telemetry->addXferStats(xfer_us, is_write, bytes, post_us);
 *       telemetry->updateErrorCount(NIXL_ERR_BACKEND);
 *   }
 *   nixlTelemetry explicit_one("agent-1", "BUFFER");     // NIXL's constructor: always records
 *
 * create() reads the NIXL_TELEMETRY_* environment (NIXL_TELEMETRY_ENABLE included); the
 * constructor nixlTelemetry(agent_name, exporter_name) records unconditionally with that
 * exporter and reads every other setting from the environment. Genuine errors (an empty agent
 * name, an invalid variable, a plug-in that cannot be loaded) throw std::invalid_argument or
 * std::runtime_error carrying the library's message; a scrape-port collision makes create()
 * return nullptr (after one warning) and the constructor throw nixlTelemetryBindFailed.
 *
 * NIXL's own declarations win: when NIXL's nixl_types.h, telemetry/telemetry_exporter.h and
 * telemetry_event.h are on the include path they are included here, and when they were
 * included first their guards are seen; in both cases this header declares nothing of theirs
 * again. Otherwise it declares the same names, with the same definitions token for token (so a
 * program mixing translation units of both is still one definition): nixl_status_t,
 * nixlTelemetryBindFailed, nixl_telemetry_event_type_t and the declaration of
 * nixlTelemetryEventTypeForStatus. That function is defined in libnixl_telemetry itself (a
 * C++ symbol, not inline), so a NIXL build without its telemetry sources links it from there.
 * NIXL's logger (common/nixl_log.h) is included the same way, so nixlTelemetryRouteLogsToNixl()
 * exists whenever NIXL's headers are on the include path, whatever the order of includes.
 * If NIXL's headers are reachable only from a directory this header cannot see, include them
 * before this one.
 */
#ifndef NIXL_TELEMETRY_HPP
#define NIXL_TELEMETRY_HPP

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "nixl_telemetry.h"

#if defined(__has_include)
#if !defined(_NIXL_TYPES_H) && __has_include("nixl_types.h")
#include "nixl_types.h"
#endif
#if !defined(__NIXL_LOG_H) && __has_include("common/nixl_log.h")
#include "common/nixl_log.h"
#endif
#if !defined(NIXL_SRC_API_CPP_TELEMETRY_TELEMETRY_EXPORTER_H) && \
    __has_include("telemetry/telemetry_exporter.h") && __has_include("telemetry_event.h")
#include "telemetry/telemetry_exporter.h"
#endif
#endif

#ifndef _NIXL_TYPES_H
/** NIXL's status codes (same enumerators and values as nixl_types.h). */
enum nixl_status_t {
    NIXL_IN_PROG = 1,
    NIXL_SUCCESS = 0,
    NIXL_ERR_NOT_POSTED = -1,
    NIXL_ERR_INVALID_PARAM = -2,
    NIXL_ERR_BACKEND = -3,
    NIXL_ERR_NOT_FOUND = -4,
    NIXL_ERR_MISMATCH = -5,
    NIXL_ERR_NOT_ALLOWED = -6,
    NIXL_ERR_REPOST_ACTIVE = -7,
    NIXL_ERR_UNKNOWN = -8,
    NIXL_ERR_NOT_SUPPORTED = -9,
    NIXL_ERR_REMOTE_DISCONNECT = -10,
    NIXL_ERR_CANCELED = -11,
    NIXL_ERR_NO_TELEMETRY = -12
};
#endif

#ifndef NIXL_SRC_API_CPP_TELEMETRY_TELEMETRY_EXPORTER_H
/**
 * NIXL's exception for a scrape-port bind collision (telemetry/telemetry_exporter.h): thrown by
 * the nixlTelemetry(agent_name, exporter_name) constructor when the exporter's scrape endpoint
 * could not bind its port (NIXL_TELEMETRY_ERR_BIND_FAILED), so the caller may continue
 * without a telemetry sink.
 */
class nixlTelemetryBindFailed : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};
#endif

#ifndef NIXL_SRC_CORE_TELEMETRY_TELEMETRY_EVENT_H
/**
 * NIXL's event types (telemetry_event.h): the NIXL_TELEMETRY_EVENT_* values of the C header,
 * with AGENT_ERR_XFER_STALLED = 21 of NIXL's open pull request #2047 appended (NIXL's merged
 * enum ends at AGENT_TELEMETRY_EVENTS_DROPPED; every value they share is the same).
 */
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

/**
 * The error event of a negative nixl_status_t (-1 -> AGENT_ERR_NOT_POSTED ... -12 ->
 * AGENT_ERR_NO_TELEMETRY; -13, NIXL_ERR_XFER_STALLED of NIXL's open pull request #2047 ->
 * AGENT_ERR_XFER_STALLED when NIXL_TELEMETRY_XFER_STALLED_EVENT is true, else
 * AGENT_ERR_UNKNOWN), with NIXL's signature. Defined in libnixl_telemetry. NIXL aborts for any
 * other status; this library logs an error and returns AGENT_ERR_UNKNOWN.
 */
[[nodiscard]] nixl_telemetry_event_type_t
nixlTelemetryEventTypeForStatus(nixl_status_t s);
#endif

static_assert(static_cast<uint32_t>(nixl_telemetry_event_type_t::AGENT_TX_BYTES) ==
                      NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES &&
                  static_cast<uint32_t>(nixl_telemetry_event_type_t::AGENT_ERR_NOT_POSTED) ==
                      NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_POSTED &&
                  static_cast<uint32_t>(
                      nixl_telemetry_event_type_t::AGENT_TELEMETRY_EVENTS_DROPPED) ==
                      NIXL_TELEMETRY_EVENT_AGENT_TELEMETRY_EVENTS_DROPPED,
              "nixl_telemetry_event_type_t and the C header's event values differ");

/**
 * Routes this library's messages to `sink(level, message)` (level: NIXL_TELEMETRY_LOG_ERROR
 * ... NIXL_TELEMETRY_LOG_TRACE; the message is valid during the call only), or back to stderr
 * for nullptr. The sink is called from any thread (notably the flush thread) and must be
 * thread-safe. The threshold stays NIXL_LOG_LEVEL (default WARN).
 */
inline void
nixlTelemetrySetLogSink(void (*sink)(int32_t level, const char *message) noexcept) noexcept {
    using sink_fn_t = void (*)(int32_t, const char *) noexcept;
    if (sink == nullptr) {
        nixl_telemetry_set_log_callback(nullptr, nullptr);
        return;
    }
    nixl_telemetry_set_log_callback(
        [](int32_t level, const char *message, void *user_data) noexcept {
            reinterpret_cast<sink_fn_t>(user_data)(level, message);
        },
        reinterpret_cast<void *>(sink));
}

#ifdef __NIXL_LOG_H
/**
 * Inside NIXL (its common/nixl_log.h included before this header): routes this library's
 * messages into NIXL's logger, ERROR/WARN/INFO/DEBUG/TRACE to NIXL_ERROR/NIXL_WARN/NIXL_INFO/
 * NIXL_DEBUG/NIXL_TRACE, so they appear, filtered and formatted, with NIXL's own (absl) logs.
 * Call once, before creating telemetry (for example where the agent initialises logging).
 */
inline void
nixlTelemetryRouteLogsToNixl() noexcept {
    nixlTelemetrySetLogSink([](int32_t level, const char *message) noexcept {
        try {
            switch (level) {
            case NIXL_TELEMETRY_LOG_ERROR:
                NIXL_ERROR << message;
                break;
            case NIXL_TELEMETRY_LOG_WARN:
                NIXL_WARN << message;
                break;
            case NIXL_TELEMETRY_LOG_INFO:
                NIXL_INFO << message;
                break;
            case NIXL_TELEMETRY_LOG_DEBUG:
                NIXL_DEBUG << message;
                break;
            default:
                NIXL_TRACE << message;
                break;
            }
        }
        catch (...) {
            /* a logger must not throw into the library */
        }
    });
}
#endif

/** One agent's telemetry; records events without blocking and flushes them periodically. */
class nixlTelemetry {
public:
    /**
     * Creates the telemetry of `agent_name` from the environment, as NIXL's agent does when
     * telemetry is requested. Returns nullptr when telemetry ends up off: NIXL_TELEMETRY_ENABLE
     * is false, or the exporter's scrape port is held by another process (one warning is
     * logged; the agent runs without a sink). Throws std::invalid_argument for invalid
     * arguments or configuration and std::runtime_error for other failures.
     */
    [[nodiscard]] static std::unique_ptr<nixlTelemetry>
    create(const std::string &agent_name) {
        return create(agent_name, true);
    }

    /** As create(agent_name), with NIXL's captureTelemetry agent flag. */
    [[nodiscard]] static std::unique_ptr<nixlTelemetry>
    create(const std::string &agent_name, bool capture_telemetry) {
        nixl_telemetry_t *handle = nullptr;
        const nixl_telemetry_status_t status =
            nixl_telemetry_create(agent_name.c_str(), capture_telemetry, &handle);
        switch (status) {
        case NIXL_TELEMETRY_SUCCESS:
            return std::unique_ptr<nixlTelemetry>(new nixlTelemetry(handle));
        case NIXL_TELEMETRY_ERR_NO_TELEMETRY:
        case NIXL_TELEMETRY_ERR_BIND_FAILED:
            return nullptr;
        case NIXL_TELEMETRY_ERR_INVALID_PARAM:
            throw std::invalid_argument(lastError());
        default:
            throw std::runtime_error(lastError());
        }
    }

    /**
     * NIXL's constructor: records unconditionally (NIXL_TELEMETRY_ENABLE is not consulted)
     * into the exporter `exporter_name` (BUFFER, NOP, TRACE or a plug-in; empty: the
     * environment's rule), every other setting from the environment. Throws
     * nixlTelemetryBindFailed on a scrape-port collision, std::invalid_argument for invalid
     * arguments or configuration, std::runtime_error for other failures.
     */
    nixlTelemetry(const std::string &agent_name, const std::string &exporter_name)
        : handle_(make(agent_name, exporter_name.c_str())) {}

    /**
     * As the constructor above, with every programmatic option of the C ABI (buffer size,
     * run interval, directory, metric allowlist; zero or NULL fields fall back to the
     * environment). `options.struct_size` is set here.
     */
    nixlTelemetry(const std::string &agent_name, nixl_telemetry_options_t options)
        : handle_(make(agent_name, options)) {}

    ~nixlTelemetry() {
        nixl_telemetry_destroy(handle_); /* final flush, then release */
    }

    nixlTelemetry(const nixlTelemetry &) = delete;
    nixlTelemetry &
    operator=(const nixlTelemetry &) = delete;

    void
    updateTxBytes(uint64_t tx_bytes) {
        nixl_telemetry_update_data(handle_, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, tx_bytes);
    }

    void
    updateRxBytes(uint64_t rx_bytes) {
        nixl_telemetry_update_data(handle_, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, rx_bytes);
    }

    void
    updateTxRequestsNum(uint32_t num) {
        nixl_telemetry_update_data(handle_, NIXL_TELEMETRY_EVENT_AGENT_TX_REQUESTS_NUM, num);
    }

    void
    updateRxRequestsNum(uint32_t num) {
        nixl_telemetry_update_data(handle_, NIXL_TELEMETRY_EVENT_AGENT_RX_REQUESTS_NUM, num);
    }

    /** Counts one error; `error_type` must be a negative status (others are ignored). */
    void
    updateErrorCount(nixl_status_t error_type) {
        nixl_telemetry_update_error(handle_, static_cast<int32_t>(error_type));
    }

    void
    updateMemoryRegistered(uint64_t memory_registered) {
        nixl_telemetry_update_data(
            handle_, NIXL_TELEMETRY_EVENT_AGENT_MEMORY_REGISTERED, memory_registered);
    }

    void
    updateMemoryDeregistered(uint64_t memory_deregistered) {
        nixl_telemetry_update_data(
            handle_, NIXL_TELEMETRY_EVENT_AGENT_MEMORY_DEREGISTERED, memory_deregistered);
    }

    /**
     * Records one completed transfer as a single all-or-none batch of the enabled subset of:
     * post time, transfer time, bytes and one request (TX when `is_write`).
     */
    void
    addXferStats(std::chrono::microseconds xfer_time,
                 bool is_write,
                 uint64_t bytes,
                 std::chrono::microseconds post_time) {
        nixl_telemetry_add_xfer_stats(handle_,
                                      static_cast<uint64_t>(xfer_time.count()),
                                      is_write,
                                      bytes,
                                      static_cast<uint64_t>(post_time.count()));
    }

    /** Drains staged events into the exporter now. */
    void
    flush() {
        nixl_telemetry_flush(handle_);
    }

    /** Counters since creation (accepted, dropped, exported, lost, flushes, drop reports). */
    nixl_telemetry_stats_t
    stats() const {
        nixl_telemetry_stats_t s{};
        nixl_telemetry_get_stats(handle_, &s);
        return s;
    }

    /** The underlying C handle (owned by this object). */
    nixl_telemetry_t *
    handle() const noexcept {
        return handle_;
    }

private:
    explicit nixlTelemetry(nixl_telemetry_t *handle) : handle_(handle) {}

    static nixl_telemetry_t *
    make(const std::string &agent_name, const char *exporter_name) {
        nixl_telemetry_options_t options{};
        options.exporter_name = exporter_name;
        return make(agent_name, options);
    }

    static nixl_telemetry_t *
    make(const std::string &agent_name, nixl_telemetry_options_t options) {
        options.struct_size = sizeof(options);
        nixl_telemetry_t *handle = nullptr;
        switch (nixl_telemetry_create_with_options(agent_name.c_str(), &options, &handle)) {
        case NIXL_TELEMETRY_SUCCESS:
            return handle;
        case NIXL_TELEMETRY_ERR_BIND_FAILED:
            throw nixlTelemetryBindFailed(lastError());
        case NIXL_TELEMETRY_ERR_INVALID_PARAM:
            throw std::invalid_argument(lastError());
        default:
            throw std::runtime_error(lastError());
        }
    }

    static std::string
    lastError() {
        const size_t len = nixl_telemetry_last_error(nullptr, 0);
        std::string message(len, '\0');
        if (len > 0) {
            nixl_telemetry_last_error(&message[0], len + 1);
        }
        return message;
    }

    nixl_telemetry_t *handle_;
};

#endif /* NIXL_TELEMETRY_HPP */
