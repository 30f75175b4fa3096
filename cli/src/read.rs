//! `nixl-telemetry read`: print rings' events like NIXL's C++ reader, or as JSON lines;
//! consuming them (NIXL's semantics: only once the output accepted them, and a pipe's reader
//! took them) or, with `--peek`, leaving them for another reader.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use nixl_telemetry_core::ring::loss_file::LossCount;

use crate::filter::EventFilter;
use crate::output::{self, CliError, CliResult, Format};
use crate::rings::{Mode, RingSet, Tracked};
use crate::stdout::{Stdout, Unread};

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
    /// Print at most N events of each ring (the events --filter skips among them are not
    /// counted), then stop: consuming, exactly the events printed, and those skipped before the
    /// last of them, are consumed. Not with --follow.
    #[arg(long, value_name = "N", conflicts_with = "follow")]
    #[arg(value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
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
    let mut out = Stdout::open()?;
    let text = args.format == Format::Text;
    let mut reader = Reader {
        printer: Printer {
            filter,
            text,
            several,
            count: args.count,
        },
        mode,
        chunk: Vec::new(),
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
            reader.read(ring, &mut out, counts, limit, false)?;
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
        let mut idle_polls = 0u32;
        while !output::interrupted() {
            let mut any = false;
            for (ring, counts) in set.rings.iter_mut().zip(&mut counts) {
                any |= reader.read(ring, &mut out, counts, FOLLOW_BATCH, true)? > 0;
            }
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
    Ok(())
}

/// Most events printed per write: the output of one chunk is made in memory and written at
/// once (a few hundred KiB of text), then its events are consumed.
const CHUNK: usize = 4096;

/// Reads rings into the output, chunk by chunk.
struct Reader {
    printer: Printer,
    mode: Mode,
    /// The output of the chunk being written.
    chunk: Vec<u8>,
}

impl Reader {
    /// Reads at most `limit` events of `ring` into `out` (fewer once `--count` is reached);
    /// returns how many were taken. Consuming, the events are looked at, written, and then
    /// consumed: those whose output `out` accepted whole and, into a pipe, whose reader took it
    /// whole (and the events `--filter` skipped before them), no more. A write that fails, or a
    /// pipe closed by its reader (`| head`), consumes nothing else, and says on stderr how many
    /// events were printed.
    fn read(
        &mut self,
        ring: &mut Tracked,
        out: &mut Stdout,
        counts: &mut Counts,
        limit: usize,
        follow: bool,
    ) -> Result<usize, CliError> {
        let consume = self.mode == Mode::Consume;
        let mut taken = 0;
        while taken < limit && !self.printer.done(counts) {
            let max = CHUNK.min(limit - taken);
            let events = ring.poll(if consume { Mode::Look } else { self.mode }, max, follow)?;
            if events.is_empty() {
                break;
            }
            self.chunk.clear();
            let placed =
                self.printer
                    .print(&mut self.chunk, &ring.name, &events, counts.printed)?;
            let (accepted, written) = out.write_counting(&self.chunk);
            // Into a pipe, what its reader never took is the last bytes written: of this chunk,
            // unless it is so much that it reaches back into what came before.
            let unread = if consume {
                out.wait_taken(output::interrupted)
            } else {
                Unread::default()
            };
            let seen = accepted.saturating_sub(unread.bytes);
            let delivered = placed.partition_point(|p| p.end <= seen);
            let done = if consume {
                ring.commit(&events[..delivered])
            } else {
                delivered
            };
            counts.add(&placed[..done]);
            taken += done;
            let failed = match written {
                Ok(()) if unread.closed => Err(std::io::ErrorKind::BrokenPipe.into()),
                other => other,
            };
            if let Err(e) = failed {
                eprintln!(
                    "nixl-telemetry read: the output {} after {} events of {} were printed; the \
                     events not printed are left in the ring",
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        "was closed"
                    } else {
                        "failed"
                    },
                    counts.printed,
                    ring.path.display()
                );
                return Err(e.into());
            }
            if done < events.len() {
                // `--count` was reached, or another reader took the ring's events meanwhile.
                break;
            }
        }
        Ok(taken)
    }
}

/// Where one event taken ended in the output of its chunk.
struct Placed {
    /// The length of the chunk's output once this event's lines are in it (for an event
    /// skipped by `--filter`, the length before it: it needs nothing written).
    end: usize,
    /// Whether it was printed (else `--filter` skipped it).
    printed: bool,
}

/// What was read from one ring.
#[derive(Clone, Copy, Default)]
struct Counts {
    printed: u64,
    skipped: u64,
}

impl Counts {
    fn add(&mut self, placed: &[Placed]) {
        let printed = placed.iter().filter(|p| p.printed).count() as u64;
        self.printed += printed;
        self.skipped += placed.len() as u64 - printed;
    }
}

/// Prints events in the chosen format.
struct Printer {
    filter: EventFilter,
    text: bool,
    several: bool,
    /// `--count`: the most events printed per ring.
    count: Option<u64>,
}

impl Printer {
    /// Whether a ring with these counts has printed all `--count` allows.
    fn done(&self, counts: &Counts) -> bool {
        self.count.is_some_and(|n| counts.printed >= n)
    }

    /// Appends the output of `events` of ring `agent` to `out`, after `printed` events of that
    /// ring, stopping where `--count` is reached; says where each event taken ended.
    fn print(
        &self,
        out: &mut Vec<u8>,
        agent: &str,
        events: &[nixl_telemetry_core::Event],
        mut printed: u64,
    ) -> std::io::Result<Vec<Placed>> {
        let mut placed = Vec::with_capacity(events.len());
        for event in events {
            if self.count.is_some_and(|n| printed >= n) {
                break;
            }
            let matches = self.filter.matches(&event.name());
            if matches {
                printed += 1;
                if self.text {
                    output::write_event_block(out, event, self.several.then_some(agent))?;
                } else {
                    output::write_event_json(out, event, agent)?;
                }
            }
            placed.push(Placed {
                end: out.len(),
                printed: matches,
            });
        }
        Ok(placed)
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
        match r.lost_events() {
            LossCount::Counted(lost) if lost > 0 => writeln!(
                out,
                "Events the writer could not put into this ring: {lost} (its reader was behind, \
                 or a flush was larger than the ring)"
            )?,
            LossCount::Untrusted(why) => writeln!(
                out,
                "Events the writer could not put into this ring: untrusted ({why}: not believed)"
            )?,
            _ => {}
        }
    }
    if peek {
        writeln!(out, "(--peek: nothing was consumed)")?;
    }
    Ok(())
}
