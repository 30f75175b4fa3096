//! `nixl-telemetry serve --remote-write URL`: the sidecar pushes every live store of its
//! directory to a real Prometheus server (Debian's `prometheus` with the remote-write
//! receiver): exact per-rank totals (`sum by (local_rank)`), a rank that exits is pushed after
//! its last update before its store is reaped, and bad push options fail naming the option;
//! `--push-only` sidecars of two jobs keep their series apart and bind no port; `--otlp` takes
//! a base URL; the defaults of both protocols start.

mod common;

use std::os::unix::fs::DirBuilderExt;
use std::process::Command;
use std::time::Duration;

use assert_cmd::cargo::CommandCargoExt;
use common::sidecar::{listening_sockets, probe, rank_store, Sidecar};
use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_mp_store::store::StoreWriter;
use nixl_telemetry_series::{hostname, WorkloadLabels};
use nixl_telemetry_test_support::free_port;
use nixl_telemetry_test_support::prometheus::{label_names, poll, poll_for, Prometheus};

fn by_rank(prom: &Prometheus) -> Option<Vec<(String, f64)>> {
    prom.by_label(
        "local_rank",
        "sum by (local_rank) (agent_tx_bytes_total{agent_name=\"ranked\"})",
    )
}

#[test]
fn serve_pushes_every_rank_and_a_departed_ranks_last_update() {
    let work = tempfile::tempdir().unwrap();
    let prom = Prometheus::start(work.path(), None, None);
    let dir = work.path().join("mp");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let writers: Vec<StoreWriter> = (0..2u64)
        .map(|r| {
            let events = [
                Event::new(EventType::AgentTxBytes, 1000 * (r + 1)),
                Event::new(EventType::AgentXferTime, 30),
            ];
            rank_store(&dir, "ranked", r, WorkloadLabels::none(), false, &events)
        })
        .collect();
    let port = free_port();
    let serve = Sidecar::start(
        &dir,
        &[
            "--port",
            &port.to_string(),
            "--local",
            "--stale-ttl",
            "2",
            "--push-interval-ms",
            "300",
            "--remote-write",
            &prom.write_url(),
        ],
        &[],
    );
    assert!(
        serve.first_line.starts_with("serving "),
        "{}",
        serve.first_line
    );
    // The check that push-only sidecars bind nothing but their health port sees this one's.
    assert_eq!(listening_sockets(serve.id()).len(), 1);
    poll("both ranks' totals", || {
        by_rank(&prom).filter(|v| *v == [("0".into(), 1000.0), ("1".into(), 2000.0)])
    });
    // `/health` says how the pushes fare, beside the ranks it serves.
    let health = poll("a push counted in /health", || {
        let (_, doc) = probe(serve.address(), "/health")?;
        (doc["push"][0]["successes"].as_u64()? > 0).then_some(doc)
    });
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["ranks"], 2, "{health}");
    assert_eq!(health["push"][0]["name"], "remote_write", "{health}");
    // Rank 1's last update, then it exits: its store is pushed before it is reaped.
    let mut writers = writers;
    let last = writers.pop().unwrap();
    let path = last.path().to_owned();
    last.apply(&[Event::new(EventType::AgentTxBytes, 500)]);
    drop(last);
    poll("the departed rank's last update", || {
        by_rank(&prom).filter(|v| *v == [("0".into(), 1000.0), ("1".into(), 2500.0)])
    });
    assert!(
        poll_for(Duration::from_secs(30), || (!path.exists()).then_some(())).is_some(),
        "the departed rank's store is reaped after the TTL"
    );
    // The labels of the multi-process endpoint, with `pid` and `agent_instance`.
    let one = prom
        .vector("agent_tx_bytes_total{agent_name=\"ranked\",local_rank=\"0\"}")
        .unwrap();
    assert_eq!(
        label_names(&one[0].0),
        [
            "__name__",
            "agent_instance",
            "agent_name",
            "hostname",
            "instance",
            "local_rank",
            "pid"
        ]
    );
    serve.stop();
    drop(writers);
}

#[test]
fn bad_push_options_fail_naming_the_option() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("mp");
    for (args, expected) in [
        (
            vec!["--remote-write", "ftp://127.0.0.1/x"],
            "--remote-write='ftp://127.0.0.1/x': the scheme must be http or https",
        ),
        (
            vec!["--otlp", "127.0.0.1:4318"],
            "--otlp='127.0.0.1:4318' is not a URL",
        ),
        (
            vec![
                "--remote-write",
                "http://127.0.0.1:1/w",
                "--push-interval-ms",
                "5000",
                "--stale-ttl",
                "2",
            ],
            "must be shorter than the stale TTL",
        ),
        (
            vec![
                "--remote-write",
                "http://127.0.0.1:1/w",
                "--push-header",
                "novalue",
            ],
            "--push-header: pair 1 of 1 is not name=value",
        ),
        (
            vec![
                "--remote-write",
                "http://127.0.0.1:1/w",
                "--push-user",
                "u",
                "--push-password-file",
                "/nonexistent/pw",
            ],
            "--push-password-file='/nonexistent/pw' cannot be opened",
        ),
        (
            vec!["--otlp", "http://127.0.0.1:4318/v1/traces"],
            "--otlp='http://127.0.0.1:4318/v1/traces' is OpenTelemetry's /v1/traces endpoint",
        ),
        (
            vec!["--otlp", "http://127.0.0.1:4318/v1"],
            "ends in /v1 (it would become /v1/v1/metrics)",
        ),
        (
            vec!["--otlp", "http://127.0.0.1:9090/api/v1/write"],
            "is a remote-write URL: use --remote-write",
        ),
        (
            vec!["--remote-write", "http://127.0.0.1:9090"],
            "--remote-write='http://127.0.0.1:9090' has no path",
        ),
        (
            vec!["--remote-write", "http://127.0.0.1:4318/v1/metrics"],
            "is an OTLP URL: use --otlp",
        ),
    ] {
        let out = Command::cargo_bin("nixl-telemetry")
            .unwrap()
            .args(["serve", "--dir"])
            .arg(&dir)
            .args(["--port", &free_port().to_string(), "--local"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

/// Starts `serve --push-only` for `dir` with `args` and `env`; returns it once it says it
/// pushes.
fn push_only(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Sidecar {
    let args: Vec<&str> = ["--push-only"].iter().chain(args).copied().collect();
    let sidecar = Sidecar::start(dir, &args, env);
    assert!(
        sidecar.first_line.starts_with("pushing "),
        "{}",
        sidecar.first_line
    );
    sidecar
}

/// Two jobs on one node, a directory and a `serve --push-only` sidecar each, one Prometheus:
/// the ranks are named alike in both jobs; job 101's stores have no workload labels (its
/// sidecar's `NIXL_TELEMETRY_LABELS_FROM=slurm` gives them `slurm_job_id`), job 202's have
/// their own. Each job's totals are exact by `slurm_job_id`, each sidecar's push counters are
/// its own series (its job's labels and its `instance`), and neither binds a port but its
/// health checks' own on loopback.
#[test]
fn two_jobs_push_only_sidecars_keep_their_series_apart() {
    let work = tempfile::tempdir().unwrap();
    let prom = Prometheus::start(work.path(), None, None);
    let jobs = [("101", false, 1000u64), ("202", true, 7000u64)];
    let mut writers = Vec::new();
    let mut sidecars = Vec::new();
    for (job, labelled, bytes) in jobs {
        let dir = work.path().join(job);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        for r in 0..2u64 {
            let labels = if labelled {
                WorkloadLabels::from_pairs(vec![("slurm_job_id".into(), job.into())]).unwrap()
            } else {
                WorkloadLabels::none()
            };
            let events = [Event::new(EventType::AgentTxBytes, bytes * (r + 1))];
            writers.push(rank_store(
                &dir,
                &format!("rank{r}"),
                r,
                labels,
                false,
                &events,
            ));
        }
        let env: Vec<(&str, &str)> = if labelled {
            vec![("NIXL_TELEMETRY_LABELS", "slurm_job_id=202")]
        } else {
            vec![
                ("NIXL_TELEMETRY_LABELS_FROM", "slurm"),
                ("SLURM_JOB_ID", "101"),
            ]
        };
        let url = prom.write_url();
        sidecars.push(push_only(
            &dir,
            &["--remote-write", &url, "--push-interval-ms", "300"],
            &env,
        ));
    }
    for serve in &sidecars {
        let health = format!("0100007F:{:04X}", serve.address().port());
        assert_eq!(listening_sockets(serve.id()), [health]);
    }
    let totals = poll("each job's totals", || {
        prom.by_label(
            "slurm_job_id",
            "sum by (slurm_job_id) (agent_tx_bytes_total)",
        )
        .filter(|v| *v == [("101".into(), 3000.0), ("202".into(), 21000.0)])
    });
    assert_eq!(totals.len(), 2);
    // Each sidecar's counters: one series per job, named by the sidecar's `instance`.
    let counters = poll("each sidecar's push counters", || {
        prom.vector(r#"nixl_telemetry_push_successes_total{pusher="serve"} > 0"#)
            .filter(|v| v.len() == 2)
    });
    let mut seen: Vec<(String, String)> = counters
        .iter()
        .map(|(l, _)| {
            (
                l["slurm_job_id"].as_str().unwrap().to_owned(),
                l["instance"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    seen.sort();
    let expected: Vec<(String, String)> = jobs
        .iter()
        .zip(&sidecars)
        .map(|((job, _, _), serve)| (job.to_string(), format!("{}:{}", hostname(), serve.id())))
        .collect();
    assert_eq!(seen, expected);
    // The ranks' series carry the sidecar's identity too.
    let pushed = prom
        .vector(r#"count by (instance, slurm_job_id) (agent_tx_bytes_total)"#)
        .unwrap();
    assert_eq!(pushed.len(), 2, "{pushed:?}");
    for serve in sidecars {
        serve.stop();
    }
    drop(writers);
}

/// `serve --otlp http://host:port` (a base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`) pushes to
/// `/v1/metrics`, and both protocols start with their defaults (no interval or TTL given): the
/// last push at SIGTERM reaches both paths.
#[test]
fn otlp_base_url_pushes_to_v1_metrics_and_defaults_start() {
    use nixl_telemetry_test_support::receiver::{Answer, Receiver};
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("mp");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let events = [Event::new(EventType::AgentTxBytes, 1)];
    let w = rank_store(&dir, "r", 0, WorkloadLabels::none(), false, &events);
    let rx = Receiver::start(Answer::Status(200, String::new()));
    let base = format!("http://127.0.0.1:{}", rx.port());
    let write = format!("{base}/api/v1/write");
    let serve = push_only(&dir, &["--otlp", &base, "--remote-write", &write], &[]);
    // Defaults of 15 s: nothing before the first interval; the last push on SIGTERM.
    serve.stop();
    let mut paths: Vec<String> = rx.requests().into_iter().map(|r| r.path).collect();
    paths.sort();
    paths.dedup();
    assert_eq!(paths, ["/api/v1/write", "/v1/metrics"]);
    // A full /v1/metrics URL is used as given.
    let rx = Receiver::start(Answer::Status(200, String::new()));
    let full = format!("http://127.0.0.1:{}/custom/v1/metrics", rx.port());
    let serve = push_only(&dir, &["--otlp", &full], &[]);
    serve.stop();
    let paths: Vec<String> = rx.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/custom/v1/metrics"]);
    drop(w);
}

/// `--push-only` without a receiver is refused, and so is `--push-only` with a port.
#[test]
fn push_only_needs_a_receiver_and_takes_no_port() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("mp");
    for (args, expected) in [
        (vec![], "--push-only needs --remote-write URL or --otlp URL"),
        (vec!["--port", "9999"], "cannot be used with"),
    ] {
        let out = Command::cargo_bin("nixl-telemetry")
            .unwrap()
            .args(["serve", "--push-only", "--dir"])
            .arg(&dir)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

/// Ranks that keep native histograms in their stores (`StoreWriter::create_with(.., true)`, as
/// `NIXL_TELEMETRY_NATIVE_HISTOGRAMS=true` makes `prometheus_mp` do): `serve --push-only
/// --remote-write` pushes them as native histogram samples, each rank's, to a real Prometheus
/// with native histograms on.
#[test]
fn serve_pushes_the_native_histograms_the_stores_keep() {
    let work = tempfile::tempdir().unwrap();
    let prom = Prometheus::start_native(work.path(), None);
    let dir = work.path().join("mp");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let writers: Vec<StoreWriter> = (0..2u64)
        .map(|r| {
            let batch: Vec<Event> = (1..=10 * (r + 1))
                .map(|k| Event::new(EventType::AgentXferTime, 100 * k))
                .collect();
            rank_store(&dir, "native", r, WorkloadLabels::none(), true, &batch)
        })
        .collect();
    let sidecar = push_only(
        &dir,
        &[
            "--remote-write",
            &prom.write_url(),
            "--push-interval-ms",
            "300",
        ],
        &[],
    );
    for (rank, count) in [("0", 10.0), ("1", 20.0)] {
        prom.wait_for_value(
            &format!(
                "histogram_count(agent_xfer_time_us{{agent_name=\"native\",local_rank=\"{rank}\"}})"
            ),
            count,
        );
    }
    sidecar.stop();
    drop(writers);
}
