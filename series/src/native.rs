//! Native (exponential) histograms: Prometheus's native histograms and OpenTelemetry's base-2
//! exponential histograms, which share one bucket grid.
//!
//! At schema `s` (OpenTelemetry's `scale`) the base is `b = 2^(2^-s)` and bucket `i` holds the
//! values in `(b^(i-1), b^i]`; a zero bucket holds the value 0 (event values are integers, so
//! any zero threshold below 1 gives the same buckets: [`ZERO_THRESHOLD`] is client_golang's).
//! The grid needs no configuration: every value lands in a bucket whose bounds are within a
//! factor `b` of each other, so any quantile is known to within one bucket.
//!
//! **Error bound.** A quantile reported as the point `2·L·U/(L+U)` of the bucket `(L, U]` that
//! holds it (what [`NativeHistogram::quantile`] returns) is within `(b-1)/(b+1)` of the true
//! value, relatively; at the default schema 3, `b = 2^(1/8) = 1.0905077…` and the bound is
//! [`relative_error_bound`]`(3)` = 0.0432946… (4.33%). PromQL's `histogram_quantile` picks the same
//! bucket but interpolates inside it, so its estimate is only guaranteed within the bucket's
//! width, `b - 1` = 9.0508…% at schema 3 ([`bucket_width_bound`]).
//!
//! **Bounded memory.** A histogram keeps its buckets densely from its lowest to its highest
//! populated index, and never more than its bucket bound ([`DEFAULT_MAX_BUCKETS`] = 160). When
//! a value would widen it past the bound, the schema is lowered by one, merging each pair of
//! buckets `(2k-1, 2k)` into bucket `k` (a bucket of the coarser grid is exactly two of the
//! finer one), until the span fits, as Prometheus's client libraries do. Values from 1 to
//! 2^64 fit at schema 1 in 160 buckets; at the lowest schema, -4, they span 5. A histogram
//! rebuilt from elsewhere (a store's words, a scraped page) is refused when it holds a bucket
//! no float64 value can be in ([`index_range`]), and index arithmetic is done in 64 bits, so a
//! sum of histograms never wraps an index nor holds more than the float64 range's buckets.
//!
//! **Reading them as PromQL does.** [`NativeHistogram::from_sparse`] rebuilds a scraped
//! histogram, [`NativeHistogram::since`] is the increase between two scrapes (Prometheus's
//! `rate`, a reset included), [`NativeHistogram::merge`] adds the histograms of several series
//! at the coarser schema (`sum`), and [`NativeHistogram::histogram_quantile`] estimates a
//! quantile as `histogram_quantile` does, so a tool reading them (`nixl-telemetry top`) shows
//! what a dashboard over the same series shows.

/// The default schema: 8 buckets per power of two.
pub const DEFAULT_SCHEMA: i8 = 3;
/// The finest schema Prometheus accepts.
pub const MAX_SCHEMA: i8 = 8;
/// The coarsest schema Prometheus accepts.
pub const MIN_SCHEMA: i8 = -4;
/// The default bound on the buckets of one histogram (its zero bucket not counted).
pub const DEFAULT_MAX_BUCKETS: usize = 160;
/// The smallest bucket bound accepted: at [`MIN_SCHEMA`] every `u64` value fits in 5 buckets.
pub const MIN_MAX_BUCKETS: usize = 8;
/// The zero bucket's threshold, `2^-128` (client_golang's default): only 0 falls in it.
pub const ZERO_THRESHOLD: f64 = 2.938735877055719e-39;

/// The base of the grid at `schema`: `2^(2^-schema)`.
pub fn base(schema: i8) -> f64 {
    (2f64.powi(-i32::from(schema))).exp2()
}

/// The relative error bound of a quantile reported as the bucket's point `2LU/(L+U)`:
/// `(b-1)/(b+1)` with `b` = [`base`]`(schema)`.
pub fn relative_error_bound(schema: i8) -> f64 {
    let b = base(schema);
    (b - 1.0) / (b + 1.0)
}

/// The relative error bound of any estimate inside the right bucket (as `histogram_quantile`'s
/// interpolation is): the bucket's relative width, `b - 1`.
pub fn bucket_width_bound(schema: i8) -> f64 {
    base(schema) - 1.0
}

/// The index of the bucket holding `value` (> 0) at `schema`: the `i` with
/// `b^(i-1) < value <= b^i`. Exact at powers of two (the only grid bounds an integer can
/// equal at schemas above 0).
pub fn bucket_index(value: f64, schema: i8) -> i32 {
    debug_assert!(value > 0.0);
    let (frac, exp) = frexp(value);
    if schema > 0 {
        // value = frac · 2^exp, frac in [0.5, 1): the first j with 2^(j/2^s - 1) >= frac.
        let j = octave_bounds(schema).partition_point(|&bound| bound < frac) as i32;
        j + (exp - 1) * (1i32 << schema)
    } else {
        // Power-of-two buckets, merged 2^-schema at a time.
        let key = if frac == 0.5 { exp - 1 } else { exp };
        let shift = -i32::from(schema);
        let offset = (1 << shift) - 1;
        (key + offset) >> shift
    }
}

/// `2^(j/2^schema - 1)`: the j-th bound within an octave, scaled to `[0.5, 1]`.
fn bound_in_octave(j: i32, schema: i8) -> f64 {
    (f64::from(j) / f64::from(1i32 << schema) - 1.0).exp2()
}

/// The bounds within an octave at `schema` (1..=[`MAX_SCHEMA`]): [`bound_in_octave`] of
/// `j = 0..=2^schema`, computed once per schema and kept for the process (at most 2 KiB each),
/// so that placing a value is a binary search instead of three `exp2`/`log2` calls.
///
/// Lock-free on purpose: a thread that finds no table builds one and offers it; the loser of a
/// race frees its copy. A `OnceLock` could leave a child forked during another thread's
/// initialisation waiting forever.
fn octave_bounds(schema: i8) -> &'static [f64] {
    use std::ptr::{null_mut, slice_from_raw_parts_mut};
    use std::sync::atomic::{AtomicPtr, Ordering};
    static TABLES: [AtomicPtr<f64>; MAX_SCHEMA as usize + 1] =
        [const { AtomicPtr::new(null_mut()) }; MAX_SCHEMA as usize + 1];
    debug_assert!((1..=MAX_SCHEMA).contains(&schema));
    let len = (1usize << schema) + 1;
    let slot = &TABLES[schema as usize];
    let mut table = slot.load(Ordering::Acquire);
    if table.is_null() {
        let fresh: Box<[f64]> = (0..len as i32)
            .map(|j| bound_in_octave(j, schema))
            .collect();
        let fresh = Box::into_raw(fresh) as *mut f64;
        table = match slot.compare_exchange(null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => fresh,
            Err(winner) => {
                // SAFETY: `fresh` came from `Box::into_raw` of a `len`-element slice just above
                // and was never published (the exchange failed), so this is its only owner.
                drop(unsafe { Box::from_raw(slice_from_raw_parts_mut(fresh, len)) });
                winner
            }
        };
    }
    // SAFETY: a published table is a leaked `len`-element slice (its length is fixed by the
    // schema), initialised before its release-publication and never freed or written again.
    unsafe { std::slice::from_raw_parts(table, len) }
}

/// `value` as `frac · 2^exp` with `frac` in `[0.5, 1)` (value finite, > 0).
fn frexp(value: f64) -> (f64, i32) {
    let bits = value.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    if biased == 0 {
        // Subnormal: scale up first.
        let (f, e) = frexp(value * 2f64.powi(64));
        return (f, e - 64);
    }
    let frac = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (frac, biased - 1022)
}

/// The upper bound of bucket `index` at `schema`: `b^index`.
pub fn upper_bound(index: i32, schema: i8) -> f64 {
    upper_bound_wide(i64::from(index), schema)
}

/// [`upper_bound`] of an index given in 64 bits (so that the index below the first 32-bit one
/// has a bound too).
fn upper_bound_wide(index: i64, schema: i8) -> f64 {
    let index = index as f64;
    if schema > 0 {
        (index / f64::from(1i32 << schema)).exp2()
    } else {
        (index * f64::from(1i32 << -i32::from(schema))).exp2()
    }
}

/// The buckets a float64 value can be in at `schema` (from [`MIN_SCHEMA`] to
/// [`MAX_SCHEMA`]): from the one holding the smallest positive value, 2^-1074, to the one
/// holding the largest, below 2^1024 (`-274944..=262144` at schema 8, `-67..=64` at schema
/// -4). A histogram never holds a bucket outside them ([`NativeHistogram::from_dense`] and
/// [`NativeHistogram::from_sparse`] refuse one), so its span, and that of any sum of
/// histograms, is bounded whatever a damaged store or a scraped page holds.
pub fn index_range(schema: i8) -> (i32, i32) {
    let shift = i32::from(MAX_SCHEMA) - i32::from(schema);
    (
        lower_index(-1074 << MAX_SCHEMA, shift),
        lower_index(1024 << MAX_SCHEMA, shift),
    )
}

/// Index `i` of a grid brought `shift` schemas coarser: `ceil(i / 2^shift)` (bucket `i` of
/// schema `s` lies in bucket `ceil(i/2)` of schema `s - 1`). Worked out in 64 bits, so an index
/// at either end of the 32-bit range never wraps; the result is never farther from 0 than `i`.
fn lower_index(i: i32, shift: i32) -> i32 {
    let lowered = (i64::from(i) + (1i64 << shift) - 1) >> shift;
    i32::try_from(lowered).expect("a lowered index is no farther from 0")
}

/// The number of buckets from `lo` to `hi` (both included), in 64 bits.
fn span(lo: i32, hi: i32) -> i64 {
    i64::from(hi) - i64::from(lo) + 1
}

/// One native histogram: zero bucket, count, sum and the populated span of buckets.
#[derive(Clone, Debug, PartialEq)]
pub struct NativeHistogram {
    schema: i8,
    max_buckets: usize,
    zero_count: u64,
    count: u64,
    sum: u64,
    /// The index of `buckets[0]`.
    offset: i32,
    /// Per-bucket counts from `offset` on (empty before the first positive value).
    buckets: Vec<u64>,
}

impl Default for NativeHistogram {
    /// Empty, at [`DEFAULT_SCHEMA`] with [`DEFAULT_MAX_BUCKETS`].
    fn default() -> Self {
        NativeHistogram::new(DEFAULT_SCHEMA, DEFAULT_MAX_BUCKETS)
    }
}

impl NativeHistogram {
    /// Empty, at `schema` (clamped to [`MIN_SCHEMA`]..=[`MAX_SCHEMA`]), holding at most
    /// `max_buckets` buckets (at least [`MIN_MAX_BUCKETS`]).
    pub fn new(schema: i8, max_buckets: usize) -> NativeHistogram {
        NativeHistogram {
            schema: schema.clamp(MIN_SCHEMA, MAX_SCHEMA),
            max_buckets: max_buckets.max(MIN_MAX_BUCKETS),
            zero_count: 0,
            count: 0,
            sum: 0,
            offset: 0,
            buckets: Vec::new(),
        }
    }

    /// Records one value (0 goes in the zero bucket).
    pub fn observe(&mut self, value: u64) {
        self.count = self.count.wrapping_add(1);
        self.sum = self.sum.wrapping_add(value);
        if value == 0 {
            self.zero_count += 1;
            return;
        }
        let mut i = bucket_index(value as f64, self.schema);
        if self.buckets.is_empty() {
            self.offset = i;
            self.buckets.push(1);
            return;
        }
        let lo = self.offset.min(i);
        let hi = self.last_index().max(i);
        if span(lo, hi) > self.max_buckets as i64 {
            self.reduce_to_fit(lo, hi);
            i = bucket_index(value as f64, self.schema);
        }
        if i < self.offset {
            let grow = (self.offset - i) as usize;
            self.buckets.splice(0..0, std::iter::repeat_n(0, grow));
            self.offset = i;
        } else if i >= self.offset + self.buckets.len() as i32 {
            self.buckets.resize((i - self.offset + 1) as usize, 0);
        }
        self.buckets[(i - self.offset) as usize] += 1;
    }

    /// Lowers the schema until buckets `lo..=hi` (at the current schema) span at most the
    /// bound, merging the held buckets pairwise at each step.
    fn reduce_to_fit(&mut self, mut lo: i32, mut hi: i32) {
        while span(lo, hi) > self.max_buckets as i64 && self.schema > MIN_SCHEMA {
            let merged_offset = lower_index(self.offset, 1);
            let mut merged = vec![0u64; self.buckets.len() / 2 + 1];
            for (i, n) in self.buckets() {
                merged[(lower_index(i, 1) - merged_offset) as usize] += n;
            }
            while merged.last() == Some(&0) {
                merged.pop();
            }
            self.buckets = merged;
            self.offset = merged_offset;
            self.schema -= 1;
            lo = lower_index(lo, 1);
            hi = lower_index(hi, 1);
        }
    }

    /// The index of the last held bucket (the offset when none is held).
    fn last_index(&self) -> i32 {
        // `offset + len - 1` is a held index, so it fits (the sum is formed in 64 bits).
        (i64::from(self.offset) + self.buckets.len().max(1) as i64 - 1) as i32
    }

    /// The current schema (lowered from the initial one when the bound was reached).
    pub fn schema(&self) -> i8 {
        self.schema
    }

    /// The bound on buckets.
    pub fn max_buckets(&self) -> usize {
        self.max_buckets
    }

    /// Observations in the zero bucket.
    pub fn zero_count(&self) -> u64 {
        self.zero_count
    }

    /// All observations.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the observed values.
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Buckets held: the span from the lowest to the highest populated bucket.
    pub fn bucket_span(&self) -> usize {
        self.buckets.len()
    }

    /// The populated buckets as `(index, count)`, in increasing index.
    pub fn buckets(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(k, &n)| ((i64::from(self.offset) + k as i64) as i32, n))
    }

    /// The index of the first held bucket and the dense counts from it on (empty buckets
    /// included), as OpenTelemetry's exponential histogram carries them.
    pub fn dense(&self) -> (i32, &[u64]) {
        (self.offset, &self.buckets)
    }

    /// Prometheus's sparse form: spans `(offset, length)` (the first offset absolute, the
    /// others from the end of the previous span) and the counts as deltas from the previous
    /// populated bucket. Runs of empty buckets start a new span.
    pub fn spans_and_deltas(&self) -> (Vec<(i32, u32)>, Vec<i64>) {
        let mut spans: Vec<(i32, u32)> = Vec::new();
        let mut deltas = Vec::new();
        let mut previous_count = 0i64;
        let mut next_index: Option<i64> = None;
        for (i, n) in self.buckets() {
            match next_index {
                Some(next) if next == i64::from(i) => spans.last_mut().expect("a span").1 += 1,
                // The gap between two held buckets, shorter than the span they are in.
                Some(next) => spans.push(((i64::from(i) - next) as i32, 1)),
                None => spans.push((i, 1)),
            }
            next_index = Some(i64::from(i) + 1);
            deltas.push(n as i64 - previous_count);
            previous_count = n as i64;
        }
        (spans, deltas)
    }

    /// A histogram from its parts, as [`NativeHistogram::dense`] and the getters give them (a
    /// copy kept elsewhere, such as a multi-process store): `None` when they are not one
    /// histogram's (a schema outside [`MIN_SCHEMA`]..=[`MAX_SCHEMA`], more buckets than
    /// `max_buckets`, a first or last held bucket empty, a bucket outside [`index_range`], or a
    /// count other than the zero bucket's and the buckets' counts together).
    pub fn from_dense(
        schema: i8,
        max_buckets: usize,
        zero_count: u64,
        count: u64,
        sum: u64,
        offset: i32,
        buckets: &[u64],
    ) -> Option<NativeHistogram> {
        let held = buckets
            .iter()
            .try_fold(zero_count, |total, &n| total.checked_add(n))?;
        let trimmed =
            buckets.first().is_none_or(|&n| n > 0) && buckets.last().is_none_or(|&n| n > 0);
        let in_range = (MIN_SCHEMA..=MAX_SCHEMA).contains(&schema) && {
            let (lo, hi) = index_range(schema);
            let last = i64::from(offset) + buckets.len() as i64 - 1;
            buckets.is_empty() || (offset >= lo && last <= i64::from(hi))
        };
        (in_range
            && max_buckets >= MIN_MAX_BUCKETS
            && buckets.len() <= max_buckets
            && held == count
            && trimmed)
            .then(|| NativeHistogram {
                schema,
                max_buckets,
                zero_count,
                count,
                sum,
                offset: if buckets.is_empty() { 0 } else { offset },
                buckets: buckets.to_vec(),
            })
    }

    /// A histogram from Prometheus's sparse form (what [`Self::spans_and_deltas`] gives, as a
    /// scrape or a remote-write sample carries it): `schema`, the zero bucket's count, the
    /// observations' `count` and `sum`, spans `(offset, length)` and count deltas. Its bucket
    /// bound is [`DEFAULT_MAX_BUCKETS`], or the span it arrives with when wider. Refused: a
    /// schema outside [`MIN_SCHEMA`]..=[`MAX_SCHEMA`], deltas not matching the spans, a
    /// negative count, more than `1 << 20` buckets, or a bucket outside [`index_range`].
    pub fn from_sparse(
        schema: i32,
        zero_count: u64,
        count: u64,
        sum: u64,
        spans: &[(i32, u32)],
        deltas: &[i64],
    ) -> Result<NativeHistogram, String> {
        let schema = i8::try_from(schema)
            .ok()
            .filter(|s| (MIN_SCHEMA..=MAX_SCHEMA).contains(s))
            .ok_or_else(|| format!("schema {schema} is outside {MIN_SCHEMA}..={MAX_SCHEMA}"))?;
        let buckets: u64 = spans.iter().map(|s| u64::from(s.1)).sum();
        if buckets != deltas.len() as u64 {
            return Err(format!(
                "{} count deltas for {buckets} buckets in the spans",
                deltas.len()
            ));
        }
        let mut h = NativeHistogram::new(schema, DEFAULT_MAX_BUCKETS);
        (h.zero_count, h.count, h.sum) = (zero_count, count, sum);
        let (lo, hi) = index_range(schema);
        let in_range = |i: i64| (i64::from(lo)..=i64::from(hi)).contains(&i);
        let (mut index, mut previous, mut delta) = (0i64, 0i64, deltas.iter());
        for (k, &(offset, length)) in spans.iter().enumerate() {
            index += i64::from(offset);
            if k == 0 {
                h.offset = i32::try_from(index).map_err(|_| "bucket index out of range")?;
            }
            for _ in 0..length {
                if !in_range(index) {
                    return Err(format!(
                        "bucket {index} of schema {schema} is outside {lo}..={hi}, where no \
                         float64 value lies"
                    ));
                }
                previous += delta.next().copied().unwrap_or(0);
                let n = u64::try_from(previous).map_err(|_| "a negative bucket count")?;
                let at = usize::try_from(index - i64::from(h.offset))
                    .ok()
                    .filter(|&at| at < 1 << 20)
                    .ok_or("more than 2^20 buckets")?;
                if at >= h.buckets.len() {
                    h.buckets.resize(at + 1, 0);
                }
                h.buckets[at] = n;
                index += 1;
            }
        }
        h.max_buckets = h.max_buckets.max(h.buckets.len());
        h.trim();
        Ok(h)
    }

    /// Drops empty buckets at both ends of the held span.
    fn trim(&mut self) {
        while self.buckets.last() == Some(&0) {
            self.buckets.pop();
        }
        let lead = self.buckets.iter().take_while(|&&n| n == 0).count();
        if lead > 0 {
            self.buckets.drain(..lead);
            self.offset += lead as i32;
        }
        if self.buckets.is_empty() {
            self.offset = 0;
        }
    }

    /// The populated buckets as `(index, count)` at `schema` (at most this histogram's own):
    /// bucket `i` lies in bucket `ceil(i / 2^d)` of the grid `d` schemas coarser.
    fn buckets_at(&self, schema: i8) -> impl Iterator<Item = (i32, u64)> + '_ {
        let shift = (i32::from(self.schema) - i32::from(schema)).max(0);
        self.buckets().map(move |(i, n)| (lower_index(i, shift), n))
    }

    /// The first and last populated indexes at `schema` (at most this histogram's own), if any.
    fn ends_at(&self, schema: i8) -> Option<(i32, i32)> {
        let first = self.buckets_at(schema).next()?.0;
        let last = self.buckets_at(schema).last()?.0;
        Some((first, last))
    }

    /// Adds the counts of `buckets` (indexes at this histogram's schema, increasing), which
    /// the caller has checked span, with the held ones, no more than it means to allocate.
    fn add_buckets(&mut self, buckets: impl Iterator<Item = (i32, u64)>) {
        for (i, n) in buckets {
            if self.buckets.is_empty() {
                self.offset = i;
            }
            if i < self.offset {
                let grow = (i64::from(self.offset) - i64::from(i)) as usize;
                self.buckets.splice(0..0, std::iter::repeat_n(0, grow));
                self.offset = i;
            }
            let at = (i64::from(i) - i64::from(self.offset)) as usize;
            if at >= self.buckets.len() {
                self.buckets.resize(at + 1, 0);
            }
            self.buckets[at] += n;
        }
    }

    /// Adds `other` (another series' histogram, as PromQL's `sum` or `+` adds native
    /// histograms, for a node total): both are brought to the coarser of their two schemas,
    /// then counts, sums and bucket counts are added. When the union spans more buckets than
    /// the larger of the two bounds, the schema is lowered further until it fits, as
    /// [`observe`](Self::observe) does, so a total is bounded like any series (PromQL's `sum`
    /// would keep the finer schema: the two agree whenever the union fits). The schema is
    /// chosen from the union's ends before any bucket is moved, so buckets far apart (as a
    /// histogram read from a damaged store may hold) never make it hold their distance at a
    /// finer schema; only at [`MIN_SCHEMA`] may a union span more than the bound.
    pub fn merge(&mut self, other: &NativeHistogram) {
        self.max_buckets = self.max_buckets.max(other.max_buckets);
        let mut schema = self.schema.min(other.schema);
        let ends = match (self.ends_at(schema), other.ends_at(schema)) {
            (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
            (a, b) => a.or(b),
        };
        if let Some((mut lo, mut hi)) = ends {
            // Bucket i of schema s is inside bucket ceil(i/2) of schema s-1.
            while span(lo, hi) > self.max_buckets as i64 && schema > MIN_SCHEMA {
                (lo, hi, schema) = (lower_index(lo, 1), lower_index(hi, 1), schema - 1);
            }
        }
        if schema < self.schema {
            let mine: Vec<(i32, u64)> = self.buckets_at(schema).collect();
            self.buckets.clear();
            self.schema = schema;
            self.add_buckets(mine.into_iter());
        }
        self.add_buckets(other.buckets_at(schema));
        self.count = self.count.wrapping_add(other.count);
        self.sum = self.sum.wrapping_add(other.sum);
        self.zero_count = self.zero_count.wrapping_add(other.zero_count);
    }

    /// What was observed since `earlier`, a previous state (a scrape) of the same cumulative
    /// histogram: `earlier` brought to this schema (a schema only drops between two states),
    /// then subtracted from it. A reset in between (the exporter restarted: a finer schema
    /// than `earlier`'s, or any count below `earlier`'s) makes this whole histogram the
    /// increase, as Prometheus's `rate` takes it.
    pub fn since(&self, earlier: &NativeHistogram) -> NativeHistogram {
        let reset = || self.clone();
        if earlier.schema < self.schema
            || self.count < earlier.count
            || self.zero_count < earlier.zero_count
        {
            return reset();
        }
        let mut out = self.clone();
        out.count -= earlier.count;
        out.sum = self.sum.saturating_sub(earlier.sum);
        out.zero_count -= earlier.zero_count;
        for (i, n) in earlier.buckets_at(self.schema) {
            let slot = usize::try_from(i64::from(i) - i64::from(out.offset))
                .ok()
                .and_then(|k| out.buckets.get_mut(k));
            match slot {
                Some(slot) if *slot >= n => *slot -= n,
                _ => return reset(),
            }
        }
        out.trim();
        out
    }

    /// The `q`-quantile as PromQL's `histogram_quantile` computes it over a native histogram
    /// (Prometheus 2.42, `promql/quantile.go`): the rank `q·count` is found in the first
    /// bucket, in increasing order (the zero bucket first), whose cumulative count reaches it,
    /// and the value is interpolated linearly inside that bucket `(L, U]`:
    /// `L + (U-L)·(rank - below)/n`. The zero bucket spans `(0, ZERO_THRESHOLD]` (from
    /// `-ZERO_THRESHOLD` when there are no positive buckets), and no positive bucket starts
    /// below [`ZERO_THRESHOLD`]. `q` below 0 gives `-inf`, above 1 `+inf`; an empty histogram
    /// or a NaN `q` gives `None` (PromQL's NaN). The estimate lies inside the bucket of the
    /// observation of rank `ceil(q·count)`, so within [`bucket_width_bound`] of it.
    pub fn histogram_quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 || q.is_nan() {
            return None;
        }
        if q < 0.0 {
            return Some(f64::NEG_INFINITY);
        }
        if q > 1.0 {
            return Some(f64::INFINITY);
        }
        let total = self.count as f64;
        let mut rank = q * total;
        let zero_lower = if self.buckets.is_empty() {
            -ZERO_THRESHOLD
        } else {
            0.0
        };
        let zero = (self.zero_count > 0).then_some((zero_lower, ZERO_THRESHOLD, self.zero_count));
        let positive = self.buckets.iter().enumerate().map(|(k, &n)| {
            let i = i64::from(self.offset) + k as i64;
            let lower = upper_bound_wide(i - 1, self.schema).max(ZERO_THRESHOLD);
            (lower, upper_bound_wide(i, self.schema), n)
        });
        let (mut bucket, mut count) = ((0.0, 0.0, 0u64), 0.0);
        for b in zero.into_iter().chain(positive) {
            bucket = b;
            count += b.2 as f64;
            if count >= rank {
                break;
            }
        }
        let (lower, upper, n) = bucket;
        let count = count.min(total);
        if count < rank {
            return Some(upper);
        }
        rank -= count - n as f64;
        Some(lower + (upper - lower) * (rank / n as f64))
    }

    /// The `q`-quantile (0..=1) as the point `2LU/(L+U)` of the bucket `(L, U]` holding the
    /// observation of rank `ceil(q·count)` (0 for the zero bucket): within
    /// [`relative_error_bound`] of that observation. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = self.zero_count;
        if seen >= rank {
            return Some(0.0);
        }
        for (i, n) in self.buckets() {
            seen += n;
            if seen >= rank {
                let upper = upper_bound(i, self.schema);
                let lower = upper_bound_wide(i64::from(i) - 1, self.schema);
                // 2LU/(L+U), as 2/(1/L + 1/U): no overflow at the top of the float64 range.
                return Some(2.0 / (1.0 / lower + 1.0 / upper));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_of_the_default_schema() {
        let b = base(3);
        assert_eq!(b, 2f64.powf(0.125));
        assert!((b - 1.090_507_732_665_257_7).abs() < 1e-15);
        assert!((relative_error_bound(3) - 0.043_294_617_499_389_19).abs() < 1e-12);
        assert!((bucket_width_bound(3) - 0.090_507_732_665_257_7).abs() < 1e-12);
        assert_eq!(base(0), 2.0);
        assert_eq!(base(-1), 4.0);
        assert!((relative_error_bound(0) - 1.0 / 3.0).abs() < 1e-15);
    }

    #[test]
    fn indexes_of_known_values() {
        // Schema 0: buckets (2^(i-1), 2^i].
        for (v, i) in [
            (1.0, 0),
            (2.0, 1),
            (3.0, 2),
            (4.0, 2),
            (5.0, 3),
            (1024.0, 10),
        ] {
            assert_eq!(bucket_index(v, 0), i, "{v}");
        }
        assert_eq!(bucket_index(0.5, 0), -1);
        assert_eq!(bucket_index(0.3, 0), -1);
        // Schema 3: 8 buckets per octave; powers of two are upper bounds.
        assert_eq!(bucket_index(1.0, 3), 0);
        assert_eq!(bucket_index(2.0, 3), 8);
        assert_eq!(bucket_index(1024.0, 3), 80);
        assert_eq!(bucket_index(1025.0, 3), 81);
        // 3 lies in (2^(12/8), 2^(13/8)] = (2.828, 3.084].
        assert_eq!(bucket_index(3.0, 3), 13);
        assert_eq!(bucket_index(100.0, 3), 54); // 2^(53/8)=98.7, 2^(54/8)=103.9
                                                // Schema -1: buckets (4^(i-1), 4^i].
        for (v, i) in [(1.0, 0), (2.0, 1), (4.0, 1), (5.0, 2), (16.0, 2), (17.0, 3)] {
            assert_eq!(bucket_index(v, -1), i, "{v}");
        }
        assert_eq!(bucket_index(u64::MAX as f64, 3), 512);
    }

    #[test]
    fn every_value_lies_in_its_buckets_bounds() {
        for schema in MIN_SCHEMA..=MAX_SCHEMA {
            let mut v = 1u64;
            while v < 1 << 50 {
                for value in [v, v + 1, v.saturating_mul(3) / 2] {
                    let i = bucket_index(value as f64, schema);
                    let x = value as f64;
                    assert!(
                        upper_bound(i - 1, schema) < x && x <= upper_bound(i, schema),
                        "schema {schema} value {value} index {i}"
                    );
                }
                v = v * 5 / 3 + 1;
            }
        }
    }

    #[test]
    fn the_octave_table_places_values_as_the_definition_does() {
        // The definition, computed per value: the first j with bound(j) >= frac.
        fn by_definition(value: f64, schema: i8) -> i32 {
            let (frac, exp) = frexp(value);
            let j = (0..).find(|&j| bound_in_octave(j, schema) >= frac).unwrap();
            j + (exp - 1) * (1i32 << schema)
        }
        for schema in 1..=MAX_SCHEMA {
            let values = (1..5_000u64).chain((0..60).flat_map(|k| {
                let p = 1u64 << k;
                [p - 1, p, p + 1, p + p / 3, p + p / 2 + 7]
            }));
            for v in values.filter(|&v| v > 0) {
                assert_eq!(
                    bucket_index(v as f64, schema),
                    by_definition(v as f64, schema),
                    "schema {schema} value {v}"
                );
            }
        }
        // Threads racing to build a table all get the same one.
        let tables: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| octave_bounds(5).as_ptr() as usize))
            .collect();
        let first = octave_bounds(5).as_ptr() as usize;
        for t in tables {
            assert_eq!(t.join().unwrap(), first);
        }
    }

    #[test]
    fn zero_count_sum_and_sparse_form() {
        let mut h = NativeHistogram::default();
        for v in [0, 1, 1, 2, 3, 1024, 0] {
            h.observe(v);
        }
        assert_eq!((h.count(), h.sum(), h.zero_count()), (7, 1031, 2));
        assert_eq!(
            h.buckets().collect::<Vec<_>>(),
            [(0, 2), (8, 1), (13, 1), (80, 1)]
        );
        let (spans, deltas) = h.spans_and_deltas();
        assert_eq!(spans, [(0, 1), (7, 1), (4, 1), (66, 1)]);
        assert_eq!(deltas, [2, -1, 0, 0]);
        assert_eq!(h.bucket_span(), 81);
        let empty = NativeHistogram::default();
        assert_eq!(empty.spans_and_deltas(), (vec![], vec![]));
        assert_eq!(empty.quantile(0.5), None);
    }

    #[test]
    fn a_series_from_1_ns_to_1_hour_never_holds_more_buckets_than_the_bound() {
        // Nanoseconds from 1 to 3.6e12 (one hour), geometrically spaced, and zeros.
        let mut h = NativeHistogram::default();
        let hour_ns = 3_600_000_000_000u64;
        let mut v = 1.0f64;
        let mut n = 0;
        while v <= hour_ns as f64 {
            h.observe(v as u64);
            h.observe(0);
            n += 2;
            assert!(
                h.bucket_span() <= DEFAULT_MAX_BUCKETS,
                "{}",
                h.bucket_span()
            );
            v *= 1.01;
        }
        h.observe(hour_ns);
        assert!(h.bucket_span() <= DEFAULT_MAX_BUCKETS);
        // log2(3.6e12) = 41.7 octaves: 8 or 4 per octave exceed 160 buckets, 2 do not.
        assert_eq!((h.schema(), h.bucket_span()), (1, 85));
        assert_eq!(h.count(), n + 1);
        let held: u64 = h.buckets().map(|(_, c)| c).sum();
        assert_eq!(held + h.zero_count(), h.count());
        // Reversed order (largest first) ends at the same grid with the same counts.
        let mut r = NativeHistogram::default();
        let mut values = Vec::new();
        let mut v = 1.0f64;
        while v <= hour_ns as f64 {
            values.push(v as u64);
            v *= 1.01;
        }
        for &v in values.iter().rev() {
            r.observe(v);
            assert!(r.bucket_span() <= DEFAULT_MAX_BUCKETS);
        }
        let mut f = NativeHistogram::default();
        values.iter().for_each(|&v| f.observe(v));
        assert_eq!(r.schema(), f.schema());
        assert_eq!(
            r.buckets().collect::<Vec<_>>(),
            f.buckets().collect::<Vec<_>>()
        );
        // The full u64 range at the coarsest schemas still fits a small bound.
        let mut tiny = NativeHistogram::new(3, MIN_MAX_BUCKETS);
        for v in [1, u64::MAX, 1 << 32] {
            tiny.observe(v);
        }
        assert!(tiny.bucket_span() <= MIN_MAX_BUCKETS);
        assert_eq!(tiny.schema(), -4);
    }

    #[test]
    fn merging_keeps_every_value_in_its_coarser_bucket() {
        let mut h = NativeHistogram::new(3, 20);
        let values: Vec<u64> = (0..200).map(|k| 1 + k * k * 37).collect();
        values.iter().for_each(|&v| h.observe(v));
        assert!(h.schema() < 3);
        let mut expected = std::collections::BTreeMap::new();
        for &v in &values {
            *expected
                .entry(bucket_index(v as f64, h.schema()))
                .or_insert(0u64) += 1;
        }
        assert_eq!(
            h.buckets().collect::<Vec<_>>(),
            expected.into_iter().collect::<Vec<_>>()
        );
    }

    /// A histogram of `values` at `schema`, bound wide enough to keep that schema.
    fn of(schema: i8, values: &[u64]) -> NativeHistogram {
        let mut h = NativeHistogram::new(schema, 1 << 12);
        values.iter().for_each(|&v| h.observe(v));
        h
    }

    #[test]
    fn histogram_quantile_is_promqls_interpolation_on_known_values() {
        // Schema 0: (2,4] holds 3, 3, 4; (4,8] holds 5..=8; (64,128] holds 100.
        let h = of(0, &[3, 3, 4, 5, 6, 7, 8, 100]);
        let q = |q| h.histogram_quantile(q).unwrap();
        // rank 2 of 3 in (2,4]: 2 + 2·2/3.
        assert!((q(0.25) - (2.0 + 2.0 * 2.0 / 3.0)).abs() < 1e-12);
        // rank 4: the first of 4 in (4,8]: 4 + 4·1/4 = 5.
        assert_eq!(q(0.5), 5.0);
        // rank 7.2: 0.2 into the one observation of (64,128]: 64 + 64·0.2.
        assert!((q(0.9) - 76.8).abs() < 1e-9);
        assert_eq!(q(1.0), 128.0);
        assert_eq!(q(0.0), 2.0);
        // rank 3 exactly: the upper bound of the bucket that reaches it.
        assert_eq!(q(3.0 / 8.0), 4.0);
        assert_eq!(h.histogram_quantile(-0.5), Some(f64::NEG_INFINITY));
        assert_eq!(h.histogram_quantile(1.5), Some(f64::INFINITY));
        assert_eq!(h.histogram_quantile(f64::NAN), None);
        assert_eq!(NativeHistogram::default().histogram_quantile(0.5), None);
        // Schema 3: 100 is alone in (2^(53/8), 2^(54/8)]; the median of one observation is
        // the middle of its bucket.
        let one = of(3, &[100]);
        let (l, u) = (upper_bound(53, 3), upper_bound(54, 3));
        assert!((one.histogram_quantile(0.5).unwrap() - (l + u) / 2.0).abs() < 1e-12);
        // The zero bucket spans (0, threshold] beside positive buckets.
        let zeros = of(0, &[0, 0, 0, 8]);
        assert_eq!(
            zeros.histogram_quantile(0.5).unwrap(),
            ZERO_THRESHOLD * 2.0 / 3.0
        );
        assert_eq!(zeros.histogram_quantile(1.0).unwrap(), 8.0);
        // Only zeros: (-threshold, threshold].
        assert_eq!(of(0, &[0, 0]).histogram_quantile(0.5).unwrap(), 0.0);
    }

    #[test]
    fn sparse_form_round_trips_and_bad_forms_are_refused() {
        let h = of(3, &[0, 1, 1, 2, 3, 1024, 1 << 40]);
        let (spans, deltas) = h.spans_and_deltas();
        let back =
            NativeHistogram::from_sparse(3, h.zero_count(), h.count(), h.sum(), &spans, &deltas)
                .unwrap();
        assert_eq!(
            back.buckets().collect::<Vec<_>>(),
            h.buckets().collect::<Vec<_>>()
        );
        assert_eq!(
            (back.count(), back.sum(), back.zero_count()),
            (7, h.sum(), 1)
        );
        assert_eq!(back.schema(), 3);
        assert!(back.max_buckets() >= back.bucket_span());
        // Empty buckets inside a span (as other encoders send them) are kept out.
        let gappy = NativeHistogram::from_sparse(0, 0, 2, 9, &[(-1, 4)], &[1, -1, 0, 1]).unwrap();
        assert_eq!(gappy.buckets().collect::<Vec<_>>(), [(-1, 1), (2, 1)]);
        assert_eq!(gappy.bucket_span(), 4);
        for (schema, spans, deltas) in [
            (9, vec![(0, 1)], vec![1]),
            (-5, vec![(0, 1)], vec![1]),
            (3, vec![(0, 2)], vec![1]),
            (3, vec![(0, 2)], vec![1, -2]),
            (3, vec![(0, 1), (1 << 30, 1)], vec![1, 0]),
        ] {
            assert!(
                NativeHistogram::from_sparse(schema, 0, 1, 1, &spans, &deltas).is_err(),
                "{schema} {spans:?} {deltas:?}"
            );
        }
    }

    #[test]
    fn a_merge_is_the_histogram_of_both_at_the_coarser_schema() {
        let a_values = [1, 5, 100, 1000, 0];
        let b_values = [7, 3000, 1 << 20];
        let (a, b) = (of(3, &a_values), of(1, &b_values));
        let mut m = a.clone();
        m.merge(&b);
        let all: Vec<u64> = a_values.iter().chain(&b_values).copied().collect();
        let expected = of(1, &all);
        assert_eq!(m.schema(), 1);
        assert_eq!(
            m.buckets().collect::<Vec<_>>(),
            expected.buckets().collect::<Vec<_>>()
        );
        assert_eq!(
            (m.count(), m.sum(), m.zero_count()),
            (expected.count(), expected.sum(), 1)
        );
        // The other way round, the same.
        let mut m2 = b.clone();
        m2.merge(&a);
        assert_eq!(
            m2.buckets().collect::<Vec<_>>(),
            m.buckets().collect::<Vec<_>>()
        );
        // Merging into an empty histogram (the default schema) lowers it to the other's.
        let mut e = NativeHistogram::default();
        e.merge(&b);
        assert_eq!((e.schema(), e.count()), (1, 3));
        assert_eq!(
            e.buckets().collect::<Vec<_>>(),
            b.buckets().collect::<Vec<_>>()
        );
        // Far apart spans: the schema drops further, so the total keeps the bound.
        let (mut far, mut high) = (NativeHistogram::default(), NativeHistogram::default());
        far.observe(1);
        high.observe(1 << 40);
        far.merge(&high);
        assert!(far.schema() < 3, "{far:?}");
        assert!(far.bucket_span() <= DEFAULT_MAX_BUCKETS);
        assert_eq!(far.buckets().map(|(_, n)| n).sum::<u64>(), 2);
        // The node's quantiles are the union's, not an average of the ranks'.
        let (slow, fast) = (of(3, &[1000; 10]), of(3, &[10; 30]));
        let mut node = slow.clone();
        node.merge(&fast);
        let p50 = node.histogram_quantile(0.5).unwrap();
        assert!(p50 < 11.0, "{p50}");
    }

    #[test]
    fn since_is_the_increase_and_a_reset_restarts_it() {
        let mut before = NativeHistogram::new(3, 40);
        for v in [0, 5, 100, 1000] {
            before.observe(v);
        }
        let mut now = before.clone();
        for v in [7, 1 << 30, 0, 100] {
            now.observe(v);
        }
        assert!(now.schema() < before.schema());
        let d = now.since(&before);
        assert_eq!(
            (d.count(), d.sum(), d.zero_count(), d.schema()),
            (4, 7 + (1 << 30) + 100, 1, now.schema())
        );
        let expected = of(now.schema(), &[7, 1 << 30, 100]);
        assert_eq!(
            d.buckets().collect::<Vec<_>>(),
            expected.buckets().collect::<Vec<_>>()
        );
        assert_eq!(d.bucket_span(), expected.bucket_span(), "trimmed");
        assert_eq!(now.since(&now).count(), 0);
        assert_eq!(now.since(&now).histogram_quantile(0.5), None);
        // Reset: the exporter restarted with fewer observations, or at a finer schema, or
        // a bucket went down.
        let fresh = of(3, &[42]);
        assert_eq!(fresh.since(&now), fresh);
        assert_eq!(
            of(3, &[5, 5, 5, 5, 5, 5, 5, 5, 5]).since(&before).count(),
            9
        );
        let moved = of(3, &[0, 1, 1, 1, 1, 1]);
        assert_eq!(moved.since(&before), moved);
    }

    #[test]
    fn a_histogram_rebuilt_from_its_parts_is_the_same_and_bad_parts_are_refused() {
        let mut h = NativeHistogram::new(3, 40);
        for v in [0, 5, 100, 1000, 1 << 20] {
            h.observe(v);
        }
        let (offset, dense) = h.dense();
        let part = |count: u64, buckets: &[u64], schema: i8, max: usize| {
            NativeHistogram::from_dense(
                schema,
                max,
                h.zero_count(),
                count,
                h.sum(),
                offset,
                buckets,
            )
        };
        assert_eq!(part(h.count(), dense, h.schema(), 40), Some(h.clone()));
        assert_eq!(part(h.count() + 1, dense, h.schema(), 40), None);
        assert_eq!(part(h.count(), dense, 9, 40), None);
        assert_eq!(part(h.count(), dense, h.schema(), dense.len() - 1), None);
        let mut padded = dense.to_vec();
        padded.push(0);
        assert_eq!(part(h.count(), &padded, h.schema(), 40), None);
        let empty = NativeHistogram::default();
        assert_eq!(
            NativeHistogram::from_dense(3, 160, 0, 0, 0, 0, &[]),
            Some(empty)
        );
    }

    #[test]
    fn a_merge_is_the_histogram_of_both_value_sets_at_the_lower_schema() {
        let a_values: Vec<u64> = (0..300).map(|k| 1 + k * 7).collect();
        let b_values: Vec<u64> = (0..300)
            .map(|k| (k * k * 1013) % 5_000_000)
            .chain([1, 4_999_999])
            .collect();
        let (mut a, mut b) = (NativeHistogram::new(3, 160), NativeHistogram::new(3, 160));
        a_values.iter().for_each(|&v| a.observe(v));
        b_values.iter().for_each(|&v| b.observe(v));
        assert!(
            b.schema() < a.schema(),
            "b spans more: {} {}",
            a.schema(),
            b.schema()
        );
        let mut merged = a.clone();
        merged.merge(&b);
        assert_eq!(merged.schema(), b.schema());
        assert_eq!(merged.count(), a.count() + b.count());
        assert_eq!(merged.sum(), a.sum() + b.sum());
        assert_eq!(merged.zero_count(), b.zero_count());
        let mut expected = std::collections::BTreeMap::new();
        for &v in a_values.iter().chain(&b_values).filter(|&&v| v > 0) {
            *expected
                .entry(bucket_index(v as f64, merged.schema()))
                .or_insert(0u64) += 1;
        }
        assert_eq!(
            merged.buckets().collect::<Vec<_>>(),
            expected.into_iter().collect::<Vec<_>>()
        );
        // Merging the other way gives the same histogram.
        let mut other_way = b.clone();
        other_way.merge(&a);
        assert_eq!(other_way, merged);
        // Two histograms far apart: the sum spans more than the bound, so the schema drops.
        let (mut low, mut high) = (NativeHistogram::new(3, 20), NativeHistogram::new(3, 20));
        low.observe(1);
        high.observe(1 << 40);
        low.merge(&high);
        assert!(low.bucket_span() <= 20 && low.schema() < 3, "{low:?}");
        assert_eq!(low.buckets().map(|(_, n)| n).sum::<u64>(), 2);
    }

    #[test]
    fn both_quantile_estimates_are_within_their_bounds() {
        let mut h = NativeHistogram::default();
        let mut values: Vec<u64> = (1..=5000u64).map(|k| k * k % 100_003 + 1).collect();
        values.iter().for_each(|&v| h.observe(v));
        values.sort_unstable();
        for q in [0.01, 0.5, 0.9, 0.99, 1.0] {
            let exact = values[((q * values.len() as f64).ceil() as usize).max(1) - 1] as f64;
            let estimate = h.quantile(q).unwrap();
            let error = (estimate - exact).abs() / exact;
            assert!(
                error <= relative_error_bound(3),
                "q={q} {estimate} vs {exact}"
            );
            // PromQL's interpolation inside the same bucket: within the bucket's width.
            let interpolated = h.histogram_quantile(q).unwrap();
            let error = (interpolated - exact).abs() / exact;
            assert!(
                error <= bucket_width_bound(3),
                "q={q} {interpolated} vs {exact}"
            );
        }
    }
}
