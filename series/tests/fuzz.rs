//! Fuzzing this crate's parsers on the stable toolchain (about a second per target in the test
//! command; `NIXL_FUZZ_SECONDS=600 cargo test --release -p nixl-telemetry-series --test fuzz --
//! --nocapture` runs longer): the HTTP request-head parser, where every input is refused with
//! a response or routed, never a panic, and a parsed request is one the server can route; and
//! the histogram-bounds parser (`NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US`) on the environment
//! parsers' seeds, returning valid bounds or an error naming the variable, never a panic. The core's other environment
//! parsers are fuzzed in the core's tests/fuzz.rs.

use nixl_telemetry_series::endpoint::http;
use nixl_telemetry_series::Buckets;
use nixl_telemetry_test_support::fuzz;

#[test]
fn fuzz_the_request_head_parser() {
    let seeds: Vec<Vec<u8>> = [
        "GET /metrics HTTP/1.1\r\nHost: localhost:9090\r\nAccept: text/plain\r\n\r\n",
        "HEAD /metrics?x=1 HTTP/1.0\r\n\r\n",
        "\r\n\nGET / HTTP/1.1\nHost: a\n\n",
        "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        "GET /metrics HTTP/2.0\r\n\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz::run("http_head", &seeds, |bytes| {
        let Some(end) = http::head_end(bytes) else {
            return;
        };
        assert!(end <= bytes.len());
        let response = match http::parse_head(&bytes[..end]) {
            Ok(request) => {
                assert!(!request.method.is_empty() && request.path.starts_with('/'));
                http::route(
                    &request,
                    || Some(("text/plain", b"x 1\n".to_vec())),
                    |_| http::Health::ready(String::new()),
                )
            }
            Err(e) => http::refuse(&e),
        };
        let _ = format!("{response:?}");
    });
}

#[test]
fn fuzz_the_histogram_bounds_parser() {
    fuzz::run(
        "histogram_bounds",
        &fuzz::environment_seeds(),
        |bytes| match Buckets::parse(&String::from_utf8_lossy(bytes)) {
            Ok(buckets) => {
                let b = buckets.bounds();
                assert!(!b.is_empty() && b.iter().all(|v| v.is_finite() && *v > 0.0));
                assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
            }
            Err(e) => assert!(e.message.contains("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US")),
        },
    );
}
