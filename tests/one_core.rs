//! One core per process: the exporter plug-ins (built `.so` files, loaded with `dlopen` as a
//! user's process loads them) share the host's configuration and fork handling instead of
//! carrying their own. Each case runs in a child process of its own (the configuration file is
//! read once per process, and fork handlers stay installed for the process's life).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nixl_telemetry_base::settings::{self, SETTINGS};
use nixl_telemetry_core::Collector;
use nixl_telemetry_test_support::{built_plugins, child, free_port, plugin_config};

/// The variable that tells the child which case to run (and where its files are).
const CASE: &str = "NIXL_TEST_ONE_CORE_CASE";
const DIR: &str = "NIXL_TEST_ONE_CORE_DIR";

/// Runs `case` of this binary in a child with `HOME` = `dir`, no NIXL setting but `env`, and
/// the plug-ins this build made; panics with the child's output when it fails.
fn run_child(case: &str, dir: &Path, env: &[(&str, &str)]) {
    let plugins = built_plugins(&["prometheus", "doca", "remote_write", "otlp"]);
    let mut cmd = child::test("child");
    cmd.env(CASE, case)
        .env(DIR, dir)
        .env("HOME", dir)
        .env_remove(settings::file::CONFIG_FILE_VAR);
    for s in SETTINGS {
        cmd.env_remove(s.name);
    }
    cmd.env("NIXL_PLUGIN_DIR", &plugins)
        .envs(env.iter().copied());
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "case {case} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The body of `GET /metrics` on loopback port `port`.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The child's side of every case (does nothing in the parent).
#[test]
fn child() {
    let Some(case) = std::env::var_os(CASE) else {
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var_os(DIR).unwrap());
    match case.to_str().unwrap() {
        "file_read_once" => file_read_once(&dir),
        "fork_handlers" => fork_handlers(),
        other => panic!("unknown case {other}"),
    }
}

/// Agent A exports with `prometheus`; the configuration file is then edited; agent B exports
/// with `doca`. Both plug-ins ask the host, which read the file once, when A was created.
fn file_read_once(dir: &Path) {
    let cfg = dir.join(".nixl.cfg");
    let write_cfg = |team: &str| {
        let text = std::fs::read_to_string(dir.join("cfg.template")).unwrap();
        std::fs::write(&cfg, text.replace("@TEAM@", team)).unwrap();
    };
    write_cfg("A");
    let a = Collector::new("agent_a", plugin_config("prometheus")).unwrap();
    a.add_xfer_stats(10, true, 4096, 2);
    a.flush();
    write_cfg("B");
    let b = Collector::new("agent_b", plugin_config("doca")).unwrap();
    b.add_xfer_stats(10, true, 4096, 2);
    b.flush();
    let port = |name: &str| -> u16 {
        std::fs::read_to_string(dir.join(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    for (what, page) in [
        ("prometheus", scrape(port("prometheus.port"))),
        ("doca", scrape(port("doca.port"))),
    ] {
        assert!(page.contains("team=\"A\""), "{what}:\n{page}");
        assert!(!page.contains("team=\"B\""), "{what}:\n{page}");
    }
    drop((a, b));
}

#[test]
fn every_plug_in_gets_the_configuration_the_process_read_first() {
    let dir = tempfile::tempdir().unwrap();
    let (prometheus, doca) = (free_port(), free_port());
    std::fs::write(dir.path().join("prometheus.port"), prometheus.to_string()).unwrap();
    std::fs::write(dir.path().join("doca.port"), doca.to_string()).unwrap();
    std::fs::write(
        dir.path().join("cfg.template"),
        format!(
            "NIXL_TELEMETRY_LABELS = \"team=@TEAM@\"\n\
             NIXL_TELEMETRY_PROMETHEUS_PORT = {prometheus}\n\
             NIXL_TELEMETRY_PROMETHEUS_LOCAL = true\n\
             NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT = {doca}\n\
             NIXL_TELEMETRY_DOCA_PROMETHEUS_LOCAL = true\n"
        ),
    )
    .unwrap();
    run_child("file_read_once", dir.path(), &[]);
}

/// Creates agents with `prometheus` (whose endpoint registers its locks and listening socket for
/// the fork), `remote_write` and `otlp` (receivers nobody listens on), forks, and destroys them:
/// the preloaded shim logs which library registered each set of fork handlers.
fn fork_handlers() {
    let scrape = Collector::new("agent_scrape", plugin_config("prometheus")).unwrap();
    let rw = Collector::new("agent_rw", plugin_config("remote_write")).unwrap();
    let otlp = Collector::new("agent_otlp", plugin_config("otlp")).unwrap();
    rw.add_xfer_stats(10, true, 4096, 2);
    otlp.add_xfer_stats(10, true, 4096, 2);
    rw.flush();
    otlp.flush();
    // SAFETY: the child only calls `_exit`, which is async-signal-safe.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    drop((scrape, rw, otlp));
}

/// Interposes glibc's `__register_atfork` (what `pthread_atfork` calls, with the registering
/// library's handle) and logs the file of each library that registers fork handlers.
const ATFORK_SHIM: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
typedef void (*handler_t)(void);
int __register_atfork(handler_t prepare, handler_t parent, handler_t child, void *dso) {
    int (*real)(handler_t, handler_t, handler_t, void *) =
        (int (*)(handler_t, handler_t, handler_t, void *))dlsym(RTLD_NEXT, "__register_atfork");
    Dl_info info;
    const char *who = "(unknown)";
    if (dso != NULL && dladdr(dso, &info) != 0 && info.dli_fname != NULL && info.dli_fname[0]) {
        who = info.dli_fname;
    }
    const char *log = getenv("NIXL_TEST_ATFORK_LOG");
    if (log != NULL) {
        FILE *f = fopen(log, "a");
        if (f != NULL) {
            fprintf(f, "%s\n", who);
            fclose(f);
        }
    }
    return real(prepare, parent, child, dso);
}
"#;

#[test]
fn plug_ins_join_the_hosts_fork_handlers_instead_of_installing_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("atfork_shim.so");
    let src = dir.path().join("atfork_shim.c");
    std::fs::write(&src, ATFORK_SHIM).unwrap();
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(&src)
        .arg("-ldl")
        .status()
        .expect("a C compiler (cc) is needed");
    assert!(built.success());
    let log = dir.path().join("atfork.log");
    let dead = format!("http://127.0.0.1:{}", free_port());
    run_child(
        "fork_handlers",
        dir.path(),
        &[
            ("LD_PRELOAD", shim.to_str().unwrap()),
            ("NIXL_TEST_ATFORK_LOG", log.to_str().unwrap()),
            (
                "NIXL_TELEMETRY_REMOTE_WRITE_URL",
                &format!("{dead}/api/v1/write"),
            ),
            ("NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS", "100"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &dead),
            ("NIXL_TELEMETRY_OTLP_FINAL_PUSH_MS", "100"),
            ("NIXL_TELEMETRY_PROMETHEUS_PORT", &free_port().to_string()),
            ("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "true"),
        ],
    );
    let registered = std::fs::read_to_string(&log).unwrap_or_default();
    let registrants: Vec<&str> = registered.lines().collect();
    // The shim works: the host (this test binary, which links the core) registered its set.
    let exe = std::env::current_exe().unwrap();
    let host = registrants
        .iter()
        .filter(|r| Path::new(r) == exe || exe.ends_with(Path::new(r)))
        .count();
    assert_eq!(host, 1, "the host's one set of handlers: {registrants:?}");
    let from_plugins: Vec<&&str> = registrants
        .iter()
        .filter(|r| r.contains("libtelemetry_exporter_"))
        .collect();
    assert!(
        from_plugins.is_empty(),
        "plug-ins installed fork handlers of their own: {from_plugins:?}"
    );
}
