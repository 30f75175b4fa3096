//! A fixed-size log-linear histogram of `u64` values, for percentiles over any number of values
//! in bounded memory (`stats` and `top` never keep the values themselves).
//!
//! Values below 128 have a bucket each (exact); above, each power of two is split into 64
//! buckets, so a bucket spans at most 1/64 of its lower bound and a reported percentile is
//! within 0.8% of the true one (the bucket's midpoint, clamped to the exact min and max).
//! 3,776 counters (30 KiB) cover the whole `u64` range, whatever the input.

/// Values below this have a bucket of their own.
const EXACT: u64 = 128;
/// Buckets per power of two above `EXACT`.
const PER_OCTAVE: u64 = EXACT / 2;
/// Number of buckets: the exact ones, then 64 per octave from 2^7 to 2^63.
const BUCKETS: usize = (EXACT + (64 - 7) * PER_OCTAVE) as usize;

/// A mergeable distribution of `u64` values in fixed memory.
#[derive(Clone, Debug)]
pub struct Sketch {
    counts: Box<[u64; BUCKETS]>,
    count: u64,
    sum: f64,
    min: u64,
    max: u64,
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch {
            counts: Box::new([0; BUCKETS]),
            count: 0,
            sum: 0.0,
            min: u64::MAX,
            max: 0,
        }
    }
}

/// The bucket of `v`.
fn bucket(v: u64) -> usize {
    if v < EXACT {
        return v as usize;
    }
    let octave = 63 - u64::from(v.leading_zeros()); // >= 7
    let shift = octave - 6;
    let mantissa = (v >> shift) - PER_OCTAVE; // 0..64
    (EXACT + (octave - 7) * PER_OCTAVE + mantissa) as usize
}

/// The smallest and largest value of bucket `i`.
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < EXACT {
        return (i, i);
    }
    let octave = (i - EXACT) / PER_OCTAVE + 7;
    let mantissa = (i - EXACT) % PER_OCTAVE + PER_OCTAVE;
    let shift = octave - 6;
    let low = mantissa << shift;
    (low, low + ((1u64 << shift) - 1))
}

impl Sketch {
    /// Adds one value.
    pub fn add(&mut self, v: u64) {
        self.counts[bucket(v)] += 1;
        self.count += 1;
        self.sum += v as f64;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Sketch) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Smallest value, if any.
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest value, if any.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// Arithmetic mean, if any.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// The `q` quantile (0..=1) by nearest rank: exact below 128, else within 0.8%.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, high) = bounds(i);
                let mid = low + (high - low) / 2;
                return Some(mid.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range() {
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        let mut expected_low = 0u64;
        for i in 0..BUCKETS {
            let (low, high) = bounds(i);
            assert_eq!(low, expected_low, "bucket {i}");
            assert_eq!((bucket(low), bucket(high)), (i, i), "bucket {i}");
            // Each bucket spans at most 1/64 of its lower bound.
            assert!(low < EXACT || (high - low) < low / 64 + 1, "bucket {i}");
            expected_low = high.wrapping_add(1);
        }
        assert_eq!(expected_low, 0, "the last bucket ends at u64::MAX");
    }

    #[test]
    fn exact_below_128_close_above() {
        let mut s = Sketch::default();
        for v in 1..=100 {
            s.add(v);
        }
        assert_eq!((s.quantile(0.5), s.quantile(0.99)), (Some(50), Some(99)));
        assert_eq!(
            (s.min(), s.max(), s.mean()),
            (Some(1), Some(100), Some(50.5))
        );
        let mut big = Sketch::default();
        for v in (1..=10_000u64).map(|v| v * 1000) {
            big.add(v);
        }
        for (q, truth) in [(0.5, 5_000_000.0), (0.99, 9_900_000.0)] {
            let got = big.quantile(q).unwrap() as f64;
            assert!((got - truth).abs() / truth < 0.008, "{q}: {got}");
        }
        assert_eq!(big.quantile(1.0), Some(10_000_000));
        assert_eq!(Sketch::default().quantile(0.5), None);
    }

    #[test]
    fn merging_adds_the_values() {
        let (mut a, mut b) = (Sketch::default(), Sketch::default());
        for v in 0..50 {
            a.add(v);
        }
        for v in 50..100 {
            b.add(v);
        }
        a.merge(&b);
        assert_eq!((a.count(), a.min(), a.max()), (100, Some(0), Some(99)));
        assert_eq!(a.quantile(0.5), Some(49));
    }
}
