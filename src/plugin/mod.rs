//! Exporter plug-ins: the C ABI (`abi`), the loader that finds and opens
//! `libtelemetry_exporter_<NAME>.so` by name, the exporter adapter around a loaded plug-in, and
//! the helpers for writing plug-ins in Rust (`author`).

pub mod abi;
pub mod author;
mod loader;

pub use loader::{add_plugin_dir, create_exporter, search_dirs, LoadedPlugin};
