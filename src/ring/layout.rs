//! The file layouts of NIXL's `sharedRingBuffer`, in one place: a header then `capacity`
//! 16-byte event records, every field in native byte order. Two versions, told apart by the
//! `version` word, which both keep at offset 16:
//!
//! | field | version 4 (NIXL's) | version 5 (NIXL's open pull request #2018) |
//! |---|---|---|
//! | `write_pos` (u64) | 0 | 0 |
//! | `capacity` (u64) | 24 | 8 |
//! | `version` (i32) | 16 | 16 |
//! | `expected_version` (i32, informational) | 20 | 20 |
//! | `mask` (u64) | 32 | 24 |
//! | `read_pos` (u64) | 8 | 256 |
//! | records | 40 | 512 |
//!
//! Version 5's header is two 256-byte blocks, so the writer's words and the reader's position
//! never share a cache line. A writer writes the [`Layout`] it is given (the BUFFER exporter's
//! is `NIXL_TELEMETRY_RING_VERSION`, 4 by default); a reader reads the version first and then
//! the header of that layout.

use crate::event::Event;

/// Where one layout version keeps its header words and records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The `version` word's value.
    pub version: i32,
    /// Header size in bytes; records start here.
    pub header_size: usize,
    /// `read_pos` (u64), advanced by the consumer.
    pub read_pos_offset: usize,
    /// `capacity` (u64), a power of two.
    pub capacity_offset: usize,
    /// `mask` (u64) = capacity - 1.
    pub mask_offset: usize,
}

/// NIXL's layout (`TELEMETRY_VERSION` 4): a 40-byte header. What the BUFFER exporter writes by
/// default.
pub const V4: Layout = Layout {
    version: crate::constants::NIXL_TELEMETRY_RING_VERSION_4,
    header_size: 40,
    read_pos_offset: 8,
    capacity_offset: 24,
    mask_offset: 32,
};

/// The layout of NIXL's open pull request #2018 (`TELEMETRY_VERSION` 5): a 512-byte header,
/// 256-byte aligned, `read_pos` alone in its second half.
pub const V5: Layout = Layout {
    version: crate::constants::NIXL_TELEMETRY_RING_VERSION_5,
    header_size: 512,
    read_pos_offset: 256,
    capacity_offset: 8,
    mask_offset: 24,
};

/// Every layout a reader reads, oldest first.
pub const LAYOUTS: [Layout; 2] = [V4, V5];

/// `write_pos` (u64), advanced by the producer (every version).
pub const WRITE_POS_OFFSET: usize = 0;
/// `version` (i32, every version).
pub const VERSION_OFFSET: usize = 16;
/// `expected_version` (i32, informational, every version).
pub const EXPECTED_VERSION_OFFSET: usize = 20;
/// The smallest header (version 4's): a shorter file is no ring.
pub const MIN_HEADER_SIZE: usize = V4.header_size;
/// The largest header (version 5's): what a reader maps before it knows the version.
pub const MAX_HEADER_SIZE: usize = V5.header_size;
/// Size of one event record.
pub const RECORD_SIZE: usize = 16;
/// Offset of the event type (u32) inside a record.
pub const RECORD_TYPE_OFFSET: usize = 0;
/// Offset of the 4 padding bytes inside a record (unspecified content, ignored when read).
pub const RECORD_PADDING_OFFSET: usize = 4;
/// Offset of the value (u64) inside a record.
pub const RECORD_VALUE_OFFSET: usize = 8;

impl Layout {
    /// The layout whose `version` word is `version`, if a reader knows it.
    pub fn of_version(version: i32) -> Option<Layout> {
        LAYOUTS.into_iter().find(|l| l.version == version)
    }

    /// Total file size for `capacity` records, or `None` on overflow.
    pub const fn file_size(&self, capacity: u64) -> Option<u64> {
        match capacity.checked_mul(RECORD_SIZE as u64) {
            Some(data) => data.checked_add(self.header_size as u64),
            None => None,
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "version {}", self.version)
    }
}

// `Event` has exactly the record layout, so a run of events is copied with one memcpy.
const _: () = assert!(RECORD_SIZE == std::mem::size_of::<Event>());
const _: () = assert!(
    RECORD_TYPE_OFFSET == std::mem::offset_of!(Event, event_type)
        && RECORD_VALUE_OFFSET == std::mem::offset_of!(Event, value)
);
// Every header word is 8-byte aligned inside its header, and records stay 8-byte aligned.
const _: () = {
    let mut i = 0;
    while i < LAYOUTS.len() {
        let l = LAYOUTS[i];
        assert!(l.read_pos_offset.is_multiple_of(8) && l.read_pos_offset + 8 <= l.header_size);
        assert!(l.capacity_offset.is_multiple_of(8) && l.capacity_offset + 8 <= l.header_size);
        assert!(l.mask_offset.is_multiple_of(8) && l.mask_offset + 8 <= l.header_size);
        assert!(l.header_size.is_multiple_of(8) && EXPECTED_VERSION_OFFSET + 4 <= l.header_size);
        i += 1;
    }
    assert!(V5.header_size.is_multiple_of(256) && V5.read_pos_offset == 256);
};
