//! A process of the same user truncates a store while the serving process scrapes: the serving
//! process must not die of SIGBUS (it did after a dozen scrapes), and it serves the store again
//! once the file is whole. Alone in its test binary: without the protection, the signal ends
//! the whole binary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nixl_telemetry_base::{Event, EventType};
use nixl_telemetry_mp_store::config::{Aggregate, ScanConfig};
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_mp_store::store_scan::StoreScan;
use nixl_telemetry_series::{Buckets, WorkloadLabels};

#[test]
fn scrapes_survive_a_store_truncated_under_them() {
    let dir = tempfile::tempdir().unwrap();
    let id = Identity {
        agent_name: "rank0".into(),
        hostname: "node".into(),
        local_rank: "0".into(),
        pid: i64::from(std::process::id()),
        run_marker: 1,
        instance: 0,
        labels: WorkloadLabels::none(),
    };
    let writer = StoreWriter::create(dir.path(), &id, &Buckets::default()).unwrap();
    let event = Event::new(EventType::AgentTxBytes, 4096);
    assert_eq!(writer.apply(&[event]), 1);
    let path = writer.path().to_owned();
    let scan = StoreScan::new(ScanConfig {
        dir: dir.path().to_owned(),
        stale_ttl: Duration::from_secs(3600),
        aggregate: Aggregate::None,
    });
    assert!(scan.scrape().contains("agent_tx_bytes_total"));
    // Another process of the user (here a thread, with its own descriptor) truncates the file and
    // makes it whole again, over and over, while scrapes run.
    let stop = Arc::new(AtomicBool::new(false));
    let truncator = {
        let (stop, path) = (stop.clone(), path.clone());
        std::thread::spawn(move || {
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                file.set_len(0).unwrap();
                std::thread::yield_now();
                file.set_len(6800).unwrap();
                rounds += 1;
            }
            rounds
        })
    };
    for _ in 0..2000 {
        let _ = scan.scrape();
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = truncator.join().unwrap();
    assert!(
        rounds > 0,
        "the file was never truncated during the scrapes"
    );
    // Still alive: the file is whole again (zeroed), and the writer's next update is served.
    assert_eq!(writer.apply(&[event]), 1);
    let _ = scan.scrape();
}
