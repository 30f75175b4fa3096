//! A rank that keeps recording ([`RECORDING`] set for [`spawn_rank`](super::spawn_rank)): its
//! threads each record a burst of transfers (alternately written and read) and pause, until its
//! standard input closes; it then logs how many transfers its agent accepted and destroys the
//! agent (the final flush, and the exporter's last check of its store). The tests play the
//! other process: they truncate, delete, replace or damage its store, and scrape the node.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use nixl_telemetry_core::{Collector, Recorded};

use super::{spawn_rank, wait_for_stdin, Proc, RankSpec};

/// Set to `threads/burst/pause_us`: the rank keeps recording (pause 0: one burst, then idle).
pub const RECORDING: &str = "MP_TEST_RECORDING";

/// The rank's part once its agent `c` exists: one burst flushed, `READY <pid>`, the threads
/// of `spec` until stdin closes, `ACCEPTED <n>` on stderr, the agent destroyed.
pub(super) fn record(c: Collector, spec: &str) {
    let v: Vec<u64> = spec.split('/').map(|x| x.parse().unwrap()).collect();
    let (threads, burst, pause) = (v[0], v[1], v[2]);
    let (stop, accepted) = (AtomicBool::new(false), AtomicU64::new(0));
    let record = |seed: u64| {
        let mut n = 0;
        for i in 0..burst {
            let us = 1 + (seed * 7919 + i * 104_729) % 50_000;
            let write = (seed + i).is_multiple_of(2);
            n += u64::from(c.add_xfer_stats(us, write, us * 16, us / 4) == Recorded::Accepted);
        }
        accepted.fetch_add(n, Ordering::Relaxed);
    };
    std::thread::scope(|scope| {
        record(0);
        c.flush();
        println!("READY {}", std::process::id());
        std::io::stdout().flush().unwrap();
        for t in (0..threads).filter(|_| pause > 0) {
            let (stop, record) = (&stop, &record);
            scope.spawn(move || {
                let mut round = t;
                while !stop.load(Ordering::Relaxed) {
                    record(round);
                    round += threads;
                    std::thread::sleep(Duration::from_micros(pause));
                }
            });
        }
        wait_for_stdin();
        stop.store(true, Ordering::Relaxed);
    });
    eprintln!("ACCEPTED {}", accepted.load(Ordering::Relaxed));
    drop(c);
}

/// Starts a rank named `agent` writing its store in `dir` and serving the node on `port`,
/// with `threads` threads each recording `burst` transfers every `pause_us` µs (0: one burst,
/// then idle), flushing every millisecond, with `extra` variables.
pub fn spawn_recording(
    dir: &Path,
    port: u16,
    agent: &str,
    (threads, burst, pause_us): (u64, u64, u64),
    extra: &[(&str, &str)],
) -> Proc {
    let spec = format!("{threads}/{burst}/{pause_us}");
    let mut env = vec![
        (RECORDING, spec.as_str()),
        ("NIXL_TELEMETRY_RUN_INTERVAL", "1"),
        ("NIXL_TELEMETRY_BUFFER_SIZE", "65536"),
    ];
    env.extend_from_slice(extra);
    spawn_rank(&RankSpec {
        dir,
        port,
        agent,
        local_rank: "0",
        bytes: 0,
        extra: &env,
    })
}

/// The transfers a recording rank's agent accepted, from its stderr once it finished.
pub fn accepted(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("ACCEPTED ")?.trim().parse().ok())
}

/// The store files of process `pid` in `dir`, sorted.
pub fn stores_of(dir: &Path, pid: u32) -> Vec<PathBuf> {
    let prefix = format!("nixl.{pid}.");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".mmap")
        })
        .collect();
    v.sort();
    v
}

/// The transfers a store file holds (its written and read requests), when it is a valid store.
pub fn transfers_in(path: &Path) -> Option<u64> {
    use nixl_telemetry_base::EventType;
    use nixl_telemetry_mp_store::reader::{read_store, ReadOutcome};
    match read_store(path).ok()? {
        ReadOutcome::Valid(view) => Some(
            view.snapshot.counter(EventType::AgentTxRequestsNum)
                + view.snapshot.counter(EventType::AgentRxRequestsNum),
        ),
        _ => None,
    }
}
