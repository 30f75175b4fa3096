//! The node scrape as a client sees it: 8 rank processes (this binary, re-executed) each run a
//! `prometheus_mp` exporter on one store directory, one of them wins the election and serves
//! the port, and this process scrapes it 100 times over TCP, measuring the time to the first
//! byte of the answer and to its end (medians and 90th percentiles). Beside it, the same
//! directory scraped in-process (`StoreScan::scrape`, as the `store` bench does), so the
//! difference is what the serving process adds: waking, the HTTP exchange, and whatever runs
//! beside the endpoint in a real rank (its flush thread).
//!
//! Run with `cargo bench -p telemetry-exporter-prometheus-mp --bench node_scrape`.

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nixl_telemetry::plugin::author::{InitParams, TelemetryPlugin};
use nixl_telemetry::{Event, EventType};
use telemetry_exporter_prometheus_mp::config::{Aggregate, ScanConfig};
use telemetry_exporter_prometheus_mp::store_scan::StoreScan;
use telemetry_exporter_prometheus_mp::PrometheusMpExporter;

const RANKS: usize = 8;
const SCRAPES: usize = 100;
const ROLE: &str = "NODE_SCRAPE_RANK";

/// `n` transfers as `add_xfer_stats` stages them.
fn transfers(n: usize, seed: u64) -> Vec<Event> {
    use EventType::*;
    (0..n as u64)
        .flat_map(|t| {
            let t = t + seed;
            [
                Event::new(AgentXferPostTime, 3 + t % 40),
                Event::new(AgentXferTime, 5 + (t * 37) % 20_000),
                Event::new(AgentTxBytes, 4096),
                Event::new(AgentTxRequestsNum, 1),
            ]
        })
        .collect()
}

/// A rank: its exporter, a flush of 1,024 transfers, then 64 more every 100 ms (the default
/// run interval) until stdin closes.
fn rank(index: String) {
    let mut exporter = PrometheusMpExporter::create(&InitParams {
        agent_name: &format!("rank-{index}"),
        max_events_buffered: 4096,
    })
    .unwrap_or_else(|e| panic!("rank {index}: {e:?}"));
    exporter.export(&transfers(1024, 0));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let _ = std::io::stdin().lock().read_line(&mut String::new());
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
    println!("READY");
    let mut seed = 1024;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        exporter.export(&transfers(64, seed));
        seed += 64;
    }
}

/// One scrape: (time to the first byte, time to the end, bytes).
fn scrape(port: u16) -> (Duration, Duration, usize) {
    let start = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
        .unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = s.read(&mut buf).unwrap();
    let first = start.elapsed();
    loop {
        let m = s.read(&mut buf[n..]).unwrap();
        if m == 0 {
            break;
        }
        n += m;
    }
    (first, start.elapsed(), n)
}

fn percentile(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e3
}

fn main() {
    if let Ok(index) = std::env::var(ROLE) {
        return rank(index);
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = nixl_telemetry_test_support::free_port();
    let mut ranks: Vec<Child> = (0..RANKS)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .env(ROLE, r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("NIXL_TELEMETRY_MULTIPROC_DIR", dir.path())
                .env("NIXL_TELEMETRY_PROMETHEUS_PORT", port.to_string())
                .env("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "y")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for r in &mut ranks {
        let mut line = String::new();
        std::io::BufReader::new(r.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "READY");
    }
    // Wait until the page has every rank.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n");
            let mut page = String::new();
            let _ = s.read_to_string(&mut page);
            if page.contains(&format!("local_rank=\"{}\"", RANKS - 1)) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the endpoint never served 8 ranks"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (mut first, mut total) = (Vec::new(), Vec::new());
    let mut bytes = 0;
    for _ in 0..SCRAPES {
        let (f, t, n) = scrape(port);
        first.push(f);
        total.push(t);
        bytes = n;
        std::thread::sleep(Duration::from_millis(10));
    }
    let scan = StoreScan::new(ScanConfig {
        dir: dir.path().to_owned(),
        stale_ttl: Duration::from_secs(30),
        aggregate: Aggregate::None,
    });
    let mut in_process: Vec<Duration> = (0..SCRAPES)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(scan.scrape());
            start.elapsed()
        })
        .collect();
    println!(
        "node scrape, {RANKS} rank processes, {bytes} bytes, {SCRAPES} scrapes (ms, median / p90):"
    );
    println!(
        "  client, first byte   {:.3} / {:.3}",
        percentile(&mut first, 0.5),
        percentile(&mut first, 0.9)
    );
    println!(
        "  client, whole page   {:.3} / {:.3}",
        percentile(&mut total, 0.5),
        percentile(&mut total, 0.9)
    );
    println!(
        "  in-process scrape    {:.3} / {:.3}",
        percentile(&mut in_process, 0.5),
        percentile(&mut in_process, 0.9)
    );
    for mut r in ranks {
        drop(r.stdin.take());
        r.wait().unwrap();
    }
}
