//! The per-agent collector: the producer hot path (gate on the metric mask, push into the
//! staging queue), a background thread flushing the queue into the exporter every
//! `run_interval`, explicit flushes, and a final flush when it is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::{self, Config};
use crate::error::{Error, Result, Status};
use crate::event::{Event, EventType};
use crate::exporter::{flush_len, Exporter, LossCause};
use crate::filter::MetricMask;
use crate::fork::Generation;
use crate::settings::process_settings;
use crate::staging::{FastPath, StagingQueue};
use crate::sync::LockUnpoisoned;
use crate::worker::Worker;

/// The events every transfer records whatever its direction.
const XFER_COMMON_BITS: u32 = EventType::AgentXferPostTime.bit() | EventType::AgentXferTime.bit();

/// What happened to a recorded event (or a transfer's batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Staged for the next flush.
    Accepted,
    /// The metric is deactivated by `NIXL_TELEMETRY_ENABLED_METRICS`: skipped, not a drop.
    Deactivated,
    /// The staging queue was full: dropped and counted.
    Dropped,
}

/// Counters of one collector since its creation. After the collector's final flush,
/// `events_exported + events_lost == events_accepted + drop_reports`.
// Also the C ABI's `nixl_telemetry_stats_t` (cbindgen.toml renames it): one definition, whose
// C layout is fixed here.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectorStats {
    /// Events that entered the staging queue.
    pub events_accepted: u64,
    /// Events refused by the full staging queue (reported as `agent_telemetry_events_dropped`).
    pub events_dropped: u64,
    /// Events the exporter kept (including synthetic drop reports).
    pub events_exported: u64,
    /// Events the exporter could not keep (for BUFFER: a full ring whose reader is behind; for
    /// TRACE: rows a failed write lost, counted at the collector flush after that write).
    pub events_lost: u64,
    /// Completed flushes (periodic, explicit and final).
    pub flushes: u64,
    /// Synthetic `agent_telemetry_events_dropped` events emitted.
    pub drop_reports: u64,
}

struct FlushState {
    exporter: Box<dyn Exporter>,
    warned_loss: bool,
    /// Whether the one INFO message about a ring nobody reads was logged.
    informed_no_reader: bool,
    /// Reused by exporters that take a flush as one batch.
    scratch: Vec<Event>,
}

struct Inner {
    agent: String,
    mask: MetricMask,
    queue: StagingQueue,
    flush: Mutex<FlushState>,
    exported: AtomicU64,
    lost: AtomicU64,
    flushes: AtomicU64,
    drop_reports: AtomicU64,
}

/// One agent's telemetry: create per agent, record events, drop to flush and stop.
///
/// In a child created by `fork`, a collector of the parent is inherited but not usable (its
/// flush thread does not exist there, and its locks may have been copied held): check
/// [`Collector::inherited`] and use it no further (the C ABI refuses every call on it with
/// `NIXL_TELEMETRY_ERR_FORKED`; [`Collector::flush`] does nothing). Dropping it is allowed and
/// releases nothing: its memory stays until the child exits (see [`crate::fork`]).
pub struct Collector {
    inner: Arc<Inner>,
    /// A copy of `inner.mask` one load away from the handle, for the hot-path gates.
    mask: MetricMask,
    /// Whether `agent_err_xfer_stalled` is recorded as itself (`NIXL_TELEMETRY_XFER_STALLED_EVENT`)
    /// or as `agent_err_unknown` ([`EventType::recorded_as`]).
    xfer_stalled_event: bool,
    /// The fork generation of the process that created the collector.
    generation: Generation,
    /// The staging queue's fast path, one load away from the handle (`inner` keeps the queue
    /// alive as long as this).
    fast_path: FastPath,
    flusher: Option<Worker>,
    exporter_name: String,
}

/// A transfer's 4 events in [`crate::event::TRANSFER_ORDER`], which the ring writer relies on to keep
/// transfers whole: XFER_POST_TIME, XFER_TIME, TX|RX_BYTES, TX|RX_REQUESTS_NUM = 1.
#[inline(always)]
fn xfer_events(xfer_time_us: u64, is_write: bool, bytes: u64, post_time_us: u64) -> [Event; 4] {
    let (bytes_type, requests_type) = if is_write {
        (EventType::AgentTxBytes, EventType::AgentTxRequestsNum)
    } else {
        (EventType::AgentRxBytes, EventType::AgentRxRequestsNum)
    };
    [
        Event::new(EventType::AgentXferPostTime, post_time_us),
        Event::new(EventType::AgentXferTime, xfer_time_us),
        Event::new(bytes_type, bytes),
        Event::new(requests_type, 1),
    ]
}

impl Collector {
    /// Creates the collector for `agent` if telemetry is requested (by `NIXL_TELEMETRY_ENABLE`,
    /// or by `capture_telemetry` when that variable is unset), configured from the environment.
    /// Returns a `NoTelemetry` error when it is not requested. An error about a setting that
    /// came from NIXL's configuration file names the file
    /// ([`config::Options::with_file_sources`]).
    pub fn from_env(agent: &str, capture_telemetry: bool) -> Result<Collector> {
        crate::logging::init();
        let created = config::telemetry_requested(
            &crate::settings::process_settings,
            capture_telemetry,
            agent,
        )
        .and_then(|requested| {
            if !requested {
                return Err(Error::new(
                    Status::NoTelemetry,
                    format!("telemetry is not requested for agent '{agent}'"),
                ));
            }
            Collector::new(agent, Config::from_env()?)
        });
        created.map_err(|e| config::Options::default().with_file_sources(e))
    }

    /// Creates the collector for `agent` unconditionally (`NIXL_TELEMETRY_ENABLE` and the
    /// agent flag are not consulted: the caller has decided), configured by `options` and, for
    /// every setting they leave unset, by the environment.
    pub fn with_options(agent: &str, options: &config::Options) -> Result<Collector> {
        crate::logging::init();
        options
            .config(&crate::settings::process_settings)
            .and_then(|config| Collector::build(agent, config))
            .map_err(|e| options.with_file_sources(e))
    }

    /// Creates the collector for `agent` with an explicit configuration. A scrape-port
    /// collision (`BindFailed`) logs one warning, as NIXL's `create()` does: the caller runs
    /// without telemetry.
    pub fn new(agent: &str, config: Config) -> Result<Collector> {
        Collector::build(agent, config).inspect_err(|e| {
            if e.status == Status::BindFailed {
                log::warn!(
                    "{}; this process will run without a telemetry sink",
                    e.message
                );
            }
        })
    }

    /// [`Collector::new`] without the warning: for the explicit constructor, whose caller
    /// receives the collision as an error (NIXL's constructor throws `nixlTelemetryBindFailed`
    /// and logs nothing).
    fn build(agent: &str, config: Config) -> Result<Collector> {
        crate::logging::init();
        if agent.is_empty() {
            return Err(Error::invalid(
                "Expected non-empty agent name in nixl telemetry create",
            ));
        }
        let exporter = config.exporter.create(agent, config.buffer_size)?;
        Collector::with_exporter(agent, config, exporter)
    }

    /// Creates the collector for `agent` around an already created exporter (`config.exporter`
    /// is ignored). Reads `NIXL_TELEMETRY_XFER_STALLED_EVENT` from the process's settings.
    pub fn with_exporter(
        agent: &str,
        config: Config,
        exporter: Box<dyn Exporter>,
    ) -> Result<Collector> {
        let xfer_stalled_event = crate::event::xfer_stalled_event(&process_settings)?;
        let exporter_name = exporter.name().to_owned();
        let generation = Generation::current();
        let queue = StagingQueue::new(config.buffer_size)?;
        let inner = Arc::new(Inner {
            agent: agent.to_owned(),
            mask: config.enabled_metrics,
            queue,
            flush: Mutex::new(FlushState {
                exporter,
                warned_loss: false,
                informed_no_reader: false,
                scratch: Vec::new(),
            }),
            exported: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            drop_reports: AtomicU64::new(0),
        });
        let interval = config.run_interval;
        let worker = inner.clone();
        let flusher = Worker::spawn(
            "nixl-telemetry-flush",
            format!("the telemetry flush of agent '{agent}'"),
            interval,
            move || {
                worker.flush_once();
                interval
            },
        )
        .map_err(|e| Error::io("cannot start the telemetry flush thread", &e))?;
        Ok(Collector {
            mask: config.enabled_metrics,
            xfer_stalled_event,
            generation,
            fast_path: inner.queue.fast_path(),
            inner,
            flusher: Some(flusher),
            exporter_name,
        })
    }

    /// Whether the collector was created before this process was forked (in a child: it is the
    /// parent's, and must not be used; see the type's documentation).
    #[inline]
    pub fn inherited(&self) -> bool {
        self.generation.inherited()
    }

    /// The agent name.
    pub fn agent(&self) -> &str {
        &self.inner.agent
    }

    /// The exporter's name (`BUFFER`, `NOP`, ...).
    pub fn exporter_name(&self) -> &str {
        &self.exporter_name
    }

    /// The enabled metrics.
    pub fn enabled_metrics(&self) -> MetricMask {
        self.inner.mask
    }

    /// Records one event (hot path: no allocation, no global lock); `agent_err_xfer_stalled` as
    /// `agent_err_unknown` unless `NIXL_TELEMETRY_XFER_STALLED_EVENT` is true.
    #[inline]
    pub fn update_data(&self, event_type: EventType, value: u64) -> Recorded {
        let event_type = event_type.recorded_as(self.xfer_stalled_event);
        if !self.mask.contains(event_type) {
            return Recorded::Deactivated;
        }
        if self.inner.queue.try_push(Event::new(event_type, value)) {
            Recorded::Accepted
        } else {
            Recorded::Dropped
        }
    }

    /// Records one error occurrence for a negative `nixl_status_t` (-1..-13, -13 as
    /// [`Collector::update_data`] records `agent_err_xfer_stalled`); other statuses are refused
    /// with `InvalidParam`.
    pub fn update_error(&self, nixl_status: i32) -> Result<Recorded> {
        match EventType::from_nixl_status(nixl_status) {
            Some(t) => Ok(self.update_data(t, 1)),
            None => Err(Error::invalid(format!(
                "nixl status {nixl_status} is not an error status (expected -1..-13)"
            ))),
        }
    }

    /// Records a completed transfer as one all-or-none, contiguous batch of the enabled subset
    /// of: XFER_POST_TIME, XFER_TIME, TX|RX_BYTES, TX|RX_REQUESTS_NUM = 1 (TX when `is_write`).
    #[inline]
    pub fn add_xfer_stats(
        &self,
        xfer_time_us: u64,
        is_write: bool,
        bytes: u64,
        post_time_us: u64,
    ) -> Recorded {
        if self.xfer_deactivated(is_write) {
            return Recorded::Deactivated;
        }
        self.stage_xfer_stats(xfer_time_us, is_write, bytes, post_time_us)
    }

    /// [`Collector::add_xfer_stats`] after its gate: the caller has checked that
    /// [`Collector::xfer_deactivated`] is false for `is_write` (the C entry point runs that
    /// gate before its panic boundary).
    #[inline]
    pub fn stage_xfer_stats(
        &self,
        xfer_time_us: u64,
        is_write: bool,
        bytes: u64,
        post_time_us: u64,
    ) -> Recorded {
        let all = xfer_events(xfer_time_us, is_write, bytes, post_time_us);
        let mask = self.mask;
        let pushed = if mask == MetricMask::ALL {
            self.inner.queue.try_push_batch(&all)
        } else {
            let mut subset = [Event::default(); 4];
            let mut n = 0;
            for e in all {
                if mask.contains_raw(e.event_type) {
                    subset[n] = e;
                    n += 1;
                }
            }
            if n == 0 {
                return Recorded::Deactivated;
            }
            self.inner.queue.try_push_batch(&subset[..n])
        };
        if pushed {
            Recorded::Accepted
        } else {
            Recorded::Dropped
        }
    }

    /// [`Collector::stage_xfer_stats`] in its common cases, for the C entry point to run
    /// before its panic boundary: every metric active, a collector of this process, and a
    /// thread lane with room, or a full queue ([`FastPath::try_push_in_place`]). `None`,
    /// having changed nothing, when [`Collector::stage_xfer_stats`] must decide. Loads,
    /// compares and stores only: it cannot panic.
    #[inline(always)]
    pub fn try_stage_xfer_stats_in_place(
        &self,
        xfer_time_us: u64,
        is_write: bool,
        bytes: u64,
        post_time_us: u64,
    ) -> Option<Recorded> {
        if self.mask != MetricMask::ALL || self.inherited() {
            return None;
        }
        let all = xfer_events(xfer_time_us, is_write, bytes, post_time_us);
        // SAFETY: `self.inner` keeps the queue alive.
        Some(match unsafe { self.fast_path.try_push_in_place(&all) }? {
            true => Recorded::Accepted,
            false => Recorded::Dropped,
        })
    }

    /// Whether every event of a transfer in this direction is deactivated (then
    /// [`Collector::add_xfer_stats`] records nothing).
    #[inline]
    pub fn xfer_deactivated(&self, is_write: bool) -> bool {
        let direction = if is_write {
            EventType::AgentTxBytes.bit() | EventType::AgentTxRequestsNum.bit()
        } else {
            EventType::AgentRxBytes.bit() | EventType::AgentRxRequestsNum.bit()
        };
        self.mask.bits() & (XFER_COMMON_BITS | direction) == 0
    }

    /// Drains the staging queue into the exporter now (nothing for an inherited collector).
    pub fn flush(&self) {
        if !self.inherited() {
            self.inner.flush_once();
        }
    }

    /// Counters since creation.
    pub fn stats(&self) -> CollectorStats {
        let counts = self.inner.queue.counts();
        CollectorStats {
            events_accepted: counts.accepted,
            events_dropped: counts.dropped,
            events_exported: self.inner.exported.load(Ordering::Relaxed),
            events_lost: self.inner.lost.load(Ordering::Relaxed),
            flushes: self.inner.flushes.load(Ordering::Relaxed),
            drop_reports: self.inner.drop_reports.load(Ordering::Relaxed),
        }
    }

    /// Stops the flush thread, performs the final flush and returns the final counters (for an
    /// inherited collector: nothing is flushed, the counters are the parent's at the fork).
    pub fn close(mut self) -> CollectorStats {
        self.shutdown();
        self.stats()
    }

    /// Stops and joins the flush thread, then flushes what is still staged and lets the
    /// exporter write what it buffered (once). An inherited collector is left as it is, and
    /// never released: its flush thread does not exist here (joining it would fail) and its
    /// exporter writes the parent's files.
    fn shutdown(&mut self) {
        if self.inherited() {
            std::mem::forget(self.flusher.take());
            std::mem::forget(self.inner.clone());
            return;
        }
        if let Some(mut flusher) = self.flusher.take() {
            flusher.stop();
            self.inner.flush_once();
            self.inner.finish_exporter();
        }
    }
}

impl Drop for Collector {
    /// Stops and joins the flush thread, then performs a final flush so nothing staged is lost.
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Inner {
    fn flush_once(&self) {
        let mut state = self.flush.lock_unpoisoned();
        let FlushState {
            exporter,
            warned_loss,
            informed_no_reader,
            scratch,
        } = &mut *state;
        let dropped = self.queue.take_dropped();
        let report = (dropped > 0 && self.mask.contains(EventType::AgentTelemetryEventsDropped))
            .then(|| Event::new(EventType::AgentTelemetryEventsDropped, dropped));
        if report.is_some() {
            self.drop_reports.fetch_add(1, Ordering::Relaxed);
        }
        let (len, outcome) = self.queue.drain(|runs| {
            let len = flush_len(runs, report);
            (len, exporter.export_flush(runs, report, scratch))
        });
        let kept = outcome.kept.min(len);
        self.exported.fetch_add(kept as u64, Ordering::Relaxed);
        self.count_late_losses(outcome.lost_since);
        let lost = (len - kept) as u64;
        if lost > 0 {
            self.lost.fetch_add(lost, Ordering::Relaxed);
            // A ring nobody reads is the normal state of telemetry left on without a reader:
            // said once at INFO. Any other loss warns once. Both stay counted in `events_lost`.
            let message = match outcome.loss {
                LossCause::NoReader(reason) => Some((informed_no_reader, log::Level::Info, reason)),
                LossCause::Refused(reason) => Some((warned_loss, log::Level::Warn, reason)),
                LossCause::AlreadyReported => None,
            };
            if let Some((said, level, reason)) = message.filter(|(said, ..)| !**said) {
                *said = true;
                log::log!(
                    level,
                    "telemetry exporter {} for agent '{}' could not keep {lost} events \
                     ({reason}); further losses are counted silently in the collector stats",
                    exporter.name(),
                    self.agent,
                );
            }
        }
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves `late` events the exporter lost after keeping them from exported to lost.
    fn count_late_losses(&self, late: u64) {
        if late > 0 {
            let before = self
                .exported
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |e| {
                    Some(e.saturating_sub(late))
                })
                .unwrap_or_else(|e| e);
            self.lost.fetch_add(late.min(before), Ordering::Relaxed);
        }
    }

    /// The exporter's last writes, then their losses (after the final flush).
    fn finish_exporter(&self) {
        let mut state = self.flush.lock_unpoisoned();
        let late = state.exporter.finish();
        self.count_late_losses(late);
    }
}

#[cfg(test)]
mod tests;
