//! Reading a scrape endpoint (`http://host:port/metrics`: the Prometheus, DOCA `scrape` and
//! `prometheus_mp` exporters, or `nixl-telemetry serve`) for `top`: a plain HTTP/1.0 GET, the
//! text format parsed by [`nixl_telemetry_series::text::parse`], and the samples grouped into
//! one set of cumulative totals per series identity (every label but `le` and `status`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use nixl_telemetry::{EventType, METRIC_DESCRIPTORS};
use nixl_telemetry_series::text::{parse, Sample};

/// Connect, send and receive timeout of one scrape.
const TIMEOUT: Duration = Duration::from_secs(3);
/// Largest response read.
const MAX_RESPONSE: u64 = 64 << 20;

/// A parsed `http://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Url {
    /// Parses `http://host[:port][/path]` (path defaults to `/metrics`, port to 80).
    pub fn parse(text: &str) -> Result<Url, String> {
        let rest = text.strip_prefix("http://").ok_or_else(|| {
            if text.starts_with("https://") {
                format!("{text}: https is not supported; scrape endpoints serve plain http")
            } else {
                format!("{text}: not an http:// URL")
            }
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/metrics"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("{text}: unterminated [IPv6 address]"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(format!("{text}: no host"));
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{text}: bad port '{p}'"))?,
        };
        Ok(Url {
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "http://[{}]:{}{}", self.host, self.port, self.path)
        } else {
            write!(f, "http://{}:{}{}", self.host, self.port, self.path)
        }
    }
}

/// Decodes a `Transfer-Encoding: chunked` body.
fn unchunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunked body")?;
        let size_text = std::str::from_utf8(&body[..line_end]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "bad chunk size")?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if body.len() < size + 2 {
            return Err("truncated chunked body".into());
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// GETs `url` and returns the body of a 200 response.
pub fn fetch(url: &Url) -> Result<String, String> {
    let addrs: Vec<_> = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", url.host))?
        .collect();
    let mut last = String::from("no address");
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to {addr}: {e}"),
        }
    }
    let mut stream = stream.ok_or(last)?;
    let io = |e: std::io::Error| format!("{url}: {e}");
    stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
    let host = if url.host.contains(':') {
        format!("[{}]", url.host)
    } else {
        url.host.clone()
    };
    // One write: a server may answer (and close) as soon as it has the request head.
    let request = format!(
        "GET {} HTTP/1.0\r\nHost: {host}:{}\r\nAccept: text/plain\r\nUser-Agent: nixl-telemetry-top\r\n\r\n",
        url.path, url.port
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut response = Vec::new();
    stream
        .take(MAX_RESPONSE)
        .read_to_end(&mut response)
        .map_err(io)?;
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{url}: not an HTTP response"))?;
    let head = String::from_utf8_lossy(&response[..head_end]);
    let mut lines = head.lines();
    let status = lines.next().unwrap_or("");
    let code = status.split_whitespace().nth(1).unwrap_or("");
    if code != "200" {
        return Err(format!("{url}: {}", status.trim()));
    }
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = &response[head_end + 4..];
    let body = if chunked {
        unchunk(body).map_err(|e| format!("{url}: {e}"))?
    } else {
        body.to_vec()
    };
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
        let u = Url::parse("http://127.0.0.1:9090/metrics").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 9090, "/metrics")
        );
        let u = Url::parse("http://[::1]:9091").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 9091, "/metrics")
        );
        assert_eq!(u.to_string(), "http://[::1]:9091/metrics");
        assert_eq!(Url::parse("http://node-1").unwrap().port, 80);
        for bad in [
            "https://x/metrics",
            "ftp://x",
            "http://:9",
            "http://x:0",
            "http://x:99999",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn chunked_bodies() {
        assert_eq!(
            unchunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert!(unchunk(b"5\r\nab").is_err());
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
