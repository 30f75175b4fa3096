//! The Prometheus plug-in's endpoint under an idle-connection flood from 40 source addresses:
//! every legitimate `/metrics` and `/health` request is answered, whether its client sends at
//! once or up to 100 ms after connecting (test-support's `flood`).

mod common;

use std::net::{Ipv4Addr, SocketAddr};

use common::*;
use nixl_telemetry_test_support::flood::requests_under_flood;

#[test]
fn every_request_is_answered_under_an_idle_flood_from_many_addresses() {
    let _s = serial();
    let (_c, port) = collector_on_a_free_port("flooded");
    let report = requests_under_flood(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), 120);
    assert!(report.failures.is_empty(), "{report:#?}");
}
