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
mod tests;
