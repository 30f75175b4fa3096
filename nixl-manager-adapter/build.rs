//! Compiles the adapter's C++ half (src/adapter.cpp) with the system's C++ compiler (the `cc`
//! crate also links libstdc++), and keeps the C++ half's symbols (and those of the static
//! libraries it links) out of the dynamic symbol table: the adapter exports only NIXL's two
//! entry points (the Rust half hands the C++ half its services by pointer).
fn main() {
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("src/adapter.cpp")
        .include("../cpp-plugin-host/include")
        .include("../include")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("nixl_telemetry_nixl_adapter_impl");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
    for path in [
        "build.rs",
        "src/adapter.cpp",
        "../cpp-plugin-host/include/nixl_cpp_plugin_v2.hpp",
        "../include/nixl_telemetry.h",
        "../include/nixl_telemetry.hpp",
        "../include/nixl_telemetry_plugin.h",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}
