//! A ring file truncated, deleted or replaced by another process while the agent writes it or a
//! reader reads it: nobody dies of SIGBUS, the writer recreates the ring with one warning, a
//! reader refuses to go on with a clear error. Each case runs in a child process, so a crash
//! fails the test instead of ending the test binary.

use std::fs::OpenOptions;
use std::time::Duration;

use nixl_telemetry::logging;
use nixl_telemetry::{
    Collector, Config, Event, EventType, ExporterChoice, MetricMask, RingReader, RingWriter, Status,
};
use nixl_telemetry_test_support::in_child;

fn truncate(path: &std::path::Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn ev(v: u64) -> Event {
    Event::new(EventType::AgentTxBytes, v)
}

#[test]
fn a_write_racing_a_truncation_is_absorbed_and_detected() {
    if !in_child("a_write_racing_a_truncation_is_absorbed_and_detected") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create(dir.path(), "r", 1024).unwrap();
    assert!(ring.is_intact());
    truncate(&dir.path().join("r"), 0);
    // Straight into the mapping, with no check first: the pages past the end fault, and the
    // guard absorbs the fault instead of the process dying.
    let written = ring.push_batch(&(0..100).map(ev).collect::<Vec<_>>());
    assert_eq!(written, 100);
    assert!(!ring.is_intact(), "the loss is visible to the writer");
}

/// Records and flushes `value` every 50 ms until a fresh reader of `path` sees it (the
/// exporter checks the file itself once per second); panics after 10 s.
fn flush_until_readable(c: &Collector, path: &std::path::Path, value: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        c.update_data(EventType::AgentTxBytes, value);
        c.flush();
        if let Ok(mut r) = RingReader::open(path) {
            if r.by_ref().any(|e| e.value == value) {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the ring was not recreated"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_collector_survives_a_truncated_ring_and_recreates_it() {
    if !in_child("a_collector_survives_a_truncated_ring_and_recreates_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        buffer_size: 1024,
        run_interval: Duration::from_secs(3600),
        exporter: ExporterChoice::Buffer(dir.path().to_owned()),
        enabled_metrics: MetricMask::ALL,
    };
    let c = Collector::new("agent", config).unwrap();
    let path = dir.path().join("agent");
    c.update_data(EventType::AgentTxBytes, 1);
    c.flush();
    let ((), logged) = logging::capture(|| {
        // Emptied: the next flush's writes fault (absorbed, counted as lost); the one after
        // recreates the ring.
        truncate(&path, 0);
        flush_until_readable(&c, &path, 2);
        // Cut inside its first page: no fault, found by the once-per-second file check.
        truncate(&path, 10);
        flush_until_readable(&c, &path, 3);
        // Deleted: recreated the same way.
        std::fs::remove_file(&path).unwrap();
        flush_until_readable(&c, &path, 4);
    });
    let warnings = logging::warnings(&logged);
    assert_eq!(
        warnings.len(),
        1,
        "one warning for the exporter's life: {warnings:?}"
    );
    assert!(
        warnings[0].contains("was truncated, deleted or replaced"),
        "{}",
        warnings[0]
    );
    let s = c.stats();
    assert!(
        s.events_lost >= 1,
        "what reached the truncated ring is counted as lost"
    );
    assert_eq!(
        s.events_exported + s.events_lost,
        s.events_accepted + s.drop_reports
    );
}

#[test]
fn a_reader_refuses_a_ring_truncated_under_it() {
    if !in_child("a_reader_refuses_a_ring_truncated_under_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create(dir.path(), "r", 1024).unwrap();
    ring.push_batch(&[ev(1), ev(2)]);
    let mut reader = RingReader::open(dir.path().join("r")).unwrap();
    assert_eq!(reader.try_pop().unwrap(), Some(ev(1)));
    truncate(&dir.path().join("r"), 0);
    let e = reader.try_pop().unwrap_err();
    assert_eq!(e.status, Status::Mismatch);
    assert!(
        e.message.contains("was truncated while it was being read"),
        "{}",
        e.message
    );
    assert!(reader.truncated());
    assert_eq!(
        reader.pop(),
        None,
        "never a zero record standing for a lost one"
    );
    // Through the C ABI: a status, not a crash.
    let other = RingWriter::create(dir.path(), "s", 1024).unwrap();
    other.push_batch(&[ev(3)]);
    let path = dir.path().join("s");
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut r = std::ptr::null_mut();
    // SAFETY: a valid C string and out-parameters; the handle is closed once below.
    unsafe {
        use ::nixl_telemetry::ffi::{
            nixl_telemetry_ring_close, nixl_telemetry_ring_open, nixl_telemetry_ring_pop,
            NIXL_TELEMETRY_ERR_MISMATCH, NIXL_TELEMETRY_SUCCESS,
        };
        assert_eq!(
            nixl_telemetry_ring_open(c_path.as_ptr(), &mut r),
            NIXL_TELEMETRY_SUCCESS
        );
        truncate(&path, 0);
        let mut out = Event::default();
        assert_eq!(
            nixl_telemetry_ring_pop(r, &mut out),
            NIXL_TELEMETRY_ERR_MISMATCH
        );
        nixl_telemetry_ring_close(r);
    }
}
