//! Every scrape sees each rank between two of its flushes, never in the middle of one: two
//! ranks, each with two threads recording 32 transfers every 50 µs, flushing every millisecond
//! with native histograms on, and 1,000 scrapes of the node in text and 1,000 in protobuf.
//! In every page, for every rank and for the node total, the transfer-time histogram counts as
//! many transfers as the written and read request counters together (a transfer's events are
//! flushed together), and every native histogram's buckets and zero bucket add up to its count.
//! Before store publication was made batch-atomic, 75 of 3,000 pages failed the first check and
//! 121 histograms the second.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{
    child_main, pids, poll, scrape_as, scratch_node, spawn_recording, try_scrape, Proc,
    ACCEPT_PROTOBUF, NATIVE_WITH_TOTALS,
};
use nixl_telemetry_series::protobuf::{self, MetricFamily};
use nixl_telemetry_series::text::Sample;
/// The child processes' entry point (see `common::child_main`).
#[test]
fn child() {
    child_main();
}

const SCRAPES: usize = 1000;

/// The series of a sample: its labels but `le` and `status`, as one string (a rank's have a
/// `pid`, the node total's none).
fn series(labels: &[(String, String)]) -> String {
    labels
        .iter()
        .filter(|(n, _)| n != "le")
        .map(|(n, v)| format!("{n}={v},"))
        .collect()
}

/// The text page's inconsistent series: where `agent_xfer_time_us_count` is not the written
/// and read requests together.
fn text_inconsistencies(samples: &[Sample]) -> Vec<String> {
    let mut by_series: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for s in samples {
        let entry = by_series.entry(series(&s.labels)).or_default();
        match s.name.as_str() {
            "agent_xfer_time_us_count" => entry.0 += s.value,
            "agent_tx_requests_num_total" | "agent_rx_requests_num_total" => entry.1 += s.value,
            _ => {}
        }
    }
    by_series
        .into_iter()
        .filter(|(_, (count, requests))| count != requests)
        .map(|(s, (count, requests))| format!("{s} count {count} requests {requests}"))
        .collect()
}

/// The protobuf page's inconsistencies: a native histogram whose buckets and zero bucket do
/// not add up to its count, or a transfer-time histogram whose count is not the requests.
fn protobuf_inconsistencies(families: &[MetricFamily]) -> Vec<String> {
    let label_pairs = |m: &protobuf::Metric| -> Vec<(String, String)> {
        m.label
            .iter()
            .map(|l| (l.name.clone(), l.value.clone()))
            .collect()
    };
    let mut requests: BTreeMap<String, f64> = BTreeMap::new();
    for f in families.iter().filter(|f| {
        f.name == "agent_tx_requests_num_total" || f.name == "agent_rx_requests_num_total"
    }) {
        for m in &f.metric {
            *requests.entry(series(&label_pairs(m))).or_default() +=
                m.counter.as_ref().unwrap().value;
        }
    }
    let mut bad = Vec::new();
    for f in families {
        for m in &f.metric {
            let Some(h) = m.histogram.as_ref().filter(|h| h.is_native()) else {
                continue;
            };
            let mut bucket = 0i64;
            let native: i64 = h
                .positive_delta
                .iter()
                .map(|d| {
                    bucket += d;
                    bucket
                })
                .sum();
            let series = series(&label_pairs(m));
            if native as u64 + h.zero_count != h.sample_count {
                bad.push(format!(
                    "{} {series}: native {native} + zero {} != count {}",
                    f.name, h.zero_count, h.sample_count
                ));
            }
            if f.name == "agent_xfer_time_us"
                && requests.get(&series) != Some(&(h.sample_count as f64))
            {
                bad.push(format!(
                    "{series}: count {} requests {:?}",
                    h.sample_count,
                    requests.get(&series)
                ));
            }
        }
    }
    bad
}

#[test]
fn scrapes_see_each_rank_between_two_flushes() {
    let (_scratch, dir, port) = scratch_node();
    let ranks: Vec<Proc> = (0..2)
        .map(|r| {
            spawn_recording(
                &dir,
                port,
                &format!("heavy{r}"),
                (2, 32, 50),
                &NATIVE_WITH_TOTALS,
            )
        })
        .collect();
    poll(Duration::from_secs(20), "both ranks on the page", || {
        try_scrape(port).filter(|s| pids(s).len() == 2)
    });
    let (mut text_bad, mut protobuf_bad) = (Vec::new(), Vec::new());
    let mut last_count = 0.0;
    for _ in 0..SCRAPES {
        let page = try_scrape(port).expect("the node's page");
        let bad = text_inconsistencies(&page.samples);
        text_bad.extend(bad);
        last_count = page
            .samples
            .iter()
            .filter(|s| s.name == "agent_xfer_time_us_count" && s.label("pid").is_none())
            .map(|s| s.value)
            .sum();
        let (content_type, body) = scrape_as(port, ACCEPT_PROTOBUF);
        assert_eq!(content_type, protobuf::CONTENT_TYPE);
        let families = protobuf::decode(&body).unwrap();
        protobuf_bad.extend(protobuf_inconsistencies(&families));
    }
    let health: serde_json::Value =
        serde_json::from_str(&common::get(port, "/health").unwrap().body).unwrap();
    println!(
        "{SCRAPES} text and {SCRAPES} protobuf scrapes; the node's last count {last_count}; \
         skipped mid-update {}",
        health["skipped_mid_update"]
    );
    for r in ranks {
        r.finish();
    }
    assert!(
        last_count > 10_000.0,
        "the ranks recorded too little: {last_count}"
    );
    assert!(
        text_bad.is_empty(),
        "{} text: {:#?}",
        text_bad.len(),
        &text_bad[..text_bad.len().min(10)]
    );
    assert!(
        protobuf_bad.is_empty(),
        "{} protobuf: {:#?}",
        protobuf_bad.len(),
        &protobuf_bad[..protobuf_bad.len().min(10)]
    );
}
