//! The shared-memory cyclic buffer (BUFFER exporter's file), byte-compatible with NIXL's
//! version-4 `sharedRingBuffer` (a 40-byte header then `capacity` 16-byte event records) and with
//! the version 5 of NIXL's open pull request #2018 (a 512-byte header).
//!
//! One producer (our flush thread) and one consumer (a reader, possibly another process or
//! NIXL's own C++/Python reader) share the file. Positions are stored masked; the ring is full
//! when `(write_pos + 1) & mask == read_pos`, so `capacity - 1` slots are usable. The producer
//! writes the records before a release store of `write_pos`; the consumer reads a record before
//! a release store of `read_pos`.
//!
//! - [`layout`]: the two header layouts and the record, the one place for their constants.
//! - `writer`: [`RingWriter`], creating the file and appending events.
//! - `reader`: [`RingReader`], validating the file, popping and peeking events.
//! - `mapped`: the mapping both share, typed views of its header words and records, guarded
//!   against SIGBUS (`nixl_telemetry_base::fault_guard`), so that a file truncated under a
//!   writer or a reader is noticed instead of killing the process.
//! - [`loss_file`]: the writer's count of the events its ring could not take, in a file
//!   beside the ring that NIXL's readers never open.

pub mod layout;
pub mod loss_file;
mod mapped;
mod reader;
mod writer;

pub use reader::{Peeked, RingHeader, RingReader, MAX_READER_CAPACITY};
pub use writer::{validate_file_name, Damage, Pushed, RingWriter};
