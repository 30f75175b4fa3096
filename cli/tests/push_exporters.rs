//! What every push exporter guarantees as a host runs it, the `remote_write` and `otlp`
//! plug-ins (the built `.so` files, loaded by agents in a child process: this test binary run
//! again, [`Agents`]) and the `serve --push-only` sidecar alike:
//!
//! - destroying an agent (stopping the sidecar) is bounded whatever the receiver does: one
//!   attempt, no retry backoff, when connections are refused, from the first moment of the
//!   process's life; at most `..._FINAL_PUSH_MS` when the receiver never answers, which the
//!   log then says;
//! - no configured secret (header values, passwords, tokens, URL user-info) reaches a log line
//!   (stderr or a host log callback), at `NIXL_LOG_LEVEL=TRACE`, with a receiver that accepts
//!   and one that refuses every push with the request's headers in its answer ([`Echoing`], as
//!   a debugging proxy does), nor a creation's error.
//!
//! These tests are the CLI's because only its tests can run both the sidecar and the plug-ins
//! (the plug-ins are cdylibs: `cargo build -p telemetry-exporter-remote-write -p
//! telemetry-exporter-otlp` first).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};

use common::sidecar::Sidecar;
use nixl_telemetry_test_support::receiver::{Answer, Receiver};
use nixl_telemetry_test_support::{built_plugins, child};

/// Set in the child: its agents' settings follow.
const CHILD: &str = "PUSH_TEST_CHILD";
/// The receivers of the child's agents, separated by spaces: one agent each.
const URLS: &str = "PUSH_TEST_URLS";
/// The setting the child sets to each URL before creating that URL's agent.
const URL_VAR: &str = "PUSH_TEST_URL_VAR";
/// `callback`: the child sends its log to a host log callback, which prints each message to
/// its stdout after [`CALLBACK`] (nothing then goes to stderr through the logger).
const SINK: &str = "PUSH_TEST_SINK";
/// Set: the agents live until the child's stdin closes; else they are destroyed at once.
const HOLD: &str = "PUSH_TEST_HOLD";
/// What starts a line of the host log callback on the child's stdout.
const CALLBACK: &str = "CALLBACK ";
/// What starts the line on which the child gives a creation's error.
const CREATE_ERROR: &str = "CREATE_ERROR ";
/// What starts the line on which the child gives how long destroying its agents took (ms).
const DESTROYED_MS: &str = "DESTROYED_MS ";

/// The push exporter plug-ins: each one's setting of the receiver's full URL and of the bound
/// of its last push.
const PLUGINS: [(&str, &str, &str); 2] = [
    (
        "remote_write",
        "NIXL_TELEMETRY_REMOTE_WRITE_URL",
        "NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS",
    ),
    (
        "otlp",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "NIXL_TELEMETRY_OTLP_FINAL_PUSH_MS",
    ),
];

/// The child's body (`agents`: it returns at once unless it is the child): one agent of the exporter the environment selects per URL
/// of [`URLS`], each with a transfer recorded and flushed; they live until stdin closes (with
/// [`HOLD`]) or are destroyed at once, and the time destroying them took is printed.
#[test]
fn agents() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    if std::env::var(SINK).as_deref() == Ok("callback") {
        nixl_telemetry_base::logging::set_sink(Some(Arc::new(|level, message: &str| {
            println!("{CALLBACK}[{level}] {message}");
        })));
    }
    let var = std::env::var(URL_VAR).unwrap();
    let mut agents = Vec::new();
    for (i, url) in std::env::var(URLS).unwrap().split(' ').enumerate() {
        std::env::set_var(&var, url);
        match nixl_telemetry_core::Collector::from_env(&format!("agent{i}"), true) {
            Ok(c) => agents.push(c),
            Err(e) => println!("{CREATE_ERROR}{}", e.message),
        }
    }
    for c in &agents {
        c.add_xfer_stats(100, true, 4096, 1);
        c.flush();
    }
    if std::env::var_os(HOLD).is_some() {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    }
    let start = std::time::Instant::now();
    drop(agents);
    println!("{DESTROYED_MS}{}", start.elapsed().as_millis());
    std::io::stdout().flush().unwrap();
}

/// Agents of a plug-in in a child process (the test [`agents`] of this binary run again),
/// printing into files. The child ends when its stdin closes, so a failing test leaves none
/// behind.
struct Agents {
    child: Child,
    stdin: Option<ChildStdin>,
    printed: tempfile::TempDir,
}

/// What a child printed.
struct Printed {
    stdout: String,
    stderr: String,
}

impl Printed {
    /// Both, for a search.
    fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

impl Agents {
    /// The child, with the process's settings cleared but `env`: one agent of exporter `plugin`
    /// per URL of `urls` (set in `url_var` before its creation); with `hold`, pushing every
    /// 100 ms until [`Agents::finish`], else destroyed at once (with the default settings).
    fn start(
        plugin: &str,
        url_var: &str,
        urls: &[String],
        hold: bool,
        env: &[(&str, String)],
    ) -> Agents {
        let printed = tempfile::tempdir().unwrap();
        let file = |name: &str| std::fs::File::create(printed.path().join(name)).unwrap();
        let mut cmd = child::test("agents");
        cmd.env_clear()
            .env(CHILD, "1")
            .env(URLS, urls.join(" "))
            .env(URL_VAR, url_var)
            .env("NIXL_PLUGIN_DIR", built_plugins(&[plugin]))
            .env("NIXL_TELEMETRY_ENABLE", "y")
            .env("NIXL_TELEMETRY_EXPORTER", plugin)
            .stdin(Stdio::piped())
            .stdout(file("stdout"))
            .stderr(file("stderr"));
        if hold {
            cmd.env(HOLD, "1")
                .env("NIXL_TELEMETRY_RUN_INTERVAL", "100")
                .env("NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS", "100")
                .env("OTEL_METRIC_EXPORT_INTERVAL", "100");
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        Agents {
            child,
            stdin,
            printed,
        }
    }

    /// Closes stdin (the agents are destroyed) and returns what the child printed, after
    /// checking that it passed.
    fn finish(mut self) -> Printed {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        let read = |name: &str| std::fs::read_to_string(self.printed.path().join(name)).unwrap();
        let printed = Printed {
            stdout: read("stdout"),
            stderr: read("stderr"),
        };
        assert!(
            status.success(),
            "the child failed ({status}):\n{}",
            printed.all()
        );
        printed
    }
}

/// `serve --push-only` on an empty store directory of `work` with `args` (the push options)
/// and `env`, started, its log going to `work`'s `serve.log`.
fn sidecar(work: &Path, args: &[String], env: &[(&str, String)]) -> Sidecar {
    let dir = work.join("mp");
    if !dir.exists() {
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    }
    let mut all: Vec<&str> = vec!["--push-only"];
    all.extend(args.iter().map(String::as_str));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Sidecar::start_logging(&dir, &all, &env, &work.join("serve.log"))
}

/// Stops `serve` (SIGTERM: it makes its last pushes and exits 0), printing how long that took;
/// returns its log.
fn stop(serve: Sidecar, work: &Path) -> String {
    let start = std::time::Instant::now();
    serve.stop();
    println!("serve: stopped in {} ms", start.elapsed().as_millis());
    std::fs::read_to_string(work.join("serve.log")).unwrap()
}

/// A receiver on 127.0.0.1 that refuses every push (`401`) with the request's own headers in
/// its answer, those a debugging proxy would show (all but the standard ones), and records
/// every request's head.
struct Echoing {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Echoing {
    /// Starts it on a free port.
    fn start() -> Echoing {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = seen.clone();
                std::thread::spawn(move || echo(stream, &seen));
            }
        });
        Echoing { port, heads }
    }

    /// `http://127.0.0.1:<port><path>`.
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The heads of the requests received so far.
    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// Answers the requests of one connection as [`Echoing`] does.
fn echo(stream: std::net::TcpStream, seen: &Mutex<Vec<String>>) {
    const STANDARD: [&str; 6] = [
        "host",
        "user-agent",
        "content-type",
        "content-length",
        "content-encoding",
        "x-prometheus-remote-write-version",
    ];
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut head = String::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            head.push_str(&line);
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let shown: Vec<&str> = head
            .lines()
            .skip(1)
            .filter(|l| {
                let name = l.split(':').next().unwrap_or("").to_ascii_lowercase();
                !STANDARD.contains(&name.as_str())
            })
            .collect();
        seen.lock().unwrap().push(head.clone());
        let answer = format!("refused: {}", shown.join("; "));
        let response = format!(
            "HTTP/1.1 401 Unauthorized\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if out.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// The base URL of a port nothing listens on: connections to it are refused.
fn refused_base() -> String {
    let port = nixl_telemetry_test_support::free_port();
    format!("http://127.0.0.1:{port}")
}

/// The sidecar's options pushing to the remote-write receiver at `rw_base` and the OTLP one at
/// `otlp_base`.
fn both_protocols(rw_base: &str, otlp_base: &str) -> Vec<String> {
    vec![
        "--remote-write".into(),
        format!("{rw_base}/api/v1/write"),
        "--otlp".into(),
        otlp_base.into(),
    ]
}

/// The milliseconds the child printed after [`DESTROYED_MS`].
fn destroyed_ms(out: &Printed) -> u64 {
    child::read_marked(&mut out.stdout.as_bytes(), DESTROYED_MS)
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no {DESTROYED_MS}in {}", out.stdout))
}

#[test]
fn destroy_tries_a_refusing_receiver_once_without_backoff_from_the_first_moment() {
    let refused = refused_base();
    let debug = [("NIXL_LOG_LEVEL", "DEBUG".to_owned())];
    // Default settings: the first push would be an interval (15 s, 60 s) after the start, so
    // none has failed yet when the agent is destroyed, milliseconds after its creation.
    for (plugin, url_var, _) in PLUGINS {
        let out = Agents::start(plugin, url_var, &[format!("{refused}/w")], false, &debug).finish();
        assert!(out.stderr.contains("not retried at exit"), "{}", out.stderr);
        println!("{plugin}: destroyed in {} ms", destroyed_ms(&out));
        one_attempt_each(&[plugin], &out.stderr);
    }
    let work = tempfile::tempdir().unwrap();
    let serve = sidecar(work.path(), &both_protocols(&refused, &refused), &debug);
    one_attempt_each(&["remote_write", "otlp"], &stop(serve, work.path()));
}

/// Asserts that `log` says each exporter of `names` stopped after one attempt, with no retry of
/// the last push.
fn one_attempt_each(names: &[&str], log: &str) {
    for name in names {
        let stopped = format!("{name}: stopped after 1 pushes (0 accepted, 1 failed");
        assert!(log.contains(&stopped), "{log}");
    }
    assert!(!log.contains("retrying the last push"), "{log}");
}

#[test]
fn destroy_waits_for_a_silent_receiver_at_most_the_final_push_setting_and_says_so() {
    let rx = Receiver::start(Answer::Never);
    let base = rx.url("");
    for (i, (plugin, url_var, bound)) in PLUGINS.into_iter().enumerate() {
        let env = [(bound, "300".to_owned())];
        let out = Agents::start(plugin, url_var, &[format!("{base}/w")], false, &env).finish();
        cut_once(&[plugin], &out.stderr);
        assert!(
            out.stderr
                .contains("not delivered: what was recorded since the start (no push"),
            "{}",
            out.stderr
        );
        assert_eq!(rx.requests().len(), i + 1, "one attempt");
        println!("{plugin}: destroyed in {} ms", destroyed_ms(&out));
    }
    let work = tempfile::tempdir().unwrap();
    let env: Vec<(&str, String)> = PLUGINS.iter().map(|p| (p.2, "300".to_owned())).collect();
    let serve = sidecar(work.path(), &both_protocols(&base, &base), &env);
    cut_once(&["remote_write", "otlp"], &stop(serve, work.path()));
    assert_eq!(rx.requests().len(), 4, "one attempt per protocol");
}

/// Asserts that `log` says once of each exporter of `names` that its bound (300 ms) cut its
/// last push, naming the setting.
fn cut_once(names: &[&str], log: &str) {
    for name in names {
        let bound = PLUGINS.iter().find(|p| p.0 == *name).unwrap().2;
        let cut = format!("{name}: {bound}=300 cut the last push short");
        assert_eq!(log.matches(&cut).count(), 1, "{log}");
    }
}

/// Waits (at most a minute) until `cond` holds.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "never: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Settings of a child: names and values.
type Env = Vec<(&'static str, String)>;

/// Every canary of these tests holds this, and nothing else they print does.
const CANARY: &str = "canary";

/// A file of `dir` holding `secret` (a password or token file, mode 0600).
fn secret_file(dir: &Path, name: &str, secret: &str) -> String {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    writeln!(f, "{secret}").unwrap();
    path.display().to_string()
}

/// The credentials the `Authorization` headers of `heads` carried (`Basic`'s base64 included).
fn credentials(heads: &[String]) -> Vec<String> {
    heads
        .iter()
        .flat_map(|h| h.lines())
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            let (_, credential) = value.trim().split_once(' ')?;
            name.eq_ignore_ascii_case("authorization")
                .then(|| credential.to_owned())
        })
        .collect()
}

/// Asserts that `all` (what a process printed) shows no canary, nor any of `sent` (the
/// credentials sent), and that masking was at work (`<redacted>` where a refusal echoed the
/// headers, in `logs`: the host callback's lines or stderr).
fn assert_no_secret(what: &str, all: &str, sent: &[String], logs: &str) {
    assert!(!all.contains(CANARY), "{what} shows a secret:\n{all}");
    for credential in sent {
        assert!(
            !all.contains(credential),
            "{what} shows {credential}:\n{all}"
        );
    }
    assert!(
        logs.contains("push to")
            && logs.contains("HTTP 401: refused: ")
            && logs.contains("<redacted>"),
        "{what}: the refusal was not logged, masked:\n{all}"
    );
}

#[test]
fn no_configured_secret_reaches_a_log_line_or_an_error() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let good = Receiver::start(Answer::Status(204, String::new()));
    let echoing = Echoing::start();
    let refused = refused_base();
    let trace = ("NIXL_LOG_LEVEL", "TRACE".to_owned());
    let rw_password = secret_file(dir, "rw-password", "canary-rw-password");
    let rw_token = secret_file(dir, "rw-token", "canary-rw-token");
    // The plug-ins: each agent of a child pushes to a receiver that accepts, to one that
    // refuses with the headers it got, and to a port that refuses connections; the log goes to
    // stderr or to a host callback.
    let headers = (
        "NIXL_TELEMETRY_REMOTE_WRITE_HEADERS",
        "X-Scope-OrgID=canary-rw-tenant,api-key=canary-rw-header".to_owned(),
    );
    // (plug-in, sink, settings, whether they authenticate)
    let runs: [(&str, &str, Env, bool); 4] = [
        (
            "remote_write",
            "stderr",
            vec![
                headers.clone(),
                ("NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_USER", "nixl".into()),
                (
                    "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_PASSWORD_FILE",
                    rw_password,
                ),
            ],
            true,
        ),
        (
            "remote_write",
            "callback",
            vec![
                headers,
                ("NIXL_TELEMETRY_REMOTE_WRITE_BEARER_TOKEN_FILE", rw_token),
            ],
            true,
        ),
        (
            "otlp",
            "stderr",
            vec![(
                "OTEL_EXPORTER_OTLP_HEADERS",
                "api-key=canary-otel-header".into(),
            )],
            false,
        ),
        (
            "otlp",
            "callback",
            vec![
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "api-key=canary-otel-unused".into(),
                ),
                (
                    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                    "api-key=canary-otel-metrics,x-token=canary%2Dotel%2Dencoded".into(),
                ),
            ],
            false,
        ),
    ];
    for (plugin, sink, mut env, auth) in runs {
        let url_var = PLUGINS.iter().find(|p| p.0 == plugin).unwrap().1;
        env.extend([trace.clone(), (SINK, sink.to_owned())]);
        let urls = [good.url("/w"), echoing.url("/w"), format!("{refused}/w")];
        let (accepted, echoed) = (good.requests().len(), echoing.heads().len());
        let agents = Agents::start(plugin, url_var, &urls, true, &env);
        good.wait_for(accepted + 2, std::time::Duration::from_secs(60));
        wait_until("two refusals", || echoing.heads().len() >= echoed + 2);
        let out = agents.finish();
        // The secrets were sent...
        let heads = echoing.heads().split_off(echoed);
        assert!(heads[0].contains(CANARY), "{heads:?}");
        let sent = credentials(&heads);
        assert_eq!(!sent.is_empty(), auth, "{heads:?}");
        // ...and never logged.
        let what = format!("{plugin} logging to {sink}");
        let logs = if sink == "callback" {
            assert!(
                !out.stderr.contains("push to"),
                "{what}: the callback did not take the log"
            );
            out.stdout
                .lines()
                .filter(|l| l.contains(CALLBACK))
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            out.stderr.clone()
        };
        assert_no_secret(&what, &out.all(), &sent, &logs);
    }
    // URL user-info, in a URL that parses (refused: it would be shown) and in one that does not:
    // the creation fails with an error that does not show it.
    for (plugin, url_var) in [
        ("remote_write", "NIXL_TELEMETRY_REMOTE_WRITE_URL"),
        ("otlp", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
        ("otlp", "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ] {
        let urls = [
            "http://nixl:canary-url-a@127.0.0.1:1/w".to_owned(),
            "http://nixl:canary-url-b@127.0.0.1:99999/w".to_owned(),
        ];
        let out =
            Agents::start(plugin, url_var, &urls, false, std::slice::from_ref(&trace)).finish();
        let errors: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.contains(CREATE_ERROR))
            .collect();
        assert_eq!(errors.len(), 2, "{}", out.stdout);
        assert!(errors.iter().all(|e| e.contains(url_var)), "{errors:?}");
        assert!(
            !out.all().contains(CANARY),
            "{plugin} {url_var}: {}",
            out.all()
        );
    }
    // The sidecar, each protocol to each receiver in turn, with every secret option and its
    // protocols' variables.
    let cli_password = secret_file(dir, "cli-password", "canary-cli-password");
    let cli_token = secret_file(dir, "cli-token", "canary-cli-token");
    let env = vec![
        trace.clone(),
        (
            "NIXL_TELEMETRY_REMOTE_WRITE_HEADERS",
            "api-key=canary-cli-rw-env".to_owned(),
        ),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "api-key=canary-cli-otel-env".to_owned(),
        ),
    ];
    let good_base = good.url("");
    let echo_base = echoing.url("");
    for (rw, otlp, auth) in [
        (
            &echo_base,
            &good_base,
            vec!["--push-bearer-token-file".to_owned(), cli_token],
        ),
        (
            &good_base,
            &echo_base,
            vec![
                "--push-user".to_owned(),
                "nixl".to_owned(),
                "--push-password-file".to_owned(),
                cli_password,
            ],
        ),
    ] {
        let mut args = both_protocols(rw, otlp);
        args.extend(["--push-interval-ms".into(), "100".into()]);
        args.extend(["--push-header".into(), "x-key=canary-cli-header".into()]);
        args.extend(auth);
        let (accepted, echoed) = (good.requests().len(), echoing.heads().len());
        let serve = sidecar(dir, &args, &env);
        good.wait_for(accepted + 2, std::time::Duration::from_secs(60));
        wait_until("two refusals", || echoing.heads().len() >= echoed + 2);
        let log = stop(serve, dir);
        let sent = credentials(&echoing.heads().split_off(echoed));
        assert!(!sent.is_empty());
        assert_no_secret("serve", &log, &sent, &log);
    }
    for url in [
        "http://nixl:canary-url-c@127.0.0.1:1/api/v1/write",
        "http://nixl:canary-url-d@127.0.0.1:99999/api/v1/write",
    ] {
        for option in ["--remote-write", "--otlp"] {
            let out = Command::new(assert_cmd::cargo::cargo_bin("nixl-telemetry"))
                .args(["serve", "--push-only", "--dir"])
                .arg(dir.join("mp"))
                .args([option, url])
                .env_clear()
                .env("NIXL_LOG_LEVEL", "TRACE")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success() && err.contains(option), "{err}");
            assert!(!err.contains(CANARY), "{option} {url}: {err}");
        }
    }
}
