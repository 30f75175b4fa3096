//! Conservation under load, as seen by a scrape: with a small staging queue, every transfer is
//! either in the scraped totals or counted in `agent_telemetry_events_dropped_total`; with a
//! queue larger than everything produced, mixed producers reach exact totals and nothing is
//! dropped. Concurrent scrapes only ever see whole flushed batches.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use nixl_telemetry_core::{EventType, Recorded};

const THREADS: u64 = 8;

#[test]
fn a_small_queue_conserves_transfers_under_8_producers() {
    let _s = serial();
    let port = free_port();
    use_port(port);
    const PER_THREAD: u64 = 20_000;
    let c = Arc::new(collector_with("conserve", 256, Duration::from_millis(50)));
    let done = Arc::new(AtomicBool::new(false));
    // A scraper running throughout: counters never go back, and each scrape holds whole
    // batches (every transfer's 4 events or none).
    let scraper = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut scrapes = 0u64;
            let mut last = 0.0;
            while !done.load(Ordering::Acquire) {
                let s = scrape(port);
                let v = |n: &str| s.get(n, "conserve", &[]);
                let requests = v("agent_tx_requests_num_total") + v("agent_rx_requests_num_total");
                assert_eq!(v("agent_xfer_time_us_count"), requests);
                assert_eq!(v("agent_xfer_post_time_us_count"), requests);
                assert_eq!(v("agent_xfer_time_total"), 7.0 * requests);
                assert!(requests >= last);
                last = requests;
                scrapes += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            scrapes
        })
    };
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                let is_write = t % 2 == 0;
                let bytes = if is_write { 1000 } else { 500 };
                let mut accepted = 0u64;
                for _ in 0..PER_THREAD {
                    if c.add_xfer_stats(7, is_write, bytes, 3) == Recorded::Accepted {
                        accepted += 1;
                    }
                }
                (is_write, accepted)
            })
        })
        .collect();
    let results: Vec<(bool, u64)> = producers.into_iter().map(|p| p.join().unwrap()).collect();
    c.flush();
    done.store(true, Ordering::Release);
    assert!(scraper.join().unwrap() > 0);
    let tx: u64 = results.iter().filter(|r| r.0).map(|r| r.1).sum();
    let rx: u64 = results.iter().filter(|r| !r.0).map(|r| r.1).sum();
    let accepted = tx + rx;
    let stats = c.stats();
    let produced = THREADS * PER_THREAD;
    assert_eq!(stats.events_accepted, 4 * accepted);
    assert_eq!(stats.events_accepted + stats.events_dropped, 4 * produced);
    assert!(
        stats.events_dropped > 0,
        "a 256-slot queue should overflow: {stats:?}"
    );
    assert_eq!(stats.events_dropped % 4, 0, "whole transfers are dropped");
    assert_eq!(stats.events_lost, 0);

    let s = scrape(port);
    let v = |n: &str| s.get(n, "conserve", &[]);
    assert_eq!(v("agent_tx_requests_num_total"), tx as f64);
    assert_eq!(v("agent_rx_requests_num_total"), rx as f64);
    assert_eq!(v("agent_tx_bytes_total"), (1000 * tx) as f64);
    assert_eq!(v("agent_rx_bytes_total"), (500 * rx) as f64);
    assert_eq!(v("agent_xfer_time_us_count"), accepted as f64);
    assert_eq!(v("agent_xfer_time_us_sum"), (7 * accepted) as f64);
    assert_eq!(v("agent_xfer_post_time_total"), (3 * accepted) as f64);
    assert_eq!(
        s.get("agent_xfer_time_us_bucket", "conserve", &[("le", "10")]),
        accepted as f64
    );
    assert_eq!(
        v("agent_telemetry_events_dropped_total"),
        stats.events_dropped as f64
    );
    // accepted + dropped == produced, in events, as the scrape shows it.
    assert_eq!(
        4.0 * (v("agent_tx_requests_num_total") + v("agent_rx_requests_num_total"))
            + v("agent_telemetry_events_dropped_total"),
        (4 * produced) as f64
    );
    drop(s);
    Arc::try_unwrap(c).ok().unwrap().close();
    assert!(port_closed(port));
}

#[test]
fn mixed_producers_reach_exact_totals_without_drops() {
    let _s = serial();
    let port = free_port();
    use_port(port);
    const PER_THREAD: u64 = 4_000;
    let c = Arc::new(collector_with("mixed", 1 << 17, Duration::from_millis(20)));
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    match i % 4 {
                        0 => assert_eq!(c.add_xfer_stats(100 + t, true, 10, 1), Recorded::Accepted),
                        1 => assert_eq!(c.add_xfer_stats(2000, false, 20, 2), Recorded::Accepted),
                        2 => assert_eq!(
                            c.update_data(EventType::AgentMemoryRegistered, 4096),
                            Recorded::Accepted
                        ),
                        _ => assert_eq!(
                            c.update_error(-((t as i32 % 12) + 1)).unwrap(),
                            Recorded::Accepted
                        ),
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    c.flush();
    let quarter = PER_THREAD / 4;
    let s = scrape(port);
    let v = |n: &str| s.get(n, "mixed", &[]);
    assert_eq!(v("agent_tx_requests_num_total"), (THREADS * quarter) as f64);
    assert_eq!(v("agent_rx_requests_num_total"), (THREADS * quarter) as f64);
    assert_eq!(v("agent_tx_bytes_total"), (10 * THREADS * quarter) as f64);
    assert_eq!(v("agent_rx_bytes_total"), (20 * THREADS * quarter) as f64);
    assert_eq!(
        v("agent_memory_registered_total"),
        (4096 * THREADS * quarter) as f64
    );
    let xfer_sum: u64 =
        (0..THREADS).map(|t| (100 + t) * quarter).sum::<u64>() + 2000 * THREADS * quarter;
    assert_eq!(v("agent_xfer_time_total"), xfer_sum as f64);
    assert_eq!(v("agent_xfer_time_us_sum"), xfer_sum as f64);
    assert_eq!(
        s.get("agent_xfer_time_us_bucket", "mixed", &[("le", "250")]),
        (THREADS * quarter) as f64
    );
    assert_eq!(
        s.get("agent_xfer_time_us_bucket", "mixed", &[("le", "2500")]),
        (2 * THREADS * quarter) as f64
    );
    // Thread t reported status -(t % 12 + 1): the first 8 statuses, `quarter` each.
    let statuses: Vec<f64> = s
        .samples
        .iter()
        .filter(|x| x.name == "agent_errors_total")
        .map(|x| x.value)
        .collect();
    let mut expected = vec![quarter as f64; THREADS as usize];
    expected.resize(12, 0.0);
    assert_eq!(statuses, expected);
    assert_eq!(v("agent_telemetry_events_dropped_total"), 0.0);
    assert_eq!(c.stats().events_dropped, 0);
    drop(s);
    Arc::try_unwrap(c).ok().unwrap().close();
}
