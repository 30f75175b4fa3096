// telemetry_reader: prints the events of a NIXL telemetry ring file as they arrive.
//
// A drop-in replacement for NIXL's examples/cpp/telemetry_reader, built on the nixl-telemetry
// C ABI (include/nixl_telemetry.h). Usage:
//
//     telemetry_reader <telemetry_file_path>
//
// It consumes the events (advancing read_pos in the file, as every ring reader does), polls
// every 500 ms while the ring is empty, and on Ctrl+C (SIGINT) prints the totals and exits 0.
// Any library error is one "Error: <message>" line on stderr and exit status 1. It reads both
// ring layouts the library reads (version 4, NIXL's, and version 5 of NIXL's open pull request
// #2018) and prints the one it found; a file of another version is refused and left untouched.

#include <nixl_telemetry.h>

#include <signal.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace {

// Sleep between two polls of an empty ring, as NIXL's readers do.
constexpr long kPollIntervalNs = 500L * 1000L * 1000L;

volatile sig_atomic_t g_stop = 0;

extern "C" void on_sigint(int) { g_stop = 1; }

void print_usage() {
  std::cout << "Usage: telemetry_reader <telemetry_file_path>\n"
            << "Options:\n"
            << "  <telemetry_file_path>    Path to the telemetry file\n";
  std::cout.flush();
}

// The message of the library's most recent failure on this thread.
std::string last_error() {
  const size_t len = nixl_telemetry_last_error(nullptr, 0);
  if (len == 0) {
    return "unknown error";
  }
  std::string msg(len + 1, '\0');
  nixl_telemetry_last_error(msg.data(), msg.size());
  msg.resize(len);
  return msg;
}

class TelemetryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Owns one ring reader of the library.
class Ring {
 public:
  explicit Ring(const std::string &path) {
    const nixl_telemetry_status_t s = nixl_telemetry_ring_open(path.c_str(), &ring_);
    if (s != NIXL_TELEMETRY_SUCCESS || ring_ == nullptr) {
      throw TelemetryError(last_error());
    }
  }
  ~Ring() { nixl_telemetry_ring_close(ring_); }
  Ring(const Ring &) = delete;
  Ring &operator=(const Ring &) = delete;

  // True with *event filled, false when the ring is empty; throws on a library error.
  bool pop(nixl_telemetry_event_t *event) {
    const nixl_telemetry_status_t s = nixl_telemetry_ring_pop(ring_, event);
    if (s == NIXL_TELEMETRY_SUCCESS) {
      return true;
    }
    if (s == NIXL_TELEMETRY_EMPTY) {
      return false;
    }
    throw TelemetryError(last_error());
  }

  uint64_t capacity() const { return nixl_telemetry_ring_capacity(ring_); }
  int32_t version() const { return nixl_telemetry_ring_version(ring_); }
  uint64_t size() const { return nixl_telemetry_ring_len(ring_); }

 private:
  nixl_telemetry_ring_t *ring_ = nullptr;
};

std::string event_name(uint32_t type) {
  const char *name = nixl_telemetry_event_name(type);
  if (name == nullptr) {
    return "unknown_event_" + std::to_string(type);
  }
  return name;
}

void print_event(const nixl_telemetry_event_t &event) {
  std::cout << "\n"
            << "=== NIXL Telemetry Event ===\n"
            << "Event: " << event_name(event.event_type) << "\n"
            << "Value: " << event.value << "\n"
            << std::string(27, '=') << "\n";
  // Flush per event so a pipe (or a terminal under `| tee`) sees it live.
  std::cout.flush();
}

void install_sigint_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  // Restart interrupted writes; nanosleep still returns early with EINTR, so Ctrl+C is
  // noticed without waiting for the rest of the poll interval.
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGINT, &sa, nullptr) != 0) {
    throw std::runtime_error(std::string("cannot install the SIGINT handler: ") +
                             std::strerror(errno));
  }
}

void sleep_poll_interval() {
  struct timespec ts;
  ts.tv_sec = 0;
  ts.tv_nsec = kPollIntervalNs;
  // An early return (EINTR) is fine: the caller checks g_stop and polls again.
  nanosleep(&ts, nullptr);
}

int run(const std::string &path) {
  std::cout << "Telemetry path: " << path << std::endl;
  // A path that cannot even be checked (e.g. a parent directory without search permission)
  // is left to nixl_telemetry_ring_open, whose message says what is wrong.
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) {
    std::cerr << "Telemetry file " << path << " does not exist" << std::endl;
    return 1;
  }

  install_sigint_handler();
  std::cout << "Opening telemetry buffer: " << path << "\n"
            << "Press Ctrl+C to stop reading telemetry..." << std::endl;

  Ring ring(path);
  std::cout << "Successfully opened telemetry buffer (version: " << ring.version() << ")\n"
            << "Buffer capacity: " << ring.capacity() << " events" << std::endl;

  uint64_t total = 0;
  while (!g_stop) {
    nixl_telemetry_event_t event;
    if (ring.pop(&event)) {
      print_event(event);
      ++total;
    } else {
      sleep_poll_interval();
    }
  }

  std::cout << "\nTotal events read: " << total << "\n"
            << "Final buffer size: " << ring.size() << " events" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
    print_usage();
    return 0;
  }
  try {
    return run(argv[1]);
  } catch (const std::exception &e) {
    std::cout.flush();
    std::cerr << "Error: " << e.what() << std::endl;
    return 1;
  }
}
