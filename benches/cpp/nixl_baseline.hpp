// A model of NIXL's producer-side telemetry path, written for side-by-side benchmarks: the
// staging queue is one std::mutex around two std::vectors reserved to capacity; producers push
// a batch under the lock after a capacity check (drop-newest, drops counted in a relaxed
// atomic); the flush swaps the vectors under the lock and hands each drained event to the
// exporter through a virtual call, then reports the drops. addXferStats resolves the activation
// of its 4 candidate events from a per-type bool array, returns early when none is active, and
// otherwise builds the active subset on the stack and pushes it as one batch, as NIXL's agent
// does. As in NIXL, addXferStats and tryPushBatch are out of line (NIXL defines them in
// telemetry.cpp and telemetry_staging_queue.cpp, built without LTO), and the members are laid
// out in NIXL's order.
#ifndef NIXL_TELEMETRY_BENCH_NIXL_BASELINE_HPP
#define NIXL_TELEMETRY_BENCH_NIXL_BASELINE_HPP

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace baseline {

constexpr size_t kEventTypes = 21;
constexpr uint32_t kEventsDropped = 20;

struct event {
    uint32_t type;
    uint64_t value;
};

class stagingQueue {
public:
    explicit stagingQueue(size_t capacity) : capacity_(capacity) {
        live_.reserve(capacity);
        drained_.reserve(capacity);
    }

    __attribute__((noinline)) bool
    tryPushBatch(const event *events, size_t n) {
        if (n == 0) {
            return true;
        }
        std::lock_guard<std::mutex> lock(mutex_);
        if (n > capacity_ - live_.size()) {
            dropped_.fetch_add(n, std::memory_order_relaxed);
            return false;
        }
        live_.insert(live_.end(), events, events + n);
        return true;
    }

    /** Swaps the buffers; the drained events stay valid until the next drain. */
    const std::vector<event> &
    drain() {
        std::lock_guard<std::mutex> lock(mutex_);
        drained_.clear();
        live_.swap(drained_);
        return drained_;
    }

    uint64_t
    takeDropped() {
        return dropped_.exchange(0, std::memory_order_relaxed);
    }

private:
    const size_t capacity_;
    std::vector<event> live_;
    std::vector<event> drained_;
    std::mutex mutex_;
    std::atomic<uint64_t> dropped_{0};
};

/** NIXL's exporter interface, as far as the flush uses it. */
class exporter {
public:
    virtual ~exporter() = default;
    virtual int
    exportEvent(const event &e) = 0;
    virtual void
    onBatchBegin() noexcept {}
    virtual void
    onBatchEnd() noexcept {}
};

/** NIXL's NOP exporter: drains and discards. */
class nopExporter final : public exporter {
public:
    int
    exportEvent(const event &) override {
        return 0;
    }
};

/**
 * The producer side as NIXL's agent calls it, and the flush its periodic task runs. addXferStats
 * is kept out of line, as in NIXL, where it is defined in telemetry.cpp and called from the
 * agent's translation unit.
 */
class telemetry {
public:
    telemetry(size_t capacity, uint32_t enabled_bits, std::unique_ptr<exporter> sink)
        : exporter_(std::move(sink)), enabled_(mask(enabled_bits)), queue_(capacity) {}

    __attribute__((noinline)) void
    addXferStats(uint64_t xfer_us, bool is_write, uint64_t bytes, uint64_t post_us) {
        const uint32_t bytes_type = is_write ? 0 : 1;
        const uint32_t requests_type = is_write ? 2 : 3;
        const bool post_on = enabled_[7];
        const bool time_on = enabled_[6];
        const bool bytes_on = enabled_[bytes_type];
        const bool requests_on = enabled_[requests_type];
        const size_t batch_size = static_cast<size_t>(post_on) + time_on + bytes_on + requests_on;
        if (batch_size == 0) {
            return;
        }
        std::array<event, 4> batch;
        size_t n = 0;
        if (post_on) batch[n++] = {7, post_us};
        if (time_on) batch[n++] = {6, xfer_us};
        if (bytes_on) batch[n++] = {bytes_type, bytes};
        if (requests_on) batch[n++] = {requests_type, 1};
        (void)queue_.tryPushBatch(batch.data(), n);
    }

    /**
     * NIXL's flushPendingEvents: drain, export every drained event, then report the drops since
     * the previous flush as one event. Returns the drops reported (NIXL returns true), so that
     * a benchmark can check them.
     */
    uint64_t
    flushPendingEvents() {
        const std::vector<event> &pending = queue_.drain();
        exporter_->onBatchBegin();
        for (const event &e : pending) {
            exporter_->exportEvent(e);
        }
        const uint64_t dropped = queue_.takeDropped();
        if (dropped > 0 && enabled_[kEventsDropped]) {
            exporter_->exportEvent({kEventsDropped, dropped});
        }
        exporter_->onBatchEnd();
        return dropped;
    }

private:
    static std::array<bool, kEventTypes>
    mask(uint32_t bits) {
        std::array<bool, kEventTypes> m{};
        for (size_t i = 0; i < kEventTypes; ++i) m[i] = (bits >> i) & 1u;
        return m;
    }

    const std::unique_ptr<exporter> exporter_;
    const std::array<bool, kEventTypes> enabled_;
    stagingQueue queue_;
};

} // namespace baseline

#endif
