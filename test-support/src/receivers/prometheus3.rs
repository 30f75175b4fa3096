//! Prometheus 3.16, built from `test-deps/go/prometheus`: a server scraping loopback targets
//! (native histograms per scrape configuration, as 3.9 and later want them) with its
//! remote-write receiver on. (Its `promtool`: [`GoProgram::Promtool`].)

use std::path::Path;

use super::{answers_ok, port_in, GoProgram, QueryServer, Server};

/// A Prometheus 3.16 server started in `work` (its configuration, data and log) on 127.0.0.1
/// (the port it bound), scraping the loopback ports `targets` every second as job `scrape`,
/// with `scrape_native_histograms: native` (true: it asks for the protobuf exposition first and
/// keeps the native buckets of a histogram that has both), and the remote-write receiver on
/// (`--web.enable-remote-write-receiver`, which takes native histograms as they come); once
/// `/-/ready` answers.
pub fn start(work: &Path, targets: &[u16], native: bool) -> QueryServer {
    let yml = work.join("prometheus3.yml");
    let list: Vec<String> = targets.iter().map(|t| format!("'127.0.0.1:{t}'")).collect();
    std::fs::write(
        &yml,
        format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\nscrape_configs:\n\
             - job_name: scrape\n  scrape_native_histograms: {native}\n  static_configs: \
             [{{targets: [{}]}}]\n",
            list.join(", ")
        ),
    )
    .unwrap();
    let log = work.join("prometheus3.log");
    let mut server = Server::spawn(
        "Prometheus 3",
        GoProgram::Prometheus,
        &[
            format!("--config.file={}", yml.display()),
            format!("--storage.tsdb.path={}", work.join("tsdb3").display()),
            "--web.listen-address=127.0.0.1:0".into(),
            "--web.enable-remote-write-receiver".into(),
            // The bound address is logged at level info.
            "--log.level=info".into(),
        ],
        &log,
    );
    // `msg="Listening on" component=web address=127.0.0.1:41234`
    let port = server.bound_port("msg=\"Listening on\"", |line| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("address="))
            .and_then(port_in)
    });
    server.wait_ready(|_| answers_ok(port, "/-/ready"));
    QueryServer::new(server, port, &log)
}
