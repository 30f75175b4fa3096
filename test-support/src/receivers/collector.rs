//! The OpenTelemetry Collector of `test-deps/go/otelcol` (v0.165): its OTLP/HTTP receiver on
//! 127.0.0.1 port 0 (over https when asked), every request it receives written by its file
//! exporter as one OTLP/JSON line, logged by its debug exporter, and, when asked, sent on by its
//! Prometheus remote-write exporter.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::{json_lines, port_in, GoProgram, Server};
use crate::poll_for;

/// How a Collector is started ([`OtelCollector::start`]); `Options::default()` receives plain
/// http and sends nothing on.
#[derive(Clone, Copy, Default)]
pub struct Options<'a> {
    /// A remote-write receiver every metric is sent on to too (names as the exporter translates
    /// them, with unit and `_total` suffixes; resource attributes in `target_info`).
    pub remote_write: Option<&'a str>,
    /// `resource_to_telemetry_conversion: enabled: true` on that exporter: every resource
    /// attribute becomes a label of every series too.
    pub resource_to_telemetry: bool,
    /// The receiver over https with this certificate and key (`tls: cert_file, key_file`).
    pub tls: Option<(&'a Path, &'a Path)>,
}

/// A Collector; killed when dropped.
pub struct OtelCollector {
    server: Server,
    endpoint: String,
    out: PathBuf,
}

impl OtelCollector {
    /// Started in `work` (its configuration, output and log) as `how` says.
    pub fn start(work: &Path, how: &Options) -> OtelCollector {
        let out = work.join("otelcol.jsonl");
        let mut exporters = vec!["file", "debug"];
        let tls = how
            .tls
            .map(|(cert, key)| {
                format!(
                    "        tls:\n          cert_file: {}\n          key_file: {}\n",
                    cert.display(),
                    key.display()
                )
            })
            .unwrap_or_default();
        let mut config = format!(
            "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:0\n\
             {tls}exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n  debug:\n    \
             verbosity: basic\n",
            out.display()
        );
        if let Some(url) = how.remote_write {
            exporters.push("prometheus_remote_write");
            config += &format!(
                "  prometheus_remote_write:\n    endpoint: {url}\n    \
                 resource_to_telemetry_conversion:\n      enabled: {}\n",
                how.resource_to_telemetry
            );
        }
        // No telemetry of its own: it would take port 8888.
        config += &format!(
            "service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    \
             metrics:\n      receivers: [otlp]\n      exporters: [{}]\n",
            exporters.join(", ")
        );
        let yml = work.join("otelcol.yml");
        std::fs::write(&yml, config).unwrap();
        let mut server = Server::spawn(
            "the OpenTelemetry Collector",
            GoProgram::Collector,
            &[format!("--config=file:{}", yml.display())],
            &work.join("otelcol.log"),
        );
        // `Starting HTTP server {..., "endpoint": "127.0.0.1:41234"}`
        let port = server.bound_port("Starting HTTP server", |line| {
            port_in(line.split("\"endpoint\":").nth(1)?)
        });
        // The receiver starts last, once the exporters behind it run; this line follows.
        server.wait_ready(|s| s.log().contains("Everything is ready"));
        let scheme = if how.tls.is_some() { "https" } else { "http" };
        OtelCollector {
            server,
            endpoint: format!("{scheme}://127.0.0.1:{port}"),
            out,
        }
    }

    /// The OTLP/HTTP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`), `https://` over TLS.
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// Every request the file exporter wrote so far (OTLP/JSON `ExportMetricsServiceRequest`s),
    /// complete lines only.
    pub fn exported(&self) -> Vec<Value> {
        json_lines(&self.out)
    }

    /// The exported requests once there are `n` of them (at most 60 s).
    pub fn wait_for(&self, n: usize) -> Vec<Value> {
        poll_for(Duration::from_secs(60), || {
            Some(self.exported()).filter(|r| r.len() >= n)
        })
        .unwrap_or_else(|| {
            panic!(
                "{} of {n} requests exported\n{}",
                self.exported().len(),
                self.server.log()
            )
        })
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.server.log()
    }
}
