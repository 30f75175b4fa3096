// A C++ program using nixlTelemetry (include/nixl_telemetry.hpp) exactly as NIXL's agent uses
// its own class: create per agent, addXferStats with std::chrono durations, updateErrorCount,
// memory registration; the events must arrive in the BUFFER ring in order.
#include <cassert>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "nixl_telemetry.hpp"

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            std::exit(1);                                                            \
        }                                                                            \
    } while (0)

int
main() {
    char dir_template[] = "/tmp/nixl-cpp-XXXXXX";
    const std::string dir = mkdtemp(dir_template);
    setenv("NIXL_TELEMETRY_DIR", dir.c_str(), 1);
    setenv("NIXL_TELEMETRY_RUN_INTERVAL", "3600000", 1);
    unsetenv("NIXL_TELEMETRY_EXPORTER");
    unsetenv("NIXL_TELEMETRY_ENABLE");

    {
        std::unique_ptr<nixlTelemetry> telemetry = nixlTelemetry::create("cpp-agent");
        CHECK(telemetry != nullptr);
        telemetry->updateMemoryRegistered(1 << 20);
        telemetry->addXferStats(std::chrono::microseconds(250), true, 4096,
                                std::chrono::microseconds(12));
        telemetry->addXferStats(std::chrono::microseconds(90), false, 512,
                                std::chrono::microseconds(3));
        telemetry->updateErrorCount(NIXL_ERR_REMOTE_DISCONNECT);
        telemetry->updateMemoryDeregistered(1 << 20);
    } // destruction flushes

    nixl_telemetry_ring_t *ring = nullptr;
    CHECK(nixl_telemetry_ring_open((dir + "/cpp-agent").c_str(), &ring) == 0);
    const std::vector<std::pair<uint32_t, uint64_t>> expected = {
        {4, 1 << 20}, {7, 12}, {6, 250}, {0, 4096}, {2, 1},
        {7, 3},       {6, 90}, {1, 512}, {3, 1},    {17, 1}, {5, 1 << 20},
    };
    for (const auto &[type, value] : expected) {
        nixl_telemetry_event_t e{};
        CHECK(nixl_telemetry_ring_pop(ring, &e) == NIXL_TELEMETRY_SUCCESS);
        CHECK(e.event_type == type && e.value == value);
    }
    nixl_telemetry_event_t e{};
    CHECK(nixl_telemetry_ring_pop(ring, &e) == NIXL_TELEMETRY_EMPTY);
    nixl_telemetry_ring_close(ring);

    // Genuine errors throw with the library's message.
    bool threw = false;
    try {
        (void)nixlTelemetry::create("");
    }
    catch (const std::invalid_argument &err) {
        threw = std::string(err.what()).find("non-empty agent name") != std::string::npos;
    }
    CHECK(threw);
    setenv("NIXL_TELEMETRY_BUFFER_SIZE", "lots", 1);
    threw = false;
    try {
        (void)nixlTelemetry::create("x");
    }
    catch (const std::invalid_argument &err) {
        threw = std::string(err.what()).find("NIXL_TELEMETRY_BUFFER_SIZE") != std::string::npos;
    }
    CHECK(threw);
    unsetenv("NIXL_TELEMETRY_BUFFER_SIZE");
    setenv("NIXL_TELEMETRY_EXPORTER", "nosuch", 1);
    threw = false;
    try {
        (void)nixlTelemetry::create("x");
    }
    catch (const std::runtime_error &err) {
        threw = std::string(err.what()).find("nosuch") != std::string::npos;
    }
    CHECK(threw);
    unsetenv("NIXL_TELEMETRY_EXPORTER");

    // Telemetry switched off: nullptr, as for a benign bind collision.
    setenv("NIXL_TELEMETRY_ENABLE", "off", 1);
    CHECK(nixlTelemetry::create("y", false) == nullptr);
    unsetenv("NIXL_TELEMETRY_ENABLE");

    unlink((dir + "/cpp-agent").c_str());
    rmdir(dir.c_str());
    std::printf("test_nixl_cpp: all checks passed\n");
    return 0;
}
