//! https pushes to a real TLS server (rustls, on 127.0.0.1) presenting a self-signed
//! certificate made as `openssl req -x509 ... -addext subjectAltName=...` makes it (OpenSSL 3
//! marks it `CA:TRUE`): given itself as the CA file (pinned), a remote-write and an OTLP push
//! succeed, as with curl; not pinned (another CA file, or none) or for another name, the push
//! is refused, and the message says how to make a certificate that works. So is a certificate
//! without a subjectAltName (which curl accepts, reading the subject's CN), with the same advice.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nixl_telemetry_base::env::fixed_env;
use nixl_telemetry_push::otlp::config::OtlpConfig;
use nixl_telemetry_push::remote_write;
use nixl_telemetry_push::{Body, Client, Outcome, Target};
use nixl_telemetry_test_support::prometheus::openssl;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A self-signed certificate `name`.crt/.key, exactly as the user made it.
fn self_signed(dir: &Path, name: &str, cn: &str, san: &str) {
    request(
        dir,
        "-x509",
        name,
        cn,
        &["-addext", &format!("subjectAltName={san}")],
    );
}

/// `openssl req <kind>` (`-x509`: a self-signed certificate `name`.crt, `-new`: a signing
/// request `name`.csr) for subject `/CN=cn`, a new key `name`.key, and `extra` arguments.
fn request(dir: &Path, kind: &str, name: &str, cn: &str, extra: &[&str]) {
    let out = format!("{name}.{}", if kind == "-x509" { "crt" } else { "csr" });
    let (key, subject) = (format!("{name}.key"), format!("/CN={cn}"));
    let mut args = vec![
        "req", kind, "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", &subject, "-keyout",
        &key, "-out", &out,
    ];
    args.extend(extra);
    openssl(dir, &args);
}

/// A TLS server on 127.0.0.1 answering every request with 204 and recording the request
/// lines; returns its port.
fn serve(dir: &Path, name: &str, requests: Arc<Mutex<Vec<String>>>) -> u16 {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(dir.join(format!("{name}.crt")))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{name}.key"))).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = BufReader::new(rustls::StreamOwned::new(conn, tcp));
            // A refused handshake ends here with an error: the next connection is served.
            let mut line = String::new();
            if tls.read_line(&mut line).is_err() || line.is_empty() {
                continue;
            }
            let mut length = 0usize;
            loop {
                let mut header = String::new();
                if tls.read_line(&mut header).is_err() || header.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = header.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; length];
            if tls.read_exact(&mut body).is_err() {
                continue;
            }
            requests.lock().unwrap().push(line.trim().to_owned());
            let stream = tls.get_mut();
            let _ = stream.write_all(
                b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            let _ = stream.flush();
            stream.conn.send_close_notify();
            let _ = stream.flush();
        }
    });
    port
}

fn body() -> Body {
    Body {
        bytes: b"x".to_vec(),
        content_type: "application/x-protobuf",
        content_encoding: None,
        headers: &[],
    }
}

/// The remote-write target at `url` with `ca` as its CA file.
fn remote_write_target(url: &str, ca: &Path) -> Target {
    let env = fixed_env(&[
        (remote_write::ENV_URL, url),
        ("NIXL_TELEMETRY_REMOTE_WRITE_CA_FILE", ca.to_str().unwrap()),
    ]);
    remote_write::Config::from_settings(&env).unwrap().target
}

fn push(target: Target) -> Outcome {
    Client::new(target)
        .unwrap()
        .post(&body(), Duration::from_secs(5))
}

fn refusal(outcome: Outcome) -> String {
    match outcome {
        Outcome::Retry { reason, .. } => reason,
        other => panic!("the push passed: {other:?}"),
    }
}

#[test]
fn a_pinned_self_signed_certificate_is_accepted_and_others_are_refused_with_advice() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    self_signed(dir, "server", "localhost", "DNS:localhost,IP:127.0.0.1");
    self_signed(dir, "other", "localhost", "DNS:localhost,IP:127.0.0.1");
    self_signed(dir, "elsewhere", "elsewhere", "DNS:elsewhere.example");
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(dir.join("server.crt"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"),
        "the test needs a CA:TRUE self-signed certificate, as OpenSSL 3 makes by default"
    );
    let requests = Arc::new(Mutex::new(Vec::new()));
    let port = serve(dir, "server", requests.clone());
    let server_crt = dir.join("server.crt");

    // Pinned: remote-write, by IP address and by name, then OTLP.
    for host in ["127.0.0.1", "localhost"] {
        let url = format!("https://{host}:{port}/api/v1/write");
        let outcome = push(remote_write_target(&url, &server_crt));
        assert!(
            matches!(outcome, Outcome::Sent { .. }),
            "{host}: {outcome:?}"
        );
    }
    let env = fixed_env(&[
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            &format!("https://127.0.0.1:{port}"),
        ),
        (
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            server_crt.to_str().unwrap(),
        ),
    ]);
    let otlp = OtlpConfig::from_settings(&env, "h").unwrap();
    let outcome = push(otlp.target);
    assert!(matches!(outcome, Outcome::Sent { .. }), "{outcome:?}");
    assert_eq!(
        *requests.lock().unwrap(),
        [
            "POST /api/v1/write HTTP/1.1",
            "POST /api/v1/write HTTP/1.1",
            "POST /v1/metrics HTTP/1.1"
        ]
    );

    // Not pinned: another self-signed certificate as the CA file.
    let url = format!("https://127.0.0.1:{port}/api/v1/write");
    let e = refusal(push(remote_write_target(&url, &dir.join("other.crt"))));
    assert!(
        e.contains("the CA file does not hold this certificate")
            && e.contains("give that self-signed certificate itself as the CA file")
            && e.contains("CA:FALSE"),
        "{e}"
    );
    // Not pinned: no CA file, the system's roots.
    let target = Target::new(url.parse().unwrap(), Duration::from_secs(5));
    match Client::new(target) {
        Ok(client) => {
            let e = refusal(client.post(&body(), Duration::from_secs(5)));
            assert!(e.contains("no CA file is given"), "{e}");
        }
        Err(e) => assert!(e.contains("no trusted root certificate"), "{e}"),
    }
    // Pinned but for another name: refused for the name.
    let other_port = serve(dir, "elsewhere", requests.clone());
    let url = format!("https://127.0.0.1:{other_port}/api/v1/write");
    let e = refusal(push(remote_write_target(&url, &dir.join("elsewhere.crt"))));
    assert!(e.contains("not valid for name"), "{e}");
    assert_eq!(
        requests.lock().unwrap().len(),
        3,
        "a refused push was answered"
    );
}

/// A certificate with no subjectAltName (its host only in the subject's CN, which curl still
/// reads): refused with the advice of a `CA:TRUE` one, naming the subjectAltName to add, whether
/// it is self-signed and pinned (by name and by address) or signed by the CA of the CA file.
#[test]
fn a_certificate_without_a_subject_alt_name_is_refused_with_advice() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let requests = Arc::new(Mutex::new(Vec::new()));
    // Self-signed, as `openssl req -x509` makes it without -addext; and signed by a CA,
    // CA:FALSE, with no subjectAltName.
    request(dir, "-x509", "bare", "localhost", &[]);
    request(dir, "-x509", "ca", "test CA", &[]);
    request(dir, "-new", "leaf", "localhost", &[]);
    std::fs::write(dir.join("leaf.ext"), "basicConstraints=CA:FALSE\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "leaf.ext",
            "-out",
            "leaf.crt",
        ],
    );
    for name in ["bare", "leaf"] {
        let text = Command::new("openssl")
            .args(["x509", "-noout", "-text", "-in"])
            .arg(dir.join(format!("{name}.crt")))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout).into_owned();
        assert!(
            text.contains("Subject: CN = localhost") && !text.contains("Subject Alternative Name"),
            "{name}: {text}"
        );
    }
    let bare_port = serve(dir, "bare", requests.clone());
    let leaf_port = serve(dir, "leaf", requests.clone());
    for (host, port, ca, san) in [
        ("localhost", bare_port, "bare.crt", "DNS:localhost"),
        ("127.0.0.1", bare_port, "bare.crt", "IP:127.0.0.1"),
        ("localhost", leaf_port, "ca.crt", "DNS:localhost"),
    ] {
        let url = format!("https://{host}:{port}/api/v1/write");
        let e = refusal(push(remote_write_target(&url, &dir.join(ca))));
        assert!(
            e.contains("the receiver's certificate names no host: it has no subjectAltName")
                && e.contains(&format!("subjectAltName={san}"))
                && e.contains("CA:FALSE")
                && e.contains("give the CA as the CA file"),
            "{host} with {ca}: {e}"
        );
    }
    // The same advice as for a CA:TRUE certificate that is not pinned, once the name is there.
    let e = refusal(push(remote_write_target(
        &format!("https://localhost:{bare_port}/api/v1/write"),
        &dir.join("ca.crt"),
    )));
    assert!(
        e.contains("is a CA certificate") && e.contains("subjectAltName=DNS:localhost"),
        "{e}"
    );
    assert!(
        requests.lock().unwrap().is_empty(),
        "a refused push was answered"
    );
}
