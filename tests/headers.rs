//! The checked-in C headers must be exactly what cbindgen generates from the sources.
//! Each header is generated from its own source files. Regenerate them with `NIXL_TELEMETRY_BLESS=1 cargo test --test headers`.

use std::path::Path;

/// Generates `header` from the source files `sources` (only those files are parsed, so each
/// header carries exactly its own ABI) with the settings in `config_file`.
fn check(config_file: &str, sources: &[&str], header: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join(config_file)).expect("cbindgen config");
    let mut generated = Vec::new();
    let mut builder = cbindgen::Builder::new().with_config(config);
    for source in sources {
        builder = builder.with_src(root.join(source));
    }
    builder
        .generate()
        .expect("cbindgen generation")
        .write(&mut generated);
    let path = root.join(header);
    if std::env::var_os("NIXL_TELEMETRY_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let text = String::from_utf8(generated.clone()).unwrap();
    for line in text.lines() {
        let name = line
            .strip_prefix("#define ")
            .or_else(|| {
                line.strip_prefix("typedef struct ")
                    .filter(|l| l.ends_with(';'))
            })
            .map(|l| l.split_whitespace().next().unwrap_or(""));
        if let Some(name) = name {
            assert!(
                name.to_ascii_lowercase().starts_with("nixl_telemetry"),
                "{header} exports {name}, which is not part of the C ABI: exclude it in {config_file}"
            );
        }
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(
        current == generated,
        "{header} is stale: regenerate it with NIXL_TELEMETRY_BLESS=1 cargo test --test headers"
    );
}

#[test]
fn core_header_is_current() {
    check(
        "cbindgen.toml",
        &["src/ffi.rs", "src/event.rs", "src/logging.rs"],
        "include/nixl_telemetry.h",
    );
}

#[test]
fn plugin_header_is_current() {
    check(
        "cbindgen_plugin.toml",
        &["src/plugin/abi.rs"],
        "include/nixl_telemetry_plugin.h",
    );
}

#[test]
fn fpm_trace_header_is_current() {
    check(
        "cbindgen_fpm_trace.toml",
        &["src/trace/ffi.rs"],
        "include/nixl_fpm_trace.h",
    );
}
