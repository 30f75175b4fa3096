//! The bounded producer-side staging queue: many producers append single events or
//! all-or-none batches; one flusher drains everything at once. When full it drops the newest
//! events (never overwriting queued ones) and counts every drop exactly.
//!
//! # Design: lock-free reservation into two alternating buffers
//!
//! There are two buffers of `capacity` slots. Each has a 64-bit reservation word:
//! `generation` (high 32 bits), a `CLOSED` bit and the number of `reserved` slots. A shared
//! `active` word names the buffer producers append to and the generation it had when it was
//! opened.
//!
//! * A producer loads `active`, then reserves `n` slots in that buffer with one
//!   compare-and-swap, which succeeds only if the buffer is still open, still in that
//!   generation, and has room for all `n` slots (otherwise the batch is dropped: all or none).
//!   It writes each event's value, then publishes the slot with one release store of an 8-byte
//!   word holding the event type and the generation stamp (the stamp occupies the 4 padding
//!   bytes of the 16-byte record).
//! * The flusher (one at a time) reopens the idle buffer under a new generation, makes it
//!   active, closes the previous one (`CLOSED` makes every later reservation fail and retry on
//!   the new active buffer), then reads its `reserved` slots in order, waiting for each
//!   slot's stamp to carry the current generation (a producer may still be writing it).
//!
//! Producers never wait: the hot path is one load of `active`, one load and one CAS of the
//! reservation word, and plain stores (a drop is one atomic add on the drop counter). A
//! producer that loaded `active` long ago cannot reserve into a reopened buffer because the
//! generation no longer matches; so events of one thread are drained in the order it
//! recorded them, and batches are contiguous. Nothing allocates after construction.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result, Status};
use crate::event::Event;

/// Totals since the queue was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagingCounts {
    /// Events that entered the queue.
    pub accepted: u64,
    /// Events refused because the queue was full.
    pub dropped: u64,
}

/// Bit marking a buffer as closed to new reservations.
const CLOSED: u64 = 1 << 31;
/// Mask of the reserved-slot count (capacity is at most `MAX_CAPACITY`, below this mask).
const RESERVED: u64 = CLOSED - 1;
/// Largest supported capacity.
pub const MAX_CAPACITY: usize = 1 << 30;

fn generation(word: u64) -> u32 {
    (word >> 32) as u32
}

fn word(generation: u32, closed: bool, reserved: u64) -> u64 {
    ((generation as u64) << 32) | if closed { CLOSED } else { 0 } | reserved
}

/// One 16-byte slot, laid out exactly like [`Event`]: `head` covers the event type (bytes
/// 0..4) and the generation stamp in the record's padding (bytes 4..8).
#[repr(C)]
struct Slot {
    head: AtomicU64,
    value: UnsafeCell<u64>,
}

/// The `head` word of a slot holding `event_type` and `stamp` (type at bytes 0..4).
#[inline]
fn head(event_type: u32, stamp: u32) -> u64 {
    if cfg!(target_endian = "little") {
        event_type as u64 | (stamp as u64) << 32
    } else {
        (event_type as u64) << 32 | stamp as u64
    }
}

/// The stamp stored in a `head` word.
#[inline]
fn stamp_of(head: u64) -> u32 {
    if cfg!(target_endian = "little") {
        (head >> 32) as u32
    } else {
        head as u32
    }
}

const _: () = assert!(std::mem::size_of::<Slot>() == std::mem::size_of::<Event>());

/// A cache-line-aligned atomic word, so producers hammering one word do not slow the others.
#[repr(align(128))]
struct Padded<T>(T);

struct Buffer {
    reservation: Padded<AtomicU64>,
    /// `capacity + 1` slots: the spare one holds the flusher's synthetic drop report.
    slots: Box<[Slot]>,
}

/// What the single drainer owns.
struct DrainState {
    reported_drops: u64,
}

/// Bounded multi-producer, single-consumer queue with drop-newest semantics.
pub struct StagingQueue {
    capacity: u64,
    /// `(generation << 1) | buffer index` of the buffer producers append to.
    active: Padded<AtomicU64>,
    dropped: Padded<AtomicU64>,
    /// Events taken by drains so far.
    drained: AtomicU64,
    buffers: [Buffer; 2],
    drain: Mutex<DrainState>,
}

// SAFETY: slots are written only by the producer that reserved them (exclusive by the CAS)
// and read only by the drainer after the stamp's release/acquire hand-off; the drainer is
// serialised by `drain`.
unsafe impl Sync for StagingQueue {}
// SAFETY: the queue owns its buffers outright (no thread-bound state), so it may move between
// threads.
unsafe impl Send for StagingQueue {}

impl StagingQueue {
    /// A queue holding at most `capacity` events (1..=2^30). Both buffers are allocated and
    /// touched here: an impossible capacity or a failed allocation is an error, not an abort.
    pub fn new(capacity: usize) -> Result<StagingQueue> {
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(Error::invalid(format!(
                "staging queue capacity {capacity} is outside 1..={MAX_CAPACITY}"
            )));
        }
        let buffer = |generation: u32, closed: bool| -> Result<Buffer> {
            let mut slots = Vec::new();
            slots.try_reserve_exact(capacity + 1).map_err(|_| {
                Error::new(
                    Status::Backend,
                    format!("cannot allocate a staging buffer of {capacity} events"),
                )
            })?;
            slots.extend((0..=capacity).map(|_| Slot {
                head: AtomicU64::new(0),
                value: UnsafeCell::new(0),
            }));
            Ok(Buffer {
                reservation: Padded(AtomicU64::new(word(generation, closed, 0))),
                slots: slots.into_boxed_slice(),
            })
        };
        // Buffer 0 starts active in generation 1 (stamps start at 0, so no slot looks written);
        // buffer 1 starts closed and drained.
        Ok(StagingQueue {
            capacity: capacity as u64,
            active: Padded(AtomicU64::new(1 << 1)),
            dropped: Padded(AtomicU64::new(0)),
            drained: AtomicU64::new(0),
            buffers: [buffer(1, false)?, buffer(0, true)?],
            drain: Mutex::new(DrainState { reported_drops: 0 }),
        })
    }

    /// Maximum number of staged events.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Appends one event; returns false (and counts one drop) when the queue is full.
    #[inline]
    pub fn try_push(&self, event: Event) -> bool {
        self.try_push_batch(std::slice::from_ref(&event))
    }

    /// Appends all of `batch` contiguously and in order, or nothing: when there is not room for
    /// the whole batch it is refused and all its events are counted as dropped. An empty batch
    /// is accepted and changes nothing.
    #[inline]
    pub fn try_push_batch(&self, batch: &[Event]) -> bool {
        let n = batch.len() as u64;
        if n == 0 {
            return true;
        }
        loop {
            let active = self.active.0.load(Ordering::Acquire);
            let (index, gen) = ((active & 1) as usize, (active >> 1) as u32);
            let buffer = &self.buffers[index];
            let mut current = buffer.reservation.0.load(Ordering::Relaxed);
            let start = loop {
                if current & CLOSED != 0 || generation(current) != gen {
                    break None; // the flusher switched buffers: retry on the new one
                }
                let reserved = current & RESERVED;
                if reserved + n > self.capacity {
                    self.dropped.0.fetch_add(n, Ordering::Relaxed);
                    return false;
                }
                match buffer.reservation.0.compare_exchange_weak(
                    current,
                    current + n,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break Some(reserved as usize),
                    Err(seen) => current = seen,
                }
            };
            let Some(start) = start else { continue };
            // SAFETY: the reservation succeeded only if start + n <= capacity, and the slots
            // array has capacity + 1 entries, so the range is in bounds.
            let slots = unsafe { buffer.slots.get_unchecked(start..start + batch.len()) };
            for (slot, event) in slots.iter().zip(batch) {
                // SAFETY: the CAS gave this thread exclusive use of these slots until the
                // drainer observes the stamp below.
                unsafe { *slot.value.get() = event.value };
                slot.head
                    .store(head(event.event_type, gen), Ordering::Release);
            }
            return true;
        }
    }

    /// Takes every staged event, in insertion order, and passes them to `export` followed by
    /// `tail` (the flusher's drop report) when given. Returns `export`'s result. One drain runs
    /// at a time; producers are never blocked by it.
    pub fn drain<R>(&self, tail: Option<Event>, export: impl FnOnce(&[Event]) -> R) -> R {
        let _serialised = self.lock_drain();
        let active = self.active.0.load(Ordering::Acquire);
        let (old, old_gen) = ((active & 1) as usize, (active >> 1) as u32);
        let new = 1 - old;
        // Reopen the idle buffer under a fresh generation and make it active. When the 32-bit
        // generation wraps, clear the buffer's stamps first: a stamp left from 2^32 reopens ago
        // must never pass for a slot written in this generation.
        let mut new_gen =
            generation(self.buffers[new].reservation.0.load(Ordering::Relaxed)).wrapping_add(1);
        if new_gen == 0 {
            for slot in self.buffers[new].slots.iter() {
                slot.head.store(0, Ordering::Relaxed);
            }
            new_gen = 1;
        }
        self.buffers[new]
            .reservation
            .0
            .store(word(new_gen, false, 0), Ordering::Release);
        self.active
            .0
            .store(((new_gen as u64) << 1) | new as u64, Ordering::Release);
        // Close the old one: from now on its reservation count is final.
        let closed = self.buffers[old]
            .reservation
            .0
            .fetch_or(CLOSED, Ordering::AcqRel);
        let count = (closed & RESERVED) as usize;
        self.drained.fetch_add(count as u64, Ordering::Relaxed);
        let slots = &self.buffers[old].slots;
        // Every reserved slot must carry this generation's stamp before it is read. Usually all
        // do already: scan fast, and wait only from the first slot still being written.
        let mut next = 0;
        while let Some(pending) = slots[next..count]
            .iter()
            .position(|slot| stamp_of(slot.head.load(Ordering::Acquire)) != old_gen)
        {
            next += pending;
            let mut spins = 0u32;
            while stamp_of(slots[next].head.load(Ordering::Acquire)) != old_gen {
                // A producer reserved this slot and is still writing it.
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        let mut len = count;
        if let Some(extra) = tail {
            // Slot `count` is past every reservation of this closed buffer (it is the spare
            // slot when the buffer is full), so the tail extends the batch contiguously.
            let slot = &slots[count];
            // SAFETY: no producer can reserve it; only this serialised drainer touches it.
            unsafe { *slot.value.get() = extra.value };
            slot.head
                .store(head(extra.event_type, 0), Ordering::Relaxed);
            len += 1;
        }
        // SAFETY: `Slot` and `Event` have the same size and field offsets (the stamp occupies
        // the padding); every slot in [0, len) is initialised and no producer can write to
        // this closed buffer until the next drain reopens it, which needs the drain lock (held).
        let events = unsafe { std::slice::from_raw_parts(slots.as_ptr() as *const Event, len) };
        export(events)
    }

    /// Moves every staged event into `out` (cleared first). A test hook.
    #[cfg(test)]
    fn drain_into(&self, out: &mut Vec<Event>) {
        out.clear();
        self.drain(None, |events| out.extend_from_slice(events));
    }

    /// Number of drops since the previous call (the delta a flush reports).
    pub fn take_dropped(&self) -> u64 {
        let mut state = self.lock_drain();
        let total = self.dropped.0.load(Ordering::Relaxed);
        let delta = total - state.reported_drops;
        state.reported_drops = total;
        delta
    }

    /// Totals since creation, without waiting for a drain in progress (exact when no producer
    /// or drain is running).
    pub fn counts(&self) -> StagingCounts {
        StagingCounts {
            accepted: self.drained.load(Ordering::Relaxed) + self.len() as u64,
            dropped: self.dropped.0.load(Ordering::Relaxed),
        }
    }

    /// Number of events currently staged (reserved in the active buffer).
    pub fn len(&self) -> usize {
        let active = self.active.0.load(Ordering::Acquire);
        let buffer = &self.buffers[(active & 1) as usize];
        (buffer.reservation.0.load(Ordering::Acquire) & RESERVED) as usize
    }

    /// Whether no event is staged.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock_drain(&self) -> MutexGuard<'_, DrainState> {
        // Nothing panics while the lock is held, so a poisoned lock still holds consistent data.
        self.drain.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;
    use std::sync::Arc;

    fn ev(v: u64) -> Event {
        Event::new(EventType::AgentTxBytes, v)
    }

    #[test]
    fn fills_to_capacity_then_drops_newest() {
        let q = StagingQueue::new(4).unwrap();
        for v in 0..4 {
            assert!(q.try_push(ev(v)));
        }
        assert!(!q.try_push(ev(99)));
        let mut out = Vec::new();
        q.drain_into(&mut out);
        assert_eq!(out, (0..4).map(ev).collect::<Vec<_>>());
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
    fn drained_batch_ends_with_the_tail() {
        let q = StagingQueue::new(3).unwrap();
        let report = Event::new(EventType::AgentTelemetryEventsDropped, 5);
        let got = q.drain(Some(report), |e| e.to_vec());
        assert_eq!(got, [report]);
        for v in 0..3 {
            q.try_push(ev(v));
        }
        let got = q.drain(Some(report), |e| e.to_vec());
        assert_eq!(got, [ev(0), ev(1), ev(2), report]);
        q.try_push(ev(7));
        assert_eq!(q.drain(Some(report), |e| e.to_vec()), [ev(7), report]);
        assert_eq!(q.drain(None, |e| e.len()), 0);
    }

    #[test]
    fn generation_wrap_clears_stale_stamps() {
        let q = StagingQueue::new(4).unwrap();
        // Put buffer 1 one reopen away from wrapping, with stale stamps equal to the
        // generation that follows the wrap.
        q.buffers[1]
            .reservation
            .0
            .store(word(u32::MAX, true, 0), Ordering::Relaxed);
        for slot in q.buffers[1].slots.iter() {
            slot.head.store(head(9, 1), Ordering::Relaxed);
        }
        assert!(q.try_push(ev(1)));
        assert_eq!(q.drain(None, |e| e.to_vec()), [ev(1)]); // reopens buffer 1 as generation 1
        assert_eq!(q.active.0.load(Ordering::Relaxed), (1 << 1) | 1);
        assert!(q.buffers[1]
            .slots
            .iter()
            .all(|s| stamp_of(s.head.load(Ordering::Relaxed)) == 0));
        assert!(q.try_push(ev(2)));
        assert_eq!(q.drain(None, |e| e.to_vec()), [ev(2)]);
    }

    #[test]
    fn many_drain_cycles_reuse_the_two_buffers() {
        let q = StagingQueue::new(8).unwrap();
        let mut seen = std::collections::HashSet::new();
        for cycle in 0..200u64 {
            for v in 0..8 {
                assert!(q.try_push(ev(cycle * 8 + v)));
            }
            let (first, ptr) = q.drain(None, |e| {
                assert_eq!(e.len(), 8);
                (e[0].value, e.as_ptr() as usize)
            });
            assert_eq!(first, cycle * 8);
            seen.insert(ptr);
        }
        assert_eq!(seen.len(), 2, "exactly two storages alternate");
        assert_eq!(q.counts().accepted, 1600);
    }

    #[test]
    fn concurrent_singles_are_never_read_before_written() {
        // Four producers push single events whose type is derived from their value while a
        // drainer empties the queue as fast as it can: a slot read before its producer wrote
        // it would show a stale or mismatched (type, value) pair or a repeated value.
        const PRODUCERS: u64 = 4;
        // Fewer under Miri, which interprets every access.
        const EVENTS: u64 = if cfg!(miri) { 200 } else { 50_000 };
        let q = Arc::new(StagingQueue::new(64).unwrap());
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let drainer = {
            let (q, done) = (q.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seen = std::collections::HashSet::new();
                let mut last = [None::<u64>; PRODUCERS as usize];
                loop {
                    let finished = done.load(std::sync::atomic::Ordering::Acquire);
                    q.drain(None, |events| {
                        for e in events {
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
        done.store(true, std::sync::atomic::Ordering::Release);
        let read = drainer.join().unwrap();
        let counts = q.counts();
        assert_eq!(read, accepted);
        assert_eq!(counts.accepted, accepted);
        assert_eq!(counts.accepted + counts.dropped, PRODUCERS * EVENTS);
    }

    #[test]
    fn concurrent_batches_conserve_events_stay_whole_and_ordered() {
        const PRODUCERS: u64 = 8;
        const BATCHES: u64 = if cfg!(miri) { 50 } else { 5000 };
        let q = Arc::new(StagingQueue::new(256).unwrap());
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let consumer = {
            let (q, done) = (q.clone(), done.clone());
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let finished = done.load(std::sync::atomic::Ordering::Acquire);
                    q.drain(None, |e| got.extend_from_slice(e));
                    if finished {
                        return got;
                    }
                    std::thread::yield_now();
                }
            })
        };
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut accepted = 0;
                    for b in 0..BATCHES {
                        let id = (p << 32) | b;
                        let batch = [0, 1, 2, 3].map(|i| Event {
                            event_type: i,
                            value: id,
                        });
                        accepted += q.try_push_batch(&batch) as u64;
                    }
                    accepted
                })
            })
            .collect();
        let accepted: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
        done.store(true, std::sync::atomic::Ordering::Release);
        let got = consumer.join().unwrap();
        let counts = q.counts();
        assert_eq!(counts.accepted, accepted * 4);
        assert_eq!(got.len() as u64, counts.accepted);
        assert_eq!(counts.accepted + counts.dropped, PRODUCERS * BATCHES * 4);
        assert_eq!(counts.dropped % 4, 0);
        let mut last = std::collections::HashMap::new();
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
    }
}
