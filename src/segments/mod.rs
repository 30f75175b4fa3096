//! The rolling gzip JSONL segment store shared by the FPM trace ([`crate::fpm`]) and the NIXL
//! `TRACE` exporter ([`crate::exporter::trace`]).
//!
//! - [`naming`]: file names `<prefix>.<producer>.<index>.jsonl.gz` and finding them again.
//! - [`writer`]: batching rows into one gzip member per flush, rolling, retention.
//! - [`reader`]: reading every complete row back, a damaged final member reported, rows
//!   bounded in length: the one reader of segments (the CLI's, and the one the fuzz target runs).
//! - [`row`]: the row envelope `{"timestamp":..,"event":..}`.
//! - [`guard`]: one writer per prefix, in the process and across processes.
//! - Files and directories are created owner-only, and files of other users are never touched
//!   ([`crate::owner_only`]).
//! - [`clock`]: the time source, replaceable in tests.
//!
//! Durability: segments are handed to the operating system without `fsync`. A crash can leave a
//! truncated final gzip member (readers such as `nixl-telemetry fpm cat` return every complete
//! row and then warn) and, rarely, a 0-byte segment (retention removes it); a restart always continues with a new
//! segment index, so a damaged tail is never appended to. A write error (a full disk) never
//! leaves a partial member in the middle of a file: the writer cuts it off and keeps appending
//! to the same segment once writing works again ([`writer`]).

pub mod clock;
pub mod guard;
pub mod naming;
pub mod reader;
pub mod row;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod writer;

pub use clock::{Clock, ManualClock, SystemClock};
pub use guard::{GuardError, PrefixGuard};
pub use naming::{segments_of, SegmentNaming};
pub use reader::{ReadOutcome, SegmentReader, TruncatedMember};
pub use writer::{SegmentWriter, WriterOptions, WriterStats};
