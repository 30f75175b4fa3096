/*
 * Test double of NVIDIA's libdoca_telemetry_exporter: the functions the DOCA exporter plug-in
 * uses, with the C signatures of doca_double.h. Every call is appended as one line to the file
 * named by DOCA_DOUBLE_LOG:
 *
 *     <function> <arguments as name=value ...> [-> <result and out-values>]
 *
 * so a test can assert the exact sequence. Functions returning doca_error_t print the name of
 * what they return (through doca_error_get_name from libdoca_common, as a real DOCA library
 * depends on it). Behaviour is steered by the environment, read at each call:
 *
 *     DOCA_DOUBLE_IPC_STATUS  connected (default), failed or disabled
 *     DOCA_DOUBLE_FAIL        the name of one function that returns DOCA_ERROR_INITIALIZATION
 *
 * The double is strict about the lifecycle: metrics calls need a started source with a metrics
 * context, label sets and base histograms must exist, label values are printed with the names
 * of their set. Compiled with -DDOCA_DOUBLE_WITHOUT_OBSERVE it lacks
 * doca_telemetry_exporter_metrics_base_histogram_observe (a missing-symbol test).
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "doca_double.h"

#define MAX_SETS 8
#define MAX_LABELS 4
#define MAX_BASES 8
#define MAX_HISTOGRAMS 64
#define NAME_LEN 128

struct doca_telemetry_exporter_schema {
    char name[NAME_LEN];
    int ipc_enabled;
    int started;
};

struct doca_telemetry_exporter_source {
    struct doca_telemetry_exporter_schema *schema;
    int started;
    int metrics;
    size_t n_sets;
    size_t set_len[MAX_SETS];
    char set_names[MAX_SETS][MAX_LABELS][NAME_LEN];
    size_t n_bases;
    doca_telemetry_exporter_label_set_id_t base_set[MAX_BASES];
    size_t n_histograms;
    doca_telemetry_exporter_base_histogram_id_t histogram_base[MAX_HISTOGRAMS];
    char histogram_labels[MAX_HISTOGRAMS][512];
};

static uint64_t next_timestamp = 1000000;

static void record(const char *fmt, ...)
{
    const char *path = getenv("DOCA_DOUBLE_LOG");
    if (path == NULL || *path == '\0')
        return;
    FILE *f = fopen(path, "a");
    if (f == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

/* DOCA_ERROR_INITIALIZATION when DOCA_DOUBLE_FAIL names this function. */
static doca_error_t injected(const char *function)
{
    const char *fail = getenv("DOCA_DOUBLE_FAIL");
    return fail != NULL && strcmp(fail, function) == 0 ? DOCA_ERROR_INITIALIZATION : DOCA_SUCCESS;
}

static const char *res(doca_error_t e)
{
    return doca_error_get_name(e);
}

static doca_error_t metrics_ready(const struct doca_telemetry_exporter_source *s)
{
    if (s == NULL)
        return DOCA_ERROR_INVALID_VALUE;
    if (!s->started || !s->metrics)
        return DOCA_ERROR_BAD_STATE;
    return DOCA_SUCCESS;
}

/* {name="value",...} of the label values of set `set` into `out`. */
static doca_error_t format_labels(const struct doca_telemetry_exporter_source *s,
                                  doca_telemetry_exporter_label_set_id_t set,
                                  const char **values,
                                  char *out,
                                  size_t out_len)
{
    if (set == 0 || set > s->n_sets || values == NULL) {
        snprintf(out, out_len, "{?}");
        return DOCA_ERROR_INVALID_VALUE;
    }
    size_t used = (size_t)snprintf(out, out_len, "{");
    for (size_t i = 0; i < s->set_len[set - 1] && used < out_len; i++) {
        used += (size_t)snprintf(out + used, out_len - used, "%s%s=\"%s\"", i ? "," : "",
                                 s->set_names[set - 1][i], values[i] ? values[i] : "(null)");
    }
    if (used < out_len)
        snprintf(out + used, out_len - used, "}");
    return DOCA_SUCCESS;
}

/* Schemas alive now: the exporter must never set one up while another is being torn down. */
static _Atomic int live_schemas;

doca_error_t doca_telemetry_exporter_schema_init(const char *schema_name,
                                                 struct doca_telemetry_exporter_schema **doca_schema)
{
    if (atomic_fetch_add(&live_schemas, 1) != 0)
        record("OVERLAP schema_init while another schema is alive");
    doca_error_t e = injected(__func__);
    if (e == DOCA_SUCCESS) {
        if (schema_name == NULL || doca_schema == NULL) {
            e = DOCA_ERROR_INVALID_VALUE;
        } else {
            *doca_schema = calloc(1, sizeof(**doca_schema));
            snprintf((*doca_schema)->name, NAME_LEN, "%s", schema_name);
        }
    }
    if (e != DOCA_SUCCESS)
        atomic_fetch_sub(&live_schemas, 1);
    record("%s name=%s -> %s", __func__, schema_name ? schema_name : "(null)", res(e));
    return e;
}

void doca_telemetry_exporter_schema_set_ipc_enabled(struct doca_telemetry_exporter_schema *doca_schema)
{
    if (doca_schema != NULL)
        doca_schema->ipc_enabled = 1;
    record("%s", __func__);
}

void doca_telemetry_exporter_schema_set_ipc_sockets_dir(struct doca_telemetry_exporter_schema *doca_schema,
                                                        const char *sockets_dir)
{
    (void)doca_schema;
    record("%s dir=%s", __func__, sockets_dir ? sockets_dir : "(null)");
}

doca_error_t doca_telemetry_exporter_schema_start(struct doca_telemetry_exporter_schema *doca_schema)
{
    doca_error_t e = injected(__func__);
    if (e == DOCA_SUCCESS) {
        if (doca_schema == NULL)
            e = DOCA_ERROR_INVALID_VALUE;
        else
            doca_schema->started = 1;
    }
    record("%s -> %s", __func__, res(e));
    return e;
}

doca_error_t doca_telemetry_exporter_schema_destroy(struct doca_telemetry_exporter_schema *doca_schema)
{
    /* A slow teardown widens the window in which a concurrent setup would overlap it. */
    if (getenv("DOCA_DOUBLE_SLOW_DESTROY") != NULL) {
        struct timespec pause = {0, 2000000};
        nanosleep(&pause, NULL);
    }
    atomic_fetch_sub(&live_schemas, 1);
    free(doca_schema);
    record("%s -> %s", __func__, res(DOCA_SUCCESS));
    return DOCA_SUCCESS;
}

doca_error_t doca_telemetry_exporter_source_create(struct doca_telemetry_exporter_schema *doca_schema,
                                                   struct doca_telemetry_exporter_source **doca_source)
{
    doca_error_t e = injected(__func__);
    if (e == DOCA_SUCCESS) {
        if (doca_schema == NULL || doca_source == NULL) {
            e = DOCA_ERROR_INVALID_VALUE;
        } else if (!doca_schema->started) {
            e = DOCA_ERROR_BAD_STATE;
        } else {
            *doca_source = calloc(1, sizeof(**doca_source));
            (*doca_source)->schema = doca_schema;
        }
    }
    record("%s -> %s", __func__, res(e));
    return e;
}

void doca_telemetry_exporter_source_set_id(struct doca_telemetry_exporter_source *doca_source,
                                           const char *source_id)
{
    (void)doca_source;
    record("%s id=%s", __func__, source_id ? source_id : "(null)");
}

void doca_telemetry_exporter_source_set_tag(struct doca_telemetry_exporter_source *doca_source,
                                            const char *source_tag)
{
    (void)doca_source;
    record("%s tag=%s", __func__, source_tag ? source_tag : "(null)");
}

doca_error_t doca_telemetry_exporter_source_start(struct doca_telemetry_exporter_source *doca_source)
{
    doca_error_t e = injected(__func__);
    if (e == DOCA_SUCCESS) {
        if (doca_source == NULL)
            e = DOCA_ERROR_INVALID_VALUE;
        else
            doca_source->started = 1;
    }
    record("%s -> %s", __func__, res(e));
    return e;
}

doca_error_t doca_telemetry_exporter_source_flush(struct doca_telemetry_exporter_source *doca_source)
{
    doca_error_t e = injected(__func__);
    if (e == DOCA_SUCCESS && (doca_source == NULL || !doca_source->started))
        e = DOCA_ERROR_BAD_STATE;
    record("%s -> %s", __func__, res(e));
    return e;
}

doca_error_t doca_telemetry_exporter_source_destroy(struct doca_telemetry_exporter_source *doca_source)
{
    free(doca_source);
    record("%s -> %s", __func__, res(DOCA_SUCCESS));
    return DOCA_SUCCESS;
}

doca_error_t doca_telemetry_exporter_get_timestamp(doca_telemetry_exporter_timestamp_t *timestamp)
{
    doca_error_t e = injected(__func__);
    if (e == DOCA_SUCCESS) {
        if (timestamp == NULL)
            e = DOCA_ERROR_INVALID_VALUE;
        else
            *timestamp = next_timestamp++;
    }
    record("%s -> %s ts=%llu", __func__, res(e),
           (unsigned long long)(e == DOCA_SUCCESS ? *timestamp : 0));
    return e;
}

doca_error_t doca_telemetry_exporter_check_ipc_status(struct doca_telemetry_exporter_source *doca_source,
                                                      doca_telemetry_exporter_ipc_status_t *status)
{
    doca_error_t e = injected(__func__);
    const char *wanted = getenv("DOCA_DOUBLE_IPC_STATUS");
    const char *name = "connected";
    if (e == DOCA_SUCCESS) {
        if (doca_source == NULL || status == NULL) {
            e = DOCA_ERROR_INVALID_VALUE;
        } else if (!doca_source->schema->ipc_enabled) {
            *status = DOCA_TELEMETRY_EXPORTER_IPC_STATUS_DISABLED;
            name = "disabled";
        } else if (wanted != NULL && strcmp(wanted, "failed") == 0) {
            *status = DOCA_TELEMETRY_EXPORTER_IPC_STATUS_FAILED;
            name = "failed";
        } else if (wanted != NULL && strcmp(wanted, "disabled") == 0) {
            *status = DOCA_TELEMETRY_EXPORTER_IPC_STATUS_DISABLED;
            name = "disabled";
        } else {
            *status = DOCA_TELEMETRY_EXPORTER_IPC_STATUS_CONNECTED;
        }
    }
    record("%s -> %s status=%s", __func__, res(e), e == DOCA_SUCCESS ? name : "-");
    return e;
}

doca_error_t doca_telemetry_exporter_metrics_create_context(struct doca_telemetry_exporter_source *doca_source)
{
    doca_error_t e = injected(__func__);
    if (e == DOCA_SUCCESS) {
        if (doca_source == NULL)
            e = DOCA_ERROR_INVALID_VALUE;
        else if (!doca_source->started)
            e = DOCA_ERROR_BAD_STATE;
        else
            doca_source->metrics = 1;
    }
    record("%s -> %s", __func__, res(e));
    return e;
}

doca_error_t doca_telemetry_exporter_metrics_destroy_context(struct doca_telemetry_exporter_source *doca_source)
{
    doca_error_t e = metrics_ready(doca_source);
    if (e == DOCA_SUCCESS)
        doca_source->metrics = 0;
    record("%s -> %s", __func__, res(e));
    return e;
}

doca_error_t doca_telemetry_exporter_metrics_add_constant_label(struct doca_telemetry_exporter_source *doca_source,
                                                                const char *label_name,
                                                                const char *label_value)
{
    doca_error_t e = injected(__func__);
    if (e == DOCA_SUCCESS)
        e = metrics_ready(doca_source);
    record("%s %s=%s -> %s", __func__, label_name ? label_name : "(null)",
           label_value ? label_value : "(null)", res(e));
    return e;
}

doca_error_t doca_telemetry_exporter_metrics_add_label_names(struct doca_telemetry_exporter_source *doca_source,
                                                             const char **label_names,
                                                             size_t num_labels,
                                                             doca_telemetry_exporter_label_set_id_t *label_set_id)
{
    doca_error_t e = injected(__func__);
    char names[512] = "";
    if (e == DOCA_SUCCESS)
        e = metrics_ready(doca_source);
    if (e == DOCA_SUCCESS && (label_names == NULL || label_set_id == NULL || num_labels == 0 ||
                              num_labels > MAX_LABELS || doca_source->n_sets == MAX_SETS))
        e = DOCA_ERROR_INVALID_VALUE;
    if (e == DOCA_SUCCESS) {
        size_t set = doca_source->n_sets++;
        size_t used = 0;
        doca_source->set_len[set] = num_labels;
        for (size_t i = 0; i < num_labels; i++) {
            snprintf(doca_source->set_names[set][i], NAME_LEN, "%s", label_names[i]);
            used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", i ? "," : "",
                                     label_names[i]);
        }
        *label_set_id = set + 1;
    }
    record("%s names=%s count=%zu -> %s set=%llu", __func__, names, num_labels, res(e),
           (unsigned long long)(e == DOCA_SUCCESS ? *label_set_id : 0));
    return e;
}

doca_error_t doca_telemetry_exporter_metrics_set_flush_interval_ms(struct doca_telemetry_exporter_source *doca_source,
                                                                   uint64_t flush_interval_ms)
{
    doca_error_t e = injected(__func__);
    if (e == DOCA_SUCCESS)
        e = metrics_ready(doca_source);
    record("%s ms=%llu -> %s", __func__, (unsigned long long)flush_interval_ms, res(e));
    return e;
}

doca_error_t doca_telemetry_exporter_metrics_add_counter_increment(struct doca_telemetry_exporter_source *doca_source,
                                                                   doca_telemetry_exporter_timestamp_t timestamp,
                                                                   const char *metric_name,
                                                                   uint64_t increment,
                                                                   doca_telemetry_exporter_label_set_id_t label_set_id,
                                                                   const char **label_values)
{
    doca_error_t e = injected(__func__);
    char labels[512] = "{}";
    if (e == DOCA_SUCCESS)
        e = metrics_ready(doca_source);
    if (e == DOCA_SUCCESS)
        e = format_labels(doca_source, label_set_id, label_values, labels, sizeof(labels));
    record("%s ts=%llu name=%s value=%llu set=%llu labels=%s -> %s", __func__,
           (unsigned long long)timestamp, metric_name ? metric_name : "(null)",
           (unsigned long long)increment, (unsigned long long)label_set_id, labels, res(e));
    return e;
}

doca_error_t doca_telemetry_exporter_metrics_add_gauge(struct doca_telemetry_exporter_source *doca_source,
                                                       doca_telemetry_exporter_timestamp_t timestamp,
                                                       const char *metric_name,
                                                       double value,
                                                       doca_telemetry_exporter_label_set_id_t label_set_id,
                                                       const char **label_values)
{
    doca_error_t e = injected(__func__);
    char labels[512] = "{}";
    if (e == DOCA_SUCCESS)
        e = metrics_ready(doca_source);
    if (e == DOCA_SUCCESS)
        e = format_labels(doca_source, label_set_id, label_values, labels, sizeof(labels));
    record("%s ts=%llu name=%s value=%.17g set=%llu labels=%s -> %s", __func__,
           (unsigned long long)timestamp, metric_name ? metric_name : "(null)", value,
           (unsigned long long)label_set_id, labels, res(e));
    return e;
}

doca_error_t doca_telemetry_exporter_metrics_add_base_histogram(struct doca_telemetry_exporter_source *doca_source,
                                                                const char *metric_name,
                                                                const double *bucket_bounds,
                                                                size_t num_bounds,
                                                                doca_telemetry_exporter_label_set_id_t label_set_id,
                                                                uint64_t flush_interval_ms,
                                                                doca_telemetry_exporter_base_histogram_id_t *base_id)
{
    doca_error_t e = injected(__func__);
    char bounds[2048] = "";
    size_t used = 0;
    if (e == DOCA_SUCCESS)
        e = metrics_ready(doca_source);
    if (e == DOCA_SUCCESS && (bucket_bounds == NULL || num_bounds == 0 || base_id == NULL ||
                              label_set_id == 0 || label_set_id > doca_source->n_sets ||
                              doca_source->n_bases == MAX_BASES))
        e = DOCA_ERROR_INVALID_VALUE;
    for (size_t i = 0; bucket_bounds != NULL && i < num_bounds && used < sizeof(bounds); i++)
        used += (size_t)snprintf(bounds + used, sizeof(bounds) - used, "%s%.17g", i ? "," : "",
                                 bucket_bounds[i]);
    if (e == DOCA_SUCCESS) {
        doca_source->base_set[doca_source->n_bases] = label_set_id;
        *base_id = ++doca_source->n_bases;
    }
    record("%s name=%s bounds=%s count=%zu set=%llu flush_ms=%llu -> %s base=%llu", __func__,
           metric_name ? metric_name : "(null)", bounds, num_bounds,
           (unsigned long long)label_set_id, (unsigned long long)flush_interval_ms, res(e),
           (unsigned long long)(e == DOCA_SUCCESS ? *base_id : 0));
    return e;
}

#ifndef DOCA_DOUBLE_WITHOUT_OBSERVE
doca_error_t doca_telemetry_exporter_metrics_base_histogram_observe(struct doca_telemetry_exporter_source *doca_source,
                                                                    doca_telemetry_exporter_base_histogram_id_t base_id,
                                                                    const char **label_values,
                                                                    double value,
                                                                    doca_telemetry_exporter_histogram_id_t *histogram_id)
{
    doca_error_t e = injected(__func__);
    char labels[512] = "{}";
    size_t h = 0;
    if (e == DOCA_SUCCESS)
        e = metrics_ready(doca_source);
    if (e == DOCA_SUCCESS && (base_id == 0 || base_id > doca_source->n_bases || histogram_id == NULL))
        e = DOCA_ERROR_INVALID_VALUE;
    if (e == DOCA_SUCCESS)
        e = format_labels(doca_source, doca_source->base_set[base_id - 1], label_values, labels,
                          sizeof(labels));
    if (e == DOCA_SUCCESS) {
        /* The same base and label values always give the same concrete histogram. */
        for (h = 0; h < doca_source->n_histograms; h++)
            if (doca_source->histogram_base[h] == base_id &&
                strcmp(doca_source->histogram_labels[h], labels) == 0)
                break;
        if (h == doca_source->n_histograms) {
            if (h == MAX_HISTOGRAMS) {
                e = DOCA_ERROR_INVALID_VALUE;
            } else {
                doca_source->histogram_base[h] = base_id;
                snprintf(doca_source->histogram_labels[h], sizeof(doca_source->histogram_labels[h]),
                         "%s", labels);
                doca_source->n_histograms++;
            }
        }
        if (e == DOCA_SUCCESS)
            *histogram_id = h + 1;
    }
    record("%s base=%llu labels=%s value=%.17g -> %s histogram=%llu", __func__,
           (unsigned long long)base_id, labels, value, res(e),
           (unsigned long long)(e == DOCA_SUCCESS ? *histogram_id : 0));
    return e;
}
#endif

doca_error_t doca_telemetry_exporter_metrics_flush(struct doca_telemetry_exporter_source *doca_source)
{
    doca_error_t e = injected(__func__);
    if (e == DOCA_SUCCESS)
        e = metrics_ready(doca_source);
    record("%s -> %s", __func__, res(e));
    return e;
}
