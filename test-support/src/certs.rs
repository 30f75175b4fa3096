//! Certificates for the tests of https pushes, made with `openssl`
//! ([`crate::prometheus::openssl`]): a CA, and a server certificate for 127.0.0.1 that it
//! signs, as an operator would make them for a receiver.

use std::path::{Path, PathBuf};

use crate::prometheus::openssl;

/// A CA in `dir`: `name`.crt (`CA:TRUE`, for signing certificates) and `name`.key; the
/// certificate's path.
pub fn make_ca(dir: &Path, name: &str) -> PathBuf {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    dir.join(format!("{name}.crt"))
}

/// A server certificate for 127.0.0.1 (`subjectAltName=IP:127.0.0.1`, `CA:FALSE`, for
/// `serverAuth`) signed by the CA `ca` of [`make_ca`] in `dir`: `name`.crt and `name`.key,
/// their paths.
pub fn server_certificate(dir: &Path, ca: &str, name: &str) -> (PathBuf, PathBuf) {
    let (crt, key, csr, ext) = (
        format!("{name}.crt"),
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.ext"),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            &key,
            "-out",
            &csr,
        ],
    );
    std::fs::write(
        dir.join(&ext),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            &crt,
            "-extfile",
            &ext,
        ],
    );
    (dir.join(crt), dir.join(key))
}
