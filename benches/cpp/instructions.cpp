// Instructions per producer call, ours (C ABI, NOP exporter) against the model of NIXL's design
// (nixl_baseline.hpp), counted by valgrind's callgrind rather than timed: the count does not
// depend on the load of the machine. Only the loops of calls are collected (callgrind client
// requests), after a warm-up that touches the buffers and runs each path once.
// Run it with `bash scripts/instructions.sh`, which prints instructions per call for each side.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <valgrind/callgrind.h>

#include "nixl_baseline.hpp"
#include "nixl_telemetry.h"

namespace {

constexpr uint64_t kCalls = 100000;
/** Large enough that nothing drops: every counted call appends. */
constexpr size_t kCapacity = 1 << 20;

void
check(nixl_telemetry_status_t s, const char *what) {
    if (s != NIXL_TELEMETRY_SUCCESS) {
        std::fprintf(stderr, "%s failed (%d)\n", what, s);
        std::exit(1);
    }
}

} // namespace

int
main(int argc, char **argv) {
    const bool mine = argc > 1 && std::strcmp(argv[1], "ours") == 0;
    const bool full = argc > 2 && std::strcmp(argv[2], "drop") == 0;
    /** Only error metrics enabled: every add_xfer_stats is deactivated. */
    const bool gated = argc > 2 && std::strcmp(argv[2], "gate") == 0;
    const size_t capacity = full ? 64 : kCapacity;
    if (mine) {
        setenv("NIXL_TELEMETRY_ENABLE", "1", 1);
        setenv("NIXL_TELEMETRY_EXPORTER", "NOP", 1);
        setenv("NIXL_TELEMETRY_BUFFER_SIZE", std::to_string(capacity).c_str(), 1);
        setenv("NIXL_TELEMETRY_RUN_INTERVAL", "3600000", 1);
        if (gated) {
            setenv("NIXL_TELEMETRY_ENABLED_METRICS", "agent_err_*", 1);
        } else {
            unsetenv("NIXL_TELEMETRY_ENABLED_METRICS");
        }
        nixl_telemetry_t *t = nullptr;
        check(nixl_telemetry_create("count", false, &t), "nixl_telemetry_create");
        for (uint64_t i = 0; i < capacity / 4; ++i) nixl_telemetry_add_xfer_stats(t, i, true, 4096, 3);
        if (!full) check(nixl_telemetry_flush(t), "nixl_telemetry_flush");
        CALLGRIND_TOGGLE_COLLECT;
        for (uint64_t i = 0; i < kCalls; ++i) nixl_telemetry_add_xfer_stats(t, i, true, 4096, 3);
        CALLGRIND_TOGGLE_COLLECT;
        nixl_telemetry_stats_t s;
        check(nixl_telemetry_get_stats(t, &s), "nixl_telemetry_get_stats");
        if (s.events_dropped != (full ? 4 * kCalls : 0) || (gated && s.events_accepted != 0)) {
            std::fprintf(stderr, "unexpected drops: %llu\n",
                         static_cast<unsigned long long>(s.events_dropped));
            return 1;
        }
        nixl_telemetry_destroy(t);
    } else {
        baseline::telemetry b(capacity, gated ? 0xFFFu << 8 : (1u << 21) - 1,
                              std::make_unique<baseline::nopExporter>());
        for (uint64_t i = 0; i < capacity / 4; ++i) b.addXferStats(i, true, 4096, 3);
        if (!full) b.flushPendingEvents();
        CALLGRIND_TOGGLE_COLLECT;
        for (uint64_t i = 0; i < kCalls; ++i) b.addXferStats(i, true, 4096, 3);
        CALLGRIND_TOGGLE_COLLECT;
    }
    std::printf("%llu\n", static_cast<unsigned long long>(kCalls));
    return 0;
}
