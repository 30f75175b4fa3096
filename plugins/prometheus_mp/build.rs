//! Keep the core library's C ABI (linked in from the nixl-telemetry rlib) out of this
//! plug-in's dynamic symbol table: the plug-in exports only its entry point.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
    println!("cargo:rerun-if-changed=build.rs");
}
