//! `nixl-telemetry read`: print rings' events like NIXL's C++ reader, or as JSON lines;
//! consuming them (NIXL's semantics) or, with `--peek`, leaving them for another reader.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::filter::EventFilter;
use crate::output::{self, CliError, CliResult, Format};
use crate::rings::{Mode, RingSet, Tracked};

/// How long to sleep when every ring is empty in `--follow` mode (as NIXL's readers do).
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Most events taken from one ring per poll when following, so that one busy ring cannot
/// starve the others.
const FOLLOW_BATCH: usize = 4096;

/// Options of `read`.
#[derive(clap::Args, Debug)]
pub struct ReadArgs {
    /// Ring files (`NIXL_TELEMETRY_DIR/<agent name>`) and directories of rings (every ring file
    /// in it; other files are skipped with a note).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Keep reading new events (polling every 500 ms) until Ctrl+C, like `tail -F`: wait for a
    /// ring that does not exist yet, reopen one that is replaced (another file, or a new
    /// header), and say so on stderr. Without it, read what is there and exit.
    #[arg(long)]
    follow: bool,
    /// Read without consuming: `read_pos` is not advanced, so another reader (NIXL's, or a
    /// later `read`) still gets every event.
    #[arg(long)]
    peek: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Only print events whose name matches this POSIX glob (repeatable). A glob matching none
    /// of the 21 event names is a usage error (exit status 2), and nothing is read.
    #[arg(long = "filter", value_name = "GLOB")]
    filters: Vec<String>,
}

/// What was read from one ring.
#[derive(Clone, Copy, Default)]
struct Counts {
    printed: u64,
    skipped: u64,
}

/// Runs `read`.
pub fn run(args: &ReadArgs) -> CliResult {
    // Checked before any ring is opened: a typo consumes nothing.
    let filter = EventFilter::new(&args.filters)?;
    if args.follow {
        // Before opening, so a Ctrl+C at any point ends the command cleanly.
        output::catch_ctrl_c();
    }
    let mut set = RingSet::open(&args.paths, args.follow)?;
    let mode = if args.peek { Mode::Peek } else { Mode::Consume };
    let several = set.rings.len() > 1 || args.paths.iter().any(|p| p.is_dir());
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let text = args.format == Format::Text;
    let mut reader = Printer {
        filter,
        text,
        several,
    };
    let mut counts: Vec<Counts> = set.rings.iter().map(|_| Counts::default()).collect();
    if !args.follow {
        for (ring, counts) in set.rings.iter_mut().zip(&mut counts) {
            if text {
                preamble(&mut out, ring)?;
            }
            // What is there now, and no more: a writer filling the ring as fast as it is read
            // cannot keep this going.
            let limit = ring.pending();
            let name = ring.name.clone();
            if mode == Mode::Consume {
                consume_printing(ring, &mut reader, &mut out, counts, limit, false)?;
            } else {
                ring.take_batches(mode, limit, false, |events| {
                    Ok(reader.print(&mut out, &name, events, counts)?)
                })?;
            }
            if text {
                totals(&mut out, ring, counts, args.peek)?;
            }
        }
    } else {
        if text {
            for ring in set.rings.iter().filter(|r| r.reader().is_some()) {
                preamble(&mut out, ring)?;
            }
            writeln!(out, "Press Ctrl+C to stop reading telemetry...")?;
        }
        out.flush()?;
        let mut idle_polls = 0u32;
        while !output::interrupted() {
            let mut any = false;
            for (ring, counts) in set.rings.iter_mut().zip(&mut counts) {
                if mode == Mode::Consume {
                    any |=
                        consume_printing(ring, &mut reader, &mut out, counts, FOLLOW_BATCH, true)?
                            > 0;
                    continue;
                }
                let events = ring.poll(mode, FOLLOW_BATCH, true)?;
                any |= !events.is_empty();
                reader.print(&mut out, &ring.name, &events, counts)?;
            }
            out.flush()?;
            if !any {
                idle_polls += 1;
                if idle_polls.is_multiple_of(4) {
                    set.rescan();
                    counts.resize_with(set.rings.len(), Counts::default);
                }
                output::sleep_unless_interrupted(POLL_INTERVAL);
            }
        }
        if text {
            for (ring, counts) in set.rings.iter().zip(&counts) {
                if several {
                    writeln!(out, "\nAgent: {} ({})", ring.name, ring.path.display())?;
                }
                totals(&mut out, ring, counts, args.peek)?;
            }
        }
    }
    if text && several {
        writeln!(
            out,
            "\nNode total: {} events read from {} rings",
            counts.iter().map(|c| c.printed).sum::<u64>(),
            set.rings.len()
        )?;
    }
    out.flush()?;
    Ok(())
}

/// Events printed and consumed per write: a closed output (`read ring | head`) leaves at most
/// this many printed events in the ring (shown again by the next read), and consumes none that
/// were not printed.
const CONSUME_CHUNK: usize = 256;

/// Consumes at most `limit` events of `ring`, printing them first: each chunk is written and
/// flushed before it is consumed, so a write that fails (the output was closed) consumes
/// nothing more, and says on stderr how many events were printed. Returns how many were
/// consumed.
fn consume_printing(
    ring: &mut Tracked,
    printer: &mut Printer,
    out: &mut impl Write,
    counts: &mut Counts,
    limit: usize,
    follow: bool,
) -> Result<usize, CliError> {
    let mut consumed = 0;
    while consumed < limit {
        let mut chunk = Vec::new();
        let mut printed = *counts;
        let name = ring.name.clone();
        let taken = ring.take_delivered(CONSUME_CHUNK.min(limit - consumed), follow, |events| {
            printer.print(&mut chunk, &name, events, &mut printed)?;
            out.write_all(&chunk)?;
            out.flush()
        });
        match taken {
            Ok(0) => break,
            Ok(n) => {
                *counts = printed;
                consumed += n;
            }
            Err(e) => {
                if output::is_broken_pipe(&e) {
                    eprintln!(
                        "nixl-telemetry read: the output was closed after {} events of {} were \
                         printed; the events not printed are left in the ring",
                        counts.printed,
                        ring.path.display()
                    );
                }
                return Err(e);
            }
        }
    }
    Ok(consumed)
}

/// Prints events as they are read.
struct Printer {
    filter: EventFilter,
    text: bool,
    several: bool,
}

impl Printer {
    fn print(
        &mut self,
        out: &mut impl Write,
        agent: &str,
        events: &[nixl_telemetry_core::Event],
        counts: &mut Counts,
    ) -> std::io::Result<()> {
        for event in events {
            if !self.filter.matches(&event.name()) {
                counts.skipped += 1;
                continue;
            }
            counts.printed += 1;
            if self.text {
                output::write_event_block(out, event, self.several.then_some(agent))?;
            } else {
                output::write_event_json(out, event, agent)?;
            }
        }
        Ok(())
    }
}

/// The lines NIXL's reader prints when it opens a ring.
fn preamble(out: &mut impl Write, ring: &Tracked) -> std::io::Result<()> {
    let path = ring.path.display();
    writeln!(out, "Telemetry path: {path}")?;
    writeln!(out, "Opening telemetry buffer: {path}")?;
    if let Some(r) = ring.reader() {
        writeln!(
            out,
            "Successfully opened telemetry buffer (version: {})",
            r.header().version
        )?;
        writeln!(out, "Buffer capacity: {} events", r.capacity())?;
    }
    Ok(())
}

/// The lines NIXL's reader prints when it stops.
fn totals(
    out: &mut impl Write,
    ring: &Tracked,
    counts: &Counts,
    peek: bool,
) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "Total events read: {}", counts.printed)?;
    if counts.skipped > 0 {
        writeln!(out, "Events skipped by --filter: {}", counts.skipped)?;
    }
    if let Some(r) = ring.reader() {
        writeln!(out, "Final buffer size: {} events", r.len())?;
        if let Some(lost) = r.lost_events().filter(|&n| n > 0) {
            writeln!(
                out,
                "Events the writer could not put into this ring: {lost} (its reader was behind, \
                 or a flush was larger than the ring)"
            )?;
        }
    }
    if peek {
        writeln!(out, "(--peek: nothing was consumed)")?;
    }
    Ok(())
}
