//! The repository's checks, gathered in one crate of their own: its tests (`tools/tests/`) read
//! the whole tree (the crate graph and the module layers, the C symbols, the settings'
//! declarations, the event enums typed by hand, the documentation's links) and fail naming what
//! to fix. This library holds what they share.
//!
//! Run them with `cargo test -p nixl-telemetry-tools` (`cargo test --workspace` includes them).

use std::path::Path;

/// The repository's root: the directory of the workspace's `Cargo.toml`, the parent of this
/// crate's `tools/`.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tools/ is a directory of the repository")
}
