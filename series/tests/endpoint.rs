//! The scrape server over real sockets: routing and status codes, bounded heads, slow and
//! silent clients that cannot hold a scrape up, eviction when all slots are taken, a port
//! freed when the server stops, no SIGPIPE when a client vanishes; and the shared endpoint's
//! join/leave/duplicate/collision rules.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nixl_telemetry_base::sync::LockUnpoisoned;
use nixl_telemetry_core::{Event, EventType};
use nixl_telemetry_series::endpoint::server::{MetricsFn, PageFn};
use nixl_telemetry_series::endpoint::{BindError, JoinError, Limits, Server, SharedEndpoint};
use nixl_telemetry_series::{AgentSeries, Buckets};
use nixl_telemetry_test_support::child;
use nixl_telemetry_test_support::flood::{request_from, requests_under_flood};

const CT: &str = "text/plain; version=0.0.4; charset=utf-8";

fn loopback() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

fn metrics(body: &'static str) -> MetricsFn {
    Arc::new(PageFn(move || (CT, body.as_bytes().to_vec())))
}

fn server(limits: Limits) -> Server {
    Server::bind(loopback(), limits, metrics("m 1\n")).unwrap()
}

struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Sends raw bytes and reads the whole reply (the server closes every connection).
fn exchange(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let split = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8(all[..split].to_vec()).unwrap();
    let status = head[9..12].parse().unwrap();
    Reply {
        status,
        head,
        body: all[split + 4..].to_vec(),
    }
}

fn get(addr: SocketAddr, path: &str) -> Reply {
    exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

#[test]
fn serves_metrics_and_refuses_everything_else() {
    let s = server(Limits::default());
    let addr = s.local_addr();
    let r = get(addr, "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some(CT));
    assert_eq!(r.header("content-length"), Some("4"));
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(r.body, b"m 1\n");
    assert_eq!(get(addr, "/metrics?x=1").status, 200);
    let head = exchange(addr, b"HEAD /metrics HTTP/1.0\r\n\r\n");
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(head.header("content-length"), Some("4"));

    for path in ["/", "/metric", "/metrics/", "/favicon.ico"] {
        let r = get(addr, path);
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(
            r.header("content-length").unwrap(),
            r.body.len().to_string()
        );
    }
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get"] {
        let r = exchange(
            addr,
            format!("{method} /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc").as_bytes(),
        );
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
    }
    for garbage in [
        &b"HELLO\r\n\r\n"[..],
        b"GET /metrics\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nbad header\r\n\r\n",
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n",
    ] {
        assert_eq!(exchange(addr, garbage).status, 400, "{garbage:?}");
    }
    assert_eq!(exchange(addr, b"GET /metrics HTTP/2.0\r\n\r\n").status, 505);
    // A head larger than 8 KiB.
    let mut big = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for i in 0..400 {
        big.extend_from_slice(format!("X-Filler-{i}: 0123456789\r\n").as_bytes());
    }
    big.extend_from_slice(b"\r\n");
    assert_eq!(exchange(addr, &big).status, 431);
    // Still serving.
    assert_eq!(get(addr, "/metrics").status, 200);
}

#[test]
fn a_request_with_a_large_body_gets_413_never_a_cut_page() {
    // A page larger than socket buffers, so a reset after an unread body would cut it.
    let page: &'static str = Box::leak("m 1\n".repeat(100_000).into_boxed_str());
    let server = Server::bind(loopback(), Limits::default(), metrics(page)).unwrap();
    let addr = server.local_addr();
    // A body of 1 MiB: refused before any page is sent.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = vec![b'x'; 1 << 20];
    s.write_all(
        format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    // The server may close (and reset) before the whole body is sent: that is expected.
    let _ = s.write_all(&body);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    assert!(
        !text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    if !reply.is_empty() {
        assert!(
            text.starts_with("HTTP/1.1 413"),
            "{}",
            &text[..text.len().min(200)]
        );
    }
    // A small body is read past: the whole page arrives.
    let mut raw = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n".to_vec();
    raw.extend_from_slice(&[b'y'; 1000]);
    let r = exchange(addr, &raw);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), page.len());
}

#[test]
fn a_small_chunked_body_is_read_past_and_ambiguous_lengths_get_400() {
    // A page larger than socket buffers, so a reset after an unread body would cut it.
    let page: &'static str = Box::leak("m 1\n".repeat(100_000).into_boxed_str());
    let server = Server::bind(loopback(), Limits::default(), metrics(page)).unwrap();
    let addr = server.local_addr();
    let chunked = b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    // A 5-byte chunked body: read and discarded, then the whole page.
    let r = exchange(addr, &[&chunked[..], b"5\r\nhello\r\n0\r\n\r\n"].concat());
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), page.len());
    // The same body arriving in pieces: the server waits for its end.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[&chunked[..], b"5\r\nhel"].concat()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(b"lo\r\n0\r\nX-Trailer: 1\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    assert!(all.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(all.ends_with(page.as_bytes()), "the whole page");
    // A chunked body over 64 KiB cannot be read past: 413, never a cut page.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let big = [
        &chunked[..],
        format!("{:x}\r\n", 100_000).as_bytes(),
        &vec![b'z'; 100_000],
    ]
    .concat();
    // The server may close (and reset) before the whole body is sent: that is expected.
    let _ = s.write_all(&big);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    assert!(
        reply.is_empty() || text.starts_with("HTTP/1.1 413"),
        "{}",
        &text[..text.len().min(200)]
    );
    // Framing the server cannot trust (RFC 9112, section 6.3): 400.
    for (head, body) in [
        ("Content-Length: 0\r\nContent-Length: 5\r\n", "hello"),
        ("Content-Length: 5, 3\r\n", "hello"),
        (
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            "0\r\n\r\n",
        ),
        ("Transfer-Encoding: gzip\r\n", "hello"),
        ("Transfer-Encoding: chunked\r\n", "zz\r\nhello\r\n0\r\n\r\n"),
    ] {
        let raw = format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{head}\r\n{body}");
        assert_eq!(exchange(addr, raw.as_bytes()).status, 400, "{raw:?}");
    }
    // The same length repeated is one length.
    let raw = "GET /metrics HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello";
    assert_eq!(exchange(addr, raw.as_bytes()).status, 200);
}

#[test]
fn silent_and_slow_clients_do_not_hold_up_a_scrape() {
    let s = server(Limits::default());
    let addr = s.local_addr();
    // Connects and sends nothing.
    let _silent = TcpStream::connect(addr).unwrap();
    // Sends half a request and stops.
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(b"GET /metr").unwrap();
    // Trickles a request one byte every 50 ms.
    let trickler = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" {
            c.write_all(&[*b]).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        reply
    });
    std::thread::sleep(Duration::from_millis(100));
    for _ in 0..5 {
        let start = Instant::now();
        let r = get(addr, "/metrics");
        assert_eq!(r.status, 200);
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "a scrape took {:?}",
            start.elapsed()
        );
    }
    // The trickled request is answered once complete.
    assert!(trickler.join().unwrap().starts_with("HTTP/1.1 200 OK\r\n"));
}

/// Fifty idle connections to a server of eight slots: a scrape is answered at once (the idle
/// ones wait in the kernel, which hands them over once they have been silent for a second), and
/// every idle connection, once handed over, is told why it goes: 503 when evicted for a newer
/// one, 408 when its time is up; none is just reset.
#[test]
fn a_flood_of_idle_connections_is_evicted_with_an_answer() {
    let limits = Limits {
        max_connections: 8,
        request_timeout: Duration::from_secs(3),
        ..Limits::default()
    };
    let s = server(limits);
    let addr = s.local_addr();
    let idle: Vec<TcpStream> = (0..50).map(|_| TcpStream::connect(addr).unwrap()).collect();
    assert_eq!(get(addr, "/metrics").status, 200);
    let mut statuses = std::collections::BTreeMap::new();
    for mut c in idle {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        *statuses
            .entry(reply.get(..12).unwrap_or(&reply).to_owned())
            .or_insert(0) += 1;
    }
    let evicted = statuses.get("HTTP/1.1 503").copied().unwrap_or(0);
    let timed_out = statuses.get("HTTP/1.1 408").copied().unwrap_or(0);
    assert_eq!(evicted + timed_out, 50, "{statuses:?}");
    assert!(evicted > 0, "{statuses:?}");
}

#[test]
fn an_incomplete_request_times_out_with_408() {
    let limits = Limits {
        request_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let s = server(limits);
    let mut c = TcpStream::connect(s.local_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let start = Instant::now();
    let mut reply = String::new();
    let _ = c.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 408 "), "{reply:?}");
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn stopping_frees_the_port_at_once() {
    for _ in 0..3 {
        let s = server(Limits::default());
        let addr = s.local_addr();
        assert_eq!(get(addr, "/metrics").status, 200);
        let _idle = TcpStream::connect(addr).unwrap();
        let start = Instant::now();
        drop(s);
        assert!(start.elapsed() < Duration::from_secs(1));
        let again = Server::bind(addr, Limits::default(), metrics("again\n")).unwrap();
        assert_eq!(get(addr, "/metrics").body, b"again\n");
        drop(again);
    }
}

#[test]
fn bind_errors_tell_a_collision_from_other_failures() {
    let holder = TcpListener::bind(loopback()).unwrap();
    let taken = holder.local_addr().unwrap();
    match Server::bind(taken, Limits::default(), metrics("")) {
        Err(BindError::AddrInUse(_)) => {}
        other => panic!("{other:?}"),
    }
    // 192.0.2.1 (TEST-NET-1) is not an address of this machine.
    let foreign = SocketAddr::from(([192, 0, 2, 1], 0));
    match Server::bind(foreign, Limits::default(), metrics("")) {
        Err(BindError::Other(_)) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_panicking_producer_gives_500_and_the_server_goes_on() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let m: MetricsFn = Arc::new(PageFn(move || {
        if c.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("boom");
        }
        (CT, b"ok\n".to_vec())
    }));
    let s = Server::bind(loopback(), Limits::default(), m).unwrap();
    assert_eq!(get(s.local_addr(), "/metrics").status, 500);
    assert_eq!(get(s.local_addr(), "/metrics").body, b"ok\n");
}

/// Run as a child process (see below) with SIGPIPE at its default action, as in a C host.
#[test]
fn sigpipe_child() {
    if std::env::var_os("SCRAPE_SIGPIPE_CHILD").is_none() {
        return;
    }
    // SAFETY: `SIG_DFL` installs no handler, so no Rust code is made to run in signal context;
    // the call only changes SIGPIPE's process-wide disposition. That global change affects no
    // other test: this body runs only in the child that `a_vanishing_client_does_not_raise_sigpipe`
    // spawns with `SCRAPE_SIGPIPE_CHILD` set and `--exact sigpipe_child`, so it is alone there.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let big: &'static str = Box::leak("x".repeat(8 << 20).into_boxed_str());
    let s = Server::bind(loopback(), Limits::default(), metrics(big)).unwrap();
    for _ in 0..5 {
        // The client closes right after its request: the server's socket is in CLOSE_WAIT
        // when the response goes out, the client's kernel answers with a reset, and the next
        // write fails with EPIPE (which raises SIGPIPE unless suppressed).
        let mut c = TcpStream::connect(s.local_addr()).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        drop(c);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(s.local_addr(), "/metrics").body.len(), big.len());
}

#[test]
fn a_vanishing_client_does_not_raise_sigpipe() {
    child::output_ok(
        child::test("sigpipe_child").env("SCRAPE_SIGPIPE_CHILD", "1"),
        "sigpipe_child",
    );
}

static ENDPOINT: SharedEndpoint = SharedEndpoint::new("Test");
static SERIAL: Mutex<()> = Mutex::new(());

fn agent(name: &str) -> Arc<AgentSeries> {
    Arc::new(AgentSeries::new(name, "h", Buckets::default()))
}

/// A loopback address on a port reserved for this test process (test-support's `free_port`),
/// for the tests that check the port is bound and then free again.
fn free_port() -> SocketAddr {
    SocketAddr::from((
        Ipv4Addr::LOCALHOST,
        nixl_telemetry_test_support::free_port(),
    ))
}

#[test]
fn shared_endpoint_agents_join_and_leave() {
    let _g = SERIAL.lock_unpoisoned();
    let addr = free_port();
    let a = ENDPOINT.join(addr, agent("a")).unwrap();
    assert_eq!(ENDPOINT.local_addr(), Some(addr));
    // A later agent asking for another port joins the running endpoint.
    let b = ENDPOINT.join(free_port(), agent("b")).unwrap();
    let e = ENDPOINT.join(addr, agent("a")).err().unwrap();
    assert_eq!(
        e,
        JoinError::Duplicate(
            "Test exporter: duplicate agent name 'a'; each agent must have a unique name".into()
        )
    );
    a.apply(&[Event::new(EventType::AgentTxBytes, 42)]);
    let body = String::from_utf8(get(addr, "/metrics").body).unwrap();
    assert!(body.contains("agent_tx_bytes_total{agent_name=\"a\",hostname=\"h\"} 42\n"));
    assert!(body.contains("agent_tx_bytes_total{agent_name=\"b\",hostname=\"h\"} 0\n"));
    drop(a);
    let body = String::from_utf8(get(addr, "/metrics").body).unwrap();
    assert!(!body.contains("agent_name=\"a\""));
    assert!(body.contains("agent_name=\"b\""));
    assert_eq!(ENDPOINT.agents(), ["b"]);
    drop(b);
    assert_eq!(ENDPOINT.local_addr(), None);
    assert!(TcpStream::connect(addr).is_err(), "the endpoint stopped");
    // The port is free again.
    drop(TcpListener::bind(addr).unwrap());
}

#[test]
fn shared_endpoint_reports_a_collision() {
    let _g = SERIAL.lock_unpoisoned();
    let holder = TcpListener::bind(loopback()).unwrap();
    let addr = holder.local_addr().unwrap();
    let e = ENDPOINT.join(addr, agent("c")).err().unwrap();
    assert_eq!(
        e,
        JoinError::AddressInUse(format!(
            "Test telemetry endpoint '{addr}' could not be bound (likely already in use by \
             another process)"
        ))
    );
    assert_eq!(ENDPOINT.local_addr(), None);
    let e = ENDPOINT
        .join(SocketAddr::from(([192, 0, 2, 1], 9)), agent("c"))
        .err()
        .unwrap();
    assert!(matches!(e, JoinError::Other(_)), "{e:?}");
    assert!(e.message().contains("could not be started"), "{e:?}");
}

/// One scrape from `from`, sent at once: whether it got a 200 within `patience`.
fn scrape_ok(from: Ipv4Addr, addr: SocketAddr, patience: Duration) -> bool {
    request_from(from, addr, "/metrics", Duration::ZERO, patience).is_ok_and(|r| r.0 == 200)
}

#[test]
fn scrapes_keep_answering_under_a_connect_flood_from_one_address() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let s = server(Limits::default());
    let addr = s.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let connects = Arc::new(AtomicU64::new(0));
    // The flood: connect as fast as possible, never send, keep the newest 256 open.
    let flooders: Vec<_> = (0..2)
        .map(|_| {
            let (stop, connects) = (stop.clone(), connects.clone());
            std::thread::spawn(move || {
                let mut held = std::collections::VecDeque::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(c) = TcpStream::connect(addr) {
                        held.push_back(c);
                        connects.fetch_add(1, Ordering::Relaxed);
                        if held.len() > 256 {
                            held.pop_front();
                        }
                    }
                }
            })
        })
        .collect();
    while connects.load(Ordering::Relaxed) < 500 {
        std::thread::yield_now();
    }
    // The scraper is another client (another loopback address); the flood's own address is
    // served on a best-effort basis, measured alongside.
    const SCRAPES: u32 = 300;
    let (mut failed, mut slowest, mut failed_same) = (0, Duration::ZERO, 0);
    for i in 0..SCRAPES {
        let start = Instant::now();
        failed += !scrape_ok(Ipv4Addr::new(127, 0, 0, 2), addr, Duration::from_secs(5)) as u32;
        slowest = slowest.max(start.elapsed());
        if i % 3 == 0 {
            failed_same += !scrape_ok(Ipv4Addr::LOCALHOST, addr, Duration::from_secs(5)) as u32;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    println!(
        "{failed} of {SCRAPES} scrapes failed under a flood of {} connects from another address \
         (slowest {slowest:?}); {failed_same} of {} from the flood's own address",
        connects.load(Ordering::Relaxed),
        SCRAPES / 3
    );
    assert_eq!(failed, 0, "scrapes failed under the flood");
}

/// Idle connections held from 40 source addresses while `/metrics` and `/health` are asked 200
/// times from two others, by clients that send their request at once or up to 100 ms after
/// connecting: every request is answered.
#[test]
fn every_request_is_answered_under_an_idle_flood_from_many_addresses() {
    let s = server(Limits::default());
    let report = requests_under_flood(s.local_addr(), 200);
    assert!(report.failures.is_empty(), "{report:#?}");
}

/// Pages whose readiness and liveness a test sets, serving `/metrics` or not.
struct Switchable {
    ready: std::sync::atomic::AtomicBool,
    live: std::sync::atomic::AtomicBool,
    metrics: bool,
}

impl Switchable {
    fn new(metrics: bool) -> Arc<Switchable> {
        Arc::new(Switchable {
            ready: true.into(),
            live: true.into(),
            metrics,
        })
    }
}

impl nixl_telemetry_series::endpoint::server::Pages for Switchable {
    fn metrics(
        &self,
        _format: nixl_telemetry_series::endpoint::http::Format,
    ) -> (&'static str, Vec<u8>) {
        (CT, b"m 1\n".to_vec())
    }

    fn serves_metrics(&self) -> bool {
        self.metrics
    }

    fn health(&self) -> nixl_telemetry_series::endpoint::http::Health {
        use nixl_telemetry_series::endpoint::http::Health;
        if self.ready.load(Ordering::SeqCst) {
            Health::ready(r#""agents":2"#.to_owned())
        } else {
            Health::unavailable("no rank \"updated\" lately", r#""ranks":0"#.to_owned())
        }
    }

    fn liveness(&self) -> nixl_telemetry_series::endpoint::http::Health {
        use nixl_telemetry_series::endpoint::http::Health;
        if self.live.load(Ordering::SeqCst) {
            Health::ready(String::new())
        } else {
            Health::unavailable("a loop stopped", String::new())
        }
    }
}

/// The JSON body of `GET path`, with its status.
fn probe(addr: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let r = get(addr, path);
    assert_eq!(r.header("content-type"), Some("application/json"), "{path}");
    (r.status, serde_json::from_slice(&r.body).unwrap())
}

/// `GET /health` and `/readyz` (readiness), `/livez` (liveness): 200 and a JSON body while the
/// pages say so, 503 with the reason when not, each probe by its own answer; `HEAD` has no body;
/// other methods 405; an endpoint of health checks only answers `/metrics` 404.
#[test]
fn health_probes_answer_200_or_503_with_a_json_body() {
    use serde_json::json;
    let pages = Switchable::new(true);
    let s = Server::bind(loopback(), Limits::default(), pages.clone()).unwrap();
    let addr = s.local_addr();
    let ok = json!({"status": "ok", "agents": 2});
    let not_ready =
        json!({"status": "unavailable", "reason": "no rank \"updated\" lately", "ranks": 0});
    let alive = json!({"status": "ok"});
    let dead = json!({"status": "unavailable", "reason": "a loop stopped"});
    let all = |addr| {
        [
            probe(addr, "/health"),
            probe(addr, "/readyz"),
            probe(addr, "/livez"),
        ]
    };
    assert_eq!(
        all(addr),
        [(200, ok.clone()), (200, ok.clone()), (200, alive.clone())]
    );
    for path in ["/health", "/readyz", "/livez"] {
        let head = exchange(addr, format!("HEAD {path} HTTP/1.0\r\n\r\n").as_bytes());
        assert_eq!((head.status, head.body.len()), (200, 0), "{path}");
    }
    pages.ready.store(false, Ordering::SeqCst);
    assert_eq!(
        all(addr),
        [
            (503, not_ready.clone()),
            (503, not_ready.clone()),
            (200, alive)
        ]
    );
    pages.ready.store(true, Ordering::SeqCst);
    pages.live.store(false, Ordering::SeqCst);
    assert_eq!(all(addr), [(200, ok.clone()), (200, ok), (503, dead)]);
    let r = exchange(addr, b"POST /readyz HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(r.status, 405);
    assert_eq!(get(addr, "/healthz").status, 404);
    assert_eq!(get(addr, "/metrics").status, 200);
    // Health checks only: the probes, and no /metrics.
    let only = Server::bind(loopback(), Limits::default(), Switchable::new(false)).unwrap();
    assert_eq!(get(only.local_addr(), "/metrics").status, 404);
    assert_eq!(probe(only.local_addr(), "/livez").0, 200);
    // The default health of a page: ready and alive.
    let plain = server(Limits::default());
    for path in ["/health", "/readyz", "/livez"] {
        let r = get(plain.local_addr(), path);
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"{\"status\":\"ok\"}\n"[..]),
            "{path}"
        );
    }
}

#[test]
fn the_shared_endpoint_answers_protobuf_when_asked_and_native_histograms_are_on() {
    let _g = SERIAL.lock_unpoisoned();
    let native =
        AgentSeries::new("n", "h", Buckets::default()).with_native_histograms(true, 3, 160);
    // Port 0: the endpoint binds a port of the kernel's choosing and reports it.
    let a = ENDPOINT.join(loopback(), Arc::new(native)).unwrap();
    let addr = ENDPOINT.local_addr().unwrap();
    a.apply(&[Event::new(EventType::AgentXferTime, 100)]);
    let ask = |accept: &str| {
        exchange(
            addr,
            format!("GET /metrics HTTP/1.1\r\nAccept: {accept}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
    };
    let pb = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;\
              encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.1";
    let r = ask(pb);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some(nixl_telemetry_series::protobuf::CONTENT_TYPE)
    );
    let families = nixl_telemetry_series::protobuf::decode(&r.body).unwrap();
    let time = families
        .iter()
        .find(|f| f.name == "agent_xfer_time_us")
        .unwrap();
    let h = time.metric[0].histogram.as_ref().unwrap();
    assert_eq!(
        (h.sample_count, h.schema, h.positive_delta.as_slice()),
        (1, 3, &[1i64][..])
    );
    // Text stays the default and the answer to a scraper that prefers it.
    for accept in ["text/plain;version=0.0.4", "*/*"] {
        let r = ask(accept);
        assert!(r.header("content-type").unwrap().starts_with("text/plain"));
        assert!(String::from_utf8(r.body)
            .unwrap()
            .contains("agent_xfer_time_us_count"));
    }
    drop(a);
}
