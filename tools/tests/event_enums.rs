//! The event-type enum is typed by hand in three C++ headers (`nixl_telemetry.hpp`'s fallback,
//! the drop-in `telemetry_event.h`, and the C tests' stand-in for NIXL's header) and as a list
//! of names in the standalone Python reader. Each must list the enumerators of
//! [`EventType::ALL`] (the C constants of `base/src/constants.rs`), with the same names and
//! values, in the same order; a difference fails naming the file and the first enumerator
//! that differs.

use nixl_telemetry_base::event::EventType;

/// `(NAME, value)` for every event type, in numeric order: what each header must declare.
fn expected() -> Vec<(String, u32)> {
    EventType::ALL
        .iter()
        .map(|t| (t.name().to_ascii_uppercase(), *t as u32))
        .collect()
}

/// The enumerators `NAME = value` of the enum whose declaration starts with `opening` (up to its
/// `{`) in `text`, in order; an error names what could not be parsed.
fn cpp_enumerators(text: &str, opening: &str) -> Result<Vec<(String, u32)>, String> {
    let start = text
        .find(opening)
        .ok_or_else(|| format!("no `{opening}` found"))?;
    let body = &text[start + opening.len()..];
    let body = body
        .trim_start()
        .strip_prefix('{')
        .ok_or("no `{` after the enum's name")?;
    let end = body.find("};").ok_or("the enum's body has no `};`")?;
    strip_comments(&body[..end])
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, value) = e
                .split_once('=')
                .ok_or_else(|| format!("enumerator `{e}` has no explicit value"))?;
            let value = value
                .trim()
                .parse()
                .map_err(|_| format!("enumerator `{e}`: the value is not a number"))?;
            Ok((name.trim().to_owned(), value))
        })
        .collect()
}

/// `text` without its `//` and `/* */` comments, trimmed.
fn strip_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |at| &after[at + 2..]);
        } else if rest.starts_with("//") {
            rest = rest.find('\n').map_or("", |at| &rest[at..]);
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out.trim().to_owned()
}

/// The names of the Python tuple `EVENT_NAMES = (...)`, upper-cased, with their index as the value.
fn python_names(text: &str) -> Result<Vec<(String, u32)>, String> {
    let opening = "\nEVENT_NAMES = (";
    let start = text
        .find(opening)
        .ok_or_else(|| format!("no `{}` found", opening.trim()))?;
    let body = &text[start + opening.len()..];
    let end = body.find(')').ok_or("the tuple has no `)`")?;
    body[..end]
        .split(',')
        .map(|e| e.trim())
        .filter(|e| !e.is_empty())
        .enumerate()
        .map(|(i, e)| {
            let name = e
                .strip_prefix('"')
                .and_then(|e| e.strip_suffix('"'))
                .ok_or_else(|| format!("entry {i} `{e}` is not a string"))?;
            Ok((name.to_ascii_uppercase(), i as u32))
        })
        .collect()
}

/// `Err` naming `file` and the first position where `found` and `expected` differ.
fn compare(file: &str, found: &[(String, u32)], expected: &[(String, u32)]) -> Result<(), String> {
    for (i, want) in expected.iter().enumerate() {
        match found.get(i) {
            None => {
                return Err(format!(
                    "{file}: enumerator {i} is missing (expected {} = {})",
                    want.0, want.1
                ))
            }
            Some(got) if got != want => {
                return Err(format!(
                    "{file}: enumerator {i} is {} = {}, expected {} = {} (EventType::ALL)",
                    got.0, got.1, want.0, want.1
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(extra) = found.get(expected.len()) {
        return Err(format!(
            "{file}: enumerator {} is {} = {}, which EventType::ALL does not have",
            expected.len(),
            extra.0,
            extra.1
        ));
    }
    Ok(())
}

/// Reads `file` (relative to the repository) and checks its enumerators.
fn check(file: &str, parse: impl Fn(&str) -> Result<Vec<(String, u32)>, String>) {
    let path = nixl_telemetry_tools::root().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{file}: cannot read {}: {e}", path.display()));
    let found = parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    if let Err(e) = compare(file, &found, &expected()) {
        panic!("{e}");
    }
}

const CPP_ENUM: &str = "enum class nixl_telemetry_event_type_t : uint32_t";

#[test]
fn the_cpp_header_fallback_enum_is_event_type() {
    check("include/nixl_telemetry.hpp", |t| {
        cpp_enumerators(t, CPP_ENUM)
    });
}

#[test]
fn the_drop_in_header_enum_is_event_type() {
    check("include/nixl_dropin/telemetry_event.h", |t| {
        cpp_enumerators(t, CPP_ENUM)
    });
}

#[test]
fn the_c_tests_nixl_stand_in_enum_is_event_type() {
    check("c_tests/nixl_standin/telemetry_event.h", |t| {
        cpp_enumerators(t, CPP_ENUM)
    });
}

#[test]
fn the_standalone_python_readers_names_are_event_type() {
    check("examples/python/telemetry_reader.py", python_names);
}

// The parsers and the comparison, on small inputs, so a check above cannot pass by parsing
// nothing or by not looking.

#[test]
fn the_parser_reads_names_values_and_skips_comments() {
    let text = "x\nenum class E : uint32_t {\n    A = 0, // first\n    /* the, second */ B = 1,\n};\nenum class F { C = 9 };";
    assert_eq!(
        cpp_enumerators(text, "enum class E : uint32_t").unwrap(),
        [("A".to_owned(), 0), ("B".to_owned(), 1)]
    );
    assert!(cpp_enumerators("enum class E { A };", "enum class E")
        .unwrap_err()
        .contains("no explicit value"));
    assert!(cpp_enumerators("", "enum class E")
        .unwrap_err()
        .contains("no `enum class E`"));
}

#[test]
fn the_comparison_names_the_file_and_the_first_difference() {
    let want = expected();
    assert_eq!(want.len(), 22);
    assert_eq!(want[0], ("AGENT_TX_BYTES".to_owned(), 0));
    assert!(compare("f.h", &want, &want).is_ok());

    let mut value = want.clone();
    value[6].1 = 7;
    assert_eq!(
        compare("f.h", &value, &want).unwrap_err(),
        "f.h: enumerator 6 is AGENT_XFER_TIME = 7, expected AGENT_XFER_TIME = 6 (EventType::ALL)"
    );
    let mut swapped = want.clone();
    swapped.swap(3, 4);
    assert!(compare("f.h", &swapped, &want)
        .unwrap_err()
        .starts_with("f.h: enumerator 3 is AGENT_MEMORY_REGISTERED = 4"));
    // A header of NIXL's merged enum, which ends before the stalled transfer.
    assert!(compare("f.h", &want[..21], &want)
        .unwrap_err()
        .contains("enumerator 21 is missing (expected AGENT_ERR_XFER_STALLED = 21)"));
    let mut extra = want.clone();
    extra.push(("AGENT_NEW".to_owned(), 22));
    assert!(compare("f.h", &extra, &want)
        .unwrap_err()
        .contains("AGENT_NEW = 22, which EventType::ALL does not have"));
}
