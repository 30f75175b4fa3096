//! No module cycle in any crate of the repository: within every module, its child modules form
//! layers (an acyclic graph of "uses"), so each folder reads from the top down.
//!
//! The check reads the sources, not the compiler: a module's file(s) (`a.rs` or `a/mod.rs`)
//! use another module when a `use` statement or a `crate::`/`super::`/`self::` path in its code
//! names it (paths through a `pub use` re-export lead to where the item is defined). Code of
//! `#[cfg(test)] mod ... { }` blocks is left out: tests may reach anywhere. A module naming its
//! own descendants is not an edge (a folder's `mod.rs` declares and re-exports its children),
//! and a child naming its parent is not either (the parent is the folder's front door). For
//! every module, an edge between two of its children is any use from inside one child's
//! subtree into the other's; a cycle among the children of any module fails the test, named
//! with the files that close it.
//!
//! Between crates: the CLI (`cli/`) depends on no crate under `plugins/` (plug-ins are cdylibs
//! loaded at run time; what the CLI shares with one is a library crate of its own, such as
//! `mp-store/`). The check reads the dependency tables of `cli/Cargo.toml`, following
//! `workspace = true` to the workspace's entry for the path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module, as the path of segments from the crate root (`[]` is the root).
type ModPath = Vec<String>;

/// One crate's modules and the uses between them.
struct CrateModules {
    /// Each module's file, relative to the crate's `src/`.
    files: BTreeMap<ModPath, PathBuf>,
    /// `pub use` re-exports per module: exported name -> the full path it names.
    reexports: BTreeMap<ModPath, BTreeMap<String, Vec<String>>>,
    /// The modules each module uses.
    uses: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

/// The module path of `file` (relative to `src/`), and `None` for a file that is not a module
/// of the crate's tree (`bin/`, `main.rs` of a second binary...).
fn module_of(file: &Path) -> Option<ModPath> {
    let mut parts: Vec<String> = file
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    match stem {
        "lib" | "main" if parts.is_empty() => {}
        "mod" => {}
        _ => parts.push(stem.to_owned()),
    }
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    Some(parts)
}

/// `source` without comments, string and character literals (replaced by spaces, so nothing
/// inside them looks like a path).
fn strip_comments_and_strings(source: &str) -> String {
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
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
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
fn strip_test_modules(code: &str) -> String {
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
fn test_module_declarations(code: &str) -> Vec<String> {
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
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
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
fn use_statements(code: &str) -> Vec<(bool, String)> {
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
fn inline_paths(code: &str) -> Vec<Vec<String>> {
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
            .find(|h| starts_word && code[i..].starts_with(h));
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

impl CrateModules {
    /// Reads every module file of the crate whose sources are in `src`.
    fn read(src: &Path) -> CrateModules {
        let mut sources = BTreeMap::new();
        for path in rust_files(src) {
            let rel = path.strip_prefix(src).unwrap().to_owned();
            if let Some(module) = module_of(&rel) {
                let code = std::fs::read_to_string(&path).unwrap();
                let code = strip_test_modules(&strip_comments_and_strings(&code));
                sources.insert(module, (rel, code));
            }
        }
        // Modules declared `#[cfg(test)] mod name;` (tests in a file of their own) are tests.
        let test_only: Vec<ModPath> = sources
            .iter()
            .flat_map(|(module, (_, code))| {
                test_module_declarations(code).into_iter().map(move |name| {
                    let mut child = module.clone();
                    child.push(name);
                    child
                })
            })
            .collect();
        sources.retain(|module, _| !test_only.iter().any(|t| module.starts_with(t)));
        let mut modules = CrateModules {
            files: sources
                .iter()
                .map(|(m, (f, _))| (m.clone(), f.clone()))
                .collect(),
            reexports: BTreeMap::new(),
            uses: BTreeMap::new(),
        };
        let mut written: BTreeMap<ModPath, Vec<Vec<String>>> = BTreeMap::new();
        for (module, (_, code)) in &sources {
            let mut paths = inline_paths(code);
            for (public, tree) in use_statements(code) {
                for path in expand_use_tree(&tree) {
                    if public {
                        if let Some(name) = path.last().filter(|n| *n != "*") {
                            let full = modules.absolute(module, &path);
                            if let Some(full) = full {
                                modules
                                    .reexports
                                    .entry(module.clone())
                                    .or_default()
                                    .insert(name.clone(), full);
                            }
                        }
                    }
                    paths.push(path);
                }
            }
            written.insert(module.clone(), paths);
        }
        for (module, paths) in written {
            let mut targets = BTreeSet::new();
            for path in paths {
                if let Some(full) = modules.absolute(&module, &path) {
                    targets.insert(modules.resolve(&full, 0));
                }
            }
            modules.uses.insert(module, targets);
        }
        modules
    }

    /// `path` as written in `module`, made absolute from the crate root; `None` for a path
    /// into another crate.
    fn absolute(&self, module: &ModPath, path: &[String]) -> Option<Vec<String>> {
        let mut base: Vec<String> = match path.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("self") | Some("super") => module.clone(),
            Some(first) => {
                let mut child = module.clone();
                child.push(first.to_owned());
                if !self.files.contains_key(&child) {
                    return None;
                }
                return Some(child.into_iter().chain(path[1..].iter().cloned()).collect());
            }
            None => return None,
        };
        let mut rest = path;
        loop {
            match rest.first().map(String::as_str) {
                Some("crate") | Some("self") => rest = &rest[1..],
                Some("super") => {
                    base.pop();
                    rest = &rest[1..];
                }
                _ => break,
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module an absolute path leads to: the deepest module it names, followed through
    /// re-exports to where a re-exported name comes from.
    fn resolve(&self, full: &[String], depth: usize) -> ModPath {
        let mut module: ModPath = Vec::new();
        for (k, segment) in full.iter().enumerate() {
            let mut child = module.clone();
            child.push(segment.clone());
            if self.files.contains_key(&child) {
                module = child;
                continue;
            }
            if depth < 8 {
                if let Some(target) = self.reexports.get(&module).and_then(|r| r.get(segment)) {
                    let mut through = target.clone();
                    through.extend(full[k + 1..].iter().cloned());
                    return self.resolve(&through, depth + 1);
                }
            }
            break;
        }
        module
    }

    /// Every cycle among the children of a module, as messages.
    fn cycles(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for parent in self.files.keys() {
            let children: Vec<&ModPath> = self
                .files
                .keys()
                .filter(|m| m.len() == parent.len() + 1 && m.starts_with(parent))
                .collect();
            let child_of = |m: &ModPath| -> Option<ModPath> {
                (m.len() > parent.len() && m.starts_with(parent))
                    .then(|| m[..=parent.len()].to_vec())
            };
            // child -> child -> an example (from file, to module) of the use.
            let mut edges: BTreeMap<ModPath, BTreeMap<ModPath, (PathBuf, ModPath)>> =
                BTreeMap::new();
            for (from, targets) in &self.uses {
                let Some(a) = child_of(from) else { continue };
                for to in targets {
                    let Some(b) = child_of(to) else { continue };
                    if a != b {
                        edges
                            .entry(a.clone())
                            .or_default()
                            .entry(b)
                            .or_insert_with(|| (self.files[from].clone(), to.clone()));
                    }
                }
            }
            if let Some(cycle) = find_cycle(&children, &edges) {
                let steps: Vec<String> = cycle
                    .windows(2)
                    .map(|w| {
                        let (file, to) = &edges[&w[0]][&w[1]];
                        format!("{} uses {}", file.display(), show(to))
                    })
                    .collect();
                problems.push(format!(
                    "a cycle among the modules of {}: {}",
                    show(parent),
                    steps.join(", then ")
                ));
            }
        }
        problems
    }
}

/// A module path as Rust writes it.
fn show(module: &ModPath) -> String {
    std::iter::once("crate".to_owned())
        .chain(module.iter().cloned())
        .collect::<Vec<_>>()
        .join("::")
}

/// One cycle of `edges` among `nodes` (first node repeated at the end), if there is one.
fn find_cycle(
    nodes: &[&ModPath],
    edges: &BTreeMap<ModPath, BTreeMap<ModPath, (PathBuf, ModPath)>>,
) -> Option<Vec<ModPath>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        node: &ModPath,
        edges: &BTreeMap<ModPath, BTreeMap<ModPath, (PathBuf, ModPath)>>,
        marks: &mut BTreeMap<ModPath, Mark>,
        path: &mut Vec<ModPath>,
    ) -> Option<Vec<ModPath>> {
        marks.insert(node.clone(), Mark::Open);
        path.push(node.clone());
        for next in edges.get(node).into_iter().flat_map(|e| e.keys()) {
            match marks.get(next).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let at = path.iter().position(|p| p == next).unwrap();
                    let mut cycle = path[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(next, edges, marks, path) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in nodes {
        if marks.get(*node).copied().unwrap_or(Mark::New) == Mark::New {
            if let Some(c) = visit(node, edges, &mut marks, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// The `src/` directory of every crate in the repository (those with a `lib.rs` or `main.rs`).
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !path.is_dir() || name.starts_with('.') || name == "target" {
                continue;
            }
            if name == "src" && (path.join("lib.rs").exists() || path.join("main.rs").exists()) {
                found.push(path.clone());
            }
            stack.push(path);
        }
    }
    found.sort();
    found
}

#[test]
fn no_crate_of_the_repository_has_a_module_cycle() {
    let root = nixl_telemetry_tools::root();
    let crates = crate_sources(root);
    assert!(
        crates.contains(&root.join("src")) && crates.len() > 5,
        "the crates were not found: {crates:?}"
    );
    let mut problems = Vec::new();
    for src in &crates {
        let modules = CrateModules::read(src);
        for p in modules.cycles() {
            problems.push(format!(
                "{}: {p}",
                src.strip_prefix(root).unwrap().display()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "module cycles:\n{}",
        problems.join("\n")
    );
}

/// Writes a crate of `files` (path under `src/`, contents) and returns its modules.
fn crate_of(files: &[(&str, &str)]) -> (tempfile::TempDir, CrateModules) {
    let dir = tempfile::tempdir().unwrap();
    for (path, code) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, code).unwrap();
    }
    let modules = CrateModules::read(dir.path());
    (dir, modules)
}

#[test]
fn a_cycle_through_a_use_and_a_path_is_found_and_named() {
    let (_dir, modules) = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::thing;\n"),
        ("b.rs", "pub fn f() { crate::a::other(); }\n"),
    ]);
    let cycles = modules.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].contains("a.rs uses crate::b"), "{cycles:?}");
    assert!(cycles[0].contains("b.rs uses crate::a"), "{cycles:?}");
}

#[test]
fn a_cycle_through_a_reexport_inside_a_folder_is_found() {
    // The shape the plug-in loader had: loader uses nixl_cpp, and nixl_cpp reaches the
    // loader's function through the folder's re-export.
    let (_dir, modules) = crate_of(&[
        ("lib.rs", "pub mod plugin;\n"),
        (
            "plugin/mod.rs",
            "mod loader;\nmod nixl_cpp;\npub use loader::search_dirs;\n",
        ),
        (
            "plugin/loader.rs",
            "use super::nixl_cpp;\npub fn search_dirs() {}\n",
        ),
        ("plugin/nixl_cpp.rs", "use crate::plugin::{search_dirs};\n"),
    ]);
    let cycles = modules.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].contains("crate::plugin:"), "{cycles:?}");
}

#[test]
fn tests_in_a_file_of_their_own_are_not_part_of_the_layers() {
    let (_dir, modules) = crate_of(&[
        ("lib.rs", "pub mod store;\n"),
        (
            "store/mod.rs",
            "pub mod writer;\n#[cfg(any(test, feature = \"t\"))]\npub mod testing;\n",
        ),
        (
            "store/writer.rs",
            "#[cfg(test)]\nmod tests;\npub struct W;\n",
        ),
        (
            "store/writer/tests.rs",
            "use crate::store::testing::helper;\n",
        ),
        (
            "store/testing.rs",
            "use super::writer::W;\npub fn helper() {}\n",
        ),
    ]);
    assert_eq!(modules.cycles(), Vec::<String>::new());
    let tests = ["store", "writer", "tests"].map(str::to_owned).to_vec();
    assert!(!modules.files.contains_key(&tests));
}

#[test]
fn a_folder_naming_its_children_tests_comments_and_strings_are_not_cycles() {
    let (_dir, modules) = crate_of(&[
        (
            "lib.rs",
            "pub mod exporter;\npub mod ring;\npub use ring::Writer;\n",
        ),
        (
            "exporter/mod.rs",
            "pub mod buffer;\npub use buffer::Buffer;\npub trait Exporter {}\n\
             fn make() -> buffer::Buffer { buffer::Buffer }\n",
        ),
        (
            "exporter/buffer.rs",
            "use super::Exporter;\nuse crate::Writer;\npub struct Buffer;\n",
        ),
        (
            "ring.rs",
            "// crate::exporter is named in a comment\n\
             const S: &str = \"crate::exporter::Exporter\";\n\
             pub struct Writer;\n\
             #[cfg(test)]\nmod tests {\n    use crate::exporter::Exporter;\n}\n",
        ),
    ]);
    assert_eq!(modules.cycles(), Vec::<String>::new());
    // ...while the use from buffer to ring was seen (through the root's re-export).
    let buffer = vec!["exporter".to_owned(), "buffer".to_owned()];
    assert!(modules.uses[&buffer].contains(&vec!["ring".to_owned()]));
}

/// The dependencies with a path of the crate whose manifest is `manifest`, in every dependency
/// table (`[dependencies]`, `[dev-dependencies]`, `[build-dependencies]`, and the same under
/// `[target.'cfg(...)']`): (name, canonical path). A `workspace = true` dependency takes its
/// path from `[workspace.dependencies]` of `workspace_manifest`; registry crates have none.
fn path_dependencies(workspace_manifest: &Path, manifest: &Path) -> Vec<(String, PathBuf)> {
    path_dependencies_of(
        workspace_manifest,
        manifest,
        &["dependencies", "dev-dependencies", "build-dependencies"],
    )
}

/// [`path_dependencies`] in the dependency tables `kinds` only (and the same under
/// `[target.'cfg(...)']`).
fn path_dependencies_of(
    workspace_manifest: &Path,
    manifest: &Path,
    kinds: &[&str],
) -> Vec<(String, PathBuf)> {
    let read = |path: &Path| -> toml::Table {
        let text = std::fs::read_to_string(path).unwrap();
        text.parse()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let workspace = read(workspace_manifest);
    let workspace_deps = workspace
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(toml::Value::as_table)
        .cloned()
        .unwrap_or_default();
    let workspace_dir = workspace_manifest.parent().unwrap();
    let crate_manifest = read(manifest);
    let crate_dir = manifest.parent().unwrap();
    let mut tables: Vec<&toml::Value> = Vec::new();
    tables.extend(kinds.iter().filter_map(|k| crate_manifest.get(*k)));
    if let Some(targets) = crate_manifest.get("target").and_then(toml::Value::as_table) {
        for target in targets.values() {
            tables.extend(kinds.iter().filter_map(|k| target.get(*k)));
        }
    }
    let mut found = Vec::new();
    for (name, dep) in tables.iter().filter_map(|t| t.as_table()).flatten() {
        let from_workspace = dep.get("workspace").and_then(toml::Value::as_bool) == Some(true);
        let (base, entry) = match from_workspace {
            true => (workspace_dir, workspace_deps.get(name)),
            false => (crate_dir, Some(dep)),
        };
        let Some(path) = entry
            .and_then(|e| e.get("path"))
            .and_then(toml::Value::as_str)
        else {
            continue;
        };
        let path = base.join(path);
        let path = std::fs::canonicalize(&path)
            .unwrap_or_else(|e| panic!("{name}: {}: {e}", path.display()));
        found.push((name.clone(), path));
    }
    found
}

/// The dependencies of the crate at `crate_dir` (in the workspace at `root`) that are crates
/// under `root/plugins/`, as "name (path)".
fn plug_in_dependencies(root: &Path, crate_dir: &Path) -> Vec<String> {
    let plugins = std::fs::canonicalize(root.join("plugins")).unwrap();
    path_dependencies(&root.join("Cargo.toml"), &crate_dir.join("Cargo.toml"))
        .into_iter()
        .filter(|(_, path)| path.starts_with(&plugins))
        .map(|(name, path)| format!("{name} ({})", path.display()))
        .collect()
}

#[test]
fn the_cli_depends_on_no_plug_in() {
    let root = nixl_telemetry_tools::root();
    let deps = path_dependencies(&root.join("Cargo.toml"), &root.join("cli/Cargo.toml"));
    assert!(
        deps.iter().any(|(name, _)| name == "nixl-telemetry-core"),
        "the CLI's dependencies were not read: {deps:?}"
    );
    let on_plug_ins = plug_in_dependencies(root, &root.join("cli"));
    assert!(
        on_plug_ins.is_empty(),
        "cli/ depends on crates under plugins/ (move what it needs into a library crate): {}",
        on_plug_ins.join(", ")
    );
}

#[test]
fn a_plug_in_dependency_is_found_in_every_table_and_through_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let write = |path: &str, text: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "Cargo.toml",
        "[workspace]\nmembers = [\"cli\"]\n\n[workspace.dependencies]\n\
         exporter = { path = \"plugins/exporter\" }\nstore = { path = \"store\" }\n\
         serde = \"1\"\n",
    );
    for crate_dir in [
        "plugins/exporter",
        "plugins/other",
        "plugins/builder",
        "store",
    ] {
        write(&format!("{crate_dir}/src/lib.rs"), "");
    }
    write(
        "cli/Cargo.toml",
        "[package]\nname = \"cli\"\n\n[dependencies]\nstore.workspace = true\n\
         serde.workspace = true\nclap = \"4\"\n\n[dev-dependencies]\n\
         exporter = { workspace = true, features = [\"x\"] }\n\n\
         [target.'cfg(unix)'.dependencies]\nother = { path = \"../plugins/other\" }\n\n\
         [build-dependencies.builder]\npath = \"../plugins/builder\"\n",
    );
    let mut found = plug_in_dependencies(root, &root.join("cli"));
    found.sort();
    let names: Vec<&str> = found.iter().map(|d| d.split(' ').next().unwrap()).collect();
    assert_eq!(names, ["builder", "exporter", "other"], "{found:?}");
    // The library crate is a path dependency too, but not a plug-in.
    let all = path_dependencies(&root.join("Cargo.toml"), &root.join("cli/Cargo.toml"));
    assert_eq!(all.len(), 4, "{all:?}");
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The files under `dir` whose code (comments and strings left out) exports a symbol by name
/// (`no_mangle`, `export_name`), as "path: count".
fn symbol_exports(root: &Path, dir: &Path) -> Vec<String> {
    rust_files(dir)
        .into_iter()
        .filter_map(|path| {
            let code = strip_comments_and_strings(&std::fs::read_to_string(&path).unwrap());
            let n = code.matches("no_mangle").count() + code.matches("export_name").count();
            (n > 0).then(|| format!("{}: {n}", path.strip_prefix(root).unwrap().display()))
        })
        .collect()
}

/// Only the C ABI crate exports C symbols: the core (`src/`) defines none, so no crate linking
/// it (a plug-in, the CLI, the Python extension) can export the C ABI by accident; the base
/// crate's one is the plug-in entry point that `export_telemetry_plugin!` expands in a plug-in.
#[test]
fn only_the_c_abi_crate_defines_c_symbols() {
    let root = nixl_telemetry_tools::root();
    assert!(
        !symbol_exports(root, &root.join("c-api/src")).is_empty(),
        "the C ABI crate's symbols were not found"
    );
    let core = symbol_exports(root, &root.join("src"));
    assert!(
        core.is_empty(),
        "the core defines C symbols (they belong in c-api/): {core:?}"
    );
    let base = symbol_exports(root, &root.join("base/src"));
    assert_eq!(
        base,
        ["base/src/plugin/author.rs: 1"],
        "the base crate defines C symbols beyond the plug-in entry point's macro"
    );
}

/// The package name of the crate whose manifest is `manifest`.
fn package_name(manifest: &Path) -> String {
    let text = std::fs::read_to_string(manifest).unwrap();
    let table: toml::Table = text.parse().unwrap();
    table["package"]["name"].as_str().unwrap().to_owned()
}

/// The workspace crates the crate at `crate_dir` depends on in its `[dependencies]` (not the
/// tests' nor the build script's), by package name, sorted.
fn normal_workspace_dependencies(root: &Path, crate_dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = path_dependencies_of(
        &root.join("Cargo.toml"),
        &crate_dir.join("Cargo.toml"),
        &["dependencies"],
    )
    .into_iter()
    .map(|(_, path)| package_name(&path.join("Cargo.toml")))
    .collect();
    found.sort();
    found
}

/// The crate table of `docs/dev/architecture.md`: (crate, directory, dependencies) per row.
fn documented_crates(root: &Path) -> Vec<(String, String, Vec<String>)> {
    let text = std::fs::read_to_string(root.join("docs/dev/architecture.md")).unwrap();
    let section = text
        .split("\n## The crates\n")
        .nth(1)
        .expect("docs/dev/architecture.md has a section \"The crates\"");
    let code = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    section
        .lines()
        .skip_while(|l| !l.starts_with("| Crate |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split(" | ").collect();
            let name = code(cells[0]).remove(0);
            let dir = code(cells[1]).remove(0);
            let mut deps = code(cells[cells.len() - 1]);
            deps.sort();
            (name, dir, deps)
        })
        .collect()
}

/// The crate graph in the architecture docs is the one the manifests declare, and lists every
/// crate of the workspace.
#[test]
fn the_documented_crate_graph_is_the_manifests() {
    let root = nixl_telemetry_tools::root();
    let documented = documented_crates(root);
    let workspace: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let mut members: Vec<String> = workspace["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| package_name(&root.join(m.as_str().unwrap()).join("Cargo.toml")))
        .collect();
    members.sort();
    let mut listed: Vec<String> = documented.iter().map(|(n, ..)| n.clone()).collect();
    listed.sort();
    assert_eq!(
        listed, members,
        "the table's crates are not the workspace's members"
    );
    for (name, dir, deps) in &documented {
        let crate_dir = root.join(dir.trim_end_matches("(src/)").trim());
        assert_eq!(package_name(&crate_dir.join("Cargo.toml")), *name, "{dir}");
        assert_eq!(
            &normal_workspace_dependencies(root, &crate_dir),
            deps,
            "{name}: its [dependencies] differ from docs/dev/architecture.md"
        );
    }
    // The rules the table keeps.
    let deps_of = |n: &str| &documented.iter().find(|(name, ..)| name == n).unwrap().2;
    assert!(deps_of("nixl-telemetry-base").is_empty());
    assert_eq!(deps_of("nixl-telemetry-core"), &["nixl-telemetry-base"]);
    for (name, dir, deps) in &documented {
        if dir.starts_with("plugins/") {
            assert!(
                !deps.iter().any(|d| d == "nixl-telemetry-core"),
                "plug-in {name} links the core: it would carry a second copy of it"
            );
        }
        if name != "nixl-telemetry-test-support" {
            assert!(
                !deps.iter().any(|d| d == "nixl-telemetry-c-api"),
                "{name} depends on the C ABI crate, the top layer"
            );
        }
    }
}
