//! `BUFFER`: the shared-memory ring `NIXL_TELEMETRY_DIR/<agent name>` ([`crate::ring`]).

use std::path::Path;

use crate::error::Result;
use crate::event::Event;
use crate::exporter::Exporter;
use crate::ring::RingWriter;

/// The shared-memory ring exporter, writing `NIXL_TELEMETRY_DIR/<agent name>`.
pub struct BufferExporter {
    ring: RingWriter,
    /// Why the last lossy flush lost events (see [`Exporter::loss_reason`]).
    last_loss_was_oversize: bool,
}

impl BufferExporter {
    /// Creates the ring for `agent` in `dir` with `capacity` records.
    pub fn create(dir: &Path, agent: &str, capacity: usize) -> Result<BufferExporter> {
        Ok(BufferExporter {
            ring: RingWriter::create(dir, agent, capacity)?,
            last_loss_was_oversize: false,
        })
    }
}

impl Exporter for BufferExporter {
    fn export_batch(&mut self, events: &[Event]) -> usize {
        self.export_flush(&[events], None, &mut Vec::new())
    }

    /// Copies the runs straight into the ring (no intermediate batch), keeping one slot for the
    /// drop report when the ring cannot take everything.
    fn export_flush(
        &mut self,
        runs: &[&[Event]],
        report: Option<Event>,
        _: &mut Vec<Event>,
    ) -> usize {
        let pushed = self.ring.push_runs(runs, report);
        let total = runs.iter().map(|r| r.len()).sum::<usize>() + report.is_some() as usize;
        if pushed.kept < total {
            self.last_loss_was_oversize = pushed.was_empty;
        }
        pushed.kept
    }

    fn name(&self) -> &str {
        "BUFFER"
    }

    fn loss_reason(&self) -> String {
        if self.last_loss_was_oversize {
            format!(
                "the ring was empty, but one flush had more events than its {} usable slots: \
                 raise NIXL_TELEMETRY_BUFFER_SIZE or flush more often",
                self.ring.capacity() - 1
            )
        } else {
            "the ring is full: its reader is not keeping up".into()
        }
    }
}
