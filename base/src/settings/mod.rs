//! Every setting this library and its exporter plug-ins read ([`SETTINGS`]), and the one place
//! that resolves a setting and remembers where its value came from. Sources, highest first:
//! the options of `nixl_telemetry_create_with_options` (for the settings they cover), the
//! process environment, NIXL's configuration file ([`mod@file`]), the default.
//!
//! [`process_settings`], the lookup every parser takes, is [`lookup()`] without the origin; every
//! reader (the core, the TRACE exporter, the plug-ins) gets the file's values by the same rules,
//! and a plug-in's copy of this crate asks its host ([`route_to_host`]), so the process reads
//! the file once. Names that are not in the table (other
//! variables, such as Dynamo's `DYN_FPM_*` or the rank variable `prometheus_mp` is told to read)
//! come from the environment only. The `OTEL_*` variables the `otlp` exporter reads are in the
//! table: the environment first, then the file, as for every setting.

//!
//! The parts: what a declaration is (`setting.rs`), the table of declarations (`table.rs`),
//! the lookup with its origins (`lookup.rs`), the lookup parsers are given and its routing to
//! the host (`host.rs`), the effective values and the reports on them (`diagnostics.rs`), the
//! docs' tables (`doc.rs`) and NIXL's configuration file (`file.rs`).

pub mod file;

mod diagnostics;
mod doc;
mod host;
mod lookup;
mod setting;
mod table;

pub use diagnostics::{
    check_kinds, config_file_path, effective, effective_all, unknown_file_keys, with_file_sources,
    Effective, OptionValue,
};
pub use doc::markdown_table;
pub use host::{process_settings, route_to_host, HostLookup};
pub use lookup::{lookup, lookup_os, Origin, Sourced};
pub use setting::{Consumer, Kind, Setting};
pub use table::*;
