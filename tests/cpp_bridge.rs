//! The C++ bridge for NIXL's own C++ plug-ins (plug-in API version 2), found beside the
//! library (cargo puts it in `target/<profile>/deps/`, the directory of this statically linked
//! test binary), checks NIXL's plug-in object before anything else. The bridge driving a
//! working version-2 plug-in, and the error when the bridge is missing, are tested in
//! `c_tests/test_plugins.c`.
//!
//! One test in its own binary: plug-in directories added at run time are process-wide, and the
//! bridge, once opened, stays open.
//!
//! Needs `cargo build --workspace` first (cargo test does not build cdylibs) and a C compiler.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use nixl_telemetry_core::{plugin, Collector, Status};
use nixl_telemetry_test_support::plugin_config as config;

/// Compiles `c_tests/plugins/nixl_v2_plugin.c` (a version-2 object without a creator).
fn build_v2_plugin(dir: &Path) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("c_tests/plugins/nixl_v2_plugin.c");
    let out = dir.join("libtelemetry_exporter_nixlv2.so");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .expect("a C compiler (cc) is needed");
    assert!(status.success(), "cc failed on {}", source.display());
}

#[test]
fn the_bridge_refuses_a_plugin_object_without_a_creator() {
    std::env::remove_var("NIXL_PLUGIN_DIR");
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    build_v2_plugin(tmp.path());
    plugin::add_plugin_dir(tmp.path()).unwrap();
    let e = Collector::new("a", config("nixlv2")).err().unwrap();
    assert_eq!(e.status, Status::Mismatch, "{}", e.message);
    assert!(
        e.message.contains("plug-in API version 2") && e.message.contains("no exporter creator"),
        "{}",
        e.message
    );
}
