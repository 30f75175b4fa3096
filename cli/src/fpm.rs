//! `nixl-telemetry fpm cat|summary`: read forward-pass-metrics trace segments
//! (`<prefix>.<producer>.<index>.jsonl.gz`, multi-member gzip JSONL).
//!
//! Each argument is a segment file, a directory (every segment in it, producer by producer, each
//! in index order), a producer prefix (`/tmp/dynamo-fpm.4192`: its segments in index order) or
//! an output prefix (`/tmp/dynamo-fpm`: every producer's segments, producer by producer, each in
//! index order).
//!
//! A file whose last gzip member is truncated (a crash while writing) or damaged yields every
//! complete row before the damage, then one warning line on stderr naming the file and the byte
//! offset where the damaged member starts. A row longer than 16 MiB (the bound the writers
//! keep; [`nixl_telemetry_core::segments::reader`]) is skipped without being held in memory, and the
//! rows after it are read; one warning line per file gives their number and the first one's
//! position.
//!
//! Exit status: 0 when every file was read completely; 3 when at least one file ended in a
//! truncated or damaged member or had rows skipped as too long (everything readable was still
//! printed); 1 on an error (an argument naming no segment, an unreadable file, a file that is
//! not gzip, a failed write to stdout other than a closed pipe); 2 for bad usage.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use nixl_telemetry_core::exporter::trace::NIXL_EVENT_SCHEMA;
use nixl_telemetry_core::segments::reader::MAX_ROW_BYTES;
use nixl_telemetry_core::segments::{segments_of, ReadOutcome, SegmentReader};
use serde_json::{json, Value};

use crate::output::Format;

/// Exit status when some file ended in a truncated or damaged member.
const EXIT_TRUNCATED: u8 = 3;

/// Read forward-pass-metrics (FPM) trace segments.
#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 when every file was read completely; 3 when a file \
ended in a truncated or damaged gzip member (every complete row before it was still used, and \
a warning names the file and byte offset) or had rows longer than 16 MiB, which were skipped \
with a warning (the rows after them were used); 1 on errors (no segment found, unreadable \
file, not a gzip file, TRACE exporter rows given to summary); 2 for bad usage."
)]
pub struct FpmArgs {
    #[command(subcommand)]
    command: FpmCommand,
}

#[derive(Subcommand, Debug)]
enum FpmCommand {
    /// Print every row (one JSON envelope per line) of the given segments, in index order.
    Cat {
        /// Segment files, directories (every segment in them), producer prefixes
        /// (/tmp/dynamo-fpm.4192) or output prefixes (/tmp/dynamo-fpm).
        #[arg(required = true, value_name = "PREFIX_DIR_OR_FILE")]
        paths: Vec<PathBuf>,
    },
    /// Per (namespace, component, worker_id, dp_rank): rows, first/last counter_id, counter
    /// gaps (those sampling explains apart, as coalesced), time span and mean wall_time
    /// excluding idle heartbeats.
    Summary {
        /// Segment files, directories, producer prefixes or output prefixes.
        #[arg(required = true, value_name = "PREFIX_DIR_OR_FILE")]
        paths: Vec<PathBuf>,
        /// Output format: a table, or one JSON object.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// The same as `--format json`.
        #[arg(long, hide = true)]
        json: bool,
    },
}

/// Runs an `fpm` subcommand and returns the process exit status.
pub fn run(args: &FpmArgs) -> ExitCode {
    let result = match &args.command {
        FpmCommand::Cat { paths } => cat(paths),
        FpmCommand::Summary {
            paths,
            format,
            json,
        } => summary(paths, *json || *format == Format::Json),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(EXIT_TRUNCATED),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nixl-telemetry: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Every segment named by the arguments, each file once, in argument order.
fn expand(paths: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for arg in paths {
        let found = segments_of(arg)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", arg.display())))?;
        if found.is_empty() {
            let why = if arg.is_dir() {
                "a directory without any segment <prefix>.<index>.jsonl.gz"
            } else {
                "no such file and no segment <prefix>.<index>.jsonl.gz or \
                 <prefix>.<producer>.<index>.jsonl.gz matches it"
            };
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: {why}", arg.display()),
            ));
        }
        for f in found {
            if seen.insert(f.clone()) {
                files.push(f);
            }
        }
    }
    Ok(files)
}

/// Reads every row of `files`; returns whether every file was complete.
fn read_all(files: &[PathBuf], mut row: impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<bool> {
    let mut complete = true;
    for file in files {
        let outcome = SegmentReader::for_each_row(file, &mut row).map_err(|e| {
            if e.kind() == io::ErrorKind::BrokenPipe {
                e
            } else {
                io::Error::new(e.kind(), format!("{}: {e}", file.display()))
            }
        })?;
        complete &= report(file, &outcome);
    }
    Ok(complete)
}

/// Prints the warnings of a segment that was not read whole (rows skipped as too long, a
/// damaged final member); returns whether it was read whole. Shared with `stats`.
pub(crate) fn report(file: &Path, outcome: &ReadOutcome) -> bool {
    if let Some(first) = &outcome.first_long_row {
        eprintln!(
            "nixl-telemetry: warning: {}: skipped {} rows longer than {} bytes (the first is \
             row {}, in the gzip member at byte {}); the rows after them were read",
            file.display(),
            outcome.long_rows,
            MAX_ROW_BYTES,
            first.row,
            first.member_offset
        );
    }
    if let Some(t) = &outcome.truncated {
        eprintln!(
            "nixl-telemetry: warning: {}: truncated or damaged gzip member at byte {} ({}); \
             {} complete rows were read from this file",
            file.display(),
            t.offset,
            t.error,
            outcome.rows
        );
    }
    outcome.truncated.is_none() && outcome.long_rows == 0
}

fn cat(paths: &[PathBuf]) -> io::Result<bool> {
    let files = expand(paths)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let complete = read_all(&files, |row| {
        out.write_all(row)?;
        out.write_all(b"\n")
    })?;
    out.flush()?;
    Ok(complete)
}

/// Aggregates of one (namespace, component, worker_id, dp_rank).
#[derive(Debug, Default)]
struct RankSummary {
    rows: u64,
    first_counter: Option<u64>,
    last_counter: Option<u64>,
    /// Forward jumps of more than one that sampling does not explain (to a row written in full
    /// mode, where every valid payload is written).
    gaps: u64,
    /// Counter values skipped by those jumps.
    missing: u64,
    /// Forward jumps of more than one to a sampled row: by design, since a sampled row is the
    /// newest payload of its interval and the ones before it were coalesced.
    sampling_gaps: u64,
    /// Counter values skipped by those jumps (coalesced by the sampler).
    coalesced: u64,
    /// Rows whose counter did not increase (a restarted producer, or out-of-order rows).
    non_increasing: u64,
    first_observed_ms: Option<u64>,
    last_observed_ms: Option<u64>,
    heartbeats: u64,
    wall_time_sum: f64,
    busy_rows: u64,
}

impl RankSummary {
    /// Adds one row: its counter, whether it was written by sampling (`capture_mode`
    /// `sampled`), when it was observed and its wall time.
    fn add(
        &mut self,
        counter: u64,
        sampled: bool,
        observed_ms: Option<u64>,
        wall_time: Option<f64>,
    ) {
        self.rows += 1;
        if let Some(prev) = self.last_counter {
            if counter > prev + 1 && sampled {
                self.sampling_gaps += 1;
                self.coalesced += counter - prev - 1;
            } else if counter > prev + 1 {
                self.gaps += 1;
                self.missing += counter - prev - 1;
            } else if counter <= prev {
                self.non_increasing += 1;
            }
        }
        self.first_counter.get_or_insert(counter);
        self.last_counter = Some(counter);
        if let Some(t) = observed_ms {
            self.first_observed_ms = Some(self.first_observed_ms.map_or(t, |f| f.min(t)));
            self.last_observed_ms = Some(self.last_observed_ms.map_or(t, |l| l.max(t)));
        }
        match wall_time {
            Some(w) if w > 0.0 => {
                self.wall_time_sum += w;
                self.busy_rows += 1;
            }
            _ => self.heartbeats += 1,
        }
    }

    fn span_s(&self) -> f64 {
        match (self.first_observed_ms, self.last_observed_ms) {
            (Some(a), Some(b)) => (b - a) as f64 / 1000.0,
            _ => 0.0,
        }
    }

    fn mean_wall_time(&self) -> Option<f64> {
        (self.busy_rows > 0).then(|| self.wall_time_sum / self.busy_rows as f64)
    }
}

/// The rows of one (namespace, component, worker_id, dp_rank): two components of one producer
/// (same worker and rank) are two rows.
type RankKey = (String, String, String, u64);

fn summary(paths: &[PathBuf], as_json: bool) -> io::Result<bool> {
    let files = expand(paths)?;
    let mut ranks: BTreeMap<RankKey, RankSummary> = BTreeMap::new();
    let mut rows = 0u64;
    let mut unparsable = 0u64;
    let mut telemetry_rows = 0u64;
    let complete = read_all(&files, |row| {
        rows += 1;
        let parsed: Option<Value> = serde_json::from_slice(row).ok();
        let event = parsed.as_ref().map(|v| &v["event"]);
        if event.is_some_and(|e| e["schema"] == NIXL_EVENT_SCHEMA) {
            telemetry_rows += 1;
            return Ok(());
        }
        let fpm = event.map(|e| &e["fpm"]);
        let source = event.map(|e| &e["source"]);
        let text =
            |v: Option<&Value>, key: &str| v.and_then(|v| v[key].as_str()).unwrap_or("").to_owned();
        let key = fpm.and_then(|f| {
            Some((
                text(source, "namespace"),
                text(source, "component"),
                f["worker_id"].as_str()?.to_owned(),
                f["dp_rank"].as_u64()?,
            ))
        });
        let counter = fpm.and_then(|f| f["counter_id"].as_u64());
        match (key, counter) {
            (Some(key), Some(counter)) => ranks.entry(key).or_default().add(
                counter,
                event.is_some_and(|e| e["capture_mode"] == "sampled"),
                event.and_then(|e| e["observed_at_unix_ms"].as_u64()),
                fpm.and_then(|f| f["wall_time"].as_f64()),
            ),
            _ => unparsable += 1,
        }
        Ok(())
    })?;
    if telemetry_rows > 0 && ranks.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "these are NIXL telemetry events written by the TRACE exporter ({telemetry_rows} \
                 rows of schema {NIXL_EVENT_SCHEMA}), not forward-pass metrics: summarise them \
                 with `nixl-telemetry stats {}`",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        ));
    }
    unparsable += telemetry_rows;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if as_json {
        let list: Vec<Value> = ranks
            .iter()
            .map(|((namespace, component, worker, rank), s)| {
                json!({
                    "namespace": namespace,
                    "component": component,
                    "worker_id": worker,
                    "dp_rank": rank,
                    "rows": s.rows,
                    "first_counter_id": s.first_counter,
                    "last_counter_id": s.last_counter,
                    "counter_gaps": s.gaps,
                    "missing_counters": s.missing,
                    "sampling_gaps": s.sampling_gaps,
                    "coalesced_counters": s.coalesced,
                    "non_increasing_counters": s.non_increasing,
                    "first_observed_at_unix_ms": s.first_observed_ms,
                    "last_observed_at_unix_ms": s.last_observed_ms,
                    "span_s": s.span_s(),
                    "heartbeats": s.heartbeats,
                    "mean_wall_time_s": s.mean_wall_time(),
                })
            })
            .collect();
        let doc = json!({
            "files": files.len(),
            "rows": rows,
            "unparsable_rows": unparsable,
            "complete": complete,
            "ranks": list,
        });
        writeln!(out, "{doc}")?;
    } else {
        writeln!(
            out,
            "{:<12} {:<12} {:<20} {:>7} {:>10} {:>14} {:>14} {:>6} {:>9} {:>10} {:>10} {:>10} {:>12}",
            "namespace",
            "component",
            "worker_id",
            "dp_rank",
            "rows",
            "first_counter",
            "last_counter",
            "gaps",
            "missing",
            "coalesced",
            "span_s",
            "heartbeats",
            "mean_wall_s"
        )?;
        for ((namespace, component, worker, rank), s) in &ranks {
            let mean = s
                .mean_wall_time()
                .map_or_else(|| "-".to_owned(), |m| format!("{m:.6}"));
            writeln!(
                out,
                "{:<12} {:<12} {:<20} {:>7} {:>10} {:>14} {:>14} {:>6} {:>9} {:>10} {:>10.3} {:>10} {:>12}",
                namespace,
                component,
                worker,
                rank,
                s.rows,
                s.first_counter.unwrap_or(0),
                s.last_counter.unwrap_or(0),
                s.gaps,
                s.missing,
                s.coalesced,
                s.span_s(),
                s.heartbeats,
                mean
            )?;
        }
        writeln!(
            out,
            "{} files, {rows} rows, {} ranks, {unparsable} unparsable rows{}",
            files.len(),
            ranks.len(),
            if complete {
                ""
            } else {
                " (some files truncated: see warnings)"
            }
        )?;
        if ranks.values().any(|s| s.coalesced > 0) {
            writeln!(
                out,
                "coalesced: counter values between sampled rows (DYN_FPM_MODE=sampled writes the \
                 newest payload of each interval), skipped by design; gaps and missing count \
                 only the gaps sampling does not explain"
            )?;
        }
    }
    out.flush()?;
    Ok(complete)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_and_means() {
        let mut s = RankSummary::default();
        s.add(1, false, Some(1000), Some(0.5));
        s.add(2, false, Some(1100), Some(0.0));
        s.add(5, false, Some(3000), Some(1.5));
        s.add(5, false, Some(2000), None);
        assert_eq!((s.rows, s.gaps, s.missing, s.non_increasing), (4, 1, 2, 1));
        assert_eq!((s.first_counter, s.last_counter), (Some(1), Some(5)));
        assert_eq!(s.span_s(), 2.0);
        assert_eq!(s.heartbeats, 2);
        assert_eq!(s.mean_wall_time(), Some(1.0));
        // A jump to a sampled row is sampling's, not a gap.
        s.add(9, true, Some(4000), None);
        assert_eq!((s.gaps, s.missing), (1, 2));
        assert_eq!((s.sampling_gaps, s.coalesced), (1, 3));
    }
}
