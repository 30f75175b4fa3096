//! What the `remote_write` tests against real receivers share (Prometheus 2.42 and 3.16,
//! VictoriaMetrics): an agent of this process pushing to a receiver every 200 ms, and
//! heavy-tailed transfers recorded through it.
//!
//! The plug-in is a cdylib: `cargo build --workspace --all-targets` before `cargo test`.

#![allow(dead_code)] // not every test binary uses every helper

use nixl_telemetry_core::{Collector, Config};
use nixl_telemetry_test_support::transfers::{heavy_tailed, record};

/// Every variable these tests set, cleared between tests.
const VARS: &[&str] = &[
    "NIXL_TELEMETRY_REMOTE_WRITE_URL",
    "NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS",
    "NIXL_TELEMETRY_NATIVE_HISTOGRAMS",
    "NIXL_TELEMETRY_RANK_ENV",
    "LOCAL_RANK",
];

/// Takes the test lock (clearing [`VARS`]) and makes the plug-in findable.
pub fn serial() -> nixl_telemetry_test_support::Serial {
    nixl_telemetry_test_support::plugin_serial(&["remote_write"], VARS)
}

/// Agent `agent` pushing to the remote-write receiver `url` every 200 ms (and once more when
/// dropped), with native histograms when `native`. Hold [`serial`]'s guard while it lives.
pub fn pushing(url: &str, agent: &str, native: bool) -> Collector {
    std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_URL", url);
    std::env::set_var("NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS", "200");
    std::env::set_var("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", native.to_string());
    let config = Config {
        buffer_size: 4096,
        ..nixl_telemetry_test_support::plugin_config("remote_write")
    };
    Collector::new(agent, config).unwrap_or_else(|e| panic!("creating {agent}: {e:?}"))
}

/// The values of the transfers [`record_heavy_tailed`] recorded, each list sorted.
pub struct Recorded {
    /// Transfer times (µs), every transfer.
    pub times: Vec<u64>,
    /// Sizes (bytes) of the TX transfers.
    pub tx: Vec<u64>,
    /// Sizes (bytes) of the RX transfers.
    pub rx: Vec<u64>,
}

/// Records `n` heavy-tailed transfers (`heavy_tailed`) through `c`, TX and RX in turn, with a
/// flush every 500 and at the end.
pub fn record_heavy_tailed(c: &Collector, n: usize) -> Recorded {
    let transfers = heavy_tailed(n);
    record(c, &transfers, |i| i % 2 == 0);
    let sorted = |mut v: Vec<u64>| {
        v.sort_unstable();
        v
    };
    Recorded {
        times: sorted(transfers.iter().map(|t| t.0).collect()),
        tx: sorted(transfers.iter().step_by(2).map(|t| t.1).collect()),
        rx: sorted(transfers.iter().skip(1).step_by(2).map(|t| t.1).collect()),
    }
}
