//! Instant queries over a Prometheus-compatible HTTP API (`/api/v1/query`): every server of the
//! tests answers them (Debian's Prometheus 2.42, Prometheus 3.16, VictoriaMetrics).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::poll_for;
use crate::transfers::assert_quantiles;

/// The query API of a server on 127.0.0.1.
pub struct PromQl {
    /// `http://127.0.0.1:<port>` (or https).
    base: String,
    agent: ureq::Agent,
    /// The `Authorization` header of every query.
    auth: Option<String>,
    /// The server's log, printed when a wait fails.
    log: PathBuf,
}

impl PromQl {
    /// The API of the server on `port` (plain http) whose log is `log`.
    pub fn new(port: u16, log: &Path) -> PromQl {
        PromQl::with(
            format!("http://127.0.0.1:{port}"),
            ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(10))
                .build(),
            None,
            log,
        )
    }

    /// The API at `base` (`<scheme>://127.0.0.1:<port>`) queried by `agent`, with the
    /// `Authorization` header `auth` when given; the server's log is `log`.
    pub fn with(base: String, agent: ureq::Agent, auth: Option<String>, log: &Path) -> PromQl {
        PromQl {
            base,
            agent,
            auth,
            log: log.to_owned(),
        }
    }

    /// `<scheme>://127.0.0.1:<port>` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The server's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An instant query's whole answer (`{"status": ..., "data": ...}`), evaluated at `time`
    /// (Unix seconds) if given, when it succeeds.
    pub fn query(&self, promql: &str, time: Option<f64>) -> Option<serde_json::Value> {
        let mut req = self
            .agent
            .get(&self.url("/api/v1/query"))
            .query("query", promql);
        if let Some(t) = time {
            req = req.query("time", &format!("{t:.3}"));
        }
        if let Some(auth) = &self.auth {
            req = req.set("Authorization", auth);
        }
        serde_json::from_str(&req.call().ok()?.into_string().ok()?).ok()
    }

    /// An instant query's series as (labels, value), when it succeeds (a series whose value is
    /// a native histogram has none: such a query fails here).
    pub fn vector(&self, promql: &str) -> Option<Vec<(serde_json::Value, f64)>> {
        series(self.query(promql, None)?)
    }

    /// Like [`PromQl::vector`], evaluated at `time` (Unix seconds).
    pub fn vector_at(&self, promql: &str, time: f64) -> Option<Vec<(serde_json::Value, f64)>> {
        series(self.query(promql, Some(time))?)
    }

    /// An instant query's values by the value of `label`, sorted by it, when the query
    /// succeeds (a series without the label counts as "").
    pub fn by_label(&self, label: &str, promql: &str) -> Option<Vec<(String, f64)>> {
        let mut out: Vec<(String, f64)> = self
            .vector(promql)?
            .iter()
            .map(|(m, v)| (m[label].as_str().unwrap_or("").to_owned(), *v))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Some(out)
    }

    /// The value of a query that must return exactly one series.
    pub fn one_value(&self, promql: &str) -> f64 {
        let v = self.vector(promql).unwrap_or_default();
        assert_eq!(v.len(), 1, "{promql}: {v:?}");
        v[0].1
    }

    /// `histogram_quantile(q, <native>)` for the median, p90 and p99 of `native` (a selector
    /// of one native-histogram series, such as `agent_xfer_time_us{pid=""}`), each checked
    /// against the exact quantile of `sorted` (the observed values, sorted) within `bound`
    /// (relative), as [`assert_quantiles`] does.
    pub fn assert_native_quantiles(
        &self,
        what: &str,
        native: &str,
        sorted: &[u64],
        bound: f64,
    ) -> Vec<(f64, f64, f64)> {
        assert_quantiles(what, sorted, bound, |q| {
            self.one_value(&format!("histogram_quantile({q}, {native})"))
        })
    }

    /// Waits until a query returns one series whose value is `expected`: its labels.
    pub fn wait_for_value(&self, promql: &str, expected: f64) -> serde_json::Value {
        let mut last = None;
        let got = poll_for(Duration::from_secs(60), || {
            let v = self.vector(promql).filter(|v| v.len() == 1);
            last = v.clone();
            v.filter(|v| v[0].1 == expected)
        });
        match got {
            Some(mut v) => v.remove(0).0,
            None => panic!("{promql}: {last:?}, not {expected}\n{}", self.log_text()),
        }
    }
}

/// The series of an instant query's answer as (labels, value), when they all have one.
fn series(answer: serde_json::Value) -> Option<Vec<(serde_json::Value, f64)>> {
    answer["data"]["result"]
        .as_array()?
        .iter()
        .map(|s| Some((s["metric"].clone(), s["value"][1].as_str()?.parse().ok()?)))
        .collect()
}
