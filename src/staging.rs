//! The bounded producer-side staging of one collector: every producer thread appends into its
//! own single-producer buffer (a *lane*); the one flusher drains every lane at once. A full lane
//! drops the newest events (never overwriting staged ones) and counts every drop exactly.
//!
//! # Design: per-thread lanes (as LTTng's per-CPU buffers or folly's thread-cached counters)
//!
//! A lane is a ring of `capacity` event slots with two indexes that only grow: `head`, written
//! only by the lane's producer (one release store per call publishes the events it wrote), and
//! `tail`, written only by the drainer (one release store per flush frees what it took). The
//! producer keeps its own copy of `tail` and reads the drainer's word only when its lane looks
//! full, so a call touches only cache lines its thread owns: its slots, its `head`, its copy of
//! `tail` and its drop counter. No word is written by two producers, so calls from several
//! threads never contend.
//!
//! * A thread finds its lane for a queue through a thread-local cache: the last (queue, lane)
//!   pair is one compare away; other queues (several collectors in a process) are a short
//!   search. The first call of a thread on a queue claims a free lane (one left by a thread that
//!   exited) or allocates one, under the queue's lane lock: the only time a producer takes a
//!   lock.
//! * When a thread exits, its cache returns its lanes (with any events still staged in them,
//!   which the next flush drains in order); a later thread reuses them, so memory is bounded by
//!   the number of threads recording at the same time: one lane (`capacity` x 16 bytes) per
//!   thread per collector.
//! * A batch is written into consecutive slots and published by one store: all or none, and
//!   contiguous. Events of one thread are drained in the order it recorded them; events of
//!   different threads are drained lane after lane.
//! * With one producer thread a lane holds exactly `capacity` events between two flushes, the
//!   capacity of NIXL's staging queue.
//! * A caller whose thread-locals are already gone (a call from a thread-local destructor or an
//!   atexit handler) appends to the queue's shared lane under a lock instead.
//! * When the queue is dropped its lanes are marked retired; threads drop them from their cache
//!   at their next lookup of another queue, or when they exit.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result, Status};
use crate::event::Event;
use crate::sync::LockUnpoisoned;

/// Largest supported capacity.
pub const MAX_CAPACITY: usize = 1 << 30;

/// Totals since the queue was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagingCounts {
    /// Events that entered the queue.
    pub accepted: u64,
    /// Events refused because their lane was full.
    pub dropped: u64,
}

/// A cache-line-aligned value, so what one side writes never shares a line with the other's.
#[repr(align(128))]
struct Padded<T>(T);

/// What only the lane's producer writes.
struct ProducerSide {
    /// Events published (monotonic): slots of `[tail, head)` hold staged events.
    head: AtomicU64,
    /// The slot index of `head` (`head % capacity`, kept incrementally).
    index: AtomicUsize,
    /// The producer's last view of the drainer's `tail`.
    tail_seen: AtomicU64,
    /// Events refused because the lane was full (monotonic).
    dropped: AtomicU64,
}

/// One single-producer, single-consumer ring of staged events.
struct Lane {
    producer: Padded<ProducerSide>,
    /// Events taken by the drainer (monotonic); written only by the drainer.
    tail: Padded<AtomicU64>,
    /// Whether a thread owns the lane as its producer.
    owned: AtomicBool,
    /// Set when the queue is dropped: the lane is no longer drained.
    retired: AtomicBool,
    slots: Box<[UnsafeCell<Event>]>,
}

// SAFETY: a slot is written only by the lane's single producer (the owning thread, or a caller
// holding the shared lane's lock) while it lies outside `[tail, head)`, and read only by the
// single drainer (serialised by the drain lock) while it lies inside; the release store of
// `head` and the acquire load that reads it order the two. Every other field is atomic.
unsafe impl Sync for Lane {}
// SAFETY: the lane owns its slots outright (no thread-bound state).
unsafe impl Send for Lane {}

impl Lane {
    /// A lane of `capacity` slots, owned by its creator; an allocation failure is an error.
    fn new(capacity: usize) -> Result<Lane> {
        let mut slots = Vec::new();
        slots.try_reserve_exact(capacity).map_err(|_| {
            Error::new(
                Status::Backend,
                format!("cannot allocate a staging buffer of {capacity} events"),
            )
        })?;
        slots.resize_with(capacity, || UnsafeCell::new(Event::default()));
        Ok(Lane {
            producer: Padded(ProducerSide {
                head: AtomicU64::new(0),
                index: AtomicUsize::new(0),
                tail_seen: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
            }),
            tail: Padded(AtomicU64::new(0)),
            owned: AtomicBool::new(true),
            retired: AtomicBool::new(false),
            slots: slots.into_boxed_slice(),
        })
    }

    fn capacity(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Appends `batch` (not empty) all or none; only the lane's producer may call it.
    #[inline]
    fn push(&self, batch: &[Event]) -> bool {
        let p = &self.producer.0;
        let n = batch.len() as u64;
        let head = p.head.load(Ordering::Relaxed);
        let mut tail = p.tail_seen.load(Ordering::Relaxed);
        if head - tail + n > self.capacity() {
            tail = self.tail.0.load(Ordering::Acquire);
            p.tail_seen.store(tail, Ordering::Relaxed);
            if head - tail + n > self.capacity() {
                // One writer: a load and a store, not a read-modify-write.
                let dropped = p.dropped.load(Ordering::Relaxed);
                p.dropped.store(dropped + n, Ordering::Relaxed);
                return false;
            }
        }
        let mut index = p.index.load(Ordering::Relaxed);
        for event in batch {
            // SAFETY: `index < capacity` (it wraps below), and the slot lies outside
            // `[tail, head)` (there is room for `n` events), so the drainer does not read it
            // and no one else writes it until `head` is published below; a slot is an aligned
            // `Event`.
            unsafe { event.write_record(self.slots.get_unchecked(index).get()) };
            index += 1;
            if index == self.slots.len() {
                index = 0;
            }
        }
        p.index.store(index, Ordering::Relaxed);
        p.head.store(head + n, Ordering::Release);
        true
    }

    /// The staged events as at most two runs (the ring may wrap), and the `head` they end at.
    /// Only the drainer may call it, and must not release the runs before it is done with them.
    fn staged(&self) -> ([&[Event]; 2], u64) {
        let head = self.producer.0.head.load(Ordering::Acquire);
        let tail = self.tail.0.load(Ordering::Relaxed);
        let len = (head - tail) as usize;
        let capacity = self.slots.len();
        let start = (tail % capacity as u64) as usize;
        let first = len.min(capacity - start);
        let base = self.slots.as_ptr() as *const Event;
        // SAFETY: `UnsafeCell<Event>` has the layout of `Event`; both runs lie inside the slots
        // and inside `[tail, head)`, which the producer published (acquire above) and will not
        // write until `tail` moves past them, which only the caller does.
        let runs = unsafe {
            [
                std::slice::from_raw_parts(base.add(start), first),
                std::slice::from_raw_parts(base, len - first),
            ]
        };
        (runs, head)
    }

    /// Frees the slots up to `head` (what [`Lane::staged`] returned).
    fn release_to(&self, head: u64) {
        self.tail.0.store(head, Ordering::Release);
    }
}

/// Unique ids of queues, so a thread's cache never mistakes a new queue for a dropped one.
static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(1);

/// A thread's lanes, by queue id; the last one used is one compare away.
struct LaneCache {
    last_queue: Cell<u64>,
    last_lane: Cell<*const Lane>,
    lanes: RefCell<Vec<(u64, Arc<Lane>)>>,
}

impl LaneCache {
    /// The lane of this thread for `queue`, claimed on first use; `None` when none can be had.
    #[inline]
    fn lane(&self, queue: &StagingQueue) -> Option<&Lane> {
        if self.last_queue.get() == queue.id {
            // SAFETY: `last_lane` points into an Arc held by `lanes` under the same id; entries
            // leave `lanes` only in `lookup`, which resets `last_*` first.
            return Some(unsafe { &*self.last_lane.get() });
        }
        self.lookup(queue)
    }

    #[cold]
    fn lookup(&self, queue: &StagingQueue) -> Option<&Lane> {
        let mut lanes = self.lanes.try_borrow_mut().ok()?;
        self.last_queue.set(0);
        lanes.retain(|(_, lane)| {
            let keep = !lane.retired.load(Ordering::Acquire);
            if !keep {
                lane.owned.store(false, Ordering::Release);
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
        let ptr = Arc::as_ptr(&lane);
        self.last_queue.set(queue.id);
        self.last_lane.set(ptr);
        // SAFETY: `lane` is held by `lanes` (which outlives this borrow of `self`) until a
        // later `lookup` removes it, after resetting `last_*` as above.
        Some(unsafe { &*ptr })
    }
}

impl Drop for LaneCache {
    /// Returns the thread's lanes: a later thread reuses them, events still staged included.
    fn drop(&mut self) {
        for (_, lane) in self.lanes.get_mut().drain(..) {
            lane.owned.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static LANES: LaneCache = const {
        LaneCache {
            last_queue: Cell::new(0),
            last_lane: Cell::new(std::ptr::null()),
            lanes: RefCell::new(Vec::new()),
        }
    };
}

/// What the single drainer owns.
struct DrainState {
    reported_drops: u64,
    /// A copy of the lane list, reused so a flush does not hold the lane lock.
    snapshot: Vec<Arc<Lane>>,
}

/// The bounded staging of one collector (see the module documentation).
pub struct StagingQueue {
    id: u64,
    capacity: usize,
    /// Every lane of this queue, owned or free (append-only while the queue lives).
    lanes: Mutex<Vec<Arc<Lane>>>,
    /// The lane of callers without thread-locals, and the lock that makes them one producer.
    shared: Arc<Lane>,
    shared_producer: Mutex<()>,
    /// Whether the failure to allocate a thread's lane was reported (once per queue).
    warned_allocation: AtomicBool,
    drain: Mutex<DrainState>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while these locks are held, so a poisoned one still holds consistent data.
    m.lock_unpoisoned()
}

impl StagingQueue {
    /// A queue whose lanes hold at most `capacity` events each (1..=2^30). The shared lane is
    /// allocated here: an impossible capacity or a failed allocation is an error, not an abort.
    pub fn new(capacity: usize) -> Result<StagingQueue> {
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(Error::invalid(format!(
                "staging queue capacity {capacity} is outside 1..={MAX_CAPACITY}"
            )));
        }
        let shared = Arc::new(Lane::new(capacity)?);
        Ok(StagingQueue {
            id: NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed),
            capacity,
            lanes: Mutex::new(vec![shared.clone()]),
            shared,
            shared_producer: Mutex::new(()),
            warned_allocation: AtomicBool::new(false),
            drain: Mutex::new(DrainState {
                reported_drops: 0,
                snapshot: Vec::new(),
            }),
        })
    }

    /// Maximum number of events one thread stages between two flushes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends one event; returns false (and counts one drop) when the thread's lane is full.
    #[inline]
    pub fn try_push(&self, event: Event) -> bool {
        self.try_push_batch(std::slice::from_ref(&event))
    }

    /// Appends all of `batch` contiguously and in order, or nothing: when the thread's lane has
    /// no room for the whole batch it is refused and all its events are counted as dropped. An
    /// empty batch is accepted and changes nothing.
    #[inline]
    pub fn try_push_batch(&self, batch: &[Event]) -> bool {
        if batch.is_empty() {
            return true;
        }
        let pushed = LANES.try_with(|cache| cache.lane(self).map(|lane| lane.push(batch)));
        match pushed {
            Ok(Some(pushed)) => pushed,
            _ => self.push_shared(batch),
        }
    }

    /// The slow path of callers without a lane of their own (thread teardown, or a lane that
    /// could not be allocated): the shared lane, one caller at a time.
    #[cold]
    fn push_shared(&self, batch: &[Event]) -> bool {
        let _one_producer = lock(&self.shared_producer);
        self.shared.push(batch)
    }

    /// A free lane for a new producer thread (one left by an exited thread first), or a new one.
    fn claim_lane(&self) -> Option<Arc<Lane>> {
        let mut lanes = lock(&self.lanes);
        let free = lanes.iter().skip(1).find(|lane| {
            lane.owned
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        });
        if let Some(lane) = free {
            return Some(lane.clone());
        }
        match Lane::new(self.capacity) {
            Ok(lane) => {
                let lane = Arc::new(lane);
                lanes.push(lane.clone());
                Some(lane)
            }
            Err(e) => {
                if !self.warned_allocation.swap(true, Ordering::Relaxed) {
                    log::warn!("{e} for a producer thread; its events go through a shared lane");
                }
                None
            }
        }
    }

    /// Takes every staged event and passes them to `export` as runs, lane after lane, each
    /// thread's events in the order it recorded them. Returns `export`'s result. One drain runs
    /// at a time; producers are never blocked by it.
    pub fn drain<R>(&self, export: impl FnOnce(&[&[Event]]) -> R) -> R {
        let mut state = lock(&self.drain);
        let state = &mut *state;
        state.snapshot.clone_from(&lock(&self.lanes));
        let mut runs: Vec<&[Event]> = Vec::with_capacity(2 * state.snapshot.len());
        let mut heads = Vec::with_capacity(state.snapshot.len());
        for lane in &state.snapshot {
            let ([first, second], head) = lane.staged();
            runs.extend([first, second].into_iter().filter(|r| !r.is_empty()));
            heads.push(head);
        }
        let result = export(&runs);
        drop(runs);
        for (lane, head) in state.snapshot.iter().zip(heads) {
            lane.release_to(head);
        }
        result
    }

    /// Number of drops since the previous call (the delta a flush reports).
    pub fn take_dropped(&self) -> u64 {
        let mut state = lock(&self.drain);
        let total = self.counts().dropped;
        let delta = total - state.reported_drops;
        state.reported_drops = total;
        delta
    }

    /// Totals since creation (exact when no producer is running).
    pub fn counts(&self) -> StagingCounts {
        let lanes = lock(&self.lanes);
        let mut counts = StagingCounts::default();
        for lane in lanes.iter() {
            counts.accepted += lane.producer.0.head.load(Ordering::Acquire);
            counts.dropped += lane.producer.0.dropped.load(Ordering::Relaxed);
        }
        counts
    }

    /// Number of events currently staged, over every lane.
    pub fn len(&self) -> usize {
        lock(&self.lanes)
            .iter()
            .map(|lane| {
                let head = lane.producer.0.head.load(Ordering::Acquire);
                (head - lane.tail.0.load(Ordering::Acquire)) as usize
            })
            .sum()
    }

    /// Whether no event is staged.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of lanes (the shared one included): a test hook.
    #[cfg(test)]
    fn lane_count(&self) -> usize {
        lock(&self.lanes).len()
    }
}

impl Drop for StagingQueue {
    /// Retires every lane: threads still caching one let it go at their next lookup or exit.
    fn drop(&mut self) {
        for lane in lock(&self.lanes).iter() {
            lane.retired.store(true, Ordering::Release);
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
    fn a_lane_wraps_keeping_order_and_frees_what_was_drained() {
        let q = StagingQueue::new(4).unwrap();
        assert!(q.try_push_batch(&[ev(0), ev(1), ev(2)]));
        assert_eq!(drain_all(&q), [ev(0), ev(1), ev(2)]);
        // The lane is empty again: a full lane's worth fits, wrapping around the ring.
        assert!(q.try_push_batch(&[ev(3), ev(4), ev(5), ev(6)]));
        assert!(!q.try_push(ev(7)));
        let runs = q.drain(|runs| runs.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
        assert_eq!(
            runs,
            [vec![ev(3)], vec![ev(4), ev(5), ev(6)]],
            "two runs, in order"
        );
        assert_eq!(q.drain(|runs| runs.len()), 0);
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
    fn every_thread_has_its_own_lane_of_full_capacity() {
        let q = Arc::new(StagingQueue::new(8).unwrap());
        // All three threads are alive together (a thread that exits hands its lane on).
        let together = Arc::new(std::sync::Barrier::new(3));
        let threads: Vec<_> = (0..3u64)
            .map(|t| {
                let (q, together) = (q.clone(), together.clone());
                std::thread::spawn(move || {
                    let n = (0..10).filter(|v| q.try_push(ev(t * 100 + v))).count();
                    together.wait();
                    n
                })
            })
            .collect();
        let accepted: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(accepted, [8, 8, 8]);
        let got = drain_all(&q);
        assert_eq!(got.len(), 24);
        for t in 0..3u64 {
            let mine: Vec<u64> = got
                .iter()
                .map(|e| e.value)
                .filter(|v| v / 100 == t)
                .collect();
            assert_eq!(mine, (0..8).map(|v| t * 100 + v).collect::<Vec<_>>());
        }
        assert_eq!(q.take_dropped(), 6);
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
                            assert!(prev.map_or(true, |prev| i > prev), "order");
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
        // Eight workers each run many short-lived threads that record a few batches and exit,
        // while a drainer flushes continuously: lanes change hands mid-flush.
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
                                .filter(|b| q.try_push_batch(&batch(((w * THREADS + t) << 32) | b)))
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
