//! `Ring`: the library's [`RingReader`] (every check of the file, popping that advances
//! `read_pos`, peeking that does not), plus a finer classification of refused files.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use nixl_telemetry_core::ring::layout::{self, Layout};
use nixl_telemetry_core::ring::loss_file::LossCount;
use nixl_telemetry_core::{Error, RingReader, Status};
use pyo3::prelude::*;

use crate::errors::{self, RingFormatError, RingTruncatedError, RingVersionError};
use nixl_telemetry_base::sync::LockUnpoisoned;

/// An open reader.
struct Opened {
    reader: RingReader,
}

/// A ring-file reader (one consumer; see `nixl_telemetry.RingReader`).
#[pyclass(frozen, module = "nixl_telemetry._native")]
pub struct Ring {
    state: Mutex<Option<Opened>>,
}

impl Ring {
    fn lock(&self) -> MutexGuard<'_, Option<Opened>> {
        self.state.lock_unpoisoned()
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

    /// The ring's layout version: 4 (NIXL's) or 5 (NIXL's open pull request #2018).
    fn version(&self) -> PyResult<i32> {
        self.with_open(|o| Ok(o.reader.layout().version))
    }

    /// Events the ring's writer could not put into this ring since it created it, or None when
    /// it keeps no count for it (NIXL's writer); raises `NotAllowedError` when the file there
    /// cannot be believed (another user's, a link, a file others may write).
    fn lost_events(&self) -> PyResult<Option<u64>> {
        self.with_open(|o| match o.reader.lost_events() {
            LossCount::Counted(lost) => Ok(Some(lost)),
            LossCount::Unknown => Ok(None),
            LossCount::Untrusted(why) => Err(errors::from_core(Error::new(
                Status::NotAllowed,
                format!("the ring's loss count is not trusted: {why}"),
            ))),
        })
    }

    /// Number of unread events.
    fn len(&self) -> PyResult<u64> {
        self.with_open(|o| Ok(o.reader.len()))
    }

    /// Takes the oldest unread event as `(type, value)`, or None when the ring is empty.
    /// Raises `RingTruncatedError` once the file was truncated under the reader.
    fn pop(&self) -> PyResult<Option<(u32, u64)>> {
        // Checked first (one fstat): a ring truncated under the reader is an error here even
        // when the host replaced the SIGBUS guard (Python's faulthandler).
        self.with_open(
            |o| match o.reader.check_file().and_then(|()| o.reader.try_pop()) {
                Ok(event) => Ok(event.map(|e| (e.event_type, e.value))),
                Err(e) if e.status == Status::Mismatch => {
                    Err(RingTruncatedError::new_err((e.message, e.status.code())))
                }
                Err(e) => Err(errors::from_core(e)),
            },
        )
    }

    /// Up to `limit` unread events as `(type, value)`, oldest first, without consuming them.
    #[pyo3(signature = (limit=None))]
    fn peek(&self, limit: Option<u64>) -> PyResult<Vec<(u32, u64)>> {
        self.with_open(|o| {
            let max = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
            match o.reader.peek(None, max) {
                Ok(peeked) => Ok(peeked
                    .events
                    .iter()
                    .map(|e| (e.event_type, e.value))
                    .collect()),
                Err(e) if e.status == Status::Mismatch => {
                    Err(RingTruncatedError::new_err((e.message, e.status.code())))
                }
                Err(e) => Err(errors::from_core(e)),
            }
        })
    }

    /// Unmaps the file; every later call raises.
    fn close(&self) {
        self.lock().take();
    }
}

/// Opens the library's reader.
fn open(path: &Path) -> Result<Opened, Error> {
    Ok(Opened {
        reader: RingReader::open(path)?,
    })
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

/// What is wrong with a file the library refused as not a ring of a known layout.
#[derive(Debug, PartialEq, Eq)]
enum Damage {
    /// Shorter than its header, or than the records its header announces.
    Truncated,
    /// A header of a layout version the library does not read.
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

/// Applies the library's checks in its order (header size, version, the version's header size,
/// geometry, data size) and names the damage when it is a short file or a foreign version; None
/// for anything else.
fn inspect(path: &Path) -> Option<Damage> {
    let mut file = File::open(path).ok()?;
    let size = file.metadata().ok().filter(|m| m.is_file())?.len();
    let mut header = [0u8; layout::MAX_HEADER_SIZE];
    let Ok(read) = file.read(&mut header) else {
        return Some(Damage::Truncated);
    };
    if read < layout::MIN_HEADER_SIZE {
        return Some(Damage::Truncated);
    }
    let Some(shape) = Layout::of_version(u32_at(&header, layout::VERSION_OFFSET) as i32) else {
        return Some(Damage::Version);
    };
    if read < shape.header_size {
        return Some(Damage::Truncated);
    }
    let capacity = u64_at(&header, shape.capacity_offset);
    let geometry_ok =
        capacity.is_power_of_two() && u64_at(&header, shape.mask_offset) == capacity - 1;
    let short = shape.file_size(capacity).is_none_or(|needed| needed > size);
    (geometry_ok && short).then_some(Damage::Truncated)
}
