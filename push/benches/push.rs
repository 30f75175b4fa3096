//! Criterion benches of one push for 8 ranks' series (one agent each, after a full default-size
//! flush): building the request from the snapshots, encoding and compressing it, for both
//! protocols (remote-write with snappy; OTLP without and with gzip), as the push loop builds it
//! (remote-write: with the encoder it keeps between pushes), and the old ways for comparison
//! (`remote_write_8_ranks_from_nothing`, `otlp_8_ranks_through_the_message`). The size of each
//! body on the wire is printed once per case (`wire bytes`).
//!
//! Beside them, in the same run, the floor they are held to: encoding the same 8 ranks' series
//! (same labels) as the text exposition page, as the node scrape does. After criterion's
//! cases, the builds are timed again alternating (text, remote-write, OTLP, snappy alone on the
//! remote-write protobuf, text, ..., batches of 20 builds, 200 rounds) so that a load on the
//! machine weighs on all alike, and the median ratios to the text encode are printed (`ratio to
//! text`).
//!
//! Run with `cargo bench -p nixl-telemetry-push --bench push`.

#[path = "../tests/otlp_oracle/mod.rs"]
mod otlp_oracle;

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_push::otlp::{self, OwnPoints, Row, Temporality};
use nixl_telemetry_push::remote_write::{self, OwnSeries};
use nixl_telemetry_push::PushStatsSnapshot;
use nixl_telemetry_series::native::{DEFAULT_MAX_BUCKETS, DEFAULT_SCHEMA};
use nixl_telemetry_series::text;
use nixl_telemetry_series::{AgentSeries, AgentSnapshot, Buckets};

/// Ranks on the node.
const RANKS: usize = 8;

/// 8 ranks' snapshots after 1,024 transfers each of 4 KiB (4 KiB to 64 MiB when `spread`), with
/// their labels (and native histograms when `native`).
fn ranks(native: bool, spread: bool) -> Vec<(AgentSnapshot, Vec<(String, String)>)> {
    (0..RANKS)
        .map(|rank| {
            let series =
                AgentSeries::new(&format!("agent-{rank}"), "bench-host", Buckets::default())
                    .with_native_histograms(native, DEFAULT_SCHEMA, DEFAULT_MAX_BUCKETS);
            let batch: Vec<Event> = (0..1024u64)
                .flat_map(|i| {
                    [
                        Event::new(EventType::AgentXferPostTime, 3 + i % 40),
                        Event::new(EventType::AgentXferTime, 5 + (i * 37) % 20_000),
                        Event::new(
                            EventType::AgentTxBytes,
                            if spread { 4096 << (i % 15) } else { 4096 },
                        ),
                        Event::new(EventType::AgentTxRequestsNum, 1),
                    ]
                })
                .collect();
            series.apply(&batch);
            let labels = vec![
                ("agent_name".to_owned(), format!("agent-{rank}")),
                ("hostname".to_owned(), "bench-host".to_owned()),
                ("local_rank".to_owned(), rank.to_string()),
            ];
            (series.snapshot(), labels)
        })
        .collect()
}

fn pairs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

const PUSHES: PushStatsSnapshot = PushStatsSnapshot {
    attempts: 10,
    successes: 9,
    failures: 1,
    bytes: 60_000,
    exits: 0,
};

/// The 8 ranks' series and their labels, as each build takes them.
struct Setup {
    ranks: Vec<(AgentSnapshot, Vec<(String, String)>)>,
}

impl Setup {
    fn new(native: bool, spread: bool) -> Setup {
        Setup {
            ranks: ranks(native, spread),
        }
    }

    fn labels(&self) -> Vec<Vec<(&str, &str)>> {
        self.ranks.iter().map(|(_, l)| pairs(l)).collect()
    }

    /// The remote-write rows: each snapshot with all its `labels`.
    fn remote_write_rows<'a>(
        &'a self,
        labels: &'a [Vec<(&'a str, &'a str)>],
    ) -> Vec<(&'a AgentSnapshot, &'a [(&'a str, &'a str)])> {
        self.ranks
            .iter()
            .zip(labels)
            .map(|((s, _), l)| (s, l.as_slice()))
            .collect()
    }

    /// The OTLP rows: each snapshot with the first of its `labels` (`agent_name`) as attribute.
    fn otlp_rows<'a>(&'a self, labels: &'a [Vec<(&'a str, &'a str)>]) -> Vec<Row<'a>> {
        self.ranks
            .iter()
            .zip(labels)
            .map(|((snapshot, _), labels)| Row {
                snapshot,
                attributes: &labels[..1],
                start_ns: 1_700_000_000_000_000_000,
            })
            .collect()
    }
}

/// The text page of the ranks, with the labels the push gives them: the floor.
fn text_page(
    ranks: &[(AgentSnapshot, Vec<(String, String)>)],
    labels: &[Vec<(&str, &str)>],
    out: &mut String,
) {
    let rows: Vec<text::Row> = ranks
        .iter()
        .zip(labels)
        .map(|((snapshot, _), labels)| text::Row {
            snapshot,
            labels,
            kinds: &text::ALL_KINDS,
        })
        .collect();
    out.clear();
    text::encode_rows_into(&rows, out);
}

/// One remote-write body of the ranks (snappy), as a push loop builds it (`encoder` kept
/// between pushes), or from nothing (`None`).
fn remote_write_body(
    rows: &[(&AgentSnapshot, &[(&str, &str)])],
    encoder: Option<&mut remote_write::Encoder>,
) -> Vec<u8> {
    let own = OwnSeries {
        labels: &[("hostname", "bench-host"), ("pusher", "serve")],
        pushes: &PUSHES,
    };
    match encoder {
        Some(e) => e.body(rows, Some(own), 1_700_000_000_000).bytes,
        None => remote_write::body(rows, Some(own), 1_700_000_000_000).bytes,
    }
}

/// One OTLP body of the ranks, encoded as a push loop does, or through the request message
/// (`message`: the tests' oracle, built from the official messages and encoded by prost).
fn otlp_body(rows: &[Row], resource: &[otlp::Attribute], gzip: bool, message: bool) -> Vec<u8> {
    let own = OwnPoints {
        attributes: &[("pusher", "serve")],
        pushes: &PUSHES,
        start_ns: 1_700_000_000_000_000_000,
    };
    let now = 1_700_000_015_000_000_000;
    if message {
        let request = otlp_oracle::request(rows, Some(own), resource, Temporality::Cumulative, now);
        return otlp::body(prost::Message::encode_to_vec(&request), gzip).bytes;
    }
    let mut raw = Vec::with_capacity(24 * 1024);
    otlp::encode(
        rows,
        Some(own),
        resource,
        Temporality::Cumulative,
        now,
        &mut raw,
    );
    otlp::body(raw, gzip).bytes
}

/// The bytes on the wire of one push of 8 ranks without and with native histograms (remote-write
/// native histogram samples; OTLP exponential histograms), the request sizes spread from 4 KiB
/// to 64 MiB, printed (`native wire bytes`).
fn native_sizes() {
    for native in [false, true] {
        let setup = Setup::new(native, true);
        let labels = setup.labels();
        let rw_rows = setup.remote_write_rows(&labels);
        let otlp_rows = setup.otlp_rows(&labels);
        let resource = otlp::resource(&[("service.name".into(), "nixl".into())], "bench-host");
        println!(
            "native wire bytes, native histograms {}: remote_write {}, otlp {}, otlp gzip {}",
            if native { "on" } else { "off" },
            remote_write_body(&rw_rows, None).len(),
            otlp_body(&otlp_rows, &resource, false, false).len(),
            otlp_body(&otlp_rows, &resource, true, false).len(),
        );
    }
}

fn pushes(c: &mut Criterion) {
    native_sizes();
    let setup = Setup::new(false, false);
    let labels = setup.labels();
    let rw_rows = setup.remote_write_rows(&labels);
    let otlp_rows = setup.otlp_rows(&labels);
    let resource = otlp::resource(&[("service.name".into(), "nixl".into())], "bench-host");
    let mut page = String::new();
    text_page(&setup.ranks, &labels, &mut page);
    println!("text page 8 ranks: {} bytes", page.len());
    let mut encoder = remote_write::Encoder::new();
    println!(
        "remote_write 8 ranks: {} wire bytes (snappy)",
        remote_write_body(&rw_rows, Some(&mut encoder)).len()
    );
    println!(
        "otlp_8_ranks: {} wire bytes",
        otlp_body(&otlp_rows, &resource, false, false).len()
    );
    println!(
        "otlp_gzip_8_ranks: {} wire bytes",
        otlp_body(&otlp_rows, &resource, true, false).len()
    );
    let mut g = c.benchmark_group("push");
    g.bench_function("text_page_8_ranks", |b| {
        b.iter(|| text_page(black_box(&setup.ranks), &labels, &mut page))
    });
    g.bench_function("remote_write_8_ranks", |b| {
        b.iter(|| black_box(remote_write_body(black_box(&rw_rows), Some(&mut encoder))))
    });
    g.bench_function("remote_write_8_ranks_from_nothing", |b| {
        b.iter(|| black_box(remote_write_body(black_box(&rw_rows), None)))
    });
    for gzip in [false, true] {
        let name = if gzip {
            "otlp_gzip_8_ranks"
        } else {
            "otlp_8_ranks"
        };
        g.bench_function(name, |b| {
            b.iter(|| black_box(otlp_body(black_box(&otlp_rows), &resource, gzip, false)))
        });
    }
    g.bench_function("otlp_8_ranks_through_the_message", |b| {
        b.iter(|| black_box(otlp_body(black_box(&otlp_rows), &resource, false, true)))
    });
    g.finish();

    // Alternating: each round times a batch of each build in turn.
    const ROUNDS: usize = 200;
    const BATCH: u32 = 20;
    // What remote-write cannot avoid: compressing its protobuf with snappy.
    let raw = {
        use prost::Message;
        let own = OwnSeries {
            labels: &[("hostname", "bench-host"), ("pusher", "serve")],
            pushes: &PUSHES,
        };
        remote_write::write_request(&rw_rows, Some(own), 1_700_000_000_000).encode_to_vec()
    };
    println!(
        "remote_write 8 ranks: {} bytes of protobuf before snappy",
        raw.len()
    );
    let mut snappy = snap::raw::Encoder::new();
    let mut compressed = vec![0; snap::raw::max_compress_len(raw.len())];
    let mut times: [Vec<f64>; 4] = Default::default();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..BATCH {
            text_page(black_box(&setup.ranks), &labels, &mut page);
        }
        times[0].push(t.elapsed().as_secs_f64() / f64::from(BATCH));
        let t = Instant::now();
        for _ in 0..BATCH {
            black_box(remote_write_body(black_box(&rw_rows), Some(&mut encoder)));
        }
        times[1].push(t.elapsed().as_secs_f64() / f64::from(BATCH));
        let t = Instant::now();
        for _ in 0..BATCH {
            black_box(otlp_body(black_box(&otlp_rows), &resource, false, false));
        }
        times[2].push(t.elapsed().as_secs_f64() / f64::from(BATCH));
        let t = Instant::now();
        for _ in 0..BATCH {
            black_box(snappy.compress(black_box(&raw), &mut compressed).unwrap());
        }
        times[3].push(t.elapsed().as_secs_f64() / f64::from(BATCH));
    }
    let ratios =
        |i: usize| -> Vec<f64> { times[i].iter().zip(&times[0]).map(|(x, t)| x / t).collect() };
    let snappy_us = median(times[3].clone()) * 1e6;
    let (text_us, rw_us, otlp_us) = (
        median(times[0].clone()) * 1e6,
        median(times[1].clone()) * 1e6,
        median(times[2].clone()) * 1e6,
    );
    println!("alternating, {ROUNDS} rounds of {BATCH} builds each (median per build):");
    println!("  text page     {text_us:7.1} µs");
    println!(
        "  remote-write  {rw_us:7.1} µs  ratio to text {:.2} (median of the rounds' ratios)",
        median(ratios(1))
    );
    println!(
        "  otlp          {otlp_us:7.1} µs  ratio to text {:.2} (median of the rounds' ratios)",
        median(ratios(2))
    );
    println!(
        "  snappy alone  {snappy_us:7.1} µs  ratio to text {:.2} (remote-write's floor)",
        median(ratios(3))
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

criterion_group!(benches, pushes);
criterion_main!(benches);
