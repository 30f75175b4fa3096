//! A process whose `prometheus` collector is busy (a thread records, the flush runs every
//! millisecond) forks: the child's inherited collector is refused, a collector the child
//! creates is served on the child's own port, and the child does not keep the parent's port.

mod common;

use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use nixl_telemetry_core::EventType;
use nixl_telemetry_test_support::forked;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn a_forked_child_serves_its_own_collector_and_keeps_no_port_of_the_parent() {
    let _s = serial();
    let parent_port = free_port();
    use_port(parent_port);
    let parent = collector_with("parent", 4096, Duration::from_millis(1));
    let child_port = free_port();
    let stop = AtomicBool::new(false);
    let recording = AtomicBool::new(false);
    let mut child = std::thread::scope(|scope| {
        scope.spawn(|| loop {
            parent.add_xfer_stats(10, true, 100, 1);
            recording.store(true, Ordering::Release);
            if stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        });
        // Fork while the thread records (before, it could fork before its first transfer).
        while !recording.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let mut child = forked::fork(|side| {
            assert!(parent.inherited());
            parent.flush(); // does nothing on the parent's collector
            use_port(child_port);
            let own = collector("child");
            assert!(!own.inherited());
            own.update_data(EventType::AgentTxBytes, 7);
            own.flush();
            side.ready();
            side.wait_for_parent();
            drop(own);
            0
        });
        child.wait_ready(LIMIT);
        stop.store(true, Ordering::Relaxed);
        child
    });
    let s = scrape(child_port);
    assert_eq!(s.agents(), ["child"], "{}", s.body);
    assert_eq!(s.get("agent_tx_bytes_total", "child", &[]), 7.0);
    // What the parent recorded reaches its series at a flush: one now, so that the scrape does
    // not depend on the flush thread having run since (the child can be ready within 1 ms).
    parent.flush();
    let p = scrape(parent_port);
    assert_eq!(p.agents(), ["parent"], "{}", p.body);
    assert!(p.get("agent_tx_bytes_total", "parent", &[]) > 0.0);
    // The port is the parent's alone: once its endpoint stops, another process can bind it
    // while the child still lives.
    drop(parent);
    TcpListener::bind((Ipv4Addr::LOCALHOST, parent_port))
        .expect("the parent's port is free while its child lives");
    assert_eq!(child.wait(LIMIT), 0);
}
