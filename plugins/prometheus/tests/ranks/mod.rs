//! Four simulated ranks of two jobs on two hosts, for the tests of the queries users run on real
//! servers (the dashboard: `grafana.rs`, `grafana3.rs`; the rules: `monitoring_rules.rs`): the
//! ranks' `prometheus_mp` stores, written in this process, served by two store scans of their
//! directory, one without node totals and one with them (`NIXL_TELEMETRY_MP_AGGREGATE=sum`).

#![allow(dead_code)] // not every test binary reads every field

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_mp_store::config::{Aggregate, ScanConfig};
use nixl_telemetry_mp_store::election::{Election, Role};
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_test_support::promql::PromQl;

/// One simulated rank: its host, local rank, job and the amounts it records per tick.
pub struct Rank {
    pub host: &'static str,
    pub local_rank: &'static str,
    pub job: &'static str,
    /// Bytes sent per tick (received: a tenth; the transfer time in µs: a tenth; the post
    /// time: a hundredth).
    pub tx: u64,
}

/// node-a runs job 101 (ranks sending 1000 and 2000 bytes a tick), node-b job 202 (3000 and
/// 4000).
pub const RANKS: [Rank; 4] = [
    Rank {
        host: "node-a",
        local_rank: "0",
        job: "101",
        tx: 1000,
    },
    Rank {
        host: "node-a",
        local_rank: "1",
        job: "101",
        tx: 2000,
    },
    Rank {
        host: "node-b",
        local_rank: "0",
        job: "202",
        tx: 3000,
    },
    Rank {
        host: "node-b",
        local_rank: "1",
        job: "202",
        tx: 4000,
    },
];

/// The ranks at work: every 50 ms each records one transfer (its bytes, a transfer time of a
/// tenth of them in µs, a post time of a hundredth), a backend error and a dropped event;
/// rank `i` registered 4096 x (i + 1) bytes of memory and deregistered 1024 at the start. Their
/// stores have native histograms (a text page is the same without). They stop when dropped.
pub struct Ranks {
    stop: Arc<AtomicBool>,
    feeder: Option<JoinHandle<Vec<StoreWriter>>>,
    _scans: [Arc<Election>; 2],
    /// The port of the scan without node totals.
    pub plain_port: u16,
    /// The port of the scan with node totals.
    pub summed_port: u16,
}

impl Drop for Ranks {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(feeder) = self.feeder.take() {
            drop(feeder.join().unwrap());
        }
    }
}

impl Ranks {
    /// The ranks' stores in `scratch/mp`, fed, and served by both scans.
    pub fn start(scratch: &Path) -> Ranks {
        let dir = scratch.join("mp");
        nixl_telemetry_mp_store::dir::prepare(&dir).unwrap();
        let writers: Vec<StoreWriter> = RANKS
            .iter()
            .enumerate()
            .map(|(i, r)| {
                // Named apart, as ranks usually are: the node totals are per node and job all
                // the same.
                let id = Identity {
                    agent_name: format!("prefill-{i}"),
                    hostname: r.host.into(),
                    local_rank: r.local_rank.into(),
                    pid: 1000 + i as i64,
                    run_marker: 1,
                    instance: 0,
                    labels: nixl_telemetry_series::WorkloadLabels::from_pairs(vec![(
                        "slurm_job_id".into(),
                        r.job.into(),
                    )])
                    .unwrap(),
                };
                let w = StoreWriter::create_with(
                    &dir,
                    &id,
                    &nixl_telemetry_series::Buckets::default(),
                    true,
                )
                .unwrap();
                w.apply(&[
                    Event::new(EventType::AgentMemoryRegistered, 4096 * (i as u64 + 1)),
                    Event::new(EventType::AgentMemoryDeregistered, 1024),
                ]);
                w
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let feeder = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for (w, r) in writers.iter().zip(&RANKS) {
                        w.apply(&[
                            Event::new(EventType::AgentTxBytes, r.tx),
                            Event::new(EventType::AgentRxBytes, r.tx / 10),
                            Event::new(EventType::AgentTxRequestsNum, 1),
                            Event::new(EventType::AgentRxRequestsNum, 1),
                            Event::new(EventType::AgentXferTime, r.tx / 10),
                            Event::new(EventType::AgentXferPostTime, r.tx / 100),
                            Event::new(EventType::AgentErrBackend, 1),
                            Event::new(EventType::AgentTelemetryEventsDropped, 1),
                        ]);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                writers
            })
        };
        let serve = |aggregate| {
            let scan = ScanConfig {
                dir: dir.clone(),
                stale_ttl: Duration::from_secs(30),
                aggregate,
            };
            let port = nixl_telemetry_test_support::free_port();
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let e = nixl_telemetry_mp_store::join_election(&scan, addr);
            assert_eq!(e.poll(Instant::now()).unwrap(), Role::Serving(addr));
            (e, port)
        };
        let (plain, plain_port) = serve(Aggregate::None);
        let (summed, summed_port) = serve(Aggregate::Sum);
        Ranks {
            stop,
            feeder: Some(feeder),
            _scans: [plain, summed],
            plain_port,
            summed_port,
        }
    }
}

/// Waits (at most 90 s) until `server` (named `what`) has at least 8 samples of every rank's
/// TX bytes in the last 10 s, enough for a 10 s rate, and `more` holds.
pub fn wait_for_rates(server: &PromQl, what: &str, more: impl Fn(&PromQl) -> Option<()>) {
    let ready = nixl_telemetry_test_support::poll_for(Duration::from_secs(90), || {
        let v = server.vector(r#"count_over_time(agent_tx_bytes_total{pid!=""}[10s])"#)?;
        (v.len() == 4 && v.iter().all(|(_, n)| *n >= 8.0)).then_some(())?;
        more(server)
    });
    assert!(
        ready.is_some(),
        "{what}: not enough samples\n{}",
        server.log_text()
    );
}

/// One second ago, in Unix seconds: an instant every server has stored the scrapes before.
pub fn a_second_ago() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 1.0
}
