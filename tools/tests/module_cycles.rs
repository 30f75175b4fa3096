//! No module cycle in any crate of the repository: within every module, its child modules form
//! layers (an acyclic graph of "uses"), so each folder reads from the top down. A cycle among
//! the children of any module fails the test, named with the files that close it. What counts
//! as a use is [`nixl_telemetry_tools::modules`]'s rule; the small crates below pin it down.

use nixl_telemetry_tools::modules::{crate_sources, CrateModules};

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

/// (A character of several bytes before a path, `'…'`, is read past.)
#[test]
fn a_cycle_through_a_use_and_a_path_is_found_and_named() {
    let (_dir, modules) = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::thing;\n"),
        ("b.rs", "pub fn f() { let _ = '…'; crate::a::other(); }\n"),
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
