//! VictoriaMetrics (single-node, v1.151.0), built from `test-deps/go/victoria-metrics`: a
//! remote-write target with a Prometheus-compatible query API (MetricsQL, which reads PromQL).

use std::path::Path;

use super::{answers_ok, port_in, GoProgram, QueryServer, Server};

/// A VictoriaMetrics server started in `work` (its data and log) on 127.0.0.1 (the port it
/// bound), once `/health` answers. No answer is cached (`-search.disableCache`) and samples
/// are searchable once stored (`-search.latencyOffset=0s`; the default hides the last 30 s),
/// which is still about 10 s after they arrive: the waits of [`crate::promql::PromQl`] poll for
/// up to 60 s.
pub fn start(work: &Path) -> QueryServer {
    let log = work.join("victoria-metrics.log");
    let mut server = Server::spawn(
        "VictoriaMetrics",
        GoProgram::VictoriaMetrics,
        &[
            "-httpListenAddr=127.0.0.1:0".into(),
            format!("-storageDataPath={}", work.join("vmdata").display()),
            "-search.latencyOffset=0s".into(),
            "-search.disableCache".into(),
        ],
        &log,
    );
    // `started server at http://127.0.0.1:41234/`
    let port = server.bound_port("started server at", port_in);
    server.wait_ready(|_| answers_ok(port, "/health"));
    QueryServer::new(server, port, &log)
}
