/*
 * Declarations of the part of NVIDIA's DOCA C API that the DOCA exporter plug-in uses, as the
 * plug-in understands them (see plugins/doca/src/doca.rs): opaque handles, enumerations with
 * their documented values, and the function signatures. The test double implements them.
 *
 * Written for this project's tests; NVIDIA's headers are not needed (and not used).
 */
#ifndef NIXL_TELEMETRY_DOCA_DOUBLE_H
#define NIXL_TELEMETRY_DOCA_DOUBLE_H

#include <stddef.h>
#include <stdint.h>

typedef enum doca_error {
    DOCA_SUCCESS = 0,
    DOCA_ERROR_UNKNOWN = 1,
    DOCA_ERROR_INVALID_VALUE = 6,
    DOCA_ERROR_INITIALIZATION = 8,
    DOCA_ERROR_NOT_CONNECTED = 14,
    DOCA_ERROR_BAD_STATE = 18,
} doca_error_t;

typedef enum doca_telemetry_exporter_ipc_status {
    DOCA_TELEMETRY_EXPORTER_IPC_STATUS_FAILED = -1,
    DOCA_TELEMETRY_EXPORTER_IPC_STATUS_CONNECTED,
    DOCA_TELEMETRY_EXPORTER_IPC_STATUS_DISABLED,
} doca_telemetry_exporter_ipc_status_t;

struct doca_telemetry_exporter_schema;
struct doca_telemetry_exporter_source;

typedef uint64_t doca_telemetry_exporter_timestamp_t;
typedef uint64_t doca_telemetry_exporter_label_set_id_t;
typedef uint64_t doca_telemetry_exporter_base_histogram_id_t;
typedef uint64_t doca_telemetry_exporter_histogram_id_t;

/* libdoca_common */
const char *doca_error_get_name(doca_error_t error);
const char *doca_error_get_descr(doca_error_t error);

/* libdoca_telemetry_exporter: schema, source, utilities */
doca_error_t doca_telemetry_exporter_schema_init(const char *schema_name,
                                                 struct doca_telemetry_exporter_schema **doca_schema);
void doca_telemetry_exporter_schema_set_ipc_enabled(struct doca_telemetry_exporter_schema *doca_schema);
void doca_telemetry_exporter_schema_set_ipc_sockets_dir(struct doca_telemetry_exporter_schema *doca_schema,
                                                        const char *sockets_dir);
doca_error_t doca_telemetry_exporter_schema_start(struct doca_telemetry_exporter_schema *doca_schema);
doca_error_t doca_telemetry_exporter_schema_destroy(struct doca_telemetry_exporter_schema *doca_schema);
doca_error_t doca_telemetry_exporter_source_create(struct doca_telemetry_exporter_schema *doca_schema,
                                                   struct doca_telemetry_exporter_source **doca_source);
void doca_telemetry_exporter_source_set_id(struct doca_telemetry_exporter_source *doca_source,
                                           const char *source_id);
void doca_telemetry_exporter_source_set_tag(struct doca_telemetry_exporter_source *doca_source,
                                            const char *source_tag);
doca_error_t doca_telemetry_exporter_source_start(struct doca_telemetry_exporter_source *doca_source);
doca_error_t doca_telemetry_exporter_source_flush(struct doca_telemetry_exporter_source *doca_source);
doca_error_t doca_telemetry_exporter_source_destroy(struct doca_telemetry_exporter_source *doca_source);
doca_error_t doca_telemetry_exporter_get_timestamp(doca_telemetry_exporter_timestamp_t *timestamp);
doca_error_t doca_telemetry_exporter_check_ipc_status(struct doca_telemetry_exporter_source *doca_source,
                                                      doca_telemetry_exporter_ipc_status_t *status);

/* libdoca_telemetry_exporter: metrics */
doca_error_t doca_telemetry_exporter_metrics_create_context(struct doca_telemetry_exporter_source *doca_source);
doca_error_t doca_telemetry_exporter_metrics_destroy_context(struct doca_telemetry_exporter_source *doca_source);
doca_error_t doca_telemetry_exporter_metrics_add_constant_label(struct doca_telemetry_exporter_source *doca_source,
                                                                const char *label_name,
                                                                const char *label_value);
doca_error_t doca_telemetry_exporter_metrics_add_label_names(struct doca_telemetry_exporter_source *doca_source,
                                                             const char **label_names,
                                                             size_t num_labels,
                                                             doca_telemetry_exporter_label_set_id_t *label_set_id);
doca_error_t doca_telemetry_exporter_metrics_set_flush_interval_ms(struct doca_telemetry_exporter_source *doca_source,
                                                                   uint64_t flush_interval_ms);
doca_error_t doca_telemetry_exporter_metrics_add_counter_increment(struct doca_telemetry_exporter_source *doca_source,
                                                                   doca_telemetry_exporter_timestamp_t timestamp,
                                                                   const char *metric_name,
                                                                   uint64_t increment,
                                                                   doca_telemetry_exporter_label_set_id_t label_set_id,
                                                                   const char **label_values);
doca_error_t doca_telemetry_exporter_metrics_add_gauge(struct doca_telemetry_exporter_source *doca_source,
                                                       doca_telemetry_exporter_timestamp_t timestamp,
                                                       const char *metric_name,
                                                       double value,
                                                       doca_telemetry_exporter_label_set_id_t label_set_id,
                                                       const char **label_values);
doca_error_t doca_telemetry_exporter_metrics_add_base_histogram(struct doca_telemetry_exporter_source *doca_source,
                                                                const char *metric_name,
                                                                const double *bucket_bounds,
                                                                size_t num_bounds,
                                                                doca_telemetry_exporter_label_set_id_t label_set_id,
                                                                uint64_t flush_interval_ms,
                                                                doca_telemetry_exporter_base_histogram_id_t *base_id);
doca_error_t doca_telemetry_exporter_metrics_base_histogram_observe(struct doca_telemetry_exporter_source *doca_source,
                                                                    doca_telemetry_exporter_base_histogram_id_t base_id,
                                                                    const char **label_values,
                                                                    double value,
                                                                    doca_telemetry_exporter_histogram_id_t *histogram_id);
doca_error_t doca_telemetry_exporter_metrics_flush(struct doca_telemetry_exporter_source *doca_source);

#endif
