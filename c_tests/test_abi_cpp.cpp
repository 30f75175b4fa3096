// C++17 use of the nixl_telemetry C ABI: the header compiles as C++ (extern "C" guards), the
// handles are owned by std::unique_ptr with custom deleters, the log callback is a noexcept
// function. Built against the shared and against the static library.
#include "nixl_telemetry.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

int g_checks = 0;

std::string last_error() {
    const std::size_t n = nixl_telemetry_last_error(nullptr, 0);
    std::string s(n, '\0');
    if (n > 0) {
        std::vector<char> buf(n + 1);
        const std::size_t again = nixl_telemetry_last_error(buf.data(), buf.size());
        if (again != n) {
            std::fprintf(stderr, "last_error length changed: %zu then %zu\n", n, again);
            std::exit(1);
        }
        s.assign(buf.data(), n);
    }
    return s;
}

[[noreturn]] void fail(const char *file, int line, const std::string &what) {
    std::fprintf(stderr, "%s:%d: CHECK failed: %s\n  last error: %s\n", file, line, what.c_str(),
                 last_error().c_str());
    std::exit(1);
}

#define CHECK(cond)                                                 \
    do {                                                            \
        ++g_checks;                                                 \
        if (!(cond)) fail(__FILE__, __LINE__, #cond);               \
    } while (0)

#define CHECK_STATUS(call, expected)                                                         \
    do {                                                                                     \
        ++g_checks;                                                                          \
        const nixl_telemetry_status_t s_ = (call);                                           \
        if (s_ != (expected))                                                                \
            fail(__FILE__, __LINE__,                                                         \
                 std::string(#call) + " returned " + std::to_string(s_) + ", expected " +    \
                     std::to_string(expected));                                              \
    } while (0)

// RAII ownership of the two handle types.
struct TelemetryDeleter {
    void operator()(nixl_telemetry_t *t) const noexcept { nixl_telemetry_destroy(t); }
};
struct RingDeleter {
    void operator()(nixl_telemetry_ring_t *r) const noexcept { nixl_telemetry_ring_close(r); }
};
using Telemetry = std::unique_ptr<nixl_telemetry_t, TelemetryDeleter>;
using Ring = std::unique_ptr<nixl_telemetry_ring_t, RingDeleter>;

std::pair<nixl_telemetry_status_t, Telemetry> create(const char *agent, bool capture) {
    nixl_telemetry_t *raw = nullptr;
    const nixl_telemetry_status_t s = nixl_telemetry_create(agent, capture, &raw);
    return {s, Telemetry(raw)};
}

std::pair<nixl_telemetry_status_t, Ring> open_ring(const std::string &path) {
    nixl_telemetry_ring_t *raw = nullptr;
    const nixl_telemetry_status_t s = nixl_telemetry_ring_open(path.c_str(), &raw);
    return {s, Ring(raw)};
}

std::vector<std::pair<std::uint32_t, std::uint64_t>> drain(nixl_telemetry_ring_t *r) {
    std::vector<std::pair<std::uint32_t, std::uint64_t>> out;
    nixl_telemetry_event_t e{};
    nixl_telemetry_status_t s;
    while ((s = nixl_telemetry_ring_pop(r, &e)) == NIXL_TELEMETRY_SUCCESS) {
        out.emplace_back(e.event_type, e.value);
    }
    if (s != NIXL_TELEMETRY_EMPTY) fail(__FILE__, __LINE__, "ring_pop ended without EMPTY");
    return out;
}

struct LogCount {
    int warnings = 0;
    std::string last;
};

void on_log(std::int32_t level, const char *message, void *user_data) noexcept {
    auto *c = static_cast<LogCount *>(user_data);
    if (level == NIXL_TELEMETRY_LOG_WARN) ++c->warnings;
    c->last = message ? message : "";
}

void clear_env() {
    for (const char *v : {"NIXL_TELEMETRY_ENABLE", "NIXL_TELEMETRY_BUFFER_SIZE",
                          "NIXL_TELEMETRY_RUN_INTERVAL", "NIXL_TELEMETRY_EXPORTER",
                          "NIXL_TELEMETRY_DIR", "NIXL_TELEMETRY_ENABLED_METRICS"}) {
        ::unsetenv(v);
    }
}

static_assert(std::is_standard_layout_v<nixl_telemetry_event_t>);
static_assert(sizeof(nixl_telemetry_event_t) == 16);
static_assert(sizeof(nixl_telemetry_stats_t) == 48);
static_assert(std::is_same_v<nixl_telemetry_status_t, std::int32_t>);
static_assert(std::is_same_v<decltype(&on_log), nixl_telemetry_log_fn_t> ||
              std::is_convertible_v<decltype(&on_log), nixl_telemetry_log_fn_t>);

void test_round_trip() {
    const char *tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/nixl-abi-cpp-XXXXXX";
    std::vector<char> dir_buf(templ.begin(), templ.end());
    dir_buf.push_back('\0');
    CHECK(::mkdtemp(dir_buf.data()) != nullptr);
    const std::string dir(dir_buf.data());

    clear_env();
    ::setenv("NIXL_TELEMETRY_EXPORTER", "BUFFER", 1);
    ::setenv("NIXL_TELEMETRY_DIR", dir.c_str(), 1);
    ::setenv("NIXL_TELEMETRY_RUN_INTERVAL", "3600000", 1);
    ::setenv("NIXL_TELEMETRY_BUFFER_SIZE", "64", 1);
    const std::string path = dir + "/cpp-agent";
    {
        auto [status, t] = create("cpp-agent", true);
        CHECK_STATUS(status, NIXL_TELEMETRY_SUCCESS);
        CHECK(t != nullptr);
        auto [ring_status, ring] = open_ring(path);
        CHECK_STATUS(ring_status, NIXL_TELEMETRY_SUCCESS);
        CHECK(nixl_telemetry_ring_capacity(ring.get()) == 64);

        CHECK_STATUS(nixl_telemetry_update_data(t.get(), NIXL_TELEMETRY_EVENT_AGENT_MEMORY_REGISTERED, 4096),
                     NIXL_TELEMETRY_SUCCESS);
        CHECK_STATUS(nixl_telemetry_update_error(t.get(), -11), NIXL_TELEMETRY_SUCCESS);
        CHECK_STATUS(nixl_telemetry_add_xfer_stats(t.get(), 250, false, 1 << 20, 25),
                     NIXL_TELEMETRY_SUCCESS);
        CHECK_STATUS(nixl_telemetry_flush(t.get()), NIXL_TELEMETRY_SUCCESS);
        const std::vector<std::pair<std::uint32_t, std::uint64_t>> expected = {
            {4, 4096}, {18, 1}, {7, 25}, {6, 250}, {1, 1u << 20}, {3, 1}};
        CHECK(drain(ring.get()) == expected);
        CHECK(nixl_telemetry_ring_len(ring.get()) == 0);

        nixl_telemetry_stats_t stats{};
        CHECK_STATUS(nixl_telemetry_get_stats(t.get(), &stats), NIXL_TELEMETRY_SUCCESS);
        CHECK(stats.events_accepted == 6 && stats.events_exported == 6);
        CHECK(stats.events_dropped == 0 && stats.events_lost == 0 && stats.flushes == 1);

        // Staged but not flushed: the unique_ptr's deleter (destroy) performs the final flush.
        CHECK_STATUS(nixl_telemetry_update_data(t.get(), NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, 5),
                     NIXL_TELEMETRY_SUCCESS);
        t.reset();
        CHECK(drain(ring.get()) == (std::vector<std::pair<std::uint32_t, std::uint64_t>>{{0, 5}}));
    }  // ring closed here

    // Error checks through the same RAII wrappers.
    {
        auto [status, t] = create("../escape", true);
        CHECK_STATUS(status, NIXL_TELEMETRY_ERR_INVALID_PARAM);
        CHECK(t == nullptr);
        CHECK(last_error().find("agent name") != std::string::npos);
        struct stat st;
        CHECK(::stat((dir + "/../escape").c_str(), &st) != 0);
    }
    {
        auto [status, ring] = open_ring(dir + "/does-not-exist");
        CHECK_STATUS(status, NIXL_TELEMETRY_ERR_NOT_FOUND);
        CHECK(ring == nullptr);
    }
    {
        auto [status, t] = create("cpp-agent", true);
        CHECK_STATUS(status, NIXL_TELEMETRY_SUCCESS);
        CHECK_STATUS(nixl_telemetry_update_data(t.get(), NIXL_TELEMETRY_EVENT_TYPE_COUNT, 1),
                     NIXL_TELEMETRY_ERR_INVALID_PARAM);
        CHECK_STATUS(nixl_telemetry_update_error(t.get(), 0), NIXL_TELEMETRY_ERR_INVALID_PARAM);
        CHECK_STATUS(nixl_telemetry_get_stats(t.get(), nullptr), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    }
    ::setenv("NIXL_TELEMETRY_BUFFER_SIZE", "100", 1);
    {
        auto [status, t] = create("cpp-agent", true);
        CHECK_STATUS(status, NIXL_TELEMETRY_ERR_INVALID_PARAM);
        CHECK(t == nullptr);
        CHECK(last_error().find("NIXL_TELEMETRY_BUFFER_SIZE") != std::string::npos);
    }
    CHECK(::unlink(path.c_str()) == 0);
    // The ring's loss count stays beside it after the agent is gone, as the ring does.
    CHECK(::unlink((dir + "/.cpp-agent.lost").c_str()) == 0);
    CHECK(::rmdir(dir.c_str()) == 0);
    clear_env();
}

void test_not_requested_and_callback() {
    clear_env();
    LogCount count;
    nixl_telemetry_set_log_callback(on_log, &count);
    ::setenv("NIXL_TELEMETRY_ENABLE", "false", 1);
    {
        auto [status, t] = create("cpp", true);
        CHECK_STATUS(status, NIXL_TELEMETRY_ERR_NO_TELEMETRY);
        CHECK(t == nullptr);
    }
    nixl_telemetry_set_log_callback(nullptr, nullptr);
    CHECK(count.warnings == 1);
    CHECK(count.last.find("NIXL_TELEMETRY_ENABLE") != std::string::npos);
    clear_env();
    {
        auto [status, t] = create("cpp", false);
        CHECK_STATUS(status, NIXL_TELEMETRY_ERR_NO_TELEMETRY);
        CHECK(t == nullptr);
    }
}

void test_names() {
    CHECK(std::string(nixl_telemetry_event_name(NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES)) ==
          "agent_rx_bytes");
    CHECK(std::string(nixl_telemetry_event_name(NIXL_TELEMETRY_EVENT_AGENT_TELEMETRY_EVENTS_DROPPED)) ==
          "agent_telemetry_events_dropped");
    CHECK(nixl_telemetry_event_name(NIXL_TELEMETRY_EVENT_TYPE_COUNT) == nullptr);
    // A null unique_ptr's deleter is never called, and the C functions accept NULL anyway.
    nixl_telemetry_destroy(nullptr);
    nixl_telemetry_ring_close(nullptr);
    CHECK(nixl_telemetry_ring_len(nullptr) == 0);
    CHECK(nixl_telemetry_ring_capacity(nullptr) == 0);
}

}  // namespace

int main() {
    ::setenv("NIXL_LOG_LEVEL", "WARN", 1);
    test_names();
    test_not_requested_and_callback();
    test_round_trip();
    std::printf("all %d C++ checks passed\n", g_checks);
    return 0;
}
