//! The OTLP exporter's configuration: the standard `OTEL_*` variables, with the defaults and
//! precedence of the OpenTelemetry specification, and the NIXL setting of the last push. All
//! are declared settings (`nixl_telemetry_base::settings::OTEL_ENDPOINT`, ...) read through the
//! settings lookup: the environment first, then NIXL's configuration file, as every setting.
//!
//! | variable | default | |
//! | --- | --- | --- |
//! | `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` | | the full URL, used as given |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | `http://localhost:4318` | base URL: `/v1/metrics` is appended |
//! | `OTEL_EXPORTER_OTLP_[METRICS_]HEADERS` | | `name=value,...`, values percent-decoded |
//! | `OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT` | 10000 | milliseconds per push |
//! | `OTEL_EXPORTER_OTLP_[METRICS_]COMPRESSION` | `none` | `gzip` or `none` |
//! | `OTEL_EXPORTER_OTLP_[METRICS_]CERTIFICATE` | | PEM CA file for https (else the system's roots) |
//! | `OTEL_SERVICE_NAME` | `nixl` | wins over `service.name` in `OTEL_RESOURCE_ATTRIBUTES` |
//! | `OTEL_RESOURCE_ATTRIBUTES` | | `key=value,...`, values percent-decoded; `service.instance.id` defaults to the sender's identity ([`crate::rows::instance`]) |
//! | `OTEL_METRIC_EXPORT_INTERVAL` | 60000 | milliseconds between pushes |
//! | `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` | `cumulative` | or `delta`, `lowmemory` |
//! | `NIXL_TELEMETRY_OTLP_FINAL_PUSH_MS` | 5000 | bound of the last push |
//!
//! A signal-specific (`METRICS_`) variable wins over the general one. Empty values are unset,
//! as the specification says. Names and values are compared case-insensitively where the
//! specification says so (compression, temporality).

use std::time::Duration;

use crate::pusher::PushConfig;
use crate::rows::{instance, INSTANCE_ATTRIBUTE};
use crate::target::{
    millis as setting_millis, parse_headers, parse_pairs, parse_url, read_ca_file, Target,
};
use nixl_telemetry_base::env::{parse_u64, Lookup};
use nixl_telemetry_base::settings::{self, Setting};

/// `NIXL_TELEMETRY_OTLP_FINAL_PUSH_MS`: how long destroying an agent waits for the last push.
pub const ENV_FINAL_PUSH_MS: &str = settings::OTLP_FINAL_PUSH_MS.name;
/// The default bound of the last push, in milliseconds.
pub const DEFAULT_FINAL_PUSH_MS: u64 = settings::OTLP_FINAL_PUSH_MS.default_u64();
/// The default endpoint (OTLP/HTTP's port on this host).
pub const DEFAULT_ENDPOINT: &str = settings::OTEL_ENDPOINT.default_str();
/// The default `service.name`.
pub const DEFAULT_SERVICE_NAME: &str = settings::OTEL_SERVICE_NAME.default_str();
/// The default timeout of one push, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = settings::OTEL_TIMEOUT.default_u64();
/// The default interval between pushes, in milliseconds.
pub const DEFAULT_INTERVAL_MS: u64 = settings::OTEL_METRIC_EXPORT_INTERVAL.default_u64();

/// How sums and histograms are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Temporality {
    /// Totals since the exporter started (the default).
    Cumulative,
    /// What changed since the last accepted push.
    Delta,
}

/// The OTLP exporter's configuration.
#[derive(Debug)]
pub struct OtlpConfig {
    /// The receiver (the `/v1/metrics` URL).
    pub target: Target,
    /// The push timing.
    pub push: PushConfig,
    /// Whether bodies are gzip-compressed.
    pub gzip: bool,
    /// How sums and histograms are reported.
    pub temporality: Temporality,
    /// Resource attributes from `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME`, in order,
    /// `service.name` first, then `service.instance.id` when they name none.
    pub resource: Vec<(String, String)>,
}

impl OtlpConfig {
    /// Reads the `OTEL_*` variables and the NIXL settings through `settings` (the settings
    /// lookup: the environment, then NIXL's configuration file), for a sender on `host`. The
    /// resource's `service.instance.id` is `OTEL_RESOURCE_ATTRIBUTES`'s (it wins, as
    /// OpenTelemetry says), else the sender's identity ([`crate::rows::instance`], which the
    /// remote-write `instance` label holds too).
    pub fn from_settings(settings: Lookup, host: &str) -> Result<OtlpConfig, String> {
        let get = |setting: &Setting| -> Result<Option<String>, String> {
            Ok(settings(setting.name)
                .map_err(|e| e.message)?
                .filter(|v| !v.trim().is_empty()))
        };
        // The signal-specific variable, else the general one: (name, value).
        let pick = |specific: &Setting,
                    general: &Setting|
         -> Result<Option<(&'static str, String)>, String> {
            if let Some(v) = get(specific)? {
                return Ok(Some((specific.name, v)));
            }
            Ok(get(general)?.map(|v| (general.name, v)))
        };
        let url = match get(&settings::OTEL_METRICS_ENDPOINT)? {
            Some(url) => parse_url(settings::OTEL_METRICS_ENDPOINT.name, url.trim())?,
            None => {
                let base =
                    get(&settings::OTEL_ENDPOINT)?.unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
                let full = format!("{}/v1/metrics", base.trim().trim_end_matches('/'));
                parse_url(settings::OTEL_ENDPOINT.name, &full)?
            }
        };
        let timeout = match pick(&settings::OTEL_METRICS_TIMEOUT, &settings::OTEL_TIMEOUT)? {
            Some((name, v)) => millis(name, &v)?,
            None => Duration::from_millis(DEFAULT_TIMEOUT_MS),
        };
        let mut target = Target::new(url, timeout);
        if let Some((name, v)) = pick(&settings::OTEL_METRICS_HEADERS, &settings::OTEL_HEADERS)? {
            target.headers = parse_headers(name, &v, true)?;
        }
        if let Some((name, v)) = pick(
            &settings::OTEL_METRICS_CERTIFICATE,
            &settings::OTEL_CERTIFICATE,
        )? {
            target.roots = Some(read_ca_file(name, &v)?);
        }
        let gzip = match pick(
            &settings::OTEL_METRICS_COMPRESSION,
            &settings::OTEL_COMPRESSION,
        )? {
            None => false,
            Some((name, v)) => match v.trim().to_ascii_lowercase().as_str() {
                "gzip" => true,
                "none" => false,
                _ => return Err(format!("{name}='{v}': use gzip or none")),
            },
        };
        let temporality = match get(&settings::OTEL_TEMPORALITY_PREFERENCE)? {
            None => Temporality::Cumulative,
            Some(v) => temporality(settings::OTEL_TEMPORALITY_PREFERENCE.name, &v)?,
        };
        let interval = match get(&settings::OTEL_METRIC_EXPORT_INTERVAL)? {
            Some(v) => millis(settings::OTEL_METRIC_EXPORT_INTERVAL.name, &v)?,
            None => Duration::from_millis(DEFAULT_INTERVAL_MS),
        };
        let mut resource = Vec::new();
        if let Some(v) = get(&settings::OTEL_RESOURCE_ATTRIBUTES)? {
            resource = parse_pairs(
                settings::OTEL_RESOURCE_ATTRIBUTES.name,
                &v,
                true,
                "attribute",
            )?;
        }
        let service = match get(&settings::OTEL_SERVICE_NAME)? {
            Some(name) => name,
            None => resource
                .iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned()),
        };
        resource.retain(|(k, _)| k != "service.name");
        resource.insert(0, ("service.name".to_owned(), service));
        if !resource.iter().any(|(k, _)| k == INSTANCE_ATTRIBUTE) {
            resource.push((INSTANCE_ATTRIBUTE.to_owned(), instance(settings, host)?));
        }
        let final_timeout =
            setting_millis(settings, ENV_FINAL_PUSH_MS, DEFAULT_FINAL_PUSH_MS, false)?;
        Ok(OtlpConfig {
            push: PushConfig {
                name: "otlp".into(),
                interval,
                timeout: target.timeout,
                final_timeout,
                final_setting: ENV_FINAL_PUSH_MS,
            },
            target,
            gzip,
            temporality,
            resource,
        })
    }
}

/// The temporality preference `value` of variable `name` (case-insensitive).
fn temporality(name: &str, value: &str) -> Result<Temporality, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "cumulative" => Ok(Temporality::Cumulative),
        // Low memory: delta for (monotonic) counters and histograms, which is all of NIXL's
        // sums.
        "delta" | "lowmemory" => Ok(Temporality::Delta),
        _ => Err(format!(
            "{name}='{value}': use cumulative, delta or lowmemory"
        )),
    }
}

fn millis(name: &str, value: &str) -> Result<Duration, String> {
    let ms = parse_u64(name, value.trim()).map_err(|e| e.message)?;
    if ms == 0 {
        return Err(format!("{name}=0: give a positive number of milliseconds"));
    }
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::env::fixed_env;

    fn config(pairs: &[(&str, &str)]) -> Result<OtlpConfig, String> {
        OtlpConfig::from_settings(&fixed_env(pairs), "h")
    }

    #[test]
    fn defaults_are_the_specifications() {
        let c = config(&[]).unwrap();
        assert_eq!(c.target.url.as_str(), "http://localhost:4318/v1/metrics");
        assert_eq!(c.target.timeout, Duration::from_secs(10));
        assert_eq!(c.push.interval, Duration::from_secs(60));
        assert_eq!(c.push.final_timeout, Duration::from_secs(5));
        assert!(!c.gzip);
        assert_eq!(c.temporality, Temporality::Cumulative);
        let id = crate::rows::default_instance("h");
        assert_eq!(
            c.resource,
            [
                ("service.name".to_owned(), "nixl".to_owned()),
                (INSTANCE_ATTRIBUTE.to_owned(), id)
            ]
        );
        assert!(c.target.headers.is_empty() && c.target.roots.is_none());
    }

    #[test]
    fn signal_specific_variables_win_and_the_base_endpoint_gets_the_path() {
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "3000"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "b=x%20y"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "none"),
            ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "GZIP"),
        ])
        .unwrap();
        assert_eq!(c.target.url.as_str(), "http://collector:4318/v1/metrics");
        assert_eq!(c.target.timeout, Duration::from_secs(3));
        assert_eq!(c.target.headers, [("b".to_owned(), "x y".to_owned())]);
        assert!(c.gzip);
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/base"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://other:9/custom",
            ),
        ])
        .unwrap();
        assert_eq!(c.target.url.as_str(), "http://other:9/custom");
        let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/base")]).unwrap();
        assert_eq!(
            c.target.url.as_str(),
            "http://collector:4318/base/v1/metrics"
        );
        // Empty is unset.
        let c = config(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")]).unwrap();
        assert_eq!(c.target.url.as_str(), "http://localhost:4318/v1/metrics");
    }

    #[test]
    fn service_name_and_resource_attributes() {
        let c = config(&[
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=from-attrs,deployment.environment=prod%2Ceu",
            ),
            ("NIXL_TELEMETRY_PUSH_INSTANCE", "job-7"),
        ])
        .unwrap();
        assert_eq!(
            c.resource,
            [
                ("service.name".to_owned(), "from-attrs".to_owned()),
                ("deployment.environment".to_owned(), "prod,eu".to_owned()),
                (INSTANCE_ATTRIBUTE.to_owned(), "job-7".to_owned())
            ]
        );
        // OTEL_RESOURCE_ATTRIBUTES's `service.instance.id` wins over the sender's identity.
        let c = config(&[
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=from-attrs,service.instance.id=otel-id",
            ),
            ("OTEL_SERVICE_NAME", "svc"),
            ("NIXL_TELEMETRY_PUSH_INSTANCE", "job-7"),
        ])
        .unwrap();
        assert_eq!(
            c.resource,
            [
                ("service.name".to_owned(), "svc".to_owned()),
                (INSTANCE_ATTRIBUTE.to_owned(), "otel-id".to_owned())
            ]
        );
    }

    #[test]
    fn temporality_and_bad_values_name_the_variable() {
        for (v, t) in [
            ("delta", Temporality::Delta),
            ("LowMemory", Temporality::Delta),
            ("Cumulative", Temporality::Cumulative),
        ] {
            let c = config(&[("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", v)]).unwrap();
            assert_eq!(c.temporality, t);
        }
        for (name, value) in [
            (
                "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
                "sometimes",
            ),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "collector:4318"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "0"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "novalue"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
            ("OTEL_RESOURCE_ATTRIBUTES", "bad key=1"),
        ] {
            let e = config(&[(name, value)]).unwrap_err();
            assert!(e.starts_with(name), "{name}: {e}");
        }
    }
}
