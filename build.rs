//! Build script: give the shared library a versioned SONAME, `libnixl_telemetry.so.0` (the
//! major version of the C ABI), so that C programs linked against `libnixl_telemetry.so` record
//! `libnixl_telemetry.so.0`, not the absolute build path nor the unversioned development name.
//! `scripts/install.sh` installs `libnixl_telemetry.so.<version>` with the usual symbolic links
//! `libnixl_telemetry.so.0` and `libnixl_telemetry.so`.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnixl_telemetry.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
