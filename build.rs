//! Build script: give the shared library a versioned SONAME, `libnixl_telemetry.so.0` (the
//! major version of the C ABI), so that C programs linked against `libnixl_telemetry.so` record
//! `libnixl_telemetry.so.0`, not the absolute build path nor the unversioned development name.
//! `scripts/install.sh` installs `libnixl_telemetry.so.<version>` with the usual symbolic links
//! `libnixl_telemetry.so.0` and `libnixl_telemetry.so`.
//!
//! `rustc-link-arg`, not `rustc-cdylib-link-arg`: Cargo passes the latter to every cdylib that
//! depends on this crate too (the plug-ins, the NIXL adapter, the Python extension), and a
//! library carrying `libnixl_telemetry.so.0` would be taken for this one by a later
//! `dlopen("libnixl_telemetry.so.0")` in the same process. The former applies to this package's
//! own targets only (on its test and bench executables a SONAME does nothing). `tests/install.rs`
//! checks that only the library has it.
fn main() {
    println!("cargo:rustc-link-arg=-Wl,-soname,libnixl_telemetry.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
