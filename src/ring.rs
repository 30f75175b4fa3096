//! The shared-memory cyclic buffer (BUFFER exporter's file), byte-compatible with NIXL's
//! version-4 `sharedRingBuffer`: a 40-byte header then `capacity` 16-byte event records.
//!
//! One producer (our flush thread) and one consumer (a reader, possibly another process or
//! NIXL's own C++/Python reader) share the file. Positions are stored masked; the ring is full
//! when `(write_pos + 1) & mask == read_pos`, so `capacity - 1` slots are usable. The producer
//! writes the records before a release store of `write_pos`; the consumer reads a record before
//! a release store of `read_pos`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result, Status};
use crate::event::Event;
use crate::fault_guard::FaultGuard;
use crate::file_lock;

/// The file layout, in one place: a future layout version is a change here only.
pub mod layout {
    /// Layout version written in the header and exact-matched by readers.
    pub const VERSION: i32 = 4;
    /// Header size in bytes; records start here.
    pub const HEADER_SIZE: usize = 40;
    /// `write_pos` (u64), advanced by the producer.
    pub const WRITE_POS_OFFSET: usize = 0;
    /// `read_pos` (u64), advanced by the consumer.
    pub const READ_POS_OFFSET: usize = 8;
    /// `version` (i32).
    pub const VERSION_OFFSET: usize = 16;
    /// `expected_version` (i32, informational).
    pub const EXPECTED_VERSION_OFFSET: usize = 20;
    /// `capacity` (u64), a power of two.
    pub const CAPACITY_OFFSET: usize = 24;
    /// `mask` (u64) = capacity - 1.
    pub const MASK_OFFSET: usize = 32;
    /// Size of one event record.
    pub const RECORD_SIZE: usize = 16;
    /// Offset of the event type (u32) inside a record.
    pub const RECORD_TYPE_OFFSET: usize = 0;
    /// Offset of the 4 padding bytes inside a record (unspecified content, ignored when read).
    pub const RECORD_PADDING_OFFSET: usize = 4;
    /// Offset of the value (u64) inside a record.
    pub const RECORD_VALUE_OFFSET: usize = 8;

    /// Total file size for `capacity` records, or `None` on overflow.
    pub const fn file_size(capacity: u64) -> Option<u64> {
        match capacity.checked_mul(RECORD_SIZE as u64) {
            Some(data) => data.checked_add(HEADER_SIZE as u64),
            None => None,
        }
    }
}

const _: () = assert!(layout::RECORD_SIZE == std::mem::size_of::<Event>());

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

/// A mapped ring file with validated geometry, guarded against the file shrinking under it
/// ([`crate::fault_guard`]).
struct Mapped {
    /// Declared before `map`, so it is unregistered before the map is unmapped.
    guard: FaultGuard,
    map: MmapRaw,
    mask: u64,
}

impl Mapped {
    fn new(map: MmapRaw, mask: u64) -> Mapped {
        Mapped {
            guard: FaultGuard::new(map.as_ptr(), map.len()),
            map,
            mask,
        }
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= layout::HEADER_SIZE && offset % 8 == 0);
        // SAFETY: the map is page-aligned and at least HEADER_SIZE bytes long; `offset` is a
        // multiple of 8 inside the header. Other processes only access these words atomically
        // (or with aligned 8-byte loads and stores), so an atomic view is sound.
        unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU64) }
    }

    fn version(&self) -> &AtomicI32 {
        // SAFETY: as for `word`; offset 16 is 4-byte aligned inside the header.
        unsafe { &*(self.map.as_mut_ptr().add(layout::VERSION_OFFSET) as *const AtomicI32) }
    }

    fn slot(&self, index: u64) -> *mut u8 {
        let index = (index & self.mask) as usize;
        // SAFETY: index <= mask < capacity and the map covers HEADER_SIZE + capacity records.
        unsafe {
            self.map
                .as_mut_ptr()
                .add(layout::HEADER_SIZE + index * layout::RECORD_SIZE)
        }
    }

    fn positions(&self) -> (u64, u64) {
        let w = self.word(layout::WRITE_POS_OFFSET).load(Ordering::Acquire) & self.mask;
        let r = self.word(layout::READ_POS_OFFSET).load(Ordering::Acquire) & self.mask;
        (w, r)
    }
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

/// The producer side: creates (or resets) the ring file and appends events.
pub struct RingWriter {
    mapped: Mapped,
    path: PathBuf,
    /// Held for the writer's lifetime: the file's flock marks it as owned.
    _file: File,
    /// `(st_dev, st_ino)` of that file, to notice the path naming another file.
    file_id: (u64, u64),
}

impl RingWriter {
    /// Creates the ring `dir/name` with `capacity` records (a power of two), owner-only
    /// (mode 0600), refusing symbolic links and files already owned by another live writer.
    /// An existing file of a previous run is reset.
    pub fn create(dir: &Path, name: &str, capacity: usize) -> Result<RingWriter> {
        validate_file_name(name)?;
        if capacity == 0 || !capacity.is_power_of_two() {
            return Err(Error::invalid(format!(
                "Telemetry buffer size must be a power of 2 for the BUFFER exporter \
                 (NIXL_TELEMETRY_BUFFER_SIZE={capacity})"
            )));
        }
        let path = dir.join(name);
        let size = layout::file_size(capacity as u64)
            .ok_or_else(|| Error::invalid(format!("ring capacity {capacity} is too large")))?;
        let mut file = open_for_writing(&path, false)?;
        let existing = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat {}", path.display()), &e))?
            .len();
        if existing != 0 && existing != size {
            // A ring of another size (an earlier run with another BUFFER_SIZE): replace the
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
            .and_then(|()| MmapOptions::new().len(size as usize).map_raw(&file));
        let map = match mapped_file {
            Ok(map) => map,
            Err(e) => {
                // Leave no unusable file behind.
                let _ = std::fs::remove_file(&path);
                return Err(Error::io(
                    format!(
                        "cannot size and map telemetry ring {} ({size} bytes)",
                        path.display()
                    ),
                    &e,
                ));
            }
        };
        let mapped = Mapped::new(map, capacity as u64 - 1);
        // Invalidate first so a reader never trusts a half-written header, reset, then publish.
        mapped.version().store(0, Ordering::Release);
        // SAFETY: the map covers `size` bytes; no other writer exists (flock held).
        unsafe {
            std::ptr::write_bytes(
                mapped.map.as_mut_ptr().add(layout::HEADER_SIZE),
                0,
                size as usize - layout::HEADER_SIZE,
            );
            let base = mapped.map.as_mut_ptr();
            (base.add(layout::EXPECTED_VERSION_OFFSET) as *mut i32).write(layout::VERSION);
        }
        mapped
            .word(layout::CAPACITY_OFFSET)
            .store(capacity as u64, Ordering::Relaxed);
        mapped
            .word(layout::MASK_OFFSET)
            .store(capacity as u64 - 1, Ordering::Relaxed);
        mapped
            .word(layout::WRITE_POS_OFFSET)
            .store(0, Ordering::Relaxed);
        mapped
            .word(layout::READ_POS_OFFSET)
            .store(0, Ordering::Relaxed);
        mapped.version().store(layout::VERSION, Ordering::Release);
        log::info!(
            "Creating file-based shared memory on path: {} with size: {capacity}",
            path.display()
        );
        Ok(RingWriter {
            mapped,
            path,
            _file: file,
            file_id,
        })
    }

    /// The ring file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the ring is still what readers open: no write went past the end of the file,
    /// the file still has the ring's size, and its path still names it. False when another
    /// process truncated, deleted or replaced it (writes would reach no reader). One system
    /// call (the path's `lstat`: when it names our file, its size is our file's);
    /// [`RingWriter::faulted`] is the free part of the check.
    pub fn is_intact(&self) -> bool {
        let size = self.mapped.map.len() as u64;
        let Ok(named) = std::fs::symlink_metadata(&self.path) else {
            return false;
        };
        !self.faulted() && (named.dev(), named.ino()) == self.file_id && named.len() == size
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
    /// the report of losses is never itself what is lost) and the events of `runs` that do not
    /// fit are lost.
    pub fn push_runs(&self, runs: &[&[Event]], last: Option<Event>) -> Pushed {
        let m = &self.mapped;
        let w = m.word(layout::WRITE_POS_OFFSET).load(Ordering::Relaxed) & m.mask;
        let r = m.word(layout::READ_POS_OFFSET).load(Ordering::Acquire) & m.mask;
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
            let n = run.len().min(budget);
            budget -= n;
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
            m.word(layout::WRITE_POS_OFFSET)
                .store(pos, Ordering::Release);
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

const _: () = assert!(
    layout::RECORD_TYPE_OFFSET == std::mem::offset_of!(Event, event_type)
        && layout::RECORD_VALUE_OFFSET == std::mem::offset_of!(Event, value)
);

/// Opens (or, with `create_new`, exclusively creates) the ring file for writing: owner-only,
/// never through a symbolic link, only a regular file with a single link owned by this user,
/// and locked against a second writer.
fn open_for_writing(path: &Path, create_new: bool) -> Result<File> {
    let shown = path.display();
    let refuse = |why: &str| {
        Error::new(
            Status::NotAllowed,
            format!("refusing to use {shown} as a telemetry ring: {why}"),
        )
    };
    let file = file_lock::open_owner_only(path, create_new).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            refuse("it is a symbolic link")
        } else {
            Error::io(format!("cannot create telemetry ring {shown}"), &e)
        }
    })?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("cannot stat {shown}"), &e))?;
    if !meta.file_type().is_file() {
        return Err(refuse("not a regular file"));
    }
    if meta.nlink() != 1 {
        return Err(refuse("it has other hard links"));
    }
    if !file_lock::is_mine(&meta) {
        return Err(refuse("it belongs to another user"));
    }
    lock_exclusive(&file, path)?;
    if meta.mode() & 0o777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io(format!("cannot chmod {shown}"), &e))?;
    }
    Ok(file)
}

fn lock_exclusive(file: &File, path: &Path) -> Result<()> {
    match file_lock::try_lock_exclusive(file) {
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

/// Header fields as read from a ring file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingHeader {
    /// Next slot the producer writes.
    pub write_pos: u64,
    /// Next slot the consumer reads.
    pub read_pos: u64,
    /// Layout version.
    pub version: i32,
    /// Number of records.
    pub capacity: u64,
}

/// The largest ring a reader opens, in records: 2^28 (a 4 GiB file, 16 times the largest
/// `NIXL_TELEMETRY_BUFFER_SIZE` this library writes). A header claiming more is refused as not
/// a ring, so a hostile or corrupt file cannot make a reader map (and walk) terabytes of a
/// sparse file.
pub const MAX_READER_CAPACITY: u64 = 1 << 28;

/// The consumer side: opens an existing ring (validating it fully before trusting any index)
/// and pops events in insertion order, advancing `read_pos` in the file; or reads them without
/// consuming ([`RingReader::peek`]).
pub struct RingReader {
    mapped: Mapped,
    path: PathBuf,
    /// `(st_dev, st_ino)` of the file opened, to notice the path naming another file.
    file_id: (u64, u64),
}

/// What [`RingReader::peek`] read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peeked {
    /// The unread events, oldest first.
    pub events: Vec<Event>,
    /// The position to pass to the next call to continue after these events.
    pub next: u64,
    /// Whether the position passed in was no longer unread (a consumer took those events, or
    /// the ring was reset) and reading restarted at `read_pos`: events may have been missed.
    pub restarted: bool,
}

impl RingReader {
    /// Opens the ring file at `path` read-write (popping writes `read_pos`). Refuses, with a
    /// message naming the file and the problem: a missing or unreadable file, something that is
    /// not a regular file, a file shorter than the header, a version other than 4, a capacity
    /// that is not a power of two or a mask that does not match it, and truncated data.
    /// A file with the wrong version is left untouched.
    pub fn open(path: impl AsRef<Path>) -> Result<RingReader> {
        let path = path.as_ref();
        let shown = path.display();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::new(
                    Status::NotFound,
                    format!("telemetry file {shown} does not exist"),
                ),
                std::io::ErrorKind::PermissionDenied => Error::new(
                    Status::NotAllowed,
                    format!(
                        "cannot open telemetry file {shown} for reading and writing (a reader \
                         advances read_pos): permission denied"
                    ),
                ),
                _ => Error::io(format!("cannot open telemetry file {shown}"), &e),
            })?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat {shown}"), &e))?;
        if !meta.file_type().is_file() || meta.file_type().is_fifo() {
            return Err(Error::new(
                Status::Mismatch,
                format!("{shown} is not a telemetry ring: not a regular file"),
            ));
        }
        let size = meta.len();
        if size < layout::HEADER_SIZE as u64 {
            return Err(Error::new(
                Status::Mismatch,
                format!(
                    "{shown} is too small for a telemetry ring header ({size} bytes, need at \
                     least {})",
                    layout::HEADER_SIZE
                ),
            ));
        }
        let header_map = MmapOptions::new()
            .len(layout::HEADER_SIZE)
            .map_raw_read_only(&file)
            .map_err(|e| Error::io(format!("cannot map {shown}"), &e))?;
        let header = read_header(&header_map);
        if header.version != layout::VERSION {
            return Err(Error::new(
                Status::Mismatch,
                format!(
                    "{shown}: version mismatch: expected {}, got {} (not a NIXL telemetry ring \
                     of this layout)",
                    layout::VERSION,
                    header.version
                ),
            ));
        }
        let capacity = header.capacity;
        // SAFETY: the header map is HEADER_SIZE bytes; MASK_OFFSET is in bounds.
        let mask = unsafe { (header_map.as_ptr().add(layout::MASK_OFFSET) as *const u64).read() };
        if capacity == 0 || !capacity.is_power_of_two() {
            return Err(Error::new(
                Status::Mismatch,
                format!("{shown}: ring capacity {capacity} is not a power of two"),
            ));
        }
        if mask != capacity - 1 {
            return Err(Error::new(
                Status::Mismatch,
                format!("{shown}: ring mask {mask} does not match capacity {capacity}"),
            ));
        }
        if capacity > MAX_READER_CAPACITY {
            return Err(Error::new(
                Status::Mismatch,
                format!(
                    "{shown}: ring capacity {capacity} exceeds the readers' limit of \
                     {MAX_READER_CAPACITY} records (a 4 GiB file): not a telemetry ring"
                ),
            ));
        }
        let needed = layout::file_size(capacity).filter(|n| *n <= isize::MAX as u64);
        let Some(needed) = needed.filter(|n| *n <= size) else {
            return Err(Error::new(
                Status::Mismatch,
                format!(
                    "{shown} is truncated: capacity {capacity} needs {} bytes, the file has {size}",
                    layout::file_size(capacity).map_or("too many".to_string(), |n| n.to_string())
                ),
            ));
        };
        drop(header_map);
        let map = MmapOptions::new()
            .len(needed as usize)
            .map_raw(&file)
            .map_err(|e| Error::io(format!("cannot map {shown}"), &e))?;
        Ok(RingReader {
            mapped: Mapped::new(map, mask),
            path: path.to_owned(),
            file_id: (meta.dev(), meta.ino()),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of records in the ring.
    pub fn capacity(&self) -> u64 {
        self.mapped.mask + 1
    }

    /// Current header fields.
    pub fn header(&self) -> RingHeader {
        let (write_pos, read_pos) = self.mapped.positions();
        RingHeader {
            write_pos,
            read_pos,
            version: self.mapped.version().load(Ordering::Acquire),
            capacity: self.capacity(),
        }
    }

    /// Number of unread events.
    pub fn len(&self) -> u64 {
        let (w, r) = self.mapped.positions();
        w.wrapping_sub(r) & self.mapped.mask
    }

    /// Whether there is nothing to read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the oldest unread event, or `None` when the ring is empty or the file was
    /// truncated under the reader (see [`RingReader::try_pop`]). The 4 padding bytes of the
    /// record are ignored.
    pub fn pop(&mut self) -> Option<Event> {
        self.try_pop().ok().flatten()
    }

    /// Takes the oldest unread event, `Ok(None)` when the ring is empty, or a `Mismatch` error
    /// once the file has been truncated under the reader (what was read then is discarded:
    /// the reader never returns zeros that stand for a lost record).
    pub fn try_pop(&mut self) -> Result<Option<Event>> {
        let m = &self.mapped;
        let r = m.word(layout::READ_POS_OFFSET).load(Ordering::Relaxed) & m.mask;
        let w = m.word(layout::WRITE_POS_OFFSET).load(Ordering::Acquire) & m.mask;
        let event = (r != w).then(|| {
            let slot = m.slot(r);
            // SAFETY: `slot` is a record inside the map, published by the producer's release
            // store (a fault on a truncated file is absorbed by the guard and caught below).
            unsafe {
                Event {
                    event_type: (slot.add(layout::RECORD_TYPE_OFFSET) as *const u32).read(),
                    value: (slot.add(layout::RECORD_VALUE_OFFSET) as *const u64).read(),
                }
            }
        });
        if self.truncated() {
            return Err(self.truncated_error());
        }
        if event.is_some() {
            m.word(layout::READ_POS_OFFSET)
                .store((r + 1) & m.mask, Ordering::Release);
        }
        Ok(event)
    }

    /// Whether the file shrank under this reader (every later read fails).
    pub fn truncated(&self) -> bool {
        self.mapped.guard.faulted()
    }

    fn truncated_error(&self) -> Error {
        Error::new(
            Status::Mismatch,
            format!(
                "telemetry ring {} was truncated while it was being read (by another \
                 process); reopen it once its writer has recreated it",
                self.path.display()
            ),
        )
    }

    /// Reads up to `max` unread events without consuming them: `read_pos` is never written, so
    /// another reader (NIXL's, or a consuming `nixl-telemetry read`) still gets every event.
    /// Reading starts at `from`, the [`Peeked::next`] of an earlier call, while that position
    /// is still unread, else at `read_pos` ([`Peeked::restarted`]). A consumer may free slots
    /// while they are copied, and the writer may then reuse them: events whose slot the
    /// consumer passed during the copy are dropped, never returned with another run's bytes.
    /// Positions are stored masked, so a cursor left for a full lap of the ring (consumer and
    /// writer both advancing `capacity` slots between two calls) cannot be told from a fresh
    /// one. A `Mismatch` error once the file was truncated under the reader.
    pub fn peek(&self, from: Option<u64>, max: usize) -> Result<Peeked> {
        let m = &self.mapped;
        let (w, r0) = m.positions();
        let unread = w.wrapping_sub(r0) & m.mask;
        let (start, restarted) = match from {
            Some(c) if (c.wrapping_sub(r0) & m.mask) <= unread => (c & m.mask, false),
            Some(_) => (r0, true),
            None => (r0, false),
        };
        let n = (w.wrapping_sub(start) & m.mask).min(max as u64);
        let mut events = Vec::with_capacity(n as usize);
        for i in 0..n {
            let slot = m.slot(start + i);
            // SAFETY: `slot` is a record inside the map (`slot` masks the index), published by
            // the producer's release store of `write_pos` (acquired by `positions`). A slot freed
            // by a consumer meanwhile may be rewritten while it is read: volatile reads of plain
            // integers, whose possibly torn values are discarded below, never trusted.
            unsafe {
                events.push(Event {
                    event_type: (slot.add(layout::RECORD_TYPE_OFFSET) as *const u32)
                        .read_volatile(),
                    value: (slot.add(layout::RECORD_VALUE_OFFSET) as *const u64).read_volatile(),
                });
            }
        }
        // Orders the copy before the second look at read_pos (as a seqlock reader does).
        std::sync::atomic::fence(Ordering::Acquire);
        let r1 = m.word(layout::READ_POS_OFFSET).load(Ordering::Acquire) & m.mask;
        if self.truncated() {
            return Err(self.truncated_error());
        }
        // The consumer moved `moved` slots from r0 during the copy: those slots may hold newer
        // bytes, so the events copied from them are dropped. When it passed the end of the
        // span, the next call starts where it is.
        let moved = r1.wrapping_sub(r0) & m.mask;
        let offset = start.wrapping_sub(r0) & m.mask;
        events.drain(..moved.saturating_sub(offset).min(n) as usize);
        let next = if moved > offset + n {
            r1
        } else {
            (start + n) & m.mask
        };
        Ok(Peeked {
            events,
            next,
            restarted,
        })
    }

    /// Why the path no longer names the ring this reader maps, if it does not: the file was
    /// truncated under the reader, deleted, replaced by another file (another inode: a writer
    /// with another size replaces the file), or its header changed in place (invalidated or
    /// resized). `None` while it is the same ring. Costs one `stat`.
    pub fn replaced(&self) -> Option<String> {
        if self.truncated() {
            return Some("it was truncated".into());
        }
        let meta = match std::fs::metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Some("it was deleted".into())
            }
            Err(e) => return Some(format!("it cannot be examined ({e})")),
        };
        if (meta.dev(), meta.ino()) != self.file_id {
            return Some("another file now has its name".into());
        }
        if meta.len() < self.mapped.map.len() as u64 {
            return Some("it was truncated".into());
        }
        let m = &self.mapped;
        let version = m.version().load(Ordering::Acquire);
        let capacity = m.word(layout::CAPACITY_OFFSET).load(Ordering::Acquire);
        let mask = m.word(layout::MASK_OFFSET).load(Ordering::Acquire);
        if version != layout::VERSION {
            return Some(format!("its header now says version {version}"));
        }
        if capacity != m.mask + 1 || mask != m.mask {
            return Some(format!("its header now says capacity {capacity}"));
        }
        None
    }
}

impl Iterator for RingReader {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        self.pop()
    }
}

fn read_header(map: &MmapRaw) -> RingHeader {
    let p = map.as_ptr();
    // SAFETY: `map` is at least HEADER_SIZE bytes and page-aligned; the fields are aligned.
    unsafe {
        RingHeader {
            write_pos: (*(p.add(layout::WRITE_POS_OFFSET) as *const AtomicU64))
                .load(Ordering::Acquire),
            read_pos: (*(p.add(layout::READ_POS_OFFSET) as *const AtomicU64))
                .load(Ordering::Acquire),
            version: (*(p.add(layout::VERSION_OFFSET) as *const AtomicI32)).load(Ordering::Acquire),
            capacity: (p.add(layout::CAPACITY_OFFSET) as *const u64).read(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;

    fn ev(v: u64) -> Event {
        Event::new(EventType::AgentRxBytes, v)
    }

    #[test]
    fn header_bytes_match_nixl_v4() {
        let dir = tempfile::tempdir().unwrap();
        let w = RingWriter::create(dir.path(), "agent", 16).unwrap();
        assert_eq!(
            w.push_batch(&[Event::new(EventType::AgentTxBytes, 0x1122)]),
            1
        );
        let bytes = std::fs::read(dir.path().join("agent")).unwrap();
        assert_eq!(bytes.len(), 40 + 16 * 16);
        let u64_at = |o: usize| u64::from_ne_bytes(bytes[o..o + 8].try_into().unwrap());
        let i32_at = |o: usize| i32::from_ne_bytes(bytes[o..o + 4].try_into().unwrap());
        assert_eq!(u64_at(0), 1, "write_pos");
        assert_eq!(u64_at(8), 0, "read_pos");
        assert_eq!((i32_at(16), i32_at(20)), (4, 4));
        assert_eq!((u64_at(24), u64_at(32)), (16, 15));
        // Type @0 and value @8; bytes 4..8 are padding, unspecified (as in NIXL's files).
        assert_eq!(&bytes[40..44], &[0, 0, 0, 0]);
        assert_eq!(&bytes[48..56], &[0x22, 0x11, 0, 0, 0, 0, 0, 0]);
        let mode = std::fs::metadata(dir.path().join("agent")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn keeps_capacity_minus_one_and_wraps() {
        let dir = tempfile::tempdir().unwrap();
        let w = RingWriter::create(dir.path(), "a", 8).unwrap();
        let mut r = RingReader::open(dir.path().join("a")).unwrap();
        assert_eq!(w.push_batch(&(0..10).map(ev).collect::<Vec<_>>()), 7);
        assert_eq!(r.len(), 7);
        let got: Vec<u64> = r.by_ref().take(5).map(|e| e.value).collect();
        assert_eq!(got, [0, 1, 2, 3, 4]);
        assert_eq!(w.push_batch(&(100..110).map(ev).collect::<Vec<_>>()), 5);
        let got: Vec<u64> = r.by_ref().map(|e| e.value).collect();
        assert_eq!(got, [5, 6, 100, 101, 102, 103, 104]);
        assert!(r.pop().is_none());
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

    #[test]
    fn reader_refuses_foreign_and_damaged_files() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let header = |version: i32, cap: u64, mask: u64| {
            let mut h = vec![0u8; 40];
            h[16..20].copy_from_slice(&version.to_ne_bytes());
            h[20..24].copy_from_slice(&version.to_ne_bytes());
            h[24..32].copy_from_slice(&cap.to_ne_bytes());
            h[32..40].copy_from_slice(&mask.to_ne_bytes());
            h
        };
        let msg = |p: PathBuf| RingReader::open(p).err().unwrap().message;
        assert!(msg(dir.path().join("missing")).contains("does not exist"));
        assert!(msg(write("small", &[0; 39])).contains("too small"));
        let v3 = write("v3", &[header(3, 8, 7), vec![0; 128]].concat());
        assert!(msg(v3.clone()).contains("version mismatch: expected 4, got 3"));
        assert!(v3.exists(), "a mismatched file is never deleted");
        assert!(
            msg(write("npot", &[header(4, 12, 11), vec![0; 192]].concat()))
                .contains("not a power of two")
        );
        assert!(
            msg(write("mask", &[header(4, 8, 3), vec![0; 128]].concat()))
                .contains("does not match")
        );
        assert!(
            msg(write("trunc", &[header(4, 8, 7), vec![0; 100]].concat())).contains("truncated")
        );
        assert!(msg(write("huge", &header(4, 1 << 62, (1 << 62) - 1))).contains("limit"));
        // Larger than the readers' limit: refused before anything is mapped, even when the
        // (sparse) file is long enough.
        let sparse = dir.path().join("sparse");
        std::fs::write(
            &sparse,
            header(4, MAX_READER_CAPACITY * 2, MAX_READER_CAPACITY * 2 - 1),
        )
        .unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&sparse)
            .unwrap()
            .set_len(layout::file_size(MAX_READER_CAPACITY * 2).unwrap())
            .unwrap();
        let e = RingReader::open(&sparse).err().unwrap();
        assert_eq!(e.status, Status::Mismatch);
        assert!(
            e.message.contains("exceeds the readers' limit"),
            "{}",
            e.message
        );
        assert!(msg(dir.path().to_owned()).contains("telemetry file"));
    }

    #[test]
    fn peek_reads_without_consuming_and_follows_a_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let w = RingWriter::create(dir.path(), "p", 8).unwrap();
        let mut consumer = RingReader::open(dir.path().join("p")).unwrap();
        let peeker = RingReader::open(dir.path().join("p")).unwrap();
        w.push_batch(&(0..5).map(ev).collect::<Vec<_>>());
        let values = |p: &Peeked| p.events.iter().map(|e| e.value).collect::<Vec<_>>();
        let first = peeker.peek(None, usize::MAX).unwrap();
        assert_eq!(values(&first), [0, 1, 2, 3, 4]);
        assert!(!first.restarted);
        assert_eq!(w.len(), 5, "nothing consumed");
        // A bounded peek, then the rest from its cursor.
        let two = peeker.peek(None, 2).unwrap();
        assert_eq!(values(&two), [0, 1]);
        assert_eq!(values(&peeker.peek(Some(two.next), 10).unwrap()), [2, 3, 4]);
        // Only the new events after the cursor.
        w.push_batch(&[ev(5)]);
        let after = peeker.peek(Some(first.next), 10).unwrap();
        assert_eq!(values(&after), [5]);
        assert!(peeker.peek(Some(after.next), 10).unwrap().events.is_empty());
        // A consumer takes everything and the writer laps: the stale cursor restarts at
        // read_pos.
        assert_eq!(consumer.by_ref().count(), 6);
        w.push_batch(&(10..17).map(ev).collect::<Vec<_>>());
        consumer.pop();
        consumer.pop();
        let lapped = peeker.peek(Some(after.next), 10).unwrap();
        assert!(lapped.restarted);
        assert_eq!(values(&lapped), [12, 13, 14, 15, 16]);
        assert_eq!(
            consumer.by_ref().map(|e| e.value).collect::<Vec<_>>(),
            [12, 13, 14, 15, 16]
        );
    }

    #[test]
    fn replaced_notices_deletion_a_new_file_and_a_changed_header() {
        let dir = tempfile::tempdir().unwrap();
        let w = RingWriter::create(dir.path(), "r", 16).unwrap();
        let reader = RingReader::open(dir.path().join("r")).unwrap();
        assert_eq!(reader.replaced(), None);
        drop(w);
        // Same size: reset in place, still the same ring.
        let w = RingWriter::create(dir.path(), "r", 16).unwrap();
        assert_eq!(reader.replaced(), None);
        drop(w);
        // Another size: a new file.
        let w = RingWriter::create(dir.path(), "r", 32).unwrap();
        assert!(reader.replaced().unwrap().contains("another file"));
        let fresh = RingReader::open(dir.path().join("r")).unwrap();
        drop(w);
        std::fs::remove_file(dir.path().join("r")).unwrap();
        assert_eq!(fresh.replaced().as_deref(), Some("it was deleted"));
        // A header changed in place (a writer resizing the file it keeps).
        let w = RingWriter::create(dir.path(), "h", 16).unwrap();
        let reader = RingReader::open(dir.path().join("h")).unwrap();
        w.mapped
            .word(layout::CAPACITY_OFFSET)
            .store(64, Ordering::Release);
        assert!(reader.replaced().unwrap().contains("capacity 64"));
        w.mapped.version().store(0, Ordering::Release);
        assert!(reader.replaced().unwrap().contains("version 0"));
    }
}
