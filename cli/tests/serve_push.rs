//! `nixl-telemetry serve --remote-write URL`: the sidecar pushes every live store of its
//! directory to a real Prometheus server (Debian's `prometheus` with the remote-write
//! receiver): exact per-rank totals (`sum by (local_rank)`), a rank that exits is pushed after
//! its last update before its store is reaped, and bad push options fail naming the option.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::DirBuilderExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use assert_cmd::cargo::CommandCargoExt;
use nixl_telemetry::{Event, EventType};
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_series::{hostname, Buckets, WorkloadLabels};
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
            let id = Identity::for_this_process(
                "ranked",
                &hostname(),
                &r.to_string(),
                WorkloadLabels::none(),
            );
            let w = StoreWriter::create(&dir, &id, &Buckets::default()).unwrap();
            w.apply(&[
                Event::new(EventType::AgentTxBytes, 1000 * (r + 1)),
                Event::new(EventType::AgentXferTime, 30),
            ]);
            w
        })
        .collect();
    let mut serve = Command::cargo_bin("nixl-telemetry")
        .unwrap()
        .args(["serve", "--dir"])
        .arg(&dir)
        .args(["--port", &free_port().to_string(), "--local"])
        .args(["--stale-ttl", "2", "--push-interval-ms", "300"])
        .args(["--remote-write", &prom.write_url()])
        .env("NIXL_LOG_LEVEL", "WARN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(serve.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("serving "), "{line}");
    poll("both ranks' totals", || {
        by_rank(&prom).filter(|v| *v == [("0".into(), 1000.0), ("1".into(), 2000.0)])
    });
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
            "local_rank",
            "pid"
        ]
    );
    terminate(serve.id());
    let status = serve.wait().unwrap();
    assert!(status.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(rest.contains("stopped"), "{rest}");
    drop(writers);
}

/// Sends SIGTERM to `pid` (a child of this test).
fn terminate(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
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
            "--push-header: 'novalue' is not name=value",
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
