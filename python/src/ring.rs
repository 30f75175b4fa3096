//! `Ring`: the library's [`RingReader`] (every check of the file, popping that advances
//! `read_pos`), plus a non-consuming `peek` and a finer classification of refused files.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use nixl_telemetry::ring::layout;
use nixl_telemetry::{Error, RingReader, Status};
use pyo3::prelude::*;

use crate::errors::{self, RingFormatError, RingTruncatedError, RingVersionError};

/// How often `open` retries when the file was replaced while it was being opened.
const OPEN_ATTEMPTS: usize = 3;

/// An open reader and, for `peek`, a read-only handle on the same file (inode).
struct Opened {
    reader: RingReader,
    file: File,
}

/// A ring-file reader (one consumer; see `nixl_telemetry.RingReader`).
#[pyclass(frozen, module = "nixl_telemetry._native")]
pub struct Ring {
    state: Mutex<Option<Opened>>,
}

impl Ring {
    fn lock(&self) -> MutexGuard<'_, Option<Opened>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with_open<T>(&self, f: impl FnOnce(&mut Opened) -> PyResult<T>) -> PyResult<T> {
        match self.lock().as_mut() {
            Some(opened) => f(opened),
            None => Err(errors::invalid("the ring reader is closed")),
        }
    }
}

#[pymethods]
impl Ring {
    /// Opens the ring file at `path` (read-write: popping advances `read_pos`).
    #[new]
    fn new(path: PathBuf) -> PyResult<Ring> {
        let opened = open(&path).map_err(|e| refused(&path, e))?;
        Ok(Ring {
            state: Mutex::new(Some(opened)),
        })
    }

    /// Number of records in the ring (one fewer is usable).
    fn capacity(&self) -> PyResult<u64> {
        self.with_open(|o| Ok(o.reader.capacity()))
    }

    /// Number of unread events.
    fn len(&self) -> PyResult<u64> {
        self.with_open(|o| Ok(o.reader.len()))
    }

    /// Takes the oldest unread event as `(type, value)`, or None when the ring is empty.
    /// Raises `RingTruncatedError` once the file was truncated under the reader.
    fn pop(&self) -> PyResult<Option<(u32, u64)>> {
        self.with_open(|o| match o.reader.try_pop() {
            Ok(event) => Ok(event.map(|e| (e.event_type, e.value))),
            Err(e) if e.status == Status::Mismatch => {
                Err(RingTruncatedError::new_err((e.message, e.status.code())))
            }
            Err(e) => Err(errors::from_core(e)),
        })
    }

    /// Up to `limit` unread events as `(type, value)`, oldest first, without consuming them.
    #[pyo3(signature = (limit=None))]
    fn peek(&self, limit: Option<u64>) -> PyResult<Vec<(u32, u64)>> {
        self.with_open(|o| {
            let shown = o.reader.path().display();
            match peek(o, limit.unwrap_or(u64::MAX)) {
                Ok(events) if !o.reader.truncated() => Ok(events),
                Err(e) if e.kind() != std::io::ErrorKind::UnexpectedEof => Err(errors::from_core(
                    Error::io(format!("cannot read telemetry ring {shown}"), &e),
                )),
                _ => Err(RingTruncatedError::new_err((
                    format!("telemetry ring {shown} was truncated while it was being read"),
                    Status::Mismatch.code(),
                ))),
            }
        })
    }

    /// Unmaps the file; every later call raises.
    fn close(&self) {
        self.lock().take();
    }
}

/// Opens the library's reader and a read-only handle on the same inode.
fn open(path: &Path) -> Result<Opened, Error> {
    for _ in 0..OPEN_ATTEMPTS {
        let file = match File::open(path) {
            Ok(file) => file,
            // The library's reader explains a missing or unreadable file best.
            Err(e) => {
                RingReader::open(path)?;
                return Err(Error::io(format!("cannot open {}", path.display()), &e));
            }
        };
        let reader = RingReader::open(path)?;
        // The reader opened `path` between the two observations of its inode: if they agree,
        // the reader and `file` are the same file.
        let ours = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat {}", path.display()), &e))?;
        if let Ok(now) = std::fs::metadata(path) {
            if (now.dev(), now.ino()) == (ours.dev(), ours.ino()) {
                return Ok(Opened { reader, file });
            }
        }
    }
    Err(Error::new(
        Status::Backend,
        format!(
            "telemetry ring {} kept being replaced while it was opened",
            path.display()
        ),
    ))
}

/// Reads the unread records in place: at most two runs, up to the end of the data array and
/// from its start. The records between `read_pos` and `write_pos` are published (the header is
/// read with acquire loads) and only this reader would free them.
fn peek(o: &Opened, limit: u64) -> std::io::Result<Vec<(u32, u64)>> {
    let header = o.reader.header();
    let capacity = header.capacity;
    let mut remaining = o.reader.len().min(limit);
    let mut position = header.read_pos;
    let mut events = Vec::with_capacity(remaining as usize);
    while remaining > 0 {
        let run = remaining.min(capacity - position);
        let mut bytes = vec![0u8; run as usize * layout::RECORD_SIZE];
        let offset = layout::HEADER_SIZE as u64 + position * layout::RECORD_SIZE as u64;
        o.file.read_exact_at(&mut bytes, offset)?;
        events.extend(bytes.chunks_exact(layout::RECORD_SIZE).map(record));
        remaining -= run;
        position = 0;
    }
    Ok(events)
}

/// `(type, value)` of one 16-byte record (native endian; the padding is ignored).
fn record(bytes: &[u8]) -> (u32, u64) {
    (
        u32_at(bytes, layout::RECORD_TYPE_OFFSET),
        u64_at(bytes, layout::RECORD_VALUE_OFFSET),
    )
}

/// The native-endian u32 at `offset` of `bytes`.
fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    let mut word = [0u8; 4];
    let end = offset + word.len();
    word.copy_from_slice(&bytes[offset..end]);
    u32::from_ne_bytes(word)
}

/// The native-endian u64 at `offset` of `bytes`.
fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    let end = offset + word.len();
    word.copy_from_slice(&bytes[offset..end]);
    u64::from_ne_bytes(word)
}

/// What is wrong with a file the library refused as not a ring of this layout.
#[derive(Debug, PartialEq, Eq)]
enum Damage {
    /// Shorter than its header, or than the records its header announces.
    Truncated,
    /// A header of another layout version.
    Version,
}

/// The exception for a refused file: a `Mismatch` is told apart by reading the header again.
fn refused(path: &Path, err: Error) -> PyErr {
    if err.status != Status::Mismatch {
        return errors::from_core(err);
    }
    let args = (err.message, err.status.code());
    match inspect(path) {
        Some(Damage::Truncated) => RingTruncatedError::new_err(args),
        Some(Damage::Version) => RingVersionError::new_err(args),
        None => RingFormatError::new_err(args),
    }
}

/// Applies the library's checks in its order (header size, version, geometry, data size) and
/// names the damage when it is a short file or a foreign version; None for anything else.
fn inspect(path: &Path) -> Option<Damage> {
    let mut file = File::open(path).ok()?;
    let size = file.metadata().ok().filter(|m| m.is_file())?.len();
    let mut header = [0u8; layout::HEADER_SIZE];
    if file.read_exact(&mut header).is_err() {
        return Some(Damage::Truncated);
    }
    if u32_at(&header, layout::VERSION_OFFSET) as i32 != layout::VERSION {
        return Some(Damage::Version);
    }
    let capacity = u64_at(&header, layout::CAPACITY_OFFSET);
    let geometry_ok =
        capacity.is_power_of_two() && u64_at(&header, layout::MASK_OFFSET) == capacity - 1;
    let short = layout::file_size(capacity).is_none_or(|needed| needed > size);
    (geometry_ok && short).then_some(Damage::Truncated)
}
