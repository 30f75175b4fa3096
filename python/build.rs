//! The extension module exports only `PyInit__native`: the core library's C ABI, linked in from
//! the nixl-telemetry rlib, stays out of its dynamic symbol table.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
    println!("cargo:rerun-if-changed=build.rs");
}
