//! What a push exporter's process writes to stderr through the library's own logger, at
//! `NIXL_LOG_LEVEL=TRACE` (in a process of its own, this test binary run again by test-support's
//! [`child`]): configured
//! header values and credentials never, at any level (the HTTP client dumps requests at
//! debug), and a receiver's error answer only with its control characters escaped.

use std::process::Stdio;
use std::time::Duration;

use nixl_telemetry_push::Target;
use nixl_telemetry_push::{Auth, Body, Client, Payload, PushConfig, PushStatsSnapshot, Pusher};
use nixl_telemetry_test_support::child;
use nixl_telemetry_test_support::receiver::{Answer, Receiver};

/// Set in the process that pushes ([`push_with_secret_headers_child`]).
const CHILD_ENV: &str = "PUSH_LOGS_TEST_CHILD";

/// A header value and a token that must never be logged.
const HEADER_SECRET: &str = "SECRET123";
const TOKEN: &str = "TOKEN456";

/// A receiver's error answer that would clear an operator's terminal and retitle it.
const HOSTILE_ANSWER: &str = "\x1b[2J\x1b]0;pwned\x07 overloaded\r\nretry later";

struct Fixed;

impl Payload for Fixed {
    fn build(&mut self, _pushes: &PushStatsSnapshot) -> Body {
        Body {
            bytes: b"m 1".to_vec(),
            content_type: "text/plain",
            content_encoding: None,
            headers: &[],
        }
    }
}

/// Not a test on its own: the process started by
/// [`headers_and_credentials_are_never_logged_and_answers_are_escaped`] pushes with a secret
/// header and a token to a receiver that fails every push with a hostile answer.
#[test]
fn push_with_secret_headers_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    nixl_telemetry_base::logging::init();
    let rx = Receiver::start(Answer::Status(500, HOSTILE_ANSWER.into()));
    let mut target = Target::new(
        rx.url("/v1/metrics").parse().unwrap(),
        Duration::from_secs(10),
    );
    target
        .headers
        .push(("api-key".into(), HEADER_SECRET.into()));
    target.auth = Some(Auth::Bearer(TOKEN.into()));
    let pusher = Pusher::start(
        Client::new(target).unwrap(),
        Box::new(Fixed),
        PushConfig {
            name: "otlp".into(),
            interval: Duration::from_millis(50),
            timeout: Duration::from_secs(10),
            final_timeout: Duration::from_secs(10),
            final_setting: "NIXL_TELEMETRY_OTLP_FINAL_PUSH_MS",
        },
    )
    .unwrap();
    let got = rx.wait_for(2, Duration::from_secs(60));
    // The secrets were sent: only the log must not show them.
    assert_eq!(got[0].header("api-key"), Some(HEADER_SECRET));
    assert_eq!(
        got[0].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    drop(pusher);
}

#[test]
fn headers_and_credentials_are_never_logged_and_answers_are_escaped() {
    let out = child::output_ok(
        child::test("push_with_secret_headers_child")
            .env(CHILD_ENV, "1")
            .env("NIXL_LOG_LEVEL", "TRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
        "the pushing process",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    // Everything was logged (the loop's own information is there)...
    assert!(
        err.contains("[INFO nixl_telemetry] otlp: stopped after"),
        "{err}"
    );
    // ...but no secret, at any level.
    assert!(!err.contains(HEADER_SECRET), "{err}");
    assert!(!err.contains(TOKEN), "{err}");
    // The receiver's answer is there, escaped: no control character reaches the terminal.
    assert!(
        err.contains("\\u{1b}[2J\\u{1b}]0;pwned\\u{7} overloaded"),
        "{err}"
    );
    assert!(
        !err.chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "{err:?}"
    );
    for line in err.lines() {
        assert!(
            line.starts_with('['),
            "a line that is not a message: {line:?}"
        );
    }
}
