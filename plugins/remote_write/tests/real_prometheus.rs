//! The `remote_write` exporter against a real Prometheus server (Debian's `prometheus`, run
//! with `--web.enable-remote-write-receiver`): four rank processes give exact per-rank totals
//! (`sum by (local_rank)`) and the same `histogram_quantile` as a scrape of the `prometheus`
//! exporter for the same events; a two-second job's final totals arrive through the last push;
//! over https with basic authentication (a CA and a certificate the test makes with
//! `openssl`), the push succeeds with the CA and password files and fails with one warning with
//! a wrong CA or a wrong password; processes that describe themselves alike push series of
//! their own, also as pid 1 of two PID namespaces, and two that share an identity are told so.
//!
//! The plug-ins are cdylibs: `cargo build --workspace --all-targets` before `cargo test`.

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use nixl_telemetry_test_support::certs::{make_ca, server_certificate};
use nixl_telemetry_test_support::prometheus::{label_names, poll, Prometheus, Secure};
use nixl_telemetry_test_support::{built_plugins, child, free_port};

const ROLE: &str = "RW_TEST_ROLE";
/// Transfer times (µs) every rank records, one transfer each.
const TIMES: [u64; 6] = [5, 30, 200, 700, 1500, 12000];
/// The bcrypt hash (cost 10) of `nixl-test-password`, for Prometheus' `basic_auth_users`.
const PASSWORD: &str = "nixl-test-password";
const PASSWORD_HASH: &str = "$2b$10$kcQCS2BOZ8h0LnNEvGn02eWwjJx269G6RRHlMvK5WDYoQNA1HiCp.";

/// The child processes' entry point.
#[test]
fn child() {
    if std::env::var(ROLE).as_deref() != Ok("rank") {
        return;
    }
    let agent = std::env::var("RW_AGENT").unwrap();
    let bytes: u64 = std::env::var("RW_BYTES").unwrap().parse().unwrap();
    let c = nixl_telemetry_core::Collector::from_env(&agent, true)
        .unwrap_or_else(|e| panic!("creating {agent}: {e:?}"));
    if let Ok(ms) = std::env::var("RW_RUN_MS") {
        // A job: a transfer every 10 ms for this long (or, with `stdin`, until stdin closes),
        // then exit.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let run = if ms == "stdin" {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let _ = std::io::stdin().read_line(&mut String::new());
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            Duration::MAX
        } else {
            Duration::from_millis(ms.parse().unwrap())
        };
        let start = Instant::now();
        let (mut total, mut n) = (0u64, 0u64);
        while start.elapsed() < run && !stop.load(std::sync::atomic::Ordering::Relaxed) {
            c.add_xfer_stats(100 + n % 7, true, bytes, 5);
            total += bytes;
            n += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(c);
        println!("\nTOTAL {total} {n}");
        return;
    }
    for t in TIMES {
        c.add_xfer_stats(t, true, bytes, 3);
    }
    c.flush();
    println!("\nREADY");
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_line(&mut String::new());
    drop(c);
}

/// A child of this test binary; killed when dropped.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    stderr: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn spawn(work: &Path, name: &str, env: &[(&str, String)]) -> Proc {
        Proc::spawn_in(work, name, env, &[])
    }

    /// [`Proc::spawn`], run by the command `wrapper` (a program and its arguments, to which the
    /// child's command line is added; none: the child itself).
    fn spawn_in(work: &Path, name: &str, env: &[(&str, String)], wrapper: &[&str]) -> Proc {
        let plugins = built_plugins(&["remote_write", "prometheus"]);
        let stderr = work.join(format!("{name}.stderr"));
        let test = child::test("child");
        let mut cmd = match wrapper.split_first() {
            None => test,
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(test.get_program()).args(test.get_args());
                cmd
            }
        };
        cmd.env_clear()
            .env(ROLE, "rank")
            .env("NIXL_PLUGIN_DIR", &plugins)
            .env("NIXL_TELEMETRY_ENABLE", "y")
            .env("NIXL_TELEMETRY_RUN_INTERVAL", "100")
            .env("HOME", work)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let stdin = child.stdin.take();
        Proc {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    /// The first line starting with `prefix` (its rest), or a panic with the child's stderr.
    fn line(&mut self, prefix: &str) -> String {
        child::read_marked(&mut self.stdout, prefix).unwrap_or_else(|| {
            panic!(
                "the child ended without printing {prefix}: {}",
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            )
        })
    }

    /// Closes stdin (a rank then destroys its agent) and waits for the end.
    fn finish(mut self) -> String {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(status.success(), "child failed: {err}");
        err
    }
}

fn rw_env(url: &str, interval_ms: u64) -> Vec<(&'static str, String)> {
    vec![
        ("NIXL_TELEMETRY_EXPORTER", "remote_write".into()),
        ("NIXL_TELEMETRY_REMOTE_WRITE_URL", url.into()),
        (
            "NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS",
            interval_ms.to_string(),
        ),
        ("NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS", "3000".into()),
    ]
}

#[test]
fn four_ranks_push_exact_totals_and_the_quantiles_of_a_scrape() {
    let work = tempfile::tempdir().unwrap();
    // The same 24 transfers through the `prometheus` exporter, scraped.
    let scrape_port = free_port();
    let scraped = Proc::spawn(
        work.path(),
        "scraped",
        &[
            ("NIXL_TELEMETRY_EXPORTER", "prometheus".into()),
            ("NIXL_TELEMETRY_PROMETHEUS_PORT", scrape_port.to_string()),
            ("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "y".into()),
            ("RW_AGENT", "scraped".into()),
            ("RW_BYTES", "1".into()),
        ],
    );
    let prom = Prometheus::start(work.path(), Some(scrape_port), None);
    let mut ranks: Vec<Proc> = (0..4u64)
        .map(|r| {
            let mut env = rw_env(&prom.write_url(), 500);
            env.extend([
                ("LOCAL_RANK", r.to_string()),
                ("RW_AGENT", "pushed".into()),
                ("RW_BYTES", (1000 * (r + 1)).to_string()),
            ]);
            Proc::spawn(work.path(), &format!("rank{r}"), &env)
        })
        .collect();
    for r in &mut ranks {
        r.line("READY");
    }
    let values = poll("four series by local_rank", || {
        prom.by_label(
            "local_rank",
            "sum by (local_rank) (agent_tx_bytes_total{agent_name=\"pushed\"})",
        )
        .filter(|v| v.len() == 4)
    });
    assert_eq!(
        values,
        [
            ("0".into(), 6000.0),
            ("1".into(), 12000.0),
            ("2".into(), 18000.0),
            ("3".into(), 24000.0)
        ]
    );
    prom.wait_for_value(
        "sum(agent_tx_requests_num_total{agent_name=\"pushed\"})",
        24.0,
    );
    prom.wait_for_value("sum(agent_xfer_time_us_count{agent_name=\"pushed\"})", 24.0);
    // The scraped agent saw the same times once: compare per-event distributions.
    prom.wait_for_value(
        "sum(agent_xfer_time_us_count{job=\"scrape\"})",
        TIMES.len() as f64,
    );
    for q in ["0.25", "0.5", "0.9", "0.99"] {
        let pushed = prom
            .vector(&format!(
                "histogram_quantile({q}, sum by (le) (agent_xfer_time_us_bucket{{agent_name=\"pushed\"}}))"
            ))
            .unwrap();
        let scraped = prom
            .vector(&format!(
                "histogram_quantile({q}, sum by (le) (agent_xfer_time_us_bucket{{job=\"scrape\"}}))"
            ))
            .unwrap();
        assert_eq!(pushed.len(), 1);
        assert_eq!(pushed[0].1, scraped[0].1, "quantile {q}");
    }
    // Pushed series carry the same label names as scraped ones (plus local_rank, minus the
    // scrape's job; `instance` is the sender's identity).
    let one = prom
        .vector("agent_errors_total{agent_name=\"pushed\",local_rank=\"0\",status=\"backend\"}")
        .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(
        label_names(&one[0].0),
        [
            "__name__",
            "agent_name",
            "hostname",
            "instance",
            "local_rank",
            "status"
        ]
    );
    for r in ranks {
        let err = r.finish();
        assert!(!err.contains("remote_write: push"), "{err}");
    }
    // Each rank's own push counters arrived with its last push: no failure, some bytes.
    let successes = poll("the push counters of four ranks", || {
        prom.by_label(
            "local_rank",
            "nixl_telemetry_push_successes_total{agent_name=\"pushed\"} > 0",
        )
        .filter(|v| v.len() == 4)
    });
    assert_eq!(successes.len(), 4);
    prom.wait_for_value(
        "sum(nixl_telemetry_push_failures_total{agent_name=\"pushed\"})",
        0.0,
    );
    let bytes = prom
        .vector("min(nixl_telemetry_push_bytes_total{agent_name=\"pushed\"})")
        .unwrap();
    assert!(bytes[0].1 > 0.0, "{bytes:?}");
    drop(scraped);
}

#[test]
fn a_receiver_down_for_ten_seconds_gets_exact_totals_without_resets_once_back() {
    let work = tempfile::tempdir().unwrap();
    let mut prom = Prometheus::start(work.path(), None, None);
    let mut env = rw_env(&prom.write_url(), 500);
    env.extend([
        ("RW_AGENT", "outage".into()),
        ("NIXL_LOG_LEVEL", "INFO".into()),
        ("RW_BYTES", "100".into()),
        ("RW_RUN_MS", "stdin".into()),
    ]);
    let job = Proc::spawn(work.path(), "outage", &env);
    let before = poll("the first pushes", || {
        prom.vector("agent_tx_bytes_total{agent_name=\"outage\"} > 0")
            .filter(|v| v.len() == 1)
    })[0]
        .1;
    prom.stop();
    std::thread::sleep(Duration::from_secs(10));
    prom.restart();
    // Pushes resume with totals above those before the outage.
    poll("pushes after the outage", || {
        prom.vector(&format!(
            "agent_tx_bytes_total{{agent_name=\"outage\"}} > {before}"
        ))
        .filter(|v| v.len() == 1)
    });
    // The pushes that failed during the outage are counted and pushed once it is back.
    poll("failures counted", || {
        prom.vector("nixl_telemetry_push_failures_total{agent_name=\"outage\"} > 0")
            .filter(|v| v.len() == 1)
    });
    let err = job_totals_arrive(&prom, job, "outage");
    prom.wait_for_value(
        "resets(agent_tx_bytes_total{agent_name=\"outage\"}[10m])",
        0.0,
    );
    // Each kind of failure is warned once, however many retries it took.
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("remote_write: push to"))
        .collect();
    assert!(!warnings.is_empty(), "the outage was not warned: {err}");
    let mut distinct = warnings.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), warnings.len(), "a warning repeated: {err}");
    assert!(err.contains("pushing to"), "recovery not logged: {err}");
}

#[test]
fn a_two_second_job_gets_its_final_totals_in() {
    let work = tempfile::tempdir().unwrap();
    let prom = Prometheus::start(work.path(), None, None);
    // An interval far longer than the job: only the last push can carry the totals.
    let mut env = rw_env(&prom.write_url(), 3_600_000);
    env.extend([
        ("RW_AGENT", "short".into()),
        ("RW_BYTES", "4096".into()),
        ("RW_RUN_MS", "2000".into()),
    ]);
    let job = Proc::spawn(work.path(), "short", &env);
    let err = job_totals_arrive(&prom, job, "short");
    assert!(!err.contains("remote_write"), "{err}");
}

/// Two processes that describe themselves alike (one agent name on one host, without a rank
/// variable, or with the same rank) push two series, told apart by `instance="<host>:<pid>"`,
/// each with its own exact totals; a process that sets `NIXL_TELEMETRY_PUSH_INSTANCE` is
/// pushed under that identity.
#[test]
fn two_processes_with_one_agent_name_push_two_series_with_exact_totals() {
    let work = tempfile::tempdir().unwrap();
    let prom = Prometheus::start(work.path(), None, None);
    let per_process = 4096.0 * TIMES.len() as f64;
    for (agent, rank) in [("twin", None), ("twin-ranked", Some("0"))] {
        let mut procs: Vec<Proc> = (0..2)
            .map(|i| {
                let mut env = rw_env(&prom.write_url(), 500);
                env.extend([("RW_AGENT", agent.into()), ("RW_BYTES", "4096".into())]);
                env.extend(rank.map(|r| ("LOCAL_RANK", r.to_owned())));
                Proc::spawn(work.path(), &format!("{agent}{i}"), &env)
            })
            .collect();
        for p in &mut procs {
            p.line("READY");
        }
        let pids: Vec<u32> = procs.iter().map(|p| p.child.id()).collect();
        for p in procs {
            let err = p.finish();
            assert!(!err.contains("remote_write: push"), "{err}");
        }
        let series = poll("two series", || {
            prom.vector(&format!(r#"agent_tx_bytes_total{{agent_name="{agent}"}}"#))
                .filter(|v| v.len() == 2 && v.iter().all(|(_, x)| *x == per_process))
        });
        let mut instances: Vec<String> = series
            .iter()
            .map(|(l, _)| {
                assert_eq!(l["local_rank"].as_str(), rank, "{l}");
                pid_of(l).to_owned()
            })
            .collect();
        instances.sort();
        let mut expected: Vec<String> = pids.iter().map(u32::to_string).collect();
        expected.sort();
        assert_eq!(instances, expected);
        prom.wait_for_value(
            &format!(r#"sum(agent_tx_bytes_total{{agent_name="{agent}"}})"#),
            2.0 * per_process,
        );
        // The push counters too: one series per process (the last push may be the first).
        poll("the push counters of two processes", || {
            prom.vector(&format!(
                r#"nixl_telemetry_push_attempts_total{{agent_name="{agent}"}}"#
            ))
            .filter(|v| v.len() == 2)
        });
    }
    // A user-set identity wins.
    let mut env = rw_env(&prom.write_url(), 500);
    env.extend([
        ("RW_AGENT", "named".into()),
        ("RW_BYTES", "1".into()),
        ("NIXL_TELEMETRY_PUSH_INSTANCE", "job-7/rank-0".into()),
    ]);
    let mut named = Proc::spawn(work.path(), "named", &env);
    named.line("READY");
    named.finish();
    let v = poll("the named instance", || {
        prom.vector(r#"agent_tx_bytes_total{agent_name="named"}"#)
            .filter(|v| v.len() == 1)
    });
    assert_eq!(v[0].0["instance"], "job-7/rank-0");
    assert_eq!(v[0].1, TIMES.len() as f64);
}

/// The pid in the `instance` label of series `labels`: `<host>:<pid>`, with `-<tag>` when the
/// sender ran outside the host's PID namespace.
fn pid_of(labels: &serde_json::Value) -> &str {
    let host = labels["hostname"].as_str().unwrap();
    let instance = labels["instance"].as_str().unwrap();
    let pid = instance
        .strip_prefix(&format!("{host}:"))
        .unwrap_or_else(|| panic!("{instance} is not {host}:<pid>[-<tag>]"));
    pid.split_once('-').map_or(pid, |(pid, _)| pid)
}

/// `unshare(1)` when this process may make PID namespaces with it (as root), else why not.
fn unshare() -> Result<String, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let program = std::env::split_paths(&path)
        .map(|d| d.join("unshare"))
        .find(|p| p.is_file())
        .ok_or("no unshare(1) on PATH")?;
    let out = Command::new(&program)
        .args(["--pid", "--fork", "true"])
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`unshare --pid --fork` failed (it needs root): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(program.display().to_string())
}

/// Two processes on one host, each pid 1 of a PID namespace of its own (as two containers of
/// one pod are, which also share the host name), push two series (their default identities
/// differ: `<host>:1-<tag>`), each with its exact totals; no warning of a shared identity.
#[test]
fn two_processes_in_two_pid_namespaces_push_two_series_with_exact_totals() {
    let unshare = match unshare() {
        Ok(program) => program,
        Err(why) => {
            eprintln!("SKIPPED two_processes_in_two_pid_namespaces: {why}");
            return;
        }
    };
    let work = tempfile::tempdir().unwrap();
    let prom = Prometheus::start(work.path(), None, None);
    let per_process = 4096.0 * TIMES.len() as f64;
    let wrapper = [unshare.as_str(), "--pid", "--fork", "--kill-child"];
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| {
            let mut env = rw_env(&prom.write_url(), 500);
            env.extend([
                ("RW_AGENT", "namespaced".into()),
                ("RW_BYTES", "4096".into()),
            ]);
            Proc::spawn_in(work.path(), &format!("namespaced{i}"), &env, &wrapper)
        })
        .collect();
    for p in &mut procs {
        p.line("READY");
    }
    for p in procs {
        let err = p.finish();
        assert!(!err.contains("remote_write: push"), "{err}");
        assert!(!err.contains("identity"), "{err}");
    }
    let series = poll("two series", || {
        prom.vector(r#"agent_tx_bytes_total{agent_name="namespaced"}"#)
            .filter(|v| v.len() == 2 && v.iter().all(|(_, x)| *x == per_process))
    });
    for (labels, _) in &series {
        assert_eq!(pid_of(labels), "1", "{labels}");
    }
    assert_ne!(series[0].0["instance"], series[1].0["instance"]);
    prom.wait_for_value(
        r#"sum(agent_tx_bytes_total{agent_name="namespaced"})"#,
        2.0 * per_process,
    );
    prom.wait_for_value(
        r#"sum(resets(agent_tx_bytes_total{agent_name="namespaced"}[10m]))"#,
        0.0,
    );
}

/// Two processes given the same `NIXL_TELEMETRY_PUSH_INSTANCE` write one series: Prometheus
/// refuses samples as out of order (or duplicate), and the senders say, once, that another
/// process may share their identity and how to set one.
#[test]
fn two_senders_sharing_an_identity_are_told_so_once() {
    const HINT: &str = "another process may be pushing under this sender's identity";
    let work = tempfile::tempdir().unwrap();
    let prom = Prometheus::start(work.path(), None, None);
    let procs: Vec<Proc> = (0..2)
        .map(|i| {
            let mut env = rw_env(&prom.write_url(), 20);
            env.extend([
                ("RW_AGENT", "shared".into()),
                ("RW_BYTES", (100 * (i + 1)).to_string()),
                ("RW_RUN_MS", "stdin".into()),
                ("NIXL_TELEMETRY_PUSH_INSTANCE", "job-7/rank-0".into()),
            ]);
            Proc::spawn(work.path(), &format!("shared{i}"), &env)
        })
        .collect();
    let logs = || -> Vec<String> {
        procs
            .iter()
            .map(|p| std::fs::read_to_string(&p.stderr).unwrap_or_default())
            .collect()
    };
    poll("a sender told of a shared identity", || {
        logs().iter().any(|l| l.contains(HINT)).then_some(())
    });
    let mut told = 0;
    for p in procs {
        let err = p.finish();
        let hints: Vec<&str> = err.lines().filter(|l| l.contains(HINT)).collect();
        assert!(hints.len() <= 1, "{err}");
        assert!(
            hints
                .iter()
                .all(|h| h.contains("NIXL_TELEMETRY_PUSH_INSTANCE")),
            "{err}"
        );
        told += hints.len();
        if !hints.is_empty() {
            assert!(
                err.contains("out of order") || err.contains("duplicate sample"),
                "{err}"
            );
        }
    }
    assert!(told >= 1);
}

/// Ends `job` (its stdin closed), takes the totals it prints (`TOTAL <bytes> <transfers>`) and
/// waits until Prometheus holds exactly those for `agent`; returns the job's stderr.
fn job_totals_arrive(prom: &Prometheus, mut job: Proc, agent: &str) -> String {
    drop(job.stdin.take());
    let totals = job.line("TOTAL ");
    let (total, n) = totals.split_once(' ').unwrap();
    let err = job.finish();
    prom.wait_for_value(
        &format!("agent_tx_bytes_total{{agent_name=\"{agent}\"}}"),
        total.parse().unwrap(),
    );
    prom.wait_for_value(
        &format!("agent_xfer_time_us_count{{agent_name=\"{agent}\"}}"),
        n.parse().unwrap(),
    );
    err
}

#[test]
fn https_with_basic_auth_succeeds_with_the_right_files_and_warns_once_otherwise() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let ca = make_ca(dir, "ca");
    let other_ca = make_ca(dir, "other-ca");
    let (cert, key) = server_certificate(dir, "ca", "server");
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  nixl: '{PASSWORD_HASH}'\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let password = dir.join("password");
    std::fs::write(&password, format!("{PASSWORD}\n")).unwrap();
    let wrong = dir.join("wrong");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let prom = Prometheus::start(
        dir,
        None,
        Some(&Secure {
            ca: &ca,
            web_config: &web,
            user: "nixl",
            password: PASSWORD,
        }),
    );

    let run = |name: &str, ca: &Path, password: &Path| -> (String, String) {
        let mut env = rw_env(&prom.write_url(), 200);
        env.extend([
            (
                "NIXL_TELEMETRY_REMOTE_WRITE_CA_FILE",
                ca.display().to_string(),
            ),
            ("NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_USER", "nixl".into()),
            (
                "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_PASSWORD_FILE",
                password.display().to_string(),
            ),
            ("NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS", "1000".into()),
            ("RW_AGENT", name.into()),
            ("RW_BYTES", "512".into()),
            ("RW_RUN_MS", "1500".into()),
        ]);
        let mut job = Proc::spawn(dir, name, &env);
        let total = job.line("TOTAL ");
        (total, job.finish())
    };
    let (total, err) = run("good", &ca, &password);
    assert!(!err.contains("remote_write"), "{err}");
    let total: f64 = total.split_once(' ').unwrap().0.parse().unwrap();
    prom.wait_for_value("agent_tx_bytes_total{agent_name=\"good\"}", total);

    let (_, err) = run("badpassword", &ca, &wrong);
    let failures: Vec<&str> = err.lines().filter(|l| l.contains("push to")).collect();
    assert_eq!(failures.len(), 1, "{err}");
    assert!(failures[0].contains("HTTP 401"), "{err}");
    assert!(!err.contains("not-the-password"), "{err}");

    let (_, err) = run("badca", &other_ca, &password);
    let failures: Vec<&str> = err.lines().filter(|l| l.contains("push to")).collect();
    assert_eq!(failures.len(), 1, "{err}");
    assert!(failures[0].to_lowercase().contains("certificate"), "{err}");
    for agent in ["badpassword", "badca"] {
        assert_eq!(
            prom.vector(&format!("agent_tx_bytes_total{{agent_name=\"{agent}\"}}")),
            Some(vec![])
        );
    }
}
