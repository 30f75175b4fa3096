//! `NOP`: the collect-only exporter (the default without `NIXL_TELEMETRY_DIR`).

use crate::event::Event;
use crate::exporter::Exporter;

/// The collect-only exporter: keeps nothing, loses nothing.
#[derive(Debug, Default)]
pub struct NopExporter;

impl Exporter for NopExporter {
    fn export_batch(&mut self, events: &[Event]) -> usize {
        events.len()
    }

    fn name(&self) -> &str {
        "NOP"
    }
}
