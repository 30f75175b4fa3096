//! Exporter plug-ins, in layers:
//! - [`library`] (bottom): the search directories, the trust checks (the base crate's
//!   `plugin::trust`, shared with the NIXL adapter) and `dlopen` of a shared library;
//! - [`nixl_cpp`]: NIXL's own C++ plug-ins (API version 2), driven through the C++ plug-in
//!   host library;
//! - [`loader`]: finds `libtelemetry_exporter_<NAME>.so` by name, validates its descriptor
//!   (`abi`: the C ABI types) and hands a version-2 plug-in to `nixl_cpp`.
//!
//! The plug-in ABI's types ([`abi`]), the services hosts give plug-ins ([`host`]) and the
//! helpers for writing plug-ins in Rust ([`author`]) are `nixl-telemetry-base`'s, which plug-ins
//! link instead of this crate. The exporter around a loaded plug-in is
//! [`crate::exporter::PluginExporter`].

pub use nixl_telemetry_base::plugin::{abi, author, host};
mod library;
mod loader;
mod nixl_cpp;

pub use library::{add_plugin_dir, search_dirs};
pub(crate) use loader::Creator;
pub use loader::{load, LoadedPlugin};
pub(crate) use nixl_cpp::create as create_nixl_cpp;
