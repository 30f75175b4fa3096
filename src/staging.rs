//! The bounded producer-side staging of one collector: every producer thread appends into its
//! own chain of fixed-size blocks (its *lane*), with room granted from one budget of
//! `capacity` events shared by every thread; the one flusher drains every lane at once. When
//! the budget is spent the newest events are dropped (never overwriting staged ones) and every
//! drop is counted exactly.
//!
//! # Design: producer-local blocks from a shared pool, room from a shared budget
//!
//! Memory and room are kept apart. Memory comes in blocks of [`BLOCK_EVENTS`] event slots, as
//! in the block pool of moodycamel's ConcurrentQueue: a thread fills its current block and,
//! when the next batch does not fit, links a new one behind it, taken from the lane's spare
//! block, else from the queue's free list, else newly allocated. A block is never written at
//! allocation (its slots are uninitialised), so memory nobody recorded into is never resident.
//! Room is *credit*: before a thread writes events it must hold credit for them, taken from the
//! queue's budget in chunks of up to a block. The budget holds `capacity` events plus
//! [`BLOCK_EVENTS`] for every thread recording beyond the first, so:
//!
//! * **The bound.** Staged events never exceed `capacity + (T - 1) x BLOCK_EVENTS`, T the
//!   threads recording into the queue at the same time ([`StagingQueue::reserved`] is the
//!   queue's own count: staged events plus credit threads hold). With one thread the capacity
//!   is exactly `capacity`, NIXL's. Resident memory is the blocks in use: staged events fill
//!   their blocks but for the last (at most 3 slots are skipped when a 4-event batch does not
//!   fit), plus per thread its current block, its oldest partly drained block and one spare:
//!   about `capacity x 16` bytes plus `3 x 16 x BLOCK_EVENTS` bytes (12 KiB) per thread. Blocks
//!   freed by a flush go back to the lane (one spare) or the free list and are reused, hot in
//!   cache, by the next block any thread needs.
//! * **Drop-newest, not early.** A thread is refused only when the budget cannot cover its
//!   batch after it gave back its own unused credit; the others hold at most one block of
//!   unused credit each, which the budget's per-thread block covers: a batch is dropped only
//!   when the staged events plus the batch would exceed `capacity`.
//! * **The fast path** touches only lines the thread owns: its lane's producer line (`head`,
//!   the credit `limit`, the current block's slot origin) and its block's slots, then publishes
//!   with one release store of `head`. The shared budget is written once per block (one
//!   compare-and-swap per [`BLOCK_EVENTS`] events), and the free list, on the same cache line,
//!   when the new block is not the lane's spare: one line transfer per block.
//! * **Batches** are written into consecutive slots of one block (a batch that does not fit
//!   the current block starts a new one) and published by one store: all or none, contiguous.
//!   A thread's events are drained in the order it recorded them; threads lane after lane.
//! * **Threads.** A thread finds its lane through a thread-local cache (the last queue used is
//!   one compare away; several collectors in a process are a short search), and the C entry
//!   points' fast path ([`FastPath::try_push_in_place`]) finds it without a thread-local
//!   access, in the queue's slots keyed by the thread pointer ([`ThreadSlots`]: in a shared
//!   library a thread-local access is a call to `__tls_get_addr`). Its first call
//!   claims a lane left by an exited thread or links a new one into the queue's lock-free list
//!   of lanes. When a thread exits it gives back its credit and its lane, with what is still
//!   staged in it (the next flush drains it), so 10,000 short-lived threads reuse one lane.
//! * **Without thread-locals** (a call from a thread-local destructor or an atexit handler)
//!   the caller appends to the queue's shared lane under a short lock and gives back the
//!   credit it did not use right away, so the shared lane holds no credit between calls.
//! * When the queue is dropped its blocks are freed and its lanes marked retired; threads drop
//!   a retired lane (a few words) from their cache at their next lookup or when they exit.
//!
//! # Why this design, and the block size
//!
//! Alternatives measured or weighed: per-thread rings of `capacity` slots each (the previous
//! design) need no shared word at all but stage up to `T x capacity` events and keep that much
//! memory resident (350-470 MB with 64 threads and a 1,048,576-event capacity in the
//! benchmark driver, against 34 MB for a model of NIXL's two vectors); one ring shared by
//! every thread (NIXL's design, or a lock-free multi-producer ring) makes every call write a
//! shared word; LTTng's per-CPU sub-buffers need the producer pinned to a CPU (restartable
//! sequences), which a library called from any thread cannot assume. Blocks keep the previous
//! design's fast path (a call writes only its thread's lines: 92 instructions per
//! `add_xfer_stats` under callgrind when this design landed, 66 since session 6, the previous
//! design 117, the model of NIXL's 190) and
//! bound memory (21-22 MB in the same driver runs). 256 events (4 KiB) per block is the
//! trade-off: a producer writes a shared cache line (the budget, and the free list beside it)
//! once per 64 transfers, a flush of 4,096 events is 16 runs, and a thread beyond the first
//! may stage 256 events more; smaller blocks write shared lines more often, larger ones loosen
//! the bound.
//! `docs/dev/performance.md` has the measurements.
//!
//! # Forking
//!
//! No producer ever blocks on a lock of the standard library: the fast path takes none; the
//! lane list is lock-free; the free list, the shared lane and the drain state are guarded by
//! small spin locks (`SpinLock`) held for a few instructions (the free list, the shared lane)
//! or for one flush (the drain state). A fork while another thread holds one leaves it held in
//! the child, so a child must not reuse the parent's staging as it is: every lock here can be
//! released by force and every counter reset, because all of them are plain atomics owned by the
//! queue. Resetting a queue in the child (the parent's staged events belong to the parent, which
//! exports them) is: force-release the three spin locks, set each lane's `tail` to its `head`
//! and its drainer's `first` block to its current block (the blocks before it go to the free
//! list) and its credit `limit` to its `head`, mark every lane but the forking thread's
//! unowned, clear every thread slot but the forking thread's (the child's new threads may get
//! the addresses of the parent's other threads), and set the budget's `outstanding` to 0, its
//! thread count to the lanes still owned and its limit to match. No memory needs to be
//! allocated for it. (The C ABI refuses every call on a collector a child inherited, so no
//! queue is reset today.)

use std::cell::{Cell, RefCell, UnsafeCell};
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::event::Event;

/// Largest supported capacity.
pub const MAX_CAPACITY: usize = 1 << 30;

/// Event slots per block: the memory unit, the largest chunk of credit a thread takes, and the
/// per-thread slack of the bound (see the module documentation). A batch longer than a block is
/// refused.
pub const BLOCK_EVENTS: usize = 256;

/// Totals since the queue was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagingCounts {
    /// Events that entered the queue.
    pub accepted: u64,
    /// Events refused because the queue was full.
    pub dropped: u64,
}

/// A cache-line-aligned value, so what one side writes never shares a line with the other's.
#[repr(align(128))]
struct Padded<T>(T);

/// A lock that spins (yielding after a while) and can be released by force, which a child
/// process needs after a `fork` (see the module documentation). Held only briefly.
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time (the
// `locked` flag, taken with acquire and released with release, orders their accesses).
unsafe impl<T: Send> Sync for SpinLock<T> {}

/// Access to a [`SpinLock`]'s value; releases the lock when dropped.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    fn lock(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.locked.load(Ordering::Relaxed) {
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        SpinGuard { lock: self }
    }
}

impl<T> std::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock (see `SpinLock`).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock (see `SpinLock`).
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// A block of event slots. The header is written by the block's producer before the block is
/// linked (release) behind the previous one; the slots are never initialised as a whole.
#[repr(C, align(64))]
struct Block {
    /// The lane index (events published on the lane before it) of slot 0.
    base: AtomicU64,
    /// The next block of the lane (null while this is the producer's current block), or the
    /// next free block while the block is on the free list.
    next: AtomicPtr<Block>,
    /// The previously allocated block of the queue (set once): every block is freed through it.
    allocated_next: *mut Block,
    slots: [UnsafeCell<MaybeUninit<Event>>; BLOCK_EVENTS],
}

/// The first slot of `block`.
///
/// # Safety
/// `block` points to a live block.
unsafe fn slots_of(block: *mut Block) -> *mut Event {
    // SAFETY: the caller's contract; `UnsafeCell<MaybeUninit<Event>>` has the layout of `Event`.
    unsafe { ptr::addr_of_mut!((*block).slots).cast::<Event>() }
}

/// What a queue's threads share about room: written once per block, never per call.
struct Budget {
    /// Staged events plus the credit threads hold: the sum over lanes of `limit - tail`.
    outstanding: AtomicU64,
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
    fn new(capacity: u64) -> Budget {
        Budget {
            outstanding: AtomicU64::new(0),
            threads: AtomicU64::new(0),
            limit: AtomicU64::new(capacity),
            free: SpinLock::new(FreeBlocks(ptr::null_mut())),
        }
    }

    /// A thread takes a lane: every thread but the first brings a block of room.
    fn thread_joins(&self) {
        if self.threads.fetch_add(1, Ordering::Relaxed) >= 1 {
            self.limit.fetch_add(BLOCK_EVENTS as u64, Ordering::Relaxed);
        }
    }

    /// A thread lets its lane go, and the block of room it brought.
    fn thread_leaves(&self) {
        if self.threads.fetch_sub(1, Ordering::Relaxed) >= 2 {
            self.limit.fetch_sub(BLOCK_EVENTS as u64, Ordering::Relaxed);
        }
    }

    /// Most events that may be staged or credited with the current number of threads.
    #[inline]
    fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Takes at least `need` and at most `want` (>= `need`) events of credit; 0 when the budget
    /// does not have `need`.
    fn take(&self, need: u64, want: u64) -> u64 {
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

    fn give_back(&self, n: u64) {
        if n > 0 {
            self.outstanding.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

/// What only the lane's producer writes.
struct ProducerSide {
    /// Events published on the lane (monotonic): lane indexes `[tail, head)` are staged.
    head: AtomicU64,
    /// The lane index up to which the producer holds credit (`head <= limit <= end of the
    /// current block`).
    limit: AtomicU64,
    /// Where lane index 0 would be if the current block extended back to it: the slot of lane
    /// index `i` is `origin + i` (computed with wrapping arithmetic, in bounds for the indexes
    /// of the current block).
    origin: AtomicPtr<Event>,
    /// The block being filled.
    current: AtomicPtr<Block>,
    /// Events refused (monotonic).
    dropped: AtomicU64,
}

/// What only the drainer writes (after the lane is created).
struct DrainerSide {
    /// Events taken by the drainer (monotonic).
    tail: AtomicU64,
    /// The oldest block still holding staged events (or the current block).
    first: AtomicPtr<Block>,
}

/// One thread's staging: a chain of blocks, filled by one producer, emptied by the drainer.
///
/// How its blocks are shared: a slot is written only by the lane's single producer (the owning
/// thread, or a caller holding the shared lane's lock) at lane indexes outside `[tail, head)`,
/// and read only by the single drainer (serialised by the drain lock) inside it; the release
/// store of `head` and the acquire load that reads it order the two. A block changes hands
/// (lane to free list or spare, and back to a lane) only under the free list's lock or through
/// the spare's atomic swap, after the drainer's last read of it.
struct Lane {
    producer: Padded<ProducerSide>,
    drainer: Padded<DrainerSide>,
    /// One freed block kept for this lane's next block (put by the drainer, taken by the
    /// producer).
    spare: AtomicPtr<Block>,
    /// Whether a thread owns the lane as its producer.
    owned: AtomicBool,
    /// Set when the queue is dropped: the lane is no longer used.
    retired: AtomicBool,
    /// The next lane of the queue's list (set before the lane is published, then constant).
    next_lane: AtomicPtr<Lane>,
    budget: Arc<Padded<Budget>>,
    /// The queue's thread slots, and the one (index + 1; 0: none) that the owning thread holds
    /// for this lane (read and written by the owner only).
    threads: Arc<ThreadSlots>,
    slot: AtomicUsize,
}

impl Lane {
    /// A lane whose first block is `block` (owned by its creator unless `shared`).
    fn new(
        block: *mut Block,
        budget: Arc<Padded<Budget>>,
        threads: Arc<ThreadSlots>,
        owned: bool,
    ) -> Lane {
        // SAFETY: `block` is a live block nobody else uses; its header is initialised.
        let origin = unsafe {
            (*block).base.store(0, Ordering::Relaxed);
            (*block).next.store(ptr::null_mut(), Ordering::Relaxed);
            slots_of(block)
        };
        Lane {
            producer: Padded(ProducerSide {
                head: AtomicU64::new(0),
                limit: AtomicU64::new(0),
                origin: AtomicPtr::new(origin),
                current: AtomicPtr::new(block),
                dropped: AtomicU64::new(0),
            }),
            drainer: Padded(DrainerSide {
                tail: AtomicU64::new(0),
                first: AtomicPtr::new(block),
            }),
            spare: AtomicPtr::new(ptr::null_mut()),
            owned: AtomicBool::new(owned),
            retired: AtomicBool::new(false),
            next_lane: AtomicPtr::new(ptr::null_mut()),
            budget,
            threads,
            slot: AtomicUsize::new(0),
        }
    }

    /// Appends `batch` (not empty) all or none; only the lane's producer may call it, with the
    /// lane's queue.
    #[inline(always)]
    fn push(&self, queue: &StagingQueue, batch: &[Event]) -> bool {
        let p = &self.producer.0;
        let n = batch.len() as u64;
        let head = p.head.load(Ordering::Relaxed);
        let limit = p.limit.load(Ordering::Relaxed);
        if head + n > limit {
            if self.full_for(head, limit, n) {
                return self.refuse(n);
            }
            return self.push_slow(queue, batch, head, limit);
        }
        self.write(head, batch);
        true
    }

    /// Whether a batch of `n` events that does not fit the credit this thread holds (`head`
    /// and `limit` as [`Lane::push`] read them) must be refused. Whether it needs a new block
    /// or more credit for this one, the budget must have room for it beside that credit: when
    /// it has not (the queue is full), it is refused after reading the budget, without writing
    /// it.
    ///
    /// That is `room + (limit - head) < n`, `room` the budget's limit less its outstanding
    /// credit (the credit not taken), or 0 when that is negative. Written `limit_b + (limit - head) < outstanding + n`:
    /// the same when `room` is not clamped, and when it is (`limit_b < outstanding`) both are
    /// true, since here `limit - head < n` (the batch does not fit the credit). No clamp, and
    /// so fewer registers on the producer's fast path.
    #[inline(always)]
    fn full_for(&self, head: u64, limit: u64, n: u64) -> bool {
        let budget = &self.budget.0;
        budget.limit() + (limit - head) < budget.outstanding.load(Ordering::Relaxed) + n
    }

    /// Writes `batch` at lane index `head` of the current block and publishes it; the producer
    /// holds credit for it and the block has the slots.
    #[inline(always)]
    fn write(&self, head: u64, batch: &[Event]) {
        let p = &self.producer.0;
        let mut slot = p.origin.load(Ordering::Relaxed).wrapping_add(head as usize);
        for event in batch {
            // SAFETY: `head .. head + n` are slots of the current block (`limit` never passes
            // its end), outside `[tail, head)`: the drainer does not read them and no one else
            // writes them until `head` is published below; a slot is an aligned `Event`.
            unsafe { event.write_record(slot) };
            slot = slot.wrapping_add(1);
        }
        p.head.store(head + batch.len() as u64, Ordering::Release);
    }

    /// Counts a refused batch.
    #[inline(always)]
    fn refuse(&self, n: u64) -> bool {
        let p = &self.producer.0;
        // One writer: a load and a store, not a read-modify-write.
        let dropped = p.dropped.load(Ordering::Relaxed);
        p.dropped.store(dropped + n, Ordering::Relaxed);
        false
    }

    /// The push that takes credit, and perhaps a new block (`head` and `limit` as [`Lane::push`]
    /// read them).
    #[cold]
    #[inline(never)]
    fn push_slow(&self, queue: &StagingQueue, batch: &[Event], head: u64, limit: u64) -> bool {
        let p = &self.producer.0;
        let n = batch.len() as u64;
        if n > BLOCK_EVENTS as u64 {
            return self.refuse(n);
        }
        let current = p.current.load(Ordering::Relaxed);
        // SAFETY: the current block is live while the lane's queue is.
        let block_end = unsafe { (*current).base.load(Ordering::Relaxed) } + BLOCK_EVENTS as u64;
        if head + n <= block_end {
            // The block has the slots: more credit for it, up to its end.
            let got = self.budget.0.take(head + n - limit, block_end - limit);
            if got == 0 {
                return self.refuse(n);
            }
            p.limit.store(limit + got, Ordering::Relaxed);
            self.write(head, batch);
            return true;
        }
        // The batch needs a new block: give back the credit left in this one, take a block's.
        self.budget.0.give_back(limit - head);
        p.limit.store(head, Ordering::Relaxed);
        let got = self.budget.0.take(n, BLOCK_EVENTS as u64);
        if got == 0 {
            return self.refuse(n);
        }
        let mut next = self.spare.swap(ptr::null_mut(), Ordering::Acquire);
        if next.is_null() {
            match queue.take_block() {
                Some(block) => next = block,
                None => {
                    self.budget.0.give_back(got);
                    return self.refuse(n);
                }
            }
        }
        // SAFETY: `next` is a live block this producer alone holds (from its spare or the free
        // list, or new); `current` is its current block.
        unsafe {
            (*next).base.store(head, Ordering::Relaxed);
            (*next).next.store(ptr::null_mut(), Ordering::Relaxed);
            p.origin.store(
                slots_of(next).wrapping_sub(head as usize),
                Ordering::Relaxed,
            );
            // Seals `current`: the drainer moves past it once it has drained up to `head`.
            (*current).next.store(next, Ordering::Release);
        }
        p.current.store(next, Ordering::Relaxed);
        p.limit.store(head + got, Ordering::Relaxed);
        self.write(head, batch);
        true
    }

    /// Gives back the credit the producer holds and not used.
    fn give_back_credit(&self) {
        let p = &self.producer.0;
        let head = p.head.load(Ordering::Relaxed);
        let limit = p.limit.swap(head, Ordering::Relaxed);
        self.budget.0.give_back(limit - head);
    }

    /// The thread that owned the lane lets it go (at its exit, or on finding it retired): its
    /// credit goes back to the budget, its staged events stay for the drainer.
    fn release(&self) {
        // First, so that a later thread at the same address never finds this lane.
        let slot = self.slot.swap(0, Ordering::Relaxed);
        if slot != 0 {
            self.threads.clear(slot - 1);
        }
        self.give_back_credit();
        self.budget.0.thread_leaves();
        self.owned.store(false, Ordering::Release);
    }
}

/// Slots of [`ThreadSlots`] per queue.
const THREAD_SLOTS: usize = 64;

/// The producer fast path's way from a thread to its lane without a thread-local access (which
/// in a shared library is a call to `__tls_get_addr`, and in any case makes the compiler save
/// registers around it): slots indexed by a hash of the thread pointer, the address the CPU's
/// thread register points at ([`thread_pointer`]), which is unique among live threads. A slot
/// is claimed (compare-and-swap from 0) and cleared only by the thread whose pointer it holds,
/// and it clears it when it lets its lane go ([`Lane::release`], at the latest in its
/// thread-local destructors, before it exits): a later thread at the same address never finds
/// it. A thread whose slot another thread holds takes the thread-local way ([`LAST_LANE`]).
struct ThreadSlots {
    slots: [ThreadSlot; THREAD_SLOTS],
}

/// One slot: the thread pointer of its holder (0: free) and that thread's lane.
struct ThreadSlot {
    thread: AtomicUsize,
    lane: AtomicPtr<Lane>,
}

impl ThreadSlots {
    fn new() -> ThreadSlots {
        ThreadSlots {
            slots: std::array::from_fn(|_| ThreadSlot {
                thread: AtomicUsize::new(0),
                lane: AtomicPtr::new(ptr::null_mut()),
            }),
        }
    }

    /// The slot of `thread` (Fibonacci hashing: thread pointers are aligned and far apart).
    #[inline(always)]
    fn index(thread: usize) -> usize {
        // The top bits of the product; `%` states the bound the shift already ensures.
        ((thread as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> (64 - THREAD_SLOTS.trailing_zeros())) as usize
            % THREAD_SLOTS
    }

    /// The lane of `thread`, if it holds its slot.
    #[inline(always)]
    fn lane(&self, thread: usize) -> Option<*const Lane> {
        let slot = &self.slots[Self::index(thread)];
        (slot.thread.load(Ordering::Acquire) == thread)
            .then(|| slot.lane.load(Ordering::Relaxed).cast_const())
    }

    /// Gives `thread`'s slot to it for `lane`, if the slot is free: its index.
    fn claim(&self, thread: usize, lane: &Lane) -> Option<usize> {
        let index = Self::index(thread);
        let slot = &self.slots[index];
        slot.thread
            .compare_exchange(0, thread, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // Read only by this thread (the only one its pointer matches), after this store.
        slot.lane
            .store(ptr::from_ref(lane).cast_mut(), Ordering::Relaxed);
        Some(index)
    }

    /// Frees slot `index` (by its holder).
    fn clear(&self, index: usize) {
        self.slots[index].thread.store(0, Ordering::Release);
    }
}

/// A queue's thread slots, kept by the caller beside the queue ([`StagingQueue::fast_path`]):
/// the producer fast path, one pointer load closer to the slots than through the queue, which
/// the C entry points' call shows.
#[derive(Clone)]
pub struct FastPath(Arc<ThreadSlots>);

impl FastPath {
    /// The common cases of [`StagingQueue::try_push_batch`], for callers that must not unwind
    /// (the C entry points run it before their panic boundary): `Some(true)` when `batch` was
    /// staged in this thread's lane, in the block and with the credit the lane already holds;
    /// `Some(false)` when it was refused and counted as dropped (the queue is full); `None`,
    /// having changed nothing, when [`StagingQueue::try_push_batch`] must decide (a thread's
    /// first call, a new block, more credit). Loads, compares and stores only, with no call on
    /// its path and nothing that can panic.
    ///
    /// # Safety
    /// The queue this came from is alive (its lanes' blocks are freed with it).
    #[inline(always)]
    pub unsafe fn try_push_in_place<const N: usize>(&self, batch: &[Event; N]) -> Option<bool> {
        let lane = self.0.lane(thread_pointer()?)?;
        // SAFETY: this thread holds the slot, so the lane is the one its cache holds (it clears
        // the slot before letting the lane go), and its blocks are alive with the queue (the
        // caller's contract).
        let lane = unsafe { &*lane };
        let p = &lane.producer.0;
        let (n, head, limit) = (
            N as u64,
            p.head.load(Ordering::Relaxed),
            p.limit.load(Ordering::Relaxed),
        );
        if N == 0 || head + n <= limit {
            lane.write(head, batch);
            return Some(true);
        }
        if lane.full_for(head, limit, n) {
            return Some(lane.refuse(n));
        }
        None
    }
}

/// The calling thread's thread pointer: the address in its thread register (`%fs` base, whose
/// first word the x86-64 TLS ABI makes point to itself; `tpidr_el0` on AArch64), unique among
/// the process's live threads. `None` on other targets (and under Miri), which then always take
/// the thread-local way.
#[inline(always)]
fn thread_pointer() -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
    {
        let tp: usize;
        // SAFETY: on x86-64 Linux every thread's `%fs` base is its thread control block, whose
        // first word holds its own address (the TLS ABI's requirement); reading it has no
        // side effect.
        unsafe {
            std::arch::asm!(
                "mov {}, qword ptr fs:[0]",
                out(reg) tp,
                options(nostack, readonly, preserves_flags, pure)
            )
        };
        Some(tp)
    }
    #[cfg(all(target_arch = "aarch64", target_os = "linux", not(miri)))]
    {
        let tp: usize;
        // SAFETY: reading `tpidr_el0`, the thread pointer the kernel keeps per thread, touches
        // no memory and has no side effect.
        unsafe {
            std::arch::asm!(
                "mrs {}, tpidr_el0",
                out(reg) tp,
                options(nomem, nostack, preserves_flags, pure)
            )
        };
        Some(tp)
    }
    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux",
        not(miri)
    )))]
    {
        None
    }
}

/// Unique ids of queues, so a thread's cache never mistakes a new queue for a dropped one.
static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(1);

/// A thread's lanes, by queue id (the last one used is in [`LAST_LANE`]).
struct LaneCache {
    lanes: RefCell<Vec<(u64, Arc<Lane>)>>,
}

/// The lane a thread used last, and its queue's id (0: none). A thread-local without a
/// destructor, so [`StagingQueue::try_push_batch`] reads it with a plain thread-local access
/// and no lazy registration on its way. It points at a lane [`LANES`] holds: set only by
/// [`LaneCache::lookup`], and reset before the cache lets any lane go.
struct LastLane {
    queue: Cell<u64>,
    lane: Cell<*const Lane>,
}

impl LastLane {
    /// This thread's lane for `queue` if it is the one it used last (no lookup).
    #[inline(always)]
    fn get(&self, queue: &StagingQueue) -> Option<*const Lane> {
        (self.queue.get() == queue.id).then(|| self.lane.get())
    }
}

/// The lane of this thread for `queue`, claimed on first use; `None` when none can be had (the
/// thread's cache is gone: a call from a thread-local destructor).
#[inline(always)]
fn thread_lane(queue: &StagingQueue) -> Option<*const Lane> {
    match LAST_LANE.with(|last| last.get(queue)) {
        Some(lane) => Some(lane),
        None => LANES
            .try_with(|cache| cache.lookup(queue).map(|lane| lane as *const Lane))
            .ok()
            .flatten(),
    }
}

impl LaneCache {
    #[cold]
    fn lookup(&self, queue: &StagingQueue) -> Option<&Lane> {
        let mut lanes = self.lanes.try_borrow_mut().ok()?;
        LAST_LANE.with(|last| last.queue.set(0));
        lanes.retain(|(_, lane)| {
            let keep = !lane.retired.load(Ordering::Acquire);
            if !keep {
                lane.release();
            }
            keep
        });
        let lane = match lanes.iter().find(|(id, _)| *id == queue.id) {
            Some((_, lane)) => lane.clone(),
            None => {
                let lane = queue.claim_lane()?;
                lanes.push((queue.id, lane.clone()));
                lane
            }
        };
        if lane.slot.load(Ordering::Relaxed) == 0 {
            if let Some(index) = thread_pointer().and_then(|t| lane.threads.claim(t, &lane)) {
                lane.slot.store(index + 1, Ordering::Relaxed);
            }
        }
        let ptr = Arc::as_ptr(&lane);
        LAST_LANE.with(|last| {
            last.queue.set(queue.id);
            last.lane.set(ptr);
        });
        // SAFETY: `lane` is held by `lanes` (which outlives this borrow of `self`) until a
        // later `lookup` removes it, after resetting `LAST_LANE` as above.
        Some(unsafe { &*ptr })
    }
}

impl Drop for LaneCache {
    /// Returns the thread's lanes: a later thread reuses them, events still staged included.
    fn drop(&mut self) {
        // Calls from later thread-local destructors take the shared lane.
        LAST_LANE.with(|last| last.queue.set(0));
        for (_, lane) in self.lanes.get_mut().drain(..) {
            lane.release();
        }
    }
}

thread_local! {
    static LANES: LaneCache = const {
        LaneCache {
            lanes: RefCell::new(Vec::new()),
        }
    };
    static LAST_LANE: LastLane = const {
        LastLane {
            queue: Cell::new(0),
            lane: Cell::new(std::ptr::null()),
        }
    };
}

/// What the single drainer owns.
struct DrainState {
    reported_drops: u64,
    /// The runs of the drain in progress, kept for their allocation: empty between drains
    /// (the `'static` is never relied on: the runs live only while the drain lock is held and
    /// their blocks are not freed).
    runs: Vec<&'static [Event]>,
    /// Where each lane's drain in progress ended (lane, tail, head): empty between drains.
    drained: Vec<(*const Lane, u64, u64)>,
}

// SAFETY: the run slices and lane pointers are used only by the drainer holding the drain lock,
// while the queue (which owns the lanes and blocks) is alive; between drains both are empty.
unsafe impl Send for DrainState {}

/// The bounded staging of one collector (see the module documentation).
pub struct StagingQueue {
    id: u64,
    capacity: usize,
    budget: Arc<Padded<Budget>>,
    /// Which lane each producer thread holds, for the fast path.
    threads: Arc<ThreadSlots>,
    /// Every lane of this queue, owned or free, newest first (a lock-free list of
    /// `Arc::into_raw` pointers, freed when the queue is dropped); the last is the shared lane.
    lanes: AtomicPtr<Lane>,
    /// The lane of callers without thread-locals (also in `lanes`), and the lock that makes
    /// them one producer.
    shared: *const Lane,
    shared_producer: SpinLock<()>,
    /// Every block allocated, linked through `allocated_next`.
    allocated: AtomicPtr<Block>,
    blocks: AtomicUsize,
    /// Whether the failure to allocate a block was reported (once per queue).
    warned_allocation: AtomicBool,
    drain: SpinLock<DrainState>,
}

// SAFETY: `shared` points to a lane the queue keeps alive (it is in `lanes`); the lanes and
// their blocks are shared as described at `Lane`; the drain state is reached only under its
// lock.
unsafe impl Sync for StagingQueue {}
// SAFETY: as above; nothing is bound to the creating thread.
unsafe impl Send for StagingQueue {}

impl StagingQueue {
    /// A queue that stages at most `capacity` events from one thread (1..=2^30), and at most
    /// [`BLOCK_EVENTS`] more for every other thread recording at the same time. An impossible
    /// capacity or a failed allocation is an error, not an abort.
    pub fn new(capacity: usize) -> Result<StagingQueue> {
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(Error::invalid(format!(
                "staging queue capacity {capacity} is outside 1..={MAX_CAPACITY}"
            )));
        }
        let budget = Arc::new(Padded(Budget::new(capacity as u64)));
        let mut queue = StagingQueue {
            id: NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed),
            capacity,
            budget,
            threads: Arc::new(ThreadSlots::new()),
            lanes: AtomicPtr::new(ptr::null_mut()),
            shared: ptr::null(),
            shared_producer: SpinLock::new(()),
            allocated: AtomicPtr::new(ptr::null_mut()),
            blocks: AtomicUsize::new(0),
            warned_allocation: AtomicBool::new(false),
            drain: SpinLock::new(DrainState {
                reported_drops: 0,
                runs: Vec::new(),
                drained: Vec::new(),
            }),
        };
        let block = queue.allocate_block().ok_or_else(|| {
            Error::new(
                crate::error::Status::Backend,
                "cannot allocate the first staging block",
            )
        })?;
        let shared = queue.link_lane(Lane::new(
            block,
            queue.budget.clone(),
            queue.threads.clone(),
            true,
        ));
        queue.shared = Arc::as_ptr(&shared);
        Ok(queue)
    }

    /// Maximum number of events one thread stages between two flushes; every other thread
    /// recording at the same time adds at most [`BLOCK_EVENTS`].
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends one event; returns false (and counts one drop) when the queue is full.
    #[inline]
    pub fn try_push(&self, event: Event) -> bool {
        self.try_push_batch(std::slice::from_ref(&event))
    }

    /// Appends all of `batch` contiguously and in order, or nothing: when the queue has no room
    /// for the whole batch it is refused and all its events are counted as dropped (as is a
    /// batch longer than [`BLOCK_EVENTS`]). An empty batch is accepted and changes nothing.
    #[inline(always)]
    pub fn try_push_batch(&self, batch: &[Event]) -> bool {
        if batch.is_empty() {
            return true;
        }
        match thread_lane(self) {
            // SAFETY: the lane is held by this thread's cache, which lets it go only in a later
            // lookup or when the thread exits: neither happens before this push returns.
            Some(lane) => unsafe { &*lane }.push(self, batch),
            None => self.push_shared(batch),
        }
    }

    /// This queue's producer fast path ([`FastPath::try_push_in_place`]), for a caller that
    /// keeps it beside the queue.
    pub fn fast_path(&self) -> FastPath {
        FastPath(self.threads.clone())
    }

    /// The slow path of callers without a lane of their own (thread teardown, or a lane that
    /// could not be allocated): the shared lane, one caller at a time, holding no credit after.
    #[cold]
    fn push_shared(&self, batch: &[Event]) -> bool {
        let _one_producer = self.shared_producer.lock();
        let shared = self.shared_lane();
        let pushed = shared.push(self, batch);
        shared.give_back_credit();
        pushed
    }

    fn shared_lane(&self) -> &Lane {
        // SAFETY: the shared lane is in `lanes`, alive as long as the queue.
        unsafe { &*self.shared }
    }

    /// The lanes, newest first.
    fn lanes(&self) -> impl Iterator<Item = &Lane> {
        let mut next = self.lanes.load(Ordering::Acquire).cast_const();
        std::iter::from_fn(move || {
            // SAFETY: every lane in the list stays alive until the queue is dropped, and its
            // `next_lane` was set before it was published (release CAS, acquire load above).
            let lane = unsafe { next.as_ref()? };
            next = lane.next_lane.load(Ordering::Relaxed);
            Some(lane)
        })
    }

    /// Publishes `lane` at the head of the lane list.
    fn link_lane(&self, lane: Lane) -> Arc<Lane> {
        let lane = Arc::new(lane);
        let raw = Arc::into_raw(lane.clone()).cast_mut();
        let mut head = self.lanes.load(Ordering::Relaxed);
        loop {
            lane.next_lane.store(head, Ordering::Relaxed);
            match self
                .lanes
                .compare_exchange_weak(head, raw, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return lane,
                Err(now) => head = now,
            }
        }
    }

    /// A free lane for a new producer thread (one left by an exited thread first), or a new
    /// one; `None` when no block can be allocated for it.
    fn claim_lane(&self) -> Option<Arc<Lane>> {
        let shared = self.shared;
        for lane in self.lanes() {
            if !ptr::eq(lane, shared)
                && lane
                    .owned
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                self.budget.0.thread_joins();
                // SAFETY: `lane` came from `Arc::into_raw` (in `link_lane`) and the list keeps
                // that reference until the queue is dropped.
                return Some(unsafe {
                    Arc::increment_strong_count(lane);
                    Arc::from_raw(lane)
                });
            }
        }
        let block = self.take_block()?;
        self.budget.0.thread_joins();
        Some(self.link_lane(Lane::new(
            block,
            self.budget.clone(),
            self.threads.clone(),
            true,
        )))
    }

    /// A block for a lane: a freed one, or a new one (`None`, reported once, when the
    /// allocation fails).
    fn take_block(&self) -> Option<*mut Block> {
        {
            let mut free = self.budget.0.free.lock();
            let block = free.0;
            if !block.is_null() {
                // SAFETY: blocks on the free list are live and reached only under its lock.
                free.0 = unsafe { (*block).next.load(Ordering::Relaxed) };
                return Some(block);
            }
        }
        let block = self.allocate_block();
        if block.is_none() && !self.warned_allocation.swap(true, Ordering::Relaxed) {
            log::warn!(
                "cannot allocate a staging block of {BLOCK_EVENTS} events; events that need one \
                 are dropped (and counted)"
            );
        }
        block
    }

    /// A new block, its slots untouched.
    fn allocate_block(&self) -> Option<*mut Block> {
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

    /// Takes every staged event and passes them to `export` as runs, lane after lane, each
    /// thread's events in the order it recorded them. Returns `export`'s result. One drain runs
    /// at a time; producers are never blocked by it.
    pub fn drain<R>(&self, export: impl FnOnce(&[&[Event]]) -> R) -> R {
        let mut state = self.drain.lock();
        let DrainState { runs, drained, .. } = &mut *state;
        for lane in self.lanes() {
            let head = lane.producer.0.head.load(Ordering::Acquire);
            let tail = lane.drainer.0.tail.load(Ordering::Relaxed);
            if head == tail {
                continue;
            }
            let mut block = lane.drainer.0.first.load(Ordering::Relaxed);
            let mut at = tail;
            while at < head {
                // SAFETY: `block` is the lane's block holding lane index `at` (the drainer's
                // `first`, then each `next`), live until this drainer frees it.
                let (base, next) = unsafe {
                    (
                        (*block).base.load(Ordering::Relaxed),
                        (*block).next.load(Ordering::Acquire),
                    )
                };
                let end = match next.is_null() {
                    true => head,
                    // SAFETY: a linked block is live; its base was written before the link.
                    false => head.min(unsafe { (*next).base.load(Ordering::Relaxed) }),
                };
                if end > at {
                    // SAFETY: lane indexes `[at, end)` lie in this block and in `[tail, head)`,
                    // which the producer published (acquire above) and will not write until
                    // `tail` moves past them, which only this drainer does after `export`.
                    runs.push(unsafe {
                        std::slice::from_raw_parts(
                            slots_of(block).add((at - base) as usize),
                            (end - at) as usize,
                        )
                    });
                }
                at = end;
                if at < head {
                    block = next;
                }
            }
            drained.push((lane, tail, head));
        }
        let result = export(runs);
        runs.clear();
        // The blocks every staged event of which is drained (those linked to a next block that
        // starts at or before `head`) go back: one to the lane's spare, the others to the free
        // list in one splice.
        let (mut freed_first, mut freed_last) = (ptr::null_mut::<Block>(), ptr::null_mut());
        for (lane, tail, head) in drained.drain(..) {
            // SAFETY: the lanes of this queue live as long as it does.
            let lane = unsafe { &*lane };
            let mut block = lane.drainer.0.first.load(Ordering::Relaxed);
            // Only this drainer fills the spare and only the producer empties it, so a spare
            // seen filled is not offered again (a locked instruction per block otherwise): the
            // block goes to the free list, which the producer takes from too.
            let mut spare_free = lane.spare.load(Ordering::Relaxed).is_null();
            loop {
                // SAFETY: as in the walk above.
                let next = unsafe { (*block).next.load(Ordering::Acquire) };
                // SAFETY: a linked block is live.
                if next.is_null() || unsafe { (*next).base.load(Ordering::Relaxed) } > head {
                    break;
                }
                let to_spare = spare_free
                    && lane
                        .spare
                        .compare_exchange(
                            ptr::null_mut(),
                            block,
                            Ordering::Release,
                            Ordering::Relaxed,
                        )
                        .is_ok();
                spare_free &= !to_spare;
                if !to_spare {
                    // SAFETY: the block is live and no lane reaches it any more.
                    unsafe { (*block).next.store(freed_first, Ordering::Relaxed) };
                    if freed_first.is_null() {
                        freed_last = block;
                    }
                    freed_first = block;
                }
                block = next;
            }
            lane.drainer.0.first.store(block, Ordering::Relaxed);
            lane.drainer.0.tail.store(head, Ordering::Release);
            self.budget.0.give_back(head - tail);
        }
        if !freed_first.is_null() {
            let mut free = self.budget.0.free.lock();
            // SAFETY: `freed_last` ends the chain of freed blocks this drainer alone holds.
            unsafe { (*freed_last).next.store(free.0, Ordering::Relaxed) };
            free.0 = freed_first;
        }
        result
    }

    /// Number of drops since the previous call (the delta a flush reports).
    pub fn take_dropped(&self) -> u64 {
        let mut state = self.drain.lock();
        let total = self.counts().dropped;
        let delta = total - state.reported_drops;
        state.reported_drops = total;
        delta
    }

    /// Totals since creation (exact when no producer is running).
    pub fn counts(&self) -> StagingCounts {
        let mut counts = StagingCounts::default();
        for lane in self.lanes() {
            counts.accepted += lane.producer.0.head.load(Ordering::Acquire);
            counts.dropped += lane.producer.0.dropped.load(Ordering::Relaxed);
        }
        counts
    }

    /// Number of events currently staged, over every lane.
    pub fn len(&self) -> usize {
        self.lanes()
            .map(|lane| {
                let tail = lane.drainer.0.tail.load(Ordering::Acquire);
                let head = lane.producer.0.head.load(Ordering::Acquire);
                head.saturating_sub(tail) as usize
            })
            .sum()
    }

    /// Whether no event is staged.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queue's own account of its room in use: the staged events plus the credit threads
    /// hold for events they have not written yet. The staged events never exceed it, and it
    /// never exceeds `capacity + (T - 1) x BLOCK_EVENTS` for T threads recording at once.
    pub fn reserved(&self) -> u64 {
        self.budget.0.outstanding.load(Ordering::Relaxed)
    }

    /// Blocks allocated since creation (each `BLOCK_EVENTS x 16` bytes and a 64-byte header):
    /// the staging memory, which freed blocks are reused from rather than grown.
    pub fn blocks_allocated(&self) -> usize {
        self.blocks.load(Ordering::Relaxed)
    }

    /// Number of lanes (the shared one included): a test hook.
    #[cfg(test)]
    fn lane_count(&self) -> usize {
        self.lanes().count()
    }
}

impl Drop for StagingQueue {
    /// Retires every lane (threads still caching one let it go at their next lookup or exit)
    /// and frees every block.
    fn drop(&mut self) {
        let mut lane = self.lanes.get_mut().cast_const();
        while !lane.is_null() {
            // SAFETY: every lane of the list came from `Arc::into_raw`; this releases the
            // list's reference (thread caches may hold others, and never reach its blocks).
            let arc = unsafe { Arc::from_raw(lane) };
            arc.retired.store(true, Ordering::Release);
            lane = arc.next_lane.load(Ordering::Relaxed);
        }
        let mut block = *self.allocated.get_mut();
        while !block.is_null() {
            // SAFETY: every block was allocated by `allocate_block` with this layout, is on
            // this list once, and no lane uses it any more (the queue is gone).
            unsafe {
                let next = (*block).allocated_next;
                std::alloc::dealloc(block.cast(), std::alloc::Layout::new::<Block>());
                block = next;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;
    use std::collections::{HashMap, HashSet};
    use std::sync::atomic::AtomicBool;

    fn ev(v: u64) -> Event {
        Event::new(EventType::AgentTxBytes, v)
    }

    /// Every staged event, flattened.
    fn drain_all(q: &StagingQueue) -> Vec<Event> {
        q.drain(|runs| runs.concat())
    }

    #[test]
    fn fills_to_capacity_then_drops_newest() {
        let q = StagingQueue::new(4).unwrap();
        for v in 0..4 {
            assert!(q.try_push(ev(v)));
        }
        assert!(!q.try_push(ev(99)));
        assert_eq!(drain_all(&q), (0..4).map(ev).collect::<Vec<_>>());
        assert_eq!(
            q.counts(),
            StagingCounts {
                accepted: 4,
                dropped: 1
            }
        );
        assert_eq!(q.take_dropped(), 1);
        assert_eq!(q.take_dropped(), 0);
    }

    #[test]
    fn staged_records_have_zero_padding_whatever_the_event_held() {
        let mut bytes = [0xAAu8; 16];
        bytes[..4].copy_from_slice(&7u32.to_ne_bytes());
        bytes[8..].copy_from_slice(&9u64.to_ne_bytes());
        // SAFETY: any 16 bytes with these two fields make a valid `Event`; its padding holds
        // 0xAA, as stack garbage would.
        let dirty: Event = unsafe { std::mem::transmute(bytes) };
        let q = StagingQueue::new(4).unwrap();
        assert!(q.try_push_batch(&[dirty, dirty]));
        let records: Vec<[u8; 16]> = q.drain(|runs| {
            runs.iter()
                .flat_map(|run| run.iter())
                // SAFETY: a staged record was written as two whole words (write_record), so
                // all 16 of its bytes are initialised.
                .map(|e| unsafe { *(e as *const Event).cast::<[u8; 16]>() })
                .collect()
        });
        assert_eq!(records.len(), 2);
        for r in records {
            assert_eq!(&r[4..8], &[0, 0, 0, 0], "padding bytes reach the exporter");
            assert_eq!(&r[..4], &7u32.to_ne_bytes());
        }
    }

    #[test]
    fn batches_are_all_or_none() {
        let q = StagingQueue::new(6).unwrap();
        assert!(q.try_push_batch(&[ev(1), ev(2), ev(3), ev(4)]));
        assert!(!q.try_push_batch(&[ev(5), ev(6), ev(7)]));
        assert_eq!(q.len(), 4);
        assert!(q.try_push_batch(&[ev(5), ev(6)]));
        assert!(q.try_push_batch(&[]));
        assert_eq!(
            q.counts(),
            StagingCounts {
                accepted: 6,
                dropped: 3
            }
        );
        assert!(!q.try_push_batch(&[ev(9); 7]), "larger than capacity");
        assert_eq!(q.take_dropped(), 10);
    }

    #[test]
    fn a_lane_moves_to_a_new_block_keeping_order_and_reuses_freed_blocks() {
        const B: u64 = BLOCK_EVENTS as u64;
        let q = StagingQueue::new(1024).unwrap();
        // The shared lane's block, and this thread's first block.
        assert!(q.try_push(ev(0)));
        assert_eq!(q.blocks_allocated(), 2);
        for v in 1..B + 10 {
            assert!(q.try_push(ev(v)));
        }
        let runs = q.drain(|runs| runs.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
        let lens: Vec<usize> = runs.iter().map(|r| r.len()).collect();
        assert_eq!(lens, [B as usize, 10], "one run per block, in order");
        assert_eq!(runs.concat(), (0..B + 10).map(ev).collect::<Vec<_>>());
        assert_eq!(q.blocks_allocated(), 3);
        // The drained full block is this lane's spare: the next block is that one, not a new
        // one. A batch that does not fit what is left of a block starts the next block whole.
        for v in 10..B - 1 {
            assert!(q.try_push(ev(v)));
        }
        assert!(q.try_push_batch(&[ev(1), ev(2), ev(3), ev(4)]));
        assert_eq!(q.blocks_allocated(), 3, "the freed block is reused");
        let runs = q.drain(|runs| runs.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].len(), (B - 11) as usize);
        assert_eq!(
            runs[1],
            [ev(1), ev(2), ev(3), ev(4)],
            "the batch is contiguous"
        );
        assert_eq!(q.drain(|runs| runs.len()), 0);
        assert_eq!((q.len(), q.reserved() <= B), (0, true));
    }

    #[test]
    fn one_thread_sees_exactly_the_capacity_between_flushes() {
        let q = StagingQueue::new(1024).unwrap();
        for v in 0..1022 {
            assert!(q.try_push(ev(v)));
        }
        for _ in 0..10 {
            assert!(!q.try_push_batch(&[ev(0); 4]));
        }
        assert!(q.try_push_batch(&[ev(1), ev(2)]));
        assert_eq!(q.take_dropped(), 40);
        assert_eq!(drain_all(&q).len(), 1024);
    }

    #[test]
    fn memory_grows_with_what_is_staged_not_with_the_capacity() {
        const B: usize = BLOCK_EVENTS;
        // The largest capacity allocates one block (the shared lane's) up front.
        let q = StagingQueue::new(MAX_CAPACITY).unwrap();
        assert_eq!(q.blocks_allocated(), 1);
        assert!(q.try_push(ev(1)));
        assert_eq!(q.blocks_allocated(), 2, "a thread's first block");
        drop(q);
        // One thread filling a queue twice, with a flush between, reuses the blocks the flush
        // freed: full blocks for the capacity, plus this lane's current and spare blocks.
        let capacity = 40 * B;
        let q = StagingQueue::new(capacity).unwrap();
        for round in 0..2 {
            let accepted = (0..capacity as u64 / 4 + 10)
                .filter(|v| q.try_push_batch(&[ev(*v); 4]))
                .count();
            assert_eq!(accepted, capacity / 4, "round {round}");
            assert_eq!(drain_all(&q).len(), capacity);
        }
        assert!(
            q.blocks_allocated() <= 1 + capacity / B + 2,
            "{}",
            q.blocks_allocated()
        );
    }

    #[test]
    fn threads_share_the_capacity_with_a_block_of_slack_each() {
        const B: u64 = BLOCK_EVENTS as u64;
        const CAPACITY: u64 = 8;
        let q = Arc::new(StagingQueue::new(CAPACITY as usize).unwrap());
        // All three threads are alive together (a thread that exits hands its lane on).
        let together = Arc::new(std::sync::Barrier::new(3));
        let threads: Vec<_> = (0..3u64)
            .map(|t| {
                let (q, together) = (q.clone(), together.clone());
                std::thread::spawn(move || {
                    together.wait();
                    let n = (0..1000).filter(|v| q.try_push(ev(t * 10_000 + v))).count();
                    together.wait();
                    n as u64
                })
            })
            .collect();
        let accepted: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let total: u64 = accepted.iter().sum();
        // Never more than the capacity plus one block for each thread beyond the first; every
        // thread was refused, which happens only once the capacity is reached.
        assert!(total <= CAPACITY + 2 * B, "{accepted:?}");
        assert!(total >= CAPACITY, "{accepted:?}");
        assert_eq!(q.len() as u64, total);
        assert_eq!(q.counts().dropped, 3000 - total);
        let got = drain_all(&q);
        for t in 0..3u64 {
            let mine: Vec<u64> = got
                .iter()
                .map(|e| e.value)
                .filter(|v| v / 10_000 == t)
                .collect();
            // The budget grows as threads start recording: a thread refused early may be
            // accepted again later, so its events are in order, not necessarily its first.
            assert_eq!(mine.len() as u64, accepted[t as usize]);
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "thread {t}: order");
        }
        assert_eq!(q.take_dropped(), 3000 - total);
        // The threads have exited and given their credit back: one thread has the capacity.
        assert_eq!(q.reserved(), 0);
        let alone = (0..100).filter(|v| q.try_push(ev(*v))).count();
        assert_eq!(alone as u64, CAPACITY);
    }

    #[test]
    fn lanes_of_exited_threads_are_reused_with_what_they_hold() {
        // Fewer under Miri, which interprets every access.
        let threads: u64 = if cfg!(miri) { 20 } else { 10_000 };
        let q = Arc::new(StagingQueue::new(16).unwrap());
        let mut got = Vec::new();
        for t in 0..threads {
            let q2 = q.clone();
            std::thread::spawn(move || assert!(q2.try_push(ev(t))))
                .join()
                .unwrap();
            if t % 10 == 9 {
                got.extend(drain_all(&q));
            }
        }
        got.extend(drain_all(&q));
        // One thread at a time: its lane is returned at exit and taken by the next thread, so
        // one lane (beside the shared one) serves them all.
        assert_eq!(q.lane_count(), 2);
        assert_eq!(got, (0..threads).map(ev).collect::<Vec<_>>());
        assert_eq!(q.counts().dropped, 0);
    }

    #[test]
    fn several_queues_in_one_thread_stay_apart() {
        let a = StagingQueue::new(4).unwrap();
        let b = StagingQueue::new(4).unwrap();
        for v in 0..3 {
            assert!(a.try_push(ev(v)));
            assert!(b.try_push(ev(10 + v)));
        }
        assert_eq!(drain_all(&a), [ev(0), ev(1), ev(2)]);
        assert_eq!(drain_all(&b), [ev(10), ev(11), ev(12)]);
    }

    #[test]
    fn a_dropped_queue_is_let_go_and_a_new_one_gets_a_new_lane() {
        let first = StagingQueue::new(4).unwrap();
        assert!(first.try_push(ev(1)));
        let lane = LANES.with(|c| c.lanes.borrow()[0].1.clone());
        drop(first);
        assert!(lane.retired.load(Ordering::Acquire));
        let second = StagingQueue::new(4).unwrap();
        assert!(second.try_push(ev(2)));
        assert_eq!(drain_all(&second), [ev(2)]);
        LANES.with(|c| {
            let lanes = c.lanes.borrow();
            assert!(
                lanes.iter().all(|(_, l)| !Arc::ptr_eq(l, &lane)),
                "retired lane pruned"
            );
        });
    }

    #[test]
    fn a_call_from_a_thread_local_destructor_is_staged_in_the_shared_lane() {
        struct RecordsAtExit(Arc<StagingQueue>);
        impl Drop for RecordsAtExit {
            fn drop(&mut self) {
                // Whether or not this thread's lane cache is gone yet, the event is staged.
                assert!(self.0.try_push(ev(42)));
            }
        }
        thread_local! {
            static AT_EXIT: RefCell<Option<RecordsAtExit>> = const { RefCell::new(None) };
        }
        let q = Arc::new(StagingQueue::new(4).unwrap());
        let q2 = q.clone();
        std::thread::spawn(move || {
            assert!(q2.try_push(ev(1)));
            AT_EXIT.with(|a| *a.borrow_mut() = Some(RecordsAtExit(q2)));
        })
        .join()
        .unwrap();
        let mut got: Vec<u64> = drain_all(&q).iter().map(|e| e.value).collect();
        got.sort_unstable();
        assert_eq!(got, [1, 42]);
    }

    #[test]
    fn concurrent_singles_are_never_read_before_written() {
        // Four producers push single events whose type is derived from their value while a
        // drainer empties the queue as fast as it can: a slot read before its producer wrote
        // it would show a stale or mismatched (type, value) pair or a repeated value.
        const PRODUCERS: u64 = 4;
        const EVENTS: u64 = if cfg!(miri) { 200 } else { 50_000 };
        let q = Arc::new(StagingQueue::new(64).unwrap());
        let done = Arc::new(AtomicBool::new(false));
        let drainer = {
            let (q, done) = (q.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seen = HashSet::new();
                let mut last = [None::<u64>; PRODUCERS as usize];
                loop {
                    let finished = done.load(Ordering::Acquire);
                    q.drain(|runs| {
                        for e in runs.iter().flat_map(|r| r.iter()) {
                            let (p, i) = (e.value >> 32, e.value & 0xffff_ffff);
                            assert_eq!(e.event_type as u64, (p * 7 + i) % 21, "torn slot");
                            assert!(seen.insert(e.value), "event read twice");
                            let prev = last[p as usize].replace(i);
                            assert!(prev.is_none_or(|prev| i > prev), "order");
                        }
                    });
                    if finished {
                        return seen.len() as u64;
                    }
                }
            })
        };
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    (0..EVENTS)
                        .filter(|i| {
                            q.try_push(Event {
                                event_type: ((p * 7 + i) % 21) as u32,
                                value: (p << 32) | i,
                            })
                        })
                        .count() as u64
                })
            })
            .collect();
        let accepted: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
        done.store(true, Ordering::Release);
        let read = drainer.join().unwrap();
        let counts = q.counts();
        assert_eq!(read, accepted);
        assert_eq!(counts.accepted, accepted);
        assert_eq!(counts.accepted + counts.dropped, PRODUCERS * EVENTS);
    }

    /// Checks that `got` holds whole 4-event batches (types 0..4, one id), each producer
    /// thread's (the id's high half) in increasing order; returns how many.
    fn check_batches(got: &[Event]) -> usize {
        let mut last = HashMap::new();
        for quad in got.chunks(4) {
            assert_eq!(
                quad.iter().map(|e| e.event_type).collect::<Vec<_>>(),
                [0, 1, 2, 3]
            );
            assert!(
                quad.iter().all(|e| e.value == quad[0].value),
                "partial batch"
            );
            let (producer, seq) = (quad[0].value >> 32, quad[0].value & 0xffff_ffff);
            if let Some(prev) = last.insert(producer, seq) {
                assert!(seq > prev, "producer {producer}: {seq} after {prev}");
            }
        }
        got.len() / 4
    }

    fn batch(id: u64) -> [Event; 4] {
        [0, 1, 2, 3].map(|i| Event {
            event_type: i,
            value: id,
        })
    }

    /// Drains `q` until `done`, then once more; returns every event in drain order.
    fn drain_until(
        q: Arc<StagingQueue>,
        done: Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<Vec<Event>> {
        std::thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                let finished = done.load(Ordering::Acquire);
                q.drain(|runs| {
                    for run in runs {
                        got.extend_from_slice(run);
                    }
                });
                if finished {
                    return got;
                }
                std::thread::yield_now();
            }
        })
    }

    #[test]
    fn concurrent_batches_conserve_events_stay_whole_and_ordered() {
        const PRODUCERS: u64 = 8;
        const BATCHES: u64 = if cfg!(miri) { 50 } else { 5000 };
        let q = Arc::new(StagingQueue::new(256).unwrap());
        let done = Arc::new(AtomicBool::new(false));
        let consumer = drain_until(q.clone(), done.clone());
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    (0..BATCHES)
                        .filter(|b| q.try_push_batch(&batch((p << 32) | b)))
                        .count() as u64
                })
            })
            .collect();
        let accepted: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
        done.store(true, Ordering::Release);
        let got = consumer.join().unwrap();
        let counts = q.counts();
        assert_eq!(counts.accepted, accepted * 4);
        assert_eq!(got.len() as u64, counts.accepted);
        assert_eq!(counts.accepted + counts.dropped, PRODUCERS * BATCHES * 4);
        assert_eq!(counts.dropped % 4, 0);
        assert_eq!(check_batches(&got) as u64, accepted);
    }

    #[test]
    fn thread_churn_while_flushing_conserves_every_event() {
        churn_while_flushing(|q, b| q.try_push_batch(b));
    }

    #[test]
    fn thread_churn_through_the_fast_path_conserves_every_event() {
        // As the C entry point records: the fast path, then the full one when it cannot
        // decide. Short-lived threads reuse the addresses (thread pointers) of exited ones:
        // a slot left to an exited thread would let a new one write into a lane another
        // thread holds.
        churn_while_flushing(|q, b| {
            // SAFETY: the queue is alive for the call.
            unsafe { q.fast_path().try_push_in_place(b) }.unwrap_or_else(|| q.try_push_batch(b))
        });
    }

    /// Eight workers each run many short-lived threads that record a few batches with `push`
    /// and exit, while a drainer flushes continuously: lanes change hands mid-flush.
    fn churn_while_flushing(push: fn(&StagingQueue, &[Event; 4]) -> bool) {
        const WORKERS: u64 = 8;
        const THREADS: u64 = if cfg!(miri) { 3 } else { 100 };
        const BATCHES: u64 = 20;
        let q = Arc::new(StagingQueue::new(64).unwrap());
        let done = Arc::new(AtomicBool::new(false));
        let consumer = drain_until(q.clone(), done.clone());
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut accepted = 0;
                    for t in 0..THREADS {
                        let q = q.clone();
                        accepted += std::thread::spawn(move || {
                            (0..BATCHES)
                                .filter(|b| push(&q, &batch(((w * THREADS + t) << 32) | b)))
                                .count() as u64
                        })
                        .join()
                        .unwrap();
                    }
                    accepted
                })
            })
            .collect();
        let accepted: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        done.store(true, Ordering::Release);
        let got = consumer.join().unwrap();
        let counts = q.counts();
        assert_eq!(got.len() as u64, accepted * 4);
        assert_eq!(
            counts.accepted + counts.dropped,
            WORKERS * THREADS * BATCHES * 4
        );
        assert_eq!(check_batches(&got) as u64, accepted);
        // At most one lane per worker thread's child at a time, plus the shared one.
        assert!(
            q.lane_count() <= 1 + WORKERS as usize,
            "{} lanes",
            q.lane_count()
        );
    }
}
