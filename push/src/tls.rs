//! The server certificate check of `https` pushes: rustls' own (webpki against the trusted
//! roots), and one case more, as curl and Prometheus accept it: a self-signed server
//! certificate that the CA file itself holds (a "pinned" certificate). OpenSSL 3's
//! `openssl req -x509` marks such a certificate `CA:TRUE`, and webpki refuses a CA certificate
//! as a server's own (`CaUsedAsEndEntity`) before it looks at the roots. The certificate is then
//! accepted if and only if it is byte-equal to a certificate of the CA file, valid for the
//! server's name and within its validity. Anything else refused for that reason gets a message
//! that says how to make a certificate that works; so does a certificate that names no host
//! (no subjectAltName: webpki, as Go and browsers, does not read the subject's CN, which curl
//! still falls back to), whether it is pinned or signed by a CA of the CA file.

use std::fmt;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, Error, OtherError, RootCertStore};

/// The server certificate check of a push client: webpki's against the roots, and pinned
/// self-signed certificates of the CA file (see the module's documentation).
#[derive(Debug)]
pub struct PinningVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    /// The certificates of the CA file (empty when the system's roots are used).
    pinned: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
}

impl PinningVerifier {
    /// A verifier trusting `roots`; `pinned` are the CA file's certificates (empty with the
    /// system's roots), any of which the server may present as its own certificate.
    pub fn new(
        roots: RootCertStore,
        pinned: Vec<CertificateDer<'static>>,
        provider: Arc<CryptoProvider>,
    ) -> Result<PinningVerifier, String> {
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| format!("TLS: {e}"))?;
        Ok(PinningVerifier {
            webpki,
            pinned,
            provider,
        })
    }

    /// The pinned case: `end_entity` is one of the CA file's certificates, valid for
    /// `server_name` and at `now`.
    fn verify_pinned(
        &self,
        end_entity: &CertificateDer<'_>,
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let why = if self.pinned.is_empty() {
            NotPinnedWhy::NoCaFile
        } else if !self
            .pinned
            .iter()
            .any(|c| c.as_ref() == end_entity.as_ref())
        {
            NotPinnedWhy::NotInCaFile
        } else {
            rustls::client::verify_server_name(
                &ParsedCertificate::try_from(end_entity)?,
                server_name,
            )?;
            let (not_before, not_after) = validity(end_entity)
                .ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
            let time = now.as_secs();
            if time < not_before {
                return Err(CertificateError::NotValidYet.into());
            }
            if time > not_after {
                return Err(CertificateError::Expired.into());
            }
            return Ok(ServerCertVerified::assertion());
        };
        Err(advice(Advice::NotPinned(why, server_name.to_str().into())))
    }
}

impl ServerCertVerifier for PinningVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(e) if is_ca_used_as_end_entity(&e) => {
                self.verify_pinned(end_entity, server_name, now)
            }
            other => other,
        }
        .map_err(with_advice)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Whether webpki refused the server's certificate because it is a CA certificate.
fn is_ca_used_as_end_entity(e: &Error) -> bool {
    matches!(
        e,
        Error::InvalidCertificate(CertificateError::Other(OtherError(inner)))
            if matches!(inner.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
    )
}

/// `e`, or the advice it calls for when the certificate names no host (see [`Advice`]).
fn with_advice(e: Error) -> Error {
    match e {
        Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected,
            presented,
        }) if presented.is_empty() => advice(Advice::NoSubjectAltName(expected.to_str().into())),
        other => other,
    }
}

/// Why a `CA:TRUE` server certificate was not accepted as pinned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NotPinnedWhy {
    /// No CA file was given (the system's roots are used).
    NoCaFile,
    /// The CA file does not hold this very certificate.
    NotInCaFile,
}

/// A server certificate refused for a reason its maker can fix; its `Display` is the advice.
#[derive(Debug)]
enum Advice {
    /// A `CA:TRUE` certificate that is not pinned, for a push to this host.
    NotPinned(NotPinnedWhy, String),
    /// A certificate with no subjectAltName, for a push to this host (a name or an address).
    NoSubjectAltName(String),
}

/// The error of a certificate refused with `advice`.
fn advice(advice: Advice) -> Error {
    CertificateError::Other(OtherError(Arc::new(advice))).into()
}

/// The subjectAltName entry naming `host` (`DNS:name` or `IP:address`).
fn subject_alt_name(host: &str) -> String {
    match host.parse::<std::net::IpAddr>() {
        Ok(_) => format!("IP:{host}"),
        Err(_) => format!("DNS:{host}"),
    }
}

impl fmt::Display for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (problem, self_signed, host) = match self {
            Advice::NotPinned(why, host) => {
                let why = match why {
                    NotPinnedWhy::NoCaFile => "no CA file is given",
                    NotPinnedWhy::NotInCaFile => "the CA file does not hold this certificate",
                };
                (
                    format!(
                        "is a CA certificate (basicConstraints CA:TRUE, as `openssl req -x509` \
                         makes a self-signed one) and {why}"
                    ),
                    "give that self-signed certificate itself as the CA file".to_owned(),
                    host,
                )
            }
            Advice::NoSubjectAltName(host) => (
                "names no host: it has no subjectAltName, and TLS clients of today (rustls, as \
                 Go and browsers) do not read a host name from the subject's CN (curl still \
                 does, so curl accepts it)"
                    .to_owned(),
                format!(
                    "make it again with `-addext subjectAltName={}` and give it itself as the \
                     CA file",
                    subject_alt_name(host)
                ),
                host,
            ),
        };
        write!(
            f,
            "the receiver's certificate {problem}: either {self_signed} (it is then trusted as \
             it is, like curl --cacert), or make a CA and a server certificate it signs with \
             basicConstraints=CA:FALSE and subjectAltName={}, and give the CA as the CA file",
            subject_alt_name(host)
        )
    }
}

impl std::error::Error for Advice {}

/// The advice of a refused certificate (not pinned `CA:TRUE`, or naming no host), if that is
/// what `error` (a push's transport error) comes from.
pub(crate) fn advice_message(error: &ureq::Transport) -> Option<String> {
    let io = std::error::Error::source(error)?.downcast_ref::<std::io::Error>()?;
    match io.get_ref()?.downcast_ref::<Error>()? {
        Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
            inner.downcast_ref::<Advice>().map(ToString::to_string)
        }
        _ => None,
    }
}

/// The validity of a DER certificate, `(notBefore, notAfter)` in seconds since the Unix epoch;
/// `None` if it does not parse.
fn validity(der: &[u8]) -> Option<(u64, u64)> {
    let (_, certificate, _) = tlv(der)?;
    let (_, mut tbs, _) = tlv(certificate)?;
    // [0] EXPLICIT version, optional.
    if tbs.first() == Some(&0xa0) {
        tbs = tlv(tbs)?.2;
    }
    // serialNumber, signature, issuer.
    for _ in 0..3 {
        tbs = tlv(tbs)?.2;
    }
    let (tag, validity, _) = tlv(tbs)?;
    if tag != 0x30 {
        return None;
    }
    let (tag1, t1, rest) = tlv(validity)?;
    let (tag2, t2, _) = tlv(rest)?;
    Some((time(tag1, t1)?, time(tag2, t2)?))
}

/// One DER element of `input`: its tag, its content and what follows it.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, after) = rest.split_at(n);
        rest = after;
        bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
    };
    if rest.len() < len {
        return None;
    }
    let (content, after) = rest.split_at(len);
    Some((tag, content, after))
}

/// A DER `UTCTime` (tag 0x17, `YYMMDDHHMMSSZ`) or `GeneralizedTime` (tag 0x18,
/// `YYYYMMDDHHMMSSZ`) in seconds since the Unix epoch (RFC 5280's forms only).
fn time(tag: u8, text: &[u8]) -> Option<u64> {
    let digits = |s: &[u8]| -> Option<u64> {
        s.iter().try_fold(0u64, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + u64::from(c - b'0'))
        })
    };
    let (year, rest) = match (tag, text.len()) {
        (0x17, 13) => {
            let yy = digits(&text[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        (0x18, 15) => (digits(&text[..4])?, &text[4..]),
        _ => return None,
    };
    if rest[10] != b'Z' {
        return None;
    }
    let (month, day) = (digits(&rest[0..2])?, digits(&rest[2..4])?);
    let (hour, minute, second) = (
        digits(&rest[4..6])?,
        digits(&rest[6..8])?,
        digits(&rest[8..10])?,
    );
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if year < 1970 || second > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm), the epoch being 1970-01-01.
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_times_in_both_forms() {
        assert_eq!(time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(time(0x17, b"260102030405Z"), Some(1_767_323_045));
        assert_eq!(time(0x18, b"20260102030405Z"), Some(1_767_323_045));
        assert_eq!(time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(time(0x18, b"20000229000000Z"), Some(951_782_400));
        for (tag, bad) in [
            (0x17, &b"2601020304Z"[..]),
            (0x17, b"261302030405Z"),
            (0x17, b"260102030405+"),
            (0x18, b"19690101000000Z"),
            (0x04, b"260102030405Z"),
        ] {
            assert_eq!(time(tag, bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn der_elements_and_bad_lengths() {
        assert_eq!(
            tlv(&[0x30, 0x01, 0xaa, 0xbb]),
            Some((0x30, &[0xaa][..], &[0xbb][..]))
        );
        let long = [&[0x04, 0x81, 0x02][..], &[1, 2]].concat();
        assert_eq!(tlv(&long), Some((0x04, &[1, 2][..], &[][..])));
        assert_eq!(tlv(&[0x30, 0x05, 0x00]), None);
        assert_eq!(tlv(&[0x30, 0x80]), None);
        assert_eq!(validity(&[0x30, 0x00]), None);
    }
    /// `validity` of a certificate made by `openssl` gives the dates `openssl x509` prints.
    #[test]
    fn validity_is_the_certificates_as_openssl_reads_it() {
        let dir = std::env::temp_dir().join(format!("push-validity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let run = |program: &str, args: &[&str]| -> String {
            let out = std::process::Command::new(program)
                .args(args)
                .current_dir(&dir)
                .output()
                .unwrap_or_else(|e| panic!("{program} (scripts/install-test-deps.sh): {e}"));
            assert!(out.status.success(), "{program} {args:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        run(
            "openssl",
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "400",
                "-subj",
                "/CN=localhost",
                "-keyout",
                "v.key",
                "-outform",
                "DER",
                "-out",
                "v.der",
            ],
        );
        let dates = run(
            "openssl",
            &[
                "x509", "-inform", "DER", "-in", "v.der", "-noout", "-dates", "-dateopt",
                "iso_8601",
            ],
        );
        let der = std::fs::read(dir.join("v.der")).unwrap();
        let epoch = |key: &str| -> u64 {
            let line = dates.lines().find_map(|l| l.strip_prefix(key)).unwrap();
            run("date", &["-u", "-d", line, "+%s"])
                .trim()
                .parse()
                .unwrap()
        };
        let (not_before, not_after) = validity(&der).unwrap();
        assert_eq!(
            (not_before, not_after),
            (epoch("notBefore="), epoch("notAfter="))
        );
        assert_eq!(not_after - not_before, 400 * 86_400);
        assert_eq!(validity(&der[..der.len() / 2]), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
