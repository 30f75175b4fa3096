//! What files of other users in a shared store directory (mode 1777) cost a scrape (issue 42,
//! item 5): 8 stores of this process, beside 20,000 files with store names owned by `nobody`
//! (copies of a store, junk, unreadable files), against the same 8 stores alone. Medians of
//! in-process scrapes (`StoreScan::scrape`, the serving process's work for a request):
//!
//! - **clean**: the 8 stores alone, the directory's listing reused (unchanged directory) and
//!   listed again at every scrape;
//! - **listing**: listing the directory with the foreign files (`readdir`, the store names,
//!   their types and inodes), alone: the part of a scrape that has to grow with the directory;
//! - **first**: the first scrape of a new scan of the directory with the foreign files;
//! - **steady**: later scrapes, the listing reused and listed again at every scrape;
//! - **churn**: 200 new foreign names and 200 gone between scrapes (made between the timed
//!   scrapes), so every scrape lists the directory and meets 200 new files.
//!
//! and each steady or churn figure over clean + listing (the bound: 2). Needs root, to give the
//! files to `nobody`; otherwise it says so and measures nothing. The scans' log lines go to
//! stderr: `2>/dev/null` keeps the output to the figures.
//!
//! Run with `cargo bench -p nixl-telemetry-mp-store --bench foreign_files`.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_mp_store::config::{Aggregate, ScanConfig};
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_mp_store::store_scan::StoreScan;
use nixl_telemetry_series::Buckets;
use nixl_telemetry_test_support::other_user::{other_user, plant_store_files, remove_store_files};

const FOREIGN: usize = 20_000;
const CHURN: usize = 200;
const SCRAPES: usize = 200;

/// One store of this process with a flush of 64 transfers.
fn store(dir: &Path, rank: u64) -> StoreWriter {
    let id = Identity::for_this_process(
        &format!("agent-{rank}"),
        "bench-host",
        &rank.to_string(),
        Default::default(),
    );
    let w = StoreWriter::create(dir, &id, &Buckets::default()).unwrap();
    let events: Vec<Event> = (0..64u64)
        .flat_map(|t| {
            [
                Event::new(EventType::AgentXferTime, 5 + t * 37),
                Event::new(EventType::AgentTxBytes, 4096),
                Event::new(EventType::AgentTxRequestsNum, 1),
            ]
        })
        .collect();
    w.apply(&events);
    w
}

/// Gives the directory a new modification time a minute old: its next scrape lists it, and
/// the scrapes after that may reuse the listing.
fn touch_old(dir: &Path, n: u64) {
    let t = SystemTime::now() - Duration::from_secs(60) + Duration::from_nanos(n);
    std::fs::File::open(dir).unwrap().set_modified(t).unwrap();
}

fn scan_of(dir: &Path) -> StoreScan {
    StoreScan::new(ScanConfig {
        dir: dir.to_owned(),
        stale_ttl: Duration::from_secs(30),
        aggregate: Aggregate::None,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The median of `n` timings of `f`, each after `between` (not timed).
fn median(n: usize, mut between: impl FnMut(usize), mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..n)
        .map(|i| {
            between(i);
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[n / 2]
}

/// The median scrapes of `scan` of `dir` after its first: with the listing reused, and with the
/// directory listed at every scrape.
fn steady(scan: &StoreScan, dir: &Path) -> (Duration, Duration) {
    touch_old(dir, 0);
    scan.scrape();
    let reused = median(SCRAPES, |_| {}, || drop(scan.scrape()));
    let listed = median(
        SCRAPES,
        |i| touch_old(dir, 1 + i as u64),
        || drop(scan.scrape()),
    );
    (reused, listed)
}

/// Lists `dir` as a scan does: the store names, their types and inodes.
fn list(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.as_bytes();
            n.starts_with(b"nixl.") && n.ends_with(b".mmap")
        })
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| (e.path(), e.ino()))
        .collect::<Vec<_>>()
        .len()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for the benchmarks' names
    }
    let Ok((uid, _)) = other_user().map_err(|why| println!("foreign_files: skipped: {why}")) else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let (clean, shared) = (base.path().join("clean"), base.path().join("shared"));
    for d in [&clean, &shared] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    let writers: Vec<StoreWriter> = (0..8)
        .flat_map(|r| [store(&clean, r), store(&shared, r)])
        .collect();
    let store_bytes = std::fs::read(writers[0].path()).unwrap();
    plant_store_files(&shared, 0..FOREIGN, &store_bytes);

    let (clean_reused, clean_listed) = steady(&scan_of(&clean), &clean);
    let listing = median(SCRAPES, |_| {}, || assert!(list(&shared) > FOREIGN));

    let mut firsts = Vec::new();
    for i in 0..5 {
        touch_old(&shared, i);
        let scan = scan_of(&shared);
        let t = Instant::now();
        scan.scrape();
        firsts.push(t.elapsed());
    }
    firsts.sort();
    let first = firsts[2];
    let scan = scan_of(&shared);
    let (steady_reused, steady_listed) = steady(&scan, &shared);
    let mut next = FOREIGN;
    let churn = median(
        SCRAPES / 4,
        |_| {
            plant_store_files(&shared, next..next + CHURN, &store_bytes);
            if next > FOREIGN {
                remove_store_files(&shared, next - CHURN..next);
            }
            next += CHURN;
        },
        || drop(scan.scrape()),
    );
    assert_eq!(scan.live_stores().len(), 8);

    let bound = clean_reused + listing;
    let row = |what: &str, d: Duration, ratio: bool| {
        let over = d.as_secs_f64() / bound.as_secs_f64();
        match ratio {
            true => println!(
                "  {what:<32} {:8.3}  ({over:.2} x (clean + listing))",
                ms(d)
            ),
            false => println!("  {what:<32} {:8.3}", ms(d)),
        }
    };
    println!("foreign_files: 8 stores, {FOREIGN} files of uid {uid} beside them (medians, ms)");
    row("clean, listing reused", clean_reused, false);
    row("clean, listed every scrape", clean_listed, false);
    row(&format!("listing {FOREIGN} files alone"), listing, false);
    row("first scrape", first, false);
    row("steady, listing reused", steady_reused, true);
    row("steady, listed every scrape", steady_listed, true);
    row(&format!("churn, {CHURN} new names a scrape"), churn, true);
    drop(writers);
}
