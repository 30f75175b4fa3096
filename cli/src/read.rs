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
    let mut ring = RingReader::open(path)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let text = format == Format::Text;
    if text {
        writeln!(out, "Telemetry path: {}", path.display())?;
        writeln!(
            out,
            "Successfully opened telemetry buffer (version: {})",
            ring.header().version
        )?;
        writeln!(out, "Buffer capacity: {} events", ring.capacity())?;
        out.flush()?;
    }
    if follow {
        output::catch_ctrl_c();
    }
    let mut total = 0u64;
    loop {
        match ring.pop() {
            Some(event) => {
                total += 1;
                let name = event.name();
                if !filters.is_empty() && !filters.iter().any(|f| fnmatch(f, &name)) {
                    continue;
                }
                if text {
                    output::write_event_block(&mut out, &event)?;
                } else {
                    output::write_event_json(&mut out, &event)?;
                }
                if follow {
                    out.flush()?;
                }
            }
            None if follow && !output::interrupted() => {
                out.flush()?;
                std::thread::sleep(POLL_INTERVAL);
            }
            None => break,
        }
        if follow && output::interrupted() {
            break;
        }
    }
    if text {
        writeln!(out)?;
        writeln!(out, "Total events read: {total}")?;
        writeln!(out, "Final buffer size: {} events", ring.len())?;
    }
    out.flush()?;
    Ok(())
}
