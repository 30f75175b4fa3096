//! The transfers of the native-histogram accuracy tests: a deterministic, heavy-tailed set of
//! transfer times and sizes, and exact quantiles to compare estimates with.

/// A small deterministic generator (xorshift64*), uniform in (0, 1).
pub struct Rng(pub u64);

impl Rng {
    /// The next value, uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// `n` transfers as (time in µs, bytes): times log-normal (median 200 µs, sigma 0.8) with a 5%
/// Pareto tail (alpha 1.2, from 2 ms); sizes log-uniform from 4 KiB to 64 MiB. The same `n`
/// gives the same transfers.
pub fn heavy_tailed(n: usize) -> Vec<(u64, u64)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|_| {
            let (u1, u2) = (rng.uniform(), rng.uniform());
            let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            let t = if rng.uniform() < 0.05 {
                2000.0 * rng.uniform().powf(-1.0 / 1.2)
            } else {
                200.0 * (0.8 * normal).exp()
            };
            let time = (t.round() as u64).clamp(1, 3_600_000_000);
            let size = (4096.0 * 2f64.powf(14.0 * rng.uniform())).round() as u64;
            (time, size)
        })
        .collect()
}

/// Records `transfers` (time in µs, bytes) through `c`, each a TX when `tx(i)` (else an RX)
/// with a post time of a quarter of its time, flushing after every 500 and at the end.
pub fn record(
    c: &nixl_telemetry_core::Collector,
    transfers: &[(u64, u64)],
    tx: impl Fn(usize) -> bool,
) {
    for (i, &(time, size)) in transfers.iter().enumerate() {
        c.add_xfer_stats(time, tx(i), size, time / 4);
        if i % 500 == 499 {
            c.flush();
        }
    }
    c.flush();
}

/// The exact `q`-quantile of sorted values: the observation of rank `ceil(q·n)`.
pub fn exact_quantile(sorted: &[u64], q: f64) -> f64 {
    sorted[((q * sorted.len() as f64).ceil() as usize).max(1) - 1] as f64
}

/// The relative error of `estimate` against `exact`.
pub fn relative_error(estimate: f64, exact: f64) -> f64 {
    (estimate - exact).abs() / exact
}

/// Each of the median, p90 and p99 of `sorted` (the observed values, sorted) against
/// `estimate(q)` within `bound` (relative): the quantiles as (q, exact, estimate), each printed
/// with its error under the name `what`.
pub fn assert_quantiles(
    what: &str,
    sorted: &[u64],
    bound: f64,
    mut estimate: impl FnMut(f64) -> f64,
) -> Vec<(f64, f64, f64)> {
    [0.5, 0.9, 0.99]
        .into_iter()
        .map(|q| {
            let exact = exact_quantile(sorted, q);
            let got = estimate(q);
            let error = relative_error(got, exact);
            println!(
                "{what} p{:<4} exact {exact:>12}  estimate {got:>14.1} ({:.2}%)",
                q * 100.0,
                100.0 * error
            );
            assert!(
                error <= bound,
                "{what} p{q}: {got} vs {exact} (bound {bound})"
            );
            (q, exact, got)
        })
        .collect()
}
