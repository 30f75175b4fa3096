//! `BUFFER`: the shared-memory ring `NIXL_TELEMETRY_DIR/<agent name>` ([`crate::ring`]).

use std::path::Path;

use crate::error::Result;
use crate::event::Event;
use crate::exporter::Exporter;
use crate::ring::RingWriter;

/// The shared-memory ring exporter, writing `NIXL_TELEMETRY_DIR/<agent name>`.
pub struct BufferExporter {
    ring: RingWriter,
}

impl BufferExporter {
    /// Creates the ring for `agent` in `dir` with `capacity` records.
    pub fn create(dir: &Path, agent: &str, capacity: usize) -> Result<BufferExporter> {
        Ok(BufferExporter {
            ring: RingWriter::create(dir, agent, capacity)?,
        })
    }
}

impl Exporter for BufferExporter {
    fn export_batch(&mut self, events: &[Event]) -> usize {
        self.ring.push_batch(events)
    }

    fn name(&self) -> &str {
        "BUFFER"
    }

    fn loss_reason(&self) -> &str {
        "the ring is full: its reader is not keeping up"
    }
}
