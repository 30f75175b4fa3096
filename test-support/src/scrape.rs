//! A scrape as Prometheus makes it: `GET /metrics` with a chosen `Accept` header, over a plain
//! socket, returning the answer's content type and raw body.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// The `Accept` header of a Prometheus server with native histograms on: the protobuf
/// exposition first, text as a fallback.
pub const ACCEPT_PROTOBUF: &str = "application/vnd.google.protobuf;\
    proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,\
    text/plain;version=0.0.4;q=0.3,*/*;q=0.1";

/// `GET /metrics` on 127.0.0.1:`port` with `accept`: the content type and the raw body of a
/// `200` answer (panics on anything else).
pub fn scrape_as(port: u16, accept: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(all[..end].to_vec()).unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap()
        .to_owned();
    (content_type, all[end + 4..].to_vec())
}
