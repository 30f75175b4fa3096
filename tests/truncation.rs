//! A ring file truncated, deleted or replaced by another process while the agent writes it or a
//! reader reads it: nobody dies of SIGBUS, the writer recreates the ring with one warning, a
//! reader refuses to go on with a clear error. Also when the host installed its own SIGBUS
//! action after the library (the default action, or a handler that returns): the writer checks
//! the file before writing and puts its guard back on top; a fault outside the rings still goes
//! to the host's handler, and ends the process rather than looping when that handler returns.
//! Each case runs in a child process, so a crash fails the test instead of ending the test
//! binary.

use std::fs::OpenOptions;
use std::time::Duration;

use nixl_telemetry_base::logging;
use nixl_telemetry_core::{
    Collector, Config, Event, EventType, ExporterChoice, MetricMask, RingReader, RingWriter, Status,
};
use nixl_telemetry_test_support::child::{self, in_child};

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
    let c = buffer_collector(dir.path());
    let path = dir.path().join("agent");
    c.update_data(EventType::AgentTxBytes, 1);
    c.flush();
    let ((), logged) = logging::capture(|| {
        // Emptied: a flush notices it before writing (its fstat, at most once a millisecond) or
        // its writes fault into the guard (counted as lost); either way the ring is recreated.
        truncate(&path, 0);
        flush_until_readable(&c, &path, 2);
        // Cut inside its first page: the same.
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
    // Says what happened first, as it is (here the truncation to 0 bytes).
    let what = format!(
        "telemetry ring {} was truncated to 0 bytes (of 16424) by another process; recreating it",
        path.display()
    );
    assert!(warnings[0].contains(&what), "{}", warnings[0]);
    let s = c.stats();
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
        use nixl_telemetry::{
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

/// A collector of a BUFFER ring in `dir` flushed only on demand.
fn buffer_collector(dir: &std::path::Path) -> Collector {
    let config = Config {
        buffer_size: 1024,
        run_interval: Duration::from_secs(3600),
        exporter: ExporterChoice::Buffer(dir.to_owned(), nixl_telemetry_core::ring::layout::V4),
        enabled_metrics: MetricMask::ALL,
    };
    Collector::new("agent", config).unwrap()
}

/// Sets the SIGBUS action of the process to `handler` (as a host would, after the library).
fn host_sigbus(handler: libc::sighandler_t) {
    // SAFETY: signal(2) with SIG_DFL or a handler of the plain `fn(c_int)` signature.
    unsafe { libc::signal(libc::SIGBUS, handler) };
}

/// SIGBUS signals the host's own handler saw.
static HOST_HANDLER_CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A host handler that returns without resolving anything: only async-signal-safe work.
extern "C" fn host_handler_that_returns(_: libc::c_int) {
    HOST_HANDLER_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// With the host's SIGBUS action `handler` installed after the library (as a host would): a
/// collector's ring emptied between two flushes is recreated, and a write straight into a
/// mapping whose file was emptied after its check faults into the guard, back on top.
fn writers_survive_truncations_under(handler: libc::sighandler_t) {
    let dir = tempfile::tempdir().unwrap();
    let c = buffer_collector(dir.path());
    let path = dir.path().join("agent");
    c.update_data(EventType::AgentTxBytes, 1);
    c.flush();
    host_sigbus(handler);
    truncate(&path, 0);
    flush_until_readable(&c, &path, 2);
    let ring = RingWriter::create(dir.path(), "direct", 1024).unwrap();
    host_sigbus(handler);
    assert!(ring.ready_to_write(true));
    truncate(&dir.path().join("direct"), 0);
    assert_eq!(ring.push_batch(&(0..100).map(ev).collect::<Vec<_>>()), 100);
    assert!(ring.faulted() && !ring.ready_to_write(true));
}

#[test]
fn a_host_that_restores_the_default_sigbus_action_does_not_lose_the_protection() {
    if !in_child("a_host_that_restores_the_default_sigbus_action_does_not_lose_the_protection") {
        return;
    }
    // Before, the next flush's writes into the emptied file killed the process (exit 135).
    writers_survive_truncations_under(libc::SIG_DFL);
}

#[test]
fn a_host_handler_that_returns_neither_spins_nor_sees_ring_faults() {
    if !in_child("a_host_handler_that_returns_neither_spins_nor_sees_ring_faults") {
        return;
    }
    // Before, the writer re-faulted forever (over a million faults) under such a handler.
    writers_survive_truncations_under(host_handler_that_returns as *const () as libc::sighandler_t);
    assert_eq!(
        HOST_HANDLER_CALLS.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "ring faults never reach the host's handler"
    );
}

/// The child of the next test: a fault that is not in a ring, under a host handler that
/// returns without resolving it.
#[test]
fn child_faulting_outside_rings_under_a_returning_host_handler() {
    if std::env::var_os("NIXL_TEST_FOREIGN_FAULT").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let _ring = RingWriter::create(dir.path(), "r", 1024).unwrap();
    host_sigbus(host_handler_that_returns as *const () as libc::sighandler_t);
    // Puts the library's guard back on top, with the host's handler behind it.
    let _again = RingWriter::create(dir.path(), "s", 1024).unwrap();
    let path = dir.path().join("foreign");
    std::fs::write(&path, vec![1u8; 8192]).unwrap();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // SAFETY: a fresh shared mapping of an 8 KiB file, read after the file is emptied: the
    // read raises SIGBUS, which is what this child is for.
    unsafe {
        use std::os::fd::AsRawFd;
        let p = libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        file.set_len(0).unwrap();
        println!("FAULTING");
        let v = std::ptr::read_volatile(p as *const u8);
        println!("SURVIVED {v}");
    }
}

#[test]
fn a_fault_outside_rings_goes_to_the_host_and_ends_the_process_instead_of_looping() {
    use std::os::unix::process::ExitStatusExt;
    let out = child::test("child_faulting_outside_rings_under_a_returning_host_handler")
        .env("NIXL_TEST_FOREIGN_FAULT", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("FAULTING"), "{stdout}");
    assert!(!stdout.contains("SURVIVED"), "{stdout}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "ended by SIGBUS after the host's handler returned 100 times: {:?}",
        out.status
    );
}

#[test]
fn a_checked_read_survives_a_host_that_replaced_the_guard_after_the_reader_opened() {
    if !in_child("a_checked_read_survives_a_host_that_replaced_the_guard_after_the_reader_opened") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create(dir.path(), "r", 1024).unwrap();
    ring.push_batch(&[ev(1), ev(2)]);
    let reader = RingReader::open(dir.path().join("r")).unwrap();
    assert_eq!(reader.peek(None, 10).unwrap().events, [ev(1), ev(2)]);
    // Before, with SIG_DFL a read of the emptied file ended the process (exit 135).
    host_sigbus(libc::SIG_DFL);
    truncate(&dir.path().join("r"), 0);
    let e = reader.peek(None, 10).unwrap_err();
    assert_eq!(e.status, Status::Mismatch);
    assert!(reader.truncated() && reader.check_file().is_err());
    assert!(reader.replaced().is_some());
}
