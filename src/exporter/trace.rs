//! The built-in `TRACE` exporter (`NIXL_TELEMETRY_EXPORTER=TRACE`): persists NIXL telemetry
//! events as gzip JSONL segments for offline analysis, with the segment writer, rolling and
//! retention rules of the FPM trace.
//!
//! Configuration (strict, like every `NIXL_TELEMETRY_*` variable: an invalid value makes
//! collector creation fail with a message naming the variable and value):
//!
//! | Variable | Default | Meaning |
//! |---|---|---|
//! | `NIXL_TELEMETRY_TRACE_PATH` | `/tmp/nixl-telemetry` | output prefix; files are `<prefix>.<agent>.<index>.jsonl.gz` (agent name sanitized like an FPM producer id) |
//! | `NIXL_TELEMETRY_TRACE_ROLL_BYTES` | 268435456 | roll threshold in uncompressed bytes |
//! | `NIXL_TELEMETRY_TRACE_MAX_SEGMENTS` | 4 | segments kept per agent, the active one included |
//!
//! Each event is one row:
//! `{"timestamp":<ms since the exporter started>,"event":{"schema":"nixl.telemetry.event.v1",
//! "agent":"agent-0","exported_at_unix_ms":<wall clock of the collector flush>,"type":0,
//! "name":"agent_tx_bytes","value":4096}}`. NIXL events carry no time of their own, so the
//! time is that of the collector flush that exported them (every `NIXL_TELEMETRY_RUN_INTERVAL`).
//!
//! One writer per agent file prefix: a second exporter (or FPM trace) on the same
//! `<prefix>.<agent>`, in this process or in another one (agents whose names sanitize alike,
//! or one agent name used twice with the same `NIXL_TELEMETRY_TRACE_PATH`), would prune the
//! first one's open segment, so collector creation fails with `NIXL_TELEMETRY_ERR_NOT_ALLOWED`
//! and a message naming the prefix ([`crate::segments::guard`]). The lock file
//! `<prefix>.<agent>.lock` stays next to the segments.
//!
//! Rows are written as one gzip member per second (or per 1 MiB) by a small flusher thread, so
//! an idle agent's last rows reach the disk within about a second; destroying the collector
//! writes the rest ([`Exporter::finish`]). A batch lost to a write error (a full disk), and the
//! rows of a segment someone deleted or replaced while it was open (noticed within a second
//! by that thread, idle or not, and at destroy: [`SegmentWriter::tick`]) are logged, counted in
//! [`TraceExporter::stats`] and reported to the collector
//! ([`FlushOutcome::lost_since`]), which moves those events from `events_exported` to
//! `events_lost` at its next flush (or at its final accounting on destroy), so
//! `nixl_telemetry_get_stats` shows them.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::env::{parse_u64, Lookup};
use crate::error::{Error, Result, Status};
use crate::event::Event;
use crate::exporter::{export_joined, Exporter, FlushOutcome};
use crate::segments::writer::WriterCounters;
use crate::segments::{
    Clock, GuardError, PrefixGuard, SegmentNaming, SegmentWriter, SystemClock, WriterOptions,
    WriterStats,
};
use crate::settings;
use crate::sync::LockUnpoisoned;
use crate::worker::Worker;

/// How often the flusher thread runs the writer's timer (the 1 s flush, the check of the
/// segment's path).
const FLUSH_CHECK: Duration = Duration::from_millis(250);

/// `NIXL_TELEMETRY_TRACE_PATH`: output prefix of the TRACE exporter.
pub const ENV_TRACE_PATH: &str = settings::TRACE_PATH.name;
/// `NIXL_TELEMETRY_TRACE_ROLL_BYTES`: roll threshold in uncompressed bytes.
pub const ENV_TRACE_ROLL_BYTES: &str = settings::TRACE_ROLL_BYTES.name;
/// `NIXL_TELEMETRY_TRACE_MAX_SEGMENTS`: segments kept per agent.
pub const ENV_TRACE_MAX_SEGMENTS: &str = settings::TRACE_MAX_SEGMENTS.name;
/// Default output prefix of the TRACE exporter.
pub const DEFAULT_TRACE_PATH: &str = settings::TRACE_PATH.default_str();
/// Default roll threshold of the TRACE exporter, in uncompressed bytes.
pub const DEFAULT_TRACE_ROLL_BYTES: u64 = settings::TRACE_ROLL_BYTES.default_u64();
/// Default number of TRACE segments kept per agent.
pub const DEFAULT_TRACE_MAX_SEGMENTS: usize = settings::TRACE_MAX_SEGMENTS.default_u64() as usize;
/// Schema name of the exporter's rows.
pub const NIXL_EVENT_SCHEMA: &str = "nixl.telemetry.event.v1";

/// Settings of the TRACE exporter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceExporterConfig {
    /// Output prefix.
    pub path: PathBuf,
    /// Roll threshold in uncompressed bytes (positive).
    pub roll_bytes: u64,
    /// Segments kept per agent, the active one included (positive).
    pub max_segments: usize,
}

impl Default for TraceExporterConfig {
    fn default() -> Self {
        TraceExporterConfig {
            path: PathBuf::from(DEFAULT_TRACE_PATH),
            roll_bytes: DEFAULT_TRACE_ROLL_BYTES,
            max_segments: DEFAULT_TRACE_MAX_SEGMENTS,
        }
    }
}

impl TraceExporterConfig {
    /// Reads and validates the `NIXL_TELEMETRY_TRACE_*` variables through `env`.
    pub fn from_lookup(env: Lookup) -> Result<TraceExporterConfig> {
        let mut config = TraceExporterConfig::default();
        if let Some(v) = env(ENV_TRACE_PATH)? {
            if v.is_empty() {
                return Err(Error::invalid(format!(
                    "{ENV_TRACE_PATH} is set but empty: set it to the output prefix of the \
                     TRACE exporter's files"
                )));
            }
            config.path = PathBuf::from(v);
        }
        if let Some(v) = env(ENV_TRACE_ROLL_BYTES)? {
            config.roll_bytes = parse_u64(ENV_TRACE_ROLL_BYTES, &v)?;
            if config.roll_bytes == 0 {
                return Err(Error::invalid(format!(
                    "{ENV_TRACE_ROLL_BYTES} cannot be 0"
                )));
            }
        }
        if let Some(v) = env(ENV_TRACE_MAX_SEGMENTS)? {
            let n = parse_u64(ENV_TRACE_MAX_SEGMENTS, &v)?;
            if n == 0 {
                return Err(Error::invalid(format!(
                    "{ENV_TRACE_MAX_SEGMENTS} cannot be 0"
                )));
            }
            config.max_segments = usize::try_from(n).map_err(|_| {
                Error::invalid(format!("{ENV_TRACE_MAX_SEGMENTS}='{v}' is out of range"))
            })?;
        }
        Ok(config)
    }
}

#[derive(Serialize)]
struct EventRow<'a> {
    schema: &'static str,
    agent: &'a str,
    exported_at_unix_ms: u64,
    #[serde(rename = "type")]
    event_type: u32,
    name: &'a str,
    value: u64,
}

/// The TRACE exporter of one agent.
pub struct TraceExporter {
    agent: String,
    clock: Arc<dyn Clock>,
    writer: Arc<Mutex<SegmentWriter>>,
    /// The writer's counters, read without waiting for its lock.
    counters: Arc<WriterCounters>,
    /// Rows lost (`rows_lost`) already reported to the collector.
    reported_lost: u64,
    flusher: Option<Worker>,
    /// The claim on the segment prefix; dropped (released) after the last flush.
    _guard: PrefixGuard,
}

impl TraceExporter {
    /// The rows lost to write errors or with a deleted segment (or dropped as longer than the
    /// row bound) since the last call (the collector counted them as exported when this
    /// exporter accepted them).
    fn take_rows_lost(&mut self) -> u64 {
        let stats = self.counters.snapshot();
        let lost = stats.rows_lost + stats.rows_too_long;
        let late = lost.saturating_sub(self.reported_lost);
        self.reported_lost = lost;
        late
    }

    /// Creates the exporter of `agent`, with a flusher thread on the system clock.
    pub fn create(config: &TraceExporterConfig, agent: &str) -> Result<TraceExporter> {
        let mut exporter = TraceExporter::with_clock(config, agent, Arc::new(SystemClock::new()))?;
        let writer = exporter.writer.clone();
        let flusher = Worker::spawn(
            "nixl-trace-flush",
            format!("the TRACE exporter's flusher of agent '{agent}'"),
            FLUSH_CHECK,
            move || {
                writer.lock_unpoisoned().tick();
                FLUSH_CHECK
            },
        )
        .map_err(|e| Error::io("cannot start the TRACE exporter's flush thread", &e))?;
        exporter.flusher = Some(flusher);
        Ok(exporter)
    }

    /// Creates the exporter of `agent` reading time from `clock`, without a flusher thread
    /// (rows are written when a batch finds the flush due, and when the exporter is dropped).
    pub fn with_clock(
        config: &TraceExporterConfig,
        agent: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<TraceExporter> {
        let naming = SegmentNaming::new(&config.path, agent);
        let guard = PrefixGuard::acquire(&naming, "TRACE exporter").map_err(|e| match e {
            GuardError::Io(what, io) => Error::io(what, &io),
            conflict => Error::new(Status::NotAllowed, conflict.to_string()),
        })?;
        let options = WriterOptions::new(config.roll_bytes, config.max_segments);
        let writer = SegmentWriter::open(naming.clone(), options, clock.clone()).map_err(|e| {
            Error::io(
                format!(
                    "TRACE exporter cannot write its segments in {}",
                    naming.dir().display()
                ),
                &e,
            )
        })?;
        Ok(TraceExporter {
            agent: agent.to_owned(),
            clock,
            counters: writer.counters(),
            reported_lost: 0,
            writer: Arc::new(Mutex::new(writer)),
            flusher: None,
            _guard: guard,
        })
    }

    /// The writer's counters.
    pub fn stats(&self) -> WriterStats {
        self.writer.lock_unpoisoned().stats()
    }

    /// Writes the buffered rows now.
    pub fn flush(&self) {
        self.writer.lock_unpoisoned().flush();
    }

    /// Stops the flusher thread and writes every buffered row, after checking that the open
    /// segment is still at its path (so the counts reported at destroy are true). Idempotent.
    fn stop_and_flush(&mut self) {
        if let Some(mut flusher) = self.flusher.take() {
            flusher.stop();
        }
        self.writer.lock_unpoisoned().flush();
    }
}

impl Exporter for TraceExporter {
    fn export_batch(&mut self, events: &[Event]) -> usize {
        let exported_at_unix_ms = self.clock.unix_ms();
        let mut writer = self.writer.lock_unpoisoned();
        for event in events {
            let unknown;
            let name = match event.kind() {
                Some(kind) => kind.name(),
                None => {
                    unknown = event.name();
                    unknown.as_str()
                }
            };
            writer.push(&EventRow {
                schema: NIXL_EVENT_SCHEMA,
                agent: &self.agent,
                exported_at_unix_ms,
                event_type: event.event_type,
                name,
                value: event.value,
            });
        }
        writer.tick();
        events.len()
    }

    fn name(&self) -> &str {
        "TRACE"
    }

    /// An idle flush runs the writer's timer (as the flusher thread does), so a deleted segment
    /// is noticed, and its rows reported lost, while nothing is recorded.
    fn tick(&mut self) {
        self.writer.lock_unpoisoned().tick();
    }

    /// The default export, with the rows lost (write errors, a deleted segment) since the last
    /// flush (the collector counted them as exported when this exporter accepted them).
    fn export_flush(
        &mut self,
        runs: &[&[Event]],
        report: Option<Event>,
        scratch: &mut Vec<Event>,
    ) -> FlushOutcome {
        FlushOutcome {
            lost_since: self.take_rows_lost(),
            ..FlushOutcome::kept(export_joined(self, runs, report, scratch))
        }
    }

    /// Stops the flusher thread, writes every buffered row and returns the rows lost since the
    /// last flush.
    fn finish(&mut self) -> u64 {
        self.stop_and_flush();
        self.take_rows_lost()
    }
}

impl Drop for TraceExporter {
    /// Stops the flusher thread and writes every buffered row.
    fn drop(&mut self) {
        self.stop_and_flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::fixed_env as env_of;
    use crate::event::EventType;
    use crate::segments::{segments_of, ManualClock, SegmentReader};

    #[test]
    fn configuration_is_strict() {
        let c = |p: &[(&str, &str)]| TraceExporterConfig::from_lookup(&env_of(p));
        assert_eq!(c(&[]).unwrap(), TraceExporterConfig::default());
        assert_eq!(
            c(&[
                (ENV_TRACE_PATH, "/x/t"),
                (ENV_TRACE_ROLL_BYTES, "0x1000"),
                (ENV_TRACE_MAX_SEGMENTS, "9")
            ])
            .unwrap(),
            TraceExporterConfig {
                path: "/x/t".into(),
                roll_bytes: 4096,
                max_segments: 9
            }
        );
        for (var, bad) in [
            (ENV_TRACE_PATH, ""),
            (ENV_TRACE_ROLL_BYTES, "0"),
            (ENV_TRACE_ROLL_BYTES, "-1"),
            (ENV_TRACE_ROLL_BYTES, "1k"),
            (ENV_TRACE_MAX_SEGMENTS, "0"),
            (ENV_TRACE_MAX_SEGMENTS, "two"),
        ] {
            let e = c(&[(var, bad)]).unwrap_err();
            assert!(e.message.contains(var), "{}", e.message);
        }
    }

    #[test]
    fn events_become_rows_that_roll_and_are_retained() {
        let dir = tempfile::tempdir().unwrap();
        let config = TraceExporterConfig {
            path: dir.path().join("nixl"),
            roll_bytes: 400,
            max_segments: 2,
        };
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let mut e = TraceExporter::with_clock(&config, "agent/0", clock.clone()).unwrap();
        let batch = [
            Event::new(EventType::AgentTxBytes, 4096),
            Event::new(EventType::AgentXferTime, 120),
            Event {
                event_type: 99,
                value: 1,
            },
        ];
        for _ in 0..4 {
            assert_eq!(e.export_batch(&batch), 3);
            clock.advance_ms(1000);
        }
        drop(e);
        let files = segments_of(&dir.path().join("nixl.agent_0")).unwrap();
        assert_eq!(files.len(), 2, "{files:?}");
        let (rows, _) = SegmentReader::read_rows(&files[0]).unwrap();
        let first: serde_json::Value = serde_json::from_slice(&rows[0]).unwrap();
        assert_eq!(first["event"]["schema"], NIXL_EVENT_SCHEMA);
        assert_eq!(first["event"]["agent"], "agent/0");
        let all: Vec<serde_json::Value> = files
            .iter()
            .flat_map(|f| SegmentReader::read_rows(f).unwrap().0)
            .map(|r| serde_json::from_slice(&r).unwrap())
            .collect();
        let last = all.last().unwrap();
        assert_eq!(last["event"]["name"], "unknown_event_99");
        assert_eq!(last["event"]["exported_at_unix_ms"], 1_700_000_003_000u64);
        assert_eq!(last["timestamp"], 3000);
    }

    #[test]
    fn nixl_telemetry_exporter_trace_selects_it() {
        use crate::exporter::{ExporterChoice, ENV_EXPORTER};
        let c = |p: &[(&str, &str)]| ExporterChoice::from_lookup(&env_of(p));
        assert_eq!(
            c(&[(ENV_EXPORTER, "TRACE"), (ENV_TRACE_MAX_SEGMENTS, "2")]).unwrap(),
            ExporterChoice::Trace(TraceExporterConfig {
                max_segments: 2,
                ..TraceExporterConfig::default()
            })
        );
        assert!(c(&[(ENV_EXPORTER, "TRACE"), (ENV_TRACE_ROLL_BYTES, "0")])
            .unwrap_err()
            .message
            .contains(ENV_TRACE_ROLL_BYTES));
        assert_eq!(
            c(&[(ENV_TRACE_ROLL_BYTES, "0")]).unwrap(),
            ExporterChoice::Nop,
            "TRACE settings are read only when TRACE is chosen"
        );
    }
}
