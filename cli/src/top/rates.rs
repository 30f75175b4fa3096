//! The rate arithmetic of `top`: per-second rates of one interval from a ring's events or from
//! the deltas between two scrapes (a reset counter counts from zero), and percentiles from a
//! ring's values or, from histogram buckets, the bucket holding the percentile's rank (the
//! bucket `histogram_quantile` interpolates in): a value interpolated inside a wide bucket
//! could lie far above every observed value.

use nixl_telemetry::event::EVENT_TYPE_COUNT;
use nixl_telemetry::EventType;

use crate::scrape::Totals;
use crate::sketch::Sketch;
use crate::stats::Summary;

/// A distribution over one interval, from a ring's values or a histogram's bucket deltas.
#[derive(Clone, Debug, Default)]
pub enum Dist {
    /// Nothing observed.
    #[default]
    Empty,
    /// The values themselves (rings).
    Sketch(Sketch),
    /// Cumulative bucket counts by upper bound, ending with `+Inf` (scrapes).
    Buckets(Vec<(f64, f64)>),
    /// Merged from incompatible sources (sketches and buckets, or other bounds).
    Mixed,
}

impl Dist {
    /// Merges `other` into this distribution.
    fn merge(&mut self, other: &Dist) {
        *self = match (std::mem::take(self), other) {
            (d, Dist::Empty) => d,
            (Dist::Empty, o) => o.clone(),
            (Dist::Sketch(mut a), Dist::Sketch(b)) => {
                a.merge(b);
                Dist::Sketch(a)
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
            Dist::Sketch(s) => s.quantile(q).map(|v| Quantile::Value(v as f64)),
            Dist::Buckets(b) => bucket_quantile(b, q),
        }
    }
}

/// A percentile as far as the data tells it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Quantile {
    /// An observed value (rings).
    Value(f64),
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

/// What one agent did per second over the last interval.
#[derive(Clone, Debug)]
pub struct Rates {
    /// Per event type: the sum of values per second (bytes, requests, errors, drops).
    pub per_s: [f64; EVENT_TYPE_COUNT],
    /// Transfer times (µs).
    pub xfer: Dist,
    /// Post times (µs).
    pub post: Dist,
}

impl Rates {
    /// The rates of the events summarised in `summary`, read over `seconds`.
    pub fn from_summary(summary: &Summary, seconds: f64) -> Rates {
        let mut per_s = [0.0; EVENT_TYPE_COUNT];
        for t in EventType::ALL {
            per_s[t as usize] = summary.sum_of(t) as f64 / seconds;
        }
        let dist = |t| {
            summary
                .sketch_of(t)
                .cloned()
                .map_or(Dist::Empty, Dist::Sketch)
        };
        Rates {
            per_s,
            xfer: dist(EventType::AgentXferTime),
            post: dist(EventType::AgentXferPostTime),
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
        Rates {
            per_s,
            xfer: buckets(before.map(|b| &b.xfer_buckets), &now.xfer_buckets),
            post: buckets(before.map(|b| &b.post_buckets), &now.post_buckets),
        }
    }

    /// Adds `other`'s rates and distributions to these.
    pub(super) fn add(&mut self, other: &Rates) {
        for (a, b) in self.per_s.iter_mut().zip(other.per_s) {
            *a += b;
        }
        self.xfer.merge(&other.xfer);
        self.post.merge(&other.post);
    }

    /// Whether nothing happened: no value of any event and no time observed.
    pub(super) fn is_idle(&self) -> bool {
        self.per_s.iter().all(|v| *v == 0.0)
            && self.xfer.quantile(0.5).is_none()
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
    }
}
