//! Exporters: where a collector's flushed batches go. Exactly one per collector: the built-in
//! shared-memory ring (`BUFFER`), the collect-only `NOP`, or a plug-in.

use std::path::Path;

use crate::config::ExporterChoice;
use crate::error::Result;
use crate::event::Event;
use crate::ring::RingWriter;

/// A sink for flushed event batches. Called from one thread at a time (the collector
/// serialises flushes).
pub trait Exporter: Send {
    /// Exports `events` in order and returns how many were kept; the remainder were lost
    /// (for example because a ring reader is not keeping up).
    fn export_batch(&mut self, events: &[Event]) -> usize;

    /// Short name for messages (`BUFFER`, `NOP`, plug-in name).
    fn name(&self) -> &str;

    /// Why events this exporter did not keep were lost, for the one warning about it.
    fn loss_reason(&self) -> &str {
        "the exporter did not accept them"
    }
}

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

    /// The ring being written.
    pub fn ring(&self) -> &RingWriter {
        &self.ring
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

/// Creates the exporter `choice` for agent `agent` with a buffer of `capacity` events.
pub fn create(choice: &ExporterChoice, agent: &str, capacity: usize) -> Result<Box<dyn Exporter>> {
    match choice {
        ExporterChoice::Nop => Ok(Box::new(NopExporter)),
        ExporterChoice::Buffer(dir) => Ok(Box::new(BufferExporter::create(dir, agent, capacity)?)),
        ExporterChoice::Plugin(name) => crate::plugin::create_exporter(name, agent, capacity),
        ExporterChoice::Trace(config) => Ok(Box::new(crate::trace::TraceExporter::create(
            config, agent,
        )?)),
    }
}
