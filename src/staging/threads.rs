//! How a thread finds its lane: the queue's thread slots, keyed by the thread pointer, which the
//! producer fast path ([`FastPath::try_push_in_place`]) reads without a thread-local access, and
//! the thread-local cache of the thread's lanes, which claims a lane on a thread's first call
//! and hands it back (to the next thread that needs one) when the thread exits.

use std::cell::{Cell, RefCell};
use std::ptr;
use std::sync::Arc;

use super::lane::Lane;
use super::sync::{AtomicPtr, AtomicUsize, Ordering};
use crate::event::Event;

/// Slots of [`ThreadSlots`] per queue (2 in the loom model check: fewer objects to model).
const THREAD_SLOTS: usize = if cfg!(loom) { 2 } else { 64 };

/// The producer fast path's way from a thread to its lane without a thread-local access (which
/// in a shared library is a call to `__tls_get_addr`, and in any case makes the compiler save
/// registers around it): slots indexed by a hash of the thread pointer, the address the CPU's
/// thread register points at ([`thread_pointer`]), which is unique among live threads. A slot
/// is claimed (compare-and-swap from 0) and cleared only by the thread whose pointer it holds,
/// and it clears it before it lets its lane go ([`LaneCache`], at the latest in its
/// thread-local destructors, before it exits): a later thread at the same address never finds
/// it. A thread whose slot another thread holds takes the thread-local way ([`LAST_LANE`]).
pub(crate) struct ThreadSlots {
    slots: [ThreadSlot; THREAD_SLOTS],
}

/// One slot: the thread pointer of its holder (0: free) and that thread's lane.
struct ThreadSlot {
    thread: AtomicUsize,
    lane: AtomicPtr<Lane>,
}

impl ThreadSlots {
    /// Slots all free.
    pub(crate) fn new() -> ThreadSlots {
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

/// A queue's thread slots, kept by the caller beside the queue
/// ([`StagingQueue::fast_path`](super::StagingQueue::fast_path)): the producer fast path, one
/// pointer load closer to the slots than through the queue, which the C entry points' call
/// shows.
#[derive(Clone)]
pub struct FastPath(pub(crate) Arc<ThreadSlots>);

impl FastPath {
    /// The common cases of [`StagingQueue::try_push_batch`](super::StagingQueue::try_push_batch),
    /// for callers that must not unwind (the C entry points run it before their panic
    /// boundary): `Some(true)` when `batch` was staged in this thread's lane, in the block and
    /// with the credit the lane already holds; `Some(false)` when it was refused and counted as
    /// dropped (the queue is full); `None`, having changed nothing, when
    /// [`StagingQueue::try_push_batch`](super::StagingQueue::try_push_batch) must decide (a
    /// thread's first call, a new block, more credit). Loads, compares and stores only, with no
    /// call on its path and nothing that can panic.
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
#[cfg(not(loom))]
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

/// The model thread's "thread pointer" under loom, whose threads all run on one OS thread: a
/// number from its loom thread id, unique among the model's threads, and one that the first
/// slot's hash takes (the model's few threads all meet in one slot: one holds it, the others
/// take the thread-local way, and the next claims it when its holder gives it back at exit).
/// Not reused: a real thread pointer is reused only after its thread's exit, which happens
/// before the next thread's start through the C library, a chain loom does not see.
#[cfg(loom)]
fn thread_pointer() -> Option<usize> {
    let id = format!("{:?}", loom::thread::current().id());
    let id: usize = id
        .trim_start_matches("ThreadId(")
        .trim_end_matches(')')
        .parse()
        .ok()?;
    // (2 x id + 1) x 4 KiB hashes to slot 0 for every id loom can have (0..=4).
    Some((2 * id + 1) * 0x1000)
}

/// A lane of this thread's cache: its queue's id, and the thread slot (with the queue's slots)
/// that this thread holds for it, if any.
struct CachedLane {
    queue: u64,
    lane: Arc<Lane>,
    slot: Option<(Arc<ThreadSlots>, usize)>,
}

impl CachedLane {
    /// Lets the lane go: first the thread slot, so that a later thread at the same address
    /// never finds the lane, then the lane ([`Lane::release`]).
    fn release(&mut self) {
        if let Some((threads, index)) = self.slot.take() {
            threads.clear(index);
        }
        self.lane.release();
    }
}

/// A thread's lanes, by queue id (the last one used is in [`LAST_LANE`]).
pub(crate) struct LaneCache {
    lanes: RefCell<Vec<CachedLane>>,
}

/// The lane a thread used last, and its queue's id (0: none). A thread-local without a
/// destructor, so [`thread_lane`] reads it with a plain thread-local access and no lazy
/// registration on its way. It points at a lane [`LANES`] holds: set only by
/// [`LaneCache::lookup`], and reset before the cache lets any lane go.
struct LastLane {
    queue: Cell<u64>,
    lane: Cell<*const Lane>,
}

impl LastLane {
    /// This thread's lane for queue `queue` if it is the one it used last (no lookup).
    #[inline(always)]
    fn get(&self, queue: u64) -> Option<*const Lane> {
        (self.queue.get() == queue).then(|| self.lane.get())
    }
}

/// What [`thread_lane`] needs of a queue: its id, its thread slots, and a lane for a thread's
/// first call.
pub(crate) trait LaneSource {
    /// The queue's unique id.
    fn id(&self) -> u64;
    /// The queue's thread slots.
    fn thread_slots(&self) -> &Arc<ThreadSlots>;
    /// A lane for a new producer thread; `None` when none can be had.
    fn claim_lane(&self) -> Option<Arc<Lane>>;
}

/// The lane of this thread for `queue`, claimed on first use; `None` when none can be had (the
/// thread's cache is gone: a call from a thread-local destructor).
#[inline(always)]
pub(crate) fn thread_lane(queue: &impl LaneSource) -> Option<*const Lane> {
    match LAST_LANE.with(|last| last.get(queue.id())) {
        Some(lane) => Some(lane),
        None => LANES
            .try_with(|cache| cache.lookup(queue).map(|lane| lane as *const Lane))
            .ok()
            .flatten(),
    }
}

impl LaneCache {
    #[cold]
    fn lookup(&self, queue: &impl LaneSource) -> Option<&Lane> {
        let mut lanes = self.lanes.try_borrow_mut().ok()?;
        LAST_LANE.with(|last| last.queue.set(0));
        lanes.retain_mut(|cached| {
            let keep = !cached.lane.retired.load(Ordering::Acquire);
            if !keep {
                cached.release();
            }
            keep
        });
        let at = match lanes.iter().position(|cached| cached.queue == queue.id()) {
            Some(at) => at,
            None => {
                let lane = queue.claim_lane()?;
                lanes.push(CachedLane {
                    queue: queue.id(),
                    lane,
                    slot: None,
                });
                lanes.len() - 1
            }
        };
        let cached = &mut lanes[at];
        if cached.slot.is_none() {
            let threads = queue.thread_slots();
            if let Some(index) = thread_pointer().and_then(|t| threads.claim(t, &cached.lane)) {
                cached.slot = Some((threads.clone(), index));
            }
        }
        let ptr = Arc::as_ptr(&cached.lane);
        LAST_LANE.with(|last| {
            last.queue.set(queue.id());
            last.lane.set(ptr);
        });
        // SAFETY: the lane is held by `lanes` (which outlives this borrow of `self`) until a
        // later `lookup` removes it, after resetting `LAST_LANE` as above.
        Some(unsafe { &*ptr })
    }
}

impl Drop for LaneCache {
    /// Returns the thread's lanes: a later thread reuses them, events still staged included.
    fn drop(&mut self) {
        release_lanes(self.lanes.get_mut());
    }
}

/// Lets every lane of a thread's cache go, as it exits.
fn release_lanes(lanes: &mut Vec<CachedLane>) {
    // Calls from later thread-local destructors take the shared lane. (`LAST_LANE` has no
    // destructor, so it is still there; a loom model's thread-locals go all at once.)
    let _ = LAST_LANE.try_with(|last| last.queue.set(0));
    for mut cached in lanes.drain(..) {
        cached.release();
    }
}

/// Under loom, what the calling thread's exit does here: its lanes are let go. A model's
/// thread calls it last, because loom's `join` returns before the thread's thread-locals are
/// destroyed, where std's waits for it.
#[cfg(loom)]
pub fn loom_thread_exit() {
    let _ = LANES.try_with(|cache| release_lanes(&mut cache.lanes.borrow_mut()));
}

#[cfg(not(loom))]
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

#[cfg(loom)]
loom::thread_local! {
    static LANES: LaneCache = LaneCache {
        lanes: RefCell::new(Vec::new()),
    };
    static LAST_LANE: LastLane = LastLane {
        queue: Cell::new(0),
        lane: Cell::new(std::ptr::null()),
    };
}

/// The lanes in this thread's cache, for the tests: each one's `Arc`.
#[cfg(test)]
pub(crate) fn cached_lanes() -> Vec<Arc<Lane>> {
    LANES.with(|cache| {
        cache
            .lanes
            .borrow()
            .iter()
            .map(|cached| cached.lane.clone())
            .collect()
    })
}
