//! Native histograms at the ends of their index range: a histogram read from a store or a
//! scraped page may hold any index the words or the spans say. Indexes no float64 value can
//! have are refused (so a bucket near 2^31 never reaches a node total, where lowering its
//! schema wrapped it: +524288 landed at -524288), and at the ends of the range that remains,
//! lowering a schema, merging (a node total), taking an increase and a quantile never wrap an
//! index. Index `i` of schema `s` lies in bucket `ceil(i / 2^d)` of schema `s - d`, worked out
//! here in 64 bits.

use nixl_telemetry_series::native::{index_range, NativeHistogram, MAX_SCHEMA, MIN_SCHEMA};

/// `ceil(i / 2^shift)`, in 64 bits.
fn lowered(i: i32, shift: i32) -> i32 {
    let i = i64::from(i);
    i32::try_from((i + (1i64 << shift) - 1) >> shift).expect("in range")
}

/// The ends of `schema`'s index range, the indexes next to them, and those around 0.
fn edges(schema: i8) -> [i32; 7] {
    let (lo, hi) = index_range(schema);
    [lo, lo + 1, -1, 0, 1, hi - 1, hi]
}

/// One bucket of `count` at `index`.
fn one(schema: i8, index: i32, count: u64) -> Option<NativeHistogram> {
    NativeHistogram::from_dense(schema, 160, 0, count, count, index, &[count])
}

#[test]
fn the_range_is_that_of_float64_values() {
    assert_eq!(index_range(8), (-274_944, 262_144));
    assert_eq!(index_range(3), (-8592, 8192));
    assert_eq!(index_range(0), (-1074, 1024));
    assert_eq!(index_range(-4), (-67, 64));
    // Observed values stay inside it: 1 and u64::MAX at the finest schema.
    let mut h = NativeHistogram::new(MAX_SCHEMA, 1 << 20);
    h.observe(1);
    h.observe(u64::MAX);
    let (lo, hi) = index_range(MAX_SCHEMA);
    assert!(h.buckets().all(|(i, _)| lo <= i && i <= hi));
}

#[test]
fn indexes_no_value_can_have_are_refused_not_wrapped() {
    for schema in MIN_SCHEMA..=MAX_SCHEMA {
        let (lo, hi) = index_range(schema);
        for past in [i32::MIN, lo - 1, hi + 1, i32::MAX - 1] {
            assert_eq!(
                one(schema, past, 1),
                None,
                "index {past} at schema {schema}"
            );
            let sparse =
                NativeHistogram::from_sparse(i32::from(schema), 0, 1, 1, &[(past, 1)], &[1]);
            assert!(sparse.is_err(), "index {past} at schema {schema}");
        }
        // A span that starts inside and runs past the end.
        let run =
            NativeHistogram::from_sparse(i32::from(schema), 0, 3, 3, &[(hi - 1, 3)], &[1, 0, 0]);
        assert!(run.is_err(), "{run:?}");
        // Two buckets at the ends: kept.
        assert!(
            NativeHistogram::from_dense(schema, 1 << 20, 0, 2, 2, lo, &dense_ends(lo, hi))
                .is_some()
        );
    }
}

/// Dense counts from `lo` to `hi` with 1 at both ends.
fn dense_ends(lo: i32, hi: i32) -> Vec<u64> {
    let mut counts = vec![0; (hi - lo + 1) as usize];
    counts[0] = 1;
    *counts.last_mut().unwrap() = 1;
    counts
}

#[test]
fn lowering_a_schema_at_the_ends_never_wraps_an_index() {
    for fine in MIN_SCHEMA..=MAX_SCHEMA {
        for coarse in MIN_SCHEMA..=fine {
            let shift = i32::from(fine) - i32::from(coarse);
            for i in edges(fine) {
                // Merged into an empty histogram of the coarser schema: brought down to it.
                let mut total = NativeHistogram::new(coarse, 160);
                total.merge(&one(fine, i, 3).unwrap());
                assert_eq!(total.schema(), coarse);
                assert_eq!(
                    total.buckets().collect::<Vec<_>>(),
                    [(lowered(i, shift), 3)],
                    "index {i} from schema {fine} to {coarse}"
                );
            }
        }
    }
}

#[test]
fn merging_buckets_at_both_ends_keeps_every_count_in_its_bucket() {
    for schema in [MAX_SCHEMA, 3, 0, MIN_SCHEMA] {
        let (lo, hi) = index_range(schema);
        let (low, high) = (one(schema, lo, 2).unwrap(), one(schema, hi, 5).unwrap());
        for (mut a, b) in [(low.clone(), &high), (high.clone(), &low)] {
            a.merge(b);
            // As far apart as buckets can be: lowered until they fit the bound of 160, which
            // the coarsest schema does; each count where its index lands.
            assert_eq!(a.schema(), MIN_SCHEMA);
            let shift = i32::from(schema) - i32::from(MIN_SCHEMA);
            let (l, h) = (lowered(lo, shift), lowered(hi, shift));
            assert_eq!(a.buckets().collect::<Vec<_>>(), [(l, 2), (h, 5)]);
            assert!(a.bucket_span() <= 160);
            assert_eq!((a.count(), a.sum()), (7, 7));
        }
    }
    // Next to each other at an end: kept at the finer schema, the union fitting the bound.
    let (_, hi) = index_range(MAX_SCHEMA);
    let mut a = one(MAX_SCHEMA, hi - 1, 1).unwrap();
    a.merge(&one(MAX_SCHEMA, hi, 1).unwrap());
    assert_eq!(a.schema(), MAX_SCHEMA);
    assert_eq!(a.buckets().collect::<Vec<_>>(), [(hi - 1, 1), (hi, 1)]);
}

#[test]
fn increases_quantiles_and_the_sparse_form_at_the_ends() {
    let (lo, hi) = index_range(MAX_SCHEMA);
    for i in edges(MAX_SCHEMA) {
        let earlier = one(MAX_SCHEMA, i, 1).unwrap();
        let later = one(MAX_SCHEMA, i, 4).unwrap();
        let increase = later.since(&earlier);
        assert_eq!(increase.buckets().collect::<Vec<_>>(), [(i, 3)]);
        // A bucket at one end never subtracts from one at the other.
        let other = one(MAX_SCHEMA, if i < 0 { hi } else { lo }, 1).unwrap();
        assert_eq!(later.since(&other), later);
        for q in [0.0, 0.5, 1.0] {
            let v = later.quantile(q).unwrap();
            let w = later.histogram_quantile(q).unwrap();
            // The top bucket's upper bound is 2^1024, infinite as a float64: PromQL's
            // interpolation in it is NaN at q = 0, as Prometheus's own is.
            let sane = |x: f64| x.is_nan() || x >= 0.0;
            assert!(sane(v) && sane(w), "index {i} q {q}: {v} {w}");
        }
        let (spans, deltas) = later.spans_and_deltas();
        assert_eq!((spans, deltas), (vec![(i, 1)], vec![4]));
        let back = NativeHistogram::from_sparse(8, 0, 4, 4, &[(i, 1)], &[4]).unwrap();
        assert_eq!(back.buckets().collect::<Vec<_>>(), [(i, 4)]);
    }
}
