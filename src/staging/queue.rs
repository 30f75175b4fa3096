//! The queue: the lanes of one collector's staging (a lock-free list, the shared lane of callers
//! without thread-locals among them), the producer's entry points, and the drain that takes
//! every staged event and returns the drained blocks.

use std::ptr;
use std::sync::atomic::AtomicU64 as StdAtomicU64;
use std::sync::Arc;

#[cfg(doc)]
use super::budget::BLOCK_EVENTS;
use super::budget::{slots_accessed, slots_of, Block, BlockPool, Budget, Padded};
use super::lane::Lane;
use super::spin_lock::SpinLock;
use super::sync::{AtomicPtr, Ordering};
use super::threads::{thread_lane, FastPath, LaneSource, ThreadSlots};
use crate::error::{Error, Result};
use crate::event::Event;

/// Largest supported capacity.
pub const MAX_CAPACITY: usize = 1 << 30;

/// Totals since the queue was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagingCounts {
    /// Events that entered the queue.
    pub accepted: u64,
    /// Events refused because the queue was full.
    pub dropped: u64,
}

/// Unique ids of queues, so a thread's cache never mistakes a new queue for a dropped one (a
/// process-wide counter, not part of the protocol: the standard atomic under loom too).
static NEXT_QUEUE_ID: StdAtomicU64 = StdAtomicU64::new(1);

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
    /// Every block of the queue's lanes and free list.
    pool: BlockPool,
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
            budget: budget.clone(),
            threads: Arc::new(ThreadSlots::new()),
            lanes: AtomicPtr::new(ptr::null_mut()),
            shared: ptr::null(),
            shared_producer: SpinLock::new(()),
            pool: BlockPool::new(budget),
            drain: SpinLock::new(DrainState {
                reported_drops: 0,
                runs: Vec::new(),
                drained: Vec::new(),
            }),
        };
        let block = queue.pool.allocate().ok_or_else(|| {
            Error::new(
                crate::error::Status::Backend,
                "cannot allocate the first staging block",
            )
        })?;
        let shared = queue.link_lane(Lane::new(block, queue.budget.clone(), true));
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
            Some(lane) => unsafe { &*lane }.push(&self.pool, batch),
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
        let pushed = shared.push(&self.pool, batch);
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
                    // SAFETY: as below (the loom model's record of the reads).
                    unsafe {
                        slots_accessed(block, (at - base) as usize, (end - base) as usize, false)
                    };
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
            // SAFETY: `freed_first ..= freed_last` are live blocks this drainer alone holds.
            unsafe { self.budget.0.push_free(freed_first, freed_last) };
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
        self.pool.count()
    }

    /// Number of lanes (the shared one included): a test hook.
    #[cfg(test)]
    pub(super) fn lane_count(&self) -> usize {
        self.lanes().count()
    }
}

impl LaneSource for StagingQueue {
    fn id(&self) -> u64 {
        self.id
    }

    fn thread_slots(&self) -> &Arc<ThreadSlots> {
        &self.threads
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
        let block = self.pool.take()?;
        self.budget.0.thread_joins();
        Some(self.link_lane(Lane::new(block, self.budget.clone(), true)))
    }
}

impl Drop for StagingQueue {
    /// Retires every lane (threads still caching one let it go at their next lookup or exit);
    /// then the pool frees every block.
    fn drop(&mut self) {
        // (A load rather than `get_mut`, which loom's atomics do not have: nothing else
        // reaches the queue any more.)
        let mut lane = self.lanes.load(Ordering::Acquire).cast_const();
        while !lane.is_null() {
            // SAFETY: every lane of the list came from `Arc::into_raw`; this releases the
            // list's reference (thread caches may hold others, and never reach its blocks).
            let arc = unsafe { Arc::from_raw(lane) };
            arc.retired.store(true, Ordering::Release);
            lane = arc.next_lane.load(Ordering::Relaxed);
        }
        // The pool frees every block when it is dropped, after this.
    }
}
