// Side-by-side benchmark of the telemetry producer path: NIXL's design (nixl_baseline.hpp: a
// mutex around two reserved vectors, NIXL's flush with a NOP exporter) against our C ABI
// (libnixl_telemetry, NOP exporter), in one process, on identical loops, in the regimes agents
// run: one producer appending, a full queue, a deactivated metric, 2 and 4 producers with a
// flush every 100 ms, 1 ms or 50 us, the default capacity flushed every 1,000 calls (buffers in
// cache), the flush of a full queue into a BUFFER ring, and the anonymous resident memory
// of staging with 64 threads (each sample in a fresh process). The two sides run alternately,
// one run each, so that drift on a noisy machine hits both alike. Prints best and median ns
// per call (MB for memory) for both and the ratio ours / baseline (lower is better).
// Built twice: ours linked statically (telemetry_bench) and through libnixl_telemetry.so
// (telemetry_bench_shared, `bash scripts/bench.sh --shared`); the baseline is compiled in.
// Run it with `bash scripts/bench.sh [part of a regime name]`; `--quick` (bench.sh --quick) runs
// every regime with a few iterations, to check that the benchmark builds and runs (its numbers
// then mean nothing).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nixl_baseline.hpp"
#include "nixl_telemetry.h"

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::microseconds;
using namespace std::chrono_literals;

/** Runs of each side per regime, calls per producer thread and run, runs of the ring flush,
 * runs of the memory regimes: 7, 200,000, 101 and 3, or 1, 2,000, 3 and 1 with --quick. */
struct sizes {
    int repeats;
    uint64_t iters;
    int flush_repeats;
    int memory_repeats;
};
sizes g = {7, 200000, 101, 3};
/** 4 producers x 200,000 calls x 4 events fit: nothing drops, whatever the flush does. */
constexpr size_t kBigQueue = 4194304;
constexpr size_t kRingEvents = 4096;
/** A flush interval no run reaches: our flush thread stays idle. */
constexpr unsigned kNeverMs = 3600000;
constexpr uint32_t kAllEvents = (1u << 21) - 1;
constexpr uint32_t kErrorEventsOnly = 0xFFFu << 8;
constexpr const char *kErrorMetricsOnly = "agent_err_*";
/** The cache-resident regime: NIXL's default capacity, a flush every this many calls. */
constexpr size_t kDefaultQueue = 4096;
constexpr uint64_t kCallsPerFlush = 1000;
/** The memory regime: threads alive, and a capacity users raise after seeing drops. */
constexpr int kMemoryThreads = 64;
constexpr size_t kMemoryQueue = 1048576;

struct timing {
    double best;
    double median;
};

timing
summarize(std::vector<double> samples) {
    std::sort(samples.begin(), samples.end());
    return {samples.front(), samples[samples.size() / 2]};
}

/** Takes `repeats` samples of each side, alternating; returns {baseline, ours}. */
std::pair<timing, timing>
measure(int repeats, const std::function<double()> &base, const std::function<double()> &mine) {
    std::vector<double> b, m;
    for (int i = 0; i < repeats; ++i) {
        b.push_back(base());
        m.push_back(mine());
    }
    return {summarize(b), summarize(m)};
}

double
since(clock_type::time_point start) {
    return std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
}

/** Times n transfers recorded the way NIXL's agent records them, by NIXL's design. */
double
time_calls(baseline::telemetry &b, uint64_t n) {
    auto start = clock_type::now();
    for (uint64_t i = 0; i < n; ++i) {
        b.addXferStats(i, true, 4096, 3);
    }
    return since(start);
}

/** The same loop through our C ABI. */
double
time_calls(nixl_telemetry_t *t, uint64_t n) {
    auto start = clock_type::now();
    for (uint64_t i = 0; i < n; ++i) {
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

void
expect(uint64_t got, uint64_t want, const std::string &what) {
    if (got != want) {
        std::fprintf(stderr, "%s: %llu, expected %llu\n", what.c_str(),
                     static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
        std::exit(1);
    }
}

nixl_telemetry_stats_t
stats_of(const nixl_telemetry_t *t) {
    nixl_telemetry_stats_t s;
    check(nixl_telemetry_get_stats(t, &s), "nixl_telemetry_get_stats");
    return s;
}

/**
 * Creates one of our collectors with the given settings: the NOP exporter, or BUFFER into
 * ring_dir. The environment is read at creation, so it is set right before.
 */
nixl_telemetry_t *
ours(size_t capacity, unsigned interval_ms, const char *metrics, const char *ring_dir = nullptr) {
    setenv("NIXL_TELEMETRY_ENABLE", "1", 1);
    setenv("NIXL_TELEMETRY_BUFFER_SIZE", std::to_string(capacity).c_str(), 1);
    setenv("NIXL_TELEMETRY_RUN_INTERVAL", std::to_string(interval_ms).c_str(), 1);
    if (metrics != nullptr) {
        setenv("NIXL_TELEMETRY_ENABLED_METRICS", metrics, 1);
    } else {
        unsetenv("NIXL_TELEMETRY_ENABLED_METRICS");
    }
    setenv("NIXL_TELEMETRY_EXPORTER", ring_dir != nullptr ? "BUFFER" : "NOP", 1);
    if (ring_dir != nullptr) {
        setenv("NIXL_TELEMETRY_DIR", ring_dir, 1);
    } else {
        unsetenv("NIXL_TELEMETRY_DIR");
    }
    nixl_telemetry_t *t = nullptr;
    check(nixl_telemetry_create("bench", false, &t), "nixl_telemetry_create");
    return t;
}

/**
 * Calls `task` every `period` on a thread (first after one period, as NIXL's timer does) until
 * destroyed; stopping does not wait out the period.
 */
class periodic {
public:
    periodic(std::function<void()> task, microseconds period)
        : thread_([this, task = std::move(task), period] {
              std::unique_lock<std::mutex> lock(mutex_);
              while (!stop_cv_.wait_for(lock, period, [this] { return stop_; })) {
                  lock.unlock();
                  task();
                  lock.lock();
              }
          }) {}

    ~periodic() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        stop_cv_.notify_one();
        thread_.join();
    }

private:
    std::mutex mutex_;
    std::condition_variable stop_cv_;
    bool stop_ = false;
    std::thread thread_;
};

struct regime {
    std::string name;
    int producers;
    size_t capacity;
    /** Zero: nothing flushes during the run. */
    microseconds flush_period;
    /** The enabled metrics exclude the transfer events: add_xfer_stats records nothing. */
    bool gated;
    /** Each producer first fills the queue, so that every timed call drops. */
    bool full;
    /**
     * Non-zero: each producer flushes after every calls_per_flush / producers of its own calls
     * (so the queue is flushed about every calls_per_flush calls), untimed: only the calls
     * are timed, with the buffers in cache.
     */
    uint64_t calls_per_flush = 0;
};

/** Untimed calls each producer makes first: fill the queue, or one call to warm the path. */
uint64_t
fill_calls(const regime &r) {
    return r.full ? r.capacity / 4 : 1;
}

/**
 * NIXL flushes from one thread, its periodic task, and its drain hands out a vector that the
 * next drain clears: producers that flush (the cache-resident regimes) take turns, as ours
 * serialises flushes itself. Two concurrent drains of the model race on that vector (a run
 * once looped forever).
 */
void
flush_side(baseline::telemetry &b) {
    static std::mutex one_flush_at_a_time;
    std::lock_guard<std::mutex> lock(one_flush_at_a_time);
    b.flushPendingEvents();
}

void
flush_side(nixl_telemetry_t *t) {
    nixl_telemetry_flush(t);
}

/** A producer's timed loop: g.iters calls, with untimed flushes when the regime has them. */
template <class Side>
double
time_loop(const regime &r, Side &side) {
    if (r.calls_per_flush == 0) return time_calls(side, g.iters);
    const uint64_t chunk = r.calls_per_flush / r.producers;
    double ns = 0;
    for (uint64_t done = 0; done < g.iters; done += chunk) {
        ns += time_calls(side, chunk);
        flush_side(side);
    }
    return ns;
}

uint64_t
expected_drops(const regime &r) {
    return r.full ? 4 * g.iters * r.producers : 0;
}

/**
 * Runs r.producers threads; each makes its untimed calls, waits for the others, then times its
 * own loop of g.iters calls. Returns the mean ns per call across threads.
 */
template <class Side>
double
run_producers(const regime &r, Side &side) {
    std::vector<double> ns(r.producers);
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int p = 0; p < r.producers; ++p) {
        threads.emplace_back([&, p] {
            time_calls(side, fill_calls(r));
            if (r.calls_per_flush > 0) {
                time_calls(side, r.calls_per_flush / r.producers);
                flush_side(side);
            }
            ready.fetch_add(1);
            while (!go.load()) std::this_thread::yield();
            ns[p] = time_loop(r, side);
        });
    }
    while (ready.load() != r.producers) std::this_thread::yield();
    go.store(true);
    for (auto &t : threads) t.join();
    return std::accumulate(ns.begin(), ns.end(), 0.0) / r.producers / g.iters;
}

/** Optional periodic flush: none for a zero period. */
std::unique_ptr<periodic>
flushing(microseconds period, std::function<void()> flush) {
    return period.count() > 0 ? std::make_unique<periodic>(std::move(flush), period) : nullptr;
}

/**
 * One run of NIXL's design. Both vectors are touched first, as in a long-running agent
 * (reserve() leaves them untouched; ours touches its buffers at creation).
 */
double
sample_baseline(const regime &r) {
    baseline::telemetry b(r.capacity, r.gated ? kErrorEventsOnly : kAllEvents,
                          std::make_unique<baseline::nopExporter>());
    for (int round = 0; round < 2; ++round) {
        time_calls(b, r.capacity / 4);
        b.flushPendingEvents();
    }
    uint64_t dropped = 0;
    double ns;
    {
        auto flusher = flushing(r.flush_period, [&] { dropped += b.flushPendingEvents(); });
        ns = run_producers(r, b);
    }
    dropped += b.flushPendingEvents();
    expect(dropped, expected_drops(r), r.name + ": baseline drops");
    return ns;
}

/**
 * One run of ours. A period of 1 ms or more is our own flush thread
 * (NIXL_TELEMETRY_RUN_INTERVAL); a shorter one, below what the variable accepts, a driver
 * thread calling nixl_telemetry_flush.
 */
double
sample_ours(const regime &r) {
    const bool own_thread = r.flush_period >= 1ms;
    const unsigned interval_ms =
        own_thread ? std::chrono::duration_cast<std::chrono::milliseconds>(r.flush_period).count()
                   : kNeverMs;
    nixl_telemetry_t *t = ours(r.capacity, interval_ms, r.gated ? kErrorMetricsOnly : nullptr);
    // Warmed as the baseline is: its buffers touched by two rounds of a full queue, as in a
    // long-running agent (our staging takes its blocks from what earlier flushes freed). On a
    // thread that then exits, so that it does not count as a thread recording during the run.
    std::thread([&] {
        for (int round = 0; round < 2; ++round) {
            time_calls(t, r.capacity / 4);
            nixl_telemetry_flush(t);
        }
    }).join();
    double ns;
    {
        auto flusher = flushing(own_thread ? 0us : r.flush_period, [t] { nixl_telemetry_flush(t); });
        ns = run_producers(r, t);
    }
    const nixl_telemetry_stats_t s = stats_of(t);
    expect(s.events_dropped, expected_drops(r), r.name + ": our drops");
    if (r.gated) expect(s.events_accepted, 0, r.name + ": our accepted events");
    nixl_telemetry_destroy(t);
    return ns;
}

struct row {
    std::string name;
    timing mine;
    timing base;
};

/** Printed together at the end, so that a message of the library cannot split the table. */
std::vector<row> rows;

void
print_table() {
    std::printf("%-36s %19s   %19s   %13s\n", "regime", "ours best / median", "baseline best / med",
                "ratio best/med");
    for (const row &r : rows) {
        std::printf("%-36s %8.1f / %8.1f   %8.1f / %8.1f   %5.2f / %5.2f\n", r.name.c_str(),
                    r.mine.best, r.mine.median, r.base.best, r.base.median,
                    r.mine.best / r.base.best, r.mine.median / r.base.median);
    }
}

void
run(const regime &r) {
    auto [base, mine] = measure(g.repeats, [&] { return sample_baseline(r); },
                                [&] { return sample_ours(r); });
    rows.push_back({r.name, mine, base});
}

/**
 * The memory floor of the append regime, in place of ours: the same 64 bytes per call (a
 * transfer's 4 events) stored in sequence into a buffer as large as the queue, written twice
 * first as the queues are, with no queue logic at all. No staging queue can append faster on
 * this machine; against the baseline's append it gives the best ratio any queue could reach.
 */
double
append_floor_sample() {
    std::vector<baseline::event> slots(kBigQueue);
    for (int round = 0; round < 2; ++round) {
        std::memset(static_cast<void *>(slots.data()), round, kBigQueue * sizeof(baseline::event));
    }
    auto start = clock_type::now();
    size_t at = 0;
    for (uint64_t i = 0; i < g.iters; ++i) {
        baseline::event *e = &slots[at];
        e[0] = {7, 3};
        e[1] = {6, i};
        e[2] = {0, 4096};
        e[3] = {2, 1};
        at = (at + 4) & (kBigQueue - 1);
        asm volatile("" : : "r"(e) : "memory");
    }
    return since(start) / g.iters;
}

void
append_floor(const regime &append) {
    auto [base, floor] = measure(g.repeats, [&] { return sample_baseline(append); },
                                 append_floor_sample);
    rows.push_back({"append floor: plain stores, no queue", floor, base});
}

/**
 * Flushing a full queue of 4096 events into an empty BUFFER ring of 4096 slots (which keeps
 * 4095: one is counted lost per flush), against a memcpy of the same 4096 x 16 bytes. Only the
 * flush call is timed; filling the queue and emptying the ring are not.
 */
void
flush_into_ring() {
    char dir_template[] = "/tmp/nixl-bench-XXXXXX";
    const char *dir = mkdtemp(dir_template);
    if (dir == nullptr) {
        std::perror("mkdtemp");
        std::exit(1);
    }
    const std::string ring_path = std::string(dir) + "/bench";
    std::vector<baseline::event> source(kRingEvents);
    for (size_t i = 0; i < kRingEvents; ++i) source[i] = {0, i};
    std::vector<unsigned char> target(kRingEvents * 16);
    nixl_telemetry_t *t = ours(kRingEvents, kNeverMs, nullptr, dir);
    nixl_telemetry_ring_t *ring = nullptr;
    check(nixl_telemetry_ring_open(ring_path.c_str(), &ring), "nixl_telemetry_ring_open");
    auto copy = [&] {
        auto start = clock_type::now();
        std::memcpy(target.data(), source.data(), kRingEvents * 16);
        asm volatile("" : : "r"(target.data()) : "memory");
        return since(start);
    };
    auto flush = [&] {
        for (size_t i = 0; i < kRingEvents; ++i) {
            check(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, i),
                  "filling the queue");
        }
        auto start = clock_type::now();
        check(nixl_telemetry_flush(t), "nixl_telemetry_flush");
        double ns = since(start);
        nixl_telemetry_event_t e;
        uint64_t n = 0;
        while (nixl_telemetry_ring_pop(ring, &e) == NIXL_TELEMETRY_SUCCESS) ++n;
        expect(n, kRingEvents - 1, "events in the ring after a flush");
        return ns;
    };
    auto [base, mine] = measure(g.flush_repeats, copy, flush);
    const nixl_telemetry_stats_t s = stats_of(t);
    expect(s.events_dropped, 0, "flush into the ring: staging drops");
    expect(s.events_lost, static_cast<uint64_t>(g.flush_repeats), "flush into the ring: events lost");
    nixl_telemetry_ring_close(ring);
    nixl_telemetry_destroy(t);
    unlink(ring_path.c_str());
    rmdir(dir);
    rows.push_back({"flush 4096 into ring (ns per flush)", mine, base});
}

/**
 * Anonymous resident memory of this process, in MB (/proc/self/statm: resident minus shared,
 * the file-backed pages, so that the library's code paged in at its first use is not counted
 * as staging memory: about 1 MB for ours, shared with every process that maps it). What a side
 * allocates once per process (our logger and settings, the allocator's arenas of 64 new
 * threads) is counted: each sample runs in a fresh process.
 */
double
resident_mb() {
    long size = 0, resident = 0, shared = 0;
    FILE *f = std::fopen("/proc/self/statm", "r");
    if (f == nullptr || std::fscanf(f, "%ld %ld %ld", &size, &resident, &shared) != 3) {
        std::perror("/proc/self/statm");
        std::exit(1);
    }
    std::fclose(f);
    return static_cast<double>(resident - shared) * sysconf(_SC_PAGESIZE) / 1e6;
}

/** Lets threads and the main thread wait for each other in phases. */
class phases {
public:
    void
    arrive() {
        std::lock_guard<std::mutex> lock(mutex_);
        ++arrived_;
        cv_.notify_all();
    }

    void
    wait_arrived(int n) {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return arrived_ >= n; });
    }

    void
    open(int phase) {
        std::lock_guard<std::mutex> lock(mutex_);
        opened_ = phase;
        cv_.notify_all();
    }

    void
    wait_open(int phase) {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return opened_ >= phase; });
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    int arrived_ = 0;
    int opened_ = 0;
};

/**
 * Anonymous resident memory (MB) that staging adds with kMemoryThreads threads alive and a
 * capacity of kMemoryQueue: each thread records `transfers` transfers, the queue is flushed,
 * each records as many again, and the process's memory is read while every thread is alive
 * with the second round staged, against before the collector was created (the threads' stacks
 * are in both sides' figures). Nothing may drop. Run in a fresh process
 * (staging_memory_fresh).
 */
double
staging_memory(bool mine, uint64_t transfers) {
    malloc_trim(0);
    const double before = resident_mb();
    std::unique_ptr<baseline::telemetry> b;
    nixl_telemetry_t *t = nullptr;
    if (mine) {
        t = ours(kMemoryQueue, kNeverMs, nullptr);
    } else {
        b = std::make_unique<baseline::telemetry>(kMemoryQueue, kAllEvents,
                                                  std::make_unique<baseline::nopExporter>());
    }
    uint64_t dropped = 0;
    auto flush = [&] {
        if (mine) {
            nixl_telemetry_flush(t);
        } else {
            dropped += b->flushPendingEvents();
        }
    };
    phases sync;
    std::vector<std::thread> threads;
    for (int i = 0; i < kMemoryThreads; ++i) {
        threads.emplace_back([&] {
            for (int round = 1; round <= 2; ++round) {
                if (mine) {
                    time_calls(t, transfers);
                } else {
                    time_calls(*b, transfers);
                }
                sync.arrive();
                sync.wait_open(round);
            }
        });
    }
    sync.wait_arrived(kMemoryThreads);
    flush();
    sync.open(1);
    sync.wait_arrived(2 * kMemoryThreads);
    const double mb = resident_mb() - before;
    sync.open(2);
    for (auto &thread : threads) thread.join();
    flush();
    if (mine) {
        dropped = stats_of(t).events_dropped;
        nixl_telemetry_destroy(t);
    }
    expect(dropped, 0, "staging memory: drops");
    return mb;
}

/** The hidden argument that makes the driver take one memory sample and print it. */
constexpr const char *kMemorySample = "--memory-sample";

/**
 * staging_memory in a fresh process (this driver run again with kMemorySample): in the same
 * process, the blocks an earlier sample freed stay resident in the allocator's arenas and are
 * reused uncounted (the first sample of ours measured 19.5 MB, the next ones 8-10).
 */
double
staging_memory_fresh(bool mine, uint64_t transfers) {
    int out[2];
    if (pipe(out) != 0) {
        std::perror("pipe");
        std::exit(1);
    }
    const std::string side = mine ? "ours" : "baseline";
    const std::string count = std::to_string(transfers);
    const pid_t child = fork();
    if (child < 0) {
        std::perror("fork");
        std::exit(1);
    }
    if (child == 0) {
        dup2(out[1], STDOUT_FILENO);
        close(out[0]);
        close(out[1]);
        const char *args[] = {"/proc/self/exe", kMemorySample, side.c_str(), count.c_str(),
                              nullptr};
        execv(args[0], const_cast<char *const *>(args));
        std::perror("execv /proc/self/exe");
        _exit(127);
    }
    close(out[1]);
    FILE *from_child = fdopen(out[0], "r");
    double mb = -1;
    const bool read = from_child != nullptr && std::fscanf(from_child, "%lf", &mb) == 1;
    if (from_child != nullptr) std::fclose(from_child);
    int status = 0;
    pid_t waited;
    do {
        waited = waitpid(child, &status, 0);
    } while (waited < 0 && errno == EINTR);
    if (waited != child) {
        std::perror("waitpid");
        std::exit(1);
    }
    if (!read || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "memory sample of %s failed (%s %d)\n", side.c_str(),
                     WIFSIGNALED(status) ? "signal" : "exit status",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        std::exit(1);
    }
    return mb;
}

void
memory_regime(const std::string &name, uint64_t transfers) {
    auto [base, mine] =
        measure(g.memory_repeats, [&] { return staging_memory_fresh(false, transfers); },
                [&] { return staging_memory_fresh(true, transfers); });
    rows.push_back({name, mine, base});
}

} // namespace

int
main(int argc, char **argv) {
    // --quick: a few iterations of every regime; another argument runs only the regimes whose
    // name contains it.
    if (argc == 4 && std::strcmp(argv[1], kMemorySample) == 0) {
        std::printf("%f\n", staging_memory(std::strcmp(argv[2], "ours") == 0,
                                           std::strtoull(argv[3], nullptr, 10)));
        return 0;
    }
    std::string only;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0) {
            g = {1, 2000, 3, 1};
        } else if (argv[i][0] == '-') {
            std::fprintf(stderr, "usage: %s [--quick] [part of a regime name]\n", argv[0]);
            return 2;
        } else {
            only = argv[i];
        }
    }
    auto wanted = [&](const std::string &name) { return name.find(only) != std::string::npos; };
    if (g.repeats == 1) {
        std::printf("QUICK RUN (--quick): a few iterations per regime, to check that the benchmark "
                    "runs; the numbers mean nothing.\n");
    }
    std::printf("nixl-telemetry (ours, C ABI, linked " NIXL_BENCH_LINKED ") vs a model of NIXL's staging queue (baseline), %u hardware threads\n"
                "ns per call, best / median of %d runs of %llu calls per producer thread; with several producers\n"
                "each thread times its own loop and a run's value is the mean per-call time across threads.\n"
                "Exporter NOP. Flush: ours by its own thread (NIXL_TELEMETRY_RUN_INTERVAL) at >= 1 ms, by a driver\n"
                "thread calling nixl_telemetry_flush at 50 us; baseline by a thread running NIXL's flush at the\n"
                "same period. Cache-resident: capacity 4096, each producer flushes (untimed) after every\n"
                "1000 / producers of its calls. Append floor: in place of ours, the same 64 bytes per call\n"
                "stored in sequence into a 64 MB buffer, no queue (the fastest any queue can append here).\n"
                "Flush row: ns per flush of a full 4096-event queue into a\n"
                "BUFFER ring, baseline = memcpy of 4096 x 16 bytes (%d runs). Memory rows: MB of anonymous\n"
                "resident memory added with 64 threads alive, BUFFER_SIZE 1,048,576, two rounds with a flush\n"
                "between, each run in a fresh process (%d runs). Ratio = ours / baseline, lower is better.\n\n",
                std::thread::hardware_concurrency(), g.repeats, static_cast<unsigned long long>(g.iters),
                g.flush_repeats, g.memory_repeats);
    std::fflush(stdout);
    const regime regimes[] = {
        {"append, 1 producer, no flush", 1, kBigQueue, 0us, false, false},
        {"drop (queue full), 1 producer", 1, 64, 0us, false, true},
        {"deactivated-metric gate, 1 producer", 1, 64, 0us, true, false},
        {"2 producers, 100 ms flush", 2, kBigQueue, 100ms, false, false},
        {"4 producers, 100 ms flush", 4, kBigQueue, 100ms, false, false},
        {"2 producers, 1 ms flush", 2, kBigQueue, 1ms, false, false},
        {"2 producers, 50 us drain", 2, kBigQueue, 50us, false, false},
        {"cache-resident, 1 producer", 1, kDefaultQueue, 0us, false, false, kCallsPerFlush},
        {"cache-resident, 2 producers", 2, kDefaultQueue, 0us, false, false, kCallsPerFlush},
    };
    for (const regime &r : regimes) {
        if (wanted(r.name)) run(r);
    }
    if (wanted("append floor")) append_floor(regimes[0]);
    if (wanted("flush 4096 into ring")) flush_into_ring();
    for (auto [name, transfers] : {std::make_pair("memory MB, 64 threads fill 1M twice",
                                                  kMemoryQueue / kMemoryThreads / 4),
                                   std::make_pair("memory MB, 64 threads x 10 transfers",
                                                  uint64_t{10})}) {
        if (wanted(name)) memory_regime(name, transfers);
    }
    print_table();
    return 0;
}
