//! A rank stopped with `kill -STOP` (a debugger, a job scheduler's suspend, `SIGTSTP`): when it
//! is the serving rank, the node endpoint answers nothing until it is continued, and no other
//! rank can take over, because the stopped process's listening socket keeps the port (the
//! kernel still queues connections on it); continued, it answers again and is still the one
//! server. With `nixl-telemetry serve` as a sidecar and ranks that only write, a stopped rank
//! leaves the endpoint answering, the stopped rank served with its last values.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use common::*;

/// The child processes' entry point (see `common::child_main`).
#[test]
fn child() {
    child_main();
}

/// Whether a scrape of `port` gets a byte of answer within `timeout`.
fn answers_within(port: u16, timeout: Duration) -> bool {
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("the kernel accepts");
    s.set_read_timeout(Some(timeout)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    s.read(&mut [0u8; 1]).is_ok_and(|n| n == 1)
}

/// Two ranks on `port` (with the variables `extra`) in a new directory: the scratch directory
/// holding it, the directory and the ranks.
fn two_ranks(port: u16, extra: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, Vec<Proc>) {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let ranks = [("rank0", "0", 1000), ("rank1", "1", 2000)].map(|(agent, local_rank, bytes)| {
        let dir = &dir;
        spawn_rank(&RankSpec {
            dir,
            port,
            agent,
            local_rank,
            bytes,
            extra,
        })
    });
    (scratch, dir, ranks.into())
}

#[test]
fn a_stopped_serving_rank_keeps_the_port_until_it_is_continued() {
    let port = free_port();
    let (_scratch, _, ranks) = two_ranks(port, &[]);
    poll(Duration::from_secs(10), "a scrape of both ranks", || {
        try_scrape(port).filter(|s| pids(s).len() == 2)
    });
    let all: Vec<u32> = ranks.iter().map(|r| r.pid).collect();
    let owner = listening_pid(port, &all).expect("one rank listens on the port");
    let (serving, other) = match ranks[0].pid == owner {
        true => (&ranks[0], &ranks[1]),
        false => (&ranks[1], &ranks[0]),
    };
    serving.signal(libc::SIGSTOP);
    // The kernel accepts the connection; nobody answers it. Meanwhile the other rank's
    // election (every 200 ms, from its flush ticks) has tried the port five times and more.
    assert!(!answers_within(port, Duration::from_secs(1)));
    assert_eq!(listening_pid(port, &[other.pid]), None, "no rank took over");
    assert_eq!(
        listening_pid(port, &[owner]),
        Some(owner),
        "it keeps the port"
    );
    // Continued: it answers again, and it is the one server.
    serving.signal(libc::SIGCONT);
    let s = poll(Duration::from_secs(10), "a scrape of both ranks", || {
        try_scrape(port).filter(|s| pids(s).len() == 2)
    });
    assert_eq!(s.get("agent_tx_bytes_total", "rank1", &[]), 2000.0);
    assert_eq!(listening_pid(port, &[other.pid]), None);
    assert_eq!(listening_pid(port, &[owner]), Some(owner));
    let mut stderr = String::new();
    for r in ranks {
        stderr.push_str(&r.finish());
    }
    assert_eq!(count_lines(&stderr, "WARN"), 0, "{stderr}");
}

/// The remedy: `serve` serves the directory, the ranks only write (`NIXL_TELEMETRY_MP_SERVE=0`).
#[test]
fn with_serve_as_a_sidecar_a_stopped_rank_leaves_the_endpoint_answering() {
    let (rank_port, serve_port) = (free_port(), free_port());
    // A stale TTL of 0: the stopped rank is served because its writer holds its store's lock,
    // not for the TTL.
    let only_write = [
        ("NIXL_TELEMETRY_MP_SERVE", "0"),
        ("NIXL_TELEMETRY_MP_STALE_TTL", "0"),
    ];
    let (_scratch, dir, ranks) = two_ranks(rank_port, &only_write);
    let mut serve = serve_command(&dir)
        .args(["--port", &serve_port.to_string(), "--local"])
        .args(["--stale-ttl", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    poll(Duration::from_secs(10), "serve shows both ranks", || {
        try_scrape(serve_port).filter(|s| pids(s).len() == 2)
    });
    for stopped in &ranks {
        stopped.signal(libc::SIGSTOP);
        let s = try_scrape(serve_port).expect("serve answers at once");
        assert_eq!(pids(&s), ranks.iter().map(|r| r.pid).collect());
        assert_eq!(s.get("agent_tx_bytes_total", "rank0", &[]), 1000.0);
        assert_eq!(s.get("agent_tx_bytes_total", "rank1", &[]), 2000.0);
        let health = get(serve_port, "/health").unwrap();
        assert_eq!(health.status, 200, "{}", health.body);
        stopped.signal(libc::SIGCONT);
    }
    for r in ranks {
        r.finish();
    }
    let _ = serve.kill();
    let _ = serve.wait();
}
