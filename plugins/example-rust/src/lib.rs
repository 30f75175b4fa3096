//! An exporter plug-in written in Rust (`libtelemetry_exporter_example_rust.so`, selected with
//! `NIXL_TELEMETRY_EXPORTER=example_rust`): appends every event as a `name value` line to
//! `$NIXL_TELEMETRY_EXAMPLE_RUST_DIR/<agent name>.events`.

use std::ffi::CStr;
use std::fs::File;
use std::io::{BufWriter, Write};

use nixl_telemetry_base::plugin::author::{CreateError, InitParams, TelemetryPlugin};
use nixl_telemetry_base::Event;

/// The variable naming the output directory.
const OUT_DIR: &str = "NIXL_TELEMETRY_EXAMPLE_RUST_DIR";

/// One agent's output file.
pub struct LineExporter {
    out: BufWriter<File>,
}

impl TelemetryPlugin for LineExporter {
    const NAME: &'static CStr = c"example_rust";
    const VERSION: &'static CStr = c"0.1.0";

    fn create(params: &InitParams) -> Result<Self, CreateError> {
        let dir = std::env::var_os(OUT_DIR)
            .ok_or_else(|| CreateError::InvalidParam(format!("{OUT_DIR} is not set")))?;
        if params.agent_name.contains('/') {
            return Err(CreateError::InvalidParam(format!(
                "agent name {:?} cannot name a file",
                params.agent_name
            )));
        }
        let path = std::path::Path::new(&dir).join(format!("{}.events", params.agent_name));
        let file = File::create(&path)
            .map_err(|e| CreateError::Other(format!("cannot create {}: {e}", path.display())))?;
        log::info!("example_rust exporter writing {}", path.display());
        Ok(LineExporter {
            out: BufWriter::new(file),
        })
    }

    fn export(&mut self, events: &[Event]) -> usize {
        let mut kept = 0;
        for e in events {
            if writeln!(self.out, "{} {}", e.name(), e.value).is_err() {
                break;
            }
            kept += 1;
        }
        if self.out.flush().is_err() {
            log::warn!("example_rust exporter: write failed");
        }
        kept
    }
}

nixl_telemetry_base::export_telemetry_plugin!(LineExporter);
