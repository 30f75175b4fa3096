//! Who defines C symbols: only the C ABI crate (`c-api/`), and in the base crate only the plug-in
//! entry point's macro. Read from the sources (comments and strings left out), by the attributes
//! that export a symbol by name.

use std::path::Path;

use nixl_telemetry_tools::files_with_extension;
use nixl_telemetry_tools::rust_source::strip_comments_and_strings;

/// The files under `dir` whose code (comments and strings left out) exports a symbol by name
/// (`no_mangle`, `export_name`), as "path: count".
fn symbol_exports(root: &Path, dir: &Path) -> Vec<String> {
    files_with_extension(dir, "rs")
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
