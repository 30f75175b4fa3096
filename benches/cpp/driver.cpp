// Side-by-side benchmark of the telemetry producer path: NIXL's design (nixl_baseline.hpp: a
// mutex around two reserved vectors) against our C ABI (libnixl_telemetry), in one process,
// on identical loops. Prints best-of-N and median ns/op for both, and the ratio ours/baseline
// (lower is better). Run it with `bash scripts/bench.sh`.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "nixl_baseline.hpp"
#include "nixl_telemetry.h"

namespace {

using clock_type = std::chrono::steady_clock;

constexpr int kRepeats = 7;
constexpr uint64_t kIters = 200000;
constexpr int kFlushRepeats = 101;
constexpr uint32_t kAllEvents = (1u << 21) - 1;
constexpr uint32_t kErrorEventsOnly = 0xFFFu << 8;

struct timing {
    double best;
    double median;
};

/** Runs `once` (which returns the elapsed nanoseconds of `ops` operations) kRepeats times. */
timing
measure(uint64_t ops, const std::function<double()> &once, int repeats = kRepeats) {
    std::vector<double> per_op;
    for (int i = 0; i < repeats; ++i) {
        per_op.push_back(once() / static_cast<double>(ops));
    }
    std::sort(per_op.begin(), per_op.end());
    return {per_op.front(), per_op[per_op.size() / 2]};
}

double
since(clock_type::time_point start) {
    return std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
}

/** Times kIters transfers recorded the way NIXL's agent records them, by NIXL's design. */
double
time_calls(baseline::telemetry &b) {
    auto start = clock_type::now();
    for (uint64_t i = 0; i < kIters; ++i) {
        b.addXferStats(i, true, 4096, 3);
    }
    return since(start);
}

/** The same loop through our C ABI. */
double
time_calls(nixl_telemetry_t *t) {
    auto start = clock_type::now();
    for (uint64_t i = 0; i < kIters; ++i) {
        nixl_telemetry_add_xfer_stats(t, i, true, 4096, 3);
    }
    return since(start);
}

void
check(nixl_telemetry_status_t s, const char *what) {
    if (s != NIXL_TELEMETRY_SUCCESS) {
        char msg[512];
        nixl_telemetry_last_error(msg, sizeof msg);
        std::fprintf(stderr, "%s failed (%d): %s\n", what, s, msg);
        std::exit(1);
    }
}

/** Creates one of our collectors with the given settings (NOP unless dir is given). */
nixl_telemetry_t *
ours(size_t capacity, unsigned interval_ms, const char *metrics, const char *dir = nullptr) {
    setenv("NIXL_TELEMETRY_ENABLE", "1", 1);
    setenv("NIXL_TELEMETRY_BUFFER_SIZE", std::to_string(capacity).c_str(), 1);
    setenv("NIXL_TELEMETRY_RUN_INTERVAL", std::to_string(interval_ms).c_str(), 1);
    if (metrics != nullptr) {
        setenv("NIXL_TELEMETRY_ENABLED_METRICS", metrics, 1);
    } else {
        unsetenv("NIXL_TELEMETRY_ENABLED_METRICS");
    }
    if (dir != nullptr) {
        unsetenv("NIXL_TELEMETRY_EXPORTER");
        setenv("NIXL_TELEMETRY_DIR", dir, 1);
    } else {
        setenv("NIXL_TELEMETRY_EXPORTER", "NOP", 1);
        unsetenv("NIXL_TELEMETRY_DIR");
    }
    nixl_telemetry_t *t = nullptr;
    check(nixl_telemetry_create("bench", false, &t), "nixl_telemetry_create");
    return t;
}

/** Drains `drain` every `period` on a thread until stopped. */
class drainer {
public:
    drainer(std::function<void()> drain, std::chrono::microseconds period)
        : thread_([this, drain, period] {
              while (!stop_.load(std::memory_order_relaxed)) {
                  drain();
                  std::this_thread::sleep_for(period);
              }
          }) {}

    ~drainer() {
        stop_.store(true);
        thread_.join();
    }

private:
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

struct row {
    std::string name;
    timing base;
    timing mine;
    const char *target;
};

std::vector<row> rows;

void
report(const std::string &name, timing base, timing mine, const char *target) {
    rows.push_back({name, base, mine, target});
    std::printf("%-34s baseline %7.2f / %7.2f   ours %7.2f / %7.2f   ratio %5.2f (best) %5.2f (median)   target %s\n",
                name.c_str(), base.best, base.median, mine.best, mine.median,
                mine.best / base.best, mine.median / base.median, target);
    std::fflush(stdout);
}

/**
 * Touches both of the baseline's vectors once, as a long-running NIXL agent has: otherwise the
 * first pass pays page faults on memory that reserve() did not touch (ours touches its buffers
 * at creation).
 */
void
warm(baseline::telemetry &b, size_t capacity) {
    for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i + 4 <= capacity; i += 4) b.addXferStats(1, true, 1, 1);
        b.queue().drain();
    }
    b.queue().takeDropped();
}

void
append_regime() {
    const size_t capacity = 4 * kIters + 16;
    timing base = measure(kIters, [&] {
        baseline::telemetry b(capacity, kAllEvents);
        warm(b, capacity);
        drainer d([&] { b.queue().drain(); b.queue().takeDropped(); }, std::chrono::milliseconds(100));
        return time_calls(b);
    });
    timing mine = measure(kIters, [&] {
        nixl_telemetry_t *t = ours(capacity, 100, nullptr);
        double ns = time_calls(t);
        nixl_telemetry_destroy(t);
        return ns;
    });
    report("append, 1 producer", base, mine, "<= 0.50");
}

void
drop_regime() {
    timing base = measure(kIters, [&] {
        baseline::telemetry b(64, kAllEvents);
        for (int i = 0; i < 16; ++i) b.addXferStats(1, true, 1, 1);
        return time_calls(b);
    });
    timing mine = measure(kIters, [&] {
        nixl_telemetry_t *t = ours(64, 3600000, nullptr);
        for (int i = 0; i < 16; ++i) nixl_telemetry_add_xfer_stats(t, 1, true, 1, 1);
        double ns = time_calls(t);
        nixl_telemetry_destroy(t);
        return ns;
    });
    report("drop regime (queue full)", base, mine, "<= 1.00");
}

void
gate_regime() {
    timing base = measure(kIters, [&] {
        baseline::telemetry b(64, kErrorEventsOnly);
        return time_calls(b);
    });
    timing mine = measure(kIters, [&] {
        nixl_telemetry_t *t = ours(64, 3600000, "agent_err_*");
        double ns = time_calls(t);
        nixl_telemetry_destroy(t);
        return ns;
    });
    report("deactivated-metric gate", base, mine, "<= 1.00");
}

/** Runs `producers` threads of kIters calls each while a drainer empties the queue. */
double
run_threads(int producers, const std::function<void(uint64_t)> &call) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
        threads.emplace_back([&] {
            ready.fetch_add(1);
            while (!go.load()) {
            }
            for (uint64_t i = 0; i < kIters; ++i) {
                call(i);
            }
        });
    }
    while (ready.load() != producers) {
    }
    auto start = clock_type::now();
    go.store(true);
    for (auto &t : threads) t.join();
    return since(start);
}

void
threads_regime(int producers) {
    const size_t capacity = 1 << 20;
    const uint64_t ops = kIters * producers;
    timing base = measure(ops, [&] {
        baseline::telemetry b(capacity, kAllEvents);
        warm(b, capacity);
        drainer d([&] { b.queue().drain(); b.queue().takeDropped(); }, std::chrono::microseconds(50));
        return run_threads(producers, [&](uint64_t i) { b.addXferStats(i, true, 4096, 3); });
    });
    timing mine = measure(ops, [&] {
        nixl_telemetry_t *t = ours(capacity, 3600000, nullptr);
        double ns;
        {
            drainer d([&] { nixl_telemetry_flush(t); }, std::chrono::microseconds(50));
            ns = run_threads(producers, [&](uint64_t i) {
                nixl_telemetry_add_xfer_stats(t, i, true, 4096, 3);
            });
        }
        nixl_telemetry_destroy(t);
        return ns;
    });
    const char *target = producers == 2 ? "<= 0.50 (2x throughput)" : "-";
    report(std::to_string(producers) + " producer(s) + concurrent drain", base, mine, target);
}

void
flush_into_ring() {
    const size_t events = 4095; // a ring of 4096 slots keeps 4095
    char dir_template[] = "/tmp/nixl-bench-XXXXXX";
    const char *dir = mkdtemp(dir_template);
    std::vector<baseline::event> source(events);
    for (size_t i = 0; i < events; ++i) source[i] = {0, i};
    std::vector<unsigned char> target(events * 16);
    timing copy = measure(1, [&] {
        auto start = clock_type::now();
        std::memcpy(target.data(), source.data(), events * 16);
        asm volatile("" : : "r"(target.data()) : "memory");
        return since(start);
    }, kFlushRepeats);
    nixl_telemetry_t *t = ours(4096, 3600000, nullptr, dir);
    nixl_telemetry_ring_t *ring = nullptr;
    check(nixl_telemetry_ring_open((std::string(dir) + "/bench").c_str(), &ring), "ring_open");
    timing mine = measure(1, [&] {
        for (size_t i = 0; i < events; ++i) {
            nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, i);
        }
        auto start = clock_type::now();
        nixl_telemetry_flush(t);
        double ns = since(start);
        nixl_telemetry_event_t e;
        size_t n = 0;
        while (nixl_telemetry_ring_pop(ring, &e) == NIXL_TELEMETRY_SUCCESS) ++n;
        if (n != events) {
            std::fprintf(stderr, "ring holds %zu events, expected %zu\n", n, events);
            std::exit(1);
        }
        return ns;
    }, kFlushRepeats);
    nixl_telemetry_stats_t stats;
    nixl_telemetry_get_stats(t, &stats);
    nixl_telemetry_ring_close(ring);
    nixl_telemetry_destroy(t);
    unlink((std::string(dir) + "/bench").c_str());
    rmdir(dir);
    report("flush 4095 events into the ring (ns/flush; baseline = memcpy)", copy, mine, "<= 3.00");
}

} // namespace

int
main() {
    std::printf("nixl-telemetry producer path vs NIXL's design; %d repeats of %llu ops; ns/op best / median\n",
                kRepeats, static_cast<unsigned long long>(kIters));
    std::printf("machine: %u hardware threads\n\n", std::thread::hardware_concurrency());
    append_regime();
    drop_regime();
    gate_regime();
    for (int p : {1, 2, 4}) threads_regime(p);
    flush_into_ring();
    return 0;
}
