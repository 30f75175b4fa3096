//! Build script: give the shared library a SONAME so that C programs linked against
//! `libnixl_telemetry.so` record the plain file name, not the absolute build path.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnixl_telemetry.so");
    println!("cargo:rerun-if-changed=build.rs");
}
