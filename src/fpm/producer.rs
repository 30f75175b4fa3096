//! The writer of one producer prefix: the bounded queue the record calls push into, the worker
//! that validates queued payloads, applies the capture mode and feeds the segment writer, and
//! its counters.
//!
//! It is shared by every trace of that producer in this process (each (namespace, component),
//! each opened any number of times) and shut down when the last of them closes, or at process
//! exit: shutdown stops the worker, drains the queue, writes every pending sample and the last
//! batch, so everything accepted and not dropped is on disk when it returns.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::fpm::config::{CaptureMode, FpmConfig};
use crate::fpm::payload::{FpmPayload, ValidPayload};
use crate::fpm::queue::{DropOldestQueue, QueuedBytes};
use crate::fpm::record::{FpmRecord, Source};
use crate::fpm::sampler::{Offered, Sample, Sampler};
use crate::segments::writer::WriterCounters;
use crate::segments::{Clock, PrefixGuard, SegmentWriter};
use crate::sync::LockUnpoisoned;
use crate::worker::{Waker, Worker};

/// Longest the worker sleeps between two drains of the queue (so the envelope `timestamp` stays
/// close to the record time); it is also woken when the queue is half full.
const MAX_WORKER_SLEEP: Duration = Duration::from_millis(100);

/// Counters of a producer's writer since it opened. After the last trace of the producer
/// closed, `recorded == dropped + rejected + coalesced + written + rows_lost`.
// Also the C ABI's `nixl_telemetry_fpm_trace_stats_t` (cbindgen_fpm.toml renames it): one
// definition, whose C layout is fixed here.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FpmStats {
    /// Payloads accepted by record calls (including those later dropped).
    pub recorded: u64,
    /// Rows written into segments (not counting those of an open segment found deleted or
    /// replaced, which move to `rows_lost`).
    pub written: u64,
    /// Payloads dropped because the queue (8192) was full; the oldest go first.
    pub dropped: u64,
    /// Payloads rejected as invalid, or whose row would be longer than the readers' bound of
    /// 16 MiB (never written).
    pub rejected: u64,
    /// Failed batch writes (each loses its batch).
    pub write_errors: u64,
    /// Segments rolled.
    pub segments_rolled: u64,
    /// Old segments deleted by retention.
    pub segments_pruned: u64,
    /// Sampled mode: payloads replaced by a newer one before a tick, or suppressed because
    /// their counter was already written.
    pub coalesced: u64,
    /// Rows lost with the batches that failed, or with an open segment someone deleted or
    /// replaced.
    pub rows_lost: u64,
}

/// A payload as a record call gave it, waiting for the worker to validate it.
pub(crate) enum RecordedPayload {
    /// Dynamo's msgpack map, as recorded.
    Msgpack(Vec<u8>),
    /// A typed payload.
    Typed(Box<FpmPayload>),
}

/// A recorded payload in the queue, with its source and the time it was recorded.
struct QueuedPayload {
    source: Arc<Source>,
    observed_at_unix_ms: u64,
    payload: RecordedPayload,
}

impl QueuedBytes for QueuedPayload {
    /// The msgpack bytes as recorded, or a typed payload's size with its `worker_id`.
    fn queued_bytes(&self) -> usize {
        match &self.payload {
            RecordedPayload::Msgpack(bytes) => bytes.len(),
            RecordedPayload::Typed(p) => std::mem::size_of::<FpmPayload>() + p.worker_id.len(),
        }
    }
}

/// What the record path and the worker share: the queue, the clock, the counters and the
/// worker's waker.
struct QueueAndCounters {
    queue: DropOldestQueue<QueuedPayload>,
    clock: Arc<dyn Clock>,
    rejected: AtomicU64,
    coalesced: AtomicU64,
    /// The segment writer's counters, readable without waiting for the worker.
    writer: Arc<WriterCounters>,
    waker: OnceLock<Waker>,
}

/// The worker's state: the capture logic (mode, sampler) and the segment writer.
struct WorkerState {
    shared: Arc<QueueAndCounters>,
    producer_id: String,
    mode: CaptureMode,
    sampler: Sampler,
    writer: SegmentWriter,
    drained: VecDeque<QueuedPayload>,
    warned_rejected: bool,
    warned_dropped: bool,
}

/// The writer of one producer prefix (see the module documentation).
pub(crate) struct ProducerWriter {
    shared: Arc<QueueAndCounters>,
    state: Arc<Mutex<WorkerState>>,
    worker: Mutex<Option<Worker>>,
    manual: bool,
    /// The producer id as given (unsanitized).
    pub(crate) producer_id: String,
    /// The (namespace, component) pairs with an open trace on this writer, each with its number
    /// of open traces.
    pub(crate) sources: Mutex<HashMap<(String, String), usize>>,
    /// The claim on the prefix (in the process and, by `flock`, across processes).
    guard: Mutex<Option<PrefixGuard>>,
    closed: AtomicBool,
}

impl ProducerWriter {
    /// Starts the writer of `source`'s producer around an opened segment `writer` and the claim
    /// `guard` on its prefix: with a worker thread, or (`spawn` false) driven by
    /// [`ProducerWriter::pump`].
    pub(crate) fn start(
        source: &Source,
        config: &FpmConfig,
        clock: Arc<dyn Clock>,
        queue_capacity: usize,
        spawn: bool,
        writer: SegmentWriter,
        guard: PrefixGuard,
    ) -> std::io::Result<Arc<ProducerWriter>> {
        let shared = Arc::new(QueueAndCounters {
            queue: DropOldestQueue::new(queue_capacity, config.queue_max_bytes),
            clock: clock.clone(),
            rejected: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
            writer: writer.counters(),
            waker: OnceLock::new(),
        });
        let state = Arc::new(Mutex::new(WorkerState {
            drained: shared.queue.new_drain_buffer(),
            shared: shared.clone(),
            producer_id: source.producer_id.clone(),
            mode: config.mode,
            sampler: Sampler::new(config.sample_interval, clock.monotonic()),
            writer,
            warned_rejected: false,
            warned_dropped: false,
        }));
        let mut worker = None;
        if spawn {
            let (worker_shared, worker_state) = (shared.clone(), state.clone());
            let started = Worker::spawn(
                "nixl-fpm-trace",
                format!("the FPM trace worker of producer '{}'", source.producer_id),
                Duration::ZERO,
                move || {
                    let wake = {
                        let mut state = worker_state.lock_unpoisoned();
                        state.step();
                        state.next_wake()
                    };
                    let now = worker_shared.clock.monotonic();
                    wake.saturating_sub(now).min(MAX_WORKER_SLEEP)
                },
            )?;
            let _ = shared.waker.set(started.waker());
            worker = Some(started);
        }
        Ok(Arc::new(ProducerWriter {
            shared,
            state,
            worker: Mutex::new(worker),
            manual: !spawn,
            producer_id: source.producer_id.clone(),
            sources: Mutex::new(HashMap::from([(
                (source.namespace.clone(), source.component.clone()),
                1,
            )])),
            guard: Mutex::new(Some(guard)),
            closed: AtomicBool::new(false),
        }))
    }

    /// Queues a recorded payload; never waits for the worker or the disk.
    pub(crate) fn enqueue(&self, source: &Arc<Source>, payload: RecordedPayload) {
        let shared = &self.shared;
        let pushed = shared.queue.push(QueuedPayload {
            source: source.clone(),
            observed_at_unix_ms: shared.clock.unix_ms(),
            payload,
        });
        if pushed.len == shared.queue.capacity() / 2 || pushed.dropped_oldest {
            if let Some(waker) = shared.waker.get() {
                waker.wake();
            }
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, WorkerState> {
        self.state.lock_unpoisoned()
    }

    /// The writer's counters.
    pub(crate) fn stats(&self) -> FpmStats {
        let w = self.shared.writer.snapshot();
        FpmStats {
            recorded: self.shared.queue.pushed(),
            written: w.rows_written,
            dropped: self.shared.queue.dropped(),
            rejected: self.shared.rejected.load(Ordering::Relaxed) + w.rows_too_long,
            coalesced: self.shared.coalesced.load(Ordering::Relaxed),
            write_errors: w.write_errors,
            rows_lost: w.rows_lost,
            segments_rolled: w.segments_rolled,
            segments_pruned: w.segments_pruned,
        }
    }

    /// Sampled mode: the number of keys holding a pending payload.
    pub(crate) fn pending_samples(&self) -> usize {
        self.lock_state().sampler.pending_len()
    }

    /// Runs the worker's step once, for a writer without a worker thread (a no-op otherwise).
    pub(crate) fn pump(&self) {
        if self.manual {
            self.lock_state().step();
        }
    }

    /// Takes what is queued and writes the buffered rows now.
    pub(crate) fn flush(&self) {
        let mut state = self.lock_state();
        state.take_queued();
        state.writer.flush();
    }

    /// Writes everything one (namespace, component) accepted: its queued payloads, its pending
    /// samples and the buffered rows (when its last trace closes and others stay open). A no-op
    /// once the writer is shut down.
    pub(crate) fn flush_source(&self, namespace: &str, component: &str) {
        let mut state = self.lock_state();
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        state.take_queued();
        for sample in state.sampler.take_of(namespace, component) {
            state.write_sample(&sample);
        }
        state.writer.flush();
    }

    /// Whether the writer was shut down.
    #[cfg(test)]
    pub(crate) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Stops the worker, writes everything accepted, releases the prefix. Idempotent.
    pub(crate) fn shutdown(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(mut worker) = self.worker.lock_unpoisoned().take() {
            worker.stop();
        }
        // The worker has finished (or there is none): finish on this thread.
        self.lock_state().finish();
        self.guard.lock_unpoisoned().take();
    }
}

impl Drop for ProducerWriter {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl WorkerState {
    /// Takes the queued payloads, writes due samples, runs the segment writer's timer (its
    /// periodic flush and the check of its segment's path).
    fn step(&mut self) {
        self.take_queued();
        if self.mode == CaptureMode::Sampled && self.sampler.tick(self.shared.clock.monotonic()) {
            self.write_pending();
        }
        self.writer.tick();
    }

    /// When the next timed action is due.
    fn next_wake(&self) -> Duration {
        let writer = self.writer.next_tick_due();
        match self.mode {
            CaptureMode::Sampled => writer.min(self.sampler.next_tick()),
            CaptureMode::Full => writer,
        }
    }

    /// Drains the queue and applies the capture mode to each payload.
    fn take_queued(&mut self) {
        self.shared.queue.drain(&mut self.drained);
        let mut drained = std::mem::take(&mut self.drained);
        for queued in drained.drain(..) {
            let valid = match queued.payload {
                RecordedPayload::Msgpack(bytes) => ValidPayload::from_msgpack(&bytes),
                RecordedPayload::Typed(payload) => payload.validate(),
            };
            match valid {
                Ok(payload) => self.accept(Sample {
                    source: queued.source,
                    observed_at_unix_ms: queued.observed_at_unix_ms,
                    payload,
                }),
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

    fn accept(&mut self, sample: Sample) {
        match self.mode {
            CaptureMode::Full => self.write_sample(&sample),
            CaptureMode::Sampled => {
                if self.sampler.offer(sample) != Offered::Pending {
                    self.shared.coalesced.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Writes every pending sample in key order.
    fn write_pending(&mut self) {
        for sample in self.sampler.take_all() {
            self.write_sample(&sample);
        }
    }

    fn write_sample(&mut self, sample: &Sample) {
        let record = FpmRecord::new(
            &sample.source,
            self.mode,
            sample.observed_at_unix_ms,
            &sample.payload,
        );
        self.writer.push(&record);
    }

    /// Drains everything, writes every pending sample and the last batch. Idempotent.
    fn finish(&mut self) {
        self.take_queued();
        self.write_pending();
        self.writer.flush();
        // What `stats()` counts: `dropped`, `rejected` (malformed payloads and rows over the
        // readers' bound, which the segment writer drops) and `rows_lost`.
        let dropped = self.shared.queue.dropped();
        let malformed = self.shared.rejected.load(Ordering::Relaxed);
        let w = self.shared.writer.snapshot();
        let rejected = malformed + w.rows_too_long;
        if dropped > 0 || rejected > 0 || w.rows_lost > 0 {
            log::warn!(
                "FPM trace of producer '{}' closed after dropping {dropped} records (queue \
                 full), rejecting {rejected} payloads ({malformed} malformed, {} whose row \
                 was over {} bytes) and losing {} rows with failed writes or segments deleted \
                 under it",
                self.producer_id,
                w.rows_too_long,
                crate::segments::row::MAX_ROW_BYTES,
                w.rows_lost
            );
        }
    }
}
