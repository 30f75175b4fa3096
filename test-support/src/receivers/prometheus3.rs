//! Prometheus 3.16, built from `test-deps/go/prometheus`: a server scraping loopback targets
//! (native histograms per scrape configuration, as 3.9 and later want them) with its
//! remote-write receiver on. (Its `promtool`: [`GoProgram::Promtool`].)

use std::path::Path;

use super::{answers_ok, port_in, GoProgram, QueryServer, Server};

/// How a server is started ([`start`]); `Options::default()` scrapes nothing and forwards
/// nothing.
#[derive(Clone, Copy, Default)]
pub struct Options<'a> {
    /// The loopback ports it scrapes every second (job `scrape`).
    pub targets: &'a [u16],
    /// `scrape_native_histograms: true` (3.9 and later): a scrape asks for the protobuf
    /// exposition first, and keeps the native buckets of a histogram that has both.
    pub native: bool,
    /// A remote-write receiver it forwards every sample to.
    pub forward: Option<Forward<'a>>,
    /// More command-line arguments.
    pub flags: &'a [&'a str],
}

/// Where and how a server forwards its samples (`remote_write:`).
#[derive(Clone, Copy)]
pub struct Forward<'a> {
    /// The receiver's URL.
    pub url: &'a str,
    /// `send_native_histograms`: native histograms are sent only when true.
    pub send_native_histograms: bool,
    /// The external label `sender` it adds to every sample it sends.
    pub sender: &'a str,
}

/// A Prometheus 3.16 server started in `work` (its configuration, data and log) on 127.0.0.1
/// (the port it bound) as `how` says, with the remote-write receiver on
/// (`--web.enable-remote-write-receiver`, which takes native histograms as they come); once
/// `/-/ready` answers.
pub fn start(work: &Path, how: &Options) -> QueryServer {
    let yml = work.join("prometheus3.yml");
    let external = how
        .forward
        .map(|f| format!(", external_labels: {{sender: {}}}", f.sender))
        .unwrap_or_default();
    let mut config = format!("global: {{scrape_interval: 1s, scrape_timeout: 1s{external}}}\n");
    if !how.targets.is_empty() {
        let list: Vec<String> = how
            .targets
            .iter()
            .map(|t| format!("'127.0.0.1:{t}'"))
            .collect();
        config += &format!(
            "scrape_configs:\n- job_name: scrape\n  scrape_native_histograms: {}\n  \
             static_configs: [{{targets: [{}]}}]\n",
            how.native,
            list.join(", ")
        );
    }
    if let Some(f) = how.forward {
        config += &format!(
            "remote_write:\n- url: {}\n  send_native_histograms: {}\n",
            f.url, f.send_native_histograms
        );
    }
    std::fs::write(&yml, config).unwrap();
    let log = work.join("prometheus3.log");
    let mut args = vec![
        format!("--config.file={}", yml.display()),
        format!("--storage.tsdb.path={}", work.join("tsdb3").display()),
        "--web.listen-address=127.0.0.1:0".into(),
        "--web.enable-remote-write-receiver".into(),
        // The bound address is logged at level info.
        "--log.level=info".into(),
    ];
    args.extend(how.flags.iter().map(|f| f.to_string()));
    let mut server = Server::spawn("Prometheus 3", GoProgram::Prometheus, &args, &log);
    // `msg="Listening on" component=web address=127.0.0.1:41234`
    let port = server.bound_port("msg=\"Listening on\"", |line| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("address="))
            .and_then(port_in)
    });
    server.wait_ready(|_| answers_ok(port, "/-/ready"));
    QueryServer::new(server, port, &log)
}
