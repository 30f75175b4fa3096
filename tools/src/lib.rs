//! The repository's checks, gathered in one crate of their own: its tests (`tools/tests/`) read
//! the whole tree and fail naming what to fix:
//!
//! - `crate_graph`: the crate table of `docs/dev/architecture.md` is the manifests' graph, and
//!   the CLI depends on no plug-in;
//! - `module_cycles`: no module cycle in any crate of the repository;
//! - `c_symbols`: only the C ABI crate defines C symbols;
//! - `settings_declared`: each setting is declared once, and the docs' settings tables are
//!   generated from the declarations;
//! - `event_enums`: the event enums typed by hand in the C++ headers and the Python reader are
//!   `EventType::ALL`;
//! - `messages`: no string literal of the library's crates keeps a line break or a run of
//!   spaces (a message split over source lines without a continuation);
//! - `docs`: the documentation's relative links and anchors resolve, and the book's summary
//!   lists every page.
//!
//! This library holds what they share: the repository's root and files (here), reading Rust
//! sources as text ([`rust_source`]), a crate's modules and the uses between them ([`modules`]),
//! and the manifests' dependencies ([`manifests`]). Run the checks with
//! `cargo test -p nixl-telemetry-tools` (`cargo test --workspace` includes them).

use std::path::{Path, PathBuf};

pub mod manifests;
pub mod modules;
pub mod rust_source;

/// The repository's root: the directory of the workspace's `Cargo.toml`, the parent of this
/// crate's `tools/`.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tools/ is a directory of the repository")
}

/// Every file under `dir` whose name ends in `.{extension}`, sorted (the paths start with
/// `dir`).
pub fn files_with_extension(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == extension) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}
