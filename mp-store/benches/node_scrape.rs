//! The node scrape as a scraper sees it, at 8, 64 and 256 ranks, against the floor.
//!
//! For each size, that many rank processes (this binary, re-executed) each run what a
//! `prometheus_mp` exporter runs with native histograms on (its store, written by the crate's
//! writer, and its part in the election) on one store directory: a flush of 1,024 transfers,
//! then 64 more every 100 ms (the default run interval). One of them wins the election and
//! serves the port. Beside them, the **floor**: a minimal server in a process of its own (this
//! binary again), a thread blocked in `accept` that reads the request head and writes the whole
//! answer, head and page, from memory: the rank's text answer on one port, its protobuf answer
//! on another, captured from it beforehand. No server answers sooner on this machine: the floor
//! is the connection, the wake-ups of both sides and the copy of the bytes through the loopback.
//!
//! Once the ranks have run 3 s (the steady state of a node: the scan no longer lists the
//! directory), this process scrapes in rounds of four (rank text, floor text, rank protobuf,
//! floor protobuf), each scrape after a pause drawn at random from 50-400 ms (a seeded
//! generator), so that nothing can be prepared for a scrape, and measures the time to the last
//! byte of each answer. The ratios are the medians of each round's ratios (rank text / floor
//! text, rank protobuf / floor protobuf, rank protobuf / rank text).
//!
//! Also measured, so that a node's cost of being observed is known:
//! - each server's CPU time per scrape: the run time its serving thread (the rank's
//!   `nixl-scrape`) gained from one of its scrapes to the next (`/proc/<pid>/task/<tid>/
//!   schedstat`, in ns; the thread is idle between its scrapes), kernel time included;
//! - a rank's CPU time per flush: its thread's CPU clock around the store update and the
//!   election's tick, reported by every rank when it stops;
//! - memory: the peak RSS of the serving rank, of the other ranks and of the floor's process,
//!   and the allocations of making each page (`StoreScan::scrape_as` in this process, on the
//!   same directory, counted by this binary's allocator: allocations, bytes, and the peak of
//!   live bytes above those live before);
//! - in this process, back to back (its caches warm): reading the stores, and encoding them as
//!   text and as protobuf, the parts of the serving rank's scrape.
//!
//! Run with `cargo bench -p nixl-telemetry-mp-store --bench node_scrape` (about 3 minutes).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nixl_telemetry_base::settings::process_settings;
use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_mp_store::config::{Aggregate, MpConfig, ScanConfig};
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_mp_store::store_scan::{encode, encode_protobuf, StoreScan};
use nixl_telemetry_mp_store::{dir, join_election};
use nixl_telemetry_test_support::scrape::ACCEPT_PROTOBUF;
use nixl_telemetry_test_support::thread_cpu;
use nixl_telemetry_test_support::transfers::Rng;

const SIZES: [usize; 3] = [8, 64, 256];
/// Rounds of four scrapes per size.
const ROUNDS: usize = 40;
/// The scraper's pauses, drawn uniformly from this range (ms).
const PAUSE_MS: (f64, f64) = (50.0, 400.0);
const SEED: u64 = 0x4e0d_e5c2_a9e1_0041;
/// In-process repetitions of each part of a scrape.
const IN_PROCESS: usize = 50;
/// The variable that makes this binary a rank (its index) or the floor (its answers' files).
const ROLE: &str = "NODE_SCRAPE_RANK";
const FLOOR_ROLE: &str = "NODE_SCRAPE_FLOOR";

/// This binary's allocator: the system's, counting what is allocated (for the page's making).
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl Counting {
    fn grew(by: usize) {
        ALLOCATIONS.fetch_add(1, Relaxed);
        ALLOCATED.fetch_add(by, Relaxed);
        PEAK.fetch_max(LIVE.fetch_add(by, Relaxed) + by, Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator with the caller's arguments, so it
// keeps `GlobalAlloc`'s contract; the counters beside it allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Counting::grew(layout.size());
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires of it.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: `ptr` was allocated by `System` (through this allocator) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Relaxed);
        Counting::grew(new_size);
        // SAFETY: `ptr` was allocated by `System` with `layout`; the caller's `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// `n` transfers as `add_xfer_stats` stages them, of every size from 4 KiB to 64 MiB.
fn transfers(n: usize, seed: u64) -> Vec<Event> {
    use EventType::*;
    (0..n as u64)
        .flat_map(|t| {
            let t = t + seed;
            [
                Event::new(AgentXferPostTime, 3 + t % 40),
                Event::new(AgentXferTime, 5 + (t * 37) % 20_000),
                Event::new(AgentTxBytes, 4096 << (t % 15)),
                Event::new(AgentTxRequestsNum, 1),
            ]
        })
        .collect()
}

/// A rank: what the `prometheus_mp` exporter does per agent (its settings from the
/// environment, its store, its part in the election, and every flush applying the batch and
/// then ticking the election), with a flush of 1,024 transfers, then 64 more every 100 ms until
/// stdin closes; then it prints the CPU time of its first flush and the median of the others.
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
    let store = StoreWriter::create_with(&config.scan.dir, &id, &config.buckets, config.native)
        .unwrap_or_else(|e| panic!("rank {index}: {e}"));
    let election = join_election(&config.scan, config.addr);
    election
        .poll(Instant::now())
        .unwrap_or_else(|e| panic!("rank {index}: {e}"));
    let export = |events: &[Event]| {
        let start = thread_cpu();
        store.apply(events);
        election.tick(Instant::now());
        (thread_cpu() - start).as_nanos() as u64
    };
    let first = export(&transfers(1024, 0));
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let _ = std::io::stdin().lock().read_line(&mut String::new());
            stop.store(true, Relaxed);
        });
    }
    println!("READY");
    let mut flushes = Vec::new();
    let mut seed = 1024;
    while !stop.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let batch = transfers(64, seed);
        flushes.push(export(&batch));
        seed += 64;
    }
    flushes.sort();
    println!("FLUSH {first} {}", flushes[flushes.len() / 2]);
}

/// One scrape with the request `head`: the time to the last byte; the answer is in `answer`
/// (a scraper reuses its buffers).
fn scrape(port: u16, head: &[u8], answer: &mut Vec<u8>) -> Duration {
    answer.clear();
    let start = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(head).unwrap();
    s.read_to_end(answer).unwrap();
    start.elapsed()
}

/// The floor: a minimal server answering every connection with `answer` from memory, on a
/// thread blocked in `accept` (one connection at a time). Returns its port and its thread's id.
fn floor_server(answer: Vec<u8>) -> (u16, u32) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tid_tx, tid) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
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
            let _ = conn.write_all(&answer);
        }
    });
    (port, tid.recv().unwrap())
}

/// The floor's process: one floor server per file of `answers` (paths separated by `:`), their
/// ports and thread ids printed on one line, until stdin closes.
fn floor(answers: String) {
    let servers: Vec<String> = answers
        .split(':')
        .map(|path| {
            let (port, tid) = floor_server(std::fs::read(path).unwrap());
            format!("{port} {tid}")
        })
        .collect();
    println!("{}", servers.join(" "));
    let _ = std::io::stdin().lock().read_line(&mut String::new());
}

/// This binary as a child with `env`, its stdin and stdout piped; and its stdout.
fn child(env: &[(&str, &dyn AsRef<std::ffi::OsStr>)]) -> (Child, impl BufRead) {
    let mut cmd = nixl_telemetry_test_support::child::this_binary();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

/// The next line of `out`.
fn line(out: &mut impl BufRead) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line
}

/// The median of `v`.
fn median<T: Copy + PartialOrd>(v: &[T]) -> T {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The run time of thread `tid` of process `pid` (ns), from its `schedstat`.
fn run_time_ns(pid: u32, tid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).unwrap();
    stat.split(' ').next().unwrap().parse().unwrap()
}

/// The serving rank among `ranks`: its pid and the thread id of its endpoint thread.
fn serving(ranks: &[Child]) -> (u32, u32) {
    for r in ranks {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", r.id())) else {
            continue;
        };
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() == "nixl-scrape" {
                let tid = t.file_name().to_str().unwrap().parse().unwrap();
                return (r.id(), tid);
            }
        }
    }
    panic!("no rank serves");
}

/// Process `pid`'s peak resident set (KiB).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The allocations of `f` in this thread's process: (allocations, bytes, peak of live bytes
/// above those live before).
fn allocations(f: impl FnOnce()) -> (usize, usize, usize) {
    let (count, bytes, live) = (
        ALLOCATIONS.load(Relaxed),
        ALLOCATED.load(Relaxed),
        LIVE.load(Relaxed),
    );
    PEAK.store(live, Relaxed);
    f();
    (
        ALLOCATIONS.load(Relaxed) - count,
        ALLOCATED.load(Relaxed) - bytes,
        PEAK.load(Relaxed).saturating_sub(live),
    )
}

/// What one size measured.
struct Measured {
    ranks: usize,
    /// Time to the last byte: rank text, floor text, rank protobuf, floor protobuf.
    times: [Vec<Duration>; 4],
    /// The serving thread's CPU time per scrape (ns), in the order of `times`.
    cpu: [Vec<u64>; 4],
    /// The answers' sizes (text, protobuf).
    bytes: [usize; 2],
    /// The ranks' flushes (ns): the first (1,024 transfers), the median of the others (64).
    flush_first: Vec<u64>,
    flush: Vec<u64>,
    /// Peak RSS (KiB): the serving rank, the median of the others, the floor's process.
    rss: [u64; 3],
    /// Making the page in this process: (allocations, bytes, peak), text and protobuf.
    allocs: [(usize, usize, usize); 2],
    /// In this process, back to back (medians): reading, encoding text, encoding protobuf.
    parts: [Duration; 3],
}

/// Starts `n` ranks on a fresh directory and port, and the floor, measures, and stops them.
fn measure(n: usize, rng: &mut Rng) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let port = nixl_telemetry_test_support::free_port();
    let (ranks, mut outs): (Vec<Child>, Vec<_>) = (0..n)
        .map(|r| {
            child(&[
                (ROLE, &r.to_string()),
                ("LOCAL_RANK", &r.to_string()),
                ("NIXL_TELEMETRY_MULTIPROC_DIR", &dir.path()),
                ("NIXL_TELEMETRY_PROMETHEUS_PORT", &port.to_string()),
                ("NIXL_TELEMETRY_PROMETHEUS_LOCAL", &"y"),
                ("NIXL_TELEMETRY_NATIVE_HISTOGRAMS", &"true"),
            ])
        })
        .unzip();
    for out in &mut outs {
        assert_eq!(line(out).trim(), "READY");
    }
    let text_head = b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n".to_vec();
    let protobuf_head =
        format!("GET /metrics HTTP/1.1\r\nHost: bench\r\nAccept: {ACCEPT_PROTOBUF}\r\n\r\n")
            .into_bytes();
    let mut answer = Vec::new();
    // Wait until the page has every rank, then until the directory is no longer listed.
    let has = |answer: &[u8], what: &[u8]| answer.windows(what.len()).any(|w| w == what);
    let last = format!("local_rank=\"{}\"", n - 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            scrape(port, &text_head, &mut answer);
            if has(&answer, last.as_bytes()) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the endpoint never served {n} ranks"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    // The floor, with the rank's answers.
    let answers = tempfile::tempdir().unwrap();
    let mut bytes = [0; 2];
    for (i, head) in [&text_head, &protobuf_head].into_iter().enumerate() {
        scrape(port, head, &mut answer);
        std::fs::write(answers.path().join(i.to_string()), &answer).unwrap();
        bytes[i] = answer.len();
    }
    assert!(
        has(&answer, b"application/vnd.google.protobuf"),
        "protobuf served"
    );
    let files = [0, 1].map(|i| answers.path().join(i.to_string()).display().to_string());
    let (mut floor, mut floor_out) = child(&[(FLOOR_ROLE, &files.join(":"))]);
    let floors: Vec<u32> = (line(&mut floor_out).split_whitespace())
        .map(|v| v.parse().unwrap())
        .collect();
    let rank = serving(&ranks);
    // Each server: its port, the request head, and its thread (idle between its scrapes, so the
    // run time it gains from one of its scrapes to the next is one scrape's).
    let targets = [
        (port, &text_head, rank),
        (floors[0] as u16, &text_head, (floor.id(), floors[1])),
        (port, &protobuf_head, rank),
        (floors[2] as u16, &protobuf_head, (floor.id(), floors[3])),
    ];
    let mut pause = || {
        let (lo, hi) = PAUSE_MS;
        std::thread::sleep(Duration::from_secs_f64(
            (lo + (hi - lo) * rng.uniform()) / 1e3,
        ));
    };
    let mut times: [Vec<Duration>; 4] = Default::default();
    let mut cpu: [Vec<u64>; 4] = Default::default();
    // Where each server's thread's run time was when its last scrape started.
    let mut marks: [Option<u64>; 4] = [None; 4];
    for round in 0..=ROUNDS {
        for (i, &(p, head, (pid, tid))) in targets.iter().enumerate() {
            pause();
            // Both rank scrapes share a thread: the text scrape's run time ends where the
            // protobuf one's starts, and the protobuf one's at the next round's text scrape.
            let now = run_time_ns(pid, tid);
            let previous = if p == port { (i + 2) % 4 } else { i };
            if let Some(mark) = marks[previous].take() {
                cpu[previous].push(now - mark);
            }
            if round < ROUNDS {
                marks[i] = Some(now);
                times[i].push(scrape(p, head, &mut answer));
            }
        }
    }
    let others: Vec<u64> = (ranks.iter().filter(|r| r.id() != rank.0))
        .map(|r| peak_rss_kib(r.id()))
        .collect();
    let rss = [
        peak_rss_kib(rank.0),
        median(&others),
        peak_rss_kib(floor.id()),
    ];
    drop(floor.stdin.take());
    floor.wait().unwrap();
    // In this process, on the same directory: the allocations and parts of making the page.
    let scan = StoreScan::new(ScanConfig {
        dir: dir.path().to_owned(),
        stale_ttl: Duration::from_secs(30),
        aggregate: Aggregate::None,
    });
    let allocs = [false, true].map(|protobuf| {
        median(
            &(0..5)
                .map(|_| allocations(|| drop(std::hint::black_box(scan.scrape_as(protobuf)))))
                .collect::<Vec<_>>(),
        )
    });
    let timed = |f: &dyn Fn()| {
        median(
            &(0..IN_PROCESS)
                .map(|_| {
                    let start = Instant::now();
                    f();
                    start.elapsed()
                })
                .collect::<Vec<_>>(),
        )
    };
    let stores = scan.live_stores();
    assert_eq!(stores.len(), n);
    let parts = [
        timed(&|| drop(std::hint::black_box(scan.live_stores()))),
        timed(&|| drop(std::hint::black_box(encode(&stores, Aggregate::None)))),
        timed(&|| {
            drop(std::hint::black_box(encode_protobuf(
                &stores,
                Aggregate::None,
            )))
        }),
    ];
    drop(stores);
    let (mut flush_first, mut flush) = (Vec::new(), Vec::new());
    for (mut r, mut out) in ranks.into_iter().zip(outs) {
        drop(r.stdin.take());
        let flushes = line(&mut out);
        let mut v = (flushes.split_whitespace().skip(1)).map(|v| v.parse::<u64>().unwrap());
        flush_first.push(v.next().unwrap());
        flush.push(v.next().unwrap());
        r.wait().unwrap();
    }
    Measured {
        ranks: n,
        times,
        cpu,
        bytes,
        flush_first,
        flush,
        rss,
        allocs,
        parts,
    }
}

/// The median of the ratios `a[i] / b[i]`.
fn ratio(a: &[Duration], b: &[Duration]) -> f64 {
    let r: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
        .collect();
    median(&r)
}

fn report(all: &[Measured]) {
    println!(
        "node scrape, {ROUNDS} rounds per size (rank text, floor text, rank protobuf, floor \
         protobuf; {}-{} ms apart at random); medians",
        PAUSE_MS.0, PAUSE_MS.1
    );
    for m in all {
        let [rank_text, floor_text, rank_pb, floor_pb] = &m.times;
        println!("{} ranks:", m.ranks);
        println!(
            "  answer bytes: text {}, protobuf {}",
            m.bytes[0], m.bytes[1]
        );
        println!(
            "  last byte, ms: rank text {:.3}, floor text {:.3}, rank protobuf {:.3}, floor protobuf {:.3}",
            ms(median(rank_text)),
            ms(median(floor_text)),
            ms(median(rank_pb)),
            ms(median(floor_pb))
        );
        println!(
            "  ratios: text / floor {:.2}, protobuf / floor {:.2}, protobuf / text {:.2}",
            ratio(rank_text, floor_text),
            ratio(rank_pb, floor_pb),
            ratio(rank_pb, rank_text)
        );
        let cpu = m.cpu.each_ref().map(|c| median(c) as f64 / 1e6);
        println!(
            "  serving thread CPU per scrape, ms: rank text {:.3}, floor text {:.3}, rank protobuf {:.3}, floor protobuf {:.3}",
            cpu[0], cpu[1], cpu[2], cpu[3]
        );
        println!(
            "  in-process, back to back, ms: reading {:.3}, encoding text {:.3}, encoding protobuf {:.3}",
            ms(m.parts[0]),
            ms(m.parts[1]),
            ms(m.parts[2])
        );
        println!(
            "  rank CPU per flush, us (median over ranks): first (1,024 transfers) {:.1}, then (64) {:.1}",
            median(&m.flush_first) as f64 / 1e3,
            median(&m.flush) as f64 / 1e3
        );
        println!(
            "  peak RSS, KiB: serving rank {}, other ranks {}, floor {}",
            m.rss[0], m.rss[1], m.rss[2]
        );
        for (format, (count, bytes, peak)) in ["text", "protobuf"].iter().zip(m.allocs) {
            println!(
                "  making the {format} page: {count} allocations, {bytes} bytes, peak {peak} bytes"
            );
        }
    }
    // Growth with ranks: the time a rank adds, from 8 to 64 and from 64 to 256.
    for format in [0, 2] {
        let t: Vec<f64> = all.iter().map(|m| ms(median(&m.times[format]))).collect();
        let per_rank: Vec<String> = all
            .windows(2)
            .zip(t.windows(2))
            .map(|(m, t)| {
                format!(
                    "{}->{} {:.4}",
                    m[0].ranks,
                    m[1].ranks,
                    (t[1] - t[0]) / (m[1].ranks - m[0].ranks) as f64
                )
            })
            .collect();
        println!(
            "{} last byte, ms added per rank: {}",
            ["text", "", "protobuf"][format],
            per_rank.join(", ")
        );
    }
}

fn main() {
    if let Ok(index) = std::env::var(ROLE) {
        return rank(index);
    }
    if let Ok(answers) = std::env::var(FLOOR_ROLE) {
        return floor(answers);
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let before = load();
    let mut rng = Rng(SEED);
    let all: Vec<Measured> = SIZES.iter().map(|&n| measure(n, &mut rng)).collect();
    report(&all);
    println!("load average before: {}after: {}", before, load());
}
