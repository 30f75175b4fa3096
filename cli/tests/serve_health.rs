//! `nixl-telemetry serve`'s health checks tell whether it delivers: `/health` and `/readyz`
//! answer 503 once no push has been accepted for N push intervals, with the last accepted
//! push's age, and 200 again once one is; `/livez` stays 200 meanwhile. Tried with a receiver
//! that is down from the start and one that goes down after accepting, for `serve --push-only`
//! (whose health checks have a loopback port of their own) and `serve` with its scrape port,
//! pushing remote-write and OTLP. And `serve`'s scrape endpoint answers every request under an
//! idle-connection flood from 40 source addresses.

mod common;

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use common::sidecar::{listening_sockets, probe, rank_store, Sidecar};
use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_mp_store::store::StoreWriter;
use nixl_telemetry_series::WorkloadLabels;
use nixl_telemetry_test_support::flood::requests_under_flood;
use nixl_telemetry_test_support::free_port;
use nixl_telemetry_test_support::prometheus::poll;
use nixl_telemetry_test_support::receiver::{Answer, Receiver};
use serde_json::Value;

/// A store directory with one live rank, removed on drop.
struct Node {
    _work: tempfile::TempDir,
    dir: std::path::PathBuf,
    _rank: StoreWriter,
}

impl Node {
    fn new() -> Node {
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("mp");
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        let events = [Event::new(EventType::AgentTxBytes, 1000)];
        let rank = rank_store(&dir, "r", 0, WorkloadLabels::none(), false, &events);
        Node {
            _work: work,
            dir,
            _rank: rank,
        }
    }
}

/// `serve` on a free loopback scrape port with `args`: a port taken by another process between
/// the probe and the bind makes it wait ("waiting: ..."), and another port is tried.
fn serving(dir: &Path, args: &[&str]) -> Sidecar {
    for _ in 0..10 {
        let port = free_port().to_string();
        let mut all = vec!["--port", &port, "--local"];
        all.extend_from_slice(args);
        let serve = Sidecar::start(dir, &all, &[]);
        if serve.first_line.starts_with("serving ") {
            return serve;
        }
    }
    panic!("no free port in 10 tries");
}

/// The readiness probes (`/readyz`, `/health`) once they answer `status`, with the body; both
/// must agree, and `/livez` must answer 200 meanwhile.
fn ready_becomes(serve: &Sidecar, status: u16) -> Value {
    poll(&format!("/readyz answering {status}"), || {
        let (ready, doc) = probe(serve.address(), "/readyz")?;
        if ready != status {
            return None;
        }
        let (health, same) = probe(serve.address(), "/health")?;
        (health == status && same["status"] == doc["status"]).then_some(doc)
    });
    let (ready, doc) = probe(serve.address(), "/readyz").unwrap();
    assert_eq!(ready, status, "{doc}");
    let (live, alive) = probe(serve.address(), "/livez").unwrap();
    assert_eq!(live, 200, "{alive}");
    assert!(alive["loop_age_s"].as_f64().unwrap() < 10.0, "{alive}");
    doc
}

/// The receiver comes back: ready again, then `serve` stops cleanly.
fn back_then_stop(rx: &Receiver, serve: Sidecar) {
    rx.come_back();
    ready_becomes(&serve, 200);
    serve.stop();
}

/// The push loop `name`'s object in a health answer.
fn push_of<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["push"]
        .as_array()
        .and_then(|loops| loops.iter().find(|l| l["name"] == name))
        .unwrap_or_else(|| panic!("no push loop {name} in {doc}"))
}

/// Down from the start, up, down after accepting, up: 503 with no accepted push yet, 200, 503
/// with the last accepted push's age, 200; each 503 once the default 3 intervals of 200 ms have
/// gone by without an accepted push.
#[test]
fn push_only_readiness_follows_a_receiver_that_is_down_and_comes_back() {
    let node = Node::new();
    let rx = Receiver::start(Answer::Status(204, String::new()));
    rx.go_down();
    let url = rx.url("/api/v1/write");
    let args = [
        "--push-only",
        "--remote-write",
        &url,
        "--push-interval-ms",
        "200",
    ];
    let serve = Sidecar::start(&node.dir, &args, &[]);
    assert!(
        serve.first_line.starts_with("pushing ") && serve.address().ip().is_loopback(),
        "{}",
        serve.first_line
    );
    let port = format!("0100007F:{:04X}", serve.address().port());
    assert_eq!(listening_sockets(serve.id()), [port]);
    assert_eq!(probe(serve.address(), "/metrics").unwrap().0, 404);

    let never = ready_becomes(&serve, 503);
    let reason = never["reason"].as_str().unwrap();
    assert!(
        reason.contains("remote_write: no push accepted within 3 push intervals (0.600 s): none since the start"),
        "{never}"
    );
    let rw = push_of(&never, "remote_write");
    assert_eq!(rw["last_success_age_s"], Value::Null, "{never}");
    assert!(rw["failures_in_a_row"].as_u64().unwrap() >= 1, "{never}");
    assert_eq!(rw["successes"], 0, "{never}");
    assert_eq!(never["ranks"], 1, "the stores are served: {never}");

    rx.come_back();
    let back = ready_becomes(&serve, 200);
    let rw = push_of(&back, "remote_write");
    assert!(rw["last_success_age_s"].as_f64().is_some(), "{back}");
    assert_eq!(rw["failures_in_a_row"], 0, "{back}");

    rx.go_down();
    let down = ready_becomes(&serve, 503);
    assert!(
        down["reason"].as_str().unwrap().contains("the last one"),
        "{down}"
    );
    let rw = push_of(&down, "remote_write");
    assert!(
        rw["last_success_age_s"].as_f64().unwrap() >= 0.6,
        "the age of the last accepted push: {down}"
    );
    assert!(rw["successes"].as_u64().unwrap() >= 1, "{down}");
    back_then_stop(&rx, serve);
}

/// `serve` with its scrape port pushing OTLP, two intervals as the bound
/// (`--health-push-intervals 2`): ready while pushes are accepted, 503 naming the loop once
/// they are not, ready again when the receiver is back; the scrape page is served throughout.
#[test]
fn serve_readiness_follows_its_pushes_on_the_scrape_port() {
    let node = Node::new();
    let rx = Receiver::start(Answer::Status(200, String::new()));
    let url = rx.url("/v1/metrics");
    let serve = serving(
        &node.dir,
        &[
            "--otlp",
            &url,
            "--push-interval-ms",
            "200",
            "--health-push-intervals",
            "2",
        ],
    );
    let up = poll("an accepted push", || {
        let (status, doc) = probe(serve.address(), "/readyz")?;
        (status == 200 && push_of(&doc, "otlp")["successes"].as_u64()? > 0).then_some(doc)
    });
    assert_eq!(up["ranks"], 1, "{up}");
    rx.go_down();
    let down = ready_becomes(&serve, 503);
    assert!(
        down["reason"]
            .as_str()
            .unwrap()
            .contains("otlp: no push accepted within 2 push intervals (0.400 s): the last one"),
        "{down}"
    );
    assert!(
        push_of(&down, "otlp")["last_success_age_s"]
            .as_f64()
            .unwrap()
            >= 0.4
    );
    assert_eq!(probe(serve.address(), "/metrics").unwrap().0, 200);
    back_then_stop(&rx, serve);
}

/// `serve`'s scrape endpoint under an idle-connection flood from 40 source addresses: every
/// `/metrics` and `/health` request is answered (test-support's `flood`).
#[test]
fn every_request_is_answered_under_an_idle_flood_from_many_addresses() {
    let node = Node::new();
    let serve = serving(&node.dir, &[]);
    let report = requests_under_flood(serve.address(), 120);
    assert!(report.failures.is_empty(), "{report:#?}");
    serve.stop();
}
