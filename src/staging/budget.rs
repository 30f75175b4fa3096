//! Room and memory of a queue: the blocks of event slots, the budget of credit every thread
//! takes its room from, and the free list of blocks that flushes refill (on the budget's cache
//! line), with the pool that allocates blocks and frees them with the queue.

use std::mem::MaybeUninit;
use std::ptr;
use std::sync::Arc;

use super::spin_lock::SpinLock;
#[cfg(loom)]
use super::sync::UnsafeCell;
use super::sync::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use crate::event::Event;

/// Event slots per block: the memory unit, the largest chunk of credit a thread takes, and the
/// per-thread slack of the bound (see the module documentation). A batch longer than a block is
/// refused. (4 in the loom model check, so that its few events fill blocks.)
pub const BLOCK_EVENTS: usize = if cfg!(loom) { 4 } else { 256 };

/// A cache-line-aligned value, so what one side writes never shares a line with the other's.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// A block of event slots. The header is written by the block's producer before the block is
/// linked (release) behind the previous one; the slots are never initialised as a whole.
#[repr(C, align(64))]
pub(crate) struct Block {
    /// The lane index (events published on the lane before it) of slot 0.
    pub(crate) base: AtomicU64,
    /// The next block of the lane (null while this is the producer's current block), or the
    /// next free block while the block is on the free list.
    pub(crate) next: AtomicPtr<Block>,
    /// The previously allocated block of the queue (set once): every block is freed through it.
    allocated_next: *mut Block,
    slots: [std::cell::UnsafeCell<MaybeUninit<Event>>; BLOCK_EVENTS],
    /// Under loom, one checked cell per slot, written where a slot is written and read where it
    /// is read: loom reports any two accesses to a slot that the protocol leaves unordered.
    #[cfg(loom)]
    accesses: [UnsafeCell<()>; BLOCK_EVENTS],
}

/// The first slot of `block`.
///
/// # Safety
/// `block` points to a live block.
#[inline(always)]
pub(crate) unsafe fn slots_of(block: *mut Block) -> *mut Event {
    // SAFETY: the caller's contract; `UnsafeCell<MaybeUninit<Event>>` has the layout of `Event`.
    unsafe { ptr::addr_of_mut!((*block).slots).cast::<Event>() }
}

/// Tells the loom model that slots `from..to` of `block` are written (`write`) or read: a
/// no-op in a normal build.
///
/// # Safety
/// `block` points to a live block and `from..to` are slot indexes.
#[inline(always)]
#[allow(unused_variables)]
pub(crate) unsafe fn slots_accessed(block: *mut Block, from: usize, to: usize, write: bool) {
    #[cfg(loom)]
    for index in from..to {
        // SAFETY: the caller's contract.
        let access = unsafe { &(*block).accesses[index] };
        if write {
            access.with_mut(|_| ());
        } else {
            access.with(|_| ());
        }
    }
}

/// What a queue's threads share about room: written once per block, never per call.
pub(crate) struct Budget {
    /// Staged events plus the credit threads hold: the sum over lanes of `limit - tail`.
    pub(crate) outstanding: AtomicU64,
    /// Threads that own a lane (the shared lane is not one).
    threads: AtomicU64,
    /// Most events that may be staged or credited: `capacity + (threads - 1) x BLOCK_EVENTS`
    /// (`capacity` without threads), kept by [`Budget::thread_joins`] and
    /// [`Budget::thread_leaves`], whose fetches decide each one's share.
    limit: AtomicU64,
    /// The queue's freed blocks, linked through their `next`: on the budget's cache line, as a
    /// thread that needs a new block takes credit then a block, so both cost one line transfer.
    free: SpinLock<FreeBlocks>,
}

/// The head of a list of free blocks.
struct FreeBlocks(*mut Block);

// SAFETY: the blocks on the list are reached only through the list's lock, by whichever thread
// holds it; nothing in them is bound to a thread.
unsafe impl Send for FreeBlocks {}

impl Budget {
    /// A budget of `capacity` events, for no thread yet, with no free block.
    pub(crate) fn new(capacity: u64) -> Budget {
        Budget {
            outstanding: AtomicU64::new(0),
            threads: AtomicU64::new(0),
            limit: AtomicU64::new(capacity),
            free: SpinLock::new(FreeBlocks(ptr::null_mut())),
        }
    }

    /// A thread takes a lane: every thread but the first brings a block of room.
    pub(crate) fn thread_joins(&self) {
        if self.threads.fetch_add(1, Ordering::Relaxed) >= 1 {
            self.limit.fetch_add(BLOCK_EVENTS as u64, Ordering::Relaxed);
        }
    }

    /// A thread lets its lane go, and the block of room it brought.
    pub(crate) fn thread_leaves(&self) {
        if self.threads.fetch_sub(1, Ordering::Relaxed) >= 2 {
            self.limit.fetch_sub(BLOCK_EVENTS as u64, Ordering::Relaxed);
        }
    }

    /// Most events that may be staged or credited with the current number of threads.
    #[inline]
    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Takes at least `need` and at most `want` (>= `need`) events of credit; 0 when the budget
    /// does not have `need`.
    pub(crate) fn take(&self, need: u64, want: u64) -> u64 {
        let limit = self.limit();
        let mut outstanding = self.outstanding.load(Ordering::Relaxed);
        loop {
            let room = limit.saturating_sub(outstanding);
            if room < need {
                return 0;
            }
            let got = room.min(want);
            match self.outstanding.compare_exchange_weak(
                outstanding,
                outstanding + got,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return got,
                Err(now) => outstanding = now,
            }
        }
    }

    /// Returns `n` events of credit (unused, or drained) to the budget.
    pub(crate) fn give_back(&self, n: u64) {
        if n > 0 {
            self.outstanding.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// A block from the free list, if it has one.
    fn pop_free(&self) -> Option<*mut Block> {
        let mut free = self.free.lock();
        let block = free.0;
        if block.is_null() {
            return None;
        }
        // SAFETY: blocks on the free list are live and reached only under its lock.
        free.0 = unsafe { (*block).next.load(Ordering::Relaxed) };
        Some(block)
    }

    /// Puts the chain of blocks `first ..= last` (linked through `next`) on the free list.
    ///
    /// # Safety
    /// The chain's blocks are live and the caller alone holds them: no lane reaches them.
    pub(crate) unsafe fn push_free(&self, first: *mut Block, last: *mut Block) {
        let mut free = self.free.lock();
        // SAFETY: `last` ends a chain of blocks the caller alone holds (the caller's contract).
        unsafe { (*last).next.store(free.0, Ordering::Relaxed) };
        free.0 = first;
    }
}

/// Every block of a queue: takes blocks for lanes (freed ones first) and frees them all with the
/// queue.
pub(crate) struct BlockPool {
    /// The budget whose free list holds the pool's freed blocks.
    budget: Arc<Padded<Budget>>,
    /// Every block allocated, linked through `allocated_next`.
    allocated: AtomicPtr<Block>,
    blocks: AtomicUsize,
    /// Whether the failure to allocate a block was reported (once per queue).
    warned_allocation: AtomicBool,
}

impl BlockPool {
    /// A pool without blocks, whose freed blocks go to `budget`'s free list.
    pub(crate) fn new(budget: Arc<Padded<Budget>>) -> BlockPool {
        BlockPool {
            budget,
            allocated: AtomicPtr::new(ptr::null_mut()),
            blocks: AtomicUsize::new(0),
            warned_allocation: AtomicBool::new(false),
        }
    }

    /// A block for a lane: a freed one from the budget's free list, or a new one (`None`,
    /// reported once, when the allocation fails).
    pub(crate) fn take(&self) -> Option<*mut Block> {
        if let Some(block) = self.budget.0.pop_free() {
            return Some(block);
        }
        let block = self.allocate();
        if block.is_none() && !self.warned_allocation.swap(true, Ordering::Relaxed) {
            log::warn!(
                "cannot allocate a staging block of {BLOCK_EVENTS} events; events that need one \
                 are dropped (and counted)"
            );
        }
        block
    }

    /// A new block, its slots untouched.
    pub(crate) fn allocate(&self) -> Option<*mut Block> {
        let layout = std::alloc::Layout::new::<Block>();
        // SAFETY: `Block` has a non-zero size.
        let block = unsafe { std::alloc::alloc(layout) }.cast::<Block>();
        if block.is_null() {
            return None;
        }
        let mut head = self.allocated.load(Ordering::Relaxed);
        // SAFETY: `block` is a fresh allocation of a `Block`; only its header is written (the
        // slots are `MaybeUninit`).
        unsafe {
            ptr::addr_of_mut!((*block).base).write(AtomicU64::new(0));
            ptr::addr_of_mut!((*block).next).write(AtomicPtr::new(ptr::null_mut()));
            ptr::addr_of_mut!((*block).allocated_next).write(head);
            #[cfg(loom)]
            ptr::addr_of_mut!((*block).accesses)
                .write(std::array::from_fn(|_| UnsafeCell::new(())));
        }
        while let Err(now) =
            self.allocated
                .compare_exchange(head, block, Ordering::Release, Ordering::Relaxed)
        {
            head = now;
            // SAFETY: `block` is not published yet: this thread alone writes it.
            unsafe { (*block).allocated_next = head };
        }
        self.blocks.fetch_add(1, Ordering::Relaxed);
        Some(block)
    }

    /// Blocks allocated since the pool was created.
    pub(crate) fn count(&self) -> usize {
        self.blocks.load(Ordering::Relaxed)
    }
}

impl Drop for BlockPool {
    /// Frees every block; no lane may use one any more.
    fn drop(&mut self) {
        let mut block = self.allocated.load(Ordering::Acquire);
        while !block.is_null() {
            // SAFETY: every block was allocated by `allocate` with this layout, is on this list
            // once, and no lane uses it any more (the queue is gone). Its fields need no drop
            // in a normal build (atomics, a pointer, uninitialised slots); under loom the
            // checked atomics and cells are dropped as loom requires.
            unsafe {
                let next = (*block).allocated_next;
                ptr::drop_in_place(block);
                std::alloc::dealloc(block.cast(), std::alloc::Layout::new::<Block>());
                block = next;
            }
        }
    }
}
