//! The OpenTelemetry Collector of `test-deps/go/otelcol` (v0.165): its OTLP/HTTP receiver on
//! 127.0.0.1 port 0, every request it receives written by its file exporter as one OTLP/JSON
//! line, logged by its debug exporter, and, when asked, sent on by its Prometheus remote-write
//! exporter.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::{json_lines, port_in, GoProgram, Server};
use crate::poll_for;

/// A Collector; killed when dropped.
pub struct OtelCollector {
    server: Server,
    port: u16,
    out: PathBuf,
}

impl OtelCollector {
    /// Started in `work` (its configuration, output and log), sending every metric on to the
    /// remote-write receiver `remote_write` too when given (names as the exporter translates
    /// them, with unit and `_total` suffixes; resource attributes in `target_info`).
    pub fn start(work: &Path, remote_write: Option<&str>) -> OtelCollector {
        let out = work.join("otelcol.jsonl");
        let mut exporters = vec!["file", "debug"];
        let mut config = format!(
            "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:0\n\
             exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n  debug:\n    \
             verbosity: basic\n",
            out.display()
        );
        if let Some(url) = remote_write {
            exporters.push("prometheus_remote_write");
            config += &format!("  prometheus_remote_write:\n    endpoint: {url}\n");
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
        OtelCollector { server, port, out }
    }

    /// The OTLP/HTTP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
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
