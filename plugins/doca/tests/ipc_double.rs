//! The `ipc` backend end to end against a test double of NVIDIA's DOCA libraries: a small C
//! library (`tests/doca_double/`) compiled by the test into a temporary directory under the
//! real libraries' names, loaded by the plug-in through the same `dlopen` path as the real one
//! (`NIXL_TELEMETRY_DOCA_LIB_DIR`), recording every call it receives.

mod common;

use std::collections::HashMap;

use common::*;
use nixl_telemetry_base::logging::capture;
use nixl_telemetry_core::{EventType, Status};
use nixl_telemetry_series::DEFAULT_BUCKETS_US;

const P: &str = "doca_telemetry_exporter_";

fn bounds_text(bounds: &[f64]) -> String {
    bounds
        .iter()
        .map(|b| format!("{b}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The calls that set the process's DOCA context up (IPC connected).
fn setup_calls(sockets_dir: Option<&str>, bounds: &[f64], status: &str) -> Vec<String> {
    let mut v = vec![
        format!("{P}schema_init name=nixl_telemetry -> DOCA_SUCCESS"),
        format!("{P}schema_set_ipc_enabled"),
    ];
    if let Some(d) = sockets_dir {
        v.push(format!("{P}schema_set_ipc_sockets_dir dir={d}"));
    }
    v.extend([
        format!("{P}schema_start -> DOCA_SUCCESS"),
        format!("{P}source_create -> DOCA_SUCCESS"),
        format!("{P}source_set_id id=nixl"),
        format!("{P}source_set_tag tag=nixl"),
        format!("{P}source_start -> DOCA_SUCCESS"),
        format!("{P}check_ipc_status -> DOCA_SUCCESS status={status}"),
        format!("{P}metrics_create_context -> DOCA_SUCCESS"),
        format!(
            "{P}metrics_add_constant_label hostname={} -> DOCA_SUCCESS",
            nixl_telemetry_series::hostname()
        ),
        format!("{P}metrics_add_label_names names=agent_name count=1 -> DOCA_SUCCESS set=1"),
        format!("{P}metrics_add_label_names names=agent_name,status count=2 -> DOCA_SUCCESS set=2"),
        format!("{P}metrics_set_flush_interval_ms ms=1000 -> DOCA_SUCCESS"),
    ]);
    for (i, name) in ["agent_xfer_time_us", "agent_xfer_post_time_us"]
        .iter()
        .enumerate()
    {
        v.push(format!(
            "{P}metrics_add_base_histogram name={name} bounds={} count={} set=1 flush_ms=1000 \
             -> DOCA_SUCCESS base={}",
            bounds_text(bounds),
            bounds.len(),
            i + 1
        ));
    }
    v
}

/// The calls that tear the context down.
fn teardown_calls() -> Vec<String> {
    vec![
        format!("{P}metrics_flush -> DOCA_SUCCESS"),
        format!("{P}source_flush -> DOCA_SUCCESS"),
        format!("{P}metrics_destroy_context -> DOCA_SUCCESS"),
        format!("{P}source_destroy -> DOCA_SUCCESS"),
        format!("{P}schema_destroy -> DOCA_SUCCESS"),
    ]
}

/// A model of what the plug-in reports: the concrete histogram ids the double hands out (one
/// per base histogram and label values, numbered in order of first observation).
#[derive(Default)]
struct Model {
    histograms: HashMap<(u64, String), u64>,
}

impl Model {
    /// The calls of one exported batch of `agent`, timestamp `ts`, IPC status `status` after the
    /// flush.
    fn batch(
        &mut self,
        agent: &str,
        ts: u64,
        events: &[(EventType, u64)],
        status: &str,
    ) -> Vec<String> {
        let labels = format!("{{agent_name=\"{agent}\"}}");
        let mut v = vec![format!("{P}get_timestamp -> DOCA_SUCCESS ts={ts}")];
        for &(t, value) in events {
            let d = t.metrics();
            if let Some(status) = t.status_label() {
                v.push(format!(
                    "{P}metrics_add_counter_increment ts={ts} name=agent_errors_total \
                     value={value} set=2 labels={{agent_name=\"{agent}\",status=\"{status}\"}} \
                     -> DOCA_SUCCESS"
                ));
                continue;
            }
            if let Some(g) = d.gauge {
                v.push(format!(
                    "{P}metrics_add_gauge ts={ts} name={} value={value} set=1 labels={labels} \
                     -> DOCA_SUCCESS",
                    g.name
                ));
            }
            if d.histogram.is_some() {
                let base = if t == EventType::AgentXferTime { 1 } else { 2 };
                let next = self.histograms.len() as u64 + 1;
                let id = *self
                    .histograms
                    .entry((base, labels.clone()))
                    .or_insert(next);
                v.push(format!(
                    "{P}metrics_base_histogram_observe base={base} labels={labels} \
                     value={value} -> DOCA_SUCCESS histogram={id}"
                ));
            }
            v.push(format!(
                "{P}metrics_add_counter_increment ts={ts} name={} value={value} set=1 \
                 labels={labels} -> DOCA_SUCCESS",
                d.counter.name
            ));
        }
        v.push(format!("{P}metrics_flush -> DOCA_SUCCESS"));
        v.push(format!(
            "{P}check_ipc_status -> DOCA_SUCCESS status={status}"
        ));
        v
    }
}

/// The timestamps the double handed out, in order.
fn timestamps(calls: &[String]) -> Vec<u64> {
    calls
        .iter()
        .filter_map(|c| c.strip_prefix(&format!("{P}get_timestamp -> DOCA_SUCCESS ts=")))
        .map(|t| t.parse().unwrap())
        .collect()
}

fn assert_calls(actual: &[String], expected: &[String]) {
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert_eq!(a, e, "call {i} differs; all calls:\n{}", actual.join("\n"));
    }
    assert_eq!(
        actual.len(),
        expected.len(),
        "call counts differ; all calls:\n{}",
        actual.join("\n")
    );
}

fn xfer(xfer_us: u64, is_write: bool, bytes: u64, post_us: u64) -> Vec<(EventType, u64)> {
    let (b, r) = if is_write {
        (EventType::AgentTxBytes, EventType::AgentTxRequestsNum)
    } else {
        (EventType::AgentRxBytes, EventType::AgentRxRequestsNum)
    };
    vec![
        (EventType::AgentXferPostTime, post_us),
        (EventType::AgentXferTime, xfer_us),
        (b, bytes),
        (r, 1),
    ]
}

#[test]
fn every_event_is_reported_through_the_doca_api_in_order() {
    let _s = serial();
    let tmp = empty_dir();
    let log = double_log(tmp.path());
    let sockets = tmp.path().join("sockets");
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "ipc");
    std::env::set_var("NIXL_TELEMETRY_DOCA_LIB_DIR", double_dir(Double::Complete));
    std::env::set_var("NIXL_TELEMETRY_DOCA_IPC_SOCKETS_DIR", &sockets);
    let port = free_port();
    use_doca_port(port);

    let (stats, logged) = capture(|| {
        let c = collector("agent-d", "doca", 8);
        // Batch 1: a registration, a write transfer, a backend error.
        let _ = c.update_data(EventType::AgentMemoryRegistered, 4096);
        let _ = c.add_xfer_stats(120, true, 1 << 20, 8);
        c.update_error(-3).unwrap();
        c.flush();
        // Batch 2: a read transfer and a deregistration fill the 8-slot queue; three more
        // events are dropped and reported at the end of the batch.
        let _ = c.add_xfer_stats(30, false, 512, 3);
        let _ = c.update_data(EventType::AgentMemoryDeregistered, 2048);
        let _ = c.update_data(EventType::AgentTxBytes, 10);
        let _ = c.update_data(EventType::AgentTxBytes, 20);
        let _ = c.update_data(EventType::AgentTxBytes, 30);
        for _ in 0..3 {
            let _ = c.update_data(EventType::AgentTxBytes, 99);
        }
        c.flush();
        c.close()
    });
    assert!(warnings(&logged).is_empty(), "{logged:?}");
    assert_eq!(
        (
            stats.events_exported,
            stats.events_lost,
            stats.events_dropped
        ),
        (15, 0, 3)
    );
    // ipc alone: no scrape endpoint.
    assert!(port_closed(port));

    let actual = calls(&log);
    let ts = timestamps(&actual);
    assert_eq!(
        ts.len(),
        2,
        "one timestamp per batch:\n{}",
        actual.join("\n")
    );
    assert!(ts[0] < ts[1]);
    let dir = sockets.display().to_string();
    let mut m = Model::default();
    let mut batch1 = vec![(EventType::AgentMemoryRegistered, 4096)];
    batch1.extend(xfer(120, true, 1 << 20, 8));
    batch1.push((EventType::AgentErrBackend, 1));
    let mut batch2 = xfer(30, false, 512, 3);
    batch2.extend([
        (EventType::AgentMemoryDeregistered, 2048),
        (EventType::AgentTxBytes, 10),
        (EventType::AgentTxBytes, 20),
        (EventType::AgentTxBytes, 30),
        (EventType::AgentTelemetryEventsDropped, 3),
    ]);
    let mut expected = setup_calls(Some(&dir), &DEFAULT_BUCKETS_US, "connected");
    expected.extend(m.batch("agent-d", ts[0], &batch1, "connected"));
    expected.extend(m.batch("agent-d", ts[1], &batch2, "connected"));
    expected.extend(teardown_calls());
    assert_calls(&actual, &expected);
    // Spot checks of the model against the raw log.
    assert!(actual.contains(&format!(
        "{P}metrics_add_gauge ts={} name=agent_tx_last_bytes value=1048576 set=1 \
         labels={{agent_name=\"agent-d\"}} -> DOCA_SUCCESS",
        ts[0]
    )));
    assert!(actual.contains(&format!(
        "{P}metrics_add_counter_increment ts={} name=agent_telemetry_events_dropped_total \
         value=3 set=1 labels={{agent_name=\"agent-d\"}} -> DOCA_SUCCESS",
        ts[1]
    )));
}

#[test]
fn agents_share_one_context_and_the_first_agents_choice_wins() {
    let _s = serial();
    let tmp = empty_dir();
    let log = double_log(tmp.path());
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "ipc");
    std::env::set_var("NIXL_TELEMETRY_DOCA_LIB_DIR", double_dir(Double::Complete));
    std::env::set_var("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US", "100, 200,300");
    let port = free_port();
    use_doca_port(port);

    let ((), logged) = capture(|| {
        let a = collector("first", "doca", 64);
        // The second agent asks for the scrape backend and other buckets: one warning, and it
        // shares the first agent's ipc-only context (no endpoint appears).
        std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "scrape");
        std::env::remove_var("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US");
        let b = collector("second", "doca", 64);
        assert!(port_closed(port));
        // A duplicate name is refused.
        let e = try_collector("first", "doca", 64).err().unwrap();
        assert_eq!(e.status, Status::InvalidParam);
        assert!(
            e.message.contains("duplicate agent name 'first'"),
            "{}",
            e.message
        );
        let _ = a.add_xfer_stats(250, true, 100, 40);
        a.flush();
        let _ = b.update_data(EventType::AgentRxBytes, 7);
        b.flush();
        // The context outlives the first agent while the second one lives.
        drop(a);
        let _ = b.update_data(EventType::AgentRxBytes, 8);
        b.flush();
        drop(b);
    });
    let w = warnings(&logged);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("agent 'second' asked for backends 'scrape'"),
        "{}",
        w[0]
    );
    assert!(w[0].contains("histogram buckets"), "{}", w[0]);
    assert!(w[0].contains("first agent's choice is kept"), "{}", w[0]);

    let actual = calls(&log);
    let ts = timestamps(&actual);
    assert_eq!(ts.len(), 3);
    let mut m = Model::default();
    let mut expected = setup_calls(None, &[100.0, 200.0, 300.0], "connected");
    expected.extend(m.batch("first", ts[0], &xfer(250, true, 100, 40), "connected"));
    expected.extend(m.batch(
        "second",
        ts[1],
        &[(EventType::AgentRxBytes, 7)],
        "connected",
    ));
    expected.extend(m.batch(
        "second",
        ts[2],
        &[(EventType::AgentRxBytes, 8)],
        "connected",
    ));
    expected.extend(teardown_calls());
    assert_calls(&actual, &expected);

    // Once every agent is gone, the next one chooses afresh (and sets a new context up).
    let tmp2 = empty_dir();
    let log2 = double_log(tmp2.path());
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "scrape,ipc");
    let ((), logged) = capture(|| {
        let c = collector("third", "doca", 64);
        let (_, samples) = scrape(port);
        assert_eq!(agents(&samples), ["third"]);
        drop(c);
    });
    assert!(warnings(&logged).is_empty(), "{logged:?}");
    let mut expected = setup_calls(None, &DEFAULT_BUCKETS_US, "connected");
    expected.extend(teardown_calls());
    assert_calls(&calls(&log2), &expected);
}

#[test]
fn workload_labels_are_constant_labels_in_dts_and_labels_on_the_scrape_page() {
    let _s = serial();
    let tmp = empty_dir();
    let log = double_log(tmp.path());
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "scrape,ipc");
    std::env::set_var("NIXL_TELEMETRY_DOCA_LIB_DIR", double_dir(Double::Complete));
    std::env::set_var("NIXL_TELEMETRY_LABELS", "team=kv\\,cache");
    std::env::set_var("NIXL_TELEMETRY_LABELS_FROM", "slurm");
    std::env::set_var("SLURM_JOB_ID", "4242");
    let port = free_port();
    use_doca_port(port);
    let ((), logged) = capture(|| {
        let c = collector("labelled", "doca", 64);
        let _ = c.update_data(EventType::AgentRxBytes, 7);
        c.flush();
        let (_, samples) = scrape(port);
        let rx: Vec<_> = samples
            .iter()
            .filter(|s| s.name == "agent_rx_bytes_total")
            .collect();
        assert_eq!(rx.len(), 1);
        assert_eq!(rx[0].value, 7.0);
        assert_eq!(rx[0].label("team"), Some("kv,cache"));
        assert_eq!(rx[0].label("slurm_job_id"), Some("4242"));
        assert!(samples
            .iter()
            .all(|s| s.label("slurm_job_id") == Some("4242")));
        drop(c);
    });
    assert!(warnings(&logged).is_empty(), "{logged:?}");
    let actual = calls(&log);
    let mut expected = setup_calls(None, &DEFAULT_BUCKETS_US, "connected");
    let host = expected
        .iter()
        .position(|c| c.contains("add_constant_label hostname="))
        .unwrap();
    expected.splice(
        host + 1..host + 1,
        [
            format!("{P}metrics_add_constant_label team=kv,cache -> DOCA_SUCCESS"),
            format!("{P}metrics_add_constant_label slurm_job_id=4242 -> DOCA_SUCCESS"),
        ],
    );
    let ts = timestamps(&actual);
    expected.extend(Model::default().batch(
        "labelled",
        ts[0],
        &[(EventType::AgentRxBytes, 7)],
        "connected",
    ));
    expected.extend(teardown_calls());
    assert_calls(&actual, &expected);

    // A bad label fails the agent's creation, naming the variable.
    std::env::set_var("NIXL_TELEMETRY_LABELS", "my-team=x");
    let e = try_collector("bad", "doca", 64).err().unwrap();
    assert_eq!(e.status, Status::InvalidParam);
    assert!(
        e.message.contains("NIXL_TELEMETRY_LABELS") && e.message.contains("'my-team'"),
        "{}",
        e.message
    );
}

#[test]
fn dts_not_connected_is_one_warning_and_nothing_crashes() {
    let _s = serial();
    let tmp = empty_dir();
    let log = double_log(tmp.path());
    std::env::set_var("NIXL_TELEMETRY_DOCA_LIB_DIR", double_dir(Double::Complete));
    std::env::set_var("DOCA_DOUBLE_IPC_STATUS", "failed");
    let port = free_port();
    use_doca_port(port);

    // Both backends: one warning; scrape keeps everything, nothing is counted lost.
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "scrape,ipc");
    let (stats, logged) = capture(|| {
        let c = collector("unreached", "doca", 64);
        for _ in 0..3 {
            let _ = c.add_xfer_stats(5, true, 1000, 2);
            c.flush();
        }
        let (_, samples) = scrape(port);
        assert_eq!(
            value(&samples, "agent_tx_bytes_total", "unreached", &[]),
            Some(3000.0)
        );
        c.close()
    });
    let w = warnings(&logged);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("DOCA telemetry IPC not connected"),
        "{}",
        w[0]
    );
    assert!(w[0].contains("status failed"), "{}", w[0]);
    assert!(
        w[0].contains("the scrape backend is unaffected"),
        "{}",
        w[0]
    );
    assert_eq!((stats.events_exported, stats.events_lost), (12, 0));
    // The events were still handed to DOCA (which reconnects by itself).
    let actual = calls(&log);
    assert_eq!(timestamps(&actual).len(), 3);
    assert_eq!(
        actual
            .iter()
            .filter(|c| c.contains("status=failed"))
            .count(),
        4,
        "after the source start and after each of the 3 flushes"
    );

    // ipc alone: the events DTS did not get are counted as not kept.
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "ipc");
    let (stats, logged) = capture(|| {
        let c = collector("unreached", "doca", 64);
        let _ = c.add_xfer_stats(5, true, 1000, 2);
        c.flush();
        // DTS comes up: the next batch is kept, and the reconnection is logged at info level.
        std::env::set_var("DOCA_DOUBLE_IPC_STATUS", "connected");
        let _ = c.add_xfer_stats(6, true, 1000, 2);
        c.flush();
        c.close()
    });
    let w = warnings(&logged);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("DOCA telemetry IPC not connected"),
        "{}",
        w[0]
    );
    assert!(w[0].contains("counted as not exported"), "{}", w[0]);
    // The second is the collector's own report of the loss.
    assert!(w[1].contains("could not keep 4 events"), "{}", w[1]);
    assert!(logged
        .iter()
        .any(|(_, m)| m.contains("DOCA telemetry exporter: IPC connected to DTS")));
    assert_eq!((stats.events_exported, stats.events_lost), (4, 4));
}

#[test]
fn a_failing_setup_call_is_one_warning_and_the_exporter_goes_on() {
    let _s = serial();
    let tmp = empty_dir();
    let log = double_log(tmp.path());
    std::env::set_var("NIXL_TELEMETRY_DOCA_LIB_DIR", double_dir(Double::Complete));
    std::env::set_var("DOCA_DOUBLE_FAIL", "doca_telemetry_exporter_source_start");
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "ipc,scrape");
    let port = free_port();
    use_doca_port(port);
    let (stats, logged) = capture(|| {
        let c = collector("degraded", "doca", 64);
        let _ = c.update_data(EventType::AgentRxBytes, 5);
        c.flush();
        let (_, samples) = scrape(port);
        assert_eq!(
            value(&samples, "agent_rx_bytes_total", "degraded", &[]),
            Some(5.0)
        );
        c.close()
    });
    let w = warnings(&logged);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains(
            "ipc backend is unavailable: doca_telemetry_exporter_source_start failed \
             (DOCA_ERROR_INITIALIZATION)"
        ),
        "{}",
        w[0]
    );
    assert_eq!((stats.events_exported, stats.events_lost), (1, 0));
    // What was created is destroyed; nothing is reported afterwards.
    assert_calls(
        &calls(&log),
        &[
            format!("{P}schema_init name=nixl_telemetry -> DOCA_SUCCESS"),
            format!("{P}schema_set_ipc_enabled"),
            format!("{P}schema_start -> DOCA_SUCCESS"),
            format!("{P}source_create -> DOCA_SUCCESS"),
            format!("{P}source_set_id id=nixl"),
            format!("{P}source_set_tag tag=nixl"),
            format!("{P}source_start -> DOCA_ERROR_INITIALIZATION"),
            format!("{P}source_destroy -> DOCA_SUCCESS"),
            format!("{P}schema_destroy -> DOCA_SUCCESS"),
        ],
    );
}

#[test]
fn a_missing_symbol_is_one_warning_naming_it() {
    let _s = serial();
    let tmp = empty_dir();
    let log = double_log(tmp.path());
    std::env::set_var(
        "NIXL_TELEMETRY_DOCA_LIB_DIR",
        double_dir(Double::WithoutObserve),
    );
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "ipc");
    let (stats, logged) = capture(|| {
        let c = collector("partial", "doca", 64);
        let _ = c.update_data(EventType::AgentTxBytes, 5);
        c.close()
    });
    let w = warnings(&logged);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("symbol doca_telemetry_exporter_metrics_base_histogram_observe is missing"),
        "{}",
        w[0]
    );
    assert!(w[1].contains("could not keep 1 events"), "{}", w[1]);
    assert_eq!((stats.events_exported, stats.events_lost), (0, 1));
    // Nothing of that library was called.
    assert!(calls(&log).is_empty());
}

#[test]
fn agents_coming_and_going_never_overlap_context_setup_and_teardown() {
    // Two threads each create and destroy an ipc agent in a loop: the last agent's teardown
    // of the shared DOCA context must finish before the next agent sets one up (the double
    // records an overlap when schema_init runs while another schema is alive).
    let _s = serial();
    let tmp = empty_dir();
    let log = double_log(tmp.path());
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "ipc");
    std::env::set_var("NIXL_TELEMETRY_DOCA_LIB_DIR", double_dir(Double::Complete));
    std::env::remove_var("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US");
    std::env::set_var("DOCA_DOUBLE_SLOW_DESTROY", "1");
    // Pauses between an agent's end and the next one's start leave moments with no agent, so
    // the context is torn down and set up again many times while the other thread is busy.
    let workers: Vec<_> = [("left", 300), ("right", 700)]
        .into_iter()
        .map(|(name, pause_us)| {
            std::thread::spawn(move || {
                for i in 0..60 {
                    let c = collector(&format!("{name}-{i}"), "doca", 64);
                    let _ = c.update_data(EventType::AgentTxBytes, i);
                    drop(c);
                    std::thread::sleep(std::time::Duration::from_micros(pause_us));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    std::env::remove_var("DOCA_DOUBLE_SLOW_DESTROY");
    let actual = calls(&log);
    assert!(
        actual
            .iter()
            .any(|c| c.starts_with("doca_telemetry_exporter_schema_init")),
        "the double was not used"
    );
    let overlaps: Vec<&String> = actual.iter().filter(|c| c.starts_with("OVERLAP")).collect();
    assert!(
        overlaps.is_empty(),
        "{} overlaps: {:?}",
        overlaps.len(),
        overlaps.first()
    );
}
