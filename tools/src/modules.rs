//! A crate's modules and the uses between them, read from its sources (not the compiler), to
//! find module cycles: within every module, its child modules must form layers (an acyclic
//! graph of "uses"), so each folder reads from the top down.
//!
//! A module's file(s) (`a.rs` or `a/mod.rs`) use another module when a `use` statement or a
//! `crate::`/`super::`/`self::` path in its code names it (paths through a `pub use` re-export
//! lead to where the item is defined). Code of `#[cfg(test)] mod ... { }` blocks, and modules
//! declared `#[cfg(test)] mod name;`, are left out: tests may reach anywhere. A module naming
//! its own descendants is not an edge (a folder's `mod.rs` declares and re-exports its
//! children), and a child naming its parent is not either (the parent is the folder's front
//! door). For every module, an edge between two of its children is any use from inside one
//! child's subtree into the other's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::files_with_extension;
use crate::rust_source::{
    expand_use_tree, inline_paths, strip_comments_and_strings, strip_test_modules,
    test_module_declarations, use_statements,
};

/// A module, as the path of segments from the crate root (`[]` is the root).
pub type ModPath = Vec<String>;

/// One crate's modules and the uses between them.
pub struct CrateModules {
    /// Each module's file, relative to the crate's `src/`.
    pub files: BTreeMap<ModPath, PathBuf>,
    /// `pub use` re-exports per module: exported name -> the full path it names.
    reexports: BTreeMap<ModPath, BTreeMap<String, Vec<String>>>,
    /// The modules each module uses.
    pub uses: BTreeMap<ModPath, BTreeSet<ModPath>>,
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

/// Every module file of the crate whose sources are in `src`: its path relative to `src` and
/// its code, without comments, strings and `#[cfg(test)] mod ... { }` blocks.
fn module_sources(src: &Path) -> BTreeMap<ModPath, (PathBuf, String)> {
    let mut sources = BTreeMap::new();
    for path in files_with_extension(src, "rs") {
        let rel = path.strip_prefix(src).unwrap().to_owned();
        if let Some(module) = module_of(&rel) {
            let code = std::fs::read_to_string(&path).unwrap();
            let code = strip_test_modules(&strip_comments_and_strings(&code));
            sources.insert(module, (rel, code));
        }
    }
    sources
}

/// The modules declared `#[cfg(test)] mod name;` (tests in a file of their own) in `sources`.
fn test_only_modules(sources: &BTreeMap<ModPath, (PathBuf, String)>) -> Vec<ModPath> {
    sources
        .iter()
        .flat_map(|(module, (_, code))| {
            test_module_declarations(code).into_iter().map(move |name| {
                let mut child = module.clone();
                child.push(name);
                child
            })
        })
        .collect()
}

/// The files of the crate whose sources are in `src` that are tests in a file of their own (a
/// module declared `#[cfg(test)] mod name;`, and the modules under it), relative to `src`.
pub fn test_module_files(src: &Path) -> BTreeSet<PathBuf> {
    let sources = module_sources(src);
    let test_only = test_only_modules(&sources);
    sources
        .into_iter()
        .filter(|(module, _)| test_only.iter().any(|t| module.starts_with(t)))
        .map(|(_, (file, _))| file)
        .collect()
}

impl CrateModules {
    /// Reads every module file of the crate whose sources are in `src`.
    pub fn read(src: &Path) -> CrateModules {
        let mut sources = module_sources(src);
        let test_only = test_only_modules(&sources);
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
    pub fn cycles(&self) -> Vec<String> {
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
pub fn crate_sources(root: &Path) -> Vec<PathBuf> {
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
