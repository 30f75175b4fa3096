//! The series of NIXL telemetry, shared by every exporter that exposes series (the Prometheus
//! and multi-process Prometheus plug-ins, the DOCA plug-in): the series derived from the event
//! stream, their 0.0.4 text encoding and the hardened HTTP scrape server. Every exporter that
//! names series builds on this crate; the core library (`nixl-telemetry`,
//! `libnixl_telemetry.so`) does not, so it carries none of this code. Dependencies read
//! plug-ins -> this crate -> core.
//!
//! Per agent, the series are cumulative `_total` counters, last-operation gauges, the two
//! transfer-time histograms, the `agent_errors_total{status}` family and the dropped-events
//! counter, all named by the core's shared metric descriptor
//! ([`nixl_telemetry_base::METRIC_DESCRIPTORS`]).
//!
//! - [`buckets`]: histogram bounds (defaults, `NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US`).
//! - [`engine`]: one agent's series ([`AgentSeries`]), updated lock-free from event batches,
//!   read as a consistent [`AgentSnapshot`].
//! - [`labels`]: the workload labels (`NIXL_TELEMETRY_LABELS`, `NIXL_TELEMETRY_LABELS_FROM`)
//!   every exporter adds to its series ([`WorkloadLabels`]).
//! - [`registry`]: the agents exposed by one endpoint ([`Registry`]).
//! - [`native`]: native (exponential) histograms of transfer time and size, kept beside the
//!   classic ones when `NIXL_TELEMETRY_NATIVE_HISTOGRAMS` is on.
//! - [`protobuf`]: the Prometheus protobuf exposition format (`MetricFamily`, length-delimited),
//!   the only one that carries native histograms to a scraper.
//! - [`text`]: the Prometheus text exposition format 0.0.4 encoder (and its parser, for tests
//!   and tools).
//! - [`endpoint`]: the scrape endpoint (`GET /metrics`), a small `poll(2)` server hardened
//!   against slow, silent and flooding clients, shared by the agents of a process (the
//!   module says why it is not tiny_http).
//!
//! The exposition order of the families is [`families`]: the 9 per-event counters, the 6
//! gauges, the 2 histograms, then `agent_errors_total`.

pub mod buckets;
pub mod endpoint;
pub mod engine;
pub mod labels;
pub mod native;
pub mod protobuf;
pub mod registry;
pub mod text;

use std::sync::OnceLock;

use nixl_telemetry_base::event::{EventType, ERRORS_SERIES};

use engine::AgentSnapshot as Snapshot;

pub use buckets::{Buckets, DEFAULT_BUCKETS_US, ENV_HISTOGRAM_BUCKETS_US};
pub use engine::{AgentSeries, AgentSnapshot, HistogramSnapshot, HISTOGRAM_EVENTS, NATIVE_EVENTS};
pub use native::NativeHistogram;

/// The native-only histogram families of transfer sizes: name, HELP text and the event whose
/// values they observe (one bytes event per transfer request). Exposed only where native
/// histograms are (the protobuf exposition); named by NIXL's convention, base unit last.
pub const NATIVE_SIZE_FAMILIES: [(&str, &str, EventType); 2] = [
    (
        "agent_tx_request_size_bytes",
        "Bytes per TX transfer request (native histogram)",
        EventType::AgentTxBytes,
    ),
    (
        "agent_rx_request_size_bytes",
        "Bytes per RX transfer request (native histogram)",
        EventType::AgentRxBytes,
    ),
];
pub use labels::WorkloadLabels;
pub use registry::{DuplicateAgent, Registry};

/// The Prometheus type of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FamilyKind {
    /// A cumulative counter (`..._total`).
    Counter,
    /// A last-value gauge.
    Gauge,
    /// A histogram (`_bucket{le}`, `_sum`, `_count`).
    Histogram,
}

impl FamilyKind {
    /// The `# TYPE` word.
    pub const fn as_str(self) -> &'static str {
        match self {
            FamilyKind::Counter => "counter",
            FamilyKind::Gauge => "gauge",
            FamilyKind::Histogram => "histogram",
        }
    }
}

/// Where a family's samples come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FamilySource {
    /// The counter of this (non-error) event type.
    Counter(EventType),
    /// The gauge of this event type.
    Gauge(EventType),
    /// The histogram of this event type (one of [`HISTOGRAM_EVENTS`]).
    Histogram(EventType),
    /// The error events, one sample per `status` ([`error_statuses`]).
    Errors,
}

/// One metric family as exposed: name, HELP text, type and source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    /// Family name (`agent_tx_bytes_total`, ...).
    pub name: &'static str,
    /// HELP text.
    pub help: &'static str,
    /// Prometheus type.
    pub kind: FamilyKind,
    /// Where the samples come from.
    pub source: FamilySource,
}

/// Every family, in exposition order, derived from the shared descriptor: the per-event
/// counters, the gauges, the histograms (each in event order), then `agent_errors_total`.
pub fn families() -> &'static [Family] {
    static FAMILIES: OnceLock<Vec<Family>> = OnceLock::new();
    FAMILIES.get_or_init(|| {
        let mut counters = Vec::new();
        let mut gauges = Vec::new();
        let mut histograms = Vec::new();
        for t in EventType::ALL {
            let d = t.metrics();
            if !t.is_error() {
                counters.push(Family {
                    name: d.counter.name,
                    help: d.counter.help,
                    kind: FamilyKind::Counter,
                    source: FamilySource::Counter(t),
                });
            }
            if let Some(g) = d.gauge {
                gauges.push(Family {
                    name: g.name,
                    help: g.help,
                    kind: FamilyKind::Gauge,
                    source: FamilySource::Gauge(t),
                });
            }
            if let Some(h) = d.histogram {
                histograms.push(Family {
                    name: h.name,
                    help: h.help,
                    kind: FamilyKind::Histogram,
                    source: FamilySource::Histogram(t),
                });
            }
        }
        let mut all = counters;
        all.append(&mut gauges);
        all.append(&mut histograms);
        all.push(Family {
            name: ERRORS_SERIES.name,
            help: ERRORS_SERIES.help,
            kind: FamilyKind::Counter,
            source: FamilySource::Errors,
        });
        all
    })
}

/// Calls `f(suffix, extra_label, value)` for every sample of `family` in `agent`, in
/// exposition order: one sample for a counter or gauge; one per `status` of
/// [`error_statuses`] (extra label `status`) for `agent_errors_total`; for a histogram the cumulative `_bucket` samples (extra
/// label `le`, shortest form, ending with `+Inf`), then `_sum` and `_count`. Every encoder of
/// series (text format, remote-write) walks the samples through this.
pub fn for_each_sample(
    family: &Family,
    agent: &Snapshot,
    mut f: impl FnMut(&'static str, Option<(&'static str, &str)>, u64),
) {
    match family.source {
        FamilySource::Counter(t) => f("", None, agent.counters[t as usize]),
        FamilySource::Gauge(t) => f("", None, agent.gauges[t as usize]),
        FamilySource::Errors => {
            for (t, status) in error_statuses(agent) {
                f("", Some(("status", status)), agent.counters[t as usize]);
            }
        }
        FamilySource::Histogram(t) => {
            let h = agent.histogram(t).expect("histogram event");
            let bounds = h.bounds.bounds().iter().copied().chain([f64::INFINITY]);
            let mut le = text::LeFormatter::default();
            for (bound, count) in bounds.zip(h.cumulative_counts()) {
                f("_bucket", Some(("le", le.format(bound))), count);
            }
            f("_sum", None, h.sum);
            f("_count", None, h.count());
        }
    }
}

/// Calls `f(value)` for every sample of `family` in `agent`, in the order of
/// [`for_each_sample`], without its names and labels: for encoders that keep those from one
/// push to the next and only need the values (tested to agree with [`for_each_sample`]).
pub fn for_each_value(family: &Family, agent: &Snapshot, mut f: impl FnMut(u64)) {
    match family.source {
        FamilySource::Counter(t) => f(agent.counters[t as usize]),
        FamilySource::Gauge(t) => f(agent.gauges[t as usize]),
        FamilySource::Errors => {
            for (t, _) in error_statuses(agent) {
                f(agent.counters[t as usize]);
            }
        }
        FamilySource::Histogram(t) => {
            let h = agent.histogram(t).expect("histogram event");
            h.cumulative_counts().for_each(&mut f);
            f(h.sum);
            f(h.count());
        }
    }
}

/// The `status` label values of `agent`'s `agent_errors_total`, in event order: NIXL's twelve,
/// then `xfer_stalled` when the agent's source counts stalled transfers as their own event
/// ([`AgentSnapshot::xfer_stalled`]; otherwise they are in `unknown`, as NIXL's merged sources
/// would count them). Listed once, as every encoder walks them for every agent.
pub fn error_statuses(agent: &Snapshot) -> impl Iterator<Item = (EventType, &'static str)> {
    static STATUSES: OnceLock<Vec<(EventType, &'static str)>> = OnceLock::new();
    let shown = agent.xfer_stalled;
    STATUSES
        .get_or_init(|| {
            EventType::ALL
                .into_iter()
                .filter_map(|t| t.status_label().map(|s| (t, s)))
                .collect()
        })
        .iter()
        .copied()
        .filter(move |(t, _)| shown || *t != EventType::AgentErrXferStalled)
}

/// This machine's host name (the `hostname` label), `unknown` when it cannot be read.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `len` bytes into the buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(s) if !s.is_empty() => s.to_owned(),
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_each_value_gives_the_values_of_for_each_sample() {
        let s = crate::AgentSeries::new("a", "h", crate::Buckets::default());
        s.apply(&[
            nixl_telemetry_base::Event::new(EventType::AgentXferTime, 70),
            nixl_telemetry_base::Event::new(EventType::AgentTxBytes, 9),
            nixl_telemetry_base::Event::new(EventType::AgentErrBackend, 1),
        ]);
        let snapshot = s.snapshot();
        for family in families() {
            let (mut samples, mut values) = (Vec::new(), Vec::new());
            for_each_sample(family, &snapshot, |_, _, v| samples.push(v));
            for_each_value(family, &snapshot, |v| values.push(v));
            assert_eq!(values, samples, "{}", family.name);
            assert!(!values.is_empty());
        }
    }

    #[test]
    fn the_family_set_is_nixls() {
        let by_kind = |k: FamilyKind| -> Vec<&str> {
            families()
                .iter()
                .filter(|f| f.kind == k)
                .map(|f| f.name)
                .collect()
        };
        assert_eq!(
            by_kind(FamilyKind::Counter),
            [
                "agent_tx_bytes_total",
                "agent_rx_bytes_total",
                "agent_tx_requests_num_total",
                "agent_rx_requests_num_total",
                "agent_memory_registered_total",
                "agent_memory_deregistered_total",
                "agent_xfer_time_total",
                "agent_xfer_post_time_total",
                "agent_telemetry_events_dropped_total",
                "agent_errors_total",
            ]
        );
        assert_eq!(
            by_kind(FamilyKind::Gauge),
            [
                "agent_tx_last_bytes",
                "agent_rx_last_bytes",
                "agent_memory_registered_last_bytes",
                "agent_memory_deregistered_last_bytes",
                "agent_xfer_time",
                "agent_xfer_post_time",
            ]
        );
        assert_eq!(
            by_kind(FamilyKind::Histogram),
            ["agent_xfer_time_us", "agent_xfer_post_time_us"]
        );
        assert_eq!(families().len(), 18);
        assert_eq!(families().last().unwrap().source, FamilySource::Errors);
        assert!(!hostname().is_empty());
    }

    #[test]
    fn xfer_stalled_is_a_status_only_where_it_is_counted_apart() {
        let stalled = nixl_telemetry_base::Event::new(EventType::AgentErrXferStalled, 1);
        for on in [false, true] {
            let s =
                crate::AgentSeries::new("a", "h", crate::Buckets::default()).with_xfer_stalled(on);
            s.apply(&[stalled, stalled]);
            let snapshot = s.snapshot();
            let statuses: Vec<&str> = error_statuses(&snapshot).map(|(_, s)| s).collect();
            assert_eq!(statuses.len(), 12 + on as usize);
            assert_eq!(statuses[..2], ["not_posted", "invalid_param"]);
            assert_eq!(statuses.contains(&"xfer_stalled"), on);
            assert_eq!(snapshot.errors("xfer_stalled"), on.then_some(2));
            let errors = families().last().unwrap();
            let mut samples = Vec::new();
            for_each_sample(errors, &snapshot, |_, label, v| {
                samples.push((label.map(|(_, status)| status.to_owned()), v))
            });
            assert_eq!(samples.len(), statuses.len());
            let last = if on { "xfer_stalled" } else { "no_telemetry" };
            assert_eq!(
                samples.last().unwrap(),
                &(Some(last.to_owned()), on as u64 * 2)
            );
        }
    }
}
