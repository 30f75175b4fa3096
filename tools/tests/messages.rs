//! The library's messages read as one line with single spaces: no string literal of a crate's
//! library code (outside its test modules, inline or in a file of their own) keeps a line break
//! or a run of spaces between words. Both come from a message split over source lines without a
//! line continuation (`\` at the end of the line, which skips the next line's indentation), or
//! from a continuation lost when lines were joined: the FPM deletion warning said "its 3 rows
//! are              lost". The CLI is left out: its tables are laid out in columns on purpose.

use nixl_telemetry_tools::files_with_extension;
use nixl_telemetry_tools::modules::{crate_sources, test_module_files};
use nixl_telemetry_tools::rust_source::{string_literals, StringLiteral};

/// Crates whose text is not library messages: the CLI's column layouts, and the tests' helpers.
const LAID_OUT: [&str; 3] = ["cli/src", "test-support/src", "tools/src"];

const LINE_BREAK: &str = "a line break (a line split without a `\\` continuation)";
const RUN_OF_SPACES: &str = "a run of spaces";

/// What is wrong with a literal's text, if anything (spaces at its ends are left alone).
fn defect(literal: &StringLiteral) -> Option<&'static str> {
    let text = literal.text.trim_matches(' ');
    if text.contains('\n') {
        Some(LINE_BREAK)
    } else if text.contains("  ") {
        Some(RUN_OF_SPACES)
    } else {
        None
    }
}

#[test]
fn no_message_of_the_library_has_a_line_break_or_a_run_of_spaces() {
    let root = nixl_telemetry_tools::root();
    let mut found = Vec::new();
    let mut literals = 0;
    for src in crate_sources(root) {
        let crate_dir = src.strip_prefix(root).unwrap();
        if LAID_OUT.iter().any(|d| crate_dir.ends_with(d)) {
            continue;
        }
        let tests = test_module_files(&src);
        for path in files_with_extension(&src, "rs") {
            if tests.contains(path.strip_prefix(&src).unwrap()) {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            for literal in string_literals(&source) {
                literals += 1;
                if let Some(what) = defect(&literal) {
                    let shown = path.strip_prefix(root).unwrap().display();
                    found.push(format!(
                        "{shown}:{}: {what}: {:?}",
                        literal.line, literal.text
                    ));
                }
            }
        }
    }
    assert!(literals > 1000, "only {literals} literals were read");
    assert!(
        found.is_empty(),
        "fix these literals:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_reads_literals_as_the_compiler_does() {
    let source = concat!(
        "fn f() {\n",
        "    log::warn!(\"one {} \\\n",
        "                two\", x);\n",
        "    let s = \"a line\n",
        "    kept\";\n",
        "    let r = r\"raw  text\";\n",
        "    // \"in a comment  here\"\n",
        "    let t = \"three  spaces\";\n",
        "}\n",
        "#[cfg(test)]\n",
        "mod tests {\n",
        "    const T: &str = \"tests  may\";\n",
        "}\n",
    );
    let literals = string_literals(source);
    let shown: Vec<(usize, &str, Option<&str>)> = literals
        .iter()
        .map(|l| (l.line, l.text.as_str(), defect(l)))
        .collect();
    assert_eq!(
        shown,
        [
            (2, "one {} two", None),
            (4, "a line\n    kept", Some(LINE_BREAK)),
            (8, "three  spaces", Some(RUN_OF_SPACES)),
        ]
    );
    // The warning that had the defect, as it was written.
    let old = "log::warn!(\"{}: segment {} was deleted; its {rows} rows are              lost\");";
    assert_eq!(defect(&string_literals(old)[0]), Some(RUN_OF_SPACES));
}

#[test]
fn tests_in_a_file_of_their_own_are_left_out_and_their_parent_is_not() {
    let src = nixl_telemetry_tools::root().join("series/src");
    let tests = test_module_files(&src);
    let http = std::path::Path::new("endpoint/http");
    assert!(tests.contains(&http.join("tests.rs")), "{tests:?}");
    assert!(!tests.contains(&http.join("mod.rs")), "{tests:?}");
}
