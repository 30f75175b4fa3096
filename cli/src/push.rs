//! `serve --remote-write URL` and `serve --otlp URL`: the sidecar pushes every live store of
//! its directory through the push exporters' own encoders and push loop (one loop per
//! protocol), so a node can run ranks that only write stores and one process that pushes.
//!
//! The receiver's other settings come from the exporters' variables
//! (`NIXL_TELEMETRY_REMOTE_WRITE_*`; the `OTEL_*` variables), which the options below
//! override. A rank's store is served (and pushed) for the stale TTL after its last update,
//! so the push interval must be shorter than the TTL: then a rank that exited is pushed at
//! least once after its last update before its store is reaped.

use std::time::Duration;

use nixl_telemetry::env::Lookup;
use nixl_telemetry::settings::{self, process_settings};
use nixl_telemetry_mp_store::config::ScanConfig;
use nixl_telemetry_mp_store::store_scan::StoreScan;
use nixl_telemetry_push::{Auth, Client, Labels, PushConfig, Pusher, Source, Target};
use nixl_telemetry_series::hostname;

/// The push options of `serve`.
#[derive(clap::Args, Debug, Default)]
pub struct PushArgs {
    /// Push every rank's series to this Prometheus remote-write URL
    /// (e.g. http://mimir:9009/api/v1/push).
    #[arg(long, value_name = "URL")]
    pub remote_write: Option<String>,
    /// Push every rank's metrics as OTLP/HTTP protobuf to this URL (e.g.
    /// http://collector:4318/v1/metrics).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Milliseconds between pushes; must be shorter than the stale TTL.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..),
          help = format!(
              "Milliseconds between pushes [default: each protocol's variable, else {} for \
               remote-write, 60000 for OTLP]; must be shorter than the stale TTL",
              nixl_telemetry::settings::REMOTE_WRITE_INTERVAL_MS.default_str()
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

/// The labels of a store's series, as the multi-process endpoint serves them.
fn store_labels(view: &nixl_telemetry_mp_store::reader::StoreView, host: bool) -> Labels {
    let mut l = Vec::with_capacity(5);
    if host {
        l.push(("hostname".to_owned(), view.snapshot.hostname.to_string()));
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
    l
}

/// Every live store of the directory, labelled (`hostname` as a label for remote-write; OTLP
/// has it as the resource's `host.name`).
fn source(scan: &ScanConfig, host_label: bool) -> Source {
    let scan = StoreScan::new(scan.clone());
    Box::new(move || {
        scan.live_stores()
            .into_iter()
            .map(|view| {
                let labels = store_labels(&view, host_label);
                (view.snapshot, labels)
            })
            .collect()
    })
}

/// The labels of the sidecar's own push counters: `hostname` for remote-write (OTLP has it as
/// the resource's `host.name`) and `pusher="serve"`, so they never collide with a rank
/// exporter's counters.
fn own_labels(host_label: bool) -> Labels {
    let mut l = Vec::with_capacity(2);
    if host_label {
        l.push(("hostname".to_owned(), hostname()));
    }
    l.push(("pusher".to_owned(), "serve".to_owned()));
    l
}

/// The settings of one protocol: the options of `args` over `settings`.
fn overlay<'a>(
    args: &'a PushArgs,
    settings: Lookup<'a>,
    vars: &'a [(&'static str, Option<String>)],
) -> impl Fn(&str) -> nixl_telemetry::Result<Option<String>> + 'a {
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
    if let Some(url) = &args.remote_write {
        use nixl_telemetry_push::remote_write as rw;
        let vars = [
            (rw::ENV_URL, Some(url.clone())),
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
        let payload = rw::RemoteWrite {
            source: source(scan, true),
            own_labels: own_labels(true),
        };
        pushers.push(
            Pusher::start(client, Box::new(payload), config.push)
                .map_err(|e| format!("cannot start the remote-write thread: {e}"))?,
        );
    }
    if let Some(url) = &args.otlp {
        use nixl_telemetry_push::otlp;
        let vars = [
            (settings::OTEL_METRICS_ENDPOINT.name, Some(url.clone())),
            (
                settings::OTEL_METRIC_EXPORT_INTERVAL.name,
                args.push_interval_ms.map(|ms| ms.to_string()),
            ),
        ];
        let settings = overlay(args, &process_settings, &vars);
        let mut config = otlp::OtlpConfig::from_settings(&settings)
            .map_err(|e| e.replace(settings::OTEL_METRICS_ENDPOINT.name, "--otlp"))?;
        apply_options(args, &mut config.target)?;
        check_interval(&config.push, scan.stale_ttl)?;
        let client = Client::new(config.target.clone())?;
        let payload = otlp::Otlp::new(source(scan, false), own_labels(false), &config, &hostname());
        pushers.push(
            Pusher::start(client, Box::new(payload), config.push)
                .map_err(|e| format!("cannot start the OTLP thread: {e}"))?,
        );
    }
    Ok(pushers)
}
