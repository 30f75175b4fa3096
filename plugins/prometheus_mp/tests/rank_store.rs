//! A store written through the plug-in by a rank process has the documented layout, read with
//! the store library tests' parser of the documented offsets (`parse_store`): its name, its
//! fields (NIXL's 6,800 bytes, then our publication extension), its directory's mode, and the
//! lock its writer holds.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;

use common::*;

/// The child processes' entry point (see `common::child_main`).
#[test]
fn child() {
    child_main();
}

#[test]
fn a_store_written_through_the_plug_in_has_the_documented_layout() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let rank = spawn_rank(&RankSpec {
        dir: &dir,
        port: free_port(),
        agent: "layout-rank",
        local_rank: "7",
        bytes: 4000,
        extra: &[("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US", "100, 400.5, 1000")],
    });
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the directory is created owner-only");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".mmap"))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let parts: Vec<&str> = names[0].split('.').collect();
    assert_eq!(
        (parts[0], parts[1], parts[3], parts[4]),
        ("nixl", &*rank.pid.to_string(), "0", "mmap")
    );
    let bytes = std::fs::read(dir.join(&names[0])).unwrap();
    // NIXL's 6,800 bytes, then the publication extension that ends every store of ours.
    assert_eq!((bytes.len(), &bytes[6800..6808]), (6824, &b"NIXLSEQ1"[..]));
    let p = parse_store(&bytes[..6800]);
    assert_eq!(&p.magic, b"NIXLMPS1");
    assert_eq!((p.schema, p.slots, p.instance), (1, 21, 0));
    assert_eq!(p.pid, i64::from(rank.pid));
    assert_eq!(
        (p.agent_name.as_str(), p.local_rank.as_str()),
        ("layout-rank", "7")
    );
    assert_eq!(p.hostname, nixl_telemetry_series::hostname());
    assert_eq!(p.bucket_count, 3);
    assert_eq!(&p.bounds[..4], [100.0, 400.5, 1000.0, 0.0]);
    // One transfer: post 3 µs, xfer 400 µs (bucket 1), 4000 bytes, 1 request.
    let mut counters = vec![0; 21];
    counters[..8].copy_from_slice(&[4000, 0, 1, 0, 0, 0, 400, 3]);
    assert_eq!(p.counters, counters);
    let mut gauges = vec![0; 21];
    gauges[0] = 4000;
    gauges[6] = 400;
    gauges[7] = 3;
    assert_eq!(p.gauges, gauges);
    assert_eq!(p.hist_buckets[6].iter().position(|&n| n == 1), Some(1));
    assert_eq!(p.hist_buckets[7].iter().position(|&n| n == 1), Some(0));
    assert_eq!(
        p.hist_buckets[6].iter().sum::<u64>() + p.hist_buckets[7].iter().sum::<u64>(),
        2
    );
    assert!(p
        .hist_buckets
        .iter()
        .enumerate()
        .all(|(s, b)| s == 6 || s == 7 || b.iter().all(|&n| n == 0)));
    assert_eq!((p.hist_sums[6], p.hist_sums[7]), (400, 3));
    // The writer holds its store locked.
    let f = std::fs::File::open(dir.join(&names[0])).unwrap();
    // SAFETY: flock(2) on the descriptor `f` keeps open across the call.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    assert_eq!(rc, -1, "the rank holds its store");
    rank.finish();
}
