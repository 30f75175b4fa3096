//! `nixl-telemetry serve --dir DIR`: the same store scan and endpoint as a standalone process.
//! Ranks that run with `NIXL_TELEMETRY_MP_SERVE=0` only write their stores (nothing listens on
//! their port) and the sidecar serves them; a serving rank on another port shows the same
//! series; the sidecar outlives the ranks (their series go after the TTL) and stops cleanly on
//! SIGTERM. `serve --textfile` writes the page for a real node_exporter's textfile collector,
//! which a real Prometheus scrapes.

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
    let mut serve = serve_command(&dir)
        .args([
            "--port",
            &serve_port.to_string(),
            "--local",
            "--stale-ttl",
            "1",
        ])
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
    // `/health`: 200 while ranks are served, with how many and the newest update's age.
    let health = get(serve_port, "/health").unwrap();
    assert_eq!(health.status, 200);
    let body: serde_json::Value = serde_json::from_str(&health.body).unwrap();
    assert_eq!(
        (&body["status"], &body["ranks"]),
        (&"ok".into(), &2.into()),
        "{body}"
    );
    assert!(
        body["newest_update_age_s"].as_f64().unwrap() < 60.0,
        "{body}"
    );
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
    // Every rank gone: `/health` says 503, and why.
    let health = get(serve_port, "/health").unwrap();
    assert_eq!(health.status, 503, "{}", health.body);
    let body: serde_json::Value = serde_json::from_str(&health.body).unwrap();
    assert_eq!(body["status"], "unavailable");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .starts_with("no rank has updated its store in"),
        "{body}"
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

/// `serve` answers a scraper that prefers the protobuf exposition with the native histograms
/// the ranks keep in their stores (`NIXL_TELEMETRY_NATIVE_HISTOGRAMS=true`), each rank's and,
/// with `--aggregate sum`, the node total's; text stays the default.
#[test]
fn serve_answers_a_protobuf_scraper_with_the_ranks_native_histograms() {
    use nixl_telemetry_series::protobuf;
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let (rank_port, serve_port) = (free_port(), free_port());
    let writers_only = [
        ("NIXL_TELEMETRY_MP_SERVE", "0"),
        ("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", "true"),
    ];
    let _ranks: Vec<Proc> = (0..2u64)
        .map(|r| {
            spawn_rank(&RankSpec {
                dir: &dir,
                port: rank_port,
                agent: &format!("native{r}"),
                local_rank: &r.to_string(),
                bytes: 1000 * (r + 1),
                extra: &writers_only,
            })
        })
        .collect();
    let mut serve = serve_command(&dir)
        .args(["--port", &serve_port.to_string(), "--local"])
        .args(["--aggregate", "sum"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let text = poll(Duration::from_secs(10), "serve shows both ranks", || {
        try_scrape(serve_port).filter(|s| pids(s).len() == 2)
    });
    assert!(!text.body.contains("request_size"));
    let (content_type, body) = scrape_as(serve_port, ACCEPT_PROTOBUF);
    assert_eq!(content_type, protobuf::CONTENT_TYPE);
    let families = protobuf::decode(&body).unwrap();
    let sizes: Vec<(Option<String>, u64, f64, i32)> = families
        .iter()
        .find(|f| f.name == "agent_tx_request_size_bytes")
        .unwrap()
        .metric
        .iter()
        .map(|m| {
            let h = m.histogram.as_ref().unwrap();
            let rank = m.label.iter().find(|l| l.name == "local_rank");
            (
                rank.map(|l| l.value.clone()),
                h.sample_count,
                h.sample_sum,
                h.positive_span.iter().map(|s| s.length as i32).sum(),
            )
        })
        .collect();
    // One transfer of 1000 and one of 2000 bytes: one bucket each, two in the total.
    assert_eq!(
        sizes,
        [
            (Some("0".into()), 1, 1000.0, 1),
            (Some("1".into()), 1, 2000.0, 1),
            (None, 2, 3000.0, 2)
        ]
    );
    let _ = serve.kill();
    let _ = serve.wait();
}

#[test]
fn serve_refuses_bad_settings() {
    let dir = tempfile::tempdir().unwrap();
    for (args, message) in [
        (
            vec!["--aggregate", "avg"],
            "--aggregate='avg' is not a valid aggregation",
        ),
        (vec!["--port", "0"], "0 is not in 1..=65535"),
        (
            vec!["--textfile", "/tmp/nixl.txt"],
            "--textfile /tmp/nixl.txt does not end in .prom",
        ),
        (
            vec!["--textfile", "/nonexistent-dir/nixl.prom"],
            "directory /nonexistent-dir does not exist",
        ),
        (vec!["--interval", "0"], "0 is not in 1..=86400"),
    ] {
        let out = serve_command(dir.path()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
}

/// A running process killed when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `serve --textfile` writes the page of four ranks (two jobs, node totals on) for Debian's
/// node_exporter, started with only its textfile collector: node_exporter serves it without a
/// textfile error, a Prometheus server scraping node_exporter returns each rank's and each
/// job's totals, the file is rewritten in place (never a partial or temporary `*.prom`), and
/// it is removed when `serve` stops.
#[test]
fn serve_writes_a_textfile_that_node_exporter_serves() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("mp");
    let textfiles = scratch.path().join("textfile");
    std::fs::create_dir(&textfiles).unwrap();
    let file = textfiles.join("nixl.prom");
    let unused_port = free_port();
    let _ranks: Vec<Proc> = (0..4u64)
        .map(|r| {
            let job = if r < 2 {
                "slurm_job_id=101"
            } else {
                "slurm_job_id=202"
            };
            spawn_rank(&RankSpec {
                dir: &dir,
                port: unused_port,
                agent: &format!("rank{r}"),
                local_rank: &r.to_string(),
                bytes: 1000 * (r + 1),
                extra: &[
                    ("NIXL_TELEMETRY_MP_SERVE", "0"),
                    ("NIXL_TELEMETRY_LABELS", job),
                ],
            })
        })
        .collect();
    let mut serve = serve_command(&dir)
        .arg("--textfile")
        .arg(&file)
        .args(["--interval", "1", "--aggregate", "sum"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(scratch.path().join("serve.stderr")).unwrap())
        .spawn()
        .unwrap();
    let serve_err = || std::fs::read_to_string(scratch.path().join("serve.stderr")).unwrap();
    let mut out = BufReader::new(serve.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        format!("writing {} every 1s for {}", file.display(), dir.display())
    );
    let page = poll(Duration::from_secs(10), "a textfile of four ranks", || {
        let text = std::fs::read_to_string(&file).ok()?;
        let samples = nixl_telemetry_series::text::parse(&text).unwrap();
        let ranks: std::collections::BTreeSet<_> =
            samples.iter().filter_map(|s| s.label("pid")).collect();
        (ranks.len() == 4).then_some(text)
    });
    assert!(!page
        .lines()
        .any(|l| !l.starts_with('#') && l.split(' ').count() != 2));
    assert!(port_closed(unused_port), "--textfile opens no port");
    // node_exporter, with only the textfile collector.
    let exporter_port = free_port();
    let exporter_log = scratch.path().join("node_exporter.log");
    let _exporter = Running(
        Command::new(tool("prometheus-node-exporter"))
            .args([
                "--collector.disable-defaults".to_owned(),
                "--collector.textfile".to_owned(),
                format!("--collector.textfile.directory={}", textfiles.display()),
                format!("--web.listen-address=127.0.0.1:{exporter_port}"),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&exporter_log).unwrap())
            .spawn()
            .unwrap(),
    );
    let exported = poll(Duration::from_secs(10), "node_exporter serves", || {
        // HTTP/1.0: node_exporter answers without chunked encoding.
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], exporter_port));
        let r = exchange(addr, b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
        (r.status == 200).then_some(r.body)
    });
    let log = || std::fs::read_to_string(&exporter_log).unwrap_or_default();
    assert!(
        exported.contains("\nnode_textfile_scrape_error 0\n"),
        "{exported}\n{}",
        log()
    );
    assert!(!log().contains("level=error"), "{}", log());
    let samples = nixl_telemetry_series::text::parse(&exported).unwrap();
    assert!(samples
        .iter()
        .any(|s| s.name == "node_textfile_mtime_seconds"
            && s.label("file").is_some_and(|f| f.ends_with("nixl.prom"))));
    // Every sample of the page is in node_exporter's (label order aside; missing labels
    // filled in empty).
    let ours = nixl_telemetry_series::text::parse(&page).unwrap();
    let agent_samples = samples
        .iter()
        .filter(|s| s.name.starts_with("agent_"))
        .count();
    assert_eq!(agent_samples, ours.len());
    // A Prometheus server scraping node_exporter.
    let prom = Prometheus::scraping(&scratch.path().join("prom"), &[exporter_port]);
    let by = |promql: &str, label: &str, n: usize| {
        let v = poll(Duration::from_secs(60), promql, || {
            prom.vector(promql).filter(|v| v.len() == n)
        });
        let mut v: Vec<(String, f64)> = v
            .into_iter()
            .map(|(m, x)| (m[label].as_str().unwrap().to_owned(), x))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(
        by(
            r#"sum by (local_rank) (agent_tx_bytes_total{pid!=""})"#,
            "local_rank",
            4
        ),
        [
            ("0".to_owned(), 1000.0),
            ("1".to_owned(), 2000.0),
            ("2".to_owned(), 3000.0),
            ("3".to_owned(), 4000.0)
        ],
        "{}",
        prom.log_text()
    );
    assert_eq!(
        by(
            r#"sum by (slurm_job_id) (agent_tx_bytes_total{pid=""})"#,
            "slurm_job_id",
            2
        ),
        [("101".to_owned(), 3000.0), ("202".to_owned(), 7000.0)]
    );
    assert_eq!(prom.vector("node_textfile_scrape_error").unwrap()[0].1, 0.0);
    // Rewritten every interval by rename: a new inode, never a temporary `*.prom`.
    let inode =
        |p: &std::path::Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let first = inode(&file);
    poll(Duration::from_secs(10), "the textfile is rewritten", || {
        (inode(&file) != first).then_some(())
    });
    let names: Vec<String> = std::fs::read_dir(&textfiles)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".prom"))
        .collect();
    assert_eq!(names, ["nixl.prom"]);
    // The directory gone: one message, then the writes resume once it is back.
    let away = scratch.path().join("away");
    std::fs::rename(&textfiles, &away).unwrap();
    poll(
        Duration::from_secs(10),
        "a failed write is reported",
        || serve_err().contains("cannot write").then_some(()),
    );
    std::fs::rename(&away, &textfiles).unwrap();
    poll(Duration::from_secs(10), "writes resume", || {
        serve_err().contains("writing").then_some(())
    });
    assert_eq!(
        serve_err().matches("cannot write").count(),
        1,
        "{}",
        serve_err()
    );
    // SIGTERM: stopped, and the file is gone.
    // SAFETY: kill(2) of our own child, still running (not yet waited for).
    assert_eq!(unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) }, 0);
    let status = serve.wait().unwrap();
    assert!(status.success(), "{status}: {}", serve_err());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest.trim(), "stopped");
    assert!(!file.exists());
}

/// `serve --textfile` in a directory another user can write, running as root: `nobody` plants
/// symbolic links to a root-only file at every name the temporary file could have had before
/// (`.<name>.tmp.<pid>`), once `serve` has written its first page. The file keeps its content
/// and mode, and `serve` goes on writing its page (under names nobody can predict, created new,
/// never followed). Needs root, to act as `nobody`; otherwise it says why and passes.
#[test]
fn serve_textfile_never_writes_through_a_link_another_user_planted() {
    use nixl_telemetry_test_support::other_user::{other_user, run_as_other_user};
    use std::os::unix::fs::PermissionsExt;
    if let Err(why) = other_user() {
        eprintln!("skipped: {why}");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = scratch.path().join("mp");
    std::fs::create_dir(&dir).unwrap();
    let textfiles = scratch.path().join("textfile");
    std::fs::create_dir(&textfiles).unwrap();
    // Writable by every user, as the batch-scheduler recipe makes node_exporter's directory.
    std::fs::set_permissions(&textfiles, std::fs::Permissions::from_mode(0o777)).unwrap();
    let secret = scratch.path().join("root-only");
    std::fs::write(&secret, "root's secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = textfiles.join("nixl.prom");
    let mut serve = serve_command(&dir)
        .arg("--textfile")
        .arg(&file)
        .args(["--interval", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first = poll(Duration::from_secs(10), "the first page", || {
        std::fs::metadata(&file).ok()?.modified().ok()
    });
    let link = textfiles.join(format!(".nixl.prom.tmp.{}", serve.id()));
    run_as_other_user("ln", &["-s".as_ref(), secret.as_os_str(), link.as_os_str()]);
    // Two more pages.
    poll(Duration::from_secs(10), "two more pages", || {
        let now = std::fs::metadata(&file).ok()?.modified().ok()?;
        (now.duration_since(first).ok()? >= Duration::from_millis(1500)).then_some(())
    });
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's secret\n");
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the root-only file's mode changed");
}
