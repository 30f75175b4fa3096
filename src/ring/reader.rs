//! The consumer side of a ring: opening an existing file (validated fully before any index is
//! trusted), popping events (advancing `read_pos`), peeking without consuming, and noticing the
//! file being truncated, deleted or replaced.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use super::layout::{
    Layout, LAYOUTS, MAX_HEADER_SIZE, MIN_HEADER_SIZE, RECORD_TYPE_OFFSET, RECORD_VALUE_OFFSET,
    VERSION_OFFSET, WRITE_POS_OFFSET,
};
use super::loss_file::LossCount;
use super::mapped::Mapped;
use crate::error::{Error, Result, Status};
use crate::event::Event;

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
    /// The file mapped, for [`RingReader::check_file`]'s `fstat`.
    file: std::fs::File,
    /// Set when [`RingReader::check_file`] found the file shorter than the mapping.
    found_truncated: std::sync::atomic::AtomicBool,
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
    /// Opens the ring file at `path` read-write (popping writes `read_pos`), of either layout
    /// ([`LAYOUTS`]: the version word, at the same offset in both, says which). Refuses,
    /// with a message naming the file and the problem: a missing or unreadable file, something
    /// that is not a regular file, a file shorter than its header, a version other than 4 or
    /// 5, a capacity that is not a power of two or a mask that does not match it, and truncated
    /// data. A file with the wrong version is left untouched. The reader keeps no copy of
    /// either position: each read loads both from the file, so attaching to a ring in use
    /// starts at its `read_pos`.
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
        let too_small = |header: usize, what: &str| {
            Error::new(
                Status::Mismatch,
                format!(
                    "{shown} is too small for a telemetry ring header{what} ({size} bytes, need \
                     at least {header})"
                ),
            )
        };
        if size < MIN_HEADER_SIZE as u64 {
            return Err(too_small(MIN_HEADER_SIZE, ""));
        }
        // The largest header, or the whole file when it is shorter.
        let header_map = MmapOptions::new()
            .len(MAX_HEADER_SIZE.min(size as usize))
            .map_raw_read_only(&file)
            .map_err(|e| Error::io(format!("cannot map {shown}"), &e))?;
        let version = read_version(&header_map);
        let Some(layout) = Layout::of_version(version) else {
            return Err(Error::new(
                Status::Mismatch,
                format!(
                    "{shown}: version mismatch: expected {}, got {version} (not a NIXL \
                     telemetry ring of a known layout)",
                    LAYOUTS.map(|l| l.version.to_string()).join(" or ")
                ),
            ));
        };
        if size < layout.header_size as u64 {
            return Err(too_small(layout.header_size, &format!(" of {layout}")));
        }
        let header = read_header(&header_map, layout);
        let capacity = header.capacity;
        // SAFETY: the header map covers the layout's header; its mask word is inside.
        let mask = unsafe { (header_map.as_ptr().add(layout.mask_offset) as *const u64).read() };
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
        let needed = layout
            .file_size(capacity)
            .filter(|n| *n <= isize::MAX as u64);
        let Some(needed) = needed.filter(|n| *n <= size) else {
            return Err(Error::new(
                Status::Mismatch,
                format!(
                    "{shown} is truncated: capacity {capacity} needs {} bytes, the file has {size}",
                    layout
                        .file_size(capacity)
                        .map_or("too many".to_string(), |n| n.to_string())
                ),
            ));
        };
        drop(header_map);
        let map = MmapOptions::new()
            .len(needed as usize)
            .map_raw(&file)
            .map_err(|e| Error::io(format!("cannot map {shown}"), &e))?;
        Ok(RingReader {
            mapped: Mapped::new(map, mask, layout),
            file,
            found_truncated: std::sync::atomic::AtomicBool::new(false),
            path: path.to_owned(),
            file_id: (meta.dev(), meta.ino()),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ring's layout (its version's), as read when it was opened.
    pub fn layout(&self) -> Layout {
        self.mapped.layout
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
        let r = m.read_pos().load(Ordering::Relaxed) & m.mask;
        let w = m.write_pos().load(Ordering::Acquire) & m.mask;
        let event = (r != w).then(|| {
            let slot = m.slot(r);
            // SAFETY: `slot` is a record inside the map, published by the producer's release
            // store (a fault on a truncated file is absorbed by the guard and caught below).
            unsafe {
                Event {
                    event_type: (slot.add(RECORD_TYPE_OFFSET) as *const u32).read(),
                    value: (slot.add(RECORD_VALUE_OFFSET) as *const u64).read(),
                }
            }
        });
        if self.truncated() {
            return Err(self.truncated_error());
        }
        if event.is_some() {
            m.read_pos().store((r + 1) & m.mask, Ordering::Release);
        }
        Ok(event)
    }

    /// How many events the ring's writer could not put into this ring since it created it (a
    /// reader behind, a flush larger than the ring), from the ring's loss file
    /// ([`super::loss_file`]): [`LossCount::Unknown`] when the writer keeps none for this ring
    /// (NIXL's writer, or a file left by an earlier ring), [`LossCount::Untrusted`] when the
    /// file there is not the ring owner's alone. One `open`, one `fstat` and one `pread`.
    pub fn lost_events(&self) -> LossCount {
        match self.file.metadata() {
            Ok(ring) => super::loss_file::read(&self.path, self.file_id.1, ring.uid()),
            Err(_) => LossCount::Unknown,
        }
    }

    /// Whether the file shrank under this reader (every later read fails).
    pub fn truncated(&self) -> bool {
        self.mapped.guard.faulted() || self.found_truncated.load(Ordering::Relaxed)
    }

    /// Checks, without touching the mapping, that the file still covers it (one `fstat`), and
    /// puts the SIGBUS guard back on top if the host replaced it since (one `sigaction`): a
    /// `Mismatch` error for a truncated file, as [`RingReader::try_pop`] gives once the guard
    /// caught a fault. [`RingReader::peek`] and the Python package check before every read;
    /// [`RingReader::try_pop`] (and the C API's pop) does not, to stay a few nanoseconds.
    pub fn check_file(&self) -> Result<()> {
        nixl_telemetry_base::fault_guard::reassert();
        if !self.mapped.covered_by(&self.file) {
            self.found_truncated.store(true, Ordering::Relaxed);
        }
        if self.truncated() {
            return Err(self.truncated_error());
        }
        Ok(())
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
        self.check_file()?;
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
                    event_type: (slot.add(RECORD_TYPE_OFFSET) as *const u32).read_volatile(),
                    value: (slot.add(RECORD_VALUE_OFFSET) as *const u64).read_volatile(),
                });
            }
        }
        // Orders the copy before the second look at read_pos (as a seqlock reader does).
        std::sync::atomic::fence(Ordering::Acquire);
        let r1 = m.read_pos().load(Ordering::Acquire) & m.mask;
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
        if self.check_file().is_err() {
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
        let capacity = m.word(m.layout.capacity_offset).load(Ordering::Acquire);
        let mask = m.word(m.layout.mask_offset).load(Ordering::Acquire);
        if version != m.layout.version {
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

/// The version word of a mapped header (at least the smallest header's bytes).
fn read_version(map: &MmapRaw) -> i32 {
    debug_assert!(map.len() >= MIN_HEADER_SIZE);
    // SAFETY: `map` is page-aligned and longer than the version word's end; it is aligned.
    unsafe { (*(map.as_ptr().add(VERSION_OFFSET) as *const AtomicI32)).load(Ordering::Acquire) }
}

/// The header fields of a mapped header of `layout` (the map covers the whole header).
fn read_header(map: &MmapRaw, layout: Layout) -> RingHeader {
    debug_assert!(map.len() >= layout.header_size);
    let p = map.as_ptr();
    // SAFETY: `map` covers the layout's header and is page-aligned; the fields are aligned.
    unsafe {
        RingHeader {
            write_pos: (*(p.add(WRITE_POS_OFFSET) as *const AtomicU64)).load(Ordering::Acquire),
            read_pos: (*(p.add(layout.read_pos_offset) as *const AtomicU64))
                .load(Ordering::Acquire),
            version: layout.version,
            capacity: (p.add(layout.capacity_offset) as *const u64).read(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;
    use crate::ring::{layout, RingWriter};

    fn ev(v: u64) -> Event {
        Event::new(EventType::AgentRxBytes, v)
    }

    #[test]
    fn reader_refuses_foreign_and_damaged_files() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        // A header of `l`'s layout that says `version`.
        let header_of = |l: Layout, version: i32, cap: u64, mask: u64| {
            let mut h = vec![0u8; l.header_size];
            h[16..20].copy_from_slice(&version.to_ne_bytes());
            h[20..24].copy_from_slice(&version.to_ne_bytes());
            h[l.capacity_offset..][..8].copy_from_slice(&cap.to_ne_bytes());
            h[l.mask_offset..][..8].copy_from_slice(&mask.to_ne_bytes());
            h
        };
        let header = |version: i32, cap: u64, mask: u64| header_of(layout::V4, version, cap, mask);
        let msg = |p: PathBuf| RingReader::open(p).err().unwrap().message;
        assert!(msg(dir.path().join("missing")).contains("does not exist"));
        assert!(msg(write("small", &[0; 39])).contains("too small"));
        let v3 = write("v3", &[header(3, 8, 7), vec![0; 128]].concat());
        assert!(msg(v3.clone()).contains("version mismatch: expected 4 or 5, got 3"));
        assert!(v3.exists(), "a mismatched file is never deleted");
        // Version 5: a file that has only version 4's header, and the checks at its offsets.
        let v5 = |version, cap, mask| header_of(layout::V5, version, cap, mask);
        let short = write("v5short", &v5(5, 8, 7)[..300]);
        assert!(
            msg(short).contains("too small for a telemetry ring header of version 5 (300 bytes")
        );
        assert!(
            msg(write("v5npot", &[v5(5, 12, 11), vec![0; 192]].concat()))
                .contains("not a power of two")
        );
        assert!(
            msg(write("v5mask", &[v5(5, 8, 3), vec![0; 128]].concat())).contains("does not match")
        );
        assert!(msg(write("v5trunc", &[v5(5, 8, 7), vec![0; 127]].concat())).contains("truncated"));
        // Version 4's words where version 5 has them are garbage to version 5, and back.
        assert!(
            msg(write("v4as5", &[header(5, 8, 7), vec![0; 600]].concat()))
                .contains("not a power of two")
        );
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
            .set_len(layout::V4.file_size(MAX_READER_CAPACITY * 2).unwrap())
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
            .word(layout::V4.capacity_offset)
            .store(64, Ordering::Release);
        assert!(reader.replaced().unwrap().contains("capacity 64"));
        w.mapped.version().store(0, Ordering::Release);
        assert!(reader.replaced().unwrap().contains("version 0"));
        drop(w);
        // The same capacity in the other layout: another size, so a new file.
        let w = RingWriter::create(dir.path(), "h", 16).unwrap();
        let reader = RingReader::open(dir.path().join("h")).unwrap();
        drop(w);
        let _v5 = RingWriter::create_with(dir.path(), "h", 16, layout::V5).unwrap();
        assert!(reader.replaced().unwrap().contains("another file"));
        assert_eq!(
            RingReader::open(dir.path().join("h"))
                .unwrap()
                .header()
                .version,
            5
        );
    }
}
