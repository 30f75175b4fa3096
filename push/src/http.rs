//! The one HTTP client of the workspace (ureq, blocking, rustls for `https`): the push
//! exporters post through an agent built by `agent` (crate-private), and the CLI reads scrape endpoints with
//! [`get`]. Every request sends the `User-Agent` [`USER_AGENT`] and follows no redirect (a push
//! or a scrape must reach the URL it was given, which the error then names).

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

pub use url::Url;

use crate::USER_AGENT;

/// An agent with what every request shares (no redirect, the `User-Agent`), trusting `tls`'s
/// roots for `https` (ureq's own roots when `None`), and waiting at most `timeout`, when given,
/// for connecting and for each read and write.
pub(crate) fn agent(
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Option<Duration>,
) -> ureq::Agent {
    let mut builder = ureq::AgentBuilder::new()
        .redirects(0)
        .user_agent(USER_AGENT);
    if let Some(tls) = tls {
        builder = builder.tls_config(tls);
    }
    if let Some(timeout) = timeout {
        builder = builder
            .timeout_connect(timeout)
            .timeout_read(timeout)
            .timeout_write(timeout);
    }
    builder.build()
}

/// What went wrong in a transport error, without the URL (the caller names it once) and with
/// each part once: ureq's own `Display` starts with the URL and, when an I/O error wraps
/// another of its errors, repeats the kind (`Network Error: Network Error: ...`). The parts
/// are the kind, ureq's message and the chain of causes, each left out when it repeats the
/// part before it.
pub(crate) fn transport_error(t: &ureq::Transport) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut push = |part: String| {
        if !part.is_empty() && parts.last() != Some(&part) {
            parts.push(part);
        }
    };
    push(t.kind().to_string());
    push(t.message().unwrap_or_default().to_owned());
    let mut cause = std::error::Error::source(t);
    while let Some(e) = cause {
        let transport = match e.downcast_ref::<ureq::Error>() {
            Some(ureq::Error::Transport(inner)) => Some(inner),
            _ => e.downcast_ref::<ureq::Transport>(),
        };
        if let Some(inner) = transport {
            push(inner.kind().to_string());
            push(inner.message().unwrap_or_default().to_owned());
            cause = std::error::Error::source(inner);
        } else if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            // An I/O error carrying another error says what that one says: go to it.
            cause = Some(inner);
        } else {
            push(e.to_string());
            cause = e.source();
        }
    }
    parts.join(": ")
}

/// GETs `url` with `Accept: accept`, waiting at most `timeout` for connecting and for each
/// read and write, and returns the body of a `200` answer (of at most `limit` bytes). Every
/// error names the URL: a transport error (with its kind and cause), another status (a
/// redirect says where to), or a body longer than `limit`.
pub fn get(url: &Url, accept: &str, timeout: Duration, limit: u64) -> Result<Vec<u8>, String> {
    get_typed(url, accept, timeout, limit).map(|(_, body)| body)
}

/// [`get`], with the answer's `Content-Type` (empty when it has none): for a scrape whose
/// `Accept` offers several formats.
pub fn get_typed(
    url: &Url,
    accept: &str,
    timeout: Duration,
    limit: u64,
) -> Result<(String, Vec<u8>), String> {
    let answer = agent(None, Some(timeout))
        .request_url("GET", url)
        .set("Accept", accept)
        .call();
    let resp = match answer {
        Ok(resp) if resp.status() == 200 => resp,
        Ok(resp) => {
            let mut message = format!("{url}: HTTP {} {}", resp.status(), resp.status_text());
            if let Some(to) = resp.header("Location") {
                message += &format!(" (redirected to {to}: give the final URL)");
            }
            return Err(message);
        }
        Err(ureq::Error::Status(status, resp)) => {
            return Err(format!("{url}: HTTP {status} {}", resp.status_text()))
        }
        Err(ureq::Error::Transport(t)) => return Err(format!("{url}: {}", transport_error(&t))),
    };
    let content_type = resp.header("Content-Type").unwrap_or_default().to_owned();
    let mut body = Vec::new();
    resp.into_reader()
        .take(limit.saturating_add(1))
        .read_to_end(&mut body)
        .map_err(|e| format!("{url}: reading the answer: {e}"))?;
    if body.len() as u64 > limit {
        return Err(format!("{url}: the answer is longer than {limit} bytes"));
    }
    Ok((content_type, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A server on 127.0.0.1 that answers each of `answers` to one connection, in turn, after
    /// reading the request head; returns its port and the heads it read.
    fn serve(answers: Vec<String>) -> (u16, std::sync::mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for answer in answers {
                let Ok((mut s, _)) = listener.accept() else {
                    return;
                };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
                let _ = s.write_all(answer.as_bytes());
            }
        });
        (port, rx)
    }

    fn url(port: u16) -> Url {
        format!("http://127.0.0.1:{port}/metrics").parse().unwrap()
    }

    const TIMEOUT: Duration = Duration::from_secs(30);

    #[test]
    fn gets_plain_and_chunked_bodies_with_our_headers() {
        let (port, heads) = serve(vec![
            "HTTP/1.1 200 OK\r\nContent-Type: text/x-greeting\r\nContent-Length: 5\r\n\
             Connection: close\r\n\r\nhello"
                .into(),
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
             3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"
                .into(),
            "HTTP/1.0 200 OK\r\n\r\nuntil close".into(),
        ]);
        assert_eq!(
            get_typed(&url(port), "text/plain", TIMEOUT, 100).unwrap(),
            ("text/x-greeting".to_owned(), b"hello".to_vec())
        );
        let head = heads.recv().unwrap().to_ascii_lowercase();
        assert!(head.starts_with("get /metrics http/1.1\r\n"), "{head}");
        assert!(head.contains("\r\naccept: text/plain\r\n"), "{head}");
        assert!(head.contains(&format!(
            "\r\nuser-agent: {}\r\n",
            USER_AGENT.to_ascii_lowercase()
        )));
        assert_eq!(
            get_typed(&url(port), "text/plain", TIMEOUT, 100).unwrap(),
            (String::new(), b"abcde".to_vec())
        );
        assert_eq!(
            get(&url(port), "text/plain", TIMEOUT, 100).unwrap(),
            b"until close"
        );
    }

    #[test]
    fn errors_name_the_url_and_what_went_wrong() {
        let (port, _heads) = serve(vec![
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
            "HTTP/1.1 301 Moved Permanently\r\nLocation: http://elsewhere/m\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
                .into(),
            "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world".into(),
        ]);
        let u = url(port);
        assert_eq!(
            get(&u, "text/plain", TIMEOUT, 100).unwrap_err(),
            format!("{u}: HTTP 404 Not Found")
        );
        let e = get(&u, "text/plain", TIMEOUT, 100).unwrap_err();
        assert!(
            e.starts_with(&format!("{u}: HTTP 301"))
                && e.contains("redirected to http://elsewhere/m"),
            "{e}"
        );
        let e = get(&u, "text/plain", TIMEOUT, 5).unwrap_err();
        assert_eq!(e, format!("{u}: the answer is longer than 5 bytes"));
        // Nothing listens on a port reserved for this test process.
        let closed = nixl_telemetry_test_support::free_port();
        let e = get(&url(closed), "text/plain", TIMEOUT, 100).unwrap_err();
        assert!(
            e.starts_with(&url(closed).to_string()) && e.contains("Connection Failed"),
            "{e}"
        );
        assert_eq!(e.matches("127.0.0.1").count(), 1, "{e}");
    }

    #[test]
    fn transport_errors_say_each_thing_once() {
        // A server that reads the request and never answers: the read times out inside ureq's
        // reading of the status line, an I/O error wrapping another ureq error.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let e = get(&url(port), "text/plain", Duration::from_millis(200), 100).unwrap_err();
        drop(held);
        let u = url(port).to_string();
        assert!(e.starts_with(&format!("{u}: Network Error: ")), "{e}");
        assert_eq!(e.matches("Network Error").count(), 1, "{e}");
        assert_eq!(e.matches(&u).count(), 1, "{e}");
        let parts: Vec<_> = e.split(": ").collect();
        assert!(parts.windows(2).all(|w| w[0] != w[1]), "{e}");
    }
}
