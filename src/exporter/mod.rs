//! Exporters: where a collector's flushed batches go. Exactly one per collector, chosen by
//! [`ExporterChoice`]: the built-in shared-memory ring ([`buffer`], `BUFFER`), the collect-only
//! [`nop`] (`NOP`), gzip JSONL segments ([`trace`], `TRACE`), or an exporter plug-in loaded by
//! name ([`plugin`]).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::env::Lookup;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ring::layout::Layout;

pub mod buffer;
pub mod nop;
pub mod plugin;
pub mod trace;

pub use buffer::BufferExporter;
pub use nop::NopExporter;
pub use plugin::PluginExporter;
pub use trace::{TraceExporter, TraceExporterConfig};

/// `NIXL_TELEMETRY_EXPORTER`: exporter name (`BUFFER`, `NOP`, `TRACE` or a plug-in name).
pub const ENV_EXPORTER: &str = crate::settings::EXPORTER.name;
/// `NIXL_TELEMETRY_DIR`: directory of the BUFFER ring files.
pub const ENV_DIR: &str = crate::settings::DIR.name;

/// What one flush of a collector did, returned once by [`Exporter::export_flush`]: how many of
/// its events the exporter kept, why the rest were lost, and how many events that earlier
/// flushes kept were lost since.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlushOutcome {
    /// Events of this flush the exporter kept (the rest of the flush was lost).
    pub kept: usize,
    /// Why the events of this flush that were not kept were lost (unused when all were kept).
    pub loss: LossCause,
    /// Events that earlier flushes counted as kept but that were lost since: an exporter that
    /// writes later than it accepts (`TRACE` writes its batch once a second) reports here what
    /// a failed write lost. The collector moves them from `events_exported` to `events_lost`,
    /// so that after its final flush `events_exported + events_lost == events_accepted +
    /// drop_reports` still holds. The exporter logs such losses itself.
    pub lost_since: u64,
}

impl FlushOutcome {
    /// `kept` events kept; any loss is explained by the default [`LossCause`].
    pub fn kept(kept: usize) -> FlushOutcome {
        FlushOutcome {
            kept,
            loss: LossCause::default(),
            lost_since: 0,
        }
    }
}

/// Why events of a flush were lost, for the collector's one message about losses (every loss
/// is counted in `events_lost` whatever the cause).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LossCause {
    /// The exporter did not take them, for this reason: the collector warns once.
    Refused(Reason),
    /// Nobody reads what the exporter writes (a `BUFFER` ring that no reader has consumed
    /// from since it was created): the common case of telemetry left on with no reader
    /// attached, which the collector reports once at INFO instead of warning.
    NoReader(Reason),
    /// The exporter has reported this loss itself.
    AlreadyReported,
}

impl Default for LossCause {
    fn default() -> LossCause {
        LossCause::Refused(Reason::Fixed("the exporter did not accept them"))
    }
}

/// The text of a [`LossCause`]: fixed, or rendered once by its exporter and shared, so that
/// giving it at every flush that loses events neither allocates nor copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A text known at compile time.
    Fixed(&'static str),
    /// A text the exporter rendered once (for example with its capacity in it).
    Rendered(Arc<str>),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Reason::Fixed(text) => text,
            Reason::Rendered(text) => text,
        })
    }
}

/// A sink for flushed event batches. Called from one thread at a time (the collector
/// serialises flushes).
pub trait Exporter: Send {
    /// Exports `events` in order and returns how many were kept; the remainder were lost
    /// (for example because a ring reader is not keeping up).
    fn export_batch(&mut self, events: &[Event]) -> usize;

    /// Short name for messages (`BUFFER`, `NOP`, plug-in name).
    fn name(&self) -> &str;

    /// Exports one flush of the collector, which calls it once per flush, also when the flush
    /// has nothing to export: the staged `runs` in order, then the collector's drop `report`
    /// (if any). The default is [`export_joined`].
    fn export_flush(
        &mut self,
        runs: &[&[Event]],
        report: Option<Event>,
        scratch: &mut Vec<Event>,
    ) -> FlushOutcome {
        FlushOutcome::kept(export_joined(self, runs, report, scratch))
    }

    /// Called by [`export_joined`] instead of an export when a flush had nothing to export
    /// (every run interval of an idle agent, on the flush thread), so an exporter can do
    /// periodic work without events. The default does nothing.
    fn tick(&mut self) {}

    /// Called once by the collector after its final flush, before its final accounting: write
    /// what is still buffered, and return how many events earlier flushes kept that were lost
    /// since (as [`FlushOutcome::lost_since`]). The exporter is dropped afterwards. The default
    /// does nothing and returns 0.
    fn finish(&mut self) -> u64 {
        0
    }
}

/// How many events one flush hands its exporter: its staged `runs`, then its drop `report`.
pub fn flush_len(runs: &[&[Event]], report: Option<Event>) -> usize {
    runs.iter().map(|r| r.len()).sum::<usize>() + report.is_some() as usize
}

/// The default export of one flush: nothing to export calls [`Exporter::tick`] and keeps 0;
/// otherwise the runs and the report are joined into one batch (in `scratch`, reused across
/// flushes) for [`Exporter::export_batch`]. Returns how many events were kept.
pub fn export_joined<E: Exporter + ?Sized>(
    exporter: &mut E,
    runs: &[&[Event]],
    report: Option<Event>,
    scratch: &mut Vec<Event>,
) -> usize {
    if report.is_none() && runs.iter().all(|r| r.is_empty()) {
        exporter.tick();
        return 0;
    }
    scratch.clear();
    for run in runs {
        scratch.extend_from_slice(run);
    }
    scratch.extend(report);
    exporter.export_batch(scratch)
}

/// Where the collector sends its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExporterChoice {
    /// The shared-memory ring in this directory, of this layout (`NIXL_TELEMETRY_RING_VERSION`,
    /// [`buffer::ring_layout`]).
    Buffer(PathBuf, Layout),
    /// Collect only; nothing is written.
    Nop,
    /// A plug-in exporter by (case-sensitive) name.
    Plugin(String),
    /// The built-in gzip JSONL trace exporter (`TRACE`) with its `NIXL_TELEMETRY_TRACE_*`
    /// settings.
    Trace(TraceExporterConfig),
}

impl ExporterChoice {
    /// The exporter rule: a non-empty `NIXL_TELEMETRY_EXPORTER` names it; otherwise BUFFER when
    /// `NIXL_TELEMETRY_DIR` is set (and not empty), else NOP. `TRACE` reads its own settings through `env`.
    pub fn from_lookup(env: Lookup) -> Result<ExporterChoice> {
        let (name, dir) = (env(ENV_EXPORTER)?, env(ENV_DIR)?);
        // An empty value is unset (`crate::env::unset_if_empty`), whatever the lookup.
        let dir = dir.filter(|d| !d.is_empty());
        let buffer = |dir: Option<String>| match dir {
            Some(d) => Ok(ExporterChoice::Buffer(
                PathBuf::from(d),
                buffer::ring_layout(env)?,
            )),
            None => Err(Error::invalid(format!(
                "{ENV_EXPORTER}=BUFFER needs {ENV_DIR} (the directory for telemetry ring files)"
            ))),
        };
        match name.as_deref() {
            Some("BUFFER") => buffer(dir),
            Some("NOP") => Ok(ExporterChoice::Nop),
            Some("TRACE") => Ok(ExporterChoice::Trace(TraceExporterConfig::from_lookup(
                env,
            )?)),
            Some(n) if !n.is_empty() => Ok(ExporterChoice::Plugin(n.to_owned())),
            _ if dir.is_some() => {
                log::info!("No telemetry exporter was specified, using default: BUFFER");
                buffer(dir)
            }
            _ => {
                log::info!(
                    "No telemetry sink configured; using in-process telemetry collection via NOP"
                );
                Ok(ExporterChoice::Nop)
            }
        }
    }

    /// Creates this exporter for agent `agent` with a buffer of `capacity` events.
    pub fn create(&self, agent: &str, capacity: usize) -> Result<Box<dyn Exporter>> {
        Ok(match self {
            ExporterChoice::Nop => Box::new(NopExporter),
            ExporterChoice::Buffer(dir, layout) => {
                Box::new(BufferExporter::create(dir, agent, capacity, *layout)?)
            }
            ExporterChoice::Plugin(name) => {
                Box::new(PluginExporter::create(name, agent, capacity)?)
            }
            ExporterChoice::Trace(config) => Box::new(TraceExporter::create(config, agent)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::fixed_env;
    use crate::ring::layout::{V4, V5};

    #[test]
    fn exporter_choice_follows_the_rule() {
        let pick = |p: &[(&str, &str)]| ExporterChoice::from_lookup(&fixed_env(p));
        let ring = |dir: &str, layout| Ok(ExporterChoice::Buffer(dir.into(), layout));
        assert_eq!(pick(&[(ENV_DIR, "/tmp/t")]), ring("/tmp/t", V4));
        assert_eq!(
            pick(&[(ENV_DIR, "/tmp/t"), (ENV_EXPORTER, "")]),
            ring("/tmp/t", V4)
        );
        // The ring's layout, read only for BUFFER.
        let version = crate::settings::RING_VERSION.name;
        assert_eq!(
            pick(&[(ENV_DIR, "/tmp/t"), (version, "5")]),
            ring("/tmp/t", V5)
        );
        assert_eq!(
            pick(&[(ENV_DIR, "/tmp/t"), (version, "4")]),
            ring("/tmp/t", V4)
        );
        let e = pick(&[(ENV_DIR, "/tmp/t"), (version, "3")]).unwrap_err();
        assert!(
            e.message
                .contains("NIXL_TELEMETRY_RING_VERSION=3 is not a ring layout: use 4 or 5"),
            "{}",
            e.message
        );
        assert!(pick(&[(ENV_DIR, "/tmp/t"), (version, "five")]).is_err());
        assert_eq!(
            pick(&[(ENV_EXPORTER, "NOP"), (version, "3")]),
            Ok(ExporterChoice::Nop)
        );
        assert_eq!(
            pick(&[(ENV_DIR, "/tmp/t"), (ENV_EXPORTER, "NOP")]),
            Ok(ExporterChoice::Nop)
        );
        assert_eq!(
            pick(&[(ENV_EXPORTER, "prometheus")]),
            Ok(ExporterChoice::Plugin("prometheus".into()))
        );
        assert!(pick(&[(ENV_EXPORTER, "BUFFER")])
            .unwrap_err()
            .message
            .contains(ENV_DIR));
        // Empty means unset.
        assert_eq!(pick(&[(ENV_DIR, "")]), Ok(ExporterChoice::Nop));
        assert!(pick(&[(ENV_DIR, ""), (ENV_EXPORTER, "BUFFER")])
            .unwrap_err()
            .message
            .contains(ENV_DIR));
    }
}
