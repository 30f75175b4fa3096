//! The unit tests of the scrape endpoint's HTTP/1.1 (`http/mod.rs`): request parsing, routing and responses.

use super::*;

fn parse(s: &str) -> Result<Request, ParseError> {
    parse_head(s.as_bytes())
}

#[test]
fn body_lengths_are_trusted_only_when_unambiguous() {
    let length = |headers: &str| {
        body_length(&parse(&format!("GET /metrics HTTP/1.1\r\n{headers}\r\n")).unwrap())
    };
    assert_eq!(length(""), Ok(BodyLength::Fixed(0)));
    assert_eq!(length("Content-Length: 5\r\n"), Ok(BodyLength::Fixed(5)));
    // Equal repeats, in one header or in two, are one value (RFC 9112, section 6.3).
    assert_eq!(
        length("Content-Length: 5, 5\r\ncontent-length: 5\r\n"),
        Ok(BodyLength::Fixed(5))
    );
    for bad in [
        "Content-Length: 5\r\nContent-Length: 6\r\n",
        "Content-Length: 5, 6\r\n",
        "Content-Length: +5\r\n",
        "Content-Length: \r\n",
        "Content-Length: 99999999999999999999999\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
        "Transfer-Encoding: gzip\r\n",
        "Transfer-Encoding: chunked, gzip\r\n",
    ] {
        assert!(length(bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        length("Transfer-Encoding: gzip, Chunked\r\n"),
        Ok(BodyLength::Chunked)
    );
}

#[test]
fn repeated_accept_headers_are_one_list() {
    const PROTOBUF: &str = "application/vnd.google.protobuf;\
                            proto=io.prometheus.client.MetricFamily;encoding=delimited";
    let format = |headers: String| {
        Format::of(&parse(&format!("GET /metrics HTTP/1.1\r\n{headers}\r\n")).unwrap())
    };
    // Protobuf named in the second header only.
    assert_eq!(
        format(format!(
            "Accept: text/plain;q=0.5\r\naccept: {PROTOBUF}\r\n"
        )),
        Format::Protobuf
    );
    // Protobuf in the first, text preferred in the second.
    assert_eq!(
        format(format!(
            "Accept: {PROTOBUF};q=0.5\r\nAccept: text/plain\r\n"
        )),
        Format::Text
    );
    // Three headers, the same as their list in one.
    let three =
        format!("Accept: */*;q=0.1\r\nAccept: {PROTOBUF};q=0.7\r\nAccept: text/plain;q=0.6\r\n");
    let one = format!("Accept: */*;q=0.1,{PROTOBUF};q=0.7,text/plain;q=0.6\r\n");
    assert_eq!(
        (format(three), format(one)),
        (Format::Protobuf, Format::Protobuf)
    );
    let r = parse("GET / HTTP/1.1\r\nA: 1\r\nB: x\r\na: 2, 3\r\n\r\n").unwrap();
    assert_eq!(r.header_list("a").as_deref(), Some("1,2, 3"));
    assert_eq!(r.header_list("c"), None);
}

#[test]
fn health_of_two_parts_is_ready_when_both_are() {
    let ok = |d: &str| Health::ready(d.to_owned());
    let down = |r: &str, d: &str| Health::unavailable(r, d.to_owned());
    assert_eq!(ok(r#""a":1"#).and(ok("")), ok(r#""a":1"#));
    assert_eq!(ok("").and(ok(r#""b":2"#)), ok(r#""b":2"#));
    assert_eq!(
        ok(r#""a":1"#).and(down("no push", r#""b":2"#)),
        down("no push", r#""a":1,"b":2"#)
    );
    assert_eq!(
        down("no rank", "").and(down("no push", "")),
        down("no rank; no push", "")
    );
    assert_eq!(
        down("no rank", "").and(ok("")).body(),
        "{\"status\":\"unavailable\",\"reason\":\"no rank\"}\n"
    );
}

#[test]
fn chunked_bodies_end_with_the_last_chunk_and_trailers() {
    use ChunkedEnd::*;
    let body = b"5\r\nhello\r\n0\r\n\r\n";
    assert_eq!(chunked_end(body), Complete(body.len()));
    assert_eq!(chunked_end(b"0\r\n\r\nGET"), Complete(5));
    assert_eq!(
        chunked_end(b"3;ext=1\r\nabc\r\nA \r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n"),
        Complete(43)
    );
    assert_eq!(chunked_end(b"5\nhello\n0\n\n"), Complete(11));
    for i in 0..body.len() {
        assert_eq!(chunked_end(&body[..i]), Incomplete, "{i}");
    }
    assert_eq!(chunked_end(b"x\r\n"), Malformed("invalid chunk size"));
    assert_eq!(chunked_end(b"\r\n"), Malformed("invalid chunk size"));
    assert_eq!(
        chunked_end(b"fffffffffffffffff\r\n"),
        Malformed("invalid chunk size")
    );
    assert_eq!(
        chunked_end(b"2\r\nabc\r\n"),
        Malformed("chunk data not followed by a line end")
    );
}

#[test]
fn heads_end_at_the_empty_line() {
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nrest"), Some(27));
    assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    assert_eq!(head_end(b""), None);
    // Empty lines before the request line are ignored (RFC 9112, section 2.2): only empty
    // lines is not a head yet.
    assert_eq!(head_end(b"\r\n\r\n"), None);
    assert_eq!(head_end(b"\r\n\r"), None);
    assert_eq!(head_end(b"\r\nGET / HTTP/1.1\r\n\r\n"), Some(20));
    assert_eq!(head_end(b"\n\r\nGET / HTTP/1.1\n\n"), Some(19));
}

#[test]
fn empty_lines_before_the_request_line_are_ignored() {
    let r = parse("\r\n\r\nGET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/metrics"));
    assert_eq!(r.header("host"), Some("a"));
}

#[test]
fn well_formed_requests() {
    let r = parse("GET /metrics HTTP/1.1\r\nHost: a:1\r\nAccept:  text/plain \r\n\r\n").unwrap();
    assert_eq!(r.method, "GET");
    assert_eq!(r.path, "/metrics");
    assert_eq!(r.header("HOST"), Some("a:1"));
    assert_eq!(r.header("accept"), Some("text/plain"));
    assert_eq!(
        parse("GET /metrics?x=1 HTTP/1.0\n\n").unwrap().path,
        "/metrics"
    );
    assert_eq!(
        parse("GET http://h:9/metrics HTTP/1.1\r\n\r\n")
            .unwrap()
            .path,
        "/metrics"
    );
    assert_eq!(parse("POST / HTTP/1.1\r\n\r\n").unwrap().method, "POST");
}

#[test]
fn malformed_requests() {
    for bad in [
        "\r\n\r\n",
        "GET\r\n\r\n",
        "GET /metrics\r\n\r\n",
        "GET  /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1 extra\r\n\r\n",
        "GET /metrics FTP/1.1\r\n\r\n",
        "G(T /metrics HTTP/1.1\r\n\r\n",
        "GET metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nno colon\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nBad Name: x\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
        "GET /metrics HTTP/1.1\r\n: x\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nA: b\x01\r\n\r\n",
        "\x16\x03\x01\x02\x00\x01\x00\x01\r\n\r\n",
    ] {
        assert!(
            matches!(parse(bad), Err(ParseError::Malformed(_))),
            "{bad:?}: {:?}",
            parse(bad)
        );
    }
    assert_eq!(
        parse("GET /metrics HTTP/2.0\r\n\r\n"),
        Err(ParseError::Version)
    );
}

fn text(r: &Response) -> String {
    String::from_utf8(r.bytes()).unwrap()
}

#[test]
fn routing() {
    let metrics = || {
        Some((
            "text/plain; version=0.0.4; charset=utf-8",
            b"m 1\n".to_vec(),
        ))
    };
    let ready = |_| Health::ready(String::new());
    let at = |raw: &str| route(&parse(raw).unwrap(), metrics, ready);
    let r = at("GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(
        text(&r),
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: 4\r\nConnection: close\r\n\r\nm 1\n"
    );
    let head = at("HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(text(&head).ends_with("Content-Length: 4\r\nConnection: close\r\n\r\n"));
    for path in ["/metrics", "/health", "/livez", "/readyz"] {
        let r = at(&format!("POST {path} HTTP/1.1\r\n\r\n"));
        assert_eq!(r.status, 405, "{path}");
        assert!(
            text(&r).contains("\r\nAllow: GET, HEAD\r\n"),
            "{}",
            text(&r)
        );
    }
    assert_eq!(
        at("GET /metrics HTTP/1.1\r\nContent-Length: 65537\r\n\r\n").status,
        413
    );
    // A chunked body was read by the server before it routes.
    assert_eq!(
        at("GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").status,
        200
    );
    assert_eq!(
        at("GET /metrics HTTP/1.1\r\nContent-Length: 65536\r\n\r\n").status,
        200
    );
    assert_eq!(
        at("GET /metrics HTTP/1.1\r\nContent-Length: lots\r\n\r\n").status,
        400
    );
    let r = at("GET /other HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 404);
    assert!(!text(&r).contains("Allow:"));
    for path in ["/metrics/x", "/healthz", "/live", "/ready"] {
        assert_eq!(at(&format!("GET {path} HTTP/1.1\r\n\r\n")).status, 404);
    }
    // Each health path asks its probe; without metrics, /metrics is not served.
    let asked = std::cell::RefCell::new(Vec::new());
    for path in ["/health", "/livez", "/readyz"] {
        let r = route(
            &parse(&format!("GET {path} HTTP/1.1\r\n\r\n")).unwrap(),
            || None,
            |probe| {
                asked.borrow_mut().push(probe);
                Health::unavailable("down", String::new())
            },
        );
        assert_eq!(r.status, 503, "{path}");
    }
    assert_eq!(
        asked.into_inner(),
        [Probe::Ready, Probe::Live, Probe::Ready]
    );
    let r = route(
        &parse("GET /metrics HTTP/1.1\r\n\r\n").unwrap(),
        || None,
        ready,
    );
    assert_eq!(r.status, 404);
    assert!(text(&r).contains("health only"), "{}", text(&r));
    assert_eq!(refuse(&ParseError::Malformed("x")).status, 400);
    assert_eq!(refuse(&ParseError::Version).status, 505);
    let e = text(&error(400, "bad"));
    let len: usize = e
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(len, e.split("\r\n\r\n").nth(1).unwrap().len());
}
