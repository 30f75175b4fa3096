/*
 * nixl-telemetry C++ drop-in: a nixlTelemetry class with the public interface of NIXL's core
 * telemetry class, implemented over the C ABI of libnixl_telemetry (nixl_telemetry.h).
 *
 *   auto telemetry = nixlTelemetry::create("agent-0");   // nullptr: run without telemetry
 *   if (telemetry) {
 *       telemetry->addXferStats(xfer_us, is_write, bytes, post_us);
 *       telemetry->updateErrorCount(NIXL_ERR_BACKEND);
 *   }
 *
 * Configuration comes from the NIXL_TELEMETRY_* environment, read by create(). Genuine errors
 * (an empty agent name, an invalid variable, a plug-in that cannot be loaded) throw
 * std::invalid_argument or std::runtime_error carrying the library's message.
 *
 * nixl_status_t: when NIXL's own nixl_types.h has been included first, its enum is used;
 * otherwise this header declares the same enum with NIXL's enumerators and values. (Include
 * nixl_types.h before this header if you use both.)
 */
#ifndef NIXL_TELEMETRY_HPP
#define NIXL_TELEMETRY_HPP

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "nixl_telemetry.h"

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
