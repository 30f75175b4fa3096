//! The push configuration of the sidecar, `nixl-telemetry serve --remote-write URL` and
//! `--otlp URL`, built in one place ([`Options::configure`]): the command line only hands over
//! its options ([`Options`]); the defaults, the settings read and every check are here.
//!
//! - Each protocol's settings are its exporter's (`NIXL_TELEMETRY_REMOTE_WRITE_*`; the `OTEL_*`
//!   variables, [`crate::otlp::config`]); an option wins over its variable, and an error names
//!   the option it comes from ([`flag`]).
//! - `--remote-write` is the receiver's full URL: one without a path, or with OTLP's, is
//!   refused. `--otlp` is a base URL (`/v1/metrics` is appended, as to
//!   `OTEL_EXPORTER_OTLP_ENDPOINT`) or the full `/v1/metrics` URL (as
//!   `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`); another signal's path, one ending in `/v1`, a
//!   remote-write path, a query or a fragment is refused.
//! - The interval: `--push-interval-ms`, else the protocol's variable, else remote-write's
//!   default, for OTLP too ([`DEFAULT_OTLP_INTERVAL_MS`], where OpenTelemetry's own is 60 s).
//!   A rank's store is pushed for the stale TTL after its last update, so the interval must be
//!   shorter than the TTL: then a rank that exited is pushed at least once after its last
//!   update before its store is reaped. Both defaults allow the default TTL (30 s).
//! - `--push-header` adds to the variable's headers; `--push-user` with
//!   `--push-password-file`, or `--push-bearer-token-file`, replaces its authentication, and
//!   `--push-ca-file` its CA file.
//! - The sidecar is one job's: its identity ([`Sender::instance`], the remote-write `instance`
//!   label, OTLP's `service.instance.id`) and the job's workload labels
//!   ([`Sender::workload`]) are read here too, for the caller to put on every pushed series.

use std::time::Duration;

use nixl_telemetry_base::env::{parse_u64, Lookup};
use nixl_telemetry_base::settings;
use nixl_telemetry_series::WorkloadLabels;

use crate::otlp::OtlpConfig;
use crate::pusher::PushConfig;
use crate::remote_write;
use crate::rows::instance;
use crate::target::{parse_headers, parse_url, read_ca_file, read_secret, Auth, Target};

/// The names of the sidecar's push options, without the leading `--`: the command line defines
/// its options by them, and errors name the option with them.
pub mod flag {
    /// The remote-write receiver's URL.
    pub const REMOTE_WRITE: &str = "remote-write";
    /// The OTLP receiver's URL.
    pub const OTLP: &str = "otlp";
    /// Milliseconds between pushes.
    pub const INTERVAL_MS: &str = "push-interval-ms";
    /// An extra header, `NAME=VALUE` (repeatable).
    pub const HEADER: &str = "push-header";
    /// The basic-auth user.
    pub const USER: &str = "push-user";
    /// The file of the basic-auth password.
    pub const PASSWORD_FILE: &str = "push-password-file";
    /// The file of a bearer token.
    pub const BEARER_TOKEN_FILE: &str = "push-bearer-token-file";
    /// The PEM file of the CA certificates.
    pub const CA_FILE: &str = "push-ca-file";
}

/// `--name`, as messages show an option.
fn dashed(name: &str) -> String {
    format!("--{name}")
}

/// The sidecar's OTLP push interval when neither `--push-interval-ms` nor
/// `OTEL_METRIC_EXPORT_INTERVAL` sets one: remote-write's default, which the default stale TTL
/// allows (OpenTelemetry's default, 60 s, does not).
pub const DEFAULT_OTLP_INTERVAL_MS: u64 = settings::REMOTE_WRITE_INTERVAL_MS.default_u64();

/// The sidecar's push options as its command line gave them (`None` or empty: not given; see
/// [`flag`] for their names).
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `--remote-write URL`.
    pub remote_write: Option<String>,
    /// `--otlp URL`.
    pub otlp: Option<String>,
    /// `--push-interval-ms MS`.
    pub interval_ms: Option<u64>,
    /// Every `--push-header NAME=VALUE`.
    pub headers: Vec<String>,
    /// `--push-user USER`.
    pub user: Option<String>,
    /// `--push-password-file FILE`.
    pub password_file: Option<String>,
    /// `--push-bearer-token-file FILE`.
    pub bearer_token_file: Option<String>,
    /// `--push-ca-file FILE`.
    pub ca_file: Option<String>,
}

/// Who the sidecar is: its identity and the job's workload labels.
#[derive(Clone, Debug)]
pub struct Sender {
    /// `NIXL_TELEMETRY_PUSH_INSTANCE`, else the process's default identity
    /// ([`crate::rows::instance`]).
    pub instance: String,
    /// The job's workload labels (`NIXL_TELEMETRY_LABELS`, `NIXL_TELEMETRY_LABELS_FROM`).
    pub workload: WorkloadLabels,
}

/// What the sidecar pushes, and as whom.
#[derive(Debug)]
pub struct Sidecar {
    /// Its identity and the job's labels.
    pub sender: Sender,
    /// The remote-write push, if asked for.
    pub remote_write: Option<remote_write::Config>,
    /// The OTLP push, if asked for (its resource carries the sender's identity).
    pub otlp: Option<OtlpConfig>,
}

impl Options {
    /// The sidecar's pushes as these options ask for them over `settings` (the settings
    /// lookup), on `host`, for stores reaped `stale_ttl` after their last update; `None` when
    /// they ask for no push (nothing is read then). Errors name the option or the variable.
    pub fn configure(
        &self,
        settings: Lookup,
        host: &str,
        stale_ttl: Duration,
    ) -> Result<Option<Sidecar>, String> {
        if self.remote_write.is_none() && self.otlp.is_none() {
            return Ok(None);
        }
        let sender = Sender {
            instance: instance(settings, host)?,
            workload: WorkloadLabels::from_lookup(settings)?,
        };
        let remote_write = match &self.remote_write {
            Some(url) => Some(self.remote_write_config(url, settings, stale_ttl)?),
            None => None,
        };
        let otlp = match &self.otlp {
            Some(url) => Some(self.otlp_config(url, settings, host, stale_ttl)?),
            None => None,
        };
        Ok(Some(Sidecar {
            sender,
            remote_write,
            otlp,
        }))
    }

    fn remote_write_config(
        &self,
        url: &str,
        settings: Lookup,
        stale_ttl: Duration,
    ) -> Result<remote_write::Config, String> {
        let given = [
            (remote_write::ENV_URL, Some(remote_write_url(url)?)),
            (
                remote_write::ENV_INTERVAL_MS,
                self.interval_ms.map(|ms| ms.to_string()),
            ),
        ];
        let mut config = remote_write::Config::from_settings(&overlay(settings, &given))
            .map_err(|e| e.replace(remote_write::ENV_URL, &dashed(flag::REMOTE_WRITE)))?;
        self.apply(&mut config.target)?;
        check_interval(&config.push, stale_ttl)?;
        Ok(config)
    }

    /// The OTLP push; its resource's `service.instance.id` is the sender's identity, read from
    /// the same settings as [`Sender::instance`] (unless `OTEL_RESOURCE_ATTRIBUTES` names one).
    fn otlp_config(
        &self,
        url: &str,
        settings: Lookup,
        host: &str,
        stale_ttl: Duration,
    ) -> Result<OtlpConfig, String> {
        let interval_var = settings::OTEL_METRIC_EXPORT_INTERVAL.name;
        let interval = match self.interval_ms {
            Some(ms) => ms,
            None => match settings(interval_var).map_err(|e| e.message)? {
                Some(v) if !v.trim().is_empty() => {
                    parse_u64(interval_var, v.trim()).map_err(|e| e.message)?
                }
                _ => DEFAULT_OTLP_INTERVAL_MS,
            },
        };
        let endpoint_var = settings::OTEL_METRICS_ENDPOINT.name;
        let given = [
            (endpoint_var, Some(otlp_url(url)?)),
            (interval_var, Some(interval.to_string())),
        ];
        let mut config = OtlpConfig::from_settings(&overlay(settings, &given), host)
            .map_err(|e| e.replace(endpoint_var, &dashed(flag::OTLP)))?;
        self.apply(&mut config.target)?;
        check_interval(&config.push, stale_ttl)?;
        Ok(config)
    }

    /// Applies the header, authentication and CA options to `target`.
    fn apply(&self, target: &mut Target) -> Result<(), String> {
        for h in &self.headers {
            target
                .headers
                .extend(parse_headers(&dashed(flag::HEADER), h, false)?);
        }
        target.auth = match (&self.user, &self.password_file, &self.bearer_token_file) {
            (None, None, None) => target.auth.take(),
            (Some(user), Some(file), None) => Some(Auth::Basic {
                user: user.clone(),
                password: read_secret(&dashed(flag::PASSWORD_FILE), file)?,
            }),
            (None, None, Some(file)) => Some(Auth::Bearer(read_secret(
                &dashed(flag::BEARER_TOKEN_FILE),
                file,
            )?)),
            _ => {
                return Err(format!(
                    "give {} with {}, or {}",
                    dashed(flag::USER),
                    dashed(flag::PASSWORD_FILE),
                    dashed(flag::BEARER_TOKEN_FILE)
                ))
            }
        };
        if let Some(ca) = &self.ca_file {
            target.roots = Some(read_ca_file(&dashed(flag::CA_FILE), ca)?);
        }
        Ok(())
    }
}

/// `settings`, but with the values `given` (name, value) where given.
fn overlay<'a>(
    settings: Lookup<'a>,
    given: &'a [(&'static str, Option<String>)],
) -> impl Fn(&str) -> nixl_telemetry_base::Result<Option<String>> + 'a {
    move |name: &str| match given.iter().find(|(n, _)| *n == name) {
        Some((_, Some(v))) => Ok(Some(v.clone())),
        _ => settings(name),
    }
}

fn check_interval(config: &PushConfig, ttl: Duration) -> Result<(), String> {
    if config.interval >= ttl {
        return Err(format!(
            "the push interval ({} ms) must be shorter than the stale TTL ({} s), or a rank \
             that exits could be reaped before its last update is pushed",
            config.interval.as_millis(),
            ttl.as_secs()
        ));
    }
    Ok(())
}

/// The remote-write URL of `--remote-write`, refused when it cannot be a receiver's: no path
/// (every receiver has one: `/api/v1/write`, `/api/v1/push`, ...) or an OTLP path.
fn remote_write_url(given: &str) -> Result<String, String> {
    let option = dashed(flag::REMOTE_WRITE);
    let given = given.trim();
    let url = parse_url(&option, given)?;
    let path = url.path().trim_end_matches('/');
    if path.is_empty() {
        return Err(format!(
            "{option}='{given}' has no path: give the receiver's full URL, e.g. \
             http://prometheus:9090/api/v1/write (Mimir: /api/v1/push)"
        ));
    }
    if path.ends_with("/v1/metrics") {
        return Err(format!(
            "{option}='{given}' is an OTLP URL: use {} for an OpenTelemetry receiver",
            dashed(flag::OTLP)
        ));
    }
    Ok(given.to_owned())
}

/// The OTLP metrics URL of `--otlp`: a URL whose path ends in `/v1/metrics` as given, else a
/// base URL with `/v1/metrics` appended; refused when it cannot be right (see the module
/// documentation).
fn otlp_url(given: &str) -> Result<String, String> {
    let option = dashed(flag::OTLP);
    let given = given.trim();
    let url = parse_url(&option, given)?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{option}='{given}': give a URL without a query or fragment"
        ));
    }
    let path = url.path().trim_end_matches('/');
    if path.ends_with("/v1/metrics") {
        return Ok(given.to_owned());
    }
    let hint = "give the collector's base URL (e.g. http://collector:4318, to which /v1/metrics \
                is appended) or its full /v1/metrics URL";
    for signal in ["/v1/traces", "/v1/logs"] {
        if path.ends_with(signal) {
            return Err(format!(
                "{option}='{given}' is OpenTelemetry's {signal} endpoint: {hint}"
            ));
        }
    }
    if path.ends_with("/v1") {
        return Err(format!(
            "{option}='{given}' ends in /v1 (it would become /v1/v1/metrics): {hint}"
        ));
    }
    if path.ends_with("/api/v1/write") || path.ends_with("/api/v1/push") {
        return Err(format!(
            "{option}='{given}' is a remote-write URL: use {} for it, or {hint}",
            dashed(flag::REMOTE_WRITE)
        ));
    }
    Ok(format!("{}/v1/metrics", given.trim_end_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::env::fixed_env;

    const TTL: Duration = Duration::from_secs(30);

    fn configure(options: &Options, env: &[(&str, &str)]) -> Result<Option<Sidecar>, String> {
        options.configure(&fixed_env(env), "h", TTL)
    }

    #[test]
    fn no_protocol_reads_nothing() {
        let options = Options {
            interval_ms: Some(1),
            ..Options::default()
        };
        // A bad identity would fail a push; without one it is not read.
        let env = [(settings::PUSH_INSTANCE.name, "bad\u{1}")];
        assert!(configure(&options, &env).unwrap().is_none());
    }

    #[test]
    fn options_win_over_variables_and_the_sidecar_has_its_own_otlp_default() {
        let options = Options {
            remote_write: Some("http://r:9090/api/v1/write".into()),
            otlp: Some("http://c:4318/".into()),
            ..Options::default()
        };
        let env = [
            (remote_write::ENV_URL, "http://other:1/api/v1/write"),
            (settings::PUSH_INSTANCE.name, "job-7"),
        ];
        let s = configure(&options, &env).unwrap().unwrap();
        assert_eq!(s.sender.instance, "job-7");
        let rw = s.remote_write.unwrap();
        assert_eq!(rw.target.url.as_str(), "http://r:9090/api/v1/write");
        assert_eq!(
            rw.push.interval,
            Duration::from_millis(remote_write::DEFAULT_INTERVAL_MS)
        );
        let otlp = s.otlp.unwrap();
        assert_eq!(otlp.target.url.as_str(), "http://c:4318/v1/metrics");
        assert_eq!(
            otlp.push.interval,
            Duration::from_millis(DEFAULT_OTLP_INTERVAL_MS)
        );
        assert!(otlp
            .resource
            .contains(&("service.instance.id".to_owned(), "job-7".to_owned())));
        // The variable, then the option, over the sidecar's default.
        let only_otlp = Options {
            otlp: Some("http://c:4318/v1/metrics".into()),
            ..Options::default()
        };
        let env = [(settings::OTEL_METRIC_EXPORT_INTERVAL.name, "2000")];
        let s = configure(&only_otlp, &env).unwrap().unwrap();
        assert_eq!(s.otlp.unwrap().push.interval, Duration::from_secs(2));
        let given = Options {
            interval_ms: Some(700),
            ..only_otlp
        };
        let s = configure(&given, &env).unwrap().unwrap();
        assert_eq!(s.otlp.unwrap().push.interval, Duration::from_millis(700));
        assert!(s.remote_write.is_none());
    }

    #[test]
    fn headers_add_to_the_variables_and_errors_name_the_option() {
        let options = Options {
            remote_write: Some("http://r:9090/api/v1/write".into()),
            headers: vec!["X-Scope-OrgID=team".into()],
            ..Options::default()
        };
        let env = [(settings::REMOTE_WRITE_HEADERS.name, "a=1")];
        let rw = configure(&options, &env)
            .unwrap()
            .unwrap()
            .remote_write
            .unwrap();
        assert_eq!(
            rw.target.headers,
            [
                ("a".to_owned(), "1".to_owned()),
                ("X-Scope-OrgID".to_owned(), "team".to_owned())
            ]
        );
        for (options, expected) in [
            (
                Options {
                    remote_write: Some("http://r:9090".into()),
                    ..Options::default()
                },
                "--remote-write='http://r:9090' has no path",
            ),
            (
                Options {
                    otlp: Some("http://c:4318/v1?x=1".into()),
                    ..Options::default()
                },
                "--otlp='http://c:4318/v1?x=1': give a URL without a query or fragment",
            ),
            (
                Options {
                    remote_write: Some("http://r:9090/api/v1/write".into()),
                    user: Some("u".into()),
                    ..Options::default()
                },
                "give --push-user with --push-password-file, or --push-bearer-token-file",
            ),
            (
                Options {
                    otlp: Some("http://c:4318".into()),
                    ca_file: Some("/nonexistent/ca.pem".into()),
                    ..Options::default()
                },
                "--push-ca-file='/nonexistent/ca.pem' cannot be opened",
            ),
            (
                Options {
                    otlp: Some("http://c:4318".into()),
                    interval_ms: Some(30_000),
                    ..Options::default()
                },
                "the push interval (30000 ms) must be shorter than the stale TTL (30 s)",
            ),
        ] {
            let e = configure(&options, &[]).unwrap_err();
            assert!(e.starts_with(expected), "{options:?}: {e}");
        }
    }
}
