//! The rate arithmetic of `top`: per-second rates of one interval from a ring's events or from
//! the deltas between two scrapes (a reset counter counts from zero), and percentiles.
//!
//! Percentiles of transfer time and request size come from native histograms (schema 3, the
//! exporters' [`NativeHistogram`]): a ring's events of the interval are observed into fresh
//! ones; a scrape's cumulative ones (protobuf exposition) are subtracted
//! ([`NativeHistogram::since`]). The estimate is PromQL's `histogram_quantile` over them
//! ([`NativeHistogram::histogram_quantile`]), so `top` and a Prometheus dashboard agree; it is
//! within one bucket's width (9.05% at schema 3) of the exact value. A node total merges the
//! ranks' histograms (at the coarser schema) before estimating, never averages percentiles.
//! Without native histograms (a text scrape), a percentile is the classic bucket holding the
//! percentile's rank (the bucket `histogram_quantile` interpolates in): a value interpolated
//! inside a wide classic bucket could lie far above every observed value. Post times are read
//! the same way.

use nixl_telemetry_base::event::EVENT_TYPE_COUNT;
use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_series::native::NativeHistogram;

use crate::scrape::Totals;
use crate::stats::Summary;

/// A distribution over one interval: a native histogram, or a classic histogram's bucket
/// deltas.
#[derive(Clone, Debug, Default)]
pub enum Dist {
    /// Nothing observed.
    #[default]
    Empty,
    /// Cumulative bucket counts by upper bound, ending with `+Inf` (scrapes).
    Buckets(Vec<(f64, f64)>),
    /// A native histogram (rings, and scrapes of exporters keeping them).
    Native(NativeHistogram),
    /// Merged from incompatible sources (buckets and native histograms, or other bounds).
    Mixed,
}

impl Dist {
    /// Merges `other` into this distribution.
    fn merge(&mut self, other: &Dist) {
        *self = match (std::mem::take(self), other) {
            (d, Dist::Empty) => d,
            (Dist::Empty, o) => o.clone(),
            (Dist::Native(mut a), Dist::Native(b)) => {
                a.merge(b);
                Dist::Native(a)
            }
            (Dist::Buckets(mut a), Dist::Buckets(b))
                if a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0 == y.0) =>
            {
                for (x, y) in a.iter_mut().zip(b) {
                    x.1 += y.1;
                }
                Dist::Buckets(a)
            }
            _ => Dist::Mixed,
        };
    }

    /// The `q` quantile, in the values' unit.
    pub fn quantile(&self, q: f64) -> Option<Quantile> {
        match self {
            Dist::Empty | Dist::Mixed => None,
            Dist::Buckets(b) => bucket_quantile(b, q),
            Dist::Native(h) => h.histogram_quantile(q).map(Quantile::Interpolated),
        }
    }
}

/// A percentile as far as the data tells it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Quantile {
    /// PromQL's `histogram_quantile` over a native histogram: interpolated inside the bucket
    /// holding the percentile's rank.
    Interpolated(f64),
    /// In the histogram bucket ending at this bound: at most it, above the bucket below.
    AtMost(f64),
    /// In the overflow bucket: above the largest finite bound.
    Above(f64),
}

/// The bucket holding the `q` quantile's rank among cumulative `(upper bound, count)` buckets,
/// chosen as Prometheus' `histogram_quantile` chooses the bucket it interpolates in.
fn bucket_quantile(buckets: &[(f64, f64)], q: f64) -> Option<Quantile> {
    let total = buckets.last().map(|b| b.1)?;
    if total <= 0.0 || !buckets.last()?.0.is_infinite() {
        return None;
    }
    let rank = q * total;
    let (mut low, mut below) = (0.0, 0.0);
    for &(bound, count) in buckets {
        if count >= rank && count > below {
            if bound.is_infinite() {
                return Some(Quantile::Above(low));
            }
            return Some(Quantile::AtMost(bound));
        }
        (low, below) = (bound, count);
    }
    Some(Quantile::Above(low))
}

/// The native histograms of a ring's events, as an exporter keeping them would fill them:
/// transfer and post times (µs), and the sizes of TX and RX transfer requests together
/// (bytes, one bytes event per request).
#[derive(Clone, Debug, Default)]
pub struct Histograms {
    xfer: NativeHistogram,
    post: NativeHistogram,
    size: NativeHistogram,
}

/// A ring's events over some time: their summary and native histograms.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Counts and sums.
    pub summary: Summary,
    /// Transfer and post times, request sizes.
    histograms: Histograms,
}

impl Observed {
    /// Adds one event.
    pub fn add(&mut self, e: &Event) {
        self.summary.add(e);
        match e.kind() {
            Some(EventType::AgentXferTime) => self.histograms.xfer.observe(e.value),
            Some(EventType::AgentXferPostTime) => self.histograms.post.observe(e.value),
            Some(EventType::AgentTxBytes | EventType::AgentRxBytes) => {
                self.histograms.size.observe(e.value)
            }
            _ => {}
        }
    }

    /// Adds everything of `other`.
    pub fn merge(&mut self, other: &Observed) {
        self.summary.merge(&other.summary);
        self.histograms.xfer.merge(&other.histograms.xfer);
        self.histograms.post.merge(&other.histograms.post);
        self.histograms.size.merge(&other.histograms.size);
    }

    /// Number of events.
    pub fn total(&self) -> u64 {
        self.summary.total()
    }
}

/// A native histogram as a distribution (`Empty` when it saw nothing).
fn native(h: NativeHistogram) -> Dist {
    if h.count() == 0 {
        Dist::Empty
    } else {
        Dist::Native(h)
    }
}

/// What one agent did per second over the last interval.
#[derive(Clone, Debug)]
pub struct Rates {
    /// Per event type: the sum of values per second (bytes, requests, errors, drops).
    pub per_s: [f64; EVENT_TYPE_COUNT],
    /// Transfer times (µs).
    pub xfer: Dist,
    /// Transfer request sizes, TX and RX together (bytes).
    pub size: Dist,
    /// Post times (µs).
    pub post: Dist,
}

impl Rates {
    /// The rates of the events `seen`, read over `seconds`.
    pub fn from_events(seen: &Observed, seconds: f64) -> Rates {
        let summary = &seen.summary;
        let mut per_s = [0.0; EVENT_TYPE_COUNT];
        for t in EventType::ALL {
            per_s[t as usize] = summary.sum_of(t) as f64 / seconds;
        }
        Rates {
            per_s,
            xfer: native(seen.histograms.xfer.clone()),
            size: native(seen.histograms.size.clone()),
            post: native(seen.histograms.post.clone()),
        }
    }

    /// The rates between two scrapes `seconds` apart (a counter that went down was reset: its
    /// new value is its increase).
    pub(super) fn from_scrapes(before: Option<&Totals>, now: &Totals, seconds: f64) -> Rates {
        let increase = |old: f64, new: f64| if new >= old { new - old } else { new };
        let mut per_s = [0.0; EVENT_TYPE_COUNT];
        for (i, rate) in per_s.iter_mut().enumerate() {
            let old = before.map_or(0.0, |b| b.counters[i]);
            *rate = increase(old, now.counters[i]) / seconds;
        }
        let buckets = |old: Option<&Vec<(f64, f64)>>, new: &Vec<(f64, f64)>| {
            if new.is_empty() {
                return Dist::Empty;
            }
            let delta: Vec<(f64, f64)> = new
                .iter()
                .enumerate()
                .map(|(i, &(le, n))| {
                    let o = old
                        .and_then(|o| o.get(i))
                        .filter(|o| o.0 == le)
                        .map_or(0.0, |o| o.1);
                    (le, increase(o, n))
                })
                .collect();
            Dist::Buckets(delta)
        };
        // A native histogram's increase (all of it without an earlier one).
        let increase_of = |old: Option<&NativeHistogram>, new: &NativeHistogram| match old {
            Some(old) => new.since(old),
            None => new.clone(),
        };
        // The native histogram when the scrape has one, else the classic buckets.
        let time = |native_of: fn(&Totals) -> &Option<NativeHistogram>,
                    classic: fn(&Totals) -> &Vec<(f64, f64)>| {
            match native_of(now) {
                Some(n) => native(increase_of(before.and_then(|b| native_of(b).as_ref()), n)),
                None => buckets(before.map(classic), classic(now)),
            }
        };
        let xfer = time(|t| &t.xfer_native, |t| &t.xfer_buckets);
        let post = time(|t| &t.post_native, |t| &t.post_buckets);
        let mut size = Dist::Empty;
        for (i, n) in now.size_native.iter().enumerate() {
            if let Some(n) = n {
                let old = before.and_then(|b| b.size_native[i].as_ref());
                size.merge(&native(increase_of(old, n)));
            }
        }
        Rates {
            per_s,
            xfer,
            size,
            post,
        }
    }

    /// Adds `other`'s rates and distributions to these.
    pub(super) fn add(&mut self, other: &Rates) {
        for (a, b) in self.per_s.iter_mut().zip(other.per_s) {
            *a += b;
        }
        self.xfer.merge(&other.xfer);
        self.size.merge(&other.size);
        self.post.merge(&other.post);
    }

    /// Whether nothing happened: no value of any event and no time observed.
    pub(super) fn is_idle(&self) -> bool {
        self.per_s.iter().all(|v| *v == 0.0)
            && self.xfer.quantile(0.5).is_none()
            && self.size.quantile(0.5).is_none()
            && self.post.quantile(0.5).is_none()
    }

    /// Errors per second, all statuses together.
    pub(super) fn errors(&self) -> f64 {
        EventType::ALL
            .iter()
            .filter(|t| t.is_error())
            .map(|t| self.per_s[*t as usize])
            .sum()
    }
}

/// Two scrapes of one series, for tests: 2000 more TX bytes, 4 backend errors and 4 more
/// transfers (all in the `+Inf` bucket) in the second.
#[cfg(test)]
pub(super) fn two_scrapes() -> (Totals, Totals) {
    let mut a = Totals::default();
    a.counters[EventType::AgentTxBytes as usize] = 1000.0;
    a.xfer_buckets = vec![(10.0, 1.0), (f64::INFINITY, 1.0)];
    let mut b = a.clone();
    b.counters[EventType::AgentTxBytes as usize] = 3000.0;
    b.counters[EventType::AgentErrBackend as usize] = 4.0;
    b.xfer_buckets = vec![(10.0, 1.0), (f64::INFINITY, 5.0)];
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_the_bucket_prometheus_interpolates_in() {
        let b = [(10.0, 2.0), (100.0, 4.0), (f64::INFINITY, 4.0)];
        assert_eq!(bucket_quantile(&b, 0.5), Some(Quantile::AtMost(10.0)));
        assert_eq!(bucket_quantile(&b, 0.75), Some(Quantile::AtMost(100.0)));
        assert_eq!(bucket_quantile(&b, 0.25), Some(Quantile::AtMost(10.0)));
        let inf = [(10.0, 1.0), (f64::INFINITY, 3.0)];
        assert_eq!(bucket_quantile(&inf, 0.99), Some(Quantile::Above(10.0)));
        assert_eq!(bucket_quantile(&[(f64::INFINITY, 0.0)], 0.5), None);
    }

    fn native_of(values: &[u64]) -> NativeHistogram {
        let mut h = NativeHistogram::default();
        values.iter().for_each(|&v| h.observe(v));
        h
    }

    #[test]
    fn native_scrapes_give_promqls_estimate_over_the_increase() {
        let before = Totals {
            xfer_buckets: vec![(10.0, 0.0), (f64::INFINITY, 3.0)],
            xfer_native: Some(native_of(&[5000, 5000, 5000])),
            size_native: [Some(native_of(&[1 << 30])), None],
            ..Totals::default()
        };
        let mut now = before.clone();
        now.xfer_buckets = vec![(10.0, 0.0), (f64::INFINITY, 7.0)];
        now.xfer_native = Some(native_of(&[5000, 5000, 5000, 200, 200, 300, 400]));
        now.size_native = [
            Some(native_of(&[1 << 30, 4096, 4096])),
            Some(native_of(&[65536, 65536])),
        ];
        let r = Rates::from_scrapes(Some(&before), &now, 1.0);
        // The interval's 4 transfers (200, 200, 300, 400), not the earlier 5000s.
        let interval = native_of(&[200, 200, 300, 400]);
        for q in [0.5, 0.9, 0.99] {
            assert_eq!(
                r.xfer.quantile(q),
                Some(Quantile::Interpolated(
                    interval.histogram_quantile(q).unwrap()
                ))
            );
        }
        // Sizes: the TX and RX increases together (4096, 4096, 65536, 65536).
        let sizes = native_of(&[4096, 4096, 65536, 65536]);
        assert_eq!(
            r.size.quantile(0.9),
            Some(Quantile::Interpolated(
                sizes.histogram_quantile(0.9).unwrap()
            ))
        );
        // Without an earlier scrape: everything so far.
        let totals = Rates::from_scrapes(None, &now, 1.0);
        assert_eq!(
            totals.xfer.quantile(0.99),
            Some(Quantile::Interpolated(
                now.xfer_native
                    .as_ref()
                    .unwrap()
                    .histogram_quantile(0.99)
                    .unwrap()
            ))
        );
        // Text scrapes (no native histograms): classic buckets, no sizes.
        let mut text = now.clone();
        text.xfer_native = None;
        text.size_native = [None, None];
        let r = Rates::from_scrapes(Some(&before), &text, 1.0);
        assert_eq!(r.xfer.quantile(0.5), Some(Quantile::Above(10.0)));
        assert_eq!(r.size.quantile(0.5), None);
        // Nothing new: idle.
        assert!(Rates::from_scrapes(Some(&now), &now, 1.0).is_idle());
    }

    #[test]
    fn scrape_deltas_become_rates() {
        let (before, now) = two_scrapes();
        let r = Rates::from_scrapes(Some(&before), &now, 2.0);
        assert_eq!(r.per_s[EventType::AgentTxBytes as usize], 1000.0);
        assert_eq!(r.errors(), 2.0);
        assert_eq!(
            r.xfer.quantile(0.5),
            Some(Quantile::Above(10.0)),
            "all four new in the +Inf bucket"
        );
        assert!(!r.is_idle());
        assert!(Rates::from_scrapes(Some(&now), &now, 1.0).is_idle());
        // A reset counter counts from zero.
        let reset = Rates::from_scrapes(Some(&now), &before, 1.0);
        assert_eq!(reset.per_s[EventType::AgentTxBytes as usize], 1000.0);
        // A stalled transfer (NIXL's open pull request #2047) is an error too.
        let mut stalled = now.clone();
        stalled.counters[EventType::AgentErrXferStalled as usize] = 6.0;
        assert_eq!(
            Rates::from_scrapes(Some(&before), &stalled, 2.0).errors(),
            2.0 + 3.0
        );
    }
}
