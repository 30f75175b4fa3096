//! The producer side of a ring: creating (or resetting) the file, owner-only and locked against
//! a second writer, and appending events published with one release store.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use memmap2::MmapOptions;

use super::layout::{Layout, EXPECTED_VERSION_OFFSET, V4, VERSION_OFFSET};
use super::mapped::Mapped;
use crate::error::{Error, Result, Status};
use crate::event::Event;
use crate::fork::{replace_in_child, ReplacedInChild};
use crate::owner_only::{self, OwnFileError};

/// Checks that `name` can safely be used as the ring's file name inside the telemetry
/// directory: not empty, no `/` or NUL, not `.` or `..`.
pub fn validate_file_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.contains('/') {
        "it contains '/'"
    } else if name.contains('\0') {
        "it contains a NUL byte"
    } else if name == "." || name == ".." {
        "it is a directory reference"
    } else {
        return Ok(());
    };
    Err(Error::invalid(format!(
        "agent name {name:?} cannot name a telemetry ring file: {reason}"
    )))
}

/// What [`RingWriter::push_runs`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// Events written.
    pub kept: usize,
    /// Whether the ring was empty before (its reader had caught up): a loss then means the
    /// batch was larger than the ring, not that the reader is behind.
    pub was_empty: bool,
    /// The reader's position (masked) as this push saw it: a producer that compares it between
    /// pushes learns whether any reader has ever consumed from the ring.
    pub read_pos: u64,
}

/// What happened to a ring file that is no longer what its readers open
/// ([`RingWriter::damage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// Its path names nothing (deleted, or its directory is gone).
    Deleted,
    /// Its path names another file.
    Replaced,
    /// Its size is no longer the ring's: the size it has.
    Resized(u64),
    /// A write into the mapping faulted although the file is in place, whole: its file system
    /// could not give it a page (full, or over a quota) or failed (an I/O error).
    WriteFailed,
}

impl Damage {
    /// The warning's first sentence for the ring at `path` of `size` bytes.
    pub fn describe(self, path: &Path, size: u64) -> String {
        let path = path.display();
        match self {
            Damage::Deleted => format!("telemetry ring {path} was deleted by another process"),
            Damage::Replaced => format!(
                "telemetry ring {path} was replaced by another file (another process created or \
                 renamed one at its name)"
            ),
            Damage::Resized(now) if now < size => format!(
                "telemetry ring {path} was truncated to {now} bytes (of {size}) by another process"
            ),
            Damage::Resized(now) => format!(
                "telemetry ring {path} was extended to {now} bytes (of {size}) by another process"
            ),
            Damage::WriteFailed => format!(
                "a write into telemetry ring {path} failed with the file in place: its file \
                 system is full, over a quota or failing (ENOSPC, EDQUOT or EIO)"
            ),
        }
    }
}

/// The producer side: creates (or resets) the ring file and appends events.
pub struct RingWriter {
    /// Declared first, so the mapping is unregistered before it is unmapped: a forked child
    /// does not keep it (nor so the file and its lock).
    _in_child: ReplacedInChild,
    /// The mapped file (the reader's tests change its header in place through it).
    pub(super) mapped: Mapped,
    path: PathBuf,
    /// Held for the writer's lifetime: the file's flock marks it as owned.
    file: File,
    /// `(st_dev, st_ino)` of that file, to notice the path naming another file.
    file_id: (u64, u64),
}

impl RingWriter {
    /// Creates the ring `dir/name` of NIXL's layout ([`V4`]) with `capacity` records:
    /// [`RingWriter::create_with`] that layout.
    pub fn create(dir: &Path, name: &str, capacity: usize) -> Result<RingWriter> {
        RingWriter::create_with(dir, name, capacity, V4)
    }

    /// Creates the ring `dir/name` of `layout` with `capacity` records (a power of two),
    /// owner-only (mode 0600), refusing symbolic links and files already owned by another live
    /// writer. An existing file of a previous run is reset (replaced when its size differs: a
    /// ring of another capacity or layout).
    pub fn create_with(
        dir: &Path,
        name: &str,
        capacity: usize,
        layout: Layout,
    ) -> Result<RingWriter> {
        validate_file_name(name)?;
        if capacity == 0 || !capacity.is_power_of_two() {
            return Err(Error::invalid(format!(
                "Telemetry buffer size must be a power of 2 for the BUFFER exporter \
                 (NIXL_TELEMETRY_BUFFER_SIZE={capacity})"
            )));
        }
        let path = dir.join(name);
        let size = layout
            .file_size(capacity as u64)
            .ok_or_else(|| Error::invalid(format!("ring capacity {capacity} is too large")))?;
        let mut file = open_for_writing(&path, false)?;
        let existing = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat {}", path.display()), &e))?
            .len();
        if existing != 0 && existing != size {
            // A ring of another size (an earlier run with another BUFFER_SIZE or layout: the
            // two layouts never give one size, their headers differ by 472 bytes): replace the
            // file rather than truncate it, so a reader still mapping the old one never
            // touches pages past its end. A ring of the same size is reset in place, as NIXL
            // does, so a reader following it sees the new events.
            std::fs::remove_file(&path)
                .map_err(|e| Error::io(format!("cannot replace {}", path.display()), &e))?;
            drop(file);
            file = open_for_writing(&path, true)?;
        }
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat {}", path.display()), &e))?;
        let file_id = (meta.dev(), meta.ino());
        let mapped_file = file
            .set_len(size)
            .map_err(|e| ("size", e))
            .and_then(|()| reserve(&file, size).map_err(|e| ("reserve the space of", e)))
            .and_then(|()| {
                let map = MmapOptions::new().len(size as usize).map_raw(&file);
                map.map_err(|e| ("map", e))
            });
        let map = match mapped_file {
            Ok(map) => map,
            Err((step, e)) => {
                // Leave no unusable file behind.
                let _ = std::fs::remove_file(&path);
                return Err(Error::io(
                    format!(
                        "cannot {step} telemetry ring {} ({size} bytes)",
                        path.display()
                    ),
                    &e,
                ));
            }
        };
        let mapped = Mapped::new(map, capacity as u64 - 1, layout);
        // Invalidate first so a reader never trusts a half-written header, reset, then publish.
        mapped.version().store(0, Ordering::Release);
        // SAFETY: the map covers `size` bytes; no other writer exists (flock held). Everything
        // but the version word is zeroed (the header's padding and positions included), then
        // the header's fields are written.
        unsafe {
            let base = mapped.map.as_mut_ptr();
            std::ptr::write_bytes(base, 0, VERSION_OFFSET);
            let after_version = EXPECTED_VERSION_OFFSET;
            std::ptr::write_bytes(base.add(after_version), 0, size as usize - after_version);
            (base.add(EXPECTED_VERSION_OFFSET) as *mut i32).write(layout.version);
        }
        mapped
            .word(layout.capacity_offset)
            .store(capacity as u64, Ordering::Relaxed);
        mapped
            .word(layout.mask_offset)
            .store(capacity as u64 - 1, Ordering::Relaxed);
        mapped.version().store(layout.version, Ordering::Release);
        log::info!(
            "Creating file-based shared memory on path: {} with size: {capacity}",
            path.display()
        );
        Ok(RingWriter {
            _in_child: replace_in_child(mapped.map.as_ptr(), mapped.map.len()),
            mapped,
            path,
            file,
            file_id,
        })
    }

    /// The ring file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ring file's inode (what its [`super::loss_file`] names).
    pub fn inode(&self) -> u64 {
        self.file_id.1
    }

    /// Whether the ring is still what readers open: puts the SIGBUS guard back on top
    /// ([`Self::ready_to_write`]) and finds no [`Self::damage`]. False when another process
    /// truncated, deleted or replaced it, or a write into it failed (writes would reach no
    /// reader). One system call (the path's `lstat`: when it names our file, its size is our
    /// file's); [`RingWriter::faulted`] is the free part of the check.
    pub fn is_intact(&self) -> bool {
        nixl_telemetry_base::fault_guard::reassert();
        self.damage().is_none()
    }

    /// What happened to the ring file, if it is no longer what its readers open: its path names
    /// nothing or another file, its size changed, or a write into the mapping faulted with the
    /// file in place (the file system could not give it a page). One `lstat`.
    pub fn damage(&self) -> Option<Damage> {
        let Ok(named) = std::fs::symlink_metadata(&self.path) else {
            return Some(Damage::Deleted);
        };
        if (named.dev(), named.ino()) != self.file_id {
            Some(Damage::Replaced)
        } else if named.len() != self.mapped.map.len() as u64 {
            Some(Damage::Resized(named.len()))
        } else if self.faulted() {
            Some(Damage::WriteFailed)
        } else {
            None
        }
    }

    /// Puts the SIGBUS guard back on top if the host replaced it
    /// ([`nixl_telemetry_base::fault_guard::reassert`]: one `sigaction`), so a write into a file truncated by
    /// another process faults into the guard ([`Self::faulted`]) whatever the host installed;
    /// with `check_size`, also checks that the file still covers the whole mapping (one
    /// `fstat`), so such a file is noticed without writing into it. False when the file is
    /// known to be truncated.
    pub fn ready_to_write(&self, check_size: bool) -> bool {
        nixl_telemetry_base::fault_guard::reassert();
        if self.faulted() {
            return false;
        }
        !check_size || self.mapped.covered_by(&self.file)
    }

    /// Whether a write went past the end of the file (it was truncated under the writer): those
    /// events reached no reader.
    pub fn faulted(&self) -> bool {
        self.mapped.guard.faulted()
    }

    /// Number of records (one fewer is usable).
    pub fn capacity(&self) -> u64 {
        self.mapped.mask + 1
    }

    /// Appends as many of `events` as fit, in order, and publishes them with one release
    /// store. Returns how many were written; the rest were lost because the ring is full.
    pub fn push_batch(&self, events: &[Event]) -> usize {
        self.push_runs(&[events], None).kept
    }

    /// Appends the `runs` in order, then `last`, as one batch published with one release store.
    /// When not everything fits, one free slot is kept for `last` (the collector's drop report:
    /// the report of losses is never itself what is lost) and the newest events of `runs` are
    /// lost: everything from the first that does not fit, moved back to the start of its
    /// transfer ([`Event::may_continue_with`]), so a transfer is written whole or not at all.
    pub fn push_runs(&self, runs: &[&[Event]], last: Option<Event>) -> Pushed {
        let m = &self.mapped;
        let w = m.write_pos().load(Ordering::Relaxed) & m.mask;
        let r = m.read_pos().load(Ordering::Acquire) & m.mask;
        let free = (r.wrapping_sub(w).wrapping_sub(1) & m.mask) as usize;
        let last = last.filter(|_| free > 0);
        let mut budget = free - last.is_some() as usize;
        let mut pos = w;
        let mut kept = 0;
        let mut write = |events: &[Event]| {
            self.write_at(pos, events);
            pos = (pos + events.len() as u64) & m.mask;
            kept += events.len();
        };
        for run in runs {
            let mut n = run.len().min(budget);
            budget -= n;
            if n < run.len() {
                // A transfer never spans two runs (staging keeps a batch in one block).
                while n > 0 && run[n - 1].may_continue_with(&run[n]) {
                    n -= 1;
                }
                budget = 0;
            }
            write(&run[..n]);
        }
        if let Some(report) = last {
            // SAFETY: one free slot was kept for the report (`budget` excluded it): it lies in
            // the data array, records are 8-byte aligned, and the reader does not read it
            // before write_pos is published below.
            unsafe { report.write_record(m.slot(pos).cast()) };
            pos = (pos + 1) & m.mask;
            kept += 1;
        }
        if kept > 0 {
            m.write_pos().store(pos, Ordering::Release);
        }
        Pushed {
            kept,
            was_empty: w == r,
            read_pos: r,
        }
    }

    /// Copies `events` (at most the free slots) into the data array from position `pos`,
    /// wrapping at its end, without publishing them.
    fn write_at(&self, pos: u64, events: &[Event]) {
        let m = &self.mapped;
        // Two contiguous runs: up to the end of the data array, then from its start.
        let first = events.len().min((m.mask + 1 - pos) as usize);
        // SAFETY: both runs lie inside the data array (pos + first <= capacity, and the rest
        // fits before pos because the caller writes at most the free slots), the records are
        // 8-byte aligned, and the consumer does not read them until write_pos is published.
        unsafe {
            write_records(m.slot(pos), &events[..first]);
            write_records(m.slot(0), &events[first..]);
        }
    }

    /// Number of unread events.
    pub fn len(&self) -> u64 {
        let (w, r) = self.mapped.positions();
        w.wrapping_sub(r) & self.mapped.mask
    }

    /// Whether a reader has consumed everything.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for RingWriter {
    fn drop(&mut self) {
        if let Err(e) = self.mapped.map.flush() {
            log::warn!("cannot sync telemetry ring {}: {e}", self.path.display());
        }
    }
}

/// Copies `events` as consecutive 16-byte records to `dst`: `Event` has exactly the record
/// layout, so this is one memcpy. The 4 padding bytes of each record are unspecified, as in
/// files written by NIXL (readers ignore them).
///
/// # Safety
/// `dst` must be writable for `16 * events.len()` bytes and not overlap `events`.
unsafe fn write_records(dst: *mut u8, events: &[Event]) {
    // SAFETY: the caller's contract: `dst` is writable for the size of `events` and does not
    // overlap it; `events` is a valid slice.
    unsafe {
        std::ptr::copy_nonoverlapping(
            events.as_ptr() as *const u8,
            dst,
            std::mem::size_of_val(events),
        )
    };
}

/// Opens (or, with `create_new`, exclusively creates) the ring file for writing: owner-only,
/// only this user's own regular file with a single link, never through a symbolic link
/// ([`owner_only::open_own_file`]), and locked against a second writer.
fn open_for_writing(path: &Path, create_new: bool) -> Result<File> {
    let shown = path.display();
    let file = owner_only::open_own_file(path, create_new).map_err(|e| match e {
        OwnFileError::Refused(what) => Error::new(
            Status::NotAllowed,
            format!("refusing to use {shown} as a telemetry ring: it is {what}"),
        ),
        OwnFileError::Io(e) => {
            let what = format!("cannot create telemetry ring {shown}");
            match missing_directory(path) {
                Some(why) => Error::new(Status::NotFound, format!("{what}: {why}")),
                None => Error::io(what, &e),
            }
        }
    })?;
    lock_exclusive(&file, path)?;
    owner_only::set_file_mode(&file).map_err(|e| Error::io(format!("cannot chmod {shown}"), &e))?;
    Ok(file)
}

/// Allocates the file's `size` bytes on its file system (`fallocate`), so that a file system
/// that fills up later never fails a write into the mapping (a fault the guard absorbs, but the
/// events written are lost): a full file system, a quota or an I/O error shows here, as what it
/// is (ENOSPC, EDQUOT, EIO). A file system that cannot reserve space (`EOPNOTSUPP`) keeps the
/// file sparse, as NIXL's are.
fn reserve(file: &File, size: u64) -> std::io::Result<()> {
    let len = libc::off_t::try_from(size).map_err(std::io::Error::other)?;
    loop {
        // SAFETY: fallocate(2) on the descriptor `file` keeps open; no memory is passed.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP | libc::ENOSYS) => return Ok(()),
            _ => return Err(e),
        }
    }
}

/// Why the directory of the ring `path` cannot hold it, when it does not exist or is not a
/// directory. Like NIXL, the BUFFER exporter never creates it: a mistyped `NIXL_TELEMETRY_DIR`
/// fails instead of collecting rings where no reader looks.
fn missing_directory(path: &Path) -> Option<String> {
    let dir = path.parent()?;
    let problem = match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => return None,
        Ok(_) => "is not a directory",
        Err(_) => "does not exist",
    };
    Some(format!(
        "the telemetry directory {} (NIXL_TELEMETRY_DIR) {problem}: create the directory first \
         (mkdir -p); like NIXL, the BUFFER exporter does not create it",
        dir.display()
    ))
}

fn lock_exclusive(file: &File, path: &Path) -> Result<()> {
    match owner_only::try_claim(file) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::new(
            Status::NotAllowed,
            format!(
                "telemetry ring {} is already being written by another agent (agent names must \
                 be unique per NIXL_TELEMETRY_DIR)",
                path.display()
            ),
        )),
        Err(err) => Err(Error::io(
            format!("cannot lock telemetry ring {}", path.display()),
            &err,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;
    use crate::ring::RingReader;

    fn ev(v: u64) -> Event {
        Event::new(EventType::AgentRxBytes, v)
    }

    /// A transfer's events as `add_xfer_stats` stages them, values `tag`.
    fn transfer(tag: u64) -> [Event; 4] {
        use EventType::*;
        [
            AgentXferPostTime,
            AgentXferTime,
            AgentTxBytes,
            AgentTxRequestsNum,
        ]
        .map(|t| Event::new(t, tag))
    }

    #[test]
    fn a_full_ring_takes_transfers_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        // 15 usable slots, one kept for the report: 14 for events.
        let w = RingWriter::create(dir.path(), "agent", 16).unwrap();
        let first: Vec<Event> = [ev(1)]
            .into_iter()
            .chain(transfer(2))
            .chain(transfer(3))
            .collect();
        let second: Vec<Event> = transfer(4).into_iter().chain(transfer(5)).collect();
        let report = Event::new(EventType::AgentTelemetryEventsDropped, 9);
        let pushed = w.push_runs(&[&first, &second], Some(report));
        // 9 + 4 fit in 14; the 5th transfer would need 4 more and gets none of them: the 14th
        // slot stays empty rather than hold a piece of it.
        assert_eq!(pushed.kept, 9 + 4 + 1);
        let mut r = RingReader::open(dir.path().join("agent")).unwrap();
        let values: Vec<u64> = r.by_ref().map(|e| e.value).collect();
        assert_eq!(values, [1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 9]);
        // A cut inside a run: 3 free slots and the report's: the transfer does not go in at
        // all, the single update before it does.
        let w = RingWriter::create(dir.path(), "small", 4).unwrap();
        let run: Vec<Event> = [ev(1)].into_iter().chain(transfer(2)).collect();
        assert_eq!(w.push_runs(&[&run], Some(report)).kept, 2);
        let mut r = RingReader::open(dir.path().join("small")).unwrap();
        assert_eq!(r.by_ref().map(|e| e.value).collect::<Vec<_>>(), [1, 9]);
    }

    #[test]
    fn header_bytes_match_nixl_v4_and_v5() {
        use crate::ring::layout::{V4, V5};
        // NIXL's offsets of write_pos, read_pos, capacity and mask, written out here, and their
        // values after one event was popped of two pushed into a capacity-16 ring.
        let fields = ["write_pos", "read_pos", "capacity", "mask"];
        let values = [2, 1, 16, 15];
        let cases = [(V4, 40, [0, 8, 24, 32]), (V5, 512, [0, 256, 8, 24])];
        for (layout, header, offsets) in cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("agent");
            // A reused file of the same size with junk everywhere is reset whole.
            std::fs::write(&path, vec![0xAB; header + 16 * 16]).unwrap();
            let w = RingWriter::create_with(dir.path(), "agent", 16, layout).unwrap();
            let mut r = RingReader::open(&path).unwrap();
            assert_eq!(r.pop(), None);
            w.push_batch(&[ev(1), Event::new(EventType::AgentTxBytes, 0x1122)]);
            assert_eq!(r.pop(), Some(ev(1)));
            let mut bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.len(), header + 16 * 16, "{layout}");
            let version = layout.version.to_ne_bytes();
            assert_eq!(bytes[16..24], [version, version].concat(), "{layout}");
            bytes[16..24].fill(0);
            for ((at, value), field) in offsets.into_iter().zip(values).zip(fields) {
                let word: [u8; 8] = bytes[at..at + 8].try_into().unwrap();
                assert_eq!(u64::from_ne_bytes(word), value, "{layout}: {field}");
                bytes[at..at + 8].fill(0);
            }
            // The rest of the header is zero. Records: type @0 and value @8; bytes 4..8 are
            // padding, unspecified (as in NIXL's files).
            assert!(bytes[..header].iter().all(|b| *b == 0), "{layout}");
            let second = &bytes[header + 16..header + 32];
            assert_eq!(second[..4], [0; 4], "{layout}");
            assert_eq!(second[8..], 0x1122u64.to_ne_bytes(), "{layout}");
            assert_eq!(r.header().version, layout.version);
            let mode = std::fs::metadata(&path).unwrap().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn keeps_capacity_minus_one_and_wraps() {
        for layout in crate::ring::layout::LAYOUTS {
            let dir = tempfile::tempdir().unwrap();
            let w = RingWriter::create_with(dir.path(), "a", 8, layout).unwrap();
            let mut r = RingReader::open(dir.path().join("a")).unwrap();
            assert_eq!(w.push_batch(&(0..10).map(ev).collect::<Vec<_>>()), 7);
            assert_eq!(r.len(), 7);
            let got: Vec<u64> = r.by_ref().take(5).map(|e| e.value).collect();
            assert_eq!(got, [0, 1, 2, 3, 4]);
            assert_eq!(w.push_batch(&(100..110).map(ev).collect::<Vec<_>>()), 5);
            let got: Vec<u64> = r.by_ref().map(|e| e.value).collect();
            assert_eq!(got, [5, 6, 100, 101, 102, 103, 104], "{layout}");
            assert!(r.pop().is_none());
            assert_eq!(r.header().version, layout.version);
        }
    }

    #[test]
    fn refuses_bad_names_sizes_links_and_second_writers() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["", ".", "..", "a/b", "../x", "a\0b"] {
            let e = RingWriter::create(dir.path(), name, 16).err().unwrap();
            assert_eq!(e.status, Status::InvalidParam, "{name:?}");
        }
        let e = RingWriter::create(dir.path(), "x", 12).err().unwrap();
        assert!(e.message.contains("power of 2"), "{}", e.message);
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let e = RingWriter::create(dir.path(), "link", 16).err().unwrap();
        assert!(e.message.contains("symbolic link"), "{}", e.message);
        let _first = RingWriter::create(dir.path(), "dup", 16).unwrap();
        let e = RingWriter::create(dir.path(), "dup", 16).err().unwrap();
        assert_eq!(e.status, Status::NotAllowed);
        assert!(e.message.contains("already being written"), "{}", e.message);
    }

    #[test]
    fn a_ring_of_another_size_is_replaced_not_truncated_under_a_reader() {
        let dir = tempfile::tempdir().unwrap();
        let old = RingWriter::create(dir.path(), "a", 1024).unwrap();
        old.push_batch(&(0..3).map(ev).collect::<Vec<_>>());
        let mut reader = RingReader::open(dir.path().join("a")).unwrap();
        drop(old);
        // The agent restarts with a smaller ring and wraps it many times.
        let new = RingWriter::create(dir.path(), "a", 16).unwrap();
        for round in 0..100 {
            new.push_batch(&(0..15).map(|i| ev(round * 100 + i)).collect::<Vec<_>>());
            let mut fresh = RingReader::open(dir.path().join("a")).unwrap();
            assert_eq!(fresh.by_ref().count(), 15);
        }
        // The old reader still reads its own, complete mapping: no SIGBUS, no garbage.
        let old_events: Vec<u64> = reader.by_ref().map(|e| e.value).collect();
        assert_eq!(old_events, [0, 1, 2]);
        assert_eq!(
            std::fs::metadata(dir.path().join("a")).unwrap().len(),
            40 + 16 * 16
        );
        // The same size is reset in place: a following reader sees the next run's events.
        drop(new);
        let mut follower = RingReader::open(dir.path().join("a")).unwrap();
        let again = RingWriter::create(dir.path(), "a", 16).unwrap();
        again.push_batch(&[ev(7)]);
        assert_eq!(follower.pop(), Some(ev(7)));
    }

    #[test]
    fn hard_links_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("target"), b"precious").unwrap();
        std::fs::hard_link(dir.path().join("target"), dir.path().join("linked")).unwrap();
        let e = RingWriter::create(dir.path(), "linked", 16).err().unwrap();
        assert_eq!(e.status, Status::NotAllowed);
        assert!(e.message.contains("hard links"), "{}", e.message);
        assert_eq!(
            std::fs::read(dir.path().join("target")).unwrap(),
            b"precious"
        );
    }
}
