//! The version-4 file layout of NIXL's `sharedRingBuffer`, in one place: a 40-byte header then
//! `capacity` 16-byte event records. A future layout version is a change here only.
//! Every field is in native byte order.

use crate::event::Event;

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

// `Event` has exactly the record layout, so a run of events is copied with one memcpy.
const _: () = assert!(RECORD_SIZE == std::mem::size_of::<Event>());
const _: () = assert!(
    RECORD_TYPE_OFFSET == std::mem::offset_of!(Event, event_type)
        && RECORD_VALUE_OFFSET == std::mem::offset_of!(Event, value)
);
