/*
 * A complete nixl-telemetry exporter plug-in in C: libtelemetry_exporter_csv.so, selected with
 * NIXL_TELEMETRY_EXPORTER=csv. It appends every event as a CSV line
 *
 *     <event type>,<event name>,<value>
 *
 * to $NIXL_TELEMETRY_CSV_DIR/<agent name>.csv (created with a header line if it is new).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nixl_telemetry_plugin.h"

typedef struct {
    FILE *file;
    nixl_telemetry_plugin_event_name_fn_t event_name;
} csv_state_t;

static void
set_error(char *buf, size_t len, const char *message, const char *detail) {
    if (buf != NULL && len > 0) {
        snprintf(buf, len, "%s%s", message, detail != NULL ? detail : "");
    }
}

static nixl_telemetry_status_t
csv_create(const nixl_telemetry_plugin_params_t *params,
           void **state,
           char *error_buf,
           size_t error_len) {
    if (params == NULL || state == NULL || params->agent_name == NULL) {
        set_error(error_buf, error_len, "csv exporter: NULL argument", NULL);
        return NIXL_TELEMETRY_ERR_INVALID_PARAM;
    }
    const char *dir = getenv("NIXL_TELEMETRY_CSV_DIR");
    if (dir == NULL || dir[0] == '\0') {
        set_error(error_buf, error_len, "NIXL_TELEMETRY_CSV_DIR is not set", NULL);
        return NIXL_TELEMETRY_ERR_INVALID_PARAM;
    }
    if (strchr(params->agent_name, '/') != NULL) {
        set_error(error_buf, error_len, "csv exporter: agent name contains '/': ",
                  params->agent_name);
        return NIXL_TELEMETRY_ERR_INVALID_PARAM;
    }
    size_t path_len = strlen(dir) + strlen(params->agent_name) + 6;
    char *path = malloc(path_len);
    if (path == NULL) {
        set_error(error_buf, error_len, "csv exporter: out of memory", NULL);
        return NIXL_TELEMETRY_ERR_UNKNOWN;
    }
    snprintf(path, path_len, "%s/%s.csv", dir, params->agent_name);
    FILE *file = fopen(path, "a");
    if (file == NULL) {
        set_error(error_buf, error_len, "csv exporter: cannot open file: ", strerror(errno));
        free(path);
        return NIXL_TELEMETRY_ERR_UNKNOWN;
    }
    free(path);
    if (ftell(file) == 0) {
        fputs("event_type,event,value\n", file);
    }
    csv_state_t *csv = malloc(sizeof *csv);
    if (csv == NULL) {
        fclose(file);
        set_error(error_buf, error_len, "csv exporter: out of memory", NULL);
        return NIXL_TELEMETRY_ERR_UNKNOWN;
    }
    csv->file = file;
    csv->event_name = params->host_event_name;
    *state = csv;
    if (params->host_log != NULL) {
        params->host_log(3, "csv exporter created");
    }
    return NIXL_TELEMETRY_SUCCESS;
}

static size_t
csv_export(void *state, const nixl_telemetry_event_t *events, size_t count) {
    csv_state_t *csv = state;
    size_t kept = 0;
    for (size_t i = 0; i < count; ++i) {
        const char *name = csv->event_name != NULL ? csv->event_name(events[i].event_type) : NULL;
        int written = fprintf(csv->file, "%u,%s,%llu\n", (unsigned)events[i].event_type,
                              name != NULL ? name : "unknown_event",
                              (unsigned long long)events[i].value);
        if (written < 0) {
            break;
        }
        ++kept;
    }
    if (fflush(csv->file) != 0) {
        return 0; /* nothing of this batch is known to have reached the file */
    }
    return kept;
}

static void
csv_destroy(void *state) {
    csv_state_t *csv = state;
    if (csv != NULL) {
        fclose(csv->file);
        free(csv);
    }
}

static const nixl_telemetry_plugin_desc_t csv_plugin = {
    .api_version = NIXL_TELEMETRY_PLUGIN_API_VERSION,
    .struct_size = sizeof(nixl_telemetry_plugin_desc_t),
    .name = "csv",
    .version = "1.0.0",
    .create = csv_create,
    .export_batch = csv_export,
    .destroy = csv_destroy,
};

const nixl_telemetry_plugin_desc_t *
nixl_telemetry_plugin_init(void) {
    return &csv_plugin;
}
