//! The `nixl-telemetry` command: everything is in the library (`src/lib.rs`).

fn main() -> std::process::ExitCode {
    nixl_telemetry_cli::main()
}
