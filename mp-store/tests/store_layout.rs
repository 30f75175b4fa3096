//! The store file format, checked against NIXL's own files (`tests/fixtures/`, written by
//! NIXL's `prometheus_mp` exporter; see the README there) with a parser written here from the
//! documented offsets alone (upstream `storeLayout`, schema 1), independent of the library's
//! layout module (the parser is in `common/`):
//!
//! - NIXL's stores decode to the values their event streams imply, every other byte zero;
//! - our writer, fed the same streams, writes the same bytes (all but the heartbeat), then our
//!   extensions (the last one, the publication sequence, in every store of ours);
//! - our store scan serves NIXL's stores with the same samples as NIXL's own scrape page.

mod common;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use nixl_telemetry_core::Event;
use nixl_telemetry_mp_store::config::{Aggregate, ScanConfig};
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_mp_store::store_scan::StoreScan;
use nixl_telemetry_series::{text, Buckets};
use serde_json::Value;

/// A 6800-byte image holding `p`'s fields and zeros elsewhere.
fn build_store(p: &Parsed) -> Vec<u8> {
    let mut b = vec![0u8; 6800];
    let mut put = |off: usize, bytes: &[u8]| b[off..off + bytes.len()].copy_from_slice(bytes);
    put(0, &p.magic);
    put(8, &p.schema.to_le_bytes());
    put(12, &p.slots.to_le_bytes());
    put(16, &p.pid.to_le_bytes());
    put(24, &p.last_update_ns.to_le_bytes());
    put(32, &p.instance.to_le_bytes());
    put(40, &p.bucket_count.to_le_bytes());
    put(48, p.agent_name.as_bytes());
    put(304, p.hostname.as_bytes());
    put(432, p.local_rank.as_bytes());
    for (i, v) in p.bounds.iter().enumerate() {
        put(496 + 8 * i, &v.to_le_bytes());
    }
    for (base, values) in [(752, &p.counters), (920, &p.gauges), (6632, &p.hist_sums)] {
        for (i, v) in values.iter().enumerate() {
            put(base + 8 * i, &v.to_le_bytes());
        }
    }
    for (s, row) in p.hist_buckets.iter().enumerate() {
        for (i, v) in row.iter().enumerate() {
            put(1088 + (s * 33 + i) * 8, &v.to_le_bytes());
        }
    }
    b
}

/// NIXL's store of fixture entry `store`, copied into `dir` under its original name and locked
/// as its live writer would hold it: keep the returned file open while it should look alive.
fn live_nixl_store(dir: &Path, store: &Value) -> std::fs::File {
    let path = dir.join(store["original_name"].as_str().unwrap());
    std::fs::copy(fixtures().join(store["file"].as_str().unwrap()), &path).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    // SAFETY: flock(2) on the descriptor of `f`, which the caller keeps open.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(rc, 0);
    f
}

/// The identity of fixture entry `store` (its pid moved by `pid_offset`: with an offset, NIXL's
/// own store of the same identity can be served beside ours), with workload `labels`.
fn fixture_identity(
    store: &Value,
    pid_offset: i64,
    labels: nixl_telemetry_series::WorkloadLabels,
) -> Identity {
    Identity {
        agent_name: store["agent_name"].as_str().unwrap().into(),
        hostname: store["hostname"].as_str().unwrap().into(),
        local_rank: store["local_rank"].as_str().unwrap().into(),
        pid: store["pid"].as_i64().unwrap() + pid_offset,
        run_marker: store["run_marker_realtime_ns"].as_u64().unwrap(),
        instance: store["instance"].as_u64().unwrap(),
        labels,
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap())
        .unwrap()
}

fn u64_list(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// The fields `expected.json` gives for one store, as a [`Parsed`] (heartbeat 0).
fn expected_fields(store: &Value) -> Parsed {
    let f = &store["expected_fields"];
    Parsed {
        magic: f["magic"].as_u64().unwrap().to_le_bytes(),
        schema: f["schemaVersion"].as_u64().unwrap() as u32,
        slots: f["slotCount"].as_u64().unwrap() as u32,
        pid: f["pid"].as_i64().unwrap(),
        last_update_ns: 0,
        instance: f["instance"].as_u64().unwrap(),
        bucket_count: f["bucketCount"].as_u64().unwrap(),
        agent_name: f["agentName"].as_str().unwrap().into(),
        hostname: f["hostname"].as_str().unwrap().into(),
        local_rank: f["localRank"].as_str().unwrap().into(),
        bounds: f["bucketBounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect(),
        counters: u64_list(&f["counters"]),
        gauges: u64_list(&f["gauges"]),
        hist_buckets: f["histBuckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(u64_list)
            .collect(),
        hist_sums: u64_list(&f["histSums"]),
    }
}

/// The stream NIXL exported, as (type, value) pairs.
fn events(store: &Value) -> Vec<Event> {
    let pair = |e: &Value| (e["type"].as_u64(), e["value"].as_u64());
    let list = store["events_in_export_order"].as_array().unwrap();
    list.iter()
        .map(|e| match pair(e) {
            (Some(t), Some(value)) => Event {
                event_type: t as u32,
                value,
            },
            _ => panic!("bad event {e}"),
        })
        .collect()
}

#[test]
fn nixls_stores_decode_to_their_streams_values() {
    let exp = expected();
    for (name, store) in exp["stores"].as_object().unwrap() {
        let bytes = std::fs::read(fixtures().join(store["file"].as_str().unwrap())).unwrap();
        let mut parsed = parse_store(&bytes);
        assert_eq!(&parsed.magic, b"NIXLMPS1");
        let range = &store["lastUpdateNs_expected_range"];
        let last = parsed.last_update_ns;
        assert!(
            (range["min_monotonic_ns"].as_u64().unwrap()
                ..=range["max_monotonic_ns"].as_u64().unwrap())
                .contains(&last),
            "{name}: lastUpdateNs {last}"
        );
        parsed.last_update_ns = 0;
        let want = expected_fields(store);
        assert_eq!(parsed, want, "{name}");
        // Every byte not a field above is zero: the image rebuilt from the fields is the file.
        let mut rebuilt = build_store(&want);
        rebuilt[24..32].copy_from_slice(&last.to_le_bytes());
        assert!(rebuilt == bytes, "{name}: bytes outside the fields differ");
    }
}

/// `store` ends with the documented publication extension at `at`: magic `NIXLSEQ1`, the
/// length of the rest (8), 0, then the sequence, even (no publication under way).
fn assert_publication_extension(store: &[u8], at: usize) {
    let u32_at = |off: usize| u32::from_le_bytes(store[off..off + 4].try_into().unwrap());
    assert_eq!(&store[at..at + 8], b"NIXLSEQ1");
    assert_eq!((u32_at(at + 8), u32_at(at + 12)), (8, 0));
    let sequence = u64::from_le_bytes(store[at + 16..at + 24].try_into().unwrap());
    assert_eq!(sequence % 2, 0);
    assert_eq!(store.len(), at + 24);
}

/// Applies the events of NIXL's fixture `store` to our store `w`: our file's bytes, NIXL's file
/// (exactly 6,800 bytes), and the offsets where ours differ from it.
fn applied_beside_nixl(w: &StoreWriter, store: &Value) -> (Vec<u8>, Vec<u8>, Vec<usize>) {
    let batch = events(store);
    assert_eq!(w.apply(&batch), batch.len());
    let ours = std::fs::read(w.path()).unwrap();
    let nixl = std::fs::read(fixtures().join(store["file"].as_str().unwrap())).unwrap();
    assert_eq!(nixl.len(), 6800);
    let differing = (0..6800).filter(|&i| ours[i] != nixl[i]).collect();
    (ours, nixl, differing)
}

#[test]
fn our_writer_writes_nixls_bytes_for_the_same_stream() {
    let exp = expected();
    let dir = tempfile::tempdir().unwrap();
    for (name, store) in exp["stores"].as_object().unwrap() {
        let id = fixture_identity(store, 0, Default::default());
        let w = StoreWriter::create(dir.path(), &id, &Buckets::default()).unwrap();
        // The name NIXL gave its file.
        assert_eq!(
            w.path().file_name().unwrap().to_str().unwrap(),
            store["original_name"].as_str().unwrap()
        );
        let (ours, _, differing) = applied_beside_nixl(&w, store);
        assert!(
            differing.iter().all(|i| (24..32).contains(i)),
            "{name}: bytes {differing:?} differ (only the heartbeat at 24..32 may)"
        );
        // NIXL's reader maps the first 6,800 bytes; ours finds the publication extension after.
        assert_publication_extension(&ours, 6800);
        let meta = std::fs::metadata(w.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }
}

/// With workload labels, the store is NIXL's 6,800 bytes for the same stream (what NIXL's
/// reader maps: it refuses only files shorter than that) followed by the labels extension, and
/// our scan serves it with its labels next to NIXL's own unlabelled stores.
#[test]
fn a_labelled_store_is_nixls_bytes_then_the_labels_extension() {
    let exp = expected();
    let dir = tempfile::tempdir().unwrap();
    let labels = nixl_telemetry_series::WorkloadLabels::from_pairs(vec![
        ("slurm_job_id".into(), "4242".into()),
        ("team".into(), "kv".into()),
    ])
    .unwrap();
    let (mut writers, mut holders) = (Vec::new(), Vec::new());
    for (name, store) in exp["stores"].as_object().unwrap() {
        let id = fixture_identity(store, 1_000_000, labels.clone());
        let w = StoreWriter::create(dir.path(), &id, &Buckets::default()).unwrap();
        let (ours, _, differing) = applied_beside_nixl(&w, store);
        assert!(
            differing
                .iter()
                .all(|i| (24..32).contains(i) || (16..24).contains(i)),
            "{name}: bytes {differing:?} differ (only the pid and the heartbeat may)"
        );
        // The documented extensions, read with this file's own parser: the labels, then, at
        // the next multiple of 8, the publication extension.
        assert_eq!(&ours[6800..6808], b"NIXLLBL1");
        let n = u32::from_le_bytes(ours[6808..6812].try_into().unwrap()) as usize;
        assert_eq!(&ours[6812..6816], [0; 4]);
        assert_eq!(
            &ours[6816..6816 + n],
            b"slurm_job_id\x004242\x00team\x00kv\x00"
        );
        assert_publication_extension(&ours, (6816 + n).next_multiple_of(8));
        // NIXL's own store beside it, its writer alive (holding the lock).
        holders.push(live_nixl_store(dir.path(), store));
        writers.push(w);
    }
    let page = StoreScan::new(ScanConfig {
        dir: dir.path().to_owned(),
        stale_ttl: Duration::ZERO,
        aggregate: Aggregate::None,
    })
    .scrape();
    let samples = text::parse(&page).unwrap();
    let ours: Vec<_> = samples
        .iter()
        .filter(|s| s.name == "agent_tx_bytes_total" && s.label("slurm_job_id").is_some())
        .collect();
    let theirs: Vec<_> = samples
        .iter()
        .filter(|s| s.name == "agent_tx_bytes_total" && s.label("slurm_job_id").is_none())
        .collect();
    assert_eq!(
        ours.len(),
        exp["stores"].as_object().unwrap().len(),
        "{page}"
    );
    assert_eq!(ours.len(), theirs.len(), "{page}");
    assert!(ours.iter().all(|s| s.label("team") == Some("kv")));
    // Same stream, same value: each of ours equals NIXL's store of the same agent.
    for o in &ours {
        let t = theirs
            .iter()
            .find(|t| t.label("agent_name") == o.label("agent_name"))
            .unwrap();
        assert_eq!(o.value, t.value);
    }
}

/// The agent_* samples of a page, comparable whatever the order of lines and labels.
fn agent_samples(page: &str) -> std::collections::BTreeSet<String> {
    let agent_lines: String = page
        .lines()
        .filter(|l| l.starts_with("agent_"))
        .map(|l| format!("{l}\n"))
        .collect();
    sample_set(&text::parse(&agent_lines).unwrap())
}

#[test]
fn our_store_scan_serves_nixls_stores_as_nixl_does() {
    let exp = expected();
    let dir = tempfile::tempdir().unwrap();
    let mut holders = Vec::new();
    for store in exp["stores"].as_object().unwrap().values() {
        let path = dir.path().join(store["original_name"].as_str().unwrap());
        std::fs::copy(fixtures().join(store["file"].as_str().unwrap()), &path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        // Each store's writer is alive (NIXL's ranks hold their stores locked).
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        // SAFETY: flock(2) on the descriptor `f` keeps open (it is kept in `holders`).
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(rc, 0);
        holders.push(f);
    }
    let scan = StoreScan::new(ScanConfig {
        dir: dir.path().to_owned(),
        stale_ttl: Duration::ZERO,
        aggregate: Aggregate::None,
    });
    let ours = scan.scrape();
    let nixl = std::fs::read_to_string(fixtures().join("nixl-mp-scrape.txt")).unwrap();
    let (ours_set, nixl_set) = (agent_samples(&ours), agent_samples(&nixl));
    assert_eq!(nixl_set.len(), 2 * (15 + 12 + 42));
    let only_ours: Vec<_> = ours_set.difference(&nixl_set).collect();
    let only_nixl: Vec<_> = nixl_set.difference(&ours_set).collect();
    assert!(
        only_ours.is_empty() && only_nixl.is_empty(),
        "only ours: {only_ours:#?}\nonly NIXL's: {only_nixl:#?}"
    );
    // Same families, in the same order, with the same HELP and TYPE lines.
    let meta = |page: &str| -> Vec<String> {
        page.lines()
            .filter(|l| l.starts_with("# ") && l.contains(" agent_"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(meta(&ours), meta(&nixl));
    // Label order is NIXL's.
    let first = |page: &str| -> String {
        page.lines()
            .find(|l| l.starts_with("agent_tx_bytes_total{"))
            .unwrap()
            .to_owned()
    };
    let order = |line: &str| -> Vec<String> {
        let labels = &line[line.find('{').unwrap() + 1..line.find('}').unwrap()];
        labels
            .split(',')
            .map(|kv| kv.split('=').next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(order(&first(&ours)), order(&first(&nixl)));
    // Not removed: both writers are alive.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    let by_rank: BTreeMap<String, u64> = scan
        .live_stores()
        .into_iter()
        .map(|s| {
            (
                s.local_rank,
                s.snapshot
                    .counter(nixl_telemetry_core::EventType::AgentTxBytes),
            )
        })
        .collect();
    assert_eq!(by_rank, [("0".into(), 6500), ("1".into(), 16384)].into());
    drop(holders);
}

/// With native histograms on, the store is NIXL's 6,800 bytes for the same stream followed by
/// the documented native-histograms extension; our scan serves it beside NIXL's own stores in
/// the protobuf exposition: NIXL's ranks with their classic histograms as NIXL's page has them
/// and no native buckets, ours with both, and the node total (NIXL's ranks and ours) without
/// native buckets, since NIXL's ranks keep none.
#[test]
fn a_native_store_is_nixls_bytes_then_its_extension_and_is_served_beside_nixls() {
    use nixl_telemetry_series::protobuf;
    let exp = expected();
    let dir = tempfile::tempdir().unwrap();
    let (mut writers, mut holders) = (Vec::new(), Vec::new());
    for (name, store) in exp["stores"].as_object().unwrap() {
        let id = fixture_identity(store, 1_000_000, Default::default());
        let w = StoreWriter::create_with(dir.path(), &id, &Buckets::default(), true).unwrap();
        let (ours, nixl, differing) = applied_beside_nixl(&w, store);
        assert!(
            differing.iter().all(|i| (16..32).contains(i)),
            "{name}: bytes {differing:?} differ (only the pid and the heartbeat may)"
        );
        assert_eq!(
            parse_store(&ours[..6800]).agent_name,
            parse_store(&nixl).agent_name
        );
        // The documented extension header, read with this file's own offsets.
        let u32_at = |off: usize| u32::from_le_bytes(ours[off..off + 4].try_into().unwrap());
        assert_eq!(&ours[6800..6808], b"NIXLNHS1");
        assert_eq!((u32_at(6808), u32_at(6812)), (5328, 0));
        assert_eq!((u32_at(6816), u32_at(6820)), (4, 160));
        assert_publication_extension(&ours, 6800 + 5344);
        // NIXL's own store beside it, its writer alive (holding the lock).
        holders.push(live_nixl_store(dir.path(), store));
        writers.push(w);
    }
    let scan = StoreScan::new(ScanConfig {
        dir: dir.path().to_owned(),
        stale_ttl: Duration::ZERO,
        aggregate: Aggregate::Sum,
    });
    let (content_type, body) = scan.scrape_as(true);
    assert_eq!(content_type, protobuf::CONTENT_TYPE);
    let families = protobuf::decode(&body).unwrap();
    let time = families
        .iter()
        .find(|f| f.name == "agent_xfer_time_us")
        .unwrap();
    let label = |m: &protobuf::Metric, n: &str| {
        m.label
            .iter()
            .find(|l| l.name == n)
            .map(|l| l.value.clone())
    };
    // NIXL's page: the xfer-time count of each of NIXL's ranks.
    let page = std::fs::read_to_string(fixtures().join("nixl-mp-scrape.txt")).unwrap();
    let nixl_counts: BTreeMap<String, f64> = text::parse(&page)
        .unwrap()
        .into_iter()
        .filter(|s| s.name == "agent_xfer_time_us_count")
        .map(|s| (s.label("agent_name").unwrap().to_owned(), s.value))
        .collect();
    let mut seen = (0, 0, 0);
    for m in &time.metric {
        let h = m.histogram.as_ref().unwrap();
        let native = h.zero_threshold > 0.0;
        match (label(m, "pid"), label(m, "agent_name")) {
            (None, None) => {
                assert!(!native, "a total with NIXL's ranks has no native buckets");
                let nixl_total: f64 = nixl_counts.values().sum();
                assert_eq!(h.sample_count as f64, 2.0 * nixl_total);
                seen.2 += 1;
            }
            (Some(pid), Some(agent)) => {
                assert_eq!(h.sample_count as f64, nixl_counts[&agent], "{agent}");
                if pid.parse::<i64>().unwrap() > 1_000_000 {
                    assert!(native && h.positive_delta.len() as u64 <= h.sample_count);
                    let held: i64 = h
                        .positive_delta
                        .iter()
                        .scan(0, |c, d| {
                            *c += d;
                            Some(*c)
                        })
                        .sum();
                    assert_eq!(held as u64 + h.zero_count, h.sample_count);
                    seen.0 += 1;
                } else {
                    assert!(!native, "NIXL's rank {agent} has no native buckets");
                    seen.1 += 1;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen, (2, 2, 1));
    drop((writers, holders));
}
