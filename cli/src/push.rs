//! `serve --remote-write URL` and `serve --otlp URL`: the sidecar pushes every live store of
//! its directory through the push exporters' own encoders and push loop (one loop per
//! protocol), so a node can run ranks that only write stores and one process that pushes.
//!
//! The receiver's other settings come from the exporters' variables
//! (`NIXL_TELEMETRY_REMOTE_WRITE_*`; the `OTEL_*` variables), which the options below
//! override. A rank's store is served (and pushed) for the stale TTL after its last update,
//! so the push interval must be shorter than the TTL: then a rank that exited is pushed at
//! least once after its last update before its store is reaped. Both protocols' default
//! intervals allow the default TTL (30 s): remote-write's is 15 s, and OTLP's is 15 s too in
//! the sidecar ([`SERVE_OTLP_DEFAULT_INTERVAL_MS`]) where OpenTelemetry's own default is 60 s.
//!
//! The sidecar is one job's: every pushed series carries its identity ([`instance`]: the
//! remote-write `instance` label, OTLP's `service.instance.id`) and the job's workload labels
//! (`NIXL_TELEMETRY_LABELS`, `NIXL_TELEMETRY_LABELS_FROM`, read by `serve` as by the ranks)
//! where a store lacks them, and so do its own push counters, so two jobs' sidecars on one node
//! never write the same series.

use std::time::Duration;

use nixl_telemetry_base::env::Lookup;
use nixl_telemetry_base::settings::{self, process_settings};
use nixl_telemetry_mp_store::config::ScanConfig;
use nixl_telemetry_mp_store::store_scan::StoreScan;
use nixl_telemetry_push::rows::{instance, with_instance, INSTANCE_LABEL};
use nixl_telemetry_push::target::parse_url;
use nixl_telemetry_push::{Auth, Client, Labels, PushConfig, Pusher, Source, Target};
use nixl_telemetry_series::{hostname, WorkloadLabels};

/// The sidecar's OTLP push interval when neither `--push-interval-ms` nor
/// `OTEL_METRIC_EXPORT_INTERVAL` sets one: remote-write's default, which the default stale TTL
/// allows (OpenTelemetry's default, 60 s, does not).
pub const SERVE_OTLP_DEFAULT_INTERVAL_MS: u64 =
    nixl_telemetry_base::settings::REMOTE_WRITE_INTERVAL_MS.default_u64();

/// The push options of `serve`.
#[derive(clap::Args, Debug, Default)]
pub struct PushArgs {
    /// Push every rank's series to this Prometheus remote-write URL, the receiver's full URL
    /// (e.g. http://mimir:9009/api/v1/push).
    #[arg(long, value_name = "URL")]
    pub remote_write: Option<String>,
    /// Push every rank's metrics as OTLP/HTTP protobuf: a base URL as
    /// OTEL_EXPORTER_OTLP_ENDPOINT takes (http://collector:4318: /v1/metrics is appended), or
    /// the full URL ending in /v1/metrics as OTEL_EXPORTER_OTLP_METRICS_ENDPOINT takes.
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Milliseconds between pushes; must be shorter than the stale TTL.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..),
          help = format!(
              "Milliseconds between pushes [default: each protocol's variable \
               (NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS, OTEL_METRIC_EXPORT_INTERVAL), else {} \
               for both]; must be shorter than the stale TTL",
              nixl_telemetry_base::settings::REMOTE_WRITE_INTERVAL_MS.default_str()
          ))]
    pub push_interval_ms: Option<u64>,
    /// An extra header of every push, NAME=VALUE (repeatable; e.g. X-Scope-OrgID=team).
    #[arg(long = "push-header", value_name = "NAME=VALUE")]
    pub push_headers: Vec<String>,
    /// Basic-auth user of the pushes (with --push-password-file).
    #[arg(long, value_name = "USER")]
    pub push_user: Option<String>,
    /// File holding the basic-auth password of the pushes.
    #[arg(long, value_name = "FILE")]
    pub push_password_file: Option<String>,
    /// File holding a bearer token for the pushes.
    #[arg(long, value_name = "FILE")]
    pub push_bearer_token_file: Option<String>,
    /// PEM file of the CA certificates to trust for https pushes (else the system's).
    #[arg(long, value_name = "FILE")]
    pub push_ca_file: Option<String>,
}

/// Who the sidecar is: its identity and the job's workload labels.
#[derive(Clone, Debug)]
pub struct Sender {
    /// `NIXL_TELEMETRY_PUSH_INSTANCE`, else `<host>:<pid>` of `serve`.
    pub instance: String,
    /// The job's workload labels (`NIXL_TELEMETRY_LABELS`, `NIXL_TELEMETRY_LABELS_FROM`).
    pub workload: WorkloadLabels,
}

impl Sender {
    /// Reads the sidecar's identity and workload labels from the settings and environment.
    pub fn from_env() -> Result<Sender, String> {
        Ok(Sender {
            instance: instance(&process_settings, &hostname())?,
            workload: WorkloadLabels::from_env()?,
        })
    }
}

/// The labels of a store's series, as the multi-process endpoint serves them, then (with
/// `host`, for remote-write) the sender's `instance`, then the job's workload labels the store
/// does not carry itself.
fn store_labels(
    view: &nixl_telemetry_mp_store::reader::StoreView,
    host: bool,
    sender: &Sender,
) -> Labels {
    let mut l = Vec::with_capacity(6 + sender.workload.pairs().len());
    if host {
        l.push(("hostname".to_owned(), view.snapshot.hostname.to_string()));
        l.push((INSTANCE_LABEL.to_owned(), sender.instance.clone()));
    }
    l.push((
        "agent_name".to_owned(),
        view.snapshot.agent_name.to_string(),
    ));
    l.push(("pid".to_owned(), view.pid.to_string()));
    l.push(("agent_instance".to_owned(), view.instance.to_string()));
    if !view.local_rank.is_empty() {
        l.push(("local_rank".to_owned(), view.local_rank.clone()));
    }
    l.extend(
        sender
            .workload
            .iter()
            .filter(|(n, _)| view.snapshot.labels.get(n).is_none())
            .map(|(n, v)| (n.to_owned(), v.to_owned())),
    );
    l
}

/// Every live store of the directory, labelled (`hostname` as a label for remote-write; OTLP
/// has it as the resource's `host.name`).
fn source(scan: &ScanConfig, host_label: bool, sender: &Sender) -> Source {
    let scan = StoreScan::new(scan.clone());
    let sender = sender.clone();
    Box::new(move || {
        scan.live_stores()
            .into_iter()
            .map(|view| {
                let labels = store_labels(&view, host_label, &sender);
                (view.snapshot, labels)
            })
            .collect()
    })
}

/// The labels of the sidecar's own push counters: `hostname` and `instance` for remote-write
/// (OTLP has them as the resource's `host.name` and `service.instance.id`), `pusher="serve"`,
/// so they never collide with a rank exporter's counters, and the job's workload labels, so
/// they never collide with another job's sidecar.
fn own_labels(host_label: bool, sender: &Sender) -> Labels {
    let mut l = Vec::with_capacity(3 + sender.workload.pairs().len());
    if host_label {
        l.push(("hostname".to_owned(), hostname()));
        l.push((INSTANCE_LABEL.to_owned(), sender.instance.clone()));
    }
    l.push(("pusher".to_owned(), "serve".to_owned()));
    l.extend(sender.workload.pairs().iter().cloned());
    l
}

/// The remote-write URL of `--remote-write`, refused when it cannot be a receiver's: no path
/// (every receiver has one: `/api/v1/write`, `/api/v1/push`, ...) or an OTLP path.
pub fn remote_write_url(given: &str) -> Result<String, String> {
    let given = given.trim();
    let url = parse_url("--remote-write", given)?;
    let path = url.path().trim_end_matches('/');
    if path.is_empty() {
        return Err(format!(
            "--remote-write='{given}' has no path: give the receiver's full URL, e.g. \
             http://prometheus:9090/api/v1/write (Mimir: /api/v1/push)"
        ));
    }
    if path.ends_with("/v1/metrics") {
        return Err(format!(
            "--remote-write='{given}' is an OTLP URL: use --otlp for an OpenTelemetry receiver"
        ));
    }
    Ok(given.to_owned())
}

/// The OTLP metrics URL of `--otlp`: a URL whose path ends in `/v1/metrics` as given (as
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`), else a base URL with `/v1/metrics` appended (as
/// `OTEL_EXPORTER_OTLP_ENDPOINT`); refused when it cannot be right: another signal's path
/// (`/v1/traces`, `/v1/logs`), a path ending in `/v1`, a remote-write path, a query or a
/// fragment.
pub fn otlp_url(given: &str) -> Result<String, String> {
    let given = given.trim();
    let url = parse_url("--otlp", given)?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "--otlp='{given}': give a URL without a query or fragment"
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
                "--otlp='{given}' is OpenTelemetry's {signal} endpoint: {hint}"
            ));
        }
    }
    if path.ends_with("/v1") {
        return Err(format!(
            "--otlp='{given}' ends in /v1 (it would become /v1/v1/metrics): {hint}"
        ));
    }
    if path.ends_with("/api/v1/write") || path.ends_with("/api/v1/push") {
        return Err(format!(
            "--otlp='{given}' is a remote-write URL: use --remote-write for it, or {hint}"
        ));
    }
    Ok(format!("{}/v1/metrics", given.trim_end_matches('/')))
}

/// The settings of one protocol: the options of `args` over `settings`.
fn overlay<'a>(
    args: &'a PushArgs,
    settings: Lookup<'a>,
    vars: &'a [(&'static str, Option<String>)],
) -> impl Fn(&str) -> nixl_telemetry_core::Result<Option<String>> + 'a {
    let _ = args;
    move |name: &str| match vars.iter().find(|(n, _)| *n == name) {
        Some((_, Some(v))) => Ok(Some(v.clone())),
        _ => settings(name),
    }
}

/// Applies the authentication, CA and header options to `target` (`what` names the protocol
/// in errors).
fn apply_options(args: &PushArgs, target: &mut Target) -> Result<(), String> {
    use nixl_telemetry_push::target::{parse_headers, read_ca_file, read_secret};
    for h in &args.push_headers {
        target
            .headers
            .extend(parse_headers("--push-header", h, false)?);
    }
    target.auth = match (
        &args.push_user,
        &args.push_password_file,
        &args.push_bearer_token_file,
    ) {
        (None, None, None) => target.auth.take(),
        (Some(user), Some(file), None) => Some(Auth::Basic {
            user: user.clone(),
            password: read_secret("--push-password-file", file)?,
        }),
        (None, None, Some(file)) => {
            Some(Auth::Bearer(read_secret("--push-bearer-token-file", file)?))
        }
        _ => {
            return Err(
                "give --push-user with --push-password-file, or --push-bearer-token-file".into(),
            )
        }
    };
    if let Some(ca) = &args.push_ca_file {
        target.roots = Some(read_ca_file("--push-ca-file", ca)?);
    }
    Ok(())
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

/// Starts the push loops `args` ask for (none, one or both), pushing the stores of `scan`.
pub fn start(args: &PushArgs, scan: &ScanConfig) -> Result<Vec<Pusher>, String> {
    let mut pushers = Vec::new();
    if args.remote_write.is_none() && args.otlp.is_none() {
        return Ok(pushers);
    }
    let sender = Sender::from_env()?;
    if let Some(url) = &args.remote_write {
        use nixl_telemetry_push::remote_write as rw;
        let url = remote_write_url(url)?;
        let vars = [
            (rw::ENV_URL, Some(url)),
            (
                rw::ENV_INTERVAL_MS,
                args.push_interval_ms.map(|ms| ms.to_string()),
            ),
        ];
        let settings = overlay(args, &process_settings, &vars);
        let mut config = rw::Config::from_settings(&settings)
            .map_err(|e| e.replace(rw::ENV_URL, "--remote-write"))?;
        apply_options(args, &mut config.target)?;
        check_interval(&config.push, scan.stale_ttl)?;
        let client = Client::new(config.target)?;
        let payload = rw::RemoteWrite::new(source(scan, true, &sender), own_labels(true, &sender));
        pushers.push(
            Pusher::start(client, Box::new(payload), config.push)
                .map_err(|e| format!("cannot start the remote-write thread: {e}"))?,
        );
    }
    if let Some(url) = &args.otlp {
        use nixl_telemetry_push::otlp;
        let url = otlp_url(url)?;
        // The option, else the variable, else the sidecar's default (not OpenTelemetry's).
        let interval = match args.push_interval_ms {
            Some(ms) => ms,
            None => match process_settings(settings::OTEL_METRIC_EXPORT_INTERVAL.name)
                .map_err(|e| e.message)?
            {
                Some(v) if !v.trim().is_empty() => nixl_telemetry_base::env::parse_u64(
                    settings::OTEL_METRIC_EXPORT_INTERVAL.name,
                    v.trim(),
                )
                .map_err(|e| e.message)?,
                _ => SERVE_OTLP_DEFAULT_INTERVAL_MS,
            },
        };
        let vars = [
            (settings::OTEL_METRICS_ENDPOINT.name, Some(url.clone())),
            (
                settings::OTEL_METRIC_EXPORT_INTERVAL.name,
                Some(interval.to_string()),
            ),
        ];
        let settings = overlay(args, &process_settings, &vars);
        let mut config = otlp::OtlpConfig::from_settings(&settings)
            .map_err(|e| e.replace(settings::OTEL_METRICS_ENDPOINT.name, "--otlp"))?;
        apply_options(args, &mut config.target)?;
        check_interval(&config.push, scan.stale_ttl)?;
        with_instance(&mut config.resource, &sender.instance);
        let client = Client::new(config.target.clone())?;
        let payload = otlp::Otlp::new(
            source(scan, false, &sender),
            own_labels(false, &sender),
            &config,
            &hostname(),
        );
        pushers.push(
            Pusher::start(client, Box::new(payload), config.push)
                .map_err(|e| format!("cannot start the OTLP thread: {e}"))?,
        );
    }
    Ok(pushers)
}
