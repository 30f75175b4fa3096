//! One producer's FPM trace handle: opening it (configuration, the writable probe, sharing the
//! producer's writer), the non-blocking record path and the graceful close.
//!
//! - **Record** ([`FpmTrace::record_msgpack`], [`FpmTrace::record`]) stamps the wall clock and
//!   pushes into a bounded queue of 8192 entries; when the queue is full the oldest entry is
//!   dropped and counted. It never waits for the worker or the disk. Validation happens on the
//!   worker: an invalid payload is counted (`rejected`) and never written.
//! - **Full** mode writes every valid payload, heartbeats included, in arrival order.
//! - **Sampled** mode keeps the newest pending payload per key and writes them once per
//!   interval ([`crate::fpm::sampler`]).
//! - **Close** of the last trace of a producer stops the worker, drains the queue, writes every
//!   pending sample and the last batch: everything accepted and not dropped is on disk when
//!   close returns.
//! - **Process exit**: traces still open when the process exits (`exit`, or `main` returning;
//!   not a signal or `_exit`) are closed by an `atexit` handler, so their queued payloads,
//!   pending samples and last batch reach the disk as on close.
//!
//! Every accepted record ends in exactly one counter, so after close
//! `recorded == dropped + rejected + coalesced + written + rows_lost`.
//!
//! Opening a producer that is already open in this process shares its writer (one per prefix,
//! reference-counted: the last close writes everything and closes it), as Dynamo does: the same
//! `(namespace, component, producer_id)` again (one relay per data-parallel rank) gives another
//! handle on the same trace, released on its own; another `(namespace, component)` of the same
//! `producer_id` gives a trace stamping its own `source` (its pending samples are written when its
//! last handle closes). Counters ([`FpmStats`]) are per writer, shared by all those traces; the
//! balance holds after the last close.
//!
//! One writer per producer prefix is allowed at a time, in the process and across processes
//! ([`PrefixGuard`](crate::segments::PrefixGuard): two writers on one prefix would prune each other's segments). An open of a
//! prefix being written by something else, in this process (a producer id that sanitizes to the
//! same name, a `TRACE` exporter) or in another one, fails ([`OpenErrorKind::AlreadyOpen`]).

use std::collections::HashSet;
use std::fmt;
use std::fs;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};

use crate::error::{Error, Status};
use crate::fork::Generation;
use crate::fpm::config::{FpmConfig, FpmPolicy};
use crate::fpm::payload::FpmPayload;
use crate::fpm::producer::{FpmStats, ProducerWriter, RecordedPayload};
use crate::fpm::queue::DEFAULT_QUEUE_CAPACITY;
use crate::fpm::record::Source;
use crate::owner_only::{create_dir_all, create_new_file};
use crate::segments::guard::{GuardError, OpenPrefixes, Owner};
use crate::segments::{Clock, SegmentNaming, SegmentWriter, SystemClock, WriterOptions};
use crate::sync::LockUnpoisoned;

/// Why a trace could not be opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenErrorKind {
    /// Tracing is off (unset or false `DYN_FPM_TRACE`, or an invalid configuration).
    Disabled,
    /// The output location cannot be written (probe file, directory creation or listing).
    Unwritable,
    /// The producer prefix is already being written: by a trace or `TRACE` exporter of this
    /// process, or by another process (its lock file is held).
    AlreadyOpen,
    /// The worker thread could not be started.
    Internal,
}

/// A failed open: what kind, and a message saying why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenError {
    /// The kind of failure.
    pub kind: OpenErrorKind,
    /// The explanation.
    pub message: String,
}

impl OpenError {
    /// The error the C ABI reports for this failure of `function`: `NO_TELEMETRY` (disabled),
    /// `UNWRITABLE`, `NOT_ALLOWED` (already open) or `UNKNOWN`.
    pub fn into_error(self, function: &str) -> Error {
        let status = match self.kind {
            OpenErrorKind::Disabled => Status::NoTelemetry,
            OpenErrorKind::Unwritable => Status::Unwritable,
            OpenErrorKind::AlreadyOpen => Status::NotAllowed,
            OpenErrorKind::Internal => Status::Unknown,
        };
        Error::new(status, format!("{function}: {}", self.message))
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpenError {}

fn open_error(kind: OpenErrorKind, message: String) -> OpenError {
    OpenError { kind, message }
}

/// The FPM trace of one (namespace, component, producer_id). Thread-safe: record from any
/// thread. Every trace of one producer in this process (the same source opened again, or
/// another (namespace, component)) shares the producer's writer and segment files; each stamps
/// its own `source`.
///
/// In a child created by `fork`, a trace of the parent is inherited but not usable
/// ([`FpmTrace::inherited`]): recording and flushing it do nothing, closing it releases nothing
/// (the C ABI refuses every call on it but close with `NIXL_TELEMETRY_ERR_FORKED`), and the
/// exit handler leaves it alone. A trace opened in the child works as any other.
pub struct FpmTrace {
    writer: Arc<ProducerWriter>,
    source: Arc<Source>,
    prefix: PathBuf,
    closed: bool,
    /// The fork generation of the process that opened the trace.
    generation: Generation,
}

/// True the first time in this process that `producer_id` is found unwritable: the warning is
/// given once per producer, however often it is opened again (each open still fails, with the
/// reason in its error).
fn first_unwritable_warning(producer_id: &str) -> bool {
    unwritable_warned().insert(producer_id.to_owned())
}

/// The producers already warned about an unwritable directory.
fn unwritable_warned() -> std::sync::MutexGuard<'static, HashSet<String>> {
    static WARNED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let warned = WARNED.get_or_init(Default::default);
    crate::fork::hold_across_fork(crate::fork::LockOrder::WarnedOnce, warned);
    warned.lock_unpoisoned()
}

/// Sequence number of the probe files of this process.
static PROBE_SEQ: AtomicU64 = AtomicU64::new(0);

/// Checks that `dir` accepts a new file: creates it if needed (0700), then creates (0600),
/// writes, syncs and deletes a unique hidden probe file. A name already taken (a file planted
/// there, or left by a crash) is skipped for the next one and left alone.
fn probe_writable(dir: &Path, stem: &str) -> std::io::Result<()> {
    create_dir_all(dir)?;
    let (probe, mut file) = loop {
        let probe = dir.join(format!(
            ".{stem}.write-probe-{}-{}",
            std::process::id(),
            PROBE_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        match create_new_file(&probe, false) {
            Ok(file) => break (probe, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    };
    let result = file
        .write_all(b"nixl-fpm-write-probe")
        .and_then(|()| file.sync_all());
    let removed = fs::remove_file(&probe);
    result?;
    removed
}

impl FpmTrace {
    /// Opens the trace of `producer_id` as the process environment (`DYN_FPM_*`) says. Returns
    /// [`OpenErrorKind::Disabled`] when tracing is off (an invalid configuration was warned
    /// about once per process) and [`OpenErrorKind::Unwritable`] when the output location cannot
    /// be written (one warning per producer per process); neither affects anything else.
    pub fn open_from_env(
        namespace: &str,
        component: &str,
        producer_id: &str,
    ) -> Result<FpmTrace, OpenError> {
        match FpmPolicy::process() {
            FpmPolicy::Enabled(config) => {
                let opened = FpmTrace::open(Source::new(namespace, component, producer_id), config);
                if let Err(e) = &opened {
                    if e.kind == OpenErrorKind::Unwritable && first_unwritable_warning(producer_id)
                    {
                        log::warn!("FPM trace initialization failed; continuing without local persistence: {e}");
                    }
                }
                opened
            }
            FpmPolicy::Off => Err(open_error(
                OpenErrorKind::Disabled,
                "FPM tracing is disabled: DYN_FPM_TRACE is unset or false".into(),
            )),
            FpmPolicy::Invalid(why) => Err(open_error(
                OpenErrorKind::Disabled,
                format!("FPM tracing is disabled by an invalid configuration: {why}"),
            )),
        }
    }

    /// Opens a trace with an explicit configuration, the system clock and a worker thread.
    pub fn open(source: Source, config: &FpmConfig) -> Result<FpmTrace, OpenError> {
        FpmTrace::open_with_clock(source, config, Arc::new(SystemClock::new()))
    }

    /// Opens a trace reading time from `clock`, with a worker thread (unless the producer's
    /// writer is already open: the trace then shares it, as it is).
    pub fn open_with_clock(
        source: Source,
        config: &FpmConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<FpmTrace, OpenError> {
        FpmTrace::open_inner(source, config, clock, DEFAULT_QUEUE_CAPACITY, true)
    }

    /// Opens a trace without a worker thread, driven by [`FpmTrace::pump`] and `clock`: every
    /// timing decision is then deterministic (tests, benchmarks). `queue_capacity` is normally
    /// 8192.
    pub fn open_manual(
        source: Source,
        config: &FpmConfig,
        clock: Arc<dyn Clock>,
        queue_capacity: usize,
    ) -> Result<FpmTrace, OpenError> {
        FpmTrace::open_inner(source, config, clock, queue_capacity, false)
    }

    fn open_inner(
        source: Source,
        config: &FpmConfig,
        clock: Arc<dyn Clock>,
        queue_capacity: usize,
        spawn: bool,
    ) -> Result<FpmTrace, OpenError> {
        crate::logging::init();
        let naming = SegmentNaming::new(&config.output_path, &source.producer_id);
        let prefix = naming.prefix();
        let mut open = OpenPrefixes::lock();
        if let Some(writer) = open.owner::<ProducerWriter>(&prefix) {
            if writer.producer_id != source.producer_id {
                return Err(open_error(
                    OpenErrorKind::AlreadyOpen,
                    format!(
                        "FPM trace: segment prefix {} is already open for writing by producer \
                         '{}', whose id sanitizes to the same name as '{}'",
                        prefix.display(),
                        writer.producer_id,
                        source.producer_id
                    ),
                ));
            }
            let pair = (source.namespace.clone(), source.component.clone());
            *writer.sources.lock_unpoisoned().entry(pair).or_insert(0) += 1;
            return Ok(FpmTrace {
                writer,
                source: Arc::new(source),
                prefix,
                closed: false,
                generation: Generation::current(),
            });
        }
        let unwritable = |e: std::io::Error| {
            open_error(
                OpenErrorKind::Unwritable,
                format!(
                    "FPM trace output location {} is not writable for producer '{}': {e}",
                    naming.dir().display(),
                    source.producer_id
                ),
            )
        };
        let stem = prefix
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let guard = open.claim(&naming, "FPM trace").map_err(|e| match e {
            GuardError::Io(_, io) => unwritable(io),
            conflict => open_error(OpenErrorKind::AlreadyOpen, conflict.to_string()),
        })?;
        probe_writable(naming.dir(), &stem).map_err(unwritable)?;
        let options = WriterOptions::new(config.roll_bytes, config.max_segments);
        let segments =
            SegmentWriter::open(naming.clone(), options, clock.clone()).map_err(unwritable)?;
        let writer = ProducerWriter::start(
            &source,
            config,
            clock,
            queue_capacity,
            spawn,
            segments,
            guard,
        )
        .map_err(|e| {
            open_error(
                OpenErrorKind::Internal,
                format!("cannot start the FPM trace worker thread: {e}"),
            )
        })?;
        let owner: Owner = Arc::downgrade(&writer) as Owner;
        open.set_owner(&prefix, Some(owner));
        close_open_traces_at_exit();
        Ok(FpmTrace {
            writer,
            source: Arc::new(source),
            prefix,
            closed: false,
            generation: Generation::current(),
        })
    }

    /// Whether the trace was opened before this process was forked (in a child: it is the
    /// parent's; recording and flushing do nothing, and closing releases nothing).
    #[inline]
    pub fn inherited(&self) -> bool {
        self.generation.inherited()
    }

    /// Records a msgpack-encoded payload (copied). Never blocks; validated by the worker.
    /// Nothing on an inherited trace.
    pub fn record_msgpack(&self, bytes: &[u8]) {
        if self.inherited() {
            return;
        }
        self.writer
            .enqueue(&self.source, RecordedPayload::Msgpack(bytes.to_vec()));
    }

    /// Records a typed payload. Never blocks; validated by the worker like a msgpack one.
    /// Nothing on an inherited trace.
    pub fn record(&self, payload: FpmPayload) {
        if self.inherited() {
            return;
        }
        self.writer
            .enqueue(&self.source, RecordedPayload::Typed(Box::new(payload)));
    }

    /// Counters of the producer's writer since it opened. They are per writer: every trace of
    /// one producer (each (namespace, component)) shares them, and after the last of them
    /// closed `recorded == dropped + rejected + coalesced + written + rows_lost`.
    pub fn stats(&self) -> FpmStats {
        self.writer.stats()
    }

    /// The source stamped on this trace's rows.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The producer prefix of the segment files (`<dir>/<stem>`).
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// Sampled mode: the number of keys holding a pending payload (in the producer's writer).
    pub fn pending_samples(&self) -> usize {
        self.writer.pending_samples()
    }

    /// Runs the worker's step once at the clock's current time: takes the queued payloads,
    /// writes the sampled ones if the interval elapsed and flushes the writer if its flush is due.
    /// Only for traces whose writer was opened with [`FpmTrace::open_manual`] (a no-op
    /// otherwise).
    pub fn pump(&self) {
        self.writer.pump();
    }

    /// Writes the buffered rows now (one gzip member), without waiting for the 1 s cadence.
    /// Nothing on an inherited trace.
    pub fn flush(&self) {
        if self.inherited() {
            return;
        }
        self.writer.flush();
    }

    /// Graceful close of this handle; returns the writer's counters. The last handle of a
    /// (namespace, component) writes everything that source accepted (its pending samples
    /// included); one of several handles of the same source only releases itself. The last
    /// trace of a producer also stops its writer, so its counters are then final.
    pub fn close(mut self) -> FpmStats {
        self.release();
        self.writer.stats()
    }

    fn release(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.inherited() {
            // The parent's writer: its worker does not exist here and its files are the
            // parent's. Nothing of it is released (see `crate::fork`).
            std::mem::forget(self.writer.clone());
            return;
        }
        let (namespace, component) = (&self.source.namespace, &self.source.component);
        let mut open = OpenPrefixes::lock();
        let last_of_source = {
            let mut sources = self.writer.sources.lock_unpoisoned();
            let key = (namespace.clone(), component.clone());
            match sources.get_mut(&key) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                _ => {
                    sources.remove(&key);
                    true
                }
            }
        };
        if Arc::strong_count(&self.writer) == 1 {
            // The last trace of the producer: nobody may share the writer from now on.
            open.set_owner(&self.prefix, None);
            drop(open);
            self.writer.shutdown();
        } else {
            drop(open);
            if last_of_source {
                self.writer.flush_source(namespace, component);
            }
        }
    }
}

/// Registers, once per process, the `atexit` handler that closes every trace still open.
fn close_open_traces_at_exit() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a function taking nothing and returning nothing, which stays valid
        // for as long as it can be called (glibc runs the handlers of a shared object when it is
        // unloaded).
        if unsafe { libc::atexit(close_traces_now) } != 0 {
            log::warn!(
                "cannot register the FPM trace exit handler: traces not closed before the \
                 process exits lose their last rows"
            );
        }
    });
}

/// The `atexit` handler: shuts down every producer writer still open (its handles stay valid;
/// what they record afterwards is not written).
extern "C" fn close_traces_now() {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let writers = OpenPrefixes::lock().owners::<ProducerWriter>();
        for writer in writers {
            writer.shutdown();
        }
    }));
}

impl Drop for FpmTrace {
    /// Closes gracefully, as [`FpmTrace::close`] does.
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segments::ManualClock;

    #[test]
    fn probe_leaves_nothing_behind_and_rejects_a_file_parent() {
        let dir = tempfile::tempdir().unwrap();
        probe_writable(dir.path(), "x").unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        // Names planted where the next probes would go are skipped and left alone.
        let next = PROBE_SEQ.load(Ordering::Relaxed);
        let planted: Vec<_> = (next..next + 50)
            .map(|seq| {
                let p = dir
                    .path()
                    .join(format!(".x.write-probe-{}-{seq}", std::process::id()));
                fs::write(&p, b"planted").unwrap();
                p
            })
            .collect();
        probe_writable(dir.path(), "x").unwrap();
        assert!(planted.iter().all(|p| fs::read(p).unwrap() == b"planted"));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), planted.len());
        let file = dir.path().join("f");
        fs::write(&file, b"").unwrap();
        assert!(probe_writable(&file.join("sub"), "x").is_err());
    }

    #[test]
    fn the_close_message_counts_what_the_stats_count() {
        let dir = tempfile::tempdir().unwrap();
        let config = FpmConfig {
            output_path: dir.path().join("p"),
            mode: crate::fpm::CaptureMode::Full,
            ..FpmConfig::default()
        };
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let trace = FpmTrace::open_manual(Source::new("n", "c", "big"), &config, clock, 8).unwrap();
        // One malformed payload, and two valid ones whose rows would be over the readers'
        // bound (the segment writer drops those), and one written.
        trace.record_msgpack(b"\xc1");
        let huge = "x".repeat(crate::segments::row::MAX_ROW_BYTES);
        trace.record(FpmPayload::heartbeat(&huge, 0, 0));
        trace.record(FpmPayload::heartbeat(&huge, 1, 0));
        trace.record(FpmPayload::heartbeat("w", 0, 0));
        let (stats, logged) = crate::logging::capture(|| trace.close());
        assert_eq!(
            (stats.recorded, stats.rejected, stats.written, stats.dropped),
            (4, 3, 1, 0)
        );
        let closed: Vec<_> = crate::logging::warnings(&logged)
            .into_iter()
            .filter(|m| m.contains("closed after"))
            .collect();
        assert_eq!(closed.len(), 1, "{logged:?}");
        assert!(
            closed[0].contains("dropping 0 records")
                && closed[0].contains("rejecting 3 payloads (1 malformed, 2 whose row was over")
                && closed[0].contains("losing 0 rows"),
            "{}",
            closed[0]
        );
    }

    #[test]
    fn a_second_open_shares_the_writer_until_the_last_close() {
        let dir = tempfile::tempdir().unwrap();
        let config = FpmConfig {
            output_path: dir.path().join("p"),
            ..FpmConfig::default()
        };
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let open =
            |p: &str| FpmTrace::open_manual(Source::new("n", "c", p), &config, clock.clone(), 8);
        let first = open("7").unwrap();
        let second = open("7").unwrap();
        assert!(Arc::ptr_eq(&first.writer, &second.writer));
        assert_eq!(
            first.writer.sources.lock_unpoisoned()[&("n".into(), "c".into())],
            2
        );
        // Another producer whose id sanitizes to the same file prefix is refused.
        let _dotted = open("a.b").unwrap();
        assert_eq!(open("a/b").err().unwrap().kind, OpenErrorKind::AlreadyOpen);
        first.close();
        assert!(!second.writer.closed(), "one handle is still open");
        let writer = Arc::downgrade(&second.writer);
        second.close();
        assert!(
            writer.upgrade().is_none(),
            "the last close released the writer"
        );
        assert_eq!(open("7").unwrap().stats().recorded, 0, "a new writer");
    }
}
