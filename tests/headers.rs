//! The checked-in C headers must be exactly what cbindgen generates from the sources.
//! Regenerate them with `NIXL_TELEMETRY_BLESS=1 cargo test --test headers`.

use std::path::Path;

fn check(config_file: &str, header: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join(config_file)).expect("cbindgen config");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(root)
        .with_config(config)
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
    check("cbindgen.toml", "include/nixl_telemetry.h");
}
