//! Fuzzing the HTTP request-head parser on the stable toolchain (about a second in the test
//! command; `NIXL_FUZZ_SECONDS=600 cargo test --release -p nixl-telemetry-scrape-endpoint
//! --test fuzz_http -- --nocapture` runs longer): every input is refused with a response or
//! routed, never a panic, and a parsed request is one the server can route.

use nixl_telemetry_test_support::fuzz;
use scrape_endpoint::http;

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
                http::route(&request, || ("text/plain", b"x 1\n".to_vec()))
            }
            Err(e) => http::refuse(&e),
        };
        let _ = format!("{response:?}");
    });
}
