//! A rank's own store truncated, deleted or replaced by another process of the same user (this
//! test) while the rank records, or while it is idle, or just before it exits: the rank never
//! dies (a truncation killed it with SIGBUS, exit status 135), its store is made again within
//! the writer's check interval, holding everything recorded, its series come back to the
//! node's page and `/health` counts it again, and it logs one warning for it all.

mod common;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    accepted, child_main, get, poll, scratch_node, spawn_recording, stores_of, transfers_in,
    try_scrape, Proc,
};

/// The child processes' entry point (see `common::child_main`).
#[test]
fn child() {
    child_main();
}

/// Long enough for any check (one second apart) on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(20);

/// The one store of `rank` in `dir`.
fn store_of(rank: &Proc, dir: &Path) -> PathBuf {
    poll(DEADLINE, "the rank's store", || {
        let stores = stores_of(dir, rank.pid);
        (stores.len() == 1).then(|| stores[0].clone())
    })
}

fn truncate(path: &Path, len: u64) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(len).unwrap();
}

/// Lines of `text` holding `needle`.
fn lines(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// Truncated inside its first page (the counters: no write there faults), to nothing, inside
/// the second page, and to NIXL's 6,800 bytes (our extensions gone), with native histograms
/// off and on, while the rank records: each time the store is whole again with more
/// transfers, and at the end it holds every transfer the agent accepted.
#[test]
fn a_rank_survives_its_store_truncated_and_makes_it_whole_again() {
    for native in ["false", "true"] {
        let (_scratch, dir, port) = scratch_node();
        let extra = [("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", native)];
        let mut rank = spawn_recording(&dir, port, "cut", (1, 8, 200), &extra);
        let path = store_of(&rank, &dir);
        let full = std::fs::metadata(&path).unwrap().len();
        for cut in [100, 0, 5000, 6800] {
            let before = poll(DEADLINE, "a valid store", || transfers_in(&path));
            truncate(&path, cut);
            poll(DEADLINE, "the store whole again", || {
                assert!(rank.running(), "the rank died after a cut to {cut} bytes");
                let whole = std::fs::metadata(&path).is_ok_and(|m| m.len() == full);
                (whole && transfers_in(&path)? > before).then_some(())
            });
        }
        // Exits with success (a SIGBUS ended it with status 135), having said it once.
        let stderr = rank.finish();
        let warned = lines(&stderr, "was truncated by another process");
        assert_eq!(warned, 1, "native {native}:\n{stderr}");
        assert_eq!(transfers_in(&path), accepted(&stderr), "native {native}");
    }
}

/// The transfers of the rank with `pid` on the node's page, with `/health`'s rank count.
fn on_page(port: u16, pid: u32) -> Option<(u64, u64)> {
    let page = try_scrape(port)?;
    let pid = pid.to_string();
    let transfers: f64 = page
        .samples
        .iter()
        .filter(|s| s.label("pid") == Some(&pid))
        .filter(|s| {
            s.name == "agent_tx_requests_num_total" || s.name == "agent_rx_requests_num_total"
        })
        .map(|s| s.value)
        .sum();
    let health: serde_json::Value = serde_json::from_str(&get(port, "/health").ok()?.body).ok()?;
    Some((transfers as u64, health["ranks"].as_u64()?))
}

/// Two ranks, one recording and one idle: each one's store deleted, then replaced by another
/// file, then the whole directory deleted, then the recording rank's store deleted just before
/// it exits. Each time the store is made again (under a new name when another file took its
/// name, which is left alone) and the node's page and `/health` have both ranks again.
#[test]
fn a_deleted_or_replaced_store_comes_back_to_the_nodes_page() {
    let (_scratch, dir, port) = scratch_node();
    let mut busy = spawn_recording(&dir, port, "busy", (1, 8, 200), &[]);
    let mut idle = spawn_recording(&dir, port, "idle", (1, 8, 0), &[]);
    let both = |busy_before: u64| {
        move |(b, i, ranks): (u64, u64, u64)| b > busy_before && i == 8 && ranks == 2
    };
    let page = |busy: &Proc, idle: &Proc| {
        let (b, ranks) = on_page(port, busy.pid)?;
        let (i, _) = on_page(port, idle.pid)?;
        Some((b, i, ranks))
    };
    poll(DEADLINE, "both ranks on the page", || {
        page(&busy, &idle).filter(|&p| both(0)(p))
    });
    for rank in ["busy", "idle"] {
        let r = if rank == "busy" { &busy } else { &idle };
        // Deleted: made again under its name.
        let path = store_of(r, &dir);
        let before = page(&busy, &idle).unwrap().0;
        std::fs::remove_file(&path).unwrap();
        poll(DEADLINE, "the deleted store made again", || {
            (path.exists() && page(&busy, &idle).is_some_and(both(before))).then_some(())
        });
        // Replaced by another file, which its own writer holds (so that the store scan leaves
        // it): made again under a new name, the other file neither written nor removed.
        let planted = dir.join("planted");
        std::fs::write(&planted, b"not a store").unwrap();
        let holder = std::fs::File::open(&planted).unwrap();
        // SAFETY: flock(2) on the descriptor `holder` keeps open until the end of this round.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
        std::fs::rename(&planted, &path).unwrap();
        let before = page(&busy, &idle).map_or(0, |p| p.0);
        let renamed = poll(DEADLINE, "the replaced store made again", || {
            let other = stores_of(&dir, r.pid).into_iter().find(|p| *p != path)?;
            page(&busy, &idle).filter(|&p| both(before)(p))?;
            Some(other)
        });
        assert_eq!(std::fs::read(&path).unwrap(), b"not a store", "{rank}");
        assert!(transfers_in(&renamed).is_some());
        // Released, the store scan may remove it first.
        drop(holder);
        let _ = std::fs::remove_file(&path);
    }
    // The whole directory deleted: both stores made again in a directory made again.
    std::fs::remove_dir_all(&dir).unwrap();
    poll(DEADLINE, "both stores made again", || {
        let (b, i) = (stores_of(&dir, busy.pid), stores_of(&dir, idle.pid));
        (b.len() == 1 && i.len() == 1 && transfers_in(&i[0]) == Some(8)).then_some(())
    });
    assert!(busy.running() && idle.running());
    // Deleted just before the rank exits: its last check makes it again, with every transfer.
    let path = store_of(&busy, &dir);
    std::fs::remove_file(&path).unwrap();
    for (name, rank) in [("busy", busy), ("idle", idle)] {
        let stderr = rank.finish();
        let warned = lines(&stderr, "by another process; made it again");
        assert_eq!(warned, 1, "{name}:\n{stderr}");
        if name == "busy" {
            assert_eq!(transfers_in(&path), accepted(&stderr));
        }
    }
}
