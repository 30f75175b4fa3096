//! The node scrape as a client sees it: 8 rank processes (this binary, re-executed) each run
//! what a `prometheus_mp` exporter runs (a store, and a part in the election) on one store
//! directory, one of them wins the election and serves the port, and this process scrapes it
//! 100 times over TCP, 10 ms apart as a scraper's requests are, measuring the time to the
//! first byte of the answer and to its end (medians and 90th percentiles).
//!
//! Beside it, with the same client and the same pacing:
//! - the **floor**: a minimal server in this process (a thread blocked in `accept`, which
//!   reads the request head and writes a page of the same size made beforehand). No
//!   server answers a scrape sooner on this machine: what it measures is the connection, the
//!   wake-ups of both threads and the copy of the page through the loopback. The rank and the
//!   floor are scraped alternately (rank, floor, rank, ...), so that a load on the machine
//!   weighs on both alike, and the median ratio of each pair is printed (`rank / floor`);
//! - the **floor that scans**: the same minimal server, scraping the directory in this process
//!   for every request (`StoreScan::scrape`, as the serving rank does) and writing the head and
//!   the page in one write, scraped in the same rounds (rank, floor, floor that scans): what
//!   any server that reads the stores when asked costs, against the floor;
//! - the same directory scraped in-process (`StoreScan::scrape`), 10 ms apart (its caches cold,
//!   as in the serving rank) and back to back (warm, as the `store` bench measures it).
//!
//! So first byte - floor is what the serving rank adds: its scrape, and the HTTP exchange. The
//! serving rank and the floor that scans both make their page when the request comes.
//! The scrapes are measured once the ranks have run for 3 s (the steady state of a node, where
//! the store scan no longer lists the directory: see `store_scan`), and also right after they
//! started.
//!
//! Run with `cargo bench -p nixl-telemetry-mp-store --bench node_scrape`.

use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nixl_telemetry_base::settings::process_settings;
use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_mp_store::config::{Aggregate, MpConfig, ScanConfig};
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_mp_store::store_scan::StoreScan;
use nixl_telemetry_mp_store::{dir, join_election};

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

/// A rank: what the `prometheus_mp` exporter does per agent (its settings from the
/// environment, its store, its part in the election, and every flush applying the batch and
/// then ticking the election), with a flush of 1,024 transfers, then 64 more every 100 ms (the
/// default run interval) until stdin closes.
fn rank(index: String) {
    let config =
        MpConfig::from_lookup(&process_settings).unwrap_or_else(|e| panic!("rank {index}: {e}"));
    dir::prepare(&config.scan.dir).unwrap_or_else(|e| panic!("rank {index}: {e}"));
    let id = Identity::for_this_process(
        &format!("rank-{index}"),
        &nixl_telemetry_series::hostname(),
        &config.local_rank,
        config.labels.clone(),
    );
    let store = StoreWriter::create(&config.scan.dir, &id, &config.buckets)
        .unwrap_or_else(|e| panic!("rank {index}: {e}"));
    let election = join_election(&config.scan, config.addr);
    election
        .poll(Instant::now())
        .unwrap_or_else(|e| panic!("rank {index}: {e}"));
    let export = |events: &[Event]| {
        store.apply(events);
        election.tick(Instant::now());
    };
    export(&transfers(1024, 0));
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
        export(&transfers(64, seed));
        seed += 64;
    }
}

/// One scrape: (time to the first byte, time to the end, bytes). `buf` is the client's
/// buffer, allocated once (a scraper reuses its buffers): 256 KiB, more than the page.
fn scrape(port: u16, buf: &mut [u8]) -> (Duration, Duration, usize) {
    let start = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
        .unwrap();
    let mut n = s.read(buf).unwrap();
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

/// `SCRAPES` rounds of one scrape of each of `ports` in turn, `pause` after each scrape: for
/// each port, the times to the first byte and to the end, and the size of the last answer.
fn scrapes(ports: &[u16], pause: Duration) -> Vec<(Vec<Duration>, Vec<Duration>, usize)> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut out = vec![(Vec::new(), Vec::new(), 0); ports.len()];
    for _ in 0..SCRAPES {
        for (&port, (first, total, bytes)) in ports.iter().zip(&mut out) {
            let (f, t, n) = scrape(port, &mut buf);
            first.push(f);
            total.push(t);
            *bytes = n;
            std::thread::sleep(pause);
        }
    }
    out
}

/// The floor: a minimal server answering every connection with what `respond` writes, on a
/// thread blocked in `accept` (one connection at a time). Returns its port.
fn floor_server(mut respond: impl FnMut(&mut TcpStream) + Send + 'static) -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut head = [0u8; 4096];
        for conn in listener.incoming() {
            let mut conn = conn.unwrap();
            conn.set_nodelay(true).unwrap();
            let mut n = 0;
            while !head[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut head[n..]) {
                    Ok(0) | Err(_) => break,
                    Ok(m) => n += m,
                }
            }
            respond(&mut conn);
        }
    });
    port
}

/// Writes `parts` whole, one after the other, in as few writes as the socket takes.
fn write_parts(conn: &mut TcpStream, parts: [&[u8]; 2]) {
    let mut sent = 0;
    let total = parts[0].len() + parts[1].len();
    while sent < total {
        let (a, b) = if sent < parts[0].len() {
            (&parts[0][sent..], parts[1])
        } else {
            (&parts[1][sent - parts[0].len()..], &[][..])
        };
        match conn.write_vectored(&[std::io::IoSlice::new(a), std::io::IoSlice::new(b)]) {
            Ok(0) | Err(_) => return,
            Ok(n) => sent += n,
        }
    }
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
            nixl_telemetry_test_support::child::this_binary()
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
    // Right after the ranks started, the directory changed less than the store scan's racy
    // margin (2 s) ago, so every scrape lists it; then, as on a node whose ranks run, it is
    // listed no more.
    let apart = Duration::from_millis(10);
    let (mut first_new, _, _) = scrapes(&[port], apart).remove(0);
    std::thread::sleep(Duration::from_secs(3));
    // The floor, with a page of the same size, scraped alternately with the rank.
    let mut page = Vec::new();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
        .unwrap();
    s.read_to_end(&mut page).unwrap();
    let floor = floor_server(move |conn| write_parts(conn, [&page, &[]]));
    // The floor that scans: the same minimal server, scraping the directory (in this process)
    // for every request, as a serving rank does, and writing the head and page in one write.
    let scanning = {
        let scan = StoreScan::new(ScanConfig {
            dir: dir.path().to_owned(),
            stale_ttl: Duration::from_secs(30),
            aggregate: Aggregate::None,
        });
        floor_server(move |conn| {
            let page = scan.scrape();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                page.len()
            );
            write_parts(conn, [head.as_bytes(), page.as_bytes()]);
        })
    };
    let [(mut first, mut total, bytes), (mut floor_first, mut floor_total, floor_bytes), (mut scanning_first, mut scanning_total, _)] =
        <[_; 3]>::try_from(scrapes(&[port, floor, scanning], apart)).unwrap();
    // Back to back, the idle vCPUs need no wake-up.
    let (mut floor_back_to_back, _, _) = scrapes(&[floor], Duration::ZERO).remove(0);
    // Each scrape of the rank against the floor's right after it.
    let ratio = |a: &[Duration], b: &[Duration]| -> f64 {
        let mut r: Vec<f64> = a
            .iter()
            .zip(b)
            .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
            .collect();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    };
    let first_ratio = ratio(&first, &floor_first);
    let total_ratio = ratio(&total, &floor_total);
    let scanning_first_ratio = ratio(&scanning_first, &floor_first);
    let scanning_total_ratio = ratio(&scanning_total, &floor_total);
    let scan = StoreScan::new(ScanConfig {
        dir: dir.path().to_owned(),
        stale_ttl: Duration::from_secs(30),
        aggregate: Aggregate::None,
    });
    let in_process = |pause: Duration, what: &dyn Fn()| -> Vec<Duration> {
        (0..SCRAPES)
            .map(|_| {
                std::thread::sleep(pause);
                let start = Instant::now();
                what();
                start.elapsed()
            })
            .collect()
    };
    let apart = Duration::from_millis(10);
    let mut cold = in_process(apart, &|| drop(std::hint::black_box(scan.scrape())));
    let mut warm = in_process(Duration::ZERO, &|| {
        drop(std::hint::black_box(scan.scrape()))
    });
    // The scrape's two halves, 10 ms apart: reading the stores, and encoding stores read
    // beforehand.
    let mut reading = in_process(apart, &|| drop(std::hint::black_box(scan.live_stores())));
    let stores = scan.live_stores();
    let mut encoding = in_process(apart, &|| {
        drop(std::hint::black_box(
            nixl_telemetry_mp_store::store_scan::encode(&stores, Aggregate::None),
        ))
    });
    println!(
        "node scrape, {RANKS} rank processes, {bytes} bytes ({floor_bytes} from the floor server), \
         {SCRAPES} scrapes (ms, median / p90):"
    );
    let row = |what: &str, v: &mut [Duration]| {
        println!(
            "  {what:<40} {:.3} / {:.3}",
            percentile(v, 0.5),
            percentile(v, 0.9)
        )
    };
    row("client, first byte, ranks just started", &mut first_new);
    row("client, first byte", &mut first);
    row("client, whole page", &mut total);
    row("floor server, first byte", &mut floor_first);
    row("floor server, whole page", &mut floor_total);
    row("floor server scanning, first byte", &mut scanning_first);
    row("floor server scanning, whole page", &mut scanning_total);
    row(
        "floor server, first byte, back to back",
        &mut floor_back_to_back,
    );
    row("in-process scrape, 10 ms apart", &mut cold);
    row("in-process scrape, back to back", &mut warm);
    row("in-process, reading alone, 10 ms apart", &mut reading);
    row("in-process, encoding alone, 10 ms apart", &mut encoding);
    println!(
        "  first byte - floor (median)              {:.3}",
        percentile(&mut first, 0.5) - percentile(&mut floor_first, 0.5)
    );
    println!(
        "  rank / floor, scraped alternately (median of the pairs' ratios): first byte {first_ratio:.2}, \
         whole page {total_ratio:.2}"
    );
    println!(
        "  floor scanning / floor, alternately: first byte {scanning_first_ratio:.2}, whole page \
         {scanning_total_ratio:.2}"
    );
    for mut r in ranks {
        drop(r.stdin.take());
        r.wait().unwrap();
    }
}
