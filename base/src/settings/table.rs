//! The table: every setting's declaration, a named constant each ([`PROMETHEUS_PORT`], ...),
//! all of them in [`SETTINGS`], found by name with [`find`]; and the `DYN_FPM_*` names, which are
//! not settings but are known so that NIXL's configuration file can report them.

use super::setting::{Consumer, Kind, Setting};

use Consumer::{Core, Doca, Otlp, Prometheus, PrometheusMp, RemoteWrite, Trace};

/// Declares one setting: `declare!(CONST, "NAME", Kind, default, [readers], "doc")`.
macro_rules! declare {
    ($(#[$attr:meta])* $id:ident, $name:literal, $kind:ident, $default:expr, [$($r:ident),+], $doc:literal) => {
        $(#[$attr])*
        #[doc = concat!("`", $name, "`: ", $doc)]
        pub const $id: Setting = Setting {
            name: $name,
            kind: Kind::$kind,
            default: $default,
            readers: &[$($r),+],
            doc: $doc,
        };
    };
}

declare!(
    ENABLE,
    "NIXL_TELEMETRY_ENABLE",
    Bool,
    None,
    [Core],
    "Turns telemetry on or off; unset, the capture_telemetry argument decides."
);
declare!(
    BUFFER_SIZE,
    "NIXL_TELEMETRY_BUFFER_SIZE",
    Unsigned,
    Some("4096"),
    [Core],
    "Staging capacity of each collector (one budget its producer threads share) and ring size, in events (1..16777216)."
);
declare!(
    RUN_INTERVAL,
    "NIXL_TELEMETRY_RUN_INTERVAL",
    Millis,
    Some("100"),
    [Core],
    "Flush period in milliseconds (at least 1)."
);
declare!(
    EXPORTER,
    "NIXL_TELEMETRY_EXPORTER",
    Text,
    None,
    [Core],
    "BUFFER, NOP, TRACE or a plug-in name; unset, BUFFER if NIXL_TELEMETRY_DIR is set, else NOP."
);
declare!(
    DIR,
    "NIXL_TELEMETRY_DIR",
    Text,
    None,
    [Core],
    "Existing directory of the ring files, one per agent; selects BUFFER."
);
declare!(
    RING_VERSION,
    "NIXL_TELEMETRY_RING_VERSION",
    Unsigned,
    Some("4"),
    [Core],
    "Layout version of the ring files BUFFER writes: 4 (NIXL's) or 5 (the 512-byte header of NIXL's open pull request #2018); readers read both."
);
declare!(
    XFER_STALLED_EVENT,
    "NIXL_TELEMETRY_XFER_STALLED_EVENT",
    Bool,
    Some("false"),
    [Core, Prometheus, Doca, RemoteWrite, Otlp],
    "True records NIXL_ERR_XFER_STALLED (-13) as agent_err_xfer_stalled (21, NIXL's open pull request #2047) and exposes status xfer_stalled; false records it as agent_err_unknown."
);
declare!(
    ENABLED_METRICS,
    "NIXL_TELEMETRY_ENABLED_METRICS",
    Text,
    None,
    [Core],
    "Comma list of globs over the event names to record; unset, all."
);
declare!(
    PLUGIN_DIR,
    "NIXL_PLUGIN_DIR",
    Text,
    None,
    [Core],
    "A directory searched for exporter plug-ins (absolute)."
);
declare!(
    LOG_LEVEL,
    "NIXL_LOG_LEVEL",
    Text,
    Some("WARN"),
    [Core],
    "TRACE, DEBUG, INFO, WARN, ERROR or FATAL: the least severe message logged."
);
declare!(
    TRACE_PATH,
    "NIXL_TELEMETRY_TRACE_PATH",
    Text,
    Some("/tmp/nixl-telemetry"),
    [Trace],
    "Path prefix of the TRACE exporter's gzip segments."
);
declare!(
    TRACE_ROLL_BYTES,
    "NIXL_TELEMETRY_TRACE_ROLL_BYTES",
    Unsigned,
    Some("268435456"),
    [Trace],
    "Uncompressed bytes after which a TRACE segment is closed and the next begun."
);
declare!(
    TRACE_MAX_SEGMENTS,
    "NIXL_TELEMETRY_TRACE_MAX_SEGMENTS",
    Unsigned,
    Some("4"),
    [Trace],
    "TRACE segments kept per agent, the active one included; older ones are deleted."
);
declare!(
    HISTOGRAM_BUCKETS_US,
    "NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US",
    Text,
    Some(
        "10,25,50,100,250,500,1000,2500,5000,10000,25000,50000,100000,250000,500000,1000000,\
          5000000,10000000"
    ),
    [Prometheus, PrometheusMp, Doca, RemoteWrite, Otlp],
    "Upper bounds (µs) of the transfer-time histograms: strictly increasing positive numbers."
);
declare!(
    NATIVE_HISTOGRAMS,
    "NIXL_TELEMETRY_NATIVE_HISTOGRAMS",
    Bool,
    Some("false"),
    [Prometheus, PrometheusMp, Doca, RemoteWrite],
    "True keeps native histograms (schema 3, at most 160 buckets) of transfer time and size: served in the protobuf exposition to scrapers that ask for it (prometheus, the scrape backend of doca, and prometheus_mp: kept in the rank's store, served by the node's endpoint), pushed as remote-write histogram samples."
);
declare!(
    LABELS,
    "NIXL_TELEMETRY_LABELS",
    Text,
    None,
    [Prometheus, PrometheusMp, Doca, RemoteWrite, Otlp],
    "Workload labels on every series: name=value,name=value."
);
declare!(
    LABELS_FROM,
    "NIXL_TELEMETRY_LABELS_FROM",
    Text,
    None,
    [Prometheus, PrometheusMp, Doca, RemoteWrite, Otlp],
    "Workload labels from a scheduler's variables (environment only): slurm, kubernetes."
);
declare!(
    PROMETHEUS_PORT,
    "NIXL_TELEMETRY_PROMETHEUS_PORT",
    Unsigned,
    Some("9090"),
    [Prometheus, PrometheusMp],
    "TCP port of GET /metrics (1..65535)."
);
declare!(
    PROMETHEUS_LOCAL,
    "NIXL_TELEMETRY_PROMETHEUS_LOCAL",
    Bool,
    Some("false"),
    [Prometheus, PrometheusMp],
    "True binds 127.0.0.1 only, false 0.0.0.0."
);
declare!(
    MULTIPROC_DIR,
    "NIXL_TELEMETRY_MULTIPROC_DIR",
    Text,
    None,
    [PrometheusMp],
    "Directory of the per-process store files (required)."
);
declare!(
    RANK_ENV,
    "NIXL_TELEMETRY_RANK_ENV",
    Text,
    Some("LOCAL_RANK"),
    [PrometheusMp, RemoteWrite, Otlp],
    "Name of the variable whose value is the local_rank label (read from the environment)."
);
declare!(
    PUSH_INSTANCE,
    "NIXL_TELEMETRY_PUSH_INSTANCE",
    Text,
    None,
    [RemoteWrite, Otlp],
    "Identity of a pushing process: the remote-write instance label and OTLP's service.instance.id (unset: `<host>:<pid>`, `<host>:<pid>-<tag>` outside the host's PID namespace)."
);
declare!(
    MP_STALE_TTL,
    "NIXL_TELEMETRY_MP_STALE_TTL",
    Unsigned,
    Some("30"),
    [PrometheusMp],
    "Seconds a departed process's store is still served."
);
declare!(
    MP_SERVE,
    "NIXL_TELEMETRY_MP_SERVE",
    Bool,
    Some("true"),
    [PrometheusMp],
    "False: write the store only, never serve (a nixl-telemetry serve sidecar serves)."
);
declare!(
    MP_AGGREGATE,
    "NIXL_TELEMETRY_MP_AGGREGATE",
    Text,
    Some("none"),
    [PrometheusMp],
    "sum adds node totals beside the per-rank series; none does not."
);
declare!(
    DOCA_BACKENDS,
    "NIXL_TELEMETRY_DOCA_BACKENDS",
    Text,
    Some("scrape"),
    [Doca],
    "Comma list of DOCA backends: scrape, ipc."
);
declare!(
    DOCA_PROMETHEUS_PORT,
    "NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT",
    Unsigned,
    Some("9091"),
    [Doca],
    "TCP port of the doca scrape backend (1..65535)."
);
declare!(
    DOCA_PROMETHEUS_LOCAL,
    "NIXL_TELEMETRY_DOCA_PROMETHEUS_LOCAL",
    Bool,
    Some("false"),
    [Doca],
    "True binds the doca scrape backend to 127.0.0.1 only."
);
declare!(
    DOCA_IPC_SOCKETS_DIR,
    "NIXL_TELEMETRY_DOCA_IPC_SOCKETS_DIR",
    Text,
    None,
    [Doca],
    "ipc: the directory of DTS's IPC sockets; unset, DOCA's own."
);
declare!(
    DOCA_LIB_DIR,
    "NIXL_TELEMETRY_DOCA_LIB_DIR",
    Text,
    None,
    [Doca],
    "ipc: the only directory searched for DOCA's libraries; unset, the loader's path."
);
declare!(
    REMOTE_WRITE_URL,
    "NIXL_TELEMETRY_REMOTE_WRITE_URL",
    Text,
    None,
    [RemoteWrite],
    "The receiver's remote-write URL (required)."
);
declare!(
    REMOTE_WRITE_INTERVAL_MS,
    "NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS",
    Millis,
    Some("15000"),
    [RemoteWrite],
    "Milliseconds between pushes (at least 1)."
);
declare!(
    REMOTE_WRITE_TIMEOUT_MS,
    "NIXL_TELEMETRY_REMOTE_WRITE_TIMEOUT_MS",
    Millis,
    Some("10000"),
    [RemoteWrite],
    "Timeout of one push, in milliseconds."
);
declare!(
    REMOTE_WRITE_FINAL_PUSH_MS,
    "NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS",
    Millis,
    Some("5000"),
    [RemoteWrite],
    "How long destroying an agent waits for the last push."
);
declare!(
    REMOTE_WRITE_HEADERS,
    "NIXL_TELEMETRY_REMOTE_WRITE_HEADERS",
    Text,
    None,
    [RemoteWrite],
    "Extra request headers: name=value,name=value."
);
declare!(
    REMOTE_WRITE_BASIC_AUTH_USER,
    "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_USER",
    Text,
    None,
    [RemoteWrite],
    "Basic authentication user (with the password file)."
);
declare!(
    REMOTE_WRITE_BASIC_AUTH_PASSWORD_FILE,
    "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_PASSWORD_FILE",
    Text,
    None,
    [RemoteWrite],
    "File holding the basic authentication password."
);
declare!(
    REMOTE_WRITE_BEARER_TOKEN_FILE,
    "NIXL_TELEMETRY_REMOTE_WRITE_BEARER_TOKEN_FILE",
    Text,
    None,
    [RemoteWrite],
    "File holding a bearer token."
);
declare!(
    REMOTE_WRITE_CA_FILE,
    "NIXL_TELEMETRY_REMOTE_WRITE_CA_FILE",
    Text,
    None,
    [RemoteWrite],
    "PEM file of the CA certificates an https receiver is checked against."
);
declare!(
    OTLP_FINAL_PUSH_MS,
    "NIXL_TELEMETRY_OTLP_FINAL_PUSH_MS",
    Millis,
    Some("5000"),
    [Otlp],
    "How long destroying an agent waits for the last push."
);
declare!(
    OTEL_ENDPOINT,
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    Text,
    Some("http://localhost:4318"),
    [Otlp],
    "OpenTelemetry: the collector's base URL; /v1/metrics is appended."
);
declare!(
    OTEL_METRICS_ENDPOINT,
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    Text,
    None,
    [Otlp],
    "OpenTelemetry: the full metrics URL, used as given (wins over the base URL)."
);
declare!(
    OTEL_HEADERS,
    "OTEL_EXPORTER_OTLP_HEADERS",
    Text,
    None,
    [Otlp],
    "OpenTelemetry: request headers, name=value,name=value, values percent-decoded."
);
declare!(
    OTEL_METRICS_HEADERS,
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    Text,
    None,
    [Otlp],
    "OpenTelemetry: the metrics request headers (win over OTEL_EXPORTER_OTLP_HEADERS)."
);
declare!(
    OTEL_TIMEOUT,
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    Millis,
    Some("10000"),
    [Otlp],
    "OpenTelemetry: timeout of one push, in milliseconds."
);
declare!(
    OTEL_METRICS_TIMEOUT,
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    Millis,
    None,
    [Otlp],
    "OpenTelemetry: timeout of one metrics push (wins over OTEL_EXPORTER_OTLP_TIMEOUT)."
);
declare!(
    OTEL_COMPRESSION,
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    Text,
    Some("none"),
    [Otlp],
    "OpenTelemetry: gzip or none."
);
declare!(
    OTEL_METRICS_COMPRESSION,
    "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
    Text,
    None,
    [Otlp],
    "OpenTelemetry: gzip or none for metrics (wins over OTEL_EXPORTER_OTLP_COMPRESSION)."
);
declare!(
    OTEL_CERTIFICATE,
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    Text,
    None,
    [Otlp],
    "OpenTelemetry: PEM file of the CA certificates an https collector is checked against."
);
declare!(
    OTEL_METRICS_CERTIFICATE,
    "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
    Text,
    None,
    [Otlp],
    "OpenTelemetry: the CA file for metrics (wins over OTEL_EXPORTER_OTLP_CERTIFICATE)."
);
declare!(
    OTEL_SERVICE_NAME,
    "OTEL_SERVICE_NAME",
    Text,
    Some("nixl"),
    [Otlp],
    "OpenTelemetry: service.name (wins over service.name in OTEL_RESOURCE_ATTRIBUTES)."
);
declare!(
    OTEL_RESOURCE_ATTRIBUTES,
    "OTEL_RESOURCE_ATTRIBUTES",
    Text,
    None,
    [Otlp],
    "OpenTelemetry: resource attributes, key=value,key=value, values percent-decoded."
);
declare!(
    OTEL_METRIC_EXPORT_INTERVAL,
    "OTEL_METRIC_EXPORT_INTERVAL",
    Millis,
    Some("60000"),
    [Otlp],
    "OpenTelemetry: milliseconds between pushes."
);
declare!(
    OTEL_TEMPORALITY_PREFERENCE,
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
    Text,
    Some("cumulative"),
    [Otlp],
    "OpenTelemetry: cumulative, delta or lowmemory (delta for NIXL's sums)."
);
declare!(
    OTEL_HISTOGRAM_AGGREGATION,
    "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
    Text,
    Some("explicit_bucket_histogram"),
    [Otlp],
    "OpenTelemetry: explicit_bucket_histogram, or base2_exponential_bucket_histogram for exponential histograms (request sizes too)."
);

/// Dynamo's `DYN_FPM_TRACE`: the FPM trace's master switch.
pub const DYN_FPM_TRACE: &str = "DYN_FPM_TRACE";
/// Dynamo's `DYN_FPM_OUTPUT_PATH`: the FPM trace's output prefix.
pub const DYN_FPM_OUTPUT_PATH: &str = "DYN_FPM_OUTPUT_PATH";
/// Dynamo's `DYN_FPM_MODE`: `sampled` or `full`.
pub const DYN_FPM_MODE: &str = "DYN_FPM_MODE";
/// Dynamo's `DYN_FPM_SAMPLE_INTERVAL_MS`: the FPM sampling interval in milliseconds.
pub const DYN_FPM_SAMPLE_INTERVAL_MS: &str = "DYN_FPM_SAMPLE_INTERVAL_MS";
/// Dynamo's `DYN_FPM_JSONL_GZ_ROLL_BYTES`: the uncompressed size at which a segment rolls.
pub const DYN_FPM_JSONL_GZ_ROLL_BYTES: &str = "DYN_FPM_JSONL_GZ_ROLL_BYTES";
/// Dynamo's `DYN_FPM_MAX_SEGMENTS`: FPM segments kept per producer.
pub const DYN_FPM_MAX_SEGMENTS: &str = "DYN_FPM_MAX_SEGMENTS";
/// `DYN_FPM_QUEUE_MAX_BYTES`: the bytes a producer's FPM queue holds at most (this library's
/// addition to Dynamo's variables).
pub const DYN_FPM_QUEUE_MAX_BYTES: &str = "DYN_FPM_QUEUE_MAX_BYTES";

/// The `DYN_FPM_*` variables the FPM trace reads (`nixl_telemetry_core::fpm::config`). They are
/// Dynamo's, read from the environment only, not settings: listed here so that such a key in
/// NIXL's configuration file is recognised and reported ([`ConfigFile::unknown_keys`](super::file::ConfigFile::unknown_keys)).
pub const DYN_FPM_VARIABLES: &[&str] = &[
    DYN_FPM_TRACE,
    DYN_FPM_OUTPUT_PATH,
    DYN_FPM_MODE,
    DYN_FPM_SAMPLE_INTERVAL_MS,
    DYN_FPM_JSONL_GZ_ROLL_BYTES,
    DYN_FPM_MAX_SEGMENTS,
    DYN_FPM_QUEUE_MAX_BYTES,
];

/// Every setting read by this library and its exporter plug-ins, in the order
/// `nixl-telemetry config` and the docs list them (a test keeps it complete).
pub const SETTINGS: &[Setting] = &[
    ENABLE,
    BUFFER_SIZE,
    RUN_INTERVAL,
    EXPORTER,
    DIR,
    RING_VERSION,
    XFER_STALLED_EVENT,
    ENABLED_METRICS,
    PLUGIN_DIR,
    LOG_LEVEL,
    TRACE_PATH,
    TRACE_ROLL_BYTES,
    TRACE_MAX_SEGMENTS,
    HISTOGRAM_BUCKETS_US,
    NATIVE_HISTOGRAMS,
    LABELS,
    LABELS_FROM,
    PROMETHEUS_PORT,
    PROMETHEUS_LOCAL,
    MULTIPROC_DIR,
    RANK_ENV,
    PUSH_INSTANCE,
    MP_STALE_TTL,
    MP_SERVE,
    MP_AGGREGATE,
    DOCA_BACKENDS,
    DOCA_PROMETHEUS_PORT,
    DOCA_PROMETHEUS_LOCAL,
    DOCA_IPC_SOCKETS_DIR,
    DOCA_LIB_DIR,
    REMOTE_WRITE_URL,
    REMOTE_WRITE_INTERVAL_MS,
    REMOTE_WRITE_TIMEOUT_MS,
    REMOTE_WRITE_FINAL_PUSH_MS,
    REMOTE_WRITE_HEADERS,
    REMOTE_WRITE_BASIC_AUTH_USER,
    REMOTE_WRITE_BASIC_AUTH_PASSWORD_FILE,
    REMOTE_WRITE_BEARER_TOKEN_FILE,
    REMOTE_WRITE_CA_FILE,
    OTLP_FINAL_PUSH_MS,
    OTEL_ENDPOINT,
    OTEL_METRICS_ENDPOINT,
    OTEL_HEADERS,
    OTEL_METRICS_HEADERS,
    OTEL_TIMEOUT,
    OTEL_METRICS_TIMEOUT,
    OTEL_COMPRESSION,
    OTEL_METRICS_COMPRESSION,
    OTEL_CERTIFICATE,
    OTEL_METRICS_CERTIFICATE,
    OTEL_SERVICE_NAME,
    OTEL_RESOURCE_ATTRIBUTES,
    OTEL_METRIC_EXPORT_INTERVAL,
    OTEL_TEMPORALITY_PREFERENCE,
    OTEL_HISTOGRAM_AGGREGATION,
];

/// The setting named `name`, if this library knows it.
pub fn find(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_declaration_has_readers_and_one_line_of_doc() {
        for s in SETTINGS {
            assert!(!s.readers.is_empty(), "{}", s.name);
            assert!(
                !s.doc.is_empty() && !s.doc.contains(['\n', '|']) && s.doc.ends_with('.'),
                "{}: {:?}",
                s.name,
                s.doc
            );
        }
        assert_eq!(RANK_ENV.readers_text(), "prometheus_mp, remote_write, otlp");
    }

    #[test]
    fn every_setting_is_listed_once_with_a_default_of_its_kind() {
        for (i, s) in SETTINGS.iter().enumerate() {
            assert_eq!(
                find(s.name),
                Some(&SETTINGS[i]),
                "{} is listed twice",
                s.name
            );
            if let Some(d) = s.default {
                assert_eq!(s.kind.validate(s.name, d), Ok(()), "{}", s.name);
            }
        }
    }
}
