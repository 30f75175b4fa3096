//! Just enough HTTP/1.1 for a scrape endpoint: parsing a request head (strictly: anything
//! malformed is a 400), routing (`GET`/`HEAD` of `/metrics` and the health probes `/health`,
//! `/livez`, `/readyz`; other paths 404, other methods 405) and building complete responses
//! that close the connection.

use std::fmt::Write;

/// The metrics page's path.
pub const METRICS_PATH: &str = "/metrics";
/// The health check's path: the readiness probe's answer ([`Probe::Ready`]), for load
/// balancers and whatever asks one path.
pub const HEALTH_PATH: &str = "/health";
/// The liveness probe's path, as Kubernetes names it ([`Probe::Live`]).
pub const LIVE_PATH: &str = "/livez";
/// The readiness probe's path, as Kubernetes names it ([`Probe::Ready`]).
pub const READY_PATH: &str = "/readyz";

/// Which question a health check asks; either is answered 200 or 503 with a short JSON body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Whether the process's loops are alive (`/livez`): failing it means restart the process.
    Live,
    /// Whether the endpoint delivers (`/readyz`, `/health`): its pages can be scraped and, where
    /// it pushes, pushes succeed; failing it means take it out of service, not restart it.
    Ready,
}

impl Probe {
    /// The probe a path asks, if it is one of the health paths.
    pub fn of_path(path: &str) -> Option<Probe> {
        match path {
            LIVE_PATH => Some(Probe::Live),
            READY_PATH | HEALTH_PATH => Some(Probe::Ready),
            _ => None,
        }
    }
}

/// What `/health` answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// Whether the endpoint can answer a scrape (200) or not (503).
    pub ready: bool,
    /// More members of the JSON object, already encoded and comma-separated (`"agents":2`),
    /// after `"status"` (and `"reason"` when not ready).
    pub details: String,
    /// Why not ready (empty when ready).
    pub reason: String,
}

impl Health {
    /// Ready, with `details` (JSON members, or empty).
    pub fn ready(details: String) -> Health {
        Health {
            ready: true,
            details,
            reason: String::new(),
        }
    }

    /// Not ready because of `reason`, with `details`.
    pub fn unavailable(reason: impl Into<String>, details: String) -> Health {
        Health {
            ready: false,
            details,
            reason: reason.into(),
        }
    }

    /// Both `self` and `other`: ready when both are, with the reasons of those that are not
    /// (joined by "; ") and the details of both.
    pub fn and(self, other: Health) -> Health {
        let join = |a: String, b: String, sep: &str| match (a.is_empty(), b.is_empty()) {
            (_, true) => a,
            (true, false) => b,
            (false, false) => format!("{a}{sep}{b}"),
        };
        Health {
            ready: self.ready && other.ready,
            details: join(self.details, other.details, ","),
            reason: join(self.reason, other.reason, "; "),
        }
    }

    /// The JSON body: `{"status":"ok",...}` or `{"status":"unavailable","reason":"...",...}`.
    pub fn body(&self) -> String {
        let mut body = String::from(if self.ready {
            r#"{"status":"ok""#
        } else {
            r#"{"status":"unavailable""#
        });
        if !self.ready {
            body.push_str(r#","reason":"#);
            body.push_str(&json_string(&self.reason));
        }
        if !self.details.is_empty() {
            body.push(',');
            body.push_str(&self.details);
        }
        body.push_str("}\n");
        body
    }
}

/// `text` as a JSON string (quotes, backslashes and control characters escaped).
pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// What the `Allow` header of a 405 lists.
pub const ALLOWED_METHODS: &str = "GET, HEAD";

/// A parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The method, as sent (methods are case-sensitive).
    pub method: String,
    /// The path of the target, without the query.
    pub path: String,
    /// Header names (lower-cased) and values (trimmed), in order.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of the list header `name` (case-insensitive), as one comma-separated list:
    /// repeated headers are combined in order, as RFC 9110 (section 5.3) says; `None` without
    /// the header.
    pub fn header_list(&self, name: &str) -> Option<String> {
        let mut values = self
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .peekable();
        values.peek()?;
        Some(values.collect::<Vec<_>>().join(","))
    }
}

/// The exposition format a scraper asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The text format 0.0.4 (the default, and the answer to anything else).
    Text,
    /// The protobuf exposition (length-delimited `io.prometheus.client.MetricFamily`), when
    /// the `Accept` header ranks it above every text range it names.
    Protobuf,
}

impl Format {
    /// The format `request`'s `Accept` header prefers (its repeats combined into one list):
    /// [`Format::Protobuf`] when it names `application/vnd.google.protobuf` with
    /// `proto=io.prometheus.client.MetricFamily` and `encoding=delimited` at a quality above 0
    /// and not below any text range it names (text, OpenMetrics, `*/*`); text otherwise (no
    /// header, a malformed one, text preferred).
    pub fn of(request: &Request) -> Format {
        let Some(accept) = request.header_list("accept") else {
            return Format::Text;
        };
        let mut protobuf = 0.0f64;
        let mut text = 0.0f64;
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let (mut q, mut proto, mut delimited) = (1.0, false, false);
            for p in parts {
                let Some((k, v)) = p.split_once('=') else {
                    continue;
                };
                let v = v.trim().trim_matches('"');
                match k.trim().to_ascii_lowercase().as_str() {
                    "q" => {
                        q = v
                            .parse::<f64>()
                            .ok()
                            .filter(|q| (0.0..=1.0).contains(q))
                            .unwrap_or(0.0)
                    }
                    "proto" => proto = v == "io.prometheus.client.MetricFamily",
                    "encoding" => delimited = v == "delimited",
                    _ => {}
                }
            }
            match media.as_str() {
                "application/vnd.google.protobuf" if proto && delimited => {
                    protobuf = protobuf.max(q)
                }
                "text/plain" | "text/*" | "*/*" | "application/openmetrics-text" => {
                    text = text.max(q)
                }
                _ => {}
            }
        }
        if protobuf > 0.0 && protobuf >= text {
            Format::Protobuf
        } else {
            Format::Text
        }
    }
}

/// Why a head was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Not a well-formed HTTP/1.x request head (400).
    Malformed(&'static str),
    /// A well-formed request of another HTTP major version (505).
    Version,
}

/// Bytes of empty lines (CRLF or LF) before the request line, which a server should ignore
/// (RFC 9112, section 2.2).
fn leading_empty_lines(buf: &[u8]) -> usize {
    let mut i = 0;
    loop {
        if buf[i..].starts_with(b"\r\n") {
            i += 2;
        } else if buf[i..].starts_with(b"\n") {
            i += 1;
        } else {
            return i;
        }
    }
}

/// Where the head ends in `buf` (the index just past the empty line), if it is complete.
/// Lines may end with CRLF or, leniently, LF; empty lines before the request line are skipped.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    let mut i = leading_empty_lines(buf);
    if i == buf.len() || buf[i..] == *b"\r" {
        return None;
    }
    while let Some(p) = buf[i..].iter().position(|&b| b == b'\n') {
        let nl = i + p;
        // The line after this newline is empty: "\n\n" or "\n\r\n".
        match buf.get(nl + 1) {
            Some(b'\n') => return Some(nl + 2),
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return Some(nl + 3),
            _ => i = nl + 1,
        }
    }
    None
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parses a complete head (request line and header lines, up to and including the empty
/// line, as delimited by [`head_end`]).
pub fn parse_head(head: &[u8]) -> Result<Request, ParseError> {
    use ParseError::Malformed;
    let head = &head[leading_empty_lines(head)..];
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().ok_or(Malformed("empty request"))?;
    let mut parts = request_line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Malformed("request line is not 'METHOD TARGET HTTP/1.x'"));
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(Malformed("invalid method"));
    }
    if target.is_empty() || !target.iter().all(|&b| b.is_ascii_graphic()) {
        return Err(Malformed("invalid request target"));
    }
    match version {
        b"HTTP/1.1" | b"HTTP/1.0" => {}
        [b'H', b'T', b'T', b'P', b'/', d1, b'.', d2]
            if d1.is_ascii_digit() && d2.is_ascii_digit() =>
        {
            return Err(ParseError::Version)
        }
        _ => return Err(Malformed("invalid HTTP version")),
    }
    let target = std::str::from_utf8(target).map_err(|_| Malformed("invalid request target"))?;
    let path = origin_path(target).ok_or(Malformed("invalid request target"))?;
    let mut headers = Vec::new();
    for line in lines {
        if line.is_empty() {
            break;
        }
        if line[0] == b' ' || line[0] == b'\t' {
            return Err(Malformed("folded header line"));
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(Malformed("header line without ':'"))?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(Malformed("invalid header name"));
        }
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(Malformed("control character in a header value"));
        }
        headers.push((
            String::from_utf8_lossy(name).to_ascii_lowercase(),
            String::from_utf8_lossy(value).trim().to_owned(),
        ));
    }
    Ok(Request {
        method: String::from_utf8_lossy(method).into_owned(),
        path: path.to_owned(),
        headers,
    })
}

/// The path of an origin-form (`/metrics?x`) or absolute-form (`http://host:port/metrics`)
/// target, without its query.
fn origin_path(target: &str) -> Option<&str> {
    let path = if target.starts_with('/') {
        target
    } else {
        let rest = target
            .strip_prefix("http://")
            .or_else(|| target.strip_prefix("https://"))?;
        match rest.find('/') {
            Some(i) => &rest[i..],
            None => "/",
        }
    };
    Some(path.split(['?', '#']).next().unwrap_or(path))
}

/// A complete response, ready to be written: its head, then its body (kept apart, so that a
/// scrape page is sent as it was encoded, never copied behind its head).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// The status line and headers, with the blank line that ends them.
    pub head: Vec<u8>,
    /// The body (empty for `HEAD`).
    pub body: Vec<u8>,
}

impl Response {
    /// Every byte to send, head then body.
    pub fn bytes(&self) -> Vec<u8> {
        [&self.head[..], &self.body[..]].concat()
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// Builds a response that closes the connection. With `head_only` the body is left out (its
/// length is still announced), as for `HEAD`.
pub fn response(
    status: u16,
    content_type: &str,
    extra_headers: &[(&str, &str)],
    body: Vec<u8>,
    head_only: bool,
) -> Response {
    let mut head = String::with_capacity(160);
    let _ = write!(
        head,
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
        reason(status),
        body.len()
    );
    for (k, v) in extra_headers {
        let _ = write!(head, "{k}: {v}\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    Response {
        status,
        head: head.into_bytes(),
        body: if head_only { Vec::new() } else { body },
    }
}

/// A plain-text error response.
pub fn error(status: u16, message: &str) -> Response {
    let allow = [("Allow", ALLOWED_METHODS)];
    let extra: &[(&str, &str)] = if status == 405 { &allow } else { &[] };
    let body = format!("{status} {}: {message}\n", reason(status));
    response(
        status,
        "text/plain; charset=utf-8",
        extra,
        body.into_bytes(),
        false,
    )
}

/// The largest request body the server reads past and discards before it closes the
/// connection (a scrape has no body). A larger one would still be unread at the close, and the
/// kernel would answer it with a reset that can cut the response short at the client: such a
/// request is refused with 413 instead of a page that may arrive truncated. A chunked body is
/// read whole before the answer, framing included, up to this size.
pub const MAX_REQUEST_BODY: usize = 64 * 1024;

/// How a request's body is delimited (RFC 9112, section 6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyLength {
    /// `Content-Length` bytes (0 without the header).
    Fixed(u64),
    /// The chunked transfer coding: the body ends with its last chunk.
    Chunked,
}

/// The body length `request` declares, or why it cannot be trusted (a 400, as RFC 9112,
/// section 6.3 asks): `Content-Length` values that are not numbers or differ (in one header
/// or in several; equal repeats are one value), `Transfer-Encoding` with `Content-Length`
/// (what request smuggling plays on), or a transfer coding whose last one is not `chunked`.
pub fn body_length(request: &Request) -> Result<BodyLength, &'static str> {
    let values = |name: &str| -> Vec<String> {
        request.header_list(name).map_or_else(Vec::new, |list| {
            list.split(',')
                .map(|v| v.trim().to_ascii_lowercase())
                .collect()
        })
    };
    let lengths = values("content-length");
    let codings = values("transfer-encoding");
    if !codings.is_empty() {
        if !lengths.is_empty() {
            return Err("both Transfer-Encoding and Content-Length");
        }
        return match codings.last().map(String::as_str) {
            Some("chunked") => Ok(BodyLength::Chunked),
            _ => Err("the last transfer coding is not chunked"),
        };
    }
    let mut length = None;
    for value in &lengths {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err("Content-Length is not a number");
        }
        let n: u64 = value
            .parse()
            .map_err(|_| "Content-Length is not a number")?;
        if length.is_some_and(|l| l != n) {
            return Err("conflicting Content-Length values");
        }
        length = Some(n);
    }
    Ok(BodyLength::Fixed(length.unwrap_or(0)))
}

/// Where a chunked body ends, read from the bytes after the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkedEnd {
    /// The body (last chunk and trailers included) is this many bytes.
    Complete(usize),
    /// More bytes are needed.
    Incomplete,
    /// Not the chunked coding (a 400).
    Malformed(&'static str),
}

/// Finds the end of the chunked body at the start of `buf`: chunks of hexadecimal size (with
/// extensions, ignored), the last chunk of size 0, trailer lines, an empty line. Lines end
/// with CRLF or, leniently, LF, as in the head.
pub fn chunked_end(buf: &[u8]) -> ChunkedEnd {
    use ChunkedEnd::{Complete, Incomplete, Malformed};
    let line_at = |i: usize| -> Option<(&[u8], usize)> {
        let nl = buf.get(i..)?.iter().position(|&b| b == b'\n')?;
        let line = &buf[i..i + nl];
        Some((line.strip_suffix(b"\r").unwrap_or(line), i + nl + 1))
    };
    let mut i = 0;
    loop {
        let Some((line, next)) = line_at(i) else {
            return Incomplete;
        };
        let size = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = size.trim_ascii();
        // At most 15 hex digits: no overflow, and far beyond any body read here.
        if size.is_empty() || size.len() > 15 || !size.iter().all(u8::is_ascii_hexdigit) {
            return Malformed("invalid chunk size");
        }
        let size = std::str::from_utf8(size)
            .ok()
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .unwrap_or(usize::MAX);
        i = next;
        if size == 0 {
            // Trailer lines, up to the empty line.
            loop {
                let Some((line, next)) = line_at(i) else {
                    return Incomplete;
                };
                i = next;
                if line.is_empty() {
                    return Complete(i);
                }
            }
        }
        let Some(data_end) = i.checked_add(size) else {
            return Malformed("invalid chunk size");
        };
        let rest = buf.get(data_end..).unwrap_or_default();
        i = if rest.starts_with(b"\r\n") {
            data_end + 2
        } else if rest.starts_with(b"\n") {
            data_end + 1
        } else if rest.is_empty() || rest == b"\r" {
            return Incomplete;
        } else {
            return Malformed("chunk data not followed by a line end");
        };
    }
}

/// The answer to a request whose body is over [`MAX_REQUEST_BODY`].
pub fn too_large() -> Response {
    error(413, "a scrape has no body; bodies over 64 KiB are refused")
}

/// Answers a parsed request: a body length that cannot be trusted ([`body_length`]), 400; a
/// `Content-Length` over [`MAX_REQUEST_BODY`], 413 (a chunked body is the server's to read
/// first: see [`chunked_end`]); `GET`/`HEAD /metrics` get `metrics()` (content type and body;
/// `None`: this endpoint serves health only, 404); `GET`/`HEAD` of a health path get
/// `health(probe)` ([`Probe::of_path`]: 200 or 503, JSON); other paths 404, other methods 405.
pub fn route(
    request: &Request,
    metrics: impl FnOnce() -> Option<(&'static str, Vec<u8>)>,
    health: impl FnOnce(Probe) -> Health,
) -> Response {
    match body_length(request) {
        Err(why) => return error(400, why),
        Ok(BodyLength::Fixed(n)) if n > MAX_REQUEST_BODY as u64 => return too_large(),
        Ok(_) => {}
    }
    let head_only = request.method == "HEAD";
    let path = request.path.as_str();
    let probe = Probe::of_path(path);
    if path != METRICS_PATH && probe.is_none() {
        return error(
            404,
            "this endpoint serves GET /metrics, /health, /livez and /readyz",
        );
    }
    if !matches!(request.method.as_str(), "GET" | "HEAD") {
        return error(405, &format!("only GET and HEAD are allowed on {path}"));
    }
    match probe {
        Some(probe) => {
            let h = health(probe);
            let status = if h.ready { 200 } else { 503 };
            response(
                status,
                "application/json",
                &[],
                h.body().into_bytes(),
                head_only,
            )
        }
        None => match metrics() {
            Some((content_type, body)) => response(200, content_type, &[], body, head_only),
            None => error(
                404,
                "this endpoint serves health only: GET /health, /livez and /readyz",
            ),
        },
    }
}

/// The answer to a head that could not be parsed.
pub fn refuse(e: &ParseError) -> Response {
    match e {
        ParseError::Malformed(why) => error(400, why),
        ParseError::Version => error(505, "this endpoint speaks HTTP/1.0 and HTTP/1.1"),
    }
}

#[cfg(test)]
mod tests;
