//! Native histograms through `prometheus_mp` (`NIXL_TELEMETRY_NATIVE_HISTOGRAMS=true` in every
//! rank): three rank processes keep them in their stores' native-histograms extension, the
//! elected rank answers a protobuf scraper with each rank's and the node total's (text stays
//! the default, and the same page), and a real Prometheus (Debian's 2.42,
//! `--enable-feature=native-histograms`) scraping the one target gives `histogram_quantile`s
//! within the schema's bound of the exact quantiles of the transfers each rank recorded, and of
//! all of them for the node total.

mod common;

use std::time::Duration;

use common::{
    child_main, free_port, pids, poll, rank_transfers, scrape_as, spawn_rank, try_scrape, Proc,
    RankSpec, ACCEPT_PROTOBUF, TRANSFERS,
};
use nixl_telemetry_series::native::{bucket_width_bound, DEFAULT_SCHEMA};
use nixl_telemetry_series::protobuf;
use nixl_telemetry_test_support::prometheus::Prometheus;

/// The child processes' entry point (see `common::child_main`).
#[test]
fn child() {
    child_main();
}

const RANKS: usize = 3;
/// Transfers per rank.
const N: usize = 2000;

#[test]
fn histogram_quantile_over_the_nodes_native_histograms_is_within_the_schemas_bound() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let port = free_port();
    let shares: Vec<String> = (0..RANKS).map(|r| format!("{r}/{RANKS}/{N}")).collect();
    let _ranks: Vec<Proc> = (0..RANKS)
        .map(|r| {
            spawn_rank(&RankSpec {
                dir: &dir,
                port,
                agent: &format!("rank{r}"),
                local_rank: &r.to_string(),
                bytes: 0,
                extra: &[
                    ("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", "true"),
                    ("NIXL_TELEMETRY_MP_AGGREGATE", "sum"),
                    (TRANSFERS, &shares[r]),
                ],
            })
        })
        .collect();
    // Text stays the default: every rank's transfers, and no native-only family.
    let page = poll(Duration::from_secs(20), "every rank's transfers", || {
        try_scrape(port).filter(|s| {
            pids(s).len() == RANKS
                && s.samples.iter().any(|x| {
                    x.name == "agent_xfer_time_us_count"
                        && x.label("pid").is_none()
                        && x.value == (RANKS * N) as f64
                })
        })
    });
    assert!(!page.body.contains("request_size"), "{}", page.body);

    // The protobuf exposition: each rank and the node total with native buckets.
    let (content_type, body) = scrape_as(port, ACCEPT_PROTOBUF);
    assert_eq!(content_type, protobuf::CONTENT_TYPE);
    let families = protobuf::decode(&body).unwrap();
    let schemas = |name: &str| -> Vec<(Option<String>, i32, u64)> {
        let f = families.iter().find(|f| f.name == name).unwrap();
        f.metric
            .iter()
            .map(|m| {
                let h = m.histogram.as_ref().unwrap();
                assert!(h.zero_threshold > 0.0, "{name}: no native buckets");
                let rank = m
                    .label
                    .iter()
                    .find(|l| l.name == "local_rank")
                    .map(|l| l.value.clone());
                (rank, h.schema, h.sample_count)
            })
            .collect()
    };
    let time_schemas = schemas("agent_xfer_time_us");
    let size_schemas = schemas("agent_tx_request_size_bytes");
    println!("schemas (local_rank, schema, count): {time_schemas:?} {size_schemas:?}");
    assert_eq!(time_schemas.len(), RANKS + 1);
    assert_eq!(size_schemas.len(), RANKS + 1);
    // These transfers span fewer than 160 buckets of schema 3: no rank, nor the total, lowered
    // its schema, so every estimate must be within schema 3's bound.
    assert!(time_schemas
        .iter()
        .chain(&size_schemas)
        .all(|s| s.1 == i32::from(DEFAULT_SCHEMA)));
    let (time_bound, size_bound) = (
        bucket_width_bound(DEFAULT_SCHEMA),
        bucket_width_bound(DEFAULT_SCHEMA),
    );

    let prom = Prometheus::start_native(scratch.path(), Some(port));
    prom.wait_for_value(
        "histogram_count(agent_xfer_time_us{pid=\"\"})",
        (RANKS * N) as f64,
    );
    prom.wait_for_value(
        "histogram_count(agent_tx_request_size_bytes{pid=\"\"})",
        (RANKS * N) as f64,
    );
    let mut all_times = Vec::new();
    let mut all_sizes = Vec::new();
    for r in 0..RANKS {
        let transfers = rank_transfers(r, RANKS, N);
        let mut times: Vec<u64> = transfers.iter().map(|t| t.0).collect();
        let mut sizes: Vec<u64> = transfers.iter().map(|t| t.1).collect();
        all_times.extend_from_slice(&times);
        all_sizes.extend_from_slice(&sizes);
        times.sort_unstable();
        sizes.sort_unstable();
        let rank = format!("local_rank=\"{r}\"");
        prom.wait_for_value(
            &format!("histogram_count(agent_xfer_time_us{{{rank}}})"),
            N as f64,
        );
        prom.assert_native_quantiles(
            &format!("rank {r} time (µs)"),
            &format!("agent_xfer_time_us{{{rank}}}"),
            &times,
            time_bound,
        );
        prom.assert_native_quantiles(
            &format!("rank {r} size (B)"),
            &format!("agent_tx_request_size_bytes{{{rank}}}"),
            &sizes,
            size_bound,
        );
    }
    all_times.sort_unstable();
    all_sizes.sort_unstable();
    prom.assert_native_quantiles(
        "node total time (µs)",
        "agent_xfer_time_us{pid=\"\"}",
        &all_times,
        time_bound,
    );
    prom.assert_native_quantiles(
        "node total size (B)",
        "agent_tx_request_size_bytes{pid=\"\"}",
        &all_sizes,
        size_bound,
    );
    // The node total is what Prometheus's own sum of the ranks' histograms gives.
    for q in [0.5, 0.99] {
        let total = prom.one_value(&format!(
            "histogram_quantile({q}, agent_xfer_time_us{{pid=\"\"}})"
        ));
        let summed = prom.one_value(&format!(
            "histogram_quantile({q}, sum(agent_xfer_time_us{{pid!=\"\"}}))"
        ));
        assert_eq!(total, summed, "p{q}");
    }
}
