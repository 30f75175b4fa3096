//! `scripts/install.sh`: a real `--help`, the command in `bin/`, the versioned shared library
//! with its links, stripped files, the example plug-in kept out of `lib/plugins`, the C++
//! bridge in it and the NIXL adapters in `lib/plugins/nixl`.

use std::path::Path;
use std::process::Command;

fn install_sh() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install.sh")
}

#[test]
fn help_describes_the_options_and_the_layout() {
    let out = Command::new("bash")
        .arg(install_sh())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("usage: scripts/install.sh"), "{text}");
    for needle in [
        "bin/nixl-telemetry",
        "--no-strip",
        "libnixl_telemetry.so.0",
        "--from DIR",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    assert!(
        !text.contains("set -euo"),
        "prints help, not the script: {text}"
    );
    let out = Command::new("bash")
        .arg(install_sh())
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn installs_the_command_a_versioned_library_and_only_real_plugins() {
    let profile = nixl_telemetry_test_support::built_plugins(&["prometheus", "example_rust"]);
    assert!(
        profile.join("nixl-telemetry").is_file(),
        "run `cargo build --workspace` first"
    );
    let prefix = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(install_sh())
        .arg("--from")
        .arg(&profile)
        .arg("--prefix")
        .arg(prefix.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = prefix.path().join("lib");
    let version = env!("CARGO_PKG_VERSION");
    let real = lib.join(format!("libnixl_telemetry.so.{version}"));
    assert!(real.is_file());
    assert_eq!(
        std::fs::read_link(lib.join("libnixl_telemetry.so.0")).unwrap(),
        Path::new(&format!("libnixl_telemetry.so.{version}"))
    );
    assert_eq!(
        std::fs::read_link(lib.join("libnixl_telemetry.so")).unwrap(),
        Path::new("libnixl_telemetry.so.0")
    );
    // The SONAME (a string of the dynamic section) is the versioned name.
    let bytes = std::fs::read(&real).unwrap();
    assert!(bytes.windows(23).any(|w| w == b"libnixl_telemetry.so.0\0"));
    // Stripped: smaller than what cargo built, the C functions still exported.
    let built = std::fs::metadata(profile.join("libnixl_telemetry.so"))
        .unwrap()
        .len();
    assert!((bytes.len() as u64) < built, "{} >= {built}", bytes.len());
    assert!(bytes.windows(21).any(|w| w == b"nixl_telemetry_create"));
    let plugins: Vec<String> = std::fs::read_dir(lib.join("plugins"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        plugins.contains(&"libtelemetry_exporter_prometheus.so".to_owned()),
        "{plugins:?}"
    );
    assert!(
        !plugins.iter().any(|p| p.contains("example")),
        "{plugins:?}"
    );
    // Each exporter again for NIXL's plug-in manager (the adapter under the plug-in's name).
    let adapted: Vec<String> = std::fs::read_dir(lib.join("plugins/nixl"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut exporters: Vec<&String> = plugins
        .iter()
        .filter(|p| p.starts_with("libtelemetry_exporter_"))
        .collect();
    let mut adapted_sorted: Vec<&String> = adapted.iter().collect();
    exporters.sort();
    adapted_sorted.sort();
    assert_eq!(exporters, adapted_sorted);
    // The bridge to NIXL's C++ plug-ins and the adapters, with their entry points kept by the
    // strip; only the library itself carries the SONAME libnixl_telemetry.so.0 (a plug-in
    // carrying it would be taken for the library by a later dlopen of that name).
    let bridge = lib.join("plugins/libnixl_telemetry_cpp_bridge.so");
    assert!(dynamic_symbols(&bridge).contains(&"nixl_telemetry_cpp_bridge_inspect".to_owned()));
    for adapter in &adapted {
        let path = lib.join("plugins/nixl").join(adapter);
        assert!(dynamic_symbols(&path).contains(&"nixl_telemetry_plugin_init".to_owned()));
        assert_eq!(soname(&path), None, "{}", path.display());
    }
    for plugin in &exporters {
        let path = lib.join("plugins").join(plugin);
        assert_eq!(soname(&path), None, "{}", path.display());
    }
    assert_eq!(
        soname(&lib.join("libnixl_telemetry.so")).as_deref(),
        Some("libnixl_telemetry.so.0")
    );
    let out = Command::new(prefix.path().join("bin/nixl-telemetry"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .starts_with("nixl-telemetry "));
}

/// `readelf -d`'s SONAME of `path`, if it has one.
fn soname(path: &Path) -> Option<String> {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "readelf -d {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("(SONAME)"))
        .and_then(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_owned()))
}

/// The names `readelf --dyn-syms` lists as defined in `path`.
fn dynamic_symbols(path: &Path) -> Vec<String> {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "--wide"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "readelf --dyn-syms {}",
        path.display()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains(" UND "))
        .filter_map(|l| l.split_whitespace().nth(7).map(str::to_owned))
        .collect()
}
