//! Compiles the bridge's C++ half (src/bridge.cpp) with the system's C++ compiler; the `cc`
//! crate also links libstdc++.
fn main() {
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("src/bridge.cpp")
        .include("include")
        .include("../include")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("nixl_telemetry_cpp_bridge_impl");
    for path in [
        "src/bridge.cpp",
        "include/nixl_cpp_plugin_v2.hpp",
        "include/nixl_telemetry_cpp_bridge.h",
        "../include/nixl_telemetry.h",
        "../include/nixl_telemetry.hpp",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}
