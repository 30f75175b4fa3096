//! A serving rank forks a child that outlives it: once the rank is killed, nothing of the
//! rank's is kept by the child (the owner lock, the port, the rank's store lock), so another
//! rank takes the endpoint over while the child still lives.

mod common;

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use common::*;
use nixl_telemetry_base::owner_only::try_lock_exclusive;
use nixl_telemetry_mp_store::election::lock_file_name;

/// The child processes' entry point (see `common::child_main`).
#[test]
fn child() {
    child_main();
}

/// Kills the forked sleeper when the test ends, however it ends.
struct Sleeper(libc::pid_t);

impl Sleeper {
    fn alive(&self) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(self.0, 0) == 0 }
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        // SAFETY: signals the sleeper this test started (through its rank).
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

#[test]
fn a_killed_serving_rank_s_child_keeps_neither_its_lock_nor_its_port_nor_its_store() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let port = free_port();
    let mut serving = spawn_rank(&RankSpec {
        dir: &dir,
        port,
        agent: "serving",
        local_rank: "0",
        bytes: 1000,
        extra: &[(FORK_SLEEPER, "1")],
    });
    let (rank_pid, sleeper_pid) = serving.ready.split_once(' ').unwrap();
    let sleeper = Sleeper(sleeper_pid.parse().unwrap());
    assert_eq!(rank_pid, serving.pid.to_string());
    assert_eq!(listening_pid(port, &[serving.pid]), Some(serving.pid));
    let store = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with(&format!("nixl.{rank_pid}.")) && name.ends_with(".mmap")
        })
        .expect("the rank's store");

    serving.kill9();
    assert!(sleeper.alive());
    // The owner lock, the port and the store lock are free although the rank's child lives.
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let owner_lock = File::open(dir.join(lock_file_name(&addr))).unwrap();
    assert!(
        try_lock_exclusive(&owner_lock).unwrap(),
        "the owner lock is free"
    );
    drop(owner_lock);
    drop(TcpListener::bind(addr).expect("the port is free"));
    let store_lock = File::open(&store).unwrap();
    assert!(
        try_lock_exclusive(&store_lock).unwrap(),
        "the dead rank's store is not locked"
    );
    drop(store_lock);

    // So another rank takes the endpoint over while the child lives.
    let survivor = spawn_rank(&RankSpec {
        dir: &dir,
        port,
        agent: "survivor",
        local_rank: "1",
        bytes: 2000,
        extra: &[],
    });
    let s = poll(Duration::from_secs(30), "the survivor serving", || {
        try_scrape(port).filter(|s| pids(s).contains(&survivor.pid))
    });
    assert_eq!(
        s.get("agent_tx_bytes_total", "survivor", &[("local_rank", "1")]),
        2000.0
    );
    assert!(sleeper.alive());
    survivor.finish();
}
