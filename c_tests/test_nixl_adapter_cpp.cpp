// This library's exporters as NIXL's own plug-in manager sees them: the adapter installed as
// <libdir>/plugins/nixl/libtelemetry_exporter_<NAME>.so presents the C plug-in <NAME> one
// directory up as a NIXL C++ plug-in (API version 2). This program loads the adapter as NIXL's
// manager does (dlopen, nixl_telemetry_plugin_init, create_exporter, withBatch/exportEvent)
// over the example CSV plug-in and the bind-failure test plug-in, checks that it will not open
// an untrusted plug-in, then has the library itself load the same adapter through its C++ bridge.
#include "nixl_cpp_plugin_v2.hpp"

#include "check.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

static const std::string adapters = std::string(NIXL_TEST_PLUGIN_DIR) + "/nixl/";

static nixlTelemetryPlugin *
open_like_nixl(const std::string &file, const std::string &dir = adapters) {
    void *handle = dlopen((dir + file).c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    CHECK(handle != nullptr);
    using init_fn_t = nixlTelemetryPlugin *(*)();
    auto init = reinterpret_cast<init_fn_t>(dlsym(handle, "nixl_telemetry_plugin_init"));
    CHECK(init != nullptr);
    return init();
}

/** The file's contents, empty when it is missing (check.h's read_file). */
static std::string
read_all(const std::string &path) {
    size_t len = 0;
    unsigned char *data = read_file(path.c_str(), &len);
    const std::string text = data != nullptr ? std::string(reinterpret_cast<char *>(data), len) : "";
    std::free(data);
    return text;
}

static void
nixls_manager_drives_a_c_plugin(const std::string &dir) {
    nixlTelemetryPlugin *plugin = open_like_nixl("libtelemetry_exporter_csv.so");
    CHECK(plugin != nullptr);
    CHECK(plugin->api_version == nixl_telemetry_plugin_api_version::V2);
    CHECK(plugin->getName() == "csv");
    {
        std::unique_ptr<nixlTelemetryExporter> exporter = plugin->create_exporter({"agent-n", 64});
        CHECK(exporter != nullptr);
        CHECK(exporter->getMaxEventsBuffered() == 64);
        exporter->withBatch([&] {
            CHECK(exporter->exportEvent({nixl_telemetry_event_type_t::AGENT_TX_BYTES, 4096}) ==
                  NIXL_SUCCESS);
            CHECK(exporter->exportEvent({nixl_telemetry_event_type_t::AGENT_ERR_BACKEND, 1}) ==
                  NIXL_SUCCESS);
            // Batched: nothing is written before the batch ends.
            CHECK(read_all(dir + "/agent-n.csv").find("agent_tx_bytes") == std::string::npos);
        });
        exporter->withBatch([] {}); // NIXL's idle flush: the C plug-in's empty batch
        // Outside a batch an event is exported at once.
        CHECK(exporter->exportEvent({nixl_telemetry_event_type_t::AGENT_RX_BYTES, 7}) ==
              NIXL_SUCCESS);
    }
    CHECK(read_all(dir + "/agent-n.csv") == "event_type,event,value\n"
                                            "0,agent_tx_bytes,4096\n"
                                            "10,agent_err_backend,1\n"
                                            "1,agent_rx_bytes,7\n");
}

static void
a_bind_collision_is_nixls_exception() {
    nixlTelemetryPlugin *plugin = open_like_nixl("libtelemetry_exporter_bindfail.so");
    CHECK(plugin != nullptr && plugin->getName() == "bindfail");
    bool caught = false;
    try {
        plugin->create_exporter({"agent-b", 64});
    }
    catch (const nixlTelemetryBindFailed &e) {
        caught = std::strstr(e.what(), "could not be bound") != nullptr;
    }
    CHECK(caught);
}

static void
a_missing_c_plugin_gives_no_plugin_object() {
    CHECK(open_like_nixl("libtelemetry_exporter_nosuch.so") == nullptr);
}

static void
an_untrusted_c_plugin_is_not_opened(const std::string &dir) {
    // The CSV plug-in in a directory anyone may write to, the adapter below it in one that is
    // fine: the adapter applies the library's checks to the file it would run.
    namespace fs = std::filesystem;
    const fs::path open_dir = fs::path(dir) / "world-writable";
    fs::create_directories(open_dir / "nixl");
    const std::string file = "libtelemetry_exporter_csv.so";
    fs::copy_file(std::string(NIXL_TEST_PLUGIN_DIR) + "/" + file, open_dir / file);
    fs::copy_file(adapters + file, open_dir / "nixl" / file);
    CHECK(chmod(open_dir.c_str(), 0777) == 0);
    CHECK(chmod((open_dir / "nixl").c_str(), 0755) == 0);
    CHECK(open_like_nixl(file, (open_dir / "nixl").string() + "/") == nullptr);
}

static void
the_library_loads_the_adapter_through_its_bridge(const std::string &dir) {
    CHECK(nixl_telemetry_add_plugin_dir(adapters.c_str()) == NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_options_t options{};
    options.struct_size = sizeof(options);
    options.exporter_name = "csv";
    nixl_telemetry_t *t = nullptr;
    CHECK(nixl_telemetry_create_with_options("agent-l", &options, &t) == NIXL_TELEMETRY_SUCCESS);
    CHECK(nixl_telemetry_add_xfer_stats(t, 120, true, 4096, 8) == NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_destroy(t);
    CHECK(read_all(dir + "/agent-l.csv") == "event_type,event,value\n"
                                            "7,agent_xfer_post_time,8\n"
                                            "6,agent_xfer_time,120\n"
                                            "0,agent_tx_bytes,4096\n"
                                            "2,agent_tx_requests_num,1\n");
}

int
main() {
    char dir_template[] = "/tmp/nixl-manager-adapter-XXXXXX";
    const std::string dir = mkdtemp(dir_template);
    setenv("NIXL_TELEMETRY_CSV_DIR", dir.c_str(), 1);
    setenv("NIXL_TELEMETRY_RUN_INTERVAL", "3600000", 1);
    unsetenv("NIXL_TELEMETRY_ENABLE");
    unsetenv("NIXL_TELEMETRY_BUFFER_SIZE");

    nixls_manager_drives_a_c_plugin(dir);
    a_bind_collision_is_nixls_exception();
    a_missing_c_plugin_gives_no_plugin_object();
    an_untrusted_c_plugin_is_not_opened(dir);
    the_library_loads_the_adapter_through_its_bridge(dir);

    rm_rf(dir.c_str());
    std::printf("test_nixl_adapter_cpp: all checks passed\n");
    return 0;
}
