//! `nixl-telemetry stats`: per-event counts and sums, last values and, for the transfer times,
//! min/mean/p50/p99/max; one section per agent and a node total. Rings are peeked, never
//! consumed; TRACE exporter segments are read too. Memory is bounded whatever the input: the
//! distributions are fixed-size sketches ([`crate::sketch`]), never the values.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use nixl_telemetry_core::exporter::trace::NIXL_EVENT_SCHEMA;
use nixl_telemetry_core::ring::loss_file::LossCount;
use nixl_telemetry_core::segments::{segments_of, SegmentReader};
use nixl_telemetry_core::{Event, EventType};
use serde_json::{json, Value};

use crate::filter::EventFilter;
use crate::output::{CliError, CliResult, Format};
use crate::rings::{Mode, RingSet};
use crate::sketch::Sketch;

/// Options of `stats`.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// Ring files, directories of rings, and TRACE exporter segments (a file, or the prefix
    /// `<NIXL_TELEMETRY_TRACE_PATH>.<agent>`).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Output format: a table per agent, or one JSON document.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// The same as `--format json`.
    #[arg(long, hide = true)]
    json: bool,
    /// Only count events whose name matches this POSIX glob (repeatable); a glob matching
    /// none of the 22 event names is a usage error (exit status 2).
    #[arg(long = "filter", value_name = "GLOB")]
    filters: Vec<String>,
}

/// Aggregates of one event name.
#[derive(Clone, Debug, Default)]
pub struct EventSummary {
    /// Number of events.
    pub count: u64,
    /// Sum of values (saturating).
    pub sum: u64,
    /// Most recent value.
    pub last: u64,
    /// The distribution, for the transfer times only.
    sketch: Option<Sketch>,
}

/// Per-event aggregates, in event-type order (unknown types last, by name).
#[derive(Clone, Debug, Default)]
pub struct Summary {
    by_event: BTreeMap<(u32, String), EventSummary>,
}

/// Whether values of `event` get a distribution.
fn has_distribution(event_type: u32) -> bool {
    matches!(
        EventType::from_u32(event_type),
        Some(EventType::AgentXferTime | EventType::AgentXferPostTime)
    )
}

impl Summary {
    /// Adds one event.
    pub fn add(&mut self, event: &Event) {
        let entry = self
            .by_event
            .entry((event.event_type, event.name()))
            .or_default();
        entry.count += 1;
        entry.sum = entry.sum.saturating_add(event.value);
        entry.last = event.value;
        if has_distribution(event.event_type) {
            entry
                .sketch
                .get_or_insert_with(Sketch::default)
                .add(event.value);
        }
    }

    /// Adds everything of `other` (its last values win).
    pub fn merge(&mut self, other: &Summary) {
        for (key, theirs) in &other.by_event {
            let ours = self.by_event.entry(key.clone()).or_default();
            ours.count += theirs.count;
            ours.sum = ours.sum.saturating_add(theirs.sum);
            ours.last = theirs.last;
            if let Some(s) = &theirs.sketch {
                ours.sketch.get_or_insert_with(Sketch::default).merge(s);
            }
        }
    }

    /// Total number of events added.
    pub fn total(&self) -> u64 {
        self.by_event.values().map(|s| s.count).sum()
    }

    /// The sum of the values of events of type `t`.
    pub fn sum_of(&self, t: EventType) -> u64 {
        self.by_event
            .get(&(t as u32, t.name().to_owned()))
            .map_or(0, |s| s.sum)
    }

    /// The summary as a JSON value; `with_last` adds each event's last value.
    pub fn to_json(&self, with_last: bool) -> Value {
        let events: Vec<Value> = self
            .by_event
            .iter()
            .map(|((t, name), s)| {
                let mut o = json!({"event": name, "type": t, "count": s.count, "sum": s.sum});
                if with_last {
                    o["last"] = json!(s.last);
                }
                if let Some(d) = s.sketch.as_ref().filter(|d| d.count() > 0) {
                    o["distribution"] = json!({
                        "min": d.min(), "mean": d.mean(), "p50": d.quantile(0.5),
                        "p99": d.quantile(0.99), "max": d.max(),
                    });
                }
                o
            })
            .collect();
        json!({"total_events": self.total(), "events": events})
    }

    /// Writes the summary as an aligned table; without `with_last`, the last column is `-`.
    pub fn write_table(&self, out: &mut impl Write, with_last: bool) -> std::io::Result<()> {
        writeln!(
            out,
            "{:<32} {:>10} {:>20} {:>14}",
            "event", "count", "sum (total)", "last"
        )?;
        for ((_, name), s) in &self.by_event {
            let last = if with_last {
                s.last.to_string()
            } else {
                "-".into()
            };
            writeln!(out, "{name:<32} {:>10} {:>20} {last:>14}", s.count, s.sum)?;
        }
        let distributions: Vec<_> = self
            .by_event
            .iter()
            .filter_map(|((_, name), s)| s.sketch.as_ref().map(|d| (name, d)))
            .collect();
        if !distributions.is_empty() {
            writeln!(out)?;
            writeln!(
                out,
                "{:<32} {:>10} {:>12} {:>10} {:>10} {:>10}",
                "transfer time (us)", "min", "mean", "p50", "p99", "max"
            )?;
            let show = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
            for (name, d) in distributions {
                writeln!(
                    out,
                    "{name:<32} {:>10} {:>12.1} {:>10} {:>10} {:>10}",
                    show(d.min()),
                    d.mean().unwrap_or(0.0),
                    show(d.quantile(0.5)),
                    show(d.quantile(0.99)),
                    show(d.max())
                )?;
            }
        }
        writeln!(out, "total events: {}", self.total())
    }
}

/// One section of the output: an agent's events from one source.
struct Section {
    agent: String,
    source: String,
    summary: Summary,
    /// For a ring: the events its writer could not put into it (its loss file; unknown when the
    /// writer keeps no count, as NIXL's does not, and for other sources).
    ring_lost: LossCount,
}

impl Section {
    /// The ring-loss line of the text report, if this section is a ring whose writer counts.
    fn write_ring_lost(&self, out: &mut impl Write) -> std::io::Result<()> {
        match &self.ring_lost {
            LossCount::Untrusted(why) => writeln!(
                out,
                "Events the writer could not put into this ring: untrusted ({why}: not believed)"
            ),
            &LossCount::Counted(lost) => writeln!(
                out,
                "Events the writer could not put into this ring: {lost}{}",
                if lost > 0 {
                    " (its reader was behind, or a flush was larger than the ring; not in the \
                     totals above)"
                } else {
                    ""
                }
            ),
            LossCount::Unknown => Ok(()),
        }
    }
}

/// Whether `path` is (or names) TRACE segments rather than a ring: a gzip file, or a prefix
/// naming segments.
fn is_segment_source(path: &Path) -> bool {
    if path.is_file() {
        let mut magic = [0u8; 2];
        return std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
            .is_ok_and(|()| magic == [0x1f, 0x8b]);
    }
    !path.exists() && segments_of(path).is_ok_and(|s| !s.is_empty())
}

/// Reads TRACE segments into one section per agent; returns whether every file was complete.
fn read_segments(
    paths: &[PathBuf],
    filter: &EventFilter,
    sections: &mut Vec<Section>,
) -> Result<bool, CliError> {
    let mut complete = true;
    let mut foreign = 0u64;
    for arg in paths {
        let files = segments_of(arg).map_err(|e| {
            CliError::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", arg.display()),
            ))
        })?;
        for file in files {
            let source = format!("TRACE {}", file.display());
            let outcome = SegmentReader::for_each_row(&file, |row| {
                let row: Option<Value> = serde_json::from_slice(row).ok();
                let event = row.as_ref().map(|r| &r["event"]);
                let parsed = event
                    .filter(|e| e["schema"] == NIXL_EVENT_SCHEMA)
                    .and_then(|e| {
                        Some((
                            e["agent"].as_str()?,
                            u32::try_from(e["type"].as_u64()?).ok()?,
                            e["value"].as_u64()?,
                        ))
                    });
                let Some((agent, event_type, value)) = parsed else {
                    foreign += 1;
                    return Ok(());
                };
                let event = Event { event_type, value };
                if !filter.matches(&event.name()) {
                    return Ok(());
                }
                let index = match sections
                    .iter()
                    .position(|s| s.agent == agent && s.source.starts_with("TRACE"))
                {
                    Some(i) => i,
                    None => {
                        sections.push(Section {
                            agent: agent.to_owned(),
                            source: source.clone(),
                            summary: Summary::default(),
                            ring_lost: LossCount::Unknown,
                        });
                        sections.len() - 1
                    }
                };
                sections[index].summary.add(&event);
                Ok(())
            })
            .map_err(|e| {
                CliError::Io(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", file.display()),
                ))
            })?;
            complete &= crate::fpm::report(&file, &outcome);
        }
    }
    if foreign > 0 {
        eprintln!(
            "nixl-telemetry: note: skipped {foreign} rows that are not NIXL telemetry events \
             (schema {NIXL_EVENT_SCHEMA}); for forward-pass-metrics traces use `nixl-telemetry \
             fpm summary`"
        );
    }
    Ok(complete)
}

/// Runs `stats`.
pub fn run(args: &StatsArgs) -> CliResult {
    let filter = EventFilter::new(&args.filters)?;
    let (segment_args, ring_args): (Vec<PathBuf>, Vec<PathBuf>) = args
        .paths
        .iter()
        .cloned()
        .partition(|p| is_segment_source(p));
    let mut sections = Vec::new();
    if !ring_args.is_empty() {
        let mut set = RingSet::open(&ring_args, false)?;
        for ring in &mut set.rings {
            let mut summary = Summary::default();
            let limit = ring.pending();
            ring.take_batches(Mode::Peek, limit, false, |events| {
                for event in events.iter().filter(|e| filter.matches(&e.name())) {
                    summary.add(event);
                }
                Ok(())
            })?;
            sections.push(Section {
                agent: ring.name.clone(),
                source: format!("ring {}", ring.path.display()),
                summary,
                ring_lost: ring
                    .reader()
                    .map_or(LossCount::Unknown, |r| r.lost_events()),
            });
        }
    }
    let complete = read_segments(&segment_args, &filter, &mut sections)?;
    let mut node = Summary::default();
    for s in &sections {
        node.merge(&s.summary);
    }
    let one = sections.len() == 1;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json || args.format == Format::Json {
        let mut doc = node.to_json(one);
        doc["agents"] = sections
            .iter()
            .map(|s| {
                let mut a = s.summary.to_json(true);
                a["agent"] = json!(s.agent);
                a["source"] = json!(s.source);
                if s.source.starts_with("ring ") {
                    a["ring_lost"] = match &s.ring_lost {
                        LossCount::Counted(lost) => json!(lost),
                        LossCount::Unknown => Value::Null,
                        LossCount::Untrusted(why) => {
                            a["ring_lost_untrusted"] = json!(why);
                            json!("untrusted")
                        }
                    };
                }
                a
            })
            .collect();
        writeln!(out, "{doc}")?;
    } else if one {
        node.write_table(&mut out, true)?;
        sections[0].write_ring_lost(&mut out)?;
    } else {
        for s in &sections {
            writeln!(out, "== {} ({}) ==", s.agent, s.source)?;
            s.summary.write_table(&mut out, true)?;
            s.write_ring_lost(&mut out)?;
            writeln!(out)?;
        }
        writeln!(out, "== node total ({} agents) ==", sections.len())?;
        node.write_table(&mut out, false)?;
    }
    out.flush()?;
    if complete {
        Ok(())
    } else {
        Err(CliError::Incomplete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_last_values_and_percentiles() {
        let mut s = Summary::default();
        for v in [10, 20, 35] {
            s.add(&Event::new(EventType::AgentTxBytes, v));
        }
        for v in 1..=100 {
            s.add(&Event::new(EventType::AgentXferTime, v));
        }
        let j = s.to_json(true);
        assert_eq!(j["total_events"], 103);
        assert_eq!(j["events"][0]["sum"], 65);
        assert_eq!(j["events"][0]["last"], 35);
        let d = &j["events"][1]["distribution"];
        assert_eq!((d["min"].clone(), d["p50"].clone()), (json!(1), json!(50)));
        assert_eq!(
            (d["p99"].clone(), d["max"].clone()),
            (json!(99), json!(100))
        );
        assert_eq!(d["mean"], 50.5);
        assert_eq!(s.sum_of(EventType::AgentTxBytes), 65);
    }

    #[test]
    fn a_merge_is_the_node_total() {
        let (mut a, mut b) = (Summary::default(), Summary::default());
        a.add(&Event::new(EventType::AgentXferTime, 5));
        b.add(&Event::new(EventType::AgentXferTime, 7));
        b.add(&Event::new(EventType::AgentRxBytes, 9));
        a.merge(&b);
        let j = a.to_json(false);
        assert_eq!(j["total_events"], 3);
        assert!(j["events"][0].get("last").is_none());
        assert_eq!(j["events"][1]["distribution"]["max"], 7);
    }
}
