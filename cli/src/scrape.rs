//! Reading a scrape endpoint (`http://host:port/metrics`: the Prometheus, DOCA `scrape` and
//! `prometheus_mp` exporters, or `nixl-telemetry serve`) for `top`: a GET through the push
//! exporters' HTTP client ([`nixl_telemetry_push::http::get`]), the text format parsed by
//! [`nixl_telemetry_series::text::parse`], and the samples grouped into one set of cumulative
//! totals per series identity (every label but `le` and `status`).

use std::collections::BTreeMap;
use std::time::Duration;

use nixl_telemetry::{EventType, METRIC_DESCRIPTORS};
use nixl_telemetry_push::http;
pub use nixl_telemetry_push::http::Url;
use nixl_telemetry_series::text::{parse, Sample};

/// Connect, send and receive timeout of one scrape.
const TIMEOUT: Duration = Duration::from_secs(3);
/// Largest answer read.
const MAX_RESPONSE: u64 = 64 << 20;

/// Parses a scrape endpoint's URL, `http://host[:port][/path]` (the path `/metrics` when none
/// is given; the port 80).
pub fn parse_url(text: &str) -> Result<Url, String> {
    let mut url = Url::parse(text).map_err(|e| format!("{text}: not a URL: {e}"))?;
    match url.scheme() {
        "http" => {}
        "https" => {
            return Err(format!(
                "{text}: https is not supported; scrape endpoints serve plain http"
            ))
        }
        _ => return Err(format!("{text}: not an http:// URL")),
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{text}: no host"));
    }
    if url.port() == Some(0) {
        return Err(format!("{text}: bad port '0'"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{text}: scrape endpoints take no user or password"));
    }
    // `http://host:port` (no path at all) reads `/metrics`; the URL type cannot tell it from
    // `http://host:port/`, the text can.
    let after_scheme = &text[text.find("://").map_or(0, |i| i + 3)..];
    if !after_scheme.contains('/') && url.query().is_none() && url.fragment().is_none() {
        url.set_path("/metrics");
    }
    Ok(url)
}

/// GETs `url` and returns the body of a 200 answer.
pub fn fetch(url: &Url) -> Result<String, String> {
    let body = http::get(url, "text/plain", TIMEOUT, MAX_RESPONSE)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The cumulative values of one series identity.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    /// Per event type: the counter (`agent_tx_bytes_total`, ...; errors by `status`).
    pub counters: [f64; nixl_telemetry::event::EVENT_TYPE_COUNT],
    /// `agent_xfer_time_us` buckets: (upper bound, cumulative count), in exposition order.
    pub xfer_buckets: Vec<(f64, f64)>,
    /// `agent_xfer_post_time_us` buckets.
    pub post_buckets: Vec<(f64, f64)>,
}

/// A series identity: its labels other than `le` and `status`, in exposition order.
pub type Identity = Vec<(String, String)>;

fn identity(sample: &Sample) -> Identity {
    sample
        .labels
        .iter()
        .filter(|(k, _)| k != "le" && k != "status")
        .cloned()
        .collect()
}

/// Groups a scrape's samples by identity (families other than NIXL's are ignored).
pub fn group(samples: &[Sample]) -> BTreeMap<Identity, Totals> {
    let bucket_name = |t: EventType| {
        METRIC_DESCRIPTORS[t as usize]
            .histogram
            .map(|h| format!("{}_bucket", h.name))
    };
    let xfer = bucket_name(EventType::AgentXferTime);
    let post = bucket_name(EventType::AgentXferPostTime);
    let mut out: BTreeMap<Identity, Totals> = BTreeMap::new();
    for s in samples {
        let event = if s.name == nixl_telemetry::event::ERRORS_SERIES.name {
            s.label("status").and_then(|status| {
                EventType::ALL
                    .into_iter()
                    .find(|t| t.status_label() == Some(status))
            })
        } else {
            EventType::ALL
                .into_iter()
                .find(|t| !t.is_error() && METRIC_DESCRIPTORS[*t as usize].counter.name == s.name)
        };
        let which = if Some(&s.name) == xfer.as_ref() {
            Some(0)
        } else if Some(&s.name) == post.as_ref() {
            Some(1)
        } else {
            None
        };
        let le = s.label("le").map(|le| match le {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or(f64::NAN),
        });
        match (event, which, le) {
            (Some(t), _, _) => out.entry(identity(s)).or_default().counters[t as usize] += s.value,
            (None, Some(which), Some(le)) => {
                let totals = out.entry(identity(s)).or_default();
                let list = if which == 0 {
                    &mut totals.xfer_buckets
                } else {
                    &mut totals.post_buckets
                };
                list.push((le, s.value));
            }
            _ => {}
        }
    }
    out
}

/// Scrapes `url` and groups its samples.
pub fn scrape(url: &Url) -> Result<BTreeMap<Identity, Totals>, String> {
    let body = fetch(url)?;
    let samples = parse(&body).map_err(|e| format!("{url}: {e}"))?;
    Ok(group(&samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = parse_url("http://127.0.0.1:9090/metrics").unwrap();
        assert_eq!(
            (u.host_str(), u.port_or_known_default(), u.path()),
            (Some("127.0.0.1"), Some(9090), "/metrics")
        );
        let u = parse_url("http://[::1]:9091").unwrap();
        assert_eq!(
            (u.host_str(), u.port_or_known_default(), u.path()),
            (Some("[::1]"), Some(9091), "/metrics")
        );
        assert_eq!(u.to_string(), "http://[::1]:9091/metrics");
        let u = parse_url("http://node-1").unwrap();
        assert_eq!(
            (u.port_or_known_default(), u.path()),
            (Some(80), "/metrics")
        );
        assert_eq!(parse_url("http://node-1/").unwrap().path(), "/");
        assert_eq!(
            parse_url("http://node-1:9/m?x=1").unwrap().as_str(),
            "http://node-1:9/m?x=1"
        );
        for (bad, why) in [
            ("https://x/metrics", "https is not supported"),
            ("ftp://x", "not an http:// URL"),
            ("http://:9", "not a URL"),
            ("http://x:0", "bad port"),
            ("http://x:99999", "not a URL"),
            ("http://u:p@x:9", "no user or password"),
            ("x:9/metrics", "not an http:// URL"),
        ] {
            let e = parse_url(bad).unwrap_err();
            assert!(e.starts_with(bad) && e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn samples_group_by_identity() {
        let body = "\
agent_tx_bytes_total{agent_name=\"a\",hostname=\"h\"} 10
agent_tx_bytes_total{agent_name=\"b\",hostname=\"h\"} 20
agent_errors_total{agent_name=\"a\",hostname=\"h\",status=\"backend\"} 3
agent_xfer_time_us_bucket{agent_name=\"a\",hostname=\"h\",le=\"10\"} 1
agent_xfer_time_us_bucket{agent_name=\"a\",hostname=\"h\",le=\"+Inf\"} 4
agent_xfer_time_us_sum{agent_name=\"a\",hostname=\"h\"} 99
other_metric{job=\"x\"} 5
";
        let groups = group(&parse(body).unwrap());
        assert_eq!(groups.len(), 2);
        let a = &groups[&vec![
            ("agent_name".into(), "a".into()),
            ("hostname".into(), "h".into()),
        ]];
        assert_eq!(a.counters[EventType::AgentTxBytes as usize], 10.0);
        assert_eq!(a.counters[EventType::AgentErrBackend as usize], 3.0);
        assert_eq!(a.xfer_buckets, [(10.0, 1.0), (f64::INFINITY, 4.0)]);
    }
}
