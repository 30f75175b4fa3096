//! The exporter plug-in ABI as both sides use it: the C types ([`abi`]), the services a host
//! gives a plug-in ([`host`]: what a host serves; [`services`]: how a plug-in's copy of this
//! crate routes its process services to them), and the helpers for writing a plug-in in Rust
//! ([`author`]); and which plug-in files are trusted enough to load ([`trust`]: the check the
//! core's loader and the NIXL adapter make before opening one). The loader, which finds and
//! opens plug-ins, is the core's (`nixl_telemetry_core::plugin`).

pub mod abi;
pub mod author;
pub mod host;
pub mod services;
pub mod trust;
