//! The class "a row counted as written is not on disk", for both writers of segments (an FPM
//! trace and the `TRACE` exporter, on a manual clock, driven on this thread): their open
//! segment is deleted, its directory is deleted, or another file is renamed over it, and then
//! the writer is closed at once, or takes a few rows and is closed within the second, or sits
//! idle while its timer runs. In every case a row counted as written is in a segment at its
//! path, every other row is counted lost, one warning says which segment and why, and the file
//! renamed over the segment is left as it was. The `TRACE` exporter inside a collector, with
//! its real threads, is in `tests/trace_exporter.rs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nixl_telemetry_base::logging;
use nixl_telemetry_core::exporter::{Exporter, TraceExporter, TraceExporterConfig};
use nixl_telemetry_core::fpm::{CaptureMode, FpmConfig, FpmPayload, FpmTrace, Source};
use nixl_telemetry_core::segments::{segments_of, ManualClock, SegmentReader};
use nixl_telemetry_core::{Event, EventType};

/// Rows written (and on disk) before the fault.
const BEFORE: u64 = 40;
/// Rows recorded after the fault, then closed within the second.
const AFTER: u64 = 25;

/// What happens to the open segment.
#[derive(Clone, Copy, Debug)]
enum Fault {
    DeleteFile,
    DeleteDirectory,
    RenameOver,
}

impl Fault {
    const ALL: [Fault; 3] = [Fault::DeleteFile, Fault::DeleteDirectory, Fault::RenameOver];

    /// Applies the fault to `segment`; returns the bytes of the file renamed over it, if any.
    fn apply(self, segment: &Path) -> Option<Vec<u8>> {
        match self {
            Fault::DeleteFile => std::fs::remove_file(segment).unwrap(),
            Fault::DeleteDirectory => std::fs::remove_dir_all(segment.parent().unwrap()).unwrap(),
            Fault::RenameOver => {
                let theirs = segment.with_extension("theirs");
                let bytes = b"another file, renamed over the segment".to_vec();
                std::fs::write(&theirs, &bytes).unwrap();
                std::fs::rename(&theirs, segment).unwrap();
                return Some(bytes);
            }
        }
        None
    }

    /// What the warning says happened.
    fn said(self) -> &'static str {
        match self {
            Fault::DeleteFile | Fault::DeleteDirectory => "was deleted (or its directory was)",
            Fault::RenameOver => "was replaced by another file",
        }
    }
}

/// What follows the fault.
#[derive(Clone, Copy, Debug)]
enum Then {
    /// Closed at once, nothing more recorded.
    Close,
    /// [`AFTER`] rows recorded, then closed without the clock moving.
    WriteThenClose,
    /// Idle for a second while the writer's timer runs (counted lost before close), then closed.
    IdleTimer,
}

impl Then {
    const ALL: [Then; 3] = [Then::Close, Then::WriteThenClose, Then::IdleTimer];
}

/// An FPM trace or a `TRACE` exporter, as the test drives it.
trait Producer {
    /// Records `rows` rows (buffered: written when due or at close).
    fn record(&mut self, rows: u64);
    /// Writes what is buffered now.
    fn flush(&mut self);
    /// What the writer's timer does while nothing is recorded (the clock is moved first).
    fn idle(&mut self);
    /// (rows counted written, rows counted lost).
    fn counts(&self) -> (u64, u64);
    /// Closes; returns the final counts.
    fn close(self: Box<Self>) -> (u64, u64);
}

struct Fpm(FpmTrace);

impl Producer for Fpm {
    fn record(&mut self, rows: u64) {
        for i in 0..rows as i64 {
            self.0.record(FpmPayload::heartbeat("w", 0, i));
        }
        self.0.pump();
    }
    fn flush(&mut self) {
        self.0.flush();
    }
    fn idle(&mut self) {
        self.0.pump();
    }
    fn counts(&self) -> (u64, u64) {
        let s = self.0.stats();
        (s.written, s.rows_lost)
    }
    fn close(self: Box<Self>) -> (u64, u64) {
        let s = self.0.close();
        assert_eq!(s.recorded, s.written + s.rows_lost, "{s:?}");
        (s.written, s.rows_lost)
    }
}

struct Trace {
    exporter: TraceExporter,
    /// Rows reported lost to the collector (by its flushes and its final accounting).
    reported_lost: u64,
}

impl Producer for Trace {
    fn record(&mut self, rows: u64) {
        let events: Vec<Event> = (0..rows)
            .map(|i| Event::new(EventType::AgentRxBytes, i))
            .collect();
        assert_eq!(self.exporter.export_batch(&events), events.len());
    }
    fn flush(&mut self) {
        self.exporter.flush();
    }
    fn idle(&mut self) {
        // What the collector's flush does every run interval when nothing is staged.
        let outcome = self.exporter.export_flush(&[], None, &mut Vec::new());
        self.reported_lost += outcome.lost_since;
    }
    fn counts(&self) -> (u64, u64) {
        let s = self.exporter.stats();
        (s.rows_written, s.rows_lost)
    }
    fn close(mut self: Box<Self>) -> (u64, u64) {
        self.reported_lost += self.exporter.finish();
        let counts = self.counts();
        assert_eq!(
            self.reported_lost, counts.1,
            "the collector learns every lost row"
        );
        counts
    }
}

/// Opens a producer writing under `<dir>/out` on `clock`; returns it with its file prefix.
type Open = fn(&Path, Arc<ManualClock>) -> (Box<dyn Producer>, PathBuf);

fn open_fpm(dir: &Path, clock: Arc<ManualClock>) -> (Box<dyn Producer>, PathBuf) {
    let config = FpmConfig {
        output_path: dir.join("out/fpm"),
        mode: CaptureMode::Full,
        ..FpmConfig::default()
    };
    let trace =
        FpmTrace::open_manual(Source::new("ns", "backend", "4192"), &config, clock, 8192).unwrap();
    (Box::new(Fpm(trace)), dir.join("out/fpm.4192"))
}

fn open_trace(dir: &Path, clock: Arc<ManualClock>) -> (Box<dyn Producer>, PathBuf) {
    let config = TraceExporterConfig {
        path: dir.join("out/nixl"),
        ..TraceExporterConfig::default()
    };
    let exporter = TraceExporter::with_clock(&config, "agent-0", clock).unwrap();
    let trace = Trace {
        exporter,
        reported_lost: 0,
    };
    (Box::new(trace), dir.join("out/nixl.agent-0"))
}

/// Rows in the segments at `prefix`'s paths, the file at `skip` (not a segment) left out.
fn rows_on_disk(prefix: &Path, skip: Option<&Path>) -> u64 {
    let Ok(files) = segments_of(prefix) else {
        return 0;
    };
    files
        .iter()
        .filter(|f| Some(f.as_path()) != skip)
        .map(|f| SegmentReader::read_rows(f).unwrap().0.len() as u64)
        .sum()
}

/// Every fault followed by every continuation, for the producer `open` makes.
fn every_case(open: Open) {
    for fault in Fault::ALL {
        for then in Then::ALL {
            let case = format!("{fault:?} then {then:?}");
            let dir = tempfile::tempdir().unwrap();
            let clock = Arc::new(ManualClock::new(1_700_000_000_000));
            let (mut producer, prefix) = open(dir.path(), clock.clone());
            producer.record(BEFORE);
            producer.flush();
            let segments = segments_of(&prefix).unwrap();
            assert_eq!(segments.len(), 1, "{case}: {segments:?}");
            assert_eq!(rows_on_disk(&prefix, None), BEFORE, "{case}");
            let segment = segments[0].clone();
            let theirs = fault.apply(&segment);
            let ((written, lost), logged) = logging::capture(|| match then {
                Then::Close => producer.close(),
                Then::WriteThenClose => {
                    producer.record(AFTER);
                    producer.close()
                }
                Then::IdleTimer => {
                    clock.advance_ms(1000);
                    producer.idle();
                    assert_eq!(producer.counts(), (0, BEFORE), "{case}: noticed while idle");
                    producer.close()
                }
            });
            let after = match then {
                Then::WriteThenClose => AFTER,
                Then::Close | Then::IdleTimer => 0,
            };
            assert_eq!((written, lost), (after, BEFORE), "{case}");
            let skip = theirs.as_ref().map(|_| segment.as_path());
            assert_eq!(
                rows_on_disk(&prefix, skip),
                written,
                "{case}: written == on disk"
            );
            if let Some(bytes) = theirs {
                assert_eq!(
                    std::fs::read(&segment).unwrap(),
                    bytes,
                    "{case}: theirs untouched"
                );
            }
            let warnings = logging::warnings(&logged);
            let about: Vec<_> = warnings
                .iter()
                .filter(|w| w.contains(fault.said()))
                .collect();
            assert_eq!(about.len(), 1, "{case}: {logged:?}");
            assert!(
                about[0].contains(&*segment.to_string_lossy())
                    && about[0].contains(&format!("the {BEFORE} rows written into it are lost")),
                "{case}: {}",
                about[0]
            );
            for message in &warnings {
                assert!(
                    !message.contains("  "),
                    "{case}: a run of spaces: {message:?}"
                );
            }
        }
    }
}

#[test]
fn an_fpm_trace_never_counts_as_written_a_row_of_a_segment_gone_from_its_path() {
    every_case(open_fpm);
}

#[test]
fn the_trace_exporter_never_counts_as_exported_a_row_of_a_segment_gone_from_its_path() {
    every_case(open_trace);
}
