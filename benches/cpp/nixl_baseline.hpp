// A model of NIXL's producer-side telemetry path, written for side-by-side benchmarks: the
// staging queue is one std::mutex around two std::vectors reserved to capacity; producers push
// a single event or a batch under the lock after a capacity check (drop-newest, drops counted
// in a relaxed atomic); the drainer swaps the vectors under the lock. addXferStats builds the
// enabled subset of the transfer's 4 events on the stack and pushes it as one batch, as NIXL's
// agent does.
#ifndef NIXL_TELEMETRY_BENCH_NIXL_BASELINE_HPP
#define NIXL_TELEMETRY_BENCH_NIXL_BASELINE_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace baseline {

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

    bool
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
    std::mutex mutex_;
    std::vector<event> live_;
    std::vector<event> drained_;
    std::atomic<uint64_t> dropped_{0};
};

/**
 * The producer side as NIXL's agent calls it. addXferStats is kept out of line, as in NIXL,
 * where it is defined in telemetry.cpp and called from the agent's translation unit.
 */
class telemetry {
public:
    telemetry(size_t capacity, uint32_t enabled_mask) : queue_(capacity), mask_(enabled_mask) {}

    __attribute__((noinline)) void
    addXferStats(uint64_t xfer_us, bool is_write, uint64_t bytes, uint64_t post_us) {
        event batch[4];
        size_t n = 0;
        const uint32_t bytes_type = is_write ? 0 : 1;
        const uint32_t requests_type = is_write ? 2 : 3;
        if (enabled(7)) batch[n++] = {7, post_us};
        if (enabled(6)) batch[n++] = {6, xfer_us};
        if (enabled(bytes_type)) batch[n++] = {bytes_type, bytes};
        if (enabled(requests_type)) batch[n++] = {requests_type, 1};
        queue_.tryPushBatch(batch, n);
    }

    stagingQueue &
    queue() {
        return queue_;
    }

private:
    bool
    enabled(uint32_t type) const {
        return (mask_ >> type) & 1u;
    }

    stagingQueue queue_;
    const uint32_t mask_;
};

} // namespace baseline

#endif
