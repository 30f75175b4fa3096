//! The rings named on a command line (files and directories of rings), and reading them: by
//! consuming (NIXL's semantics) or by peeking (nothing is taken from another reader), once or
//! following them like `tail -F` (waiting for a missing file, reopening a replaced one).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nixl_telemetry_core::ring::loss_file;
use nixl_telemetry_core::{Event, RingReader};

use crate::output::CliError;
use nixl_telemetry_base::sync::LockUnpoisoned;

/// How events are taken from a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Advance `read_pos` (the ring's reader; NIXL's readers do this).
    Consume,
    /// Leave `read_pos` alone: another reader still gets every event.
    Peek,
    /// Leave `read_pos` alone, reading from it each time (what a destructive read looks at,
    /// writes, and then consumes with [`Tracked::commit`]).
    Look,
}

/// Where notes go instead of stderr while a full-screen view owns the terminal.
static HELD_NOTES: Mutex<Option<Vec<String>>> = Mutex::new(None);

/// Prints one note line on stderr, or keeps it for [`take_notes`] while notes are held.
pub fn note(text: &str) {
    let mut held = HELD_NOTES.lock_unpoisoned();
    match held.as_mut() {
        Some(notes) => notes.push(text.to_owned()),
        None => eprintln!("nixl-telemetry: {text}"),
    }
}

/// From now on, keeps notes for [`take_notes`] instead of printing them (`true`), or prints
/// them again (`false`).
pub fn hold_notes(hold: bool) {
    let mut held = HELD_NOTES.lock_unpoisoned();
    *held = hold.then(Vec::new);
}

/// The notes kept since the last call.
pub fn take_notes() -> Vec<String> {
    let mut held = HELD_NOTES.lock_unpoisoned();
    held.as_mut().map(std::mem::take).unwrap_or_default()
}

/// One ring file: open, or waited for.
pub struct Tracked {
    /// The file.
    pub path: PathBuf,
    /// The agent name (the file name).
    pub name: String,
    reader: Option<RingReader>,
    /// Where the next peek starts.
    cursor: Option<u64>,
    /// The last state announced on stderr, so that a state is announced once.
    announced: Option<String>,
}

impl Tracked {
    fn new(path: PathBuf, reader: Option<RingReader>) -> Tracked {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Tracked {
            path,
            name,
            reader,
            cursor: None,
            announced: None,
        }
    }

    /// The open ring, if any.
    pub fn reader(&self) -> Option<&RingReader> {
        self.reader.as_ref()
    }

    fn announce(&mut self, state: String) {
        if self.announced.as_deref() != Some(state.as_str()) {
            note(&state);
            self.announced = Some(state);
        }
    }

    /// Takes at most `max` events. Without `follow`, a failure is an error; with it, a ring
    /// that is missing, truncated, deleted or replaced is waited for and reopened, with one
    /// line on stderr per change.
    pub fn poll(&mut self, mode: Mode, max: usize, follow: bool) -> Result<Vec<Event>, CliError> {
        if self.reader.is_none() {
            match RingReader::open(&self.path) {
                Ok(r) => {
                    if self.announced.is_some() {
                        self.announce(format!(
                            "{}: reading the ring (capacity {} events)",
                            self.path.display(),
                            r.capacity()
                        ));
                    }
                    self.reader = Some(r);
                    self.cursor = None;
                }
                Err(e) if follow => {
                    self.announce(format!("waiting for {}: {e}", self.path.display()));
                    return Ok(Vec::new());
                }
                Err(e) => return Err(e.into()),
            }
        }
        let Some(ring) = self.reader.as_mut() else {
            return Ok(Vec::new());
        };
        let mut events = Vec::new();
        let mut failed = None;
        match mode {
            Mode::Consume => {
                while events.len() < max {
                    match ring.try_pop() {
                        Ok(Some(e)) => events.push(e),
                        Ok(None) => break,
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
            }
            Mode::Peek => match ring.peek(self.cursor, max) {
                Ok(p) => {
                    self.cursor = Some(p.next);
                    events = p.events;
                }
                Err(e) => failed = Some(e),
            },
            Mode::Look => match ring.peek(None, max) {
                Ok(p) => events = p.events,
                Err(e) => failed = Some(e),
            },
        }
        if let Some(e) = failed {
            if !follow {
                return Err(e.into());
            }
        }
        if follow && events.is_empty() {
            if let Some(why) = ring.replaced() {
                self.reader = None;
                self.announce(format!(
                    "{} is no longer the ring being read ({why}): reopening it",
                    self.path.display()
                ));
                return self.poll(mode, max, follow);
            }
        }
        Ok(events)
    }
}

impl Tracked {
    /// Takes at most `limit` events, handing them to `each` in batches of at most
    /// [`BATCH`] events, so that memory stays bounded whatever the ring's size; returns how
    /// many were taken. Failures as for [`Tracked::poll`].
    pub fn take_batches(
        &mut self,
        mode: Mode,
        limit: usize,
        follow: bool,
        mut each: impl FnMut(&[Event]) -> Result<(), CliError>,
    ) -> Result<usize, CliError> {
        let mut taken = 0;
        while taken < limit {
            let batch = self.poll(mode, (limit - taken).min(BATCH), follow)?;
            if batch.is_empty() {
                break;
            }
            taken += batch.len();
            each(&batch)?;
        }
        Ok(taken)
    }

    /// Consumes `events`, the first events a [`Mode::Look`] poll returned, once they were
    /// delivered: pops them while the ring's oldest events are these, and returns how many it
    /// popped (fewer when another reader took them, or the ring changed, meanwhile). Together
    /// with that poll, a destructive read that consumes only what it delivered.
    pub fn commit(&mut self, events: &[Event]) -> usize {
        let Some(ring) = self.reader.as_mut() else {
            return 0;
        };
        let mut taken = 0;
        for seen in events {
            match ring.try_pop() {
                // The same event: nothing but this reader consumes the ring.
                Ok(Some(e)) if e == *seen => taken += 1,
                // Another reader took it meanwhile, or the ring changed: stop here.
                _ => break,
            }
        }
        taken
    }

    /// The number of events in the ring now (0 while it is not open).
    pub fn pending(&self) -> usize {
        self.reader.as_ref().map_or(0, |r| r.len() as usize)
    }
}

/// Most events held in memory at once per ring: 65,536 (1 MiB).
pub const BATCH: usize = 1 << 16;

/// The rings of the arguments: ring files, and every ring file of a directory.
pub struct RingSet {
    /// The rings, in argument order (a directory's in name order).
    pub rings: Vec<Tracked>,
    /// Directories given, rescanned for new rings when following.
    dirs: Vec<PathBuf>,
}

impl RingSet {
    /// Finds the rings of `args`. A file is opened (an error when it is not a ring, unless
    /// `follow`: then it is waited for); a directory contributes every entry that opens as a
    /// ring, and each other entry is skipped with a note on stderr. Without `follow`, a
    /// directory without any ring is an error.
    pub fn open(args: &[PathBuf], follow: bool) -> Result<RingSet, CliError> {
        let mut set = RingSet {
            rings: Vec::new(),
            dirs: Vec::new(),
        };
        for arg in args {
            if arg.is_dir() {
                let before = set.rings.len();
                set.dirs.push(arg.clone());
                set.scan(arg, true)?;
                if set.rings.len() == before {
                    if !follow {
                        return Err(CliError::Telemetry(nixl_telemetry_core::Error::new(
                            nixl_telemetry_core::Status::NotFound,
                            format!("no telemetry ring in directory {}", arg.display()),
                        )));
                    }
                    note(&format!(
                        "no telemetry ring in {} yet: watching it",
                        arg.display()
                    ));
                }
            } else if !set.contains(arg) {
                let reader = match RingReader::open(arg) {
                    Ok(r) => Some(r),
                    Err(_) if follow => None,
                    Err(e) => return Err(e.into()),
                };
                set.rings.push(Tracked::new(arg.clone(), reader));
            }
        }
        Ok(set)
    }

    fn contains(&self, path: &Path) -> bool {
        self.rings.iter().any(|r| r.path == path)
    }

    /// Adds the rings of `dir` not yet in the set; notes the other entries when `first`.
    fn scan(&mut self, dir: &Path, first: bool) -> Result<(), CliError> {
        let entries = std::fs::read_dir(dir).map_err(|e| {
            CliError::Telemetry(nixl_telemetry_core::Error::io(
                format!("cannot list {}", dir.display()),
                &e,
            ))
        })?;
        let paths: BTreeSet<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        for path in paths {
            let loss_file = path
                .file_name()
                .is_some_and(|n| loss_file::is_loss_file_name(&n.to_string_lossy()));
            if self.contains(&path) || path.is_dir() || loss_file {
                continue;
            }
            match RingReader::open(&path) {
                Ok(reader) => {
                    if !first {
                        note(&format!("new ring {}", path.display()));
                    }
                    self.rings.push(Tracked::new(path, Some(reader)));
                }
                Err(e) if first => note(&format!("note: skipping a file that is not a ring: {e}")),
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Looks for rings created in the directories since the last look (when following).
    pub fn rescan(&mut self) {
        for dir in self.dirs.clone() {
            let _ = self.scan(&dir, false);
        }
    }
}
