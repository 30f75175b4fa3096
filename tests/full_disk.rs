//! A ring on a file system that fills up (a real one: a small tmpfs, `test-support`'s
//! `full_disk`): the ring's space is reserved when it is created, so a file system that fills
//! up later costs no event; one that is full when the ring is (re)created fails that creation
//! with its error (ENOSPC), and a write into the mapping that fails with the file in place is
//! reported as such, never as a file "truncated, deleted or replaced by another process". Each
//! case runs in a child process (it mounts a file system, and a fault must fail the test rather
//! than end the test binary); without root it says why and passes.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use nixl_telemetry_base::logging;
use nixl_telemetry_core::{
    Collector, Config, Event, EventType, ExporterChoice, MetricMask, RingReader,
};
use nixl_telemetry_test_support::child::in_child;
use nixl_telemetry_test_support::full_disk::SmallFs;

/// 64 pages: room for the ring (5 pages), its loss file and the filler.
const FS_BYTES: u64 = 256 << 10;

/// A collector of a 1024-record ring (16,424 bytes: 5 pages) `agent` in `dir`, flushed only
/// on demand.
fn collector(dir: &Path) -> nixl_telemetry_core::Result<Collector> {
    let config = Config {
        buffer_size: 1024,
        run_interval: Duration::from_secs(3600),
        exporter: ExporterChoice::Buffer(dir.to_owned(), nixl_telemetry_core::ring::layout::V4),
        enabled_metrics: MetricMask::ALL,
    };
    Collector::new("agent", config)
}

/// In the test process: runs `test` in a child process and returns `None`. In the child: the
/// small file system, or `None` (said) when this process cannot mount one.
fn small_fs_in_child(test: &str) -> Option<SmallFs> {
    if !in_child(test) {
        return None;
    }
    SmallFs::mount(FS_BYTES)
        .map_err(|why| eprintln!("skipped: {why}"))
        .ok()
}

/// Records `n` updates of value `tag` and flushes them.
fn record(c: &Collector, n: usize, tag: u64) {
    for _ in 0..n {
        c.update_data(EventType::AgentTxBytes, tag);
    }
    c.flush();
}

/// Every event a reader of `ring` can take now.
fn drain(ring: &Path) -> Vec<Event> {
    RingReader::open(ring).unwrap().by_ref().collect()
}

#[test]
fn a_ring_cannot_be_created_on_a_full_file_system_and_says_why() {
    let Some(fs) = small_fs_in_child("a_ring_cannot_be_created_on_a_full_file_system_and_says_why")
    else {
        return;
    };
    fs.fill("filler");
    let e = collector(fs.path())
        .err()
        .expect("no ring on a full file system");
    let ring = fs.path().join("agent");
    let expected = format!(
        "cannot reserve the space of telemetry ring {} (16424 bytes): No space left on device",
        ring.display()
    );
    assert!(e.message.contains(&expected), "{}", e.message);
    assert!(!ring.exists(), "no unusable ring left behind");
    std::fs::remove_file(fs.path().join("filler")).unwrap();
    let c = collector(fs.path()).unwrap();
    record(&c, 3, 1);
    assert_eq!(drain(&ring).len(), 3);
}

#[test]
fn a_full_file_system_costs_no_event_and_a_failed_write_is_named_as_such() {
    let Some(fs) =
        small_fs_in_child("a_full_file_system_costs_no_event_and_a_failed_write_is_named_as_such")
    else {
        return;
    };
    let ring = fs.path().join("agent");
    let ((), logged) = logging::capture(|| {
        let c = collector(fs.path()).unwrap();
        record(&c, 1, 1);
        assert_eq!(drain(&ring).len(), 1);
        // Full after the ring was made: its space was reserved, no event is lost.
        fs.fill("filler");
        record(&c, 1000, 2);
        assert_eq!(drain(&ring).len(), 1000);
        assert_eq!(c.stats().events_lost, 0);
        // Pages 1-3 of the ring handed back to the file system and taken by the filler: a write
        // into them faults with the file in place, whole (as where space cannot be reserved).
        let file = std::fs::OpenOptions::new().write(true).open(&ring).unwrap();
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate(2) on a descriptor `file` keeps open.
        let punched = unsafe { libc::fallocate(file.as_raw_fd(), mode, 4096, 3 * 4096) };
        assert_eq!(punched, 0);
        assert!(fs.fill("filler") >= 3 * 4096);
        record(&c, 1000, 3);
        assert!(c.stats().events_lost > 0, "the faulted writes are lost");
        // The next flush notices it and cannot make the ring again while the file system is
        // full; once there is room, the ring is back.
        record(&c, 1, 4);
        std::fs::remove_file(fs.path().join("filler")).unwrap();
        record(&c, 1, 5);
        let values: Vec<u64> = drain(&ring).iter().map(|e| e.value).collect();
        assert_eq!(values.last(), Some(&5), "{values:?}");
        let s = c.stats();
        assert_eq!(
            s.events_exported + s.events_lost,
            s.events_accepted + s.drop_reports
        );
    });
    let warnings = logging::warnings(&logged);
    let shown = ring.display();
    let failed = format!(
        "a write into telemetry ring {shown} failed with the file in place: its file system is \
         full, over a quota or failing (ENOSPC, EDQUOT or EIO); recreating it"
    );
    let no_space = format!(
        "cannot recreate telemetry ring {shown}: cannot reserve the space of telemetry ring \
         {shown} (16424 bytes): No space left on device"
    );
    assert!(warnings.iter().any(|w| w.contains(&failed)), "{warnings:?}");
    assert!(
        warnings.iter().any(|w| w.contains(&no_space)),
        "{warnings:?}"
    );
    for w in &warnings {
        assert!(
            !w.contains("truncated") && !w.contains("deleted") && !w.contains("replaced"),
            "a full file system is not another process: {w}"
        );
    }
}
