//! Instant queries over a Prometheus-compatible HTTP API (`/api/v1/query`): Prometheus 3's and
//! VictoriaMetrics'.

use std::time::Duration;

use crate::prometheus::poll_for;

/// The query API of a server on 127.0.0.1.
pub struct PromQl {
    base: String,
    agent: ureq::Agent,
    /// The server's log, printed when a wait fails.
    log: std::path::PathBuf,
}

impl PromQl {
    /// The API of the server on `port` whose log is `log`.
    pub fn new(port: u16, log: &std::path::Path) -> PromQl {
        PromQl {
            base: format!("http://127.0.0.1:{port}"),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(10))
                .build(),
            log: log.to_owned(),
        }
    }

    /// `http://127.0.0.1:<port>` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// An instant query's series as (labels, value), when it succeeds (a series whose value is
    /// a native histogram has none: such a query fails here).
    pub fn vector(&self, promql: &str) -> Option<Vec<(serde_json::Value, f64)>> {
        let json = self.query(promql)?;
        json["data"]["result"]
            .as_array()?
            .iter()
            .map(|s| Some((s["metric"].clone(), s["value"][1].as_str()?.parse().ok()?)))
            .collect()
    }

    /// An instant query's whole answer (`{"status": ..., "data": ...}`), when it succeeds.
    pub fn query(&self, promql: &str) -> Option<serde_json::Value> {
        let text = self
            .agent
            .get(&self.url("/api/v1/query"))
            .query("query", promql)
            .call()
            .ok()?
            .into_string()
            .ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The value of a query that returns exactly one series.
    pub fn one_value(&self, promql: &str) -> f64 {
        let v = self.vector(promql).unwrap_or_default();
        assert_eq!(v.len(), 1, "{promql}: {v:?}");
        v[0].1
    }

    /// Waits until `promql` returns one series whose value is `expected`; its labels.
    pub fn wait_for_value(&self, promql: &str, expected: f64) -> serde_json::Value {
        let mut last = None;
        let got = poll_for(Duration::from_secs(60), || {
            let v = self.vector(promql).filter(|v| v.len() == 1);
            last = v.clone();
            v.filter(|v| v[0].1 == expected)
        });
        match got {
            Some(mut v) => v.remove(0).0,
            None => panic!(
                "{promql}: {last:?}, not {expected}\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            ),
        }
    }
}
