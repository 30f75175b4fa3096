//! A steady scraper of a serving process's endpoint while a rank flushes batches faster than it
//! scrapes: pages are made ahead of its scrapes, and not one scrape shows less than every batch
//! flushed before it was sent (a page made ahead and served after a batch would), nor more
//! than was flushed by its answer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nixl_telemetry_base::{Event, EventType};
use nixl_telemetry_mp_store::config::{Aggregate, ScanConfig};
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_mp_store::store_scan::{ScanPages, StoreScan};
use nixl_telemetry_series::endpoint::{Limits, Server};
use nixl_telemetry_series::{text, Buckets, WorkloadLabels};

#[test]
fn a_steady_scraper_gets_pages_made_ahead_that_miss_no_batch() {
    let dir = tempfile::tempdir().unwrap();
    let id = Identity::for_this_process("rank0", "node", "0", WorkloadLabels::none());
    let writer = StoreWriter::create(dir.path(), &id, &Buckets::default()).unwrap();
    let batch = [Event::new(EventType::AgentTxBytes, 1)];
    writer.apply(&batch);
    // Settled (changed more than 2 s ago): its listing is reused, as on a node whose ranks run.
    std::fs::File::open(dir.path())
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(60))
        .unwrap();
    let pages = Arc::new(ScanPages::new(Arc::new(StoreScan::new(ScanConfig {
        dir: dir.path().to_owned(),
        stale_ttl: Duration::from_secs(30),
        aggregate: Aggregate::None,
    }))));
    let server = Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        Limits::default(),
        pages.clone(),
    )
    .unwrap();
    // The rank: a batch of one byte every 7 ms, counted once applied.
    let flushed = Arc::new(AtomicU64::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let rank = {
        let (flushed, stop) = (flushed.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(7));
                writer.apply(&batch);
                flushed.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let port = server.local_addr().port();
    for _ in 0..80 {
        std::thread::sleep(Duration::from_millis(25));
        let before = flushed.load(Ordering::SeqCst);
        let (_, body) = nixl_telemetry_test_support::scrape::scrape_as(port, "text/plain");
        let after = flushed.load(Ordering::SeqCst);
        let page = String::from_utf8(body).unwrap();
        let bytes = text::parse(&page)
            .unwrap()
            .into_iter()
            .find(|s| s.name == "agent_tx_bytes_total")
            .expect("the rank's series")
            .value as u64;
        // A batch applied but not counted yet may show: at most one.
        assert!(
            (before..=after + 1).contains(&bytes),
            "a scrape sent after {before} batches and answered before {} showed {bytes}",
            after + 1
        );
    }
    stop.store(true, Ordering::Relaxed);
    rank.join().unwrap();
    let (prepared, made) = pages.answered();
    assert!(
        prepared > 0,
        "no page was made ahead ({made} made when asked)"
    );
}
