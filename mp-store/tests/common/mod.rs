//! Helpers of the store library's tests, also used by the `prometheus_mp` plug-in's tests
//! (`plugins/prometheus_mp/tests/common/` includes this file): a parser of the store file
//! written from the documented offsets alone (upstream `storeLayout`, schema 1), independent of
//! the library's layout module, and pages as comparable sample sets.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

/// A store decoded from the documented offsets.
#[derive(Debug, PartialEq)]
pub struct Parsed {
    /// `magic` @0.
    pub magic: [u8; 8],
    /// `schemaVersion` @8.
    pub schema: u32,
    /// `slotCount` @12.
    pub slots: u32,
    /// `pid` @16.
    pub pid: i64,
    /// `lastUpdateNs` @24, the heartbeat.
    pub last_update_ns: u64,
    /// `instance` @32.
    pub instance: u64,
    /// `bucketCount` @40.
    pub bucket_count: u64,
    /// `agentName` @48.
    pub agent_name: String,
    /// `hostname` @304.
    pub hostname: String,
    /// `localRank` @432.
    pub local_rank: String,
    /// `bucketBounds` @496, all 32.
    pub bounds: Vec<f64>,
    /// `counters` @752, one per slot.
    pub counters: Vec<u64>,
    /// `gauges` @920, one per slot.
    pub gauges: Vec<u64>,
    /// `histBuckets` @1088, 33 per slot.
    pub hist_buckets: Vec<Vec<u64>>,
    /// `histSums` @6632, one per slot.
    pub hist_sums: Vec<u64>,
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

fn u64s(b: &[u8], off: usize, n: usize) -> Vec<u64> {
    (0..n).map(|i| u64_at(b, off + 8 * i)).collect()
}

fn c_string(b: &[u8], off: usize, len: usize) -> String {
    let field = &b[off..off + len];
    let end = field.iter().position(|&c| c == 0).expect("NUL-terminated");
    String::from_utf8(field[..end].to_vec()).unwrap()
}

/// storeLayout: magic @0 (8), schemaVersion @8 (u32), slotCount @12 (u32), pid @16 (i64),
/// lastUpdateNs @24, instance @32, bucketCount @40, agentName @48 (256), hostname @304 (128),
/// localRank @432 (64), bucketBounds @496 (f64 x 32), counters @752 (u64 x 21), gauges @920
/// (u64 x 21), histBuckets @1088 (u64 x 21 x 33), histSums @6632 (u64 x 21); 6800 bytes.
pub fn parse_store(b: &[u8]) -> Parsed {
    assert_eq!(b.len(), 6800);
    Parsed {
        magic: b[0..8].try_into().unwrap(),
        schema: u32::from_le_bytes(b[8..12].try_into().unwrap()),
        slots: u32::from_le_bytes(b[12..16].try_into().unwrap()),
        pid: u64_at(b, 16) as i64,
        last_update_ns: u64_at(b, 24),
        instance: u64_at(b, 32),
        bucket_count: u64_at(b, 40),
        agent_name: c_string(b, 48, 256),
        hostname: c_string(b, 304, 128),
        local_rank: c_string(b, 432, 64),
        bounds: u64s(b, 496, 32).into_iter().map(f64::from_bits).collect(),
        counters: u64s(b, 752, 21),
        gauges: u64s(b, 920, 21),
        hist_buckets: (0..21).map(|s| u64s(b, 1088 + s * 33 * 8, 33)).collect(),
        hist_sums: u64s(b, 6632, 21),
    }
}

/// The agent_* samples of a page as comparable text: name, labels sorted, value.
pub fn sample_set(samples: &[nixl_telemetry_series::text::Sample]) -> BTreeSet<String> {
    samples
        .iter()
        .filter(|s| s.name.starts_with("agent_"))
        .map(|s| {
            let labels: BTreeMap<&str, &str> = s
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            format!("{}{labels:?} {}", s.name, s.value)
        })
        .collect()
}
