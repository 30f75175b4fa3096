//! Build script: give the shared library a versioned SONAME, `libnixl_telemetry.so.0` (the
//! major version of the C ABI), so that C programs linked against `libnixl_telemetry.so` record
//! `libnixl_telemetry.so.0`, not the absolute build path nor the unversioned development name.
//! `scripts/install.sh` installs `libnixl_telemetry.so.<version>` with the usual symbolic links
//! `libnixl_telemetry.so.0` and `libnixl_telemetry.so`.
//!
//! `rustc-cdylib-link-arg`: the shared library only (not the static library, the rlib the tests
//! link, nor this package's test executables). No library depends on this crate (only tests
//! do), so no other library (a plug-in, the NIXL manager adapter, the Python extension) gets
//! the SONAME: a library carrying
//! `libnixl_telemetry.so.0` would be taken for this one by a later
//! `dlopen("libnixl_telemetry.so.0")` in the same process. `tests/install.rs` checks that only
//! the library has it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnixl_telemetry.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
