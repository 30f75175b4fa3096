//! Each setting is declared once, in `nixl_telemetry_base::settings` (name, kind, default, readers,
//! doc line), and everything else is built from or checked against the declarations:
//!
//! - the settings tables of `docs/configuration-file.md` and `docs/configuration.md` are
//!   generated from them (`NIXL_TELEMETRY_BLESS=1 cargo test -p nixl-telemetry-tools --test
//!   settings_declared` regenerates them);
//! - every `NIXL_TELEMETRY_*` name written in a tracked file of the repository (sources in any
//!   language, build files, docs; not `CHANGELOG.md`, which records history) is a declared
//!   setting, a C constant or macro of this library, a CMake variable of its build files, or
//!   one of the few other names of [`NOT_SETTINGS`];
//! - no Rust code outside the declarations and the tests writes a setting's name as a string
//!   literal, nor its default next to a mention of it (see [`defaults_are_not_written_twice`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use nixl_telemetry_base::settings::{self, Consumer, Setting, SETTINGS};
use nixl_telemetry_tools::root;

/// A generated table of the docs: the page, the name in its markers, the settings it lists.
struct Table {
    page: &'static str,
    name: &'static str,
    rows: fn(&Setting) -> bool,
}

/// The tables generated from the declarations.
const TABLES: &[Table] = &[
    Table {
        page: "docs/configuration-file.md",
        name: "all",
        rows: |_| true,
    },
    Table {
        page: "docs/configuration.md",
        name: "exporters",
        rows: |s| !s.readers.contains(&Consumer::Core),
    },
];

/// The markers around a generated table named `name`.
fn markers(name: &str) -> (String, String) {
    (
        format!(
            "<!-- settings table \"{name}\": generated from nixl_telemetry_base::settings::SETTINGS; \
             regenerate with NIXL_TELEMETRY_BLESS=1 cargo test -p nixl-telemetry-tools --test \
             settings_declared -->\n"
        ),
        format!("<!-- end of settings table \"{name}\" -->\n"),
    )
}

/// `text` with the table between the markers of `name` replaced by `table`, or why not.
fn with_table(text: &str, name: &str, table: &str) -> Result<String, String> {
    let (begin, end) = markers(name);
    let start = text
        .find(&begin)
        .ok_or_else(|| format!("no line {begin:?}"))?
        + begin.len();
    let stop = text[start..]
        .find(&end)
        .ok_or_else(|| format!("no line {end:?} after the table's start"))?
        + start;
    Ok(format!("{}{table}{}", &text[..start], &text[stop..]))
}

#[test]
fn the_docs_tables_are_generated_from_the_declarations() {
    let bless = std::env::var_os("NIXL_TELEMETRY_BLESS").is_some();
    let mut stale = Vec::new();
    for t in TABLES {
        let path = root().join(t.page);
        let text = std::fs::read_to_string(&path).unwrap();
        let table = settings::markdown_table(SETTINGS.iter().filter(|s| (t.rows)(s)));
        let generated = with_table(&text, t.name, &table)
            .unwrap_or_else(|e| panic!("{}: table {:?}: {e}", t.page, t.name));
        if generated != text {
            if bless {
                std::fs::write(&path, generated).unwrap();
            } else {
                stale.push(t.page);
            }
        }
    }
    assert!(
        stale.is_empty(),
        "settings tables out of date in {stale:?}: regenerate them with NIXL_TELEMETRY_BLESS=1 \
         cargo test -p nixl-telemetry-tools --test settings_declared"
    );
}

#[test]
fn a_generated_table_is_found_between_its_markers() {
    let (begin, end) = markers("t");
    let page = format!("intro\n{begin}| old |\n{end}after\n");
    assert_eq!(
        with_table(&page, "t", "| new |\n").unwrap(),
        format!("intro\n{begin}| new |\n{end}after\n")
    );
    assert!(with_table(&page, "other", "").is_err());
    assert!(with_table(&format!("{begin}| old |\n"), "t", "").is_err());
}

/// Names written `NIXL_TELEMETRY_*` that are not settings and are not derived from the sources
/// (the C constants of `base/src/constants.rs` and `base/src/plugin/abi.rs`, the `#define`s of
/// the C/C++ headers and the CMake variables are).
const NOT_SETTINGS: &[&str] = &[
    // Test hooks of this repository's tests and scripts (NIXL_TELEMETRY_FIXTURES is a CMake
    // variable too, so derived).
    "NIXL_TELEMETRY_BLESS",
    "NIXL_TELEMETRY_REQUIRE_TMUX",
    "NIXL_TELEMETRY_REQUIRE_PYDATA",
    // Skips the tests of the Go-built receivers (test-support/src/receivers/mod.rs).
    "NIXL_TELEMETRY_SKIP_GO_RECEIVERS",
    // Not a variable: the symbol that marks a build with the test hooks (src/lib.rs), which
    // c-api/tests/install.rs looks for in an installed library.
    "NIXL_TELEMETRY_TEST_UTIL",
    // Misspelt names in the tests of the configuration file's unknown keys (warned about with
    // the closest setting: base/src/settings/file.rs, tests/config_file.rs, cli/tests/config.rs).
    "NIXL_TELEMETRY_LABEL",
    "NIXL_TELEMETRY_LABEL_FROM",
    "NIXL_TELEMETRY_PROMETHEUS_PROT",
    "NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL",
    "NIXL_TELEMETRY_XYZZY",
    // Made-up names in unit tests (of names that are not settings).
    "NIXL_TELEMETRY_A",
    "NIXL_TELEMETRY_X",
    "NIXL_TELEMETRY_ENV_RS_UNIT_TEST",
    // The C test plug-ins' output directory (read with getenv by the test plug-ins).
    "NIXL_TELEMETRY_CSV_DIR",
    // The example plug-in's output directory (read from the environment, as a third-party
    // plug-in would).
    "NIXL_TELEMETRY_EXAMPLE_RUST_DIR",
];

/// Every `NIXL_TELEMETRY_[A-Z0-9_]+` token of `text`, with the 0-based line it is on and
/// whether a `"` opens a string literal right before it.
fn tokens(text: &str) -> Vec<(String, usize, bool)> {
    const PREFIX: &str = "NIXL_TELEMETRY_";
    let is_name_char = |c: u8| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_';
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for (at, _) in text.match_indices(PREFIX) {
        if at > 0 && (is_name_char(bytes[at - 1]) || bytes[at - 1].is_ascii_lowercase()) {
            continue;
        }
        let len = text[at..].bytes().take_while(|&c| is_name_char(c)).count();
        let line = text[..at].matches('\n').count();
        out.push((
            text[at..at + len].to_owned(),
            line,
            at > 0 && bytes[at - 1] == b'"',
        ));
    }
    out
}

/// The repository's tracked files (relative paths), without `CHANGELOG.md`.
fn tracked_files() -> Vec<PathBuf> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root())
        .args(["ls-files", "-z"])
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .split('\0')
        .filter(|p| !p.is_empty() && *p != "CHANGELOG.md")
        .map(PathBuf::from)
        .collect()
}

/// The names that are not settings but are derived from the sources: the Rust constants named
/// `NIXL_TELEMETRY_*` of the C ABI, the `#define`s of the C/C++ headers, the CMake variables
/// set in the build files.
fn derived_names(files: &[(PathBuf, String)]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut after = |text: &str, lead: &str| {
        for line in text.lines() {
            if let Some(rest) = line.trim_start().strip_prefix(lead) {
                if let Some((name, _, _)) = tokens(rest).first().filter(|(_, l, _)| *l == 0) {
                    if rest.starts_with(name.as_str()) {
                        names.insert(name.clone());
                    }
                }
            }
        }
    };
    for (path, text) in files {
        let p = path.to_string_lossy();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if p == "base/src/constants.rs" || p == "base/src/plugin/abi.rs" {
            after(text, "pub const ");
        } else if matches!(ext, "h" | "hpp") {
            after(text, "#define ");
        } else if ext == "cmake" || p.ends_with("CMakeLists.txt") || p.ends_with(".cmake.in") {
            after(text, "set(");
            after(text, "option(");
        }
    }
    names
}

/// Every tracked file that is text, with its content.
fn tracked_texts() -> Vec<(PathBuf, String)> {
    tracked_files()
        .into_iter()
        .filter_map(|p| Some((p.clone(), std::fs::read_to_string(root().join(&p)).ok()?)))
        .collect()
}

/// Whether `name` is known: a setting, a derived name, one of [`NOT_SETTINGS`], or (ending in
/// `_`, as in `NIXL_TELEMETRY_ERR_*`) the prefix of one of those.
fn known(name: &str, derived: &BTreeSet<String>) -> bool {
    let names = || {
        SETTINGS
            .iter()
            .map(|s| s.name)
            .chain(derived.iter().map(String::as_str))
            .chain(NOT_SETTINGS.iter().copied())
    };
    if name.ends_with('_') {
        names().any(|n| n.starts_with(name))
    } else {
        names().any(|n| n == name)
    }
}

#[test]
fn every_name_written_in_the_repository_is_declared() {
    let files = tracked_texts();
    let derived = derived_names(&files);
    assert!(
        derived.contains("NIXL_TELEMETRY_ERR_INVALID_PARAM"),
        "{derived:?}"
    );
    assert!(derived.contains("NIXL_TELEMETRY_H"), "{derived:?}");
    let mut seen = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    for (path, text) in &files {
        for (name, line, _) in tokens(text) {
            if !known(&name, &derived) {
                unknown.insert(format!("{}:{}: {name}", path.display(), line + 1));
            }
            seen.insert(name);
        }
    }
    assert!(
        unknown.is_empty(),
        "NIXL_TELEMETRY_* names that are not declared: declare the setting in \
         base/src/settings/table.rs, or add the name to NOT_SETTINGS in {} if it is not a \
         setting:\n{}",
        file!(),
        unknown.into_iter().collect::<Vec<_>>().join("\n")
    );
    let stale: Vec<&str> = NOT_SETTINGS
        .iter()
        .copied()
        .filter(|n| !seen.contains(*n) || settings::find(n).is_some() || derived.contains(*n))
        .collect();
    assert!(
        stale.is_empty(),
        "NOT_SETTINGS entries no longer needed: {stale:?}"
    );
}

/// Whether a tracked Rust file is test code as a whole (a test, bench or example target, the
/// test-support crate, a fuzz target).
fn is_test_file(path: &Path) -> bool {
    path.components().any(|c| {
        matches!(
            c.as_os_str().to_str(),
            Some("tests" | "benches" | "examples" | "test-support" | "fuzz")
        )
    })
}

/// The non-test part of a Rust source: everything before its first `#[cfg(test)]` line (this
/// repository's unit tests are one module at the end of a file).
fn non_test_part(text: &str) -> &str {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.trim() == "#[cfg(test)]" {
            return &text[..at];
        }
        at += line.len();
    }
    text
}

/// The ways a default may be written in Rust: a number (with or without `_` separators), or a
/// string literal. Boolean defaults are not searched (`true` and `false` are everywhere).
fn default_written(default: &str, line: &str) -> bool {
    if !default.is_empty() && default.bytes().all(|b| b.is_ascii_digit()) {
        let mut numbers =
            line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'));
        return numbers.any(|n| n.replace('_', "") == default);
    }
    !matches!(default, "true" | "false") && line.contains(&format!("\"{default}\""))
}

/// How many lines before and after a mention of a setting [`defaults_beside_names`] looks at.
const WINDOW: usize = 4;

/// The places of a Rust source that write the default of a setting again: a line within
/// [`WINDOW`] lines of one that names the setting (its name as a string literal, or its declaration
/// `settings::CONST`) holding its default as a number or a string literal. A heuristic: it
/// catches a second `const DEFAULT_X = 9090;` beside a name, or `unwrap_or(9090)` next to the
/// setting it stands for, not a default written far from any mention of its setting.
fn defaults_beside_names(text: &str, declarations: &[(&str, &Setting)]) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (constant, s) in declarations {
        let Some(default) = s.default else { continue };
        let named = |l: &str| {
            l.contains(&format!("\"{}\"", s.name))
                || l.match_indices(&format!("settings::{constant}"))
                    .any(|(at, m)| {
                        !l[at + m.len()..]
                            .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                    })
        };
        for (i, l) in lines.iter().enumerate() {
            if !named(l) {
                continue;
            }
            let first = i.saturating_sub(WINDOW);
            let near = lines
                .iter()
                .enumerate()
                .skip(first)
                .take(i + WINDOW + 1 - first);
            for (j, line) in near {
                let code = line.split("//").next().unwrap_or("");
                if default_written(default, code) {
                    found.push(format!("{}: {} = {default}", j + 1, s.name));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Each declaration with the name of its constant (`PROMETHEUS_PORT`), read from the
/// declarations' source.
fn declarations() -> Vec<(String, &'static Setting)> {
    let source = std::fs::read_to_string(root().join("base/src/settings/table.rs")).unwrap();
    let mut out = Vec::new();
    let mut rest = source.as_str();
    while let Some(at) = rest.find("declare!(") {
        rest = &rest[at + "declare!(".len()..];
        let mut parts = rest.splitn(3, ',');
        let constant = parts.next().unwrap().trim().to_owned();
        let name = parts.next().unwrap().trim().trim_matches('"');
        if let Some(s) = settings::find(name) {
            out.push((constant, s));
        }
    }
    out
}

/// Each string literal of `code` that begins with a declared setting's name (`"NIXL_LOG_LEVEL"`,
/// `"NIXL_TELEMETRY_DIR is ..."`): its 1-based line, the declaration's constant and the name.
fn quoted_names<'d>(
    code: &str,
    declared: &[(&'d str, &Setting)],
) -> Vec<(usize, &'d str, &'static str)> {
    let mut found = Vec::new();
    for (constant, s) in declared {
        for (at, m) in code.match_indices(&format!("\"{}", s.name)) {
            let next = code[at + m.len()..].chars().next();
            if !next.is_some_and(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') {
                found.push((code[..at].matches('\n').count() + 1, *constant, s.name));
            }
        }
    }
    found.sort();
    found
}

/// Defaults are not written twice, and consumers take a setting's name from its declaration:
/// in the non-test code of the tracked Rust sources outside `base/src/settings/` (see
/// [`is_test_file`], [`non_test_part`]), (1) no string literal begins with a declared setting's
/// name, and (2) no line writes a setting's default within [`WINDOW`] lines of a mention of the
/// setting (the heuristic of [`defaults_beside_names`]). Tests are left out: they set variables
/// to chosen values (`NIXL_LOG_LEVEL=WARN`) and assert the documented defaults on purpose, so
/// that a change of a declaration is noticed.
#[test]
fn defaults_are_not_written_twice() {
    let declared = declarations();
    assert_eq!(declared.len(), SETTINGS.len(), "{declared:?}");
    let declared: Vec<(&str, &Setting)> = declared.iter().map(|(c, s)| (c.as_str(), *s)).collect();
    let mut problems = Vec::new();
    for (path, text) in tracked_texts() {
        if path.extension().and_then(|e| e.to_str()) != Some("rs")
            || path.starts_with("base/src/settings")
            || is_test_file(&path)
        {
            continue;
        }
        let code = non_test_part(&text);
        for (line, constant, name) in quoted_names(code, &declared) {
            problems.push(format!(
                "{}:{line}: \"{name}\" in a string literal: use settings::{constant}.name",
                path.display()
            ));
        }
        for place in defaults_beside_names(code, &declared) {
            problems.push(format!(
                "{}:{place}: the default is written again beside the setting: take it from its \
                 declaration",
                path.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_heuristics_catch_what_they_are_for() {
    let port = settings::find("NIXL_TELEMETRY_PROMETHEUS_PORT").unwrap();
    let rank = settings::find("NIXL_TELEMETRY_RANK_ENV").unwrap();
    let decl = [("PROMETHEUS_PORT", port), ("RANK_ENV", rank)];
    let planted = "pub const ENV_PORT: &str = \"NIXL_TELEMETRY_PROMETHEUS_PORT\";\n\
                   /// Local.\n\
                   pub const ENV_LOCAL: &str = \"NIXL_TELEMETRY_PROMETHEUS_LOCAL\";\n\
                   /// The default port.\n\
                   pub const DEFAULT_PORT: u16 = 9_090;\n";
    assert_eq!(defaults_beside_names(planted, &decl).len(), 1);
    let unwrap =
        "let p = x.unwrap_or(9090);\nstd::env::set_var(settings::PROMETHEUS_PORT.name, p);";
    assert_eq!(defaults_beside_names(unwrap, &decl).len(), 1);
    let rank_env = "settings(\"NIXL_TELEMETRY_RANK_ENV\")\n    .unwrap_or(\"LOCAL_RANK\")";
    assert_eq!(defaults_beside_names(rank_env, &decl).len(), 1);
    // Taken from the declaration, or far from any mention: not found.
    let fine =
        "let p = x.unwrap_or(settings::PROMETHEUS_PORT.default_u16());\n\n\n\n\nlet y = 9090;";
    assert!(defaults_beside_names(fine, &decl).is_empty());
    // A comment does not count; another number does not either.
    let comment = "settings::PROMETHEUS_PORT // 9090\nlet z = 90900;";
    assert!(defaults_beside_names(comment, &decl).is_empty());
    // settings::PROMETHEUS_PORT is not settings::PROMETHEUS_PORTS.
    assert!(defaults_beside_names("settings::PROMETHEUS_PORTS, 9090", &decl).is_empty());

    // Made-up names are built with concat!, so that this file does not write them.
    let literal = concat!(
        "let a = \"NIXL_LOG_LEVEL\";\nlet b = \"NIXL_TELEMETRY_",
        "RANK_ENVX\";\nlet c = format!(\"NIXL_TELEMETRY_RANK_ENV={v}\");"
    );
    assert_eq!(
        quoted_names(
            literal,
            &[("LOG_LEVEL", &settings::LOG_LEVEL), ("RANK_ENV", rank)]
        ),
        [
            (1, "LOG_LEVEL", "NIXL_LOG_LEVEL"),
            (3, "RANK_ENV", "NIXL_TELEMETRY_RANK_ENV")
        ]
    );
    let found = tokens(
        "x \"NIXL_TELEMETRY_DIR\" NIXL_TELEMETRY_ERR_* MY_NIXL_TELEMETRY_Y\nNIXL_TELEMETRY_",
    );
    let names: Vec<(&str, usize, bool)> =
        found.iter().map(|(n, l, q)| (n.as_str(), *l, *q)).collect();
    assert_eq!(
        names,
        [
            ("NIXL_TELEMETRY_DIR", 0, true),
            ("NIXL_TELEMETRY_ERR_", 0, false),
            ("NIXL_TELEMETRY_", 1, false)
        ]
    );
    let derived = BTreeSet::from(["NIXL_TELEMETRY_ERR_BACKEND".to_owned()]);
    assert!(known("NIXL_TELEMETRY_ERR_", &derived));
    assert!(known("NIXL_TELEMETRY_REMOTE_WRITE_", &derived));
    assert!(!known(concat!("NIXL_TELEMETRY_", "ERR_BACKENDS"), &derived));
    assert!(!known(concat!("NIXL_TELEMETRY_", "NOPE_"), &derived));
    assert_eq!(non_test_part("a\n#[cfg(test)]\nb\n"), "a\n");
}
