//! The receiver of a push exporter: its URL, TLS roots, authentication, extra headers and
//! timeout ([`Target`]), the parsers that build one from variables (each error names the
//! variable), and the [`Client`] that posts one body and classifies the answer.
//!
//! The parsers are where a secret enters the process, so they register each with the log
//! ([`add_secret`]: no log line shows it, whichever crate writes it, at any level): header
//! values ([`parse_headers`]), the password and token files' contents ([`read_secret`]), a URL's
//! user-info ([`parse_url`], which refuses one anyway), and the `Authorization` value made of
//! them ([`Client::new`]). Their errors never repeat a secret either.

use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use nixl_telemetry_base::logging::add_secret;
use nixl_telemetry_base::trusted_file::{
    read_trusted, MAX_CONFIG_FILE_BYTES, MAX_SECRET_FILE_BYTES,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::tls::{self, PinningVerifier};

/// At most this much of a receiver's error answer is kept for the log.
const MESSAGE_LIMIT: usize = 512;

/// How a push authenticates. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// HTTP basic authentication.
    Basic {
        /// The user name.
        user: String,
        /// The password (read from a file).
        password: String,
    },
    /// `Authorization: Bearer <token>` (the token read from a file).
    Bearer(String),
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(name, _)| format!("{name}: <hidden>"))
            .collect();
        let mut url = self.url.clone();
        if url.password().is_some() {
            let _ = url.set_password(Some("<hidden>"));
        }
        f.debug_struct("Target")
            .field("url", &url.as_str())
            .field("headers", &headers)
            .field("auth", &self.auth)
            .field("roots", &self.roots.as_ref().map(|r| r.len()))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Basic { user, .. } => write!(f, "Basic {{ user: {user:?}, password: <hidden> }}"),
            Auth::Bearer(_) => f.write_str("Bearer(<hidden>)"),
        }
    }
}

impl Auth {
    /// The `Authorization` header's value.
    fn header(&self) -> String {
        match self {
            Auth::Basic { user, password } => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            Auth::Bearer(token) => format!("Bearer {token}"),
        }
    }
}

/// One request's body and its content headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    /// The bytes on the wire.
    pub bytes: Vec<u8>,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// `Content-Encoding`, if any.
    pub content_encoding: Option<&'static str>,
    /// Headers the protocol adds (for example `X-Prometheus-Remote-Write-Version`).
    pub headers: &'static [(&'static str, &'static str)],
}

/// Where and how to push. `Debug` shows the header names, never their values (a header may
/// carry a token, as `Authorization` does).
#[derive(Clone)]
pub struct Target {
    /// The receiver's full URL (`http` or `https`).
    pub url: url::Url,
    /// Extra headers, sent with every push (for example `X-Scope-OrgID`).
    pub headers: Vec<(String, String)>,
    /// Authentication, if any.
    pub auth: Option<Auth>,
    /// The certificates trusted for `https`: `None` for the system's root certificates.
    pub roots: Option<Vec<CertificateDer<'static>>>,
    /// How long one push may take (connecting, sending and reading the answer).
    pub timeout: Duration,
}

impl Target {
    /// A target at `url` with no headers, no authentication, the system's roots and this
    /// timeout.
    pub fn new(url: url::Url, timeout: Duration) -> Target {
        Target {
            url,
            headers: Vec::new(),
            auth: None,
            roots: None,
            timeout,
        }
    }
}

/// The user-info of URL text `value` (`user:password` in `scheme://user:password@host/...`),
/// found as text so that a URL that does not parse has it too.
fn user_info(value: &str) -> Option<&str> {
    let rest = &value[value.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    authority.rfind('@').map(|at| &authority[..at])
}

/// Parses the receiver's URL from variable `var`: absolute, `http` or `https`, with a host, and
/// no user or password (they would be sent where the URL is shown: give them to the
/// authentication settings). A user-info is registered as a secret of the log all the same
/// (its password, and itself), and errors show the URL without it.
pub fn parse_url(var: &str, value: &str) -> Result<url::Url, String> {
    let shown = match user_info(value) {
        Some(info) => {
            add_secret(info);
            if let Some((_, password)) = info.split_once(':') {
                add_secret(password);
            }
            value.replacen(info, "<redacted>", 1)
        }
        None => value.to_owned(),
    };
    let url = url::Url::parse(value).map_err(|e| format!("{var}='{shown}' is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{var}='{shown}': the scheme must be http or https, not '{}'",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{var}='{shown}' has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "{var}: put no user or password in the URL (it would be logged): use the \
             authentication variables"
        ));
    }
    Ok(url)
}

/// Parses extra headers from variable `var` ([`parse_pairs`]: `name=value` pairs separated by
/// commas, the format of `OTEL_EXPORTER_OTLP_HEADERS`) and registers every value, as given and
/// decoded, as a secret of the log: a header may carry a key or a tenant, as `Authorization`
/// does.
pub fn parse_headers(
    var: &str,
    value: &str,
    percent_decode: bool,
) -> Result<Vec<(String, String)>, String> {
    for pair in value.split(',') {
        if let Some((_, v)) = pair.split_once('=') {
            add_secret(v);
        }
    }
    let headers = parse_pairs(var, value, percent_decode, "header")?;
    for (_, v) in &headers {
        add_secret(v);
    }
    Ok(headers)
}

/// Parses `name=value` pairs separated by commas from variable `var` (`what`: what a pair is,
/// "header" or "attribute", for the errors). With `percent_decode`, values are percent-decoded
/// (as the OpenTelemetry specification says). Names must be HTTP tokens and values printable.
/// Errors never show a value (nor a pair that has no `=`: it may be one).
pub fn parse_pairs(
    var: &str,
    value: &str,
    percent_decode: bool,
    what: &str,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let pairs: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    for (i, pair) in pairs.iter().enumerate() {
        let Some((name, v)) = pair.split_once('=') else {
            return Err(format!(
                "{var}: pair {} of {} is not name=value ({what}s are name=value pairs \
                 separated by commas)",
                i + 1,
                pairs.len()
            ));
        };
        let name = name.trim();
        let mut v = v.trim().to_owned();
        if percent_decode {
            v = url::form_urlencoded::parse(format!("v={}", v.replace('+', "%2B")).as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default();
        }
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) {
            return Err(format!("{var}: '{name}' is not a valid {what} name"));
        }
        if v.chars().any(|c| c.is_control() && c != '\t') {
            return Err(format!(
                "{var}: the value of {what} '{name}' holds a control character"
            ));
        }
        out.push((name.to_owned(), v));
    }
    Ok(out)
}

/// Reads a secret (a password or a token) from the file named by variable `var`: its content
/// without the trailing newline, registered as a secret of the log. The error names the
/// variable and the file, never the content.
///
/// The file is trusted only as OpenSSH trusts its own (`nixl_telemetry_base::trusted_file`): a
/// regular file of this user or root, writable by nobody else, in a directory likewise, not a
/// link, at most 64 KiB.
pub fn read_secret(var: &str, path: &str) -> Result<String, String> {
    let bytes = read_trusted(Path::new(path), MAX_SECRET_FILE_BYTES)
        .map_err(|why| format!("{var}='{path}' {why}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{var}='{path}' is not UTF-8"))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_owned();
    if secret.is_empty() {
        return Err(format!("{var}='{path}' is empty"));
    }
    if secret.chars().any(|c| c.is_control()) {
        return Err(format!(
            "{var}='{path}' holds a control character (a secret is one line)"
        ));
    }
    add_secret(&secret);
    Ok(secret)
}

/// Reads the PEM certificates of the CA file named by variable `var` (at least one), trusted as
/// [`read_secret`]'s file is (at most 1 MiB).
pub fn read_ca_file(var: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read_trusted(Path::new(path), MAX_CONFIG_FILE_BYTES)
        .map_err(|why| format!("{var}='{path}' {why}"))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{var}='{path}' is not a readable PEM certificate file: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{var}='{path}' holds no PEM certificate"));
    }
    Ok(certs)
}

/// What became of one push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The receiver accepted it (2xx).
    Sent {
        /// The answer's body (at most 64 KiB), for protocols that report partial success.
        answer: Vec<u8>,
    },
    /// It may pass later: a connection error, a timeout, a 5xx or a 429.
    Retry {
        /// What went wrong, for the log.
        reason: String,
        /// What is logged once: the status, or the kind of transport error.
        key: String,
        /// The receiver's `Retry-After`, if it gave one.
        after: Option<Duration>,
        /// The receiver's answer (429 or 5xx); `None` when there was none: it could not be
        /// reached (refused, no route, TLS) or did not answer in time.
        status: Option<u16>,
    },
    /// The receiver refused it and would refuse it again (another 4xx, or a 3xx).
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The receiver's message (its answer's body, cut).
        message: String,
    },
}

/// Posts bodies to one [`Target`].
pub struct Client {
    target: Target,
    agent: ureq::Agent,
    authorization: Option<String>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `target`; fails only when `https` has no trusted root at all.
    pub fn new(target: Target) -> Result<Client, String> {
        let mut roots = rustls::RootCertStore::empty();
        let certs = match &target.roots {
            Some(certs) => certs.clone(),
            None => rustls_native_certs::load_native_certs().certs,
        };
        let (_added, _ignored) = roots.add_parsable_certificates(certs);
        if roots.is_empty() && target.url.scheme() == "https" {
            return Err(format!(
                "{}: no trusted root certificate (the system has none: give a CA file)",
                target.url
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pinned = target.roots.clone().unwrap_or_default();
        let tls = if roots.is_empty() {
            // Plain http without a root: never asked to check a certificate.
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS: {e}"))?
                .with_root_certificates(roots)
                .with_no_client_auth()
        } else {
            let verifier = PinningVerifier::new(roots, pinned, provider.clone())?;
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS: {e}"))?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth()
        };
        let agent = crate::http::agent(Some(Arc::new(tls)), None);
        let authorization = target.auth.as_ref().map(Auth::header);
        if let Some(value) = &authorization {
            // `Basic <base64>` shows no configured value as it is: mask it too, whole and the
            // credential alone.
            add_secret(value);
            add_secret(value.split_once(' ').map_or(value.as_str(), |(_, c)| c));
        }
        Ok(Client {
            target,
            agent,
            authorization,
        })
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Posts `body`, waiting at most `timeout`, and says what became of it.
    pub fn post(&self, body: &Body, timeout: Duration) -> Outcome {
        let mut req = self
            .agent
            .post(self.target.url.as_str())
            .timeout(timeout)
            .set("Content-Type", body.content_type);
        if let Some(encoding) = body.content_encoding {
            req = req.set("Content-Encoding", encoding);
        }
        for (name, value) in body.headers {
            req = req.set(name, value);
        }
        for (name, value) in &self.target.headers {
            req = req.set(name, value);
        }
        if let Some(auth) = &self.authorization {
            req = req.set("Authorization", auth);
        }
        match req.send_bytes(&body.bytes) {
            Ok(resp) if (200..300).contains(&resp.status()) => {
                // Read the (small) answer: the protocol may report in it, and the connection
                // can be reused.
                let mut answer = Vec::new();
                let _ = resp.into_reader().take(64 * 1024).read_to_end(&mut answer);
                Outcome::Sent { answer }
            }
            Ok(resp) => Outcome::Rejected {
                status: resp.status(),
                message: format!(
                    "redirected to {:?} (give the final URL)",
                    resp.header("Location").unwrap_or("")
                ),
            },
            Err(ureq::Error::Status(status, resp)) => {
                let after = resp.header("Retry-After").and_then(parse_retry_after);
                let message = answer_text(resp);
                if status == 429 || status >= 500 {
                    Outcome::Retry {
                        reason: format!("HTTP {status}: {message}"),
                        key: format!("HTTP {status}"),
                        after,
                        status: Some(status),
                    }
                } else {
                    Outcome::Rejected { status, message }
                }
            }
            Err(ureq::Error::Transport(t)) => Outcome::Retry {
                // The pusher's warning names the URL: the reason does not repeat it.
                reason: tls::advice_message(&t).unwrap_or_else(|| crate::http::transport_error(&t)),
                key: t.kind().to_string(),
                after: None,
                status: None,
            },
        }
    }
}

/// The receiver's answer, cut to [`MESSAGE_LIMIT`] bytes, on one line.
fn answer_text(resp: ureq::Response) -> String {
    let mut bytes = Vec::new();
    let _ = resp
        .into_reader()
        .take(MESSAGE_LIMIT as u64)
        .read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes)
        .trim()
        .replace(['\n', '\r'], " ")
}

/// `Retry-After` in seconds (the HTTP-date form is not honoured: backoff applies).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_header_value_or_secret() {
        let target = Target {
            url: url::Url::parse("https://mimir.example/api/v1/push").unwrap(),
            headers: vec![("X-Scope-OrgID".into(), "tenant-secret-1".into())],
            auth: Some(Auth::Bearer("token-secret-2".into())),
            roots: None,
            timeout: Duration::from_secs(10),
        };
        let shown = format!("{target:?}");
        assert!(shown.contains("X-Scope-OrgID: <hidden>"), "{shown}");
        assert!(shown.contains("mimir.example"), "{shown}");
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn urls_must_be_http_with_a_host_and_no_credentials() {
        assert!(parse_url("V", "http://127.0.0.1:9090/api/v1/write").is_ok());
        assert!(parse_url("V", "https://mimir.example/api/v1/push").is_ok());
        for bad in [
            "",
            "localhost:9090",
            "ftp://h/x",
            "http://",
            "http://u:p@h/x",
        ] {
            let e = parse_url("V", bad).unwrap_err();
            assert!(e.starts_with("V"), "{e}");
        }
    }

    #[test]
    fn every_secret_a_parser_sees_is_masked_in_logs_and_absent_from_its_errors() {
        use nixl_telemetry_base::logging::mask_secrets;
        let masked = |canary: &str| mask_secrets(&format!("<{canary}>")) == "<<redacted>>";
        // Header values, as given and decoded, even when a later pair is bad.
        let h = parse_headers("H", "api-key=hdr-canary-1,k=enc%2Dcanary%2D2", true).unwrap();
        assert_eq!(h[1].1, "enc-canary-2");
        assert!(masked("hdr-canary-1") && masked("enc%2Dcanary%2D2") && masked("enc-canary-2"));
        let e = parse_headers("H", "a=early-canary-3,bare-canary-4", false).unwrap_err();
        assert!(masked("early-canary-3"), "{e}");
        assert!(!e.contains("canary"), "{e}");
        // A URL's user-info, whether or not the URL parses; errors show it redacted.
        for (url, secret) in [
            ("http://u:url-canary-5@h:1/w", "url-canary-5"),
            ("http://u:url-canary-6@h:99999/w", "url-canary-6"),
            ("ftp://u:url-canary-7@h/w", "url-canary-7"),
            ("http://url-canary-8@/w", "url-canary-8"),
        ] {
            let e = parse_url("V", url).unwrap_err();
            assert!(masked(secret), "{url}");
            assert!(!e.contains(secret), "{e}");
        }
        // A token file's content, and the Authorization value built of it.
        let dir = std::env::temp_dir().join(format!("push-canary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "file-canary-9\n").unwrap();
        let token = read_secret("T", file.to_str().unwrap()).unwrap();
        assert!(masked("file-canary-9"));
        let mut target = Target::new("http://h/w".parse().unwrap(), Duration::from_secs(1));
        target.auth = Some(Auth::Basic {
            user: "u".into(),
            password: token,
        });
        let basic = base64::engine::general_purpose::STANDARD.encode("u:file-canary-9");
        assert!(!masked(&basic));
        Client::new(target).unwrap();
        assert!(masked(&basic) && masked(&format!("Basic {basic}")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn headers_are_name_value_pairs() {
        assert_eq!(
            parse_headers("H", "X-Scope-OrgID=team-a, a=b=c", false).unwrap(),
            [
                ("X-Scope-OrgID".to_owned(), "team-a".to_owned()),
                ("a".to_owned(), "b=c".to_owned())
            ]
        );
        assert_eq!(
            parse_headers("H", "k=a%20b%2Cc", true).unwrap(),
            [("k".to_owned(), "a b,c".to_owned())]
        );
        assert_eq!(parse_headers("H", "", false).unwrap(), []);
        for bad in ["novalue", "bad name=x", "=x", "k=a\u{1}b"] {
            let e = parse_headers("H", bad, false).unwrap_err();
            assert!(e.starts_with("H:"), "{e}");
        }
        assert!(parse_headers("H", "k=a%0Ab", true).is_err());
    }

    #[test]
    fn secrets_come_from_files_and_are_never_in_errors() {
        let dir = std::env::temp_dir().join(format!("push-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(&good, "s3cret\n").unwrap();
        assert_eq!(read_secret("P", good.to_str().unwrap()).unwrap(), "s3cret");
        let two = dir.join("two");
        std::fs::write(&two, "s3cret\nmore\n").unwrap();
        let e = read_secret("P", two.to_str().unwrap()).unwrap_err();
        assert!(e.starts_with("P=") && !e.contains("s3cret"), "{e}");
        let e = read_secret("P", "/nonexistent/secret").unwrap_err();
        assert!(e.contains("cannot be opened"), "{e}");
        let e = read_ca_file("C", good.to_str().unwrap()).unwrap_err();
        assert!(e.contains("no PEM certificate"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            !format!("{:?}", Auth::Bearer("tok".into())).contains("tok")
                && !format!(
                    "{:?}",
                    Auth::Basic {
                        user: "u".into(),
                        password: "pw".into()
                    }
                )
                .contains("pw")
        );
    }

    #[test]
    fn a_failed_push_says_why_once_without_the_url() {
        // The pusher's warning names the URL itself: the reason must not repeat it, nor ureq's
        // kind (`Network Error: Network Error:` when an I/O error wraps another of its errors).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let timeout = Duration::from_millis(200);
        let url = format!("http://127.0.0.1:{port}/w").parse().unwrap();
        let client = Client::new(Target::new(url, timeout)).unwrap();
        let body = Body {
            bytes: b"x".to_vec(),
            content_type: "text/plain",
            content_encoding: None,
            headers: &[],
        };
        let outcome = client.post(&body, timeout);
        drop(held);
        let Outcome::Retry { reason, key, .. } = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(key, "Network Error");
        assert!(reason.starts_with("Network Error: "), "{reason}");
        assert_eq!(reason.matches("Network Error").count(), 1, "{reason}");
        assert!(!reason.contains("127.0.0.1"), "{reason}");
    }

    #[test]
    fn retry_after_in_seconds() {
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}

/// Reads a duration in milliseconds from setting `var` (default `default_ms`); 0 is refused
/// when `positive`.
pub fn millis(
    settings: nixl_telemetry_base::env::Lookup,
    var: &str,
    default_ms: u64,
    positive: bool,
) -> Result<std::time::Duration, String> {
    let ms = match settings(var).map_err(|e| e.message)? {
        Some(v) => nixl_telemetry_base::env::parse_u64(var, &v).map_err(|e| e.message)?,
        None => default_ms,
    };
    if positive && ms == 0 {
        return Err(format!("{var}=0: give a positive number of milliseconds"));
    }
    Ok(std::time::Duration::from_millis(ms))
}

/// The names of the variables that describe a [`Target`] (see [`Target::from_settings`]).
#[derive(Clone, Copy, Debug)]
pub struct TargetVars {
    /// The URL (required).
    pub url: &'static str,
    /// Extra headers, `name=value,...`.
    pub headers: &'static str,
    /// The basic-auth user.
    pub basic_auth_user: &'static str,
    /// The file holding the basic-auth password.
    pub basic_auth_password_file: &'static str,
    /// The file holding a bearer token.
    pub bearer_token_file: &'static str,
    /// A PEM file of the CA certificates to trust instead of the system's.
    pub ca_file: &'static str,
    /// The timeout of one push in milliseconds.
    pub timeout_ms: &'static str,
}

impl Target {
    /// The target the variables `vars` describe, read through `settings`; every invalid
    /// value, missing file or contradiction is an error naming the variable.
    pub fn from_settings(
        settings: nixl_telemetry_base::env::Lookup,
        vars: &TargetVars,
        default_timeout_ms: u64,
    ) -> Result<Target, String> {
        let get = |v: &str| settings(v).map_err(|e| e.message);
        let url = get(vars.url)?
            .ok_or_else(|| format!("{} is required (the receiver's full URL)", vars.url))?;
        let mut target = Target::new(
            parse_url(vars.url, &url)?,
            millis(settings, vars.timeout_ms, default_timeout_ms, true)?,
        );
        if let Some(h) = get(vars.headers)? {
            target.headers = parse_headers(vars.headers, &h, false)?;
        }
        let user = get(vars.basic_auth_user)?;
        let password = get(vars.basic_auth_password_file)?;
        let bearer = get(vars.bearer_token_file)?;
        target.auth = match (user, password, bearer) {
            (None, None, None) => None,
            (Some(user), Some(file), None) => Some(Auth::Basic {
                user,
                password: read_secret(vars.basic_auth_password_file, &file)?,
            }),
            (None, None, Some(file)) => {
                Some(Auth::Bearer(read_secret(vars.bearer_token_file, &file)?))
            }
            (_, _, Some(_)) => {
                return Err(format!(
                    "{} and basic authentication ({}, {}) exclude each other",
                    vars.bearer_token_file, vars.basic_auth_user, vars.basic_auth_password_file
                ))
            }
            (Some(_), None, None) => {
                return Err(format!(
                    "{} is set but {} is not",
                    vars.basic_auth_user, vars.basic_auth_password_file
                ))
            }
            (None, Some(_), None) => {
                return Err(format!(
                    "{} is set but {} is not",
                    vars.basic_auth_password_file, vars.basic_auth_user
                ))
            }
        };
        if let Some(ca) = get(vars.ca_file)? {
            target.roots = Some(read_ca_file(vars.ca_file, &ca)?);
        }
        Ok(target)
    }
}
