//! A real Prometheus server for the tests (Debian's `prometheus`, 2.42), the one launcher of
//! the workspace's tests: started on a free loopback port with the remote-write receiver on
//! (`--web.enable-remote-write-receiver`), scraping loopback targets every second as job
//! `scrape`, optionally with rule files (evaluated every second), native histograms or https
//! with basic authentication ([`Launch`]); its PromQL instant queries are its [`PromQl`]
//! (`Deref`). Finding Debian's Prometheus programs (`prometheus`, `promtool`,
//! `prometheus-node-exporter`): [`tool`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;

use crate::free_port;
use crate::promql::PromQl;

/// The crate's polling helpers, re-exported: the real-server tests import them with the server.
pub use crate::{poll, poll_for};

/// The https and basic-auth setup of a server: the CA that signed its certificate, its
/// `--web.config.file`, and the user and password to query it with.
pub struct Secure<'a> {
    /// The CA certificate (PEM).
    pub ca: &'a Path,
    /// The web configuration file (`tls_server_config`, `basic_auth_users`).
    pub web_config: &'a Path,
    /// The user.
    pub user: &'a str,
    /// The password.
    pub password: &'a str,
}

/// How a server is started ([`Prometheus::launch`]); `Launch::default()` scrapes nothing, has no
/// rules, classic histograms only, and plain http.
#[derive(Clone, Copy, Default)]
pub struct Launch<'a> {
    /// The loopback ports it scrapes every second (job `scrape`).
    pub targets: &'a [u16],
    /// Rule files it loads, evaluated every second.
    pub rules: &'a [&'a Path],
    /// Native histograms on (`--enable-feature=native-histograms`: a scrape asks for the
    /// protobuf exposition, and a histogram with native buckets is kept as native only).
    pub native: bool,
    /// Over https with basic authentication.
    pub secure: Option<&'a Secure<'a>>,
}

/// A Prometheus server (Debian's `prometheus`) with the remote-write receiver on, started on a
/// free loopback port; killed when dropped. Its query API is its [`PromQl`] (`Deref`).
pub struct Prometheus {
    /// The running server (None between [`Prometheus::stop`] and [`Prometheus::restart`]).
    child: Option<Child>,
    /// Its command-line arguments (the same port and data directory on a restart).
    args: Vec<String>,
    port: u16,
    log: PathBuf,
    scheme: &'static str,
    api: PromQl,
}

impl std::ops::Deref for Prometheus {
    type Target = PromQl;
    fn deref(&self) -> &PromQl {
        &self.api
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Prometheus {
    /// Started in `work` (its configuration, data and log), scraping `scrape` (a port) if given,
    /// over https with basic auth if `secure` is given.
    pub fn start(work: &Path, scrape: Option<u16>, secure: Option<&Secure>) -> Prometheus {
        let targets: Vec<u16> = scrape.into_iter().collect();
        Prometheus::launch(
            work,
            &Launch {
                targets: &targets,
                secure,
                ..Launch::default()
            },
        )
    }

    /// [`Prometheus::start`] over plain http with native histograms on ([`Launch::native`]).
    pub fn start_native(work: &Path, scrape: Option<u16>) -> Prometheus {
        let targets: Vec<u16> = scrape.into_iter().collect();
        Prometheus::launch(
            work,
            &Launch {
                targets: &targets,
                native: true,
                ..Launch::default()
            },
        )
    }

    /// Started in `work`, scraping the loopback `targets`.
    pub fn scraping(work: &Path, targets: &[u16]) -> Prometheus {
        Prometheus::launch(
            work,
            &Launch {
                targets,
                ..Launch::default()
            },
        )
    }

    /// Started in `work` (created if missing; its configuration, data and log, which must not
    /// be another server's) as `how` says, once it answers queries.
    pub fn launch(work: &Path, how: &Launch) -> Prometheus {
        std::fs::create_dir_all(work).unwrap();
        let yml = work.join("prometheus.yml");
        let quoted = |items: Vec<String>| {
            items
                .iter()
                .map(|i| format!("'{i}'"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut config = format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\n\
             rule_files: [{}]\n",
            quoted(how.rules.iter().map(|r| r.display().to_string()).collect())
        );
        if !how.targets.is_empty() {
            config += &format!(
                "scrape_configs:\n- job_name: scrape\n  static_configs: [{{targets: [{}]}}]\n",
                quoted(
                    how.targets
                        .iter()
                        .map(|t| format!("127.0.0.1:{t}"))
                        .collect()
                )
            );
        }
        std::fs::write(&yml, config).unwrap();
        let port = free_port();
        let log = work.join("prometheus.log");
        let mut args = vec![
            format!("--config.file={}", yml.display()),
            format!("--storage.tsdb.path={}", work.join("tsdb").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--web.enable-remote-write-receiver".into(),
            "--log.level=warn".into(),
        ];
        if how.native {
            args.push("--enable-feature=native-histograms".into());
        }
        let mut builder = ureq::AgentBuilder::new().timeout(Duration::from_secs(10));
        if let Some(secure) = how.secure {
            args.push(format!("--web.config.file={}", secure.web_config.display()));
            builder = builder.tls_config(Arc::new(client_tls(secure.ca)));
        }
        let child = spawn(&args, std::fs::File::create(&log).unwrap());
        let scheme = if how.secure.is_some() {
            "https"
        } else {
            "http"
        };
        let auth = how.secure.map(|s| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD
                    .encode(format!("{}:{}", s.user, s.password))
            )
        });
        let mut prom = Prometheus {
            child: Some(child),
            args,
            port,
            scheme,
            api: PromQl::with(
                format!("{scheme}://127.0.0.1:{port}"),
                builder.build(),
                auth,
                &log,
            ),
            log,
        };
        prom.wait_ready("Prometheus ready");
        prom
    }

    /// Waits until the server answers a query, panicking with its log (as `what`) when it exits
    /// first or never answers.
    fn wait_ready(&mut self, what: &str) {
        let ready = poll_for(Duration::from_secs(60), || {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("prometheus exited ({status}):\n{}", self.log_text());
            }
            self.vector("vector(1)")
        });
        assert!(ready.is_some(), "never: {what}\n{}", self.log_text());
    }

    /// Stops the server as an operator would (SIGTERM, waiting for it to exit): its port
    /// refuses connections until [`Prometheus::restart`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .expect("kill");
            assert!(status.success());
            child.wait().unwrap();
        }
    }

    /// Starts the server again on the same port with the same data, once it answers.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart after stop");
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .unwrap();
        self.child = Some(spawn(&self.args, log));
        self.wait_ready("Prometheus ready again");
    }

    /// The server's process id (None between [`Prometheus::stop`] and
    /// [`Prometheus::restart`]), to read its CPU time and memory from `/proc`.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The remote-write receiver's URL.
    pub fn write_url(&self) -> String {
        format!("{}://127.0.0.1:{}/api/v1/write", self.scheme, self.port)
    }
}

/// Starts Debian's `prometheus` with `args`, logging to `log`.
fn spawn(args: &[String], log: std::fs::File) -> Child {
    Command::new(tool("prometheus"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting prometheus")
}

/// A program of Debian's `prometheus` (`prometheus`, `promtool`) or
/// `prometheus-node-exporter` packages, or a failure saying how to install it.
pub fn tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "`{name}` is not installed: install Debian's `prometheus` package (it provides \
             `prometheus` and `promtool`) and `prometheus-node-exporter`: `apt-get install \
             prometheus prometheus-node-exporter`; scripts/install-test-deps.sh (run by \
             `bash .ci/run`) does it when they are missing"
        )
    })
}

/// The label names of a series of [`PromQl::vector`](crate::promql::PromQl::vector), sorted.
pub fn label_names(labels: &serde_json::Value) -> Vec<&str> {
    let mut names: Vec<&str> = labels
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Runs `openssl` with `args` in `dir` (certificates and keys for the TLS tests), panicking with
/// its error output when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (scripts/install-test-deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A TLS client configuration trusting only the CA in `ca`.
pub fn client_tls(ca: &Path) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}
