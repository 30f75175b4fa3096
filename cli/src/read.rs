//! `nixl-telemetry read`: print a ring's events like NIXL's C++ reader, or as JSON lines.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use nixl_telemetry::filter::fnmatch;
use nixl_telemetry::RingReader;

use crate::output::{self, CliResult, Format};

/// How long to sleep when the ring is empty in `--follow` mode (as NIXL's readers do).
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Reads `path`, printing every event (matching one of `filters`, when given); with `follow`,
/// keeps polling until Ctrl+C.
pub fn run(path: &Path, follow: bool, format: Format, filters: &[String]) -> CliResult {
    if follow {
        // Before opening, so a Ctrl+C at any point ends the command cleanly.
        output::catch_ctrl_c();
    }
    let text = format == Format::Text;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if text {
        writeln!(out, "Telemetry path: {}", path.display())?;
        writeln!(out, "Opening telemetry buffer: {}", path.display())?;
        if follow {
            writeln!(out, "Press Ctrl+C to stop reading telemetry...")?;
        }
    }
    let mut ring = RingReader::open(path)?;
    if text {
        writeln!(
            out,
            "Successfully opened telemetry buffer (version: {})",
            ring.header().version
        )?;
        writeln!(out, "Buffer capacity: {} events", ring.capacity())?;
        out.flush()?;
    }
    let (mut printed, mut skipped) = (0u64, 0u64);
    loop {
        if follow && output::interrupted() {
            break;
        }
        match ring.try_pop()? {
            Some(event) => {
                let name = event.name();
                if !filters.is_empty() && !filters.iter().any(|f| fnmatch(f, &name)) {
                    skipped += 1;
                    continue;
                }
                printed += 1;
                if text {
                    output::write_event_block(&mut out, &event)?;
                } else {
                    output::write_event_json(&mut out, &event)?;
                }
                if follow {
                    out.flush()?;
                }
            }
            None if follow => {
                out.flush()?;
                output::sleep_unless_interrupted(POLL_INTERVAL);
            }
            None => break,
        }
    }
    if text {
        writeln!(out)?;
        writeln!(out, "Total events read: {printed}")?;
        if skipped > 0 {
            writeln!(out, "Events skipped by --filter: {skipped}")?;
        }
        writeln!(out, "Final buffer size: {} events", ring.len())?;
    }
    out.flush()?;
    Ok(())
}
