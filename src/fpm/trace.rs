//! One producer's FPM trace: the non-blocking record path, the capture modes and the worker that
//! feeds the segment writer.
//!
//! - **Record** ([`FpmTrace::record_msgpack`], [`FpmTrace::record`]) stamps the wall clock and
//!   pushes into a bounded queue of 8192 entries; when the queue is full the oldest entry is
//!   dropped and counted. It never waits for the worker or the disk. Validation happens on the
//!   worker: an invalid payload is counted (`rejected`) and never written.
//! - **Full** mode writes every valid payload, heartbeats included, in arrival order.
//! - **Sampled** mode keeps, per `(namespace, component, worker_id, dp_rank)` (the producer is the
//!   writer's), the newest
//!   pending payload (a newer one replaces it, even with a lower counter; only a counter equal to
//!   the last one written is suppressed). Every interval on the monotonic clock, the first tick
//!   one interval after the trace opened and missed ticks delayed rather than bursted, the
//!   pending payloads are written in key order (worker_id as a string, then dp_rank as a
//!   number). Memory holds one pending payload per key.
//! - **Close** stops the worker, drains the queue, writes every pending sample and the last
//!   batch: everything accepted and not dropped is on disk when close returns.
//!
//! Every accepted record ends in exactly one counter, so after close
//! `recorded == dropped + rejected + coalesced + written + rows_lost`.
//!
//! Several components of one producer trace at once: opening the same `producer_id` with another
//! `(namespace, component)` shares the producer's writer (one per prefix, reference-counted; the
//! last close flushes and closes it), each trace stamping its own `source`. Counters
//! ([`TraceStats`]) are per writer, shared by those traces; the balance holds after the last
//! close. The same `(namespace, component, producer_id)` opened twice is refused.
//!
//! One writer per producer prefix is allowed at a time, in the process and across processes
//! ([`PrefixGuard`]: two writers on one prefix would prune each other's segments). A second open
//! of a prefix already being written, by this process (an FPM trace or a `TRACE` exporter) or by
//! another one, fails ([`OpenErrorKind::AlreadyOpen`]); share the first handle instead (it is
//! `Sync`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::trace::clock::{Clock, SystemClock};
use crate::trace::config::{CaptureMode, TraceConfig, TracePolicy};
use crate::trace::envelope::{FpmRecord, Source};
use crate::trace::guard::{GuardError, PrefixGuard};
use crate::trace::payload::{FpmPayload, ValidPayload};
use crate::trace::queue::{DropOldestQueue, DEFAULT_QUEUE_CAPACITY};
use crate::trace::segment::{SegmentNaming, SegmentWriter, WriterCounters, WriterOptions};

/// Longest the worker sleeps between two drains of the queue (so the envelope `timestamp` stays
/// close to the record time); it is also woken when the queue is half full.
const MAX_WORKER_SLEEP: Duration = Duration::from_millis(100);

/// Counters of one trace since it opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Payloads accepted by record calls (including those later dropped).
    pub recorded: u64,
    /// Rows written to disk.
    pub written: u64,
    /// Payloads dropped because the queue was full (the oldest go first).
    pub dropped: u64,
    /// Payloads rejected as invalid (never written).
    pub rejected: u64,
    /// Sampled mode: payloads replaced by a newer one before a tick, or suppressed because
    /// their counter was already written.
    pub coalesced: u64,
    /// Failed batch writes.
    pub write_errors: u64,
    /// Rows lost with the batches that failed.
    pub rows_lost: u64,
    /// Segments rolled.
    pub segments_rolled: u64,
    /// Old segments deleted by retention.
    pub segments_pruned: u64,
}

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

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpenError {}

fn open_error(kind: OpenErrorKind, message: String) -> OpenError {
    OpenError { kind, message }
}

/// A recorded payload waiting for the worker.
enum Raw {
    Msgpack(Vec<u8>),
    Typed(Box<FpmPayload>),
}

struct Queued {
    source: Arc<Source>,
    observed_at_unix_ms: u64,
    raw: Raw,
}

struct Shared {
    queue: DropOldestQueue<Queued>,
    clock: Arc<dyn Clock>,
    rejected: AtomicU64,
    coalesced: AtomicU64,
    writer: Arc<WriterCounters>,
    stop: AtomicBool,
    worker: OnceLock<std::thread::Thread>,
}

/// The newest pending sample of one key.
struct Sample {
    source: Arc<Source>,
    observed_at_unix_ms: u64,
    payload: ValidPayload,
}

/// The sampling key: (namespace, component, worker_id, dp_rank); the producer is the writer's.
type SampleKey = (String, String, String, u64);

/// The worker's state: capture logic and the writer.
struct Core {
    shared: Arc<Shared>,
    producer_id: String,
    mode: CaptureMode,
    interval: Duration,
    next_tick: Duration,
    writer: SegmentWriter,
    pending: BTreeMap<SampleKey, Sample>,
    last_written: HashMap<SampleKey, u64>,
    drained: VecDeque<Queued>,
    warned_rejected: bool,
    warned_dropped: bool,
}

/// The writer of one producer prefix, shared by the traces of every (namespace, component) of
/// that producer in this process; shut down when the last of them closes.
struct ProducerWriter {
    shared: Arc<Shared>,
    core: Arc<Mutex<Core>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    manual: bool,
    prefix: PathBuf,
    producer_id: String,
    /// The (namespace, component) pairs with an open trace on this writer.
    sources: Mutex<HashSet<(String, String)>>,
    /// The claim on the prefix (in the process and, by `flock`, across processes).
    guard: Mutex<Option<PrefixGuard>>,
    closed: AtomicBool,
}

/// The FPM trace of one (namespace, component, producer_id). Thread-safe: record from any
/// thread. Traces of one producer with different (namespace, component) share the producer's
/// writer and segment files; each stamps its own `source`.
pub struct FpmTrace {
    writer: Arc<ProducerWriter>,
    source: Arc<Source>,
    closed: bool,
}

/// The producer writers open in this process, by prefix.
fn writers() -> MutexGuard<'static, HashMap<PathBuf, std::sync::Weak<ProducerWriter>>> {
    static WRITERS: OnceLock<Mutex<HashMap<PathBuf, std::sync::Weak<ProducerWriter>>>> =
        OnceLock::new();
    WRITERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// True the first time in this process that `producer_id` is found unwritable: the warning is
/// given once per producer, however often it is opened again (each open still fails, with the
/// reason in its error).
fn first_unwritable_warning(producer_id: &str) -> bool {
    static WARNED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    WARNED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(producer_id.to_owned())
}

/// Checks that `dir` accepts a new file: creates it if needed, then creates, writes, syncs and
/// deletes a unique hidden probe file.
fn probe_writable(dir: &Path, stem: &str) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    fs::create_dir_all(dir)?;
    let probe = dir.join(format!(
        ".{stem}.write-probe-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|mut f| {
            f.write_all(b"nixl-fpm-write-probe")?;
            f.sync_all()
        });
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
        match TracePolicy::process() {
            TracePolicy::Enabled(config) => {
                let opened = FpmTrace::open(Source::new(namespace, component, producer_id), config);
                if let Err(e) = &opened {
                    if e.kind == OpenErrorKind::Unwritable && first_unwritable_warning(producer_id)
                    {
                        log::warn!("FPM trace initialization failed; continuing without local persistence: {e}");
                    }
                }
                opened
            }
            TracePolicy::Off => Err(open_error(
                OpenErrorKind::Disabled,
                "FPM tracing is disabled: DYN_FPM_TRACE is unset or false".into(),
            )),
            TracePolicy::Invalid(why) => Err(open_error(
                OpenErrorKind::Disabled,
                format!("FPM tracing is disabled by an invalid configuration: {why}"),
            )),
        }
    }

    /// Opens a trace with an explicit configuration, the system clock and a worker thread.
    pub fn open(source: Source, config: &TraceConfig) -> Result<FpmTrace, OpenError> {
        FpmTrace::open_with_clock(source, config, Arc::new(SystemClock::new()))
    }

    /// Opens a trace reading time from `clock`, with a worker thread (unless the producer's
    /// writer is already open: the trace then shares it, as it is).
    pub fn open_with_clock(
        source: Source,
        config: &TraceConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<FpmTrace, OpenError> {
        FpmTrace::open_inner(source, config, clock, DEFAULT_QUEUE_CAPACITY, true)
    }

    /// Opens a trace without a worker thread, driven by [`FpmTrace::pump`] and `clock`: every
    /// timing decision is then deterministic (tests, benchmarks). `queue_capacity` is normally
    /// 8192.
    pub fn open_manual(
        source: Source,
        config: &TraceConfig,
        clock: Arc<dyn Clock>,
        queue_capacity: usize,
    ) -> Result<FpmTrace, OpenError> {
        FpmTrace::open_inner(source, config, clock, queue_capacity, false)
    }

    fn open_inner(
        source: Source,
        config: &TraceConfig,
        clock: Arc<dyn Clock>,
        queue_capacity: usize,
        spawn: bool,
    ) -> Result<FpmTrace, OpenError> {
        crate::logging::init();
        let naming = SegmentNaming::new(&config.output_path, &source.producer_id);
        let prefix = naming.prefix();
        let pair = (source.namespace.clone(), source.component.clone());
        let mut registry = writers();
        if let Some(writer) = registry.get(&prefix).and_then(std::sync::Weak::upgrade) {
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
            if !lock(&writer.sources).insert(pair) {
                return Err(open_error(
                    OpenErrorKind::AlreadyOpen,
                    format!(
                        "an FPM trace of ({}, {}, {}) is already open in this process; share \
                         that handle",
                        source.namespace, source.component, source.producer_id
                    ),
                ));
            }
            return Ok(FpmTrace {
                writer,
                source: Arc::new(source),
                closed: false,
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
        let guard = PrefixGuard::acquire(&naming, "FPM trace").map_err(|e| match e {
            GuardError::Io(_, io) => unwritable(io),
            conflict => open_error(OpenErrorKind::AlreadyOpen, conflict.to_string()),
        })?;
        probe_writable(naming.dir(), &stem).map_err(unwritable)?;
        let options = WriterOptions::new(config.roll_bytes, config.max_segments);
        let writer =
            SegmentWriter::open(naming.clone(), options, clock.clone()).map_err(unwritable)?;
        let shared = Arc::new(Shared {
            queue: DropOldestQueue::new(queue_capacity),
            clock: clock.clone(),
            rejected: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
            writer: writer.counters(),
            stop: AtomicBool::new(false),
            worker: OnceLock::new(),
        });
        let interval = config.sample_interval.max(Duration::from_millis(1));
        let core = Core {
            drained: shared.queue.new_drain_buffer(),
            shared: shared.clone(),
            producer_id: source.producer_id.clone(),
            mode: config.mode,
            interval,
            next_tick: clock.monotonic() + interval,
            writer,
            pending: BTreeMap::new(),
            last_written: HashMap::new(),
            warned_rejected: false,
            warned_dropped: false,
        };
        let core = Arc::new(Mutex::new(core));
        let mut worker = None;
        if spawn {
            let (worker_shared, worker_core) = (shared.clone(), core.clone());
            let handle = std::thread::Builder::new()
                .name("nixl-fpm-trace".into())
                .spawn(move || run_worker(&worker_shared, &worker_core))
                .map_err(|e| {
                    open_error(
                        OpenErrorKind::Internal,
                        format!("cannot start the FPM trace worker thread: {e}"),
                    )
                })?;
            let _ = shared.worker.set(handle.thread().clone());
            worker = Some(handle);
        }
        let writer = Arc::new(ProducerWriter {
            shared,
            core,
            worker: Mutex::new(worker),
            manual: !spawn,
            prefix: prefix.clone(),
            producer_id: source.producer_id.clone(),
            sources: Mutex::new(HashSet::from([pair])),
            guard: Mutex::new(Some(guard)),
            closed: AtomicBool::new(false),
        });
        registry.insert(prefix, Arc::downgrade(&writer));
        Ok(FpmTrace {
            writer,
            source: Arc::new(source),
            closed: false,
        })
    }

    fn enqueue(&self, raw: Raw) {
        let shared = &self.writer.shared;
        let pushed = shared.queue.push(Queued {
            source: self.source.clone(),
            observed_at_unix_ms: shared.clock.unix_ms(),
            raw,
        });
        if pushed.len == shared.queue.capacity() / 2 || pushed.dropped_oldest {
            if let Some(worker) = shared.worker.get() {
                worker.unpark();
            }
        }
    }

    /// Records a msgpack-encoded payload (copied). Never blocks; validated by the worker.
    pub fn record_msgpack(&self, bytes: &[u8]) {
        self.enqueue(Raw::Msgpack(bytes.to_vec()));
    }

    /// Records a typed payload. Never blocks; validated by the worker like a msgpack one.
    pub fn record(&self, payload: FpmPayload) {
        self.enqueue(Raw::Typed(Box::new(payload)));
    }

    /// Counters of the producer's writer since it opened. They are per writer: every trace of
    /// one producer (each (namespace, component)) shares them, and after the last of them
    /// closed `recorded == dropped + rejected + coalesced + written + rows_lost`.
    pub fn stats(&self) -> TraceStats {
        self.writer.stats()
    }

    /// The source stamped on this trace's rows.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The producer prefix of the segment files (`<dir>/<stem>`).
    pub fn prefix(&self) -> &Path {
        &self.writer.prefix
    }

    /// Sampled mode: the number of keys holding a pending payload (in the producer's writer).
    pub fn pending_samples(&self) -> usize {
        self.writer.lock_core().pending.len()
    }

    /// Runs the worker's step once at the clock's current time: takes the queued payloads,
    /// writes the sampled ones if the interval elapsed and flushes the writer if its flush is due.
    /// Only for traces whose writer was opened with [`FpmTrace::open_manual`] (a no-op
    /// otherwise).
    pub fn pump(&self) {
        if self.writer.manual {
            self.writer.lock_core().step();
        }
    }

    /// Writes the buffered rows now (one gzip member), without waiting for the 1 s cadence.
    pub fn flush(&self) {
        let mut core = self.writer.lock_core();
        core.take_queued();
        core.writer.flush();
    }

    /// Graceful close: writes everything this trace accepted (its pending samples included) and
    /// returns the writer's counters. The last trace of a producer also stops its writer, so its
    /// counters are then final.
    pub fn close(mut self) -> TraceStats {
        self.release();
        self.writer.stats()
    }

    fn release(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let pair = (self.source.namespace.clone(), self.source.component.clone());
        let mut registry = writers();
        lock(&self.writer.sources).remove(&pair);
        if Arc::strong_count(&self.writer) == 1 {
            registry.remove(&self.writer.prefix);
            drop(registry);
            self.writer.shutdown();
        } else {
            drop(registry);
            let mut core = self.writer.lock_core();
            core.take_queued();
            core.write_pending_of(&pair);
            core.writer.flush();
        }
    }
}

impl Drop for FpmTrace {
    /// Closes gracefully, as [`FpmTrace::close`] does.
    fn drop(&mut self) {
        self.release();
    }
}

impl ProducerWriter {
    fn lock_core(&self) -> MutexGuard<'_, Core> {
        lock(&self.core)
    }

    fn stats(&self) -> TraceStats {
        let w = self.shared.writer.snapshot();
        TraceStats {
            recorded: self.shared.queue.pushed(),
            written: w.rows_written,
            dropped: self.shared.queue.dropped(),
            rejected: self.shared.rejected.load(Ordering::Relaxed),
            coalesced: self.shared.coalesced.load(Ordering::Relaxed),
            write_errors: w.write_errors,
            rows_lost: w.rows_lost,
            segments_rolled: w.segments_rolled,
            segments_pruned: w.segments_pruned,
        }
    }

    /// Stops the worker, writes everything accepted, releases the prefix. Idempotent.
    fn shutdown(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shared.stop.store(true, Ordering::Release);
        if let Some(worker) = lock(&self.worker).take() {
            worker.thread().unpark();
            let _ = worker.join();
        }
        // The worker has finished (or there is none): finish on this thread. Idempotent.
        self.lock_core().finish();
        lock(&self.guard).take();
    }
}

impl Drop for ProducerWriter {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run_worker(shared: &Shared, core: &Mutex<Core>) {
    let lock = || core.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let stopping = shared.stop.load(Ordering::Acquire);
        let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut core = lock();
            core.step();
            core.next_wake()
        }));
        let wake = match stepped {
            Ok(wake) => wake,
            Err(_) => {
                log::error!("FPM trace worker failed; tracing stops for this producer");
                return;
            }
        };
        if stopping {
            return;
        }
        let now = shared.clock.monotonic();
        let sleep = wake.saturating_sub(now).min(MAX_WORKER_SLEEP);
        if !sleep.is_zero() {
            std::thread::park_timeout(sleep);
        }
    }
}

impl Core {
    /// Takes the queued payloads, writes due samples, flushes the writer if due.
    fn step(&mut self) {
        self.take_queued();
        if self.mode == CaptureMode::Sampled {
            let now = self.shared.clock.monotonic();
            if now >= self.next_tick {
                self.write_pending();
                self.next_tick += self.interval;
                if self.next_tick <= now {
                    self.next_tick = now + self.interval;
                }
            }
        }
        self.writer.flush_if_due();
    }

    /// When the next timed action is due.
    fn next_wake(&self) -> Duration {
        let flush = self.writer.next_flush_due();
        match self.mode {
            CaptureMode::Sampled => flush.min(self.next_tick),
            CaptureMode::Full => flush,
        }
    }

    /// Drains the queue and applies the capture mode to each payload.
    fn take_queued(&mut self) {
        self.shared.queue.drain(&mut self.drained);
        let mut drained = std::mem::take(&mut self.drained);
        for queued in drained.drain(..) {
            let valid = match queued.raw {
                Raw::Msgpack(bytes) => ValidPayload::from_msgpack(&bytes),
                Raw::Typed(payload) => payload.validate(),
            };
            match valid {
                Ok(payload) => self.accept(queued.source, queued.observed_at_unix_ms, payload),
                Err(why) => {
                    self.shared.rejected.fetch_add(1, Ordering::Relaxed);
                    if !self.warned_rejected {
                        self.warned_rejected = true;
                        log::warn!(
                            "FPM trace of producer '{}' dropped a malformed payload: {why} \
                             (further ones are counted, and summarised at close)",
                            self.producer_id
                        );
                    }
                }
            }
        }
        self.drained = drained;
        if !self.warned_dropped && self.shared.queue.dropped() > 0 {
            self.warned_dropped = true;
            log::warn!(
                "FPM trace queue of producer '{}' overflowed; older records were overwritten \
                 (further drops are counted, and summarised at close)",
                self.producer_id
            );
        }
    }

    fn accept(&mut self, source: Arc<Source>, observed_at_unix_ms: u64, payload: ValidPayload) {
        match self.mode {
            CaptureMode::Full => {
                let record = FpmRecord::new(&source, self.mode, observed_at_unix_ms, &payload);
                self.writer.push(&record);
            }
            CaptureMode::Sampled => {
                let key = (
                    source.namespace.clone(),
                    source.component.clone(),
                    payload.worker_id.clone(),
                    payload.dp_rank,
                );
                if self.last_written.get(&key) == Some(&payload.counter_id) {
                    self.shared.coalesced.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                let sample = Sample {
                    source,
                    observed_at_unix_ms,
                    payload,
                };
                if self.pending.insert(key, sample).is_some() {
                    self.shared.coalesced.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Writes every pending sample in key order.
    fn write_pending(&mut self) {
        for (key, sample) in std::mem::take(&mut self.pending) {
            self.write_sample(key, sample);
        }
    }

    /// Writes the pending samples of one (namespace, component), in key order.
    fn write_pending_of(&mut self, pair: &(String, String)) {
        let keys: Vec<SampleKey> = self
            .pending
            .keys()
            .filter(|k| k.0 == pair.0 && k.1 == pair.1)
            .cloned()
            .collect();
        for key in keys {
            if let Some(sample) = self.pending.remove(&key) {
                self.write_sample(key, sample);
            }
        }
    }

    fn write_sample(&mut self, key: SampleKey, sample: Sample) {
        let record = FpmRecord::new(
            &sample.source,
            self.mode,
            sample.observed_at_unix_ms,
            &sample.payload,
        );
        self.writer.push(&record);
        self.last_written.insert(key, sample.payload.counter_id);
    }

    /// Drains everything, writes every pending sample and the last batch. Idempotent.
    fn finish(&mut self) {
        self.take_queued();
        self.write_pending();
        self.writer.flush();
        let s = self.shared.queue.dropped();
        let r = self.shared.rejected.load(Ordering::Relaxed);
        if s > 0 || r > 0 {
            log::warn!(
                "FPM trace of producer '{}' closed after dropping {s} records (queue full) and \
                 rejecting {r} malformed payloads",
                self.producer_id
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::clock::ManualClock;

    #[test]
    fn probe_leaves_nothing_behind_and_rejects_a_file_parent() {
        let dir = tempfile::tempdir().unwrap();
        probe_writable(dir.path(), "x").unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        let file = dir.path().join("f");
        fs::write(&file, b"").unwrap();
        assert!(probe_writable(&file.join("sub"), "x").is_err());
    }

    #[test]
    fn a_second_open_of_the_same_prefix_is_refused_until_close() {
        let dir = tempfile::tempdir().unwrap();
        let config = TraceConfig {
            output_path: dir.path().join("p"),
            ..TraceConfig::default()
        };
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let open = || FpmTrace::open_manual(Source::new("n", "c", "7"), &config, clock.clone(), 8);
        let first = open().unwrap();
        assert_eq!(open().err().unwrap().kind, OpenErrorKind::AlreadyOpen);
        let other = FpmTrace::open_manual(Source::new("n", "c", "8"), &config, clock.clone(), 8);
        assert!(other.is_ok());
        first.close();
        open().unwrap();
    }
}
