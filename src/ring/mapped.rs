//! A mapped ring file, shared by the writer and the reader: typed views of the header words and
//! the records over a mapping guarded against its file shrinking.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use memmap2::MmapRaw;

use super::layout::{self, Layout};
use nixl_telemetry_base::fault_guard::FaultGuard;

/// A mapped ring file with validated geometry, guarded against the file shrinking under it
/// ([`nixl_telemetry_base::fault_guard`]).
pub(super) struct Mapped {
    /// Declared before `map`, so it is unregistered before the map is unmapped.
    pub(super) guard: FaultGuard,
    /// The whole file: the header, then the records.
    pub(super) map: MmapRaw,
    /// `capacity - 1`.
    pub(super) mask: u64,
    /// Where the header words and the records are.
    pub(super) layout: Layout,
}

impl Mapped {
    /// Guards `map`, a validated ring of `layout` with `mask + 1` records (putting the guard's
    /// handler back on top first if the host replaced it).
    pub(super) fn new(map: MmapRaw, mask: u64, layout: Layout) -> Mapped {
        nixl_telemetry_base::fault_guard::reassert();
        Mapped {
            guard: FaultGuard::new(map.as_ptr(), map.len()),
            map,
            mask,
            layout,
        }
    }

    /// Whether `file`, the file mapped, still covers the whole mapping (one `fstat`, without
    /// touching the mapping, which would fault past the file's end).
    pub(super) fn covered_by(&self, file: &std::fs::File) -> bool {
        use std::os::fd::AsRawFd;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat(2) on the descriptor `file` owns, filling `st` when it succeeds.
        if unsafe { libc::fstat(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
            return false;
        }
        // SAFETY: fstat succeeded, so it filled `st`.
        let st = unsafe { st.assume_init() };
        st.st_size as u64 >= self.map.len() as u64
    }

    /// The header's u64 word at `offset`.
    pub(super) fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= self.layout.header_size && offset.is_multiple_of(8));
        // SAFETY: the map is page-aligned and covers the layout's header; `offset` is a
        // multiple of 8 inside the header. Other processes only access these words atomically
        // (or with aligned 8-byte loads and stores), so an atomic view is sound.
        unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU64) }
    }

    /// The header's `write_pos`.
    pub(super) fn write_pos(&self) -> &AtomicU64 {
        self.word(layout::WRITE_POS_OFFSET)
    }

    /// The header's `read_pos`.
    pub(super) fn read_pos(&self) -> &AtomicU64 {
        self.word(self.layout.read_pos_offset)
    }

    /// The header's `version`.
    pub(super) fn version(&self) -> &AtomicI32 {
        // SAFETY: as for `word`; offset 16 is 4-byte aligned inside the header.
        unsafe { &*(self.map.as_mut_ptr().add(layout::VERSION_OFFSET) as *const AtomicI32) }
    }

    /// The record of position `index` (masked).
    pub(super) fn slot(&self, index: u64) -> *mut u8 {
        let index = (index & self.mask) as usize;
        // SAFETY: index <= mask < capacity and the map covers the header and capacity records.
        unsafe {
            self.map
                .as_mut_ptr()
                .add(self.layout.header_size + index * layout::RECORD_SIZE)
        }
    }

    /// `(write_pos, read_pos)`, masked, with acquire loads.
    pub(super) fn positions(&self) -> (u64, u64) {
        let w = self.write_pos().load(Ordering::Acquire) & self.mask;
        let r = self.read_pos().load(Ordering::Acquire) & self.mask;
        (w, r)
    }
}
