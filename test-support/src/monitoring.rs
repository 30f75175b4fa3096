//! The queries users run on the exporters' series, as the tests read them: the Grafana
//! dashboard's panels (`examples/grafana/nixl-telemetry-dashboard.json`) with their variables
//! expanded, and the recording rules of the monitoring bundle
//! (`deploy/prometheus/nixl-telemetry.rules.yml`) as one query each, the recorded series they
//! read written out, so that a server that does not evaluate the rules (VictoriaMetrics) can
//! answer them.

use std::path::PathBuf;

use crate::workspace_root;

/// The dashboard's JSON.
pub fn dashboard() -> serde_json::Value {
    let path = workspace_root().join("examples/grafana/nixl-telemetry-dashboard.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every panel target's expression with its panel's title, in the dashboard's order.
pub fn panel_expressions(d: &serde_json::Value) -> Vec<(String, String)> {
    d["panels"]
        .as_array()
        .expect("the dashboard has panels")
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().expect("a panel has a title").to_owned();
            p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap().to_owned()))
        })
        .collect()
}

/// The expression of target `target` (from 0) of the panel titled `title`.
pub fn panel_expression(d: &serde_json::Value, title: &str, target: usize) -> String {
    let p = d["panels"]
        .as_array()
        .expect("the dashboard has panels")
        .iter()
        .find(|p| p["title"] == title)
        .unwrap_or_else(|| panic!("no panel {title}"));
    p["targets"][target]["expr"]
        .as_str()
        .unwrap_or_else(|| panic!("no target {target} in panel {title}"))
        .to_owned()
}

/// The dashboard's query variables.
pub const VARIABLES: [&str; 5] = [
    "$hostname",
    "$agent",
    "$local_rank",
    "$slurm_job_id",
    "$k8s_namespace",
];

/// `expr` with Grafana's variables replaced by what they expand to: `$__rate_interval` by 10 s,
/// each of [`VARIABLES`] by its value in `chosen`, else by `.*` (All), so that a server can
/// parse the query.
pub fn expand_with(expr: &str, chosen: &[(&str, &str)]) -> String {
    substitute(expr, "10s", chosen)
}

/// [`expand_with`] every variable at All.
pub fn expand(expr: &str) -> String {
    substitute(expr, "10s", &[])
}

/// [`expand`] with `$__rate_interval` as `window` (a PromQL duration such as `2500ms`).
pub fn expand_over(expr: &str, window: &str) -> String {
    substitute(expr, window, &[])
}

/// `expr` with `$__rate_interval` as `window`, each of [`VARIABLES`] as `chosen` says or `.*`.
fn substitute(expr: &str, window: &str, chosen: &[(&str, &str)]) -> String {
    let mut e = expr.replace("$__rate_interval", window);
    for v in VARIABLES {
        let value = chosen.iter().find(|(n, _)| *n == v).map_or(".*", |c| c.1);
        e = e.replace(v, value);
    }
    assert!(!e.contains('$'), "a variable is left in {e}");
    e
}

/// The monitoring bundle's rules file.
pub fn rules_file() -> PathBuf {
    workspace_root().join("deploy/prometheus/nixl-telemetry.rules.yml")
}

/// One recording rule of the rules file.
#[derive(Clone, Debug)]
pub struct RecordingRule {
    /// The series it records.
    pub record: String,
    /// Its `quantile` label, if it has one.
    pub quantile: Option<String>,
    /// Its expression (a block scalar's lines joined by spaces).
    pub expr: String,
}

/// The recording rules of the rules file, in its order.
pub fn recording_rules() -> Vec<RecordingRule> {
    let text = std::fs::read_to_string(rules_file()).expect("the rules file");
    let lines: Vec<&str> = text.lines().collect();
    let mut rules = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(record) = line.trim().strip_prefix("- record: ") else {
            continue;
        };
        // The rule's own lines: up to the next entry of the list.
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim().starts_with("- "))
            .unwrap_or(lines.len());
        let body = &lines[i + 1..end];
        let at = body
            .iter()
            .position(|l| l.trim().starts_with("expr:"))
            .unwrap_or_else(|| panic!("{record} has no expr"));
        let first = body[at].trim()["expr:".len()..].trim();
        let expr = if first == "|-" {
            let indent = |l: &str| l.len() - l.trim_start().len();
            let own = indent(body[at]);
            body[at + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || indent(l) > own)
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            first.to_owned()
        };
        let quantile = body
            .iter()
            .find_map(|l| l.trim().strip_prefix("quantile: "))
            .map(|q| q.trim_matches('"').to_owned());
        rules.push(RecordingRule {
            record: record.trim().to_owned(),
            quantile,
            expr,
        });
    }
    rules
}

/// The expression of the rule recording `record` (with `quantile` when given), the series of
/// other rules it reads written out as their own expressions (in parentheses), down to the
/// exporters' series.
pub fn rule_query(record: &str, quantile: Option<&str>) -> String {
    let rules = recording_rules();
    let rule = rules
        .iter()
        .find(|r| r.record == record && r.quantile.as_deref() == quantile)
        .unwrap_or_else(|| panic!("no recording rule {record} {quantile:?}"));
    inline(&rule.expr, &rules)
}

/// `expr` with every recorded series written out (a series recorded by several rules, such as
/// the quantiles, is never read by another rule).
fn inline(expr: &str, rules: &[RecordingRule]) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = String::new();
    let mut rest = expr;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphabetic() || c == '_') {
        let preceded = rest[..start].chars().next_back().is_some_and(is_name);
        let end = rest[start..]
            .find(|c: char| !is_name(c))
            .map_or(rest.len(), |n| start + n);
        let word = &rest[start..end];
        out.push_str(&rest[..start]);
        let defined: Vec<&RecordingRule> = rules.iter().filter(|r| r.record == word).collect();
        if !preceded && !defined.is_empty() {
            assert_eq!(defined.len(), 1, "{word} is recorded by several rules");
            out.push_str(&format!("({})", inline(&defined[0].expr, rules)));
        } else {
            out.push_str(word);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}
