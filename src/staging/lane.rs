//! A lane: one thread's chain of blocks, filled by its one producer (who takes credit from the
//! budget and blocks from the lane's spare or the pool) and emptied by the drainer.

use std::ptr;
use std::sync::Arc;

#[cfg(loom)]
use super::budget::slots_accessed;
use super::budget::{slots_of, Block, BlockPool, Budget, Padded, BLOCK_EVENTS};
use super::sync::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use crate::event::Event;

/// What only the lane's producer writes.
pub(crate) struct ProducerSide {
    /// Events published on the lane (monotonic): lane indexes `[tail, head)` are staged.
    pub(crate) head: AtomicU64,
    /// The lane index up to which the producer holds credit (`head <= limit <= end of the
    /// current block`).
    pub(crate) limit: AtomicU64,
    /// Where lane index 0 would be if the current block extended back to it: the slot of lane
    /// index `i` is `origin + i` (computed with wrapping arithmetic, in bounds for the indexes
    /// of the current block).
    origin: AtomicPtr<Event>,
    /// The block being filled.
    current: AtomicPtr<Block>,
    /// Events refused (monotonic).
    pub(crate) dropped: AtomicU64,
}

/// What only the drainer writes (after the lane is created).
pub(crate) struct DrainerSide {
    /// Events taken by the drainer (monotonic).
    pub(crate) tail: AtomicU64,
    /// The oldest block still holding staged events (or the current block).
    pub(crate) first: AtomicPtr<Block>,
}

/// One thread's staging: a chain of blocks, filled by one producer, emptied by the drainer.
///
/// How its blocks are shared: a slot is written only by the lane's single producer (the owning
/// thread, or a caller holding the shared lane's lock) at lane indexes outside `[tail, head)`,
/// and read only by the single drainer (serialised by the drain lock) inside it; the release
/// store of `head` and the acquire load that reads it order the two. A block changes hands
/// (lane to free list or spare, and back to a lane) only under the free list's lock or through
/// the spare's atomic swap, after the drainer's last read of it.
pub(crate) struct Lane {
    pub(crate) producer: Padded<ProducerSide>,
    pub(crate) drainer: Padded<DrainerSide>,
    /// One freed block kept for this lane's next block (put by the drainer, taken by the
    /// producer).
    pub(crate) spare: AtomicPtr<Block>,
    /// Whether a thread owns the lane as its producer.
    pub(crate) owned: AtomicBool,
    /// Set when the queue is dropped: the lane is no longer used.
    pub(crate) retired: AtomicBool,
    /// The next lane of the queue's list (set before the lane is published, then constant).
    pub(crate) next_lane: AtomicPtr<Lane>,
    budget: Arc<Padded<Budget>>,
}

impl Lane {
    /// A lane whose first block is `block` (owned by its creator unless `shared`).
    pub(crate) fn new(block: *mut Block, budget: Arc<Padded<Budget>>, owned: bool) -> Lane {
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
        }
    }

    /// Appends `batch` (not empty) all or none; only the lane's producer may call it, with the
    /// pool of the lane's queue.
    #[inline(always)]
    pub(crate) fn push(&self, pool: &BlockPool, batch: &[Event]) -> bool {
        let p = &self.producer.0;
        let n = batch.len() as u64;
        let head = p.head.load(Ordering::Relaxed);
        let limit = p.limit.load(Ordering::Relaxed);
        if head + n > limit {
            if self.full_for(head, limit, n) {
                return self.refuse(n);
            }
            return self.push_slow(pool, batch, head, limit);
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
    pub(crate) fn full_for(&self, head: u64, limit: u64, n: u64) -> bool {
        let budget = &self.budget.0;
        budget.limit() + (limit - head) < budget.outstanding.load(Ordering::Relaxed) + n
    }

    /// Writes `batch` at lane index `head` of the current block and publishes it; the producer
    /// holds credit for it and the block has the slots.
    #[inline(always)]
    pub(crate) fn write(&self, head: u64, batch: &[Event]) {
        let p = &self.producer.0;
        #[cfg(loom)]
        {
            let block = p.current.load(Ordering::Relaxed);
            // SAFETY: the current block is live; the batch's slots are in it.
            unsafe {
                let at = (head - (*block).base.load(Ordering::Relaxed)) as usize;
                slots_accessed(block, at, at + batch.len(), true);
            }
        }
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
    pub(crate) fn refuse(&self, n: u64) -> bool {
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
    fn push_slow(&self, pool: &BlockPool, batch: &[Event], head: u64, limit: u64) -> bool {
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
            match pool.take() {
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
    pub(crate) fn give_back_credit(&self) {
        let p = &self.producer.0;
        let head = p.head.load(Ordering::Relaxed);
        let limit = p.limit.swap(head, Ordering::Relaxed);
        self.budget.0.give_back(limit - head);
    }

    /// The thread that owned the lane lets it go (at its exit, or on finding it retired): its
    /// credit goes back to the budget, its staged events stay for the drainer. The caller has
    /// cleared its thread slot for the lane first, so that a later thread at the same address
    /// never finds this lane.
    pub(crate) fn release(&self) {
        self.give_back_credit();
        self.budget.0.thread_leaves();
        self.owned.store(false, Ordering::Release);
    }
}
