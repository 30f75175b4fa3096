//! Helpers shared by the Prometheus plug-ins' integration tests (the `prometheus_mp` tests
//! include this file too): finding the plug-in, free ports, an HTTP client, scraping and
//! reading sample values, collectors configured through the environment, polling with a
//! deadline; the real Prometheus server to query is test-support's (re-exported here).
//!
//! The plug-in is a cdylib: `cargo build --workspace --all-targets` must run before
//! `cargo test` (cargo test does not build cdylibs).

#![allow(dead_code)]

#[allow(unused_imports)] // not every test binary scrapes
pub use nixl_telemetry_test_support::free_port;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::ops::Deref;
use std::time::{Duration, Instant};

use nixl_telemetry_core::{plugin, Collector, Config, EventType, ExporterChoice, MetricMask};
use nixl_telemetry_series::text::{self, Sample};
use nixl_telemetry_test_support::promql::PromQl;

/// Every variable a test may set, cleared between tests.
const VARS: [&str; 13] = [
    "NIXL_TELEMETRY_LABELS",
    "NIXL_TELEMETRY_LABELS_FROM",
    "POD_NAME",
    "POD_NAMESPACE",
    "NIXL_TELEMETRY_PROMETHEUS_PORT",
    "NIXL_TELEMETRY_PROMETHEUS_LOCAL",
    "NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US",
    "NIXL_TELEMETRY_NATIVE_HISTOGRAMS",
    "NIXL_TELEMETRY_ENABLE",
    "NIXL_TELEMETRY_EXPORTER",
    "NIXL_TELEMETRY_ENABLED_METRICS",
    "NIXL_TELEMETRY_BUFFER_SIZE",
    "NIXL_TELEMETRY_RUN_INTERVAL",
];

pub use nixl_telemetry_test_support::Serial;

#[allow(unused_imports)] // not every test binary starts a Prometheus
pub use nixl_telemetry_test_support::prometheus::{tool, Launch, Prometheus};

/// Takes the test lock, makes the plug-in findable and clears the variables.
pub fn serial() -> Serial {
    let s = nixl_telemetry_test_support::serial(&VARS);
    std::env::remove_var("NIXL_TELEMETRY_DIR");
    plugin_dir();
    s
}

/// Makes target/<profile> a plug-in directory (once), checking the plug-in was built.
pub fn plugin_dir() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = nixl_telemetry_test_support::built_plugins(&["prometheus"]);
        plugin::add_plugin_dir(&dir).unwrap();
    });
}

/// Sets the plug-in's port (loopback only).
pub fn use_port(port: u16) {
    std::env::set_var("NIXL_TELEMETRY_PROMETHEUS_PORT", port.to_string());
    std::env::set_var("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "true");
}

/// The configuration of a collector exporting to the plug-in: a queue of `buffer_size` events,
/// flushed every `interval`.
pub fn plugin_config(buffer_size: usize, interval: Duration) -> Config {
    Config {
        buffer_size,
        run_interval: interval,
        exporter: ExporterChoice::Plugin("prometheus".into()),
        enabled_metrics: MetricMask::ALL,
    }
}

/// A collector for `agent` exporting to the plug-in (port from the environment), flushing
/// every `interval` (long by default: tests flush explicitly).
pub fn collector_with(agent: &str, buffer_size: usize, interval: Duration) -> Collector {
    Collector::new(agent, plugin_config(buffer_size, interval))
        .unwrap_or_else(|e| panic!("creating agent {agent}: {e:?}"))
}

/// A collector as [`collector`] makes, serving on a free loopback port, and the port: a port
/// taken by another process between the probe and the bind is a collision (`BindFailed`), and
/// another port is tried.
pub fn collector_on_a_free_port(agent: &str) -> (Collector, u16) {
    for _ in 0..10 {
        let port = free_port();
        use_port(port);
        match Collector::new(agent, plugin_config(4096, Duration::from_secs(3600))) {
            Ok(c) => return (c, port),
            Err(e) if e.status == nixl_telemetry_core::Status::BindFailed => continue,
            Err(e) => panic!("creating agent {agent}: {e:?}"),
        }
    }
    panic!("no free port in 10 tries");
}

/// A collector with a 4096-event queue and no periodic flush during the test.
pub fn collector(agent: &str) -> Collector {
    collector_with(agent, 4096, Duration::from_secs(3600))
}

/// An HTTP reply.
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Sends `raw` and reads the reply to the end.
pub fn exchange(addr: SocketAddr, raw: &[u8]) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(raw)?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)?;
    let text = String::from_utf8(all).expect("UTF-8 reply");
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete head");
    Ok(Reply {
        status: head[9..12].parse().unwrap(),
        head: head.to_owned(),
        body: body.to_owned(),
    })
}

/// `GET path` on 127.0.0.1:port.
pub fn get(port: u16, path: &str) -> std::io::Result<Reply> {
    exchange(
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        format!("GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
}

#[allow(unused_imports)] // not every test binary scrapes in protobuf
pub use nixl_telemetry_test_support::scrape::{scrape_as, ACCEPT_PROTOBUF};

/// The body of a successful scrape.
pub fn scrape_text(port: u16) -> String {
    let r = get(port, "/metrics").expect("scrape");
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert_eq!(r.header("content-length"), Some(&*r.body.len().to_string()));
    r.body
}

/// The parsed samples of a scrape.
pub fn scrape(port: u16) -> Scrape {
    let body = scrape_text(port);
    Scrape {
        samples: text::parse(&body).expect("parsable exposition"),
        body,
    }
}

/// A parsed scrape.
pub struct Scrape {
    pub body: String,
    pub samples: Vec<Sample>,
}

impl Scrape {
    /// The value of `name` for `agent` with the extra labels `extra` (e.g. `[("le", "10")]`).
    pub fn value(&self, name: &str, agent: &str, extra: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.label("agent_name") == Some(agent)
                    && extra.iter().all(|(k, v)| s.label(k) == Some(v))
            })
            .map(|s| s.value)
    }

    /// Like [`value`](Self::value), failing when the sample is missing.
    pub fn get(&self, name: &str, agent: &str, extra: &[(&str, &str)]) -> f64 {
        self.value(name, agent, extra)
            .unwrap_or_else(|| panic!("no sample {name}{extra:?} for {agent} in\n{}", self.body))
    }

    /// The agents present.
    pub fn agents(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .samples
            .iter()
            .filter_map(|s| s.label("agent_name").map(str::to_owned))
            .collect();
        v.dedup();
        v.sort();
        v.dedup();
        v
    }

    /// Sample names with their number of occurrences, for one agent.
    pub fn names(&self, agent: &str) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for s in &self.samples {
            if s.label("agent_name") == Some(agent) {
                *m.entry(s.name.clone()).or_insert(0) += 1;
            }
        }
        m
    }
}

/// True when nothing accepts connections on 127.0.0.1:port.
pub fn port_closed(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        Duration::from_secs(2),
    )
    .is_err()
}

/// Polls `f` every 20 ms until it returns `Some`, failing after `timeout` with `what`.
pub fn poll<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The exact checks of a real server scraping the exporter (the 2.42 and 3.16 tests): agent
/// `agent` of this process records transfers of 5, 30, 200 and 700 µs (1000, 2000, 3500 and
/// 500 bytes), a backend error and 4096 registered bytes; `start(port)` starts a server
/// scraping the exporter's `port` every second as job `scrape`, whose query API must then give
/// exactly those totals, the last size, the histogram's count, sum and quantiles; one more
/// transfer (40 µs, 3000 bytes) reaches it on a later scrape, its `le` bucket of 50 spelled
/// `le50` holding 3 (2.x stores the exposition's `le="50"`, 3.x `le="50.0"`). Returns the
/// server, with the agent still alive.
pub fn scraped_exactly<P: Deref<Target = PromQl>>(
    agent: &str,
    le50: &str,
    start: impl FnOnce(u16) -> P,
) -> (P, Collector) {
    let port = free_port();
    use_port(port);
    let c = collector(agent);
    for (xfer, bytes) in [(5, 1000), (30, 2000), (200, 3500), (700, 500)] {
        c.add_xfer_stats(xfer, true, bytes, 2);
    }
    c.update_error(-3).unwrap();
    c.update_data(EventType::AgentMemoryRegistered, 4096);
    c.flush();
    let prom = start(port);
    let sel = format!("{{agent_name=\"{agent}\"}}");
    let labels = prom.wait_for_value(&format!("agent_tx_bytes_total{sel}"), 7000.0);
    assert_eq!(labels["job"], "scrape");
    assert_eq!(labels["instance"], format!("127.0.0.1:{port}"));
    assert_eq!(labels["agent_name"], agent);
    assert!(labels["hostname"].as_str().is_some_and(|h| !h.is_empty()));
    prom.wait_for_value(&format!("up{{instance=\"127.0.0.1:{port}\"}}"), 1.0);
    prom.wait_for_value(&format!("agent_tx_last_bytes{sel}"), 500.0);
    prom.wait_for_value(&format!("agent_tx_requests_num_total{sel}"), 4.0);
    prom.wait_for_value(&format!("agent_xfer_time_us_count{sel}"), 4.0);
    prom.wait_for_value(&format!("agent_xfer_time_us_sum{sel}"), 935.0);
    // Buckets 5 | 30 | 200 | 700 over 10, 25, 50, 100, 250, 500, 1000, ...: the median falls in
    // (25, 50] holding the 2nd of 4 observations -> 50; the 75th percentile in (100, 250] -> 250.
    prom.wait_for_value(
        &format!("histogram_quantile(0.5, agent_xfer_time_us_bucket{sel})"),
        50.0,
    );
    prom.wait_for_value(
        &format!("histogram_quantile(0.75, agent_xfer_time_us_bucket{sel})"),
        250.0,
    );
    prom.wait_for_value(
        &format!("agent_errors_total{{agent_name=\"{agent}\",status=\"backend\"}}"),
        1.0,
    );
    prom.wait_for_value(&format!("agent_memory_registered_total{sel}"), 4096.0);
    // New events reach the server on a later scrape.
    c.add_xfer_stats(40, true, 3000, 2);
    c.flush();
    prom.wait_for_value(&format!("agent_tx_bytes_total{sel}"), 10000.0);
    prom.wait_for_value(
        &format!("agent_xfer_time_us_bucket{{agent_name=\"{agent}\",le=\"{le50}\"}}"),
        3.0,
    );
    (prom, c)
}
