//! One agent's series: cumulative counters, last-operation gauges, the two transfer-time
//! histograms, the error family and the dropped-events counter, updated from event batches.
//!
//! Updates are lock-free: a batch is summed locally, then published with relaxed atomic adds
//! and stores (one per touched series) between two increments of a sequence number.
//! A reader takes a snapshot without blocking the writer: the batch sequence number lets it
//! retry while a batch is being applied, so with one writer (the collector's flush thread) a
//! snapshot shows whole batches only (for example `agent_tx_requests_num_total` always agrees
//! with `agent_xfer_time_us_count` for transfers recorded by `add_xfer_stats`). Writers apply
//! their batches one at a time under an uncontended lock; a reader that keeps meeting a batch in
//! progress (a writer descheduled mid-batch, or batches back to back) takes that lock for the
//! length of its copy, so a snapshot always shows whole batches.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::buckets::Buckets;
use crate::labels::WorkloadLabels;
use crate::native::NativeHistogram;
use nixl_telemetry_base::event::{Event, EventType, EVENT_TYPE_COUNT};
use nixl_telemetry_base::sync::LockUnpoisoned;

/// The events feeding a histogram, in exposition order (`agent_xfer_time_us`,
/// `agent_xfer_post_time_us`).
pub const HISTOGRAM_EVENTS: [EventType; 2] =
    [EventType::AgentXferTime, EventType::AgentXferPostTime];

/// Histograms with at most this many buckets (including `+Inf`) are counted on the stack while
/// a batch is accumulated; larger ones are updated per event.
const LOCAL_BUCKETS: usize = 32;

/// Batches up to this size are applied event by event; larger ones are accumulated first.
const SMALL_BATCH: usize = 8;

/// How many times a snapshot retries without the writers' lock while batches are being
/// applied before it takes the lock.
const SNAPSHOT_ATTEMPTS: usize = 100;

/// The events feeding the native histograms (when on), in exposition order: the two transfer
/// times (beside their classic buckets, in the same families) and the bytes of each transfer
/// request, TX then RX (`add_xfer_stats` records one bytes event per request; families
/// [`crate::NATIVE_SIZE_FAMILIES`]).
pub const NATIVE_EVENTS: [EventType; 4] = [
    EventType::AgentXferTime,
    EventType::AgentXferPostTime,
    EventType::AgentTxBytes,
    EventType::AgentRxBytes,
];

fn histogram_slot(t: EventType) -> Option<usize> {
    HISTOGRAM_EVENTS.iter().position(|&h| h == t)
}

fn native_slot(t: EventType) -> Option<usize> {
    NATIVE_EVENTS.iter().position(|&h| h == t)
}

struct Histogram {
    /// Per-bucket (not cumulative) observation counts; the last one is `+Inf`.
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Histogram {
    fn new(len: usize) -> Histogram {
        Histogram {
            buckets: (0..len).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }
}

/// One agent's live series. Share it (`Arc`) between the exporter that applies events and the
/// registry that snapshots it for scrapes.
pub struct AgentSeries {
    agent_name: Arc<str>,
    hostname: Arc<str>,
    labels: WorkloadLabels,
    buckets: Buckets,
    /// Whether `status="xfer_stalled"` is exposed ([`AgentSnapshot::xfer_stalled`]).
    xfer_stalled: bool,
    /// Cumulative sums by event type (errors: their own slot, exposed under `status`).
    counters: [AtomicU64; EVENT_TYPE_COUNT],
    /// Last values by event type (exposed only where the descriptor has a gauge).
    gauges: [AtomicU64; EVENT_TYPE_COUNT],
    histograms: [Histogram; 2],
    /// The native histograms of [`NATIVE_EVENTS`], when on. Only the writer and a snapshot
    /// take their locks, each for the length of a batch or a copy.
    native: Option<Box<[Mutex<NativeHistogram>; 4]>>,
    /// Odd while a batch is being applied.
    sequence: AtomicU64,
    /// Held by a writer for each batch it publishes (one writer at a time), and by a snapshot
    /// that could not find a quiet moment in [`SNAPSHOT_ATTEMPTS`] tries.
    publishing: Mutex<()>,
}

impl std::fmt::Debug for AgentSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSeries")
            .field("agent_name", &self.agent_name)
            .field("hostname", &self.hostname)
            .field("buckets", &self.buckets)
            .finish_non_exhaustive()
    }
}

impl AgentSeries {
    /// Every series of `agent_name` at 0, labelled with `hostname`, histograms over `buckets`.
    pub fn new(agent_name: &str, hostname: &str, buckets: Buckets) -> AgentSeries {
        let len = buckets.len_with_inf();
        AgentSeries {
            agent_name: Arc::from(agent_name),
            hostname: Arc::from(hostname),
            labels: WorkloadLabels::none(),
            xfer_stalled: false,
            counters: std::array::from_fn(|_| AtomicU64::new(0)),
            gauges: std::array::from_fn(|_| AtomicU64::new(0)),
            histograms: [Histogram::new(len), Histogram::new(len)],
            buckets,
            native: None,
            sequence: AtomicU64::new(0),
            publishing: Mutex::new(()),
        }
    }

    /// The same series with native histograms (of [`NATIVE_EVENTS`]) kept beside the others
    /// when `on`, each starting at `schema` and holding at most `max_buckets` buckets (see
    /// [`crate::native`]).
    pub fn with_native_histograms(mut self, on: bool, schema: i8, max_buckets: usize) -> Self {
        self.native = on.then(|| {
            Box::new(std::array::from_fn(|_| {
                Mutex::new(NativeHistogram::new(schema, max_buckets))
            }))
        });
        self
    }

    /// Whether native histograms are kept.
    pub fn has_native_histograms(&self) -> bool {
        self.native.is_some()
    }

    /// Observes the native histograms of `events` (inside a batch's sequence window).
    fn observe_native(&self, events: &[Event]) {
        let Some(native) = &self.native else {
            return;
        };
        let mut guards: [_; 4] = std::array::from_fn(|i| native[i].lock_unpoisoned());
        for e in events {
            if let Some(slot) = e.kind().and_then(native_slot) {
                guards[slot].observe(e.value);
            }
        }
    }

    /// The same series with workload labels added to every sample (after `agent_name` and
    /// `hostname`).
    pub fn with_labels(mut self, labels: WorkloadLabels) -> AgentSeries {
        self.labels = labels;
        self
    }

    /// The same series exposing `agent_errors_total{status="xfer_stalled"}` when `on`: for a
    /// process that records stalled transfers as their own event
    /// (`NIXL_TELEMETRY_XFER_STALLED_EVENT`, [`nixl_telemetry_base::event::xfer_stalled_event`]).
    pub fn with_xfer_stalled(mut self, on: bool) -> AgentSeries {
        self.xfer_stalled = on;
        self
    }

    /// The `agent_name` label.
    pub fn agent_name(&self) -> &str {
        &self.agent_name
    }

    /// The workload labels.
    pub fn labels(&self) -> &WorkloadLabels {
        &self.labels
    }

    /// The `hostname` label.
    pub fn hostname(&self) -> &str {
        &self.hostname
    }

    /// The histogram bucket bounds.
    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// Applies a batch in order: every event adds its value to its counter, sets its gauge and
    /// (transfer times) observes its histogram; an error event adds to its `status` series and
    /// a dropped-events report to the dropped counter. Events of unknown types are skipped.
    /// Returns how many events were applied.
    pub fn apply(&self, events: &[Event]) -> usize {
        if events.len() <= SMALL_BATCH {
            return self.apply_each(events);
        }
        // Accumulate the batch locally, then publish it with one atomic operation per touched
        // series (a flush of thousands of events costs a few dozen atomics).
        let local_buckets = self.buckets.len_with_inf() <= LOCAL_BUCKETS;
        let mut sums = [0u64; EVENT_TYPE_COUNT];
        let mut last = [0u64; EVENT_TYPE_COUNT];
        let mut touched = 0u32;
        let mut hist_counts = [[0u64; LOCAL_BUCKETS]; 2];
        let mut hist_sums = [0u64; 2];
        let mut applied = 0;
        for e in events {
            let Some(t) = e.kind() else {
                continue;
            };
            applied += 1;
            let i = t as usize;
            sums[i] = sums[i].wrapping_add(e.value);
            last[i] = e.value;
            touched |= 1 << i;
            if let Some(h) = histogram_slot(t) {
                hist_sums[h] = hist_sums[h].wrapping_add(e.value);
                if local_buckets {
                    hist_counts[h][self.buckets.index_of(e.value)] += 1;
                }
            }
        }
        if touched == 0 {
            return 0;
        }
        let _publishing = self.publishing.lock_unpoisoned();
        self.sequence.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        let mut bits = touched;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            self.counters[i].fetch_add(sums[i], Ordering::Relaxed);
            self.gauges[i].store(last[i], Ordering::Relaxed);
        }
        for (h, t) in HISTOGRAM_EVENTS.iter().enumerate() {
            if touched & t.bit() == 0 {
                continue;
            }
            let hist = &self.histograms[h];
            if local_buckets {
                for (b, &n) in hist.buckets.iter().zip(&hist_counts[h]) {
                    if n > 0 {
                        b.fetch_add(n, Ordering::Relaxed);
                    }
                }
            } else {
                for e in events.iter().filter(|e| e.event_type == *t as u32) {
                    hist.buckets[self.buckets.index_of(e.value)].fetch_add(1, Ordering::Relaxed);
                }
            }
            hist.sum.fetch_add(hist_sums[h], Ordering::Relaxed);
        }
        self.observe_native(events);
        self.sequence.fetch_add(1, Ordering::Release);
        applied
    }

    /// Applies a small batch event by event (no accumulator to clear).
    fn apply_each(&self, events: &[Event]) -> usize {
        let _publishing = self.publishing.lock_unpoisoned();
        self.sequence.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        let mut applied = 0;
        for e in events {
            let Some(t) = e.kind() else {
                continue;
            };
            applied += 1;
            let i = t as usize;
            self.counters[i].fetch_add(e.value, Ordering::Relaxed);
            self.gauges[i].store(e.value, Ordering::Relaxed);
            if let Some(h) = histogram_slot(t) {
                let hist = &self.histograms[h];
                hist.buckets[self.buckets.index_of(e.value)].fetch_add(1, Ordering::Relaxed);
                hist.sum.fetch_add(e.value, Ordering::Relaxed);
            }
        }
        self.observe_native(events);
        self.sequence.fetch_add(1, Ordering::Release);
        applied
    }

    /// Applies a single event (see [`apply`](Self::apply)); false for an unknown type.
    pub fn observe(&self, event: Event) -> bool {
        self.apply(std::slice::from_ref(&event)) == 1
    }

    /// A snapshot of every series (see the module documentation for its consistency).
    pub fn snapshot(&self) -> AgentSnapshot {
        let mut snap = AgentSnapshot {
            agent_name: self.agent_name.clone(),
            hostname: self.hostname.clone(),
            labels: self.labels.clone(),
            xfer_stalled: self.xfer_stalled,
            counters: [0; EVENT_TYPE_COUNT],
            gauges: [0; EVENT_TYPE_COUNT],
            histograms: std::array::from_fn(|_| HistogramSnapshot {
                bounds: self.buckets.clone(),
                buckets: vec![0; self.buckets.len_with_inf()],
                sum: 0,
            }),
            native: None,
        };
        for _ in 0..SNAPSHOT_ATTEMPTS {
            let before = self.sequence.load(Ordering::Acquire);
            if before & 1 == 1 {
                std::thread::yield_now();
                continue;
            }
            self.read_into(&mut snap);
            fence(Ordering::Acquire);
            if self.sequence.load(Ordering::Relaxed) == before {
                return snap;
            }
        }
        let _publishing = self.publishing.lock_unpoisoned();
        self.read_into(&mut snap);
        snap
    }

    fn read_into(&self, snap: &mut AgentSnapshot) {
        for (out, c) in snap.counters.iter_mut().zip(&self.counters) {
            *out = c.load(Ordering::Relaxed);
        }
        for (out, g) in snap.gauges.iter_mut().zip(&self.gauges) {
            *out = g.load(Ordering::Relaxed);
        }
        for (out, h) in snap.histograms.iter_mut().zip(&self.histograms) {
            for (o, b) in out.buckets.iter_mut().zip(h.buckets.iter()) {
                *o = b.load(Ordering::Relaxed);
            }
            out.sum = h.sum.load(Ordering::Relaxed);
        }
        snap.native = self
            .native
            .as_ref()
            .map(|n| Box::new(std::array::from_fn(|i| n[i].lock_unpoisoned().clone())));
    }
}

/// A histogram's values at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    /// The finite upper bounds.
    pub bounds: Buckets,
    /// Per-bucket (not cumulative) counts, `bounds.len() + 1` of them (the last is `+Inf`).
    pub buckets: Vec<u64>,
    /// Sum of the observed values (microseconds).
    pub sum: u64,
}

impl HistogramSnapshot {
    /// Number of observations (the `+Inf` cumulative count).
    pub fn count(&self) -> u64 {
        self.buckets.iter().fold(0u64, |a, b| a.wrapping_add(*b))
    }

    /// Cumulative counts per bound, ending with the `+Inf` count, as `_bucket{le}` shows them.
    pub fn cumulative(&self) -> Vec<u64> {
        self.cumulative_counts().collect()
    }

    /// [`Self::cumulative`] without collecting them (the encoders' path: no allocation).
    pub fn cumulative_counts(&self) -> impl Iterator<Item = u64> + '_ {
        self.buckets.iter().scan(0u64, |total, b| {
            *total = total.wrapping_add(*b);
            Some(*total)
        })
    }

    /// The cumulative count of the bucket with upper bound `le` (`f64::INFINITY` for `+Inf`).
    pub fn cumulative_at(&self, le: f64) -> Option<u64> {
        let i = if le == f64::INFINITY {
            self.bounds.bounds().len()
        } else {
            self.bounds.bounds().iter().position(|&b| b == le)?
        };
        Some(self.cumulative()[i])
    }
}

/// One agent's series at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSnapshot {
    /// The `agent_name` label.
    pub agent_name: Arc<str>,
    /// The `hostname` label.
    pub hostname: Arc<str>,
    /// The workload labels (none unless configured).
    pub labels: WorkloadLabels,
    /// Whether the source counts stalled transfers as their own event, so that
    /// `agent_errors_total{status="xfer_stalled"}` is exposed ([`crate::error_statuses`]): a
    /// live series of a process that records them so (`NIXL_TELEMETRY_XFER_STALLED_EVENT`);
    /// never a NIXL store, which has no slot for them.
    pub xfer_stalled: bool,
    /// Cumulative sums by event type.
    pub counters: [u64; EVENT_TYPE_COUNT],
    /// Last values by event type.
    pub gauges: [u64; EVENT_TYPE_COUNT],
    /// The histograms of [`HISTOGRAM_EVENTS`], in that order.
    pub histograms: [HistogramSnapshot; 2],
    /// The native histograms of [`NATIVE_EVENTS`], in that order, when on.
    pub native: Option<Box<[NativeHistogram; 4]>>,
}

impl AgentSnapshot {
    /// The counter fed by `t` (for an error event: its `agent_errors_total{status}` value).
    pub fn counter(&self, t: EventType) -> u64 {
        self.counters[t as usize]
    }

    /// The last-operation gauge fed by `t`, if the descriptor defines one.
    pub fn gauge(&self, t: EventType) -> Option<u64> {
        t.metrics().gauge.map(|_| self.gauges[t as usize])
    }

    /// The histogram fed by `t`, if any.
    pub fn histogram(&self, t: EventType) -> Option<&HistogramSnapshot> {
        histogram_slot(t).map(|i| &self.histograms[i])
    }

    /// The native histogram fed by `t`, if native histograms are on and `t` feeds one.
    pub fn native_histogram(&self, t: EventType) -> Option<&NativeHistogram> {
        Some(&self.native.as_ref()?[native_slot(t)?])
    }

    /// `agent_errors_total{status=<status>}`, if exposed.
    pub fn errors(&self, status: &str) -> Option<u64> {
        crate::error_statuses(self)
            .find(|(_, s)| *s == status)
            .map(|(t, _)| self.counter(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventType::*;

    fn series() -> AgentSeries {
        AgentSeries::new("agent", "host", Buckets::default())
    }

    fn apply(s: &AgentSeries, t: EventType, values: &[u64]) {
        let batch: Vec<Event> = values.iter().map(|&v| Event::new(t, v)).collect();
        assert_eq!(s.apply(&batch), values.len());
    }

    #[test]
    fn everything_starts_at_zero() {
        let snap = series().snapshot();
        assert!(snap.counters.iter().all(|&c| c == 0));
        assert!(snap.gauges.iter().all(|&g| g == 0));
        for h in &snap.histograms {
            assert_eq!((h.count(), h.sum, h.buckets.len()), (0, 0, 19));
        }
        assert_eq!(&*snap.agent_name, "agent");
        assert_eq!(&*snap.hostname, "host");
    }

    #[test]
    fn histogram_of_5_30_200_700() {
        let s = series();
        apply(&s, AgentXferTime, &[5, 30, 200, 700]);
        let snap = s.snapshot();
        let h = snap.histogram(AgentXferTime).unwrap();
        assert_eq!((h.count(), h.sum), (4, 935));
        let at = |le| h.cumulative_at(le).unwrap();
        assert_eq!((at(10.0), at(100.0), at(250.0), at(1000.0)), (1, 2, 3, 4));
        assert_eq!(
            (at(25.0), at(50.0), at(500.0), at(f64::INFINITY)),
            (1, 2, 3, 4)
        );
        assert_eq!(h.cumulative_at(11.0), None);
        // The other histogram is untouched; the counter and gauge see the same values.
        assert_eq!(snap.histogram(AgentXferPostTime).unwrap().count(), 0);
        assert_eq!(snap.counter(AgentXferTime), 935);
        assert_eq!(snap.gauge(AgentXferTime), Some(700));
        assert_eq!(snap.histogram(AgentTxBytes), None);
    }

    #[test]
    fn counters_sum_and_gauges_keep_the_last_value() {
        let s = series();
        apply(&s, AgentTxBytes, &[1000, 2000, 3500]);
        apply(&s, AgentRxBytes, &[500, 1500]);
        apply(&s, AgentTxRequestsNum, &[1; 5]);
        let snap = s.snapshot();
        assert_eq!(snap.counter(AgentTxBytes), 6500);
        assert_eq!(snap.gauge(AgentTxBytes), Some(3500));
        assert_eq!(snap.counter(AgentRxBytes), 2000);
        assert_eq!(snap.gauge(AgentRxBytes), Some(1500));
        assert_eq!(snap.counter(AgentTxRequestsNum), 5);
        assert_eq!(snap.gauge(AgentTxRequestsNum), None);
        apply(&s, AgentTxBytes, &[1000; 5]);
        assert_eq!(s.snapshot().counter(AgentTxBytes), 11500);
    }

    #[test]
    fn errors_by_status_and_dropped_deltas() {
        let s = series();
        apply(&s, AgentErrBackend, &[1, 1]);
        apply(&s, AgentErrNotFound, &[1]);
        apply(&s, AgentTelemetryEventsDropped, &[7]);
        apply(&s, AgentTelemetryEventsDropped, &[5]);
        let snap = s.snapshot();
        assert_eq!(snap.errors("backend"), Some(2));
        assert_eq!(snap.errors("not_found"), Some(1));
        assert_eq!(snap.errors("canceled"), Some(0));
        assert_eq!(snap.errors("bogus"), None);
        assert_eq!(snap.counter(AgentTelemetryEventsDropped), 12);
    }

    #[test]
    fn unknown_event_types_are_skipped() {
        let s = series();
        let batch = [
            Event {
                event_type: 99,
                value: 5,
            },
            Event::new(AgentTxBytes, 3),
        ];
        assert_eq!(s.apply(&batch), 1);
        assert!(!s.observe(Event {
            event_type: 22,
            value: 1
        }));
        assert!(s.observe(Event::new(AgentTxBytes, 4)));
        assert_eq!(s.snapshot().counter(AgentTxBytes), 7);
    }

    #[test]
    fn custom_buckets_and_the_inf_bucket() {
        let s = AgentSeries::new("a", "h", Buckets::parse("100,200,300").unwrap());
        apply(&s, AgentXferPostTime, &[100, 150, 300, 301, 5_000_000]);
        let snap = s.snapshot();
        let h = snap.histogram(AgentXferPostTime).unwrap();
        assert_eq!(h.cumulative(), [1, 2, 3, 5]);
        assert_eq!(h.sum, 100 + 150 + 300 + 301 + 5_000_000);
    }

    #[test]
    fn large_and_small_batches_give_the_same_series() {
        let events: Vec<Event> = (0..500u64)
            .map(|i| Event {
                event_type: (i * 7 % 23) as u32, // includes the unknown type 22
                value: i * 13 % 3000,
            })
            .collect();
        let whole = series();
        let pieces = series();
        assert_eq!(
            whole.apply(&events),
            events.len() - events.iter().filter(|e| e.event_type == 22).count()
        );
        for chunk in events.chunks(3) {
            pieces.apply(chunk);
        }
        assert_eq!(whole.snapshot(), pieces.snapshot());
    }

    #[test]
    fn many_buckets_count_the_same_as_few() {
        // 100 bounds exceed the stack accumulator: buckets are updated per event.
        let bounds: Vec<f64> = (1..=100).map(|b| (b * 10) as f64).collect();
        let s = AgentSeries::new("a", "h", Buckets::new(&bounds).unwrap());
        let values: Vec<u64> = (0..2000).map(|v| (v * 7) % 1200).collect();
        apply(&s, AgentXferTime, &values);
        apply(&s, AgentXferTime, &[5, 30]);
        let snap = s.snapshot();
        let h = snap.histogram(AgentXferTime).unwrap();
        assert_eq!(h.count(), 2002);
        assert_eq!(h.sum, values.iter().sum::<u64>() + 35);
        for (i, &b) in bounds.iter().enumerate() {
            let expected = values
                .iter()
                .chain(&[5, 30])
                .filter(|&&v| v as f64 <= b)
                .count();
            assert_eq!(h.cumulative()[i], expected as u64, "le={b}");
        }
        assert_eq!(snap.gauge(AgentXferTime), Some(30));
    }

    #[test]
    fn native_histograms_are_off_unless_asked_for() {
        let s = series();
        apply(&s, AgentXferTime, &[5, 30]);
        assert!(!s.has_native_histograms());
        assert_eq!(s.snapshot().native, None);
        assert_eq!(s.snapshot().native_histogram(AgentXferTime), None);
    }

    #[test]
    fn native_histograms_see_transfer_times_and_request_sizes() {
        let s = series().with_native_histograms(true, 3, 160);
        // add_xfer_stats batches: post time, time, bytes, requests = 1.
        let mut batch = Vec::new();
        for (i, bytes) in [4096u64, 65536, 1 << 20].iter().enumerate() {
            batch.push(Event::new(AgentXferPostTime, 10 + i as u64));
            batch.push(Event::new(AgentXferTime, 100 * (i as u64 + 1)));
            batch.push(Event::new(AgentTxBytes, *bytes));
            batch.push(Event::new(AgentTxRequestsNum, 1));
        }
        batch.push(Event::new(AgentRxBytes, 0));
        // One large batch and the same events in small ones give the same histograms.
        let pieces = series().with_native_histograms(true, 3, 160);
        assert_eq!(s.apply(&batch), batch.len());
        for chunk in batch.chunks(3) {
            pieces.apply(chunk);
        }
        let snap = s.snapshot();
        assert_eq!(snap, pieces.snapshot());
        let time = snap.native_histogram(AgentXferTime).unwrap();
        assert_eq!((time.count(), time.sum(), time.schema()), (3, 600, 3));
        assert_eq!(
            time.buckets().map(|(i, _)| i).collect::<Vec<_>>(),
            [54, 62, 66] // 100 in (2^(53/8), 2^(54/8)], 200 and 300 likewise
        );
        let tx = snap.native_histogram(AgentTxBytes).unwrap();
        assert_eq!(
            tx.buckets().collect::<Vec<_>>(),
            [(96, 1), (128, 1), (160, 1)] // 2^12, 2^16, 2^20 are upper bounds
        );
        let rx = snap.native_histogram(AgentRxBytes).unwrap();
        assert_eq!((rx.count(), rx.zero_count()), (1, 1));
        assert_eq!(snap.native_histogram(AgentXferPostTime).unwrap().count(), 3);
        assert_eq!(snap.native_histogram(AgentTxRequestsNum), None);
        // The classic histogram is unchanged by the native one.
        assert_eq!(snap.histogram(AgentXferTime).unwrap().count(), 3);
    }

    #[test]
    fn a_snapshot_waits_for_a_writer_stalled_mid_batch() {
        // A writer descheduled half-way through a batch: the sequence is odd and only some of
        // the batch's series are updated. A snapshot must not settle for that half batch.
        let s = Arc::new(series());
        let stalled = s.publishing.lock_unpoisoned();
        s.sequence.fetch_add(1, Ordering::Relaxed);
        s.counters[AgentTxRequestsNum as usize].fetch_add(1, Ordering::Relaxed);
        let reader = {
            let s = s.clone();
            std::thread::spawn(move || s.snapshot())
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        s.histograms[0].buckets[0].fetch_add(1, Ordering::Relaxed);
        s.sequence.fetch_add(1, Ordering::Release);
        drop(stalled);
        let snap = reader.join().unwrap();
        assert_eq!(snap.counter(AgentTxRequestsNum), 1);
        assert_eq!(snap.histogram(AgentXferTime).unwrap().count(), 1);
    }

    #[test]
    fn snapshots_see_whole_batches_while_a_writer_runs() {
        let s = Arc::new(series());
        let writer = {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..2_000u64 {
                    // A flush thread applies a batch now and then, not back to back.
                    std::thread::sleep(std::time::Duration::from_micros(20));
                    s.apply(&[
                        Event::new(AgentXferPostTime, i % 50),
                        Event::new(AgentXferTime, i % 700),
                        Event::new(AgentTxBytes, 10),
                        Event::new(AgentTxRequestsNum, 1),
                    ]);
                }
            })
        };
        let mut seen = 0;
        while !writer.is_finished() || seen == 0 {
            let snap = s.snapshot();
            let n = snap.counter(AgentTxRequestsNum);
            assert_eq!(snap.histogram(AgentXferTime).unwrap().count(), n);
            assert_eq!(snap.histogram(AgentXferPostTime).unwrap().count(), n);
            assert_eq!(snap.counter(AgentTxBytes), 10 * n);
            seen += 1;
        }
        writer.join().unwrap();
        assert_eq!(s.snapshot().counter(AgentTxRequestsNum), 2_000);
    }
}
