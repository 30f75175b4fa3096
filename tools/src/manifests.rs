//! The workspace's manifests (`Cargo.toml`) as the crate-graph checks read them: a crate's
//! package name, and its dependencies on crates of the repository (those with a `path`).

use std::path::{Path, PathBuf};

/// The dependencies with a path of the crate whose manifest is `manifest`, in every dependency
/// table (`[dependencies]`, `[dev-dependencies]`, `[build-dependencies]`, and the same under
/// `[target.'cfg(...)']`): (name, canonical path). A `workspace = true` dependency takes its
/// path from `[workspace.dependencies]` of `workspace_manifest`; registry crates have none.
pub fn path_dependencies(workspace_manifest: &Path, manifest: &Path) -> Vec<(String, PathBuf)> {
    path_dependencies_of(
        workspace_manifest,
        manifest,
        &["dependencies", "dev-dependencies", "build-dependencies"],
    )
}

/// [`path_dependencies`] in the dependency tables `kinds` only (and the same under
/// `[target.'cfg(...)']`).
pub fn path_dependencies_of(
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

/// The package name of the crate whose manifest is `manifest`.
pub fn package_name(manifest: &Path) -> String {
    let text = std::fs::read_to_string(manifest).unwrap();
    let table: toml::Table = text.parse().unwrap();
    table["package"]["name"].as_str().unwrap().to_owned()
}
