//! Parity: the same event stream into an agent of the Prometheus plug-in and an agent of the
//! DOCA plug-in's `scrape` backend gives the same series with the same values. Both plug-ins
//! run in this process, each with its own endpoint on its own port; the tests are serialised.

mod common;

use common::*;
use nixl_telemetry_core::{Collector, EventType};
use nixl_telemetry_series::native::DEFAULT_SCHEMA;
use nixl_telemetry_series::protobuf;
use nixl_telemetry_series::text::Sample;
use nixl_telemetry_test_support::scrape::{scrape_as, ACCEPT_PROTOBUF};

/// The stream: transfers with times 5, 30, 200, 700 µs and post times 2, 15, 80, 300 µs,
/// both directions, registrations, errors of several statuses, and staging-queue drops
/// (the queue holds 32 events; the last burst overflows it).
fn feed(c: &Collector) {
    for (i, (xfer, post)) in [(5, 2), (30, 15), (200, 80), (700, 300)]
        .into_iter()
        .enumerate()
    {
        let _ = c.add_xfer_stats(xfer, i % 2 == 0, 1000 * (i as u64 + 1), post);
    }
    let _ = c.update_data(EventType::AgentMemoryRegistered, 1 << 20);
    let _ = c.update_data(EventType::AgentMemoryDeregistered, 4096);
    for status in [-3, -3, -4, -10, -12] {
        c.update_error(status).unwrap();
    }
    c.flush();
    // 8 of these 10 transfers (32 events) fit; 2 (8 events) are dropped and reported as one
    // delta at the next flush.
    for i in 0..10u64 {
        let _ = c.add_xfer_stats(25 * (i + 1), true, 10 * i, i);
    }
    c.flush();
    let _ = c.update_data(EventType::AgentTxBytes, 65);
    let _ = c.update_data(EventType::AgentTxBytes, 35);
    c.flush();
}

/// Scrapes of a Prometheus-plug-in agent and a DOCA-scrape agent fed the same stream.
fn both(agent: &str) -> ((String, Vec<Sample>), (String, Vec<Sample>)) {
    both_scraped(agent, scrape)
}

/// [`both`] with the endpoints read by `scrape`.
fn both_scraped<T>(agent: &str, scrape: impl Fn(u16) -> T) -> (T, T) {
    let prom_port = free_port();
    let doca_port = free_port();
    std::env::set_var("NIXL_TELEMETRY_PROMETHEUS_PORT", prom_port.to_string());
    std::env::set_var("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "true");
    use_doca_port(doca_port);
    let prom = collector(agent, "prometheus", 32);
    let doca = collector(agent, "doca", 32);
    feed(&prom);
    feed(&doca);
    let (p, d) = (prom.stats(), doca.stats());
    assert_eq!(
        (p.events_accepted, p.events_dropped),
        (d.events_accepted, d.events_dropped)
    );
    assert!(d.events_dropped > 0, "the stream includes drops");
    let scrapes = (scrape(prom_port), scrape(doca_port));
    drop(prom);
    drop(doca);
    scrapes
}

fn assert_same(prom: &(String, Vec<Sample>), doca: &(String, Vec<Sample>)) {
    assert!(!doca.1.is_empty());
    assert_eq!(prom.1.len(), doca.1.len(), "{}\n---\n{}", prom.0, doca.0);
    for (p, d) in prom.1.iter().zip(&doca.1) {
        assert_eq!(p, d);
    }
    // Not only the samples: the whole exposition (HELP, TYPE, order) is the same text.
    assert_eq!(prom.0, doca.0);
}

#[test]
fn the_same_stream_gives_the_same_series_and_values() {
    let _s = serial();
    let (prom, doca) = both("parity");
    assert_same(&prom, &doca);
    let s = &doca.1;
    // The values are the stream's, not just equal to each other.
    assert_eq!(
        value(s, "agent_xfer_time_us_count", "parity", &[]),
        Some(12.0)
    );
    assert_eq!(
        value(s, "agent_xfer_time_us_bucket", "parity", &[("le", "10")]),
        Some(1.0)
    );
    assert_eq!(
        value(s, "agent_xfer_post_time_us_sum", "parity", &[]),
        Some((2 + 15 + 80 + 300 + (0..8).sum::<u64>()) as f64)
    );
    assert_eq!(
        value(s, "agent_errors_total", "parity", &[("status", "backend")]),
        Some(2.0)
    );
    assert_eq!(
        value(s, "agent_telemetry_events_dropped_total", "parity", &[]),
        Some(8.0)
    );
    assert_eq!(value(s, "agent_tx_last_bytes", "parity", &[]), Some(35.0));
}

#[test]
fn bucket_overrides_apply_to_both_alike() {
    let _s = serial();
    std::env::set_var("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US", "2.5, 100,250 ,1e3");
    let (prom, doca) = both("buckets");
    assert_same(&prom, &doca);
    let les: Vec<&str> = doca
        .1
        .iter()
        .filter(|s| s.name == "agent_xfer_post_time_us_bucket")
        .filter_map(|s| s.label("le"))
        .collect();
    assert_eq!(les, ["2.5", "100", "250", "1000", "+Inf"]);
}

#[test]
fn native_histograms_are_served_alike_in_the_protobuf_exposition() {
    let _s = serial();
    std::env::set_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", "true");
    let (prom, doca) = both_scraped("native", |port| scrape_as(port, ACCEPT_PROTOBUF));
    assert_eq!(doca.0, protobuf::CONTENT_TYPE);
    // The same bytes, so the same native histograms of the same events.
    assert_eq!(prom, doca);
    let families = protobuf::decode(&doca.1).unwrap();
    let time = families
        .iter()
        .find(|f| f.name == "agent_xfer_time_us")
        .unwrap();
    let h = time.metric[0].histogram.as_ref().unwrap();
    assert_eq!(h.sample_count, 12);
    assert_eq!(h.schema, i32::from(DEFAULT_SCHEMA));
    assert!(!h.positive_span.is_empty(), "{h:?}");
    // Off (the default), the protobuf Accept is answered with the text page.
    std::env::remove_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS");
    let (_, doca) = both_scraped("classic", |port| scrape_as(port, ACCEPT_PROTOBUF));
    assert!(doca.0.starts_with("text/plain"), "{}", doca.0);
}
