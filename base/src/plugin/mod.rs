//! The exporter plug-in ABI as both sides use it: the C types ([`abi`]), the services a host
//! gives a plug-in ([`host`]: the host side, and the plug-in side that routes this crate's
//! process services to them), and the helpers for writing a plug-in in Rust ([`author`]). The
//! loader, which finds and opens plug-ins, is the core's (`nixl_telemetry::plugin`).

pub mod abi;
pub mod author;
pub mod host;
