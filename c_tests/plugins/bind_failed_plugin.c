/*
 * Test plug-in whose create always reports a scrape-port collision with another process, as a
 * Prometheus-style exporter does when its port is taken.
 */
#include <stdio.h>

#include "nixl_telemetry_plugin.h"

static nixl_telemetry_status_t
bind_create(const nixl_telemetry_plugin_params_t *params,
            void **state,
            char *error_buf,
            size_t error_len) {
    (void)params;
    *state = NULL;
    snprintf(error_buf, error_len,
             "Test telemetry endpoint '127.0.0.1:9' could not be bound (likely already in use "
             "by another process)");
    return NIXL_TELEMETRY_ERR_BIND_FAILED;
}

static size_t
bind_export(void *state, const nixl_telemetry_event_t *events, size_t count) {
    (void)state;
    (void)events;
    return count;
}

static void
bind_destroy(void *state) {
    (void)state;
}

static const nixl_telemetry_plugin_desc_t plugin = {
    NIXL_TELEMETRY_PLUGIN_API_VERSION, sizeof(nixl_telemetry_plugin_desc_t), "bindfail", "1.0.0",
    bind_create, bind_export, bind_destroy,
};

const nixl_telemetry_plugin_desc_t *
nixl_telemetry_plugin_init(void) {
    return &plugin;
}
