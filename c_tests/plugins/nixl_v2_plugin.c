/*
 * Test plug-in shaped like one of NIXL's own C++ telemetry plug-ins: its init function returns
 * an object whose first field is plug-in API version 2, but no exporter creator. The loader
 * must refuse it clearly.
 */
#include <stddef.h>

struct nixl_cpp_plugin_like {
    unsigned api_version; /* NIXL's nixl_telemetry_plugin_api_version::V2 */
    void *create_exporter;
    char name[32];
    char version[32];
};

static struct nixl_cpp_plugin_like plugin = {2, NULL, "nixlv2", "1.0.0"};

const void *
nixl_telemetry_plugin_init(void) {
    return &plugin;
}
