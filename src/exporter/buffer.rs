//! `BUFFER`: the shared-memory ring `NIXL_TELEMETRY_DIR/<agent name>` ([`crate::ring`]).
//!
//! A ring file that another process truncates, deletes or replaces while the agent runs never
//! stops the agent: a write past the end of a truncated file is absorbed by the ring's SIGBUS
//! protection ([`crate::ring`]) and noticed right after the flush; the file itself is checked
//! ([`RingWriter::is_intact`]: its size and that its path still names it) at most once per
//! second; before every flush that writes, one `sigaction` keeps the SIGBUS protection on top,
//! and at most once per millisecond (before every flush at the default run interval) one
//! `fstat` notices a truncation without touching the mapping ([`RingWriter::ready_to_write`]);
//! a truncation it does not see faults into the guard, and the events written are counted as
//! lost. A damaged ring is recreated with one warning that says what happened to it
//! ([`crate::ring::Damage`]: deleted, replaced, truncated, or a write that failed with the file
//! in place); events whose writes faulted are counted as lost. The ring's space is reserved on
//! its file system when it is created, so a file system that fills up later costs no event, and
//! one that is full when the ring is (re)created fails that creation with its error (ENOSPC,
//! EDQUOT, EIO), not with a fault.
//!
//! Events the ring cannot take are the newest of the flush, cut so that a transfer is written
//! whole or not at all ([`RingWriter::push_runs`]), and counted twice: in the collector's stats
//! and, for the ring's readers, in its loss file ([`crate::ring::loss_file`]).
//!
//! A ring that cannot take a flush loses events for one of four causes ([`Loss`]); the
//! collector warns once about a reader that is behind, a flush larger than the ring and a
//! damaged file, but a ring nobody reads (telemetry on, no reader attached: the common case,
//! whether the ring is full or one flush is larger than it) is reported once at INFO. "No reader" is recognised from the header: no reader has ever
//! moved `read_pos` since the ring was created (or reset). Each push reads `read_pos`; between
//! two pushes a reader can consume at most what was unread, fewer than `capacity` events, so a
//! masked `read_pos` that moved cannot have come back to the value seen before, and comparing
//! the values seen by consecutive pushes detects every reader that read anything.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::env::{parse_u64, Lookup};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::exporter::{flush_len, Exporter, FlushOutcome, LossCause, Reason};
use crate::owner_only::OwnFileError;
use crate::ring::layout::{Layout, LAYOUTS};
use crate::ring::loss_file::{self, LossFile};
use crate::ring::RingWriter;
use crate::settings::RING_VERSION;

/// The layout BUFFER writes, from `NIXL_TELEMETRY_RING_VERSION` (unset: NIXL's, version 4): an
/// error for a version no reader of this library reads.
pub fn ring_layout(env: Lookup) -> Result<Layout> {
    let version = match env(RING_VERSION.name)? {
        Some(v) => parse_u64(RING_VERSION.name, &v)?,
        None => RING_VERSION.default_u64(),
    };
    i32::try_from(version)
        .ok()
        .and_then(Layout::of_version)
        .ok_or_else(|| {
            Error::invalid(format!(
                "{}={version} is not a ring layout: use {} (NIXL's, or the 512-byte header of \
                 its open pull request #2018)",
                RING_VERSION.name,
                LAYOUTS.map(|l| l.version.to_string()).join(" or "),
            ))
        })
}

/// The shared-memory ring exporter, writing `NIXL_TELEMETRY_DIR/<agent name>`.
pub struct BufferExporter {
    ring: Option<RingWriter>,
    dir: PathBuf,
    agent: String,
    capacity: usize,
    layout: Layout,
    /// The reason given for a flush larger than the ring, rendered once.
    oversize_reason: Arc<str>,
    /// Why the last flush lost events, `None` when it lost none (see
    /// [`BufferExporter::loss_cause`]).
    last_loss: Option<Loss>,
    warned_recreate: bool,
    /// When the file was last checked with system calls.
    checked_at: Instant,
    /// When the file's size was last checked before a flush.
    size_checked_at: Instant,
    /// The reader's position seen by the last push (0 for a new ring).
    last_read_pos: u64,
    /// Whether a reader has ever consumed from the ring (`read_pos` moved).
    reader_seen: bool,
    /// The ring's loss file (`None` when it could not be created: warned once).
    loss_file: Option<LossFile>,
    warned_loss_file: bool,
}

/// How often the ring file itself is checked (size, and that its path still names it).
const FILE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How often, at most, a flush that writes first checks the file's size (one `fstat`, about
/// 0.4 µs here): every flush at the default 100 ms run interval; back-to-back flushes share a
/// check. The SIGBUS guard is put back on top before every flush that writes.
const SIZE_CHECK_INTERVAL: Duration = Duration::from_millis(1);

/// The cause of the last loss.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// Full, and no reader has ever consumed from the ring.
    NoReader,
    ReaderBehind,
    Oversize,
    Damaged,
}

impl BufferExporter {
    /// Creates the ring for `agent` in `dir` with `capacity` records, of `layout`.
    pub fn create(
        dir: &Path,
        agent: &str,
        capacity: usize,
        layout: Layout,
    ) -> Result<BufferExporter> {
        let mut exporter = BufferExporter {
            ring: Some(RingWriter::create_with(dir, agent, capacity, layout)?),
            dir: dir.to_owned(),
            agent: agent.to_owned(),
            capacity,
            layout,
            oversize_reason: format!(
                "the ring was empty, but one flush had more events than its {} usable slots: \
                 raise NIXL_TELEMETRY_BUFFER_SIZE or flush more often",
                capacity - 1
            )
            .into(),
            last_loss: None,
            warned_recreate: false,
            checked_at: Instant::now(),
            size_checked_at: Instant::now(),
            last_read_pos: 0,
            reader_seen: false,
            loss_file: None,
            warned_loss_file: false,
        };
        exporter.new_loss_file();
        Ok(exporter)
    }

    /// Creates the loss file of the current ring (count 0); warns once when it cannot.
    fn new_loss_file(&mut self) {
        let Some(ring) = &self.ring else {
            return;
        };
        self.loss_file = match LossFile::create(ring.path(), ring.inode()) {
            Ok(f) => Some(f),
            Err(OwnFileError::Refused(what)) => {
                if !std::mem::replace(&mut self.warned_loss_file, true) {
                    log::warn!(
                        "not using {} as the loss count of telemetry ring {}: it is {what}, \
                         not a file of this user's only it may write (in a directory others may \
                         write, it may have been planted by another user); it is left as it is \
                         and no loss count is kept beside this ring: its readers report what \
                         is there as untrusted, and the agent's stats still count every loss \
                         (events_lost)",
                        loss_file::path_for(ring.path()).display(),
                        ring.path().display()
                    );
                }
                None
            }
            Err(OwnFileError::Io(e)) => {
                self.loss_warning(&e);
                None
            }
        };
    }

    /// Writes a loss count the last lossy flush left unwritten (see [`LossFile::add`]).
    fn sync_loss_file(&mut self) {
        if let Some(f) = &mut self.loss_file {
            if let Err(e) = f.sync() {
                self.loss_warning(&e);
            }
        }
    }

    /// Warns, once for the exporter's life, that the loss count cannot be written.
    fn loss_warning(&mut self, e: &std::io::Error) {
        if !std::mem::replace(&mut self.warned_loss_file, true) {
            log::warn!(
                "cannot write the loss count of telemetry ring {} beside it ({e}); its readers \
                 will not see how many events it lost (the agent's stats still count them)",
                self.dir.join(&self.agent).display()
            );
        }
    }

    /// The ring to write, recreated first when another process damaged the file (one warning
    /// for the exporter's life); `None` while it cannot be recreated.
    fn intact_ring(&mut self, now: Instant) -> Option<&RingWriter> {
        let check_file = now.duration_since(self.checked_at) >= FILE_CHECK_INTERVAL;
        if check_file {
            self.checked_at = now;
        }
        let check_size = now.duration_since(self.size_checked_at) >= SIZE_CHECK_INTERVAL;
        if check_size {
            self.size_checked_at = now;
        }
        let intact = |ring: &RingWriter| match check_file {
            true => ring.is_intact(),
            false => ring.ready_to_write(check_size),
        };
        if self.ring.as_ref().is_some_and(intact) {
            return self.ring.as_ref();
        }
        let path = self.dir.join(&self.agent);
        if let Some(old) = self.ring.take() {
            let size = self.layout.file_size(self.capacity as u64).unwrap_or(0);
            let what = match old.damage() {
                Some(damage) => damage.describe(&path, size),
                None => format!("telemetry ring {} changed under its writer", path.display()),
            };
            drop(old); // unmaps it and releases its lock before the file is made again
            if !self.warned_recreate {
                log::warn!(
                    "{what}; recreating it (events written to it meanwhile are counted as lost)"
                );
            }
        }
        match RingWriter::create_with(&self.dir, &self.agent, self.capacity, self.layout) {
            Ok(ring) => {
                self.ring = Some(ring);
                self.last_read_pos = 0;
                self.new_loss_file();
            }
            Err(e) if !self.warned_recreate => {
                log::warn!(
                    "cannot recreate telemetry ring {}: {e}; retrying at each flush",
                    path.display()
                );
            }
            Err(_) => {}
        }
        self.warned_recreate = true;
        self.ring.as_ref()
    }
}

impl Exporter for BufferExporter {
    fn export_batch(&mut self, events: &[Event]) -> usize {
        self.push_flush(&[events], None)
    }

    /// Copies the runs straight into the ring (no intermediate batch), keeping one slot for the
    /// drop report when the ring cannot take everything. An idle flush touches nothing.
    fn export_flush(
        &mut self,
        runs: &[&[Event]],
        report: Option<Event>,
        _: &mut Vec<Event>,
    ) -> FlushOutcome {
        if report.is_none() && runs.iter().all(|r| r.is_empty()) {
            self.sync_loss_file();
            return FlushOutcome::kept(0);
        }
        let kept = self.push_flush(runs, report);
        FlushOutcome {
            kept,
            loss: self.loss_cause(),
            lost_since: 0,
        }
    }

    fn name(&self) -> &str {
        "BUFFER"
    }
}

impl BufferExporter {
    /// Pushes one flush into the ring and returns how many events it kept, noting the cause of
    /// any loss.
    fn push_flush(&mut self, runs: &[&[Event]], report: Option<Event>) -> usize {
        let total = flush_len(runs, report);
        self.last_loss = None;
        // One clock read per flush, for the checks' and the loss file's intervals.
        let now = Instant::now();
        let Some(ring) = self.intact_ring(now) else {
            self.last_loss = Some(Loss::Damaged);
            return 0;
        };
        let pushed = ring.push_runs(runs, report);
        let kept = if ring.faulted() { 0 } else { pushed.kept };
        if pushed.read_pos != self.last_read_pos {
            self.reader_seen = true;
            self.last_read_pos = pushed.read_pos;
        }
        if kept < total {
            if let Some(f) = &mut self.loss_file {
                if let Err(e) = f.add((total - kept) as u64, now) {
                    self.loss_warning(&e);
                }
            }
            // Without a reader, nobody can miss the events: whether the ring was full or the
            // flush larger than the ring, that is the no-reader case.
            self.last_loss = Some(match (kept == pushed.kept, pushed.was_empty) {
                (false, _) => Loss::Damaged,
                (true, _) if !self.reader_seen => Loss::NoReader,
                (true, true) => Loss::Oversize,
                (true, false) => Loss::ReaderBehind,
            });
        }
        kept
    }

    /// Why the last flush lost events, for the collector's message (the default cause, which
    /// costs nothing, when it lost none).
    fn loss_cause(&self) -> LossCause {
        let Some(loss) = self.last_loss else {
            return LossCause::default();
        };
        match loss {
            Loss::Oversize => LossCause::Refused(Reason::Rendered(self.oversize_reason.clone())),
            Loss::ReaderBehind => LossCause::Refused(Reason::Fixed(
                "the ring is full: its reader is not keeping up",
            )),
            Loss::NoReader => LossCause::NoReader(Reason::Fixed(
                "no reader has read from the ring since it was created",
            )),
            // The recreation warning says it.
            Loss::Damaged => LossCause::AlreadyReported,
        }
    }
}
