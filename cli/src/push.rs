//! `serve --remote-write URL` and `serve --otlp URL`: the sidecar pushes every live store of
//! its directory through the push exporters' own encoders and push loop (one loop per
//! protocol), so a node can run ranks that only write stores and one process that pushes.
//!
//! This module only passes the command line's options ([`PushArgs`]) to the push crate's one
//! builder ([`nixl_telemetry_push::sidecar`]: the defaults, the settings read, every check and
//! the sidecar's identity), then labels the stores' series and starts the loops. Every pushed
//! series carries the sidecar's identity (the remote-write `instance` label, OTLP's
//! `service.instance.id`) and the job's workload labels where a store lacks them, and so do its
//! own push counters, so two jobs' sidecars on one node never write the same series.

use nixl_telemetry_base::settings::process_settings;
use nixl_telemetry_mp_store::config::ScanConfig;
use nixl_telemetry_mp_store::store_scan::StoreScan;
use nixl_telemetry_push::rows::INSTANCE_LABEL;
use nixl_telemetry_push::sidecar::{flag, Options, Sender};
use nixl_telemetry_push::{Client, Labels, Pusher, Source};
use nixl_telemetry_series::hostname;

/// The push options of `serve` (named by [`flag`]; what they mean and their defaults:
/// [`nixl_telemetry_push::sidecar`]).
#[derive(clap::Args, Debug, Default)]
pub struct PushArgs {
    /// Push every rank's series to this Prometheus remote-write URL, the receiver's full URL
    /// (e.g. http://mimir:9009/api/v1/push).
    #[arg(long = flag::REMOTE_WRITE, value_name = "URL")]
    pub remote_write: Option<String>,
    /// Push every rank's metrics as OTLP/HTTP protobuf: a base URL as
    /// OTEL_EXPORTER_OTLP_ENDPOINT takes (http://collector:4318: /v1/metrics is appended), or
    /// the full URL ending in /v1/metrics as OTEL_EXPORTER_OTLP_METRICS_ENDPOINT takes.
    #[arg(long = flag::OTLP, value_name = "URL")]
    pub otlp: Option<String>,
    /// Milliseconds between pushes; must be shorter than the stale TTL.
    #[arg(long = flag::INTERVAL_MS, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..),
          help = format!(
              "Milliseconds between pushes [default: each protocol's variable \
               (NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS, OTEL_METRIC_EXPORT_INTERVAL), else {} \
               for both]; must be shorter than the stale TTL",
              nixl_telemetry_push::sidecar::DEFAULT_OTLP_INTERVAL_MS
          ))]
    pub push_interval_ms: Option<u64>,
    /// An extra header of every push, NAME=VALUE (repeatable; e.g. X-Scope-OrgID=team).
    #[arg(long = flag::HEADER, value_name = "NAME=VALUE")]
    pub push_headers: Vec<String>,
    /// Basic-auth user of the pushes (with --push-password-file).
    #[arg(long = flag::USER, value_name = "USER")]
    pub push_user: Option<String>,
    /// File holding the basic-auth password of the pushes.
    #[arg(long = flag::PASSWORD_FILE, value_name = "FILE")]
    pub push_password_file: Option<String>,
    /// File holding a bearer token for the pushes.
    #[arg(long = flag::BEARER_TOKEN_FILE, value_name = "FILE")]
    pub push_bearer_token_file: Option<String>,
    /// PEM file of the CA certificates to trust for https pushes (else the system's).
    #[arg(long = flag::CA_FILE, value_name = "FILE")]
    pub push_ca_file: Option<String>,
}

impl PushArgs {
    /// The options as the push crate's builder takes them.
    fn options(&self) -> Options {
        Options {
            remote_write: self.remote_write.clone(),
            otlp: self.otlp.clone(),
            interval_ms: self.push_interval_ms,
            headers: self.push_headers.clone(),
            user: self.push_user.clone(),
            password_file: self.push_password_file.clone(),
            bearer_token_file: self.push_bearer_token_file.clone(),
            ca_file: self.push_ca_file.clone(),
        }
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

/// Starts the push loops `args` ask for (none, one or both), pushing the stores of `scan`.
pub fn start(args: &PushArgs, scan: &ScanConfig) -> Result<Vec<Pusher>, String> {
    let host = hostname();
    let Some(sidecar) = args
        .options()
        .configure(&process_settings, &host, scan.stale_ttl)?
    else {
        return Ok(Vec::new());
    };
    let sender = &sidecar.sender;
    let mut pushers = Vec::new();
    if let Some(config) = sidecar.remote_write {
        use nixl_telemetry_push::remote_write as rw;
        let client = Client::new(config.target)?;
        let payload = rw::RemoteWrite::new(source(scan, true, sender), own_labels(true, sender));
        pushers.push(
            Pusher::start(client, Box::new(payload), config.push)
                .map_err(|e| format!("cannot start the remote-write thread: {e}"))?,
        );
    }
    if let Some(config) = sidecar.otlp {
        use nixl_telemetry_push::otlp;
        let client = Client::new(config.target.clone())?;
        let payload = otlp::Otlp::new(
            source(scan, false, sender),
            own_labels(false, sender),
            &config,
            &host,
        );
        pushers.push(
            Pusher::start(client, Box::new(payload), config.push)
                .map_err(|e| format!("cannot start the OTLP thread: {e}"))?,
        );
    }
    Ok(pushers)
}
