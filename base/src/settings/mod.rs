//! Every setting this library and its exporter plug-ins read ([`SETTINGS`]), and the one place
//! that resolves a setting and remembers where its value came from. Sources, highest first:
//! the options of `nixl_telemetry_create_with_options` (for the settings they cover), the
//! process environment, NIXL's configuration file ([`mod@file`]), the default.
//!
//! [`process_settings`], the lookup every parser takes, is [`lookup`] without the origin; every
//! reader (the core, the TRACE exporter, the plug-ins) gets the file's values by the same rules,
//! and a plug-in's copy of this crate asks its host ([`route_to_host`]), so the process reads
//! the file once. Names that are not in the table (other
//! variables, such as Dynamo's `DYN_FPM_*` or the rank variable `prometheus_mp` is told to read)
//! come from the environment only. The `OTEL_*` variables the `otlp` exporter reads are in the
//! table: the environment first, then the file, as for every setting.

pub mod file;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::env::{parse_bool, parse_u64, Lookup, EMPTY_IS_UNSET_PREFIX};
use crate::error::{Error, Result};
use file::ConfigFile;

/// What type of value a setting takes: in the environment, the words the parsers of
/// [`crate::env`] accept; in the configuration file, the TOML type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A boolean word in the environment; a TOML boolean in the file.
    Bool,
    /// A decimal or `0x` hexadecimal unsigned integer; a non-negative TOML integer.
    Unsigned,
    /// Milliseconds as an unsigned integer; a non-negative TOML integer or a TOML local time
    /// (`00:00:00.100` is 100).
    Millis,
    /// Any text (a name, a path, a list); a TOML string.
    Text,
}

impl Kind {
    /// The kind's name as `nixl-telemetry config --json` and the docs say it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bool => "bool",
            Kind::Unsigned => "unsigned",
            Kind::Millis => "milliseconds",
            Kind::Text => "string",
        }
    }

    /// Checks that `value` (of setting `name`) is of this kind, with the error the setting's
    /// reader would give.
    pub fn validate(self, name: &str, value: &str) -> Result<()> {
        match self {
            Kind::Bool => parse_bool(name, value).map(drop),
            Kind::Unsigned | Kind::Millis => parse_u64(name, value).map(drop),
            Kind::Text => Ok(()),
        }
    }
}

/// Who reads a setting: the core library, its built-in TRACE exporter, or an exporter plug-in
/// (with the CLI's `serve` and `push`, which share the plug-ins' configuration code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Consumer {
    /// The core library (the collector's settings and the exporter choice).
    Core,
    /// The built-in `TRACE` exporter.
    Trace,
    /// The `prometheus` plug-in.
    Prometheus,
    /// The `prometheus_mp` plug-in (and `nixl-telemetry serve`).
    PrometheusMp,
    /// The `doca` plug-in.
    Doca,
    /// The `remote_write` plug-in (and `nixl-telemetry serve --remote-write`, `push`).
    RemoteWrite,
    /// The `otlp` plug-in (and `nixl-telemetry serve --otlp`, `push`).
    Otlp,
}

impl Consumer {
    /// The name `nixl-telemetry config` and the docs show: `core`, `TRACE` or the plug-in's.
    pub const fn name(self) -> &'static str {
        match self {
            Consumer::Core => "core",
            Consumer::Trace => "TRACE",
            Consumer::Prometheus => "prometheus",
            Consumer::PrometheusMp => "prometheus_mp",
            Consumer::Doca => "doca",
            Consumer::RemoteWrite => "remote_write",
            Consumer::Otlp => "otlp",
        }
    }

    /// The page of the book (relative to `docs/`) that describes this consumer's settings.
    pub const fn page(self) -> &'static str {
        match self {
            Consumer::Core => "configuration.md#the-cores-variables",
            Consumer::Trace => "exporters/builtin.md#trace",
            Consumer::Prometheus => "exporters/prometheus.md",
            Consumer::PrometheusMp => "exporters/prometheus-mp.md#settings",
            Consumer::Doca => "exporters/doca.md#settings",
            Consumer::RemoteWrite => "exporters/push.md#remote_write",
            Consumer::Otlp => "exporters/push.md#otlp",
        }
    }
}

/// One setting's declaration: its variable (and file key), kind, default, readers and one
/// line of documentation. Each is a named constant of this module ([`PROMETHEUS_PORT`], ...),
/// which its readers use for the name and the default; [`SETTINGS`] lists them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The variable's name, which is also its key in the configuration file.
    pub name: &'static str,
    /// The type of value it takes.
    pub kind: Kind,
    /// The value that applies when no source sets it (`None`: unset, the reader's behaviour
    /// without it).
    pub default: Option<&'static str>,
    /// Who reads it.
    pub readers: &'static [Consumer],
    /// What it does, in one line.
    pub doc: &'static str,
}

impl Setting {
    /// The readers' names joined with `, ` (`prometheus, prometheus_mp`).
    pub fn readers_text(&self) -> String {
        let names: Vec<&str> = self.readers.iter().map(|c| c.name()).collect();
        names.join(", ")
    }

    /// The default as text; a compile-time error (in a `const`) when the setting has none.
    pub const fn default_str(&self) -> &'static str {
        match self.default {
            Some(d) => d,
            None => panic!("this setting has no default"),
        }
    }

    /// The default as an unsigned decimal integer; a compile-time error (in a `const`) when
    /// there is none or it is not one.
    pub const fn default_u64(&self) -> u64 {
        let (n, end) = decimal(self.default_str().as_bytes(), 0);
        assert!(
            end == self.default_str().len(),
            "the default is not a decimal integer"
        );
        n
    }

    /// [`Setting::default_u64`] as a port number (it must fit).
    pub const fn default_u16(&self) -> u16 {
        let n = self.default_u64();
        assert!(n <= u16::MAX as u64, "the default does not fit in 16 bits");
        n as u16
    }

    /// The default as a boolean (`true` or `false`); a compile-time error otherwise.
    pub const fn default_bool(&self) -> bool {
        match self.default_str().as_bytes() {
            b"true" => true,
            b"false" => false,
            _ => panic!("the default is not true or false"),
        }
    }

    /// The default as a comma list of exactly `N` decimal integers, as floating-point numbers
    /// (the histogram bounds); a compile-time error otherwise.
    pub const fn default_list<const N: usize>(&self) -> [f64; N] {
        let text = self.default_str().as_bytes();
        let mut out = [0.0; N];
        let (mut i, mut at) = (0, 0);
        while i < N {
            let (n, end) = decimal(text, at);
            assert!(end > at, "a list item is not a decimal integer");
            out[i] = n as f64;
            i += 1;
            if i < N {
                assert!(end < text.len() && text[end] == b',', "too few list items");
                at = end + 1;
            } else {
                assert!(end == text.len(), "too many list items");
            }
        }
        out
    }
}

/// The decimal integer at `text[at..]`: its value and the index after its last digit.
const fn decimal(text: &[u8], at: usize) -> (u64, usize) {
    let (mut n, mut i) = (0u64, at);
    while i < text.len() && text[i].is_ascii_digit() {
        n = n * 10 + (text[i] - b'0') as u64;
        i += 1;
    }
    (n, i)
}

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
    "Identity of a pushing process: the remote-write instance label and OTLP's service.instance.id (unset: `<host>:<pid>`)."
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
/// NIXL's configuration file is recognised and reported ([`file::ConfigFile::unknown_keys`]).
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
];

/// The Markdown table of `settings` that the docs hold (`docs/configuration-file.md`,
/// `docs/configuration.md`), generated here so that it cannot go stale: one row per setting
/// with its kind, default, readers (each linked to its page, relative to `docs/`) and doc line.
pub fn markdown_table<'a>(settings: impl IntoIterator<Item = &'a Setting>) -> String {
    let mut out = String::from(
        "| Setting | Kind | Default | Read by | What it does |\n|---|---|---|---|---|\n",
    );
    for s in settings {
        let default = match s.default {
            Some(d) => format!("`{d}`"),
            None => "unset".to_owned(),
        };
        let readers: Vec<String> = s
            .readers
            .iter()
            .map(|r| format!("[{}]({})", r.name(), r.page()))
            .collect();
        out.push_str(&format!(
            "| `{}` | {} | {default} | {} | {} |\n",
            s.name,
            s.kind.name(),
            readers.join(", "),
            s.doc
        ));
    }
    out
}

/// The setting named `name`, if this library knows it.
pub fn find(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The options struct of `nixl_telemetry_create_with_options`.
    Option,
    /// The process environment.
    Environment,
    /// This configuration file.
    File(PathBuf),
    /// No source set it: the default applies.
    Default,
}

impl fmt::Display for Origin {
    /// `option`, `environment`, `file:<path>` or `default`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Option => f.write_str("option"),
            Origin::Environment => f.write_str("environment"),
            Origin::File(path) => write!(f, "file:{}", path.display()),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sourced {
    /// The value, as the environment would hold it.
    pub value: String,
    /// Its source.
    pub origin: Origin,
}

/// Reads `name` from the process environment (an empty `NIXL_TELEMETRY_*` value is unset),
/// else, for a setting of [`SETTINGS`], from this process's configuration file (read once).
pub fn lookup(name: &str) -> Result<Option<Sourced>> {
    lookup_in(name, &crate::env::environment, file::process_file)
}

/// [`lookup`] through the environment `env` and the configuration file `file` (called only
/// when the environment does not set a known setting).
fn lookup_in<'f>(
    name: &str,
    env: Lookup,
    file: impl FnOnce() -> &'f Result<Option<ConfigFile>>,
) -> Result<Option<Sourced>> {
    if let Some(value) = env(name)? {
        return Ok(Some(Sourced {
            value,
            origin: Origin::Environment,
        }));
    }
    let Some(setting) = find(name) else {
        return Ok(None);
    };
    match file() {
        Err(e) => Err(e.clone()),
        Ok(None) => Ok(None),
        Ok(Some(f)) => Ok(f.value(setting)?.map(|value| Sourced {
            value,
            origin: Origin::File(f.path().to_owned()),
        })),
    }
}

/// [`lookup`] for a path setting (`NIXL_PLUGIN_DIR`): the environment's value is taken as it
/// is, without requiring UTF-8.
pub fn lookup_os(name: &str) -> Result<Option<OsString>> {
    match std::env::var_os(name) {
        Some(v) if !v.is_empty() || !name.starts_with(EMPTY_IS_UNSET_PREFIX) => Ok(Some(v)),
        _ => Ok(lookup(name)?.map(|s| OsString::from(s.value))),
    }
}

/// One setting's effective value and its origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effective {
    /// The setting.
    pub setting: &'static Setting,
    /// Its value; with origin [`Origin::Default`], the default (`None`: unset).
    pub value: Option<String>,
    /// Where the value came from.
    pub origin: Origin,
    /// Why the value cannot be used (a file value of the wrong type: the error a collector's
    /// creation would give), from [`effective_all`]; `value` is then the file's text.
    pub problem: Option<String>,
}

/// Looks a setting up as a collector does: in the process environment (an empty
/// `NIXL_TELEMETRY_*` value is unset, [`crate::env::unset_if_empty`]), else, for a setting this
/// library knows ([`SETTINGS`]), in NIXL's configuration file: [`lookup`] without the origin,
/// the [`Lookup`] every parser of a collector's settings is given. An error when the value is
/// not UTF-8, or when the file is needed and cannot be read or gives the wrong type.
///
/// In a plug-in whose host offers the settings service ([`route_to_host`]), the host looks it
/// up: the process reads its configuration file once, whichever part of it asks first.
pub fn process_settings(name: &str) -> Result<Option<String>> {
    if let Some(host_lookup) = HOST_LOOKUP.get() {
        return host_lookup(name);
    }
    Ok(lookup(name)?.map(|s| s.value))
}

/// A lookup by the host's rule, in a plug-in's copy of this crate (see [`route_to_host`]).
pub type HostLookup = fn(&str) -> Result<Option<String>>;

/// The host's lookup, once a plug-in has routed its settings there.
static HOST_LOOKUP: OnceLock<HostLookup> = OnceLock::new();

/// Makes [`process_settings`] ask the host through `lookup` from now on (the plug-in side of the
/// host services, `crate::plugin::services`, calls it; the first lookup given stays).
pub fn route_to_host(lookup: HostLookup) {
    let _ = HOST_LOOKUP.set(lookup);
}

/// What the options of `nixl_telemetry_create_with_options` give a setting, by name (`None`
/// for a setting they leave unset); see `config::Options::value_of`.
pub type OptionValue<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The effective value of every setting of [`SETTINGS`] for a collector created with options
/// giving `option` (none at all: as `nixl_telemetry_create` would see them), in table order.
/// An error when the configuration file cannot be read or holds a value of the wrong type for
/// a setting the environment does not override (the first such value: [`effective_all`] marks
/// them all instead).
pub fn effective(option: OptionValue) -> Result<Vec<Effective>> {
    let all = effective_all(option)?;
    if let Some(problem) = all.iter().find_map(|e| e.problem.clone()) {
        return Err(Error::invalid(problem));
    }
    Ok(all)
}

/// [`effective`], but a value that cannot be used (of the wrong type in the file) is not an
/// error: its entry carries the problem ([`Effective::problem`]) and the value as the file
/// writes it, so that every setting can be shown with the faulty ones marked. An error only
/// when the configuration file cannot be read, or a variable is not UTF-8.
pub fn effective_all(option: OptionValue) -> Result<Vec<Effective>> {
    SETTINGS
        .iter()
        .map(|setting| {
            let sourced = match option(setting.name) {
                Some(value) => Some(Sourced {
                    value,
                    origin: Origin::Option,
                }),
                None => match lookup(setting.name) {
                    Ok(sourced) => sourced,
                    Err(e) => {
                        // The file itself, or a variable that is not UTF-8: nothing to show.
                        let Ok(Some(file)) = file::process_file() else {
                            return Err(e);
                        };
                        let Some(written) = file.written(setting.name) else {
                            return Err(e);
                        };
                        return Ok(Effective {
                            setting,
                            value: Some(written),
                            origin: Origin::File(file.path().to_owned()),
                            problem: Some(e.message),
                        });
                    }
                },
            };
            Ok(match sourced {
                Some(Sourced { value, origin }) => Effective {
                    setting,
                    value: Some(value),
                    origin,
                    problem: None,
                },
                None => Effective {
                    setting,
                    value: setting.default.map(str::to_owned),
                    origin: Origin::Default,
                    problem: None,
                },
            })
        })
        .collect()
}

/// The messages about the configuration file's keys that look like settings but are none, or
/// that the file cannot set ([`file::ConfigFile::unknown_keys`]); none without a file. An error
/// when the file cannot be read.
pub fn unknown_file_keys() -> Result<Vec<String>> {
    match file::process_file() {
        Ok(Some(f)) => Ok(f.unknown_keys()),
        Ok(None) => Ok(Vec::new()),
        Err(e) => Err(e.clone()),
    }
}

/// The file this process reads settings from (`None`: none was found), or why it cannot.
pub fn config_file_path() -> Result<Option<PathBuf>> {
    match file::process_file() {
        Ok(f) => Ok(f.as_ref().map(|f| f.path().to_owned())),
        Err(e) => Err(e.clone()),
    }
}

/// Checks every value set in a source (not the defaults) for its kind, with the error the
/// setting's reader would give (including settings only an exporter that is not chosen reads),
/// after the configuration file itself. `option` as for [`effective`].
pub fn check_kinds(option: OptionValue) -> Result<()> {
    for e in effective(option)? {
        if let (Some(value), false) = (&e.value, e.origin == Origin::Default) {
            e.setting
                .kind
                .validate(e.setting.name, value)
                .map_err(|err| with_file_sources(err, option))?;
        }
    }
    Ok(())
}

/// Whether `message` names variable `name` as a whole word (`NIXL_TELEMETRY_ENABLE` is not
/// named by `NIXL_TELEMETRY_ENABLED_METRICS`).
fn names(message: &str, name: &str) -> bool {
    let is_name_char = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_';
    message.match_indices(name).any(|(at, _)| {
        let before = message[..at].chars().next_back();
        let after = message[at + name.len()..].chars().next();
        !before.is_some_and(is_name_char) && !after.is_some_and(is_name_char)
    })
}

/// Adds to `error`, for every setting it names whose value came from the configuration file
/// (and not from an option: `option` as for [`effective`]), which file that was: `...
/// (NIXL_TELEMETRY_BUFFER_SIZE is set in /etc/nixl.cfg)`. Errors that already name the file
/// are left as they are.
pub fn with_file_sources(mut error: Error, option: OptionValue) -> Error {
    for setting in SETTINGS {
        if !names(&error.message, setting.name) || option(setting.name).is_some() {
            continue;
        }
        if let Ok(Some(Sourced {
            origin: Origin::File(path),
            ..
        })) = lookup(setting.name)
        {
            let path = path.display().to_string();
            if !error.message.contains(&path) {
                error.message = format!("{} ({} is set in {path})", error.message, setting.name);
            }
        }
    }
    error
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::env::fixed_env;

    fn parsed(text: &str) -> Result<Option<ConfigFile>> {
        ConfigFile::parse(Path::new("/etc/nixl.cfg"), text).map(Some)
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        let file = parsed("NIXL_TELEMETRY_DIR = '/from-file'\nNIXL_TELEMETRY_ENABLE = true");
        let env = fixed_env(&[("NIXL_TELEMETRY_DIR", "/from-env"), ("LOCAL_RANK", "3")]);
        let get = |name: &str| lookup_in(name, &env, || &file);
        assert_eq!(
            get("NIXL_TELEMETRY_DIR"),
            Ok(Some(Sourced {
                value: "/from-env".into(),
                origin: Origin::Environment
            }))
        );
        assert_eq!(
            get("NIXL_TELEMETRY_ENABLE"),
            Ok(Some(Sourced {
                value: "true".into(),
                origin: Origin::File("/etc/nixl.cfg".into())
            }))
        );
        assert_eq!(get("NIXL_TELEMETRY_EXPORTER"), Ok(None));
        // Names outside the table come from the environment only.
        assert_eq!(get("LOCAL_RANK").unwrap().unwrap().value, "3");
        let other = parsed("DYN_FPM_TRACE = 'x'");
        assert_eq!(lookup_in("DYN_FPM_TRACE", &env, || &other), Ok(None));
    }

    #[test]
    fn the_file_is_consulted_only_for_what_the_environment_leaves_unset() {
        let broken: Result<Option<ConfigFile>> = Err(Error::invalid("/x.cfg:1:1: broken"));
        let env = fixed_env(&[("NIXL_TELEMETRY_DIR", "/from-env")]);
        assert_eq!(
            lookup_in("NIXL_TELEMETRY_DIR", &env, || &broken)
                .unwrap()
                .unwrap()
                .value,
            "/from-env"
        );
        assert_eq!(
            lookup_in("NIXL_TELEMETRY_ENABLE", &env, || &broken),
            broken.clone().map(|_| None)
        );
        // A value of the wrong type behind an environment value is never looked at.
        let wrong = parsed("NIXL_TELEMETRY_DIR = 1");
        assert!(lookup_in("NIXL_TELEMETRY_DIR", &env, || &wrong).is_ok());
        assert!(lookup_in("NIXL_TELEMETRY_DIR", &fixed_env(&[]), || &wrong).is_err());
    }

    #[test]
    fn an_empty_telemetry_variable_lets_the_file_apply() {
        // The environment lookup applies the empty-is-unset rule (as `environment` does).
        let raw = fixed_env(&[("NIXL_TELEMETRY_DIR", ""), ("NIXL_LOG_LEVEL", "")]);
        let env = |name: &str| Ok(crate::env::unset_if_empty(name, raw(name)?));
        let file = parsed("NIXL_TELEMETRY_DIR = '/from-file'\nNIXL_LOG_LEVEL = 'DEBUG'");
        assert_eq!(
            lookup_in("NIXL_TELEMETRY_DIR", &env, || &file)
                .unwrap()
                .unwrap()
                .value,
            "/from-file"
        );
        // NIXL_LOG_LEVEL keeps its own rule: an empty value is a value.
        assert_eq!(
            lookup_in("NIXL_LOG_LEVEL", &env, || &file)
                .unwrap()
                .unwrap()
                .value,
            ""
        );
    }

    #[test]
    fn kinds_validate_as_the_readers_parse() {
        assert!(Kind::Bool.validate("V", "enable").is_ok());
        assert!(Kind::Bool
            .validate("V", "2")
            .unwrap_err()
            .message
            .contains("V='2'"));
        assert!(Kind::Unsigned.validate("V", "0x10").is_ok());
        assert!(Kind::Millis
            .validate("V", "100ms")
            .unwrap_err()
            .message
            .contains("V='100ms'"));
        assert!(Kind::Text.validate("V", "").is_ok());
    }

    #[test]
    fn names_are_matched_as_whole_words() {
        assert!(names(
            "NIXL_TELEMETRY_ENABLE='x' is bad",
            "NIXL_TELEMETRY_ENABLE"
        ));
        assert!(names("bad (NIXL_TELEMETRY_DIR)", "NIXL_TELEMETRY_DIR"));
        assert!(!names(
            "NIXL_TELEMETRY_ENABLED_METRICS='x'",
            "NIXL_TELEMETRY_ENABLE"
        ));
        assert!(!names(
            "NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT",
            "NIXL_TELEMETRY_PROMETHEUS_PORT"
        ));
    }

    #[test]
    fn typed_defaults_are_read_from_the_declarations() {
        assert_eq!(PROMETHEUS_PORT.default_u16(), 9090);
        assert_eq!(TRACE_ROLL_BYTES.default_u64(), 1 << 28);
        assert!(MP_SERVE.default_bool());
        assert!(!PROMETHEUS_LOCAL.default_bool());
        assert_eq!(RANK_ENV.default_str(), "LOCAL_RANK");
        let bounds: [f64; 18] = HISTOGRAM_BUCKETS_US.default_list();
        assert_eq!((bounds[0], bounds[17]), (10.0, 10_000_000.0));
        let two = Setting {
            default: Some("3,12"),
            ..HISTOGRAM_BUCKETS_US
        };
        assert_eq!(two.default_list::<2>(), [3.0, 12.0]);
        for (bad, n) in [("3,12", 3), ("3,12", 1), ("3,x", 2), ("3,,4", 3)] {
            let s = Setting {
                default: Some(bad),
                ..HISTOGRAM_BUCKETS_US
            };
            let caught = std::panic::catch_unwind(|| match n {
                1 => s.default_list::<1>().len(),
                2 => s.default_list::<2>().len(),
                _ => s.default_list::<3>().len(),
            });
            assert!(caught.is_err(), "{bad} as {n} items");
        }
        let not_a_number = Setting {
            default: Some("9090x"),
            ..PROMETHEUS_PORT
        };
        assert!(std::panic::catch_unwind(|| not_a_number.default_u64()).is_err());
        assert!(std::panic::catch_unwind(|| DIR.default_str()).is_err());
    }

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
        let table = markdown_table([&BUFFER_SIZE, &DIR]);
        assert_eq!(
            table.lines().nth(2),
            Some(
                "| `NIXL_TELEMETRY_BUFFER_SIZE` | unsigned | `4096` | \
                 [core](configuration.md#the-cores-variables) | \
                 Staging capacity of each collector (one budget its producer threads share) and \
                 ring size, in events (1..16777216). |"
            )
        );
        assert!(table.lines().nth(3).unwrap().contains("| unset |"));
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
