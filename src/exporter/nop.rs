//! `NOP`: the collect-only exporter (the default without `NIXL_TELEMETRY_DIR`).

use crate::event::Event;
use crate::exporter::{flush_len, Exporter, FlushOutcome};

/// The collect-only exporter: keeps nothing, loses nothing.
#[derive(Debug, Default)]
pub struct NopExporter;

impl Exporter for NopExporter {
    fn export_batch(&mut self, events: &[Event]) -> usize {
        events.len()
    }

    /// Counts the flush's events without joining them into one batch first: the default copies
    /// every staged event (a flush is up to `BUFFER_SIZE` events, plus a block per thread: 6-9
    /// MB with the benchmark's 4M-event queue, two threads recording flat out and a 1 ms run
    /// interval). An empty flush still calls [`Exporter::tick`], as the default does (NOP's
    /// does nothing).
    fn export_flush(
        &mut self,
        runs: &[&[Event]],
        report: Option<Event>,
        _: &mut Vec<Event>,
    ) -> FlushOutcome {
        let kept = flush_len(runs, report);
        if kept == 0 {
            self.tick();
        }
        FlushOutcome::kept(kept)
    }

    fn name(&self) -> &str {
        "NOP"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;

    #[test]
    fn a_flush_is_kept_whole_without_being_copied() {
        let events: Vec<Event> = (0..1000)
            .map(|i| Event::new(EventType::AgentTxBytes, i))
            .collect();
        let runs = [&events[..600], &events[600..]];
        let report = Event::new(EventType::AgentTelemetryEventsDropped, 3);
        let mut scratch = Vec::new();
        let outcome = NopExporter.export_flush(&runs, Some(report), &mut scratch);
        assert_eq!(outcome, FlushOutcome::kept(1001));
        assert_eq!(scratch.capacity(), 0, "the events were copied");
        assert_eq!(NopExporter.export_flush(&[], None, &mut scratch).kept, 0);
    }
}
