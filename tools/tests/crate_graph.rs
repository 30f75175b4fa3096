//! The crate graph: the crate table of `docs/dev/architecture.md` lists every member of the
//! workspace, each with the directory and the `[dependencies]` its manifest declares, and the
//! rules the table states hold (the base crate depends on no crate of ours, the core on the base
//! only, no plug-in links the core, nothing but the tests' helpers depends on the C ABI crate).
//!
//! And the CLI (`cli/`) depends on no crate under `plugins/` (plug-ins are cdylibs loaded at run
//! time; what the CLI shares with one is a library crate of its own, such as `mp-store/`). The
//! check reads every dependency table of `cli/Cargo.toml`, following `workspace = true` to the
//! workspace's entry for the path.

use std::path::Path;

use nixl_telemetry_tools::manifests::{package_name, path_dependencies, path_dependencies_of};

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
