//! Ranks as separate processes sharing one directory and one port: one scrape shows every
//! rank with its labels and values; when the serving process and two more ranks are killed
//! with SIGKILL, the idle survivor takes the port over (its election runs from its flush
//! tick) and the dead ranks' series go after the stale TTL; a port held by a process outside
//! the directory's ranks gives one warning while the ranks keep writing their stores; without
//! a directory, creating the exporter fails with a message naming the variable.

mod common;

use std::time::{Duration, Instant};

use common::*;
use nixl_telemetry_mp_store::config::{Aggregate, ScanConfig};
use nixl_telemetry_mp_store::store_scan::StoreScan;

/// The child processes' entry point (see `common::child_main`).
#[test]
fn child() {
    child_main();
}

/// Generous: the design bound is one flush interval (100 ms) plus one election retry (200 ms).
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(10);

#[test]
fn four_ranks_on_one_port_then_an_idle_survivor_takes_over() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let port = free_port();
    let mut ranks: Vec<Proc> = (0..4u64)
        .map(|r| {
            spawn_rank(&RankSpec {
                dir: &dir,
                port,
                agent: &format!("rank{r}"),
                local_rank: &r.to_string(),
                bytes: (r + 1) * 1000,
                extra: &[("NIXL_TELEMETRY_MP_STALE_TTL", "1")],
            })
        })
        .collect();
    let all: Vec<u32> = ranks.iter().map(|r| r.pid).collect();
    // Every rank has flushed before printing READY: one scrape shows all four.
    let s = poll(Duration::from_secs(10), "a scrape of four ranks", || {
        try_scrape(port).filter(|s| pids(s).len() == 4)
    });
    for (r, rank) in ranks.iter().enumerate() {
        let agent = format!("rank{r}");
        let pid = rank.pid.to_string();
        let labels = [
            ("pid", pid.as_str()),
            ("local_rank", &*r.to_string()),
            ("agent_instance", "0"),
        ];
        let bytes = (r as f64 + 1.0) * 1000.0;
        assert_eq!(s.get("agent_tx_bytes_total", &agent, &labels), bytes);
        assert_eq!(s.get("agent_tx_last_bytes", &agent, &labels), bytes);
        assert_eq!(s.get("agent_tx_requests_num_total", &agent, &labels), 1.0);
        assert_eq!(
            s.get("agent_xfer_time_us_sum", &agent, &labels),
            bytes / 10.0
        );
        assert_eq!(s.get("agent_xfer_time_us_count", &agent, &labels), 1.0);
        assert_eq!(s.get("agent_xfer_post_time_total", &agent, &labels), 3.0);
        let host = s
            .samples
            .iter()
            .find(|x| x.label("pid") == Some(&pid))
            .and_then(|x| x.label("hostname"));
        assert!(host.is_some_and(|h| !h.is_empty()));
    }
    // 4 x (15 + 12 errors + 2 x (19 buckets + sum + count)) samples, nothing summed.
    assert_eq!(s.samples.len(), 4 * (15 + 12 + 42), "{}", s.body);

    // Kill the serving process (the one listening on the port) and two more ranks.
    let owner = listening_pid(port, &all).expect("one rank listens on the port");
    let survivor = *all.iter().rev().find(|&&p| p != owner).unwrap();
    let t0 = Instant::now();
    for r in ranks.iter_mut().filter(|r| r.pid != survivor) {
        r.kill9();
    }
    let killed = t0.elapsed();
    // The survivor records nothing: only its flush ticks can run the election.
    let serving = poll(FAILOVER_TIMEOUT, "the survivor serves the port", || {
        (listening_pid(port, &[survivor]).is_some() && try_scrape(port).is_some())
            .then(|| t0.elapsed())
    });
    println!(
        "failover: the survivor served {:?} after the kill (kills took {killed:?})",
        serving
    );
    // The dead ranks' stores go after the 1 s TTL (a departed writer's store is served until
    // then), from the page and from the directory.
    let gone = poll(
        FAILOVER_TIMEOUT,
        "only the survivor's series remain",
        || {
            try_scrape(port)
                .filter(|s| pids(s) == [survivor].into())
                .map(|_| t0.elapsed())
        },
    );
    println!("dead ranks' series gone {gone:?} after the kill (TTL 1 s)");
    let stores: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".mmap"))
        .collect();
    assert_eq!(stores.len(), 1, "{stores:?}");
    assert!(
        stores[0].starts_with(&format!("nixl.{survivor}.")),
        "{stores:?}"
    );
    let s = try_scrape(port).unwrap();
    let r = all.iter().position(|&p| p == survivor).unwrap();
    let bytes = (r as f64 + 1.0) * 1000.0;
    assert_eq!(
        s.get("agent_tx_bytes_total", &format!("rank{r}"), &[]),
        bytes
    );
    // The survivor exits cleanly, without a warning.
    let survivor = ranks.into_iter().find(|r| r.pid == survivor).unwrap();
    let err = survivor.finish();
    assert_eq!(count_lines(&err, "WARN"), 0, "{err}");
}

#[test]
fn a_port_held_outside_the_ranks_gives_one_warning_and_stores_are_still_written() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let (holder, port) = spawn_port_holder(scratch.path());
    let ranks: Vec<Proc> = (0..2u64)
        .map(|r| {
            spawn_rank(&RankSpec {
                dir: &dir,
                port,
                agent: &format!("w{r}"),
                local_rank: &r.to_string(),
                bytes: 500 + r,
                extra: &[],
            })
        })
        .collect();
    // Both stores are written and readable while nobody of the directory serves.
    let scan = StoreScan::new(ScanConfig {
        dir: dir.clone(),
        stale_ttl: Duration::from_secs(30),
        aggregate: Aggregate::None,
    });
    let stores = scan.live_stores();
    let mut bytes: Vec<u64> = stores
        .iter()
        .map(|s| {
            s.snapshot
                .counter(nixl_telemetry_core::EventType::AgentTxBytes)
        })
        .collect();
    bytes.sort();
    assert_eq!(bytes, [500, 501]);
    // The elected rank warns once (after a quick second try); the other stays silent.
    let warning = "is held by a process outside this run";
    let warnings = || -> usize {
        ranks
            .iter()
            .map(|r| count_lines(&r.stderr_text(), warning))
            .sum()
    };
    poll(
        Duration::from_secs(10),
        "the elected rank's warning",
        || (warnings() > 0).then_some(()),
    );
    assert_eq!(listening_pid(port, &[ranks[0].pid, ranks[1].pid]), None);
    // When the stranger leaves, the elected rank binds at its next retry (at most 5 s).
    drop(holder);
    let s = poll(
        Duration::from_secs(15),
        "a rank serves the freed port",
        || try_scrape(port).filter(|s| pids(s).len() == 2),
    );
    assert_eq!(s.get("agent_tx_bytes_total", "w1", &[]), 501.0);
    let mut stderr = String::new();
    for r in ranks {
        stderr.push_str(&r.finish());
    }
    assert_eq!(count_lines(&stderr, warning), 1, "{stderr}");
    assert_eq!(count_lines(&stderr, "WARN"), 1, "{stderr}");
}

#[test]
fn creation_without_a_directory_fails_with_a_clear_message() {
    // This test binary never sets NIXL_TELEMETRY_MULTIPROC_DIR (children get their own
    // environment).
    assert!(std::env::var_os("NIXL_TELEMETRY_MULTIPROC_DIR").is_none());
    let plugins = nixl_telemetry_test_support::built_plugins(&["prometheus_mp"]);
    nixl_telemetry_core::plugin::add_plugin_dir(&plugins).unwrap();
    let config = nixl_telemetry_core::Config {
        buffer_size: 64,
        run_interval: Duration::from_secs(3600),
        exporter: nixl_telemetry_core::ExporterChoice::Plugin("prometheus_mp".into()),
        enabled_metrics: nixl_telemetry_core::MetricMask::ALL,
    };
    let e = nixl_telemetry_core::Collector::new("no-dir", config)
        .err()
        .unwrap();
    assert_eq!(e.status, nixl_telemetry_core::Status::InvalidParam);
    assert!(
        e.message
            .contains("prometheus_mp exporter requires NIXL_TELEMETRY_MULTIPROC_DIR to be set"),
        "{}",
        e.message
    );
}
