//! Reading a scrape endpoint (`http://host:port/metrics`: the Prometheus, DOCA `scrape` and
//! `prometheus_mp` exporters, or `nixl-telemetry serve`) for `top`: a GET through the push
//! exporters' HTTP client ([`nixl_telemetry_push::http::get_typed`]) asking for the protobuf
//! exposition first ([`ACCEPT`], as Prometheus with native histograms does), and the answer
//! grouped into one set of cumulative totals per series identity (every label but `le` and
//! `status`). A text answer is parsed by [`nixl_telemetry_series::text::parse`]; a protobuf one
//! ([`nixl_telemetry_series::protobuf::decode`]) is turned into the same samples, and its
//! native histograms (transfer and post time, TX and RX request sizes) are kept beside them. Endpoints
//! without native histograms answer text.

use std::collections::BTreeMap;
use std::time::Duration;

use nixl_telemetry_core::{EventType, METRIC_DESCRIPTORS};
use nixl_telemetry_push::http;
pub use nixl_telemetry_push::http::Url;
use nixl_telemetry_series::native::NativeHistogram;
use nixl_telemetry_series::protobuf::{self, MetricFamily};
use nixl_telemetry_series::text::{parse, Sample};
use nixl_telemetry_series::NATIVE_SIZE_FAMILIES;

/// Connect, send and receive timeout of one scrape.
const TIMEOUT: Duration = Duration::from_secs(3);
/// Largest answer read.
const MAX_RESPONSE: u64 = 64 << 20;
/// The `Accept` header of a scrape: the protobuf exposition (the only one carrying native
/// histograms) preferred, the text format 0.0.4 accepted, as Prometheus 2.42 asks with native
/// histograms on.
pub const ACCEPT: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;\
                          encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.1";

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

/// The cumulative values of one series identity.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    /// Per event type: the counter (`agent_tx_bytes_total`, ...; errors by `status`).
    pub counters: [f64; nixl_telemetry_base::event::EVENT_TYPE_COUNT],
    /// `agent_xfer_time_us` buckets: (upper bound, cumulative count), in exposition order.
    pub xfer_buckets: Vec<(f64, f64)>,
    /// `agent_xfer_post_time_us` buckets.
    pub post_buckets: Vec<(f64, f64)>,
    /// The native histogram of `agent_xfer_time_us` (protobuf scrapes of exporters keeping
    /// native histograms).
    pub xfer_native: Option<NativeHistogram>,
    /// The native histogram of `agent_xfer_post_time_us`.
    pub post_native: Option<NativeHistogram>,
    /// The native histograms of the TX and RX request sizes (`agent_tx_request_size_bytes`,
    /// `agent_rx_request_size_bytes`).
    pub size_native: [Option<NativeHistogram>; 2],
}

/// A series identity: its labels other than `le` and `status`, in exposition order.
pub type Identity = Vec<(String, String)>;

fn identity(labels: &[(String, String)]) -> Identity {
    labels
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
        let event = if s.name == nixl_telemetry_base::event::ERRORS_SERIES.name {
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
            (Some(t), _, _) => {
                out.entry(identity(&s.labels)).or_default().counters[t as usize] += s.value
            }
            (None, Some(which), Some(le)) => {
                let totals = out.entry(identity(&s.labels)).or_default();
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

/// A number as the text format writes it (`+Inf`, `0.5`, `100`).
fn number(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else {
        v.to_string()
    }
}

/// A native histogram of a scrape: its series, which of NIXL's families (0: transfer time, 1:
/// post time, 2 and 3: TX and RX request sizes), and the histogram.
type Native = (Identity, usize, NativeHistogram);

/// The samples the text format would carry for `families` (counters, gauges, classic
/// buckets with `+Inf`, `_sum` and `_count`), and the native histograms of NIXL's families.
fn from_protobuf(families: &[MetricFamily]) -> Result<(Vec<Sample>, Vec<Native>), String> {
    let histogram = |t: EventType| METRIC_DESCRIPTORS[t as usize].histogram.map(|h| h.name);
    let (xfer, post) = (
        histogram(EventType::AgentXferTime),
        histogram(EventType::AgentXferPostTime),
    );
    let mut samples = Vec::new();
    let mut natives = Vec::new();
    for f in families {
        let slot = if Some(f.name.as_str()) == xfer {
            Some(0)
        } else if Some(f.name.as_str()) == post {
            Some(1)
        } else {
            NATIVE_SIZE_FAMILIES
                .iter()
                .position(|(name, _, _)| *name == f.name)
                .map(|i| i + 2)
        };
        for m in &f.metric {
            let labels: Vec<(String, String)> = m
                .label
                .iter()
                .map(|l| (l.name.clone(), l.value.clone()))
                .collect();
            let sample = |suffix: &str, extra: Option<(&str, String)>, value: f64| Sample {
                name: format!("{}{suffix}", f.name),
                labels: labels
                    .iter()
                    .cloned()
                    .chain(extra.map(|(k, v)| (k.to_owned(), v)))
                    .collect(),
                value,
            };
            if let Some(c) = &m.counter {
                samples.push(sample("", None, c.value));
            }
            if let Some(g) = &m.gauge {
                samples.push(sample("", None, g.value));
            }
            let Some(h) = &m.histogram else { continue };
            let classic = h
                .bucket
                .iter()
                .map(|b| (b.upper_bound, b.cumulative_count))
                .chain((!h.bucket.is_empty()).then_some((f64::INFINITY, h.sample_count)));
            for (le, n) in classic {
                samples.push(sample("_bucket", Some(("le", number(le))), n as f64));
            }
            samples.push(sample("_sum", None, h.sample_sum));
            samples.push(sample("_count", None, h.sample_count as f64));
            if let (Some(slot), Some(native)) = (slot, h.native()) {
                let native =
                    native.map_err(|e| format!("{}: bad native histogram: {e}", f.name))?;
                natives.push((identity(&labels), slot, native));
            }
        }
    }
    Ok((samples, natives))
}

/// Groups a scrape's answer of type `content_type` (the protobuf exposition or text).
pub fn group_answer(content_type: &str, body: &[u8]) -> Result<BTreeMap<Identity, Totals>, String> {
    let media = content_type.split(';').next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/vnd.google.protobuf") {
        let samples = parse(&String::from_utf8_lossy(body))?;
        return Ok(group(&samples));
    }
    let families = protobuf::decode(body).map_err(|e| format!("bad protobuf exposition: {e}"))?;
    let (samples, natives) = from_protobuf(&families)?;
    let mut out = group(&samples);
    for (id, slot, native) in natives {
        let totals = out.entry(id).or_default();
        match slot {
            0 => totals.xfer_native = Some(native),
            1 => totals.post_native = Some(native),
            n => totals.size_native[n - 2] = Some(native),
        }
    }
    Ok(out)
}

/// Scrapes `url` (asking for the protobuf exposition first) and groups its answer.
pub fn scrape(url: &Url) -> Result<BTreeMap<Identity, Totals>, String> {
    let (content_type, body) = http::get_typed(url, ACCEPT, TIMEOUT, MAX_RESPONSE)?;
    group_answer(&content_type, &body).map_err(|e| format!("{url}: {e}"))
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
    fn a_protobuf_answer_groups_as_its_text_page_plus_the_native_histograms() {
        use nixl_telemetry_core::Event;
        use nixl_telemetry_series::{AgentSeries, Buckets};
        let agent =
            AgentSeries::new("a0", "h", Buckets::default()).with_native_histograms(true, 3, 160);
        agent.apply(&[
            Event::new(EventType::AgentXferTime, 100),
            Event::new(EventType::AgentXferTime, 3000),
            Event::new(EventType::AgentTxBytes, 4096),
            Event::new(EventType::AgentRxBytes, 1 << 20),
            Event::new(EventType::AgentErrBackend, 1),
        ]);
        let snap = agent.snapshot();
        let text = nixl_telemetry_series::text::encode(std::slice::from_ref(&snap));
        let from_text = group_answer("text/plain; version=0.0.4", text.as_bytes()).unwrap();
        let body = protobuf::encode(std::slice::from_ref(&snap));
        let from_pb = group_answer(protobuf::CONTENT_TYPE, &body).unwrap();
        assert_eq!(from_pb.len(), 1);
        let (id, pb) = from_pb.iter().next().unwrap();
        let t = &from_text[id];
        assert_eq!(pb.counters, t.counters);
        assert_eq!(pb.xfer_buckets, t.xfer_buckets);
        assert_eq!(pb.post_buckets, t.post_buckets);
        assert_eq!(
            (t.xfer_native.as_ref(), &t.size_native),
            (None, &[None, None])
        );
        assert_eq!(
            pb.xfer_native.as_ref(),
            snap.native_histogram(EventType::AgentXferTime)
        );
        assert_eq!(
            pb.post_native.as_ref(),
            snap.native_histogram(EventType::AgentXferPostTime)
        );
        assert_eq!(
            pb.size_native[0].as_ref(),
            snap.native_histogram(EventType::AgentTxBytes)
        );
        assert_eq!(
            pb.size_native[1].as_ref(),
            snap.native_histogram(EventType::AgentRxBytes)
        );
        assert!(group_answer(protobuf::CONTENT_TYPE, b"\x05abc").is_err());
    }

    #[test]
    fn samples_group_by_identity() {
        let body = "\
agent_tx_bytes_total{agent_name=\"a\",hostname=\"h\"} 10
agent_tx_bytes_total{agent_name=\"b\",hostname=\"h\"} 20
agent_errors_total{agent_name=\"a\",hostname=\"h\",status=\"backend\"} 3
agent_errors_total{agent_name=\"a\",hostname=\"h\",status=\"xfer_stalled\"} 2
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
        assert_eq!(a.counters[EventType::AgentErrXferStalled as usize], 2.0);
        assert_eq!(a.xfer_buckets, [(10.0, 1.0), (f64::INFINITY, 4.0)]);
    }
}
