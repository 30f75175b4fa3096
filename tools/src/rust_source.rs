//! Rust sources read as text, as the checks need them: without comments and literals (so that
//! nothing inside them looks like code), without `#[cfg(test)]` modules, their string
//! literals, and the paths they name (`use` trees, `crate::`/`super::`/`self::` paths). A small
//! tokenizer, not a parser: enough for this repository's code, whose shapes
//! `tests/module_cycles.rs` pins down.

/// `source` without comments, string and character literals (replaced by spaces, so nothing
/// inside them looks like a path).
pub fn strip_comments_and_strings(source: &str) -> String {
    replace_comments_and_strings(source, |_, _| "\"\"".to_owned())
}

/// A string literal as the source writes it (`"..."`, no raw string), on line `line` (from 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StringLiteral {
    /// The line of its opening quote.
    pub line: usize,
    /// Its text between the quotes, with each line continuation (`\` at the end of a line,
    /// which skips the next line's leading whitespace) applied and other escapes left as
    /// written. A line break in it is one the literal keeps.
    pub text: String,
}

/// The string literals of `source` outside `#[cfg(test)]` modules (raw strings, whose text is
/// verbatim on purpose, left out).
pub fn string_literals(source: &str) -> Vec<StringLiteral> {
    let mut found = Vec::new();
    // Each literal becomes "<its number>", which survives the removal of test modules when it
    // is outside them.
    let code = replace_comments_and_strings(source, |at, literal| {
        found.push((at, literal));
        format!("\"{}\"", found.len() - 1)
    });
    let code = strip_test_modules(&code);
    let mut kept = Vec::new();
    for piece in code.split('"').skip(1).step_by(2) {
        if let Ok(n) = piece.parse::<usize>() {
            kept.push(n);
        }
    }
    kept.into_iter()
        .map(|n| found[n])
        .filter(|(_, literal)| literal.starts_with('"') && literal.len() >= 2)
        .map(|(at, literal)| StringLiteral {
            line: source[..at].matches('\n').count() + 1,
            text: with_continuations_applied(&literal[1..literal.len() - 1]),
        })
        .collect()
}

/// `body` (between the quotes) with each `\` that ends a line removed with the line break and
/// the next line's leading whitespace, as the compiler reads it.
fn with_continuations_applied(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\n') => while chars.next_if(|c| c.is_whitespace()).is_some() {},
            Some(escaped) => {
                out.push('\\');
                out.push(escaped);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// `source` without comments, and each string literal (its quotes included, raw or not) replaced
/// by what `replace` makes of it (given its byte offset and text); character literals become
/// `' '`.
fn replace_comments_and_strings<'s>(
    source: &'s str,
    mut replace: impl FnMut(usize, &'s str) -> String,
) -> String {
    let b = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if b[i] == b'r' && (b[i + 1..].starts_with(b"\"") || b[i + 1..].starts_with(b"#")) {
            // A raw string r"..." or r#"..."#.
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let start = i;
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i = (i + close.len()).min(b.len());
            out.push_str(&replace(start, &source[start..i]));
        } else if b[i] == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            out.push_str(&replace(start, &source[start..i]));
        } else if b[i] == b'\'' {
            // A character literal ('a', '\n', '\u{..}'), or a lifetime ('a) left alone.
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    out.push_str("' '");
                    i = e + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = source[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `code` without the blocks of `#[cfg(test)] mod name { ... }`.
pub fn strip_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_mod = trimmed.starts_with("mod ") || trimmed.starts_with("pub(crate) mod ");
        match (is_mod, trimmed.find('{'), trimmed.find(';')) {
            (true, Some(open), semi) if semi.is_none_or(|s| s > open) => {
                let start = after.len() - trimmed.len() + open;
                let mut depth = 0;
                let mut end = after.len();
                for (k, c) in after[start..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = start + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            _ => {
                out.push_str("#[cfg(test)]");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The names of the modules `code` declares as `#[cfg(test)] mod name;` (in a file of their
/// own).
pub fn test_module_declarations(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in code.match_indices("#[cfg(test)]") {
        let rest = code[at + "#[cfg(test)]".len()..].trim_start();
        let rest = rest
            .strip_prefix("pub(crate) ")
            .or_else(|| rest.strip_prefix("pub "))
            .unwrap_or(rest);
        let Some(rest) = rest.strip_prefix("mod ") else {
            continue;
        };
        let rest = rest.trim_start();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if rest[name.len()..].trim_start().starts_with(';') {
            names.push(name);
        }
    }
    names
}

/// The paths a `use` tree names, each as its segments (`self` inside braces names the prefix;
/// `as` renames are dropped; a glob ends in `*`).
pub fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    fn split_top(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
        for (k, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..k]);
                    start = k + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        parts
    }
    fn walk(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
        let tree = tree.trim().trim_start_matches("::");
        if tree.is_empty() {
            return;
        }
        if let Some(open) = tree.find('{') {
            let head = tree[..open].trim().trim_end_matches("::");
            let mut base = prefix.to_vec();
            base.extend(
                head.split("::")
                    .filter(|s| !s.is_empty())
                    .map(|s| s.trim().to_owned()),
            );
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            for part in split_top(inner) {
                match part.trim() {
                    "" => {}
                    "self" => out.push(base.clone()),
                    p if p.starts_with("self as ") => out.push(base.clone()),
                    p => walk(&base, p, out),
                }
            }
        } else {
            let path = tree.split(" as ").next().unwrap_or(tree);
            let mut full = prefix.to_vec();
            full.extend(path.split("::").map(|s| s.trim().to_owned()));
            out.push(full);
        }
    }
    let mut out = Vec::new();
    walk(&[], tree, &mut out);
    out
}

/// The `use` statements of `code`: (whether re-exported with `pub`, the tree after `use`).
pub fn use_statements(code: &str) -> Vec<(bool, String)> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find("use ").map(|p| p + from) {
        from = at + 4;
        let boundary = at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        if !boundary {
            continue;
        }
        let line_start = code[..at].rfind(['\n', ';', '{', '}']).map_or(0, |p| p + 1);
        let before = code[line_start..at].trim();
        let public = before.starts_with("pub");
        if !(before.is_empty() || public || before.starts_with("#[")) {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            break;
        };
        found.push((public, code[at + 4..at + end].to_owned()));
        from = at + end;
    }
    found
}

/// The `crate::`, `super::` and `self::` paths written in `code` outside `use` statements.
pub fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut paths = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        let head = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|h| starts_word && bytes[i..].starts_with(h.as_bytes()));
        let Some(_) = head else {
            i += 1;
            continue;
        };
        let mut segments = Vec::new();
        let mut j = i;
        loop {
            let len = code[j..]
                .bytes()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
                .count();
            if len == 0 {
                break;
            }
            segments.push(code[j..j + len].to_owned());
            j += len;
            if code[j..].starts_with("::") {
                j += 2;
            } else {
                break;
            }
        }
        paths.push(segments);
        i = j.max(i + 1);
    }
    paths
}
