//! `nixl-telemetry serve --dir DIR`: the same store scan and endpoint as a standalone process.
//! Ranks that run with `NIXL_TELEMETRY_MP_SERVE=0` only write their stores (nothing listens on
//! their port) and the sidecar serves them; a serving rank on another port shows the same
//! series; the sidecar outlives the ranks (their series go after the TTL) and stops cleanly on
//! SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// The child processes' entry point (see `common::child_main`).
#[test]
fn child() {
    child_main();
}

#[test]
fn serve_shows_the_ranks_on_its_own_port_and_outlives_them() {
    let cli = nixl_telemetry_test_support::profile_dir().join("nixl-telemetry");
    assert!(
        cli.exists(),
        "{} is missing: run `cargo build --workspace --all-targets` before `cargo test`",
        cli.display()
    );
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let (rank_port, serve_port) = (free_port(), free_port());
    let writers_only = [
        ("NIXL_TELEMETRY_MP_SERVE", "0"),
        ("NIXL_TELEMETRY_MP_STALE_TTL", "1"),
    ];
    let mut ranks: Vec<Proc> = (0..2u64)
        .map(|r| {
            spawn_rank(&RankSpec {
                dir: &dir,
                port: rank_port,
                agent: &format!("writer{r}"),
                local_rank: &r.to_string(),
                bytes: 100 * (r + 1),
                extra: &writers_only,
            })
        })
        .collect();
    assert!(
        port_closed(rank_port),
        "ranks with NIXL_TELEMETRY_MP_SERVE=0 never serve"
    );
    let mut serve = Command::new(&cli)
        .args(["serve", "--dir"])
        .arg(&dir)
        .args([
            "--port",
            &serve_port.to_string(),
            "--local",
            "--stale-ttl",
            "1",
        ])
        .env("NIXL_LOG_LEVEL", "WARN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(serve.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        format!(
            "serving http://127.0.0.1:{serve_port}/metrics for {}",
            dir.display()
        )
    );
    let s = poll(Duration::from_secs(10), "serve shows both writers", || {
        try_scrape(serve_port).filter(|s| pids(s).len() == 2)
    });
    assert_eq!(
        s.get("agent_tx_bytes_total", "writer1", &[("local_rank", "1")]),
        200.0
    );
    // A rank that serves, on its own port: both endpoints show the same three ranks.
    ranks.push(spawn_rank(&RankSpec {
        dir: &dir,
        port: rank_port,
        agent: "server",
        local_rank: "2",
        bytes: 300,
        extra: &[("NIXL_TELEMETRY_MP_STALE_TTL", "1")],
    }));
    let from_rank = poll(
        Duration::from_secs(10),
        "the serving rank shows 3 ranks",
        || try_scrape(rank_port).filter(|s| pids(s).len() == 3),
    );
    let from_serve = try_scrape(serve_port).unwrap();
    assert_eq!(
        sample_set(&from_rank.samples),
        sample_set(&from_serve.samples)
    );
    // The ranks exit; their series stay for the TTL, then the sidecar serves an empty page.
    for r in ranks {
        r.finish();
    }
    poll(
        Duration::from_secs(10),
        "the departed ranks' series go",
        || try_scrape(serve_port).filter(|s| s.samples.is_empty()),
    );
    // SIGTERM stops it cleanly.
    // SAFETY: kill(2) of our own child, still running (not yet waited for).
    assert_eq!(unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) }, 0);
    let status = serve.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{status}: {err}");
    assert_eq!(rest.trim(), "stopped");
    assert!(port_closed(serve_port));
}

#[test]
fn serve_refuses_bad_settings() {
    let cli = nixl_telemetry_test_support::profile_dir().join("nixl-telemetry");
    let dir = tempfile::tempdir().unwrap();
    for (args, message) in [
        (
            vec!["--aggregate", "avg"],
            "--aggregate='avg' is not a valid aggregation",
        ),
        (vec!["--port", "0"], "0 is not in 1..=65535"),
    ] {
        let out = Command::new(&cli)
            .args(["serve", "--dir"])
            .arg(dir.path())
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
}
