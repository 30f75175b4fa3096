//! Exporter plug-ins: the C ABI types (`abi`), the loader that finds and opens
//! `libtelemetry_exporter_<NAME>.so` by name, what makes a file trusted enough to load
//! (`trust`), the services hosts give plug-ins (`host`), the bridge to NIXL's own C++ plug-ins (`cpp_bridge`), and the helpers for writing plug-ins in Rust (`author`). The exporter around a
//! loaded plug-in is [`crate::exporter::PluginExporter`].

pub mod abi;
pub mod author;
mod cpp_bridge;
pub mod host;
mod loader;
pub(crate) mod trust;

pub(crate) use cpp_bridge::create as create_nixl_cpp;
pub(crate) use loader::Creator;
pub use loader::{add_plugin_dir, check_trusted, load, search_dirs, LoadedPlugin};
