//! The unit tests of the native histogram (`NativeHistogram`, in `native/mod.rs`).

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
    let back = NativeHistogram::from_sparse(3, h.zero_count(), h.count(), h.sum(), &spans, &deltas)
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
        NativeHistogram::from_dense(schema, max, h.zero_count(), count, h.sum(), offset, buckets)
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
