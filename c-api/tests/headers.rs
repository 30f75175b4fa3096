//! The checked-in C headers must be exactly what cbindgen generates from the sources.
//! Each header is generated from its own source files. Regenerate them with `NIXL_TELEMETRY_BLESS=1 cargo test --test headers`.

use std::path::Path;

/// Generates `header` from the source files `sources` (only those files are parsed, so each
/// header carries exactly its own ABI) with the settings in `config_file`.
fn check(config_file: &str, sources: &[&str], header: &str) {
    // The repository's root: the configurations, sources and headers are named from it.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
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
    let names = exported_names(&text);
    assert!(!names.is_empty(), "{header}: no exported names found");
    for name in names {
        let lower = name.to_ascii_lowercase();
        assert!(
            lower == "nixl_telemetry" || lower.starts_with("nixl_telemetry_"),
            "{header} exports {name}, which lacks the nixl_telemetry_ prefix: rename it, or \
             exclude it in {config_file} if it is not part of the C ABI"
        );
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(
        current == generated,
        "{header} is stale: regenerate it with NIXL_TELEMETRY_BLESS=1 cargo test --test headers"
    );
}

/// Every name a generated header defines: macros, typedefs (of structs, integers and function
/// pointers), struct tags and functions.
fn exported_names(header: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start_matches(['*', '('])
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    for line in header.lines() {
        if line.starts_with([' ', '#', '/', '*']) && !line.starts_with("#define ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("#define ") {
            let name = ident(rest);
            if !name.ends_with("_H") {
                names.push(name);
            }
        } else if let Some(rest) = line.strip_prefix("} ").filter(|r| r.ends_with(';')) {
            // The name of a `typedef struct { ... } name;`.
            names.push(ident(rest));
        } else if let Some(rest) = line.strip_prefix("typedef ") {
            let name = match rest.find("(*") {
                // A function pointer: `typedef ret (*name)(args);`.
                Some(at) => ident(&rest[at + 2..]),
                // `typedef struct tag name;`, `typedef int32_t name;`, `typedef struct {`.
                None => rest
                    .trim_end_matches(';')
                    .split_whitespace()
                    .last()
                    .map(ident)
                    .unwrap_or_default(),
            };
            if !name.is_empty() {
                names.push(name);
            }
            if let Some(tag) = rest.strip_prefix("struct ").map(ident) {
                if !tag.is_empty() {
                    names.push(tag);
                }
            }
        } else if let Some(open) = line.find('(').filter(|_| !line.starts_with("extern \"C\"")) {
            // A function declaration: `ret name(args);` (arguments are on one line).
            let before = line[..open].trim_end();
            let name = before.rsplit([' ', '*']).next().unwrap_or("");
            if !name.is_empty() {
                names.push(ident(name));
            }
        }
    }
    names
}

#[test]
fn the_prefix_check_sees_functions_typedefs_and_macros() {
    let header = "#ifndef X_H\n#define X_H\n#define NIXL_TELEMETRY_A 1\ntypedef int32_t nixl_telemetry_s_t;\n\
                  typedef struct nixl_telemetry_h nixl_telemetry_h;\ntypedef struct {\n  int x;\n} nixl_fpm_payload_t;\n\
                  typedef void (*nixl_telemetry_cb_t)(int level);\nconst char *nixl_fpm_trace_open(const char *a, int b);\n\
                  extern void nixl_telemetry_plugin_init(void);\n";
    assert_eq!(
        exported_names(header),
        [
            "NIXL_TELEMETRY_A",
            "nixl_telemetry_s_t",
            "nixl_telemetry_h",
            "nixl_telemetry_h",
            "nixl_fpm_payload_t",
            "nixl_telemetry_cb_t",
            "nixl_fpm_trace_open",
            "nixl_telemetry_plugin_init"
        ]
    );
}

#[test]
fn core_header_is_current() {
    check(
        "cbindgen.toml",
        &[
            "base/src/constants.rs",
            "c-api/src/telemetry.rs",
            "c-api/src/types.rs",
            "base/src/event.rs",
            "src/collector/mod.rs",
        ],
        "include/nixl_telemetry.h",
    );
}

#[test]
fn plugin_header_is_current() {
    check(
        "cbindgen_plugin.toml",
        &["base/src/plugin/abi.rs"],
        "include/nixl_telemetry_plugin.h",
    );
}

#[test]
fn fpm_trace_header_is_current() {
    check(
        "cbindgen_fpm.toml",
        &[
            "c-api/src/fpm.rs",
            "c-api/src/fpm_types.rs",
            "src/fpm/payload.rs",
            "src/fpm/producer.rs",
        ],
        "include/nixl_telemetry_fpm.h",
    );
}
