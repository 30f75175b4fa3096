//! `libnixl_telemetry.so` and `libnixl_telemetry.a`, the C libraries of nixl-telemetry. The C
//! functions are the `#[no_mangle]` items of the `nixl-telemetry` crate (`src/ffi/`), which
//! this crate links in whole: a `cdylib` or `staticlib` exports the C symbols of every crate it
//! links. Nothing else lives here, so that the crates using the Rust API build no C library.

use nixl_telemetry as _;
