//! The bounded producer-side staging queue: many producers append single events or
//! all-or-none batches; one flusher drains everything at once. When full it drops the newest
//! events (never overwriting queued ones) and counts every drop exactly.
//!
//! Both buffers are allocated once at construction; pushing and draining never allocate.

use std::sync::{Mutex, MutexGuard};

use crate::event::Event;

/// Totals since the queue was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagingCounts {
    /// Events that entered the queue.
    pub accepted: u64,
    /// Events refused because the queue was full.
    pub dropped: u64,
}

struct Live {
    events: Vec<Event>,
    counts: StagingCounts,
    /// Drops not yet reported by [`StagingQueue::take_dropped`].
    unreported_drops: u64,
}

/// Bounded multi-producer, single-consumer queue with drop-newest semantics.
pub struct StagingQueue {
    capacity: usize,
    live: Mutex<Live>,
}

impl StagingQueue {
    /// A queue holding at most `capacity` events (capacity must be positive).
    pub fn new(capacity: usize) -> StagingQueue {
        assert!(capacity > 0, "staging queue capacity must be positive");
        StagingQueue {
            capacity,
            live: Mutex::new(Live {
                events: Vec::with_capacity(capacity + 1),
                counts: StagingCounts::default(),
                unreported_drops: 0,
            }),
        }
    }

    /// A buffer for [`StagingQueue::drain_into`]: room for a full queue plus one spare slot,
    /// where the flusher appends its synthetic drop report without reallocating.
    pub fn new_drain_buffer(&self) -> Vec<Event> {
        Vec::with_capacity(self.capacity + 1)
    }

    /// Maximum number of staged events.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        // Nothing panics while the lock is held, so a poisoned lock still holds consistent data.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
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
        if batch.is_empty() {
            return true;
        }
        let n = batch.len() as u64;
        let mut live = self.lock();
        if batch.len() > self.capacity - live.events.len() {
            live.counts.dropped += n;
            live.unreported_drops += n;
            return false;
        }
        live.events.extend_from_slice(batch);
        live.counts.accepted += n;
        true
    }

    /// Moves every staged event, in insertion order, into `out` (which is cleared first) by
    /// swapping buffers. `out` should come from [`StagingQueue::new_drain_buffer`] so that the
    /// swap keeps both buffers pre-allocated.
    pub fn drain_into(&self, out: &mut Vec<Event>) {
        out.clear();
        let mut live = self.lock();
        std::mem::swap(&mut live.events, out);
    }

    /// Number of drops since the previous call (the delta a flush reports).
    pub fn take_dropped(&self) -> u64 {
        std::mem::take(&mut self.lock().unreported_drops)
    }

    /// Totals since creation.
    pub fn counts(&self) -> StagingCounts {
        self.lock().counts
    }

    /// Number of events currently staged.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    /// Whether no event is staged.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        let q = StagingQueue::new(4);
        for v in 0..4 {
            assert!(q.try_push(ev(v)));
        }
        assert!(!q.try_push(ev(99)));
        let mut out = q.new_drain_buffer();
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
        let q = StagingQueue::new(6);
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
    fn draining_alternates_two_buffers_without_allocating() {
        let q = StagingQueue::new(8);
        let mut out = q.new_drain_buffer();
        let mut seen = std::collections::HashSet::new();
        for cycle in 0..200u64 {
            for v in 0..8 {
                assert!(q.try_push(ev(cycle * 8 + v)));
            }
            q.drain_into(&mut out);
            assert_eq!(out.len(), 8);
            assert_eq!(out[0].value, cycle * 8);
            assert!(out.capacity() >= 8);
            seen.insert(out.as_ptr() as usize);
        }
        assert_eq!(seen.len(), 2, "exactly two storages alternate");
    }

    #[test]
    fn concurrent_batches_conserve_events_and_stay_whole() {
        const PRODUCERS: u64 = 8;
        const BATCHES: u64 = 5000;
        let q = Arc::new(StagingQueue::new(256));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let consumer = {
            let (q, done) = (q.clone(), done.clone());
            std::thread::spawn(move || {
                let mut out = q.new_drain_buffer();
                let mut got = Vec::new();
                loop {
                    let finished = done.load(std::sync::atomic::Ordering::Acquire);
                    q.drain_into(&mut out);
                    got.extend_from_slice(&out);
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
                    for b in 0..BATCHES {
                        let id = (p << 32) | b;
                        let batch = [0, 1, 2, 3].map(|i| Event {
                            event_type: i,
                            value: id,
                        });
                        q.try_push_batch(&batch);
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        let got = consumer.join().unwrap();
        let counts = q.counts();
        assert_eq!(got.len() as u64, counts.accepted);
        assert_eq!(counts.accepted + counts.dropped, PRODUCERS * BATCHES * 4);
        assert_eq!(counts.dropped % 4, 0);
        let mut ids = std::collections::HashSet::new();
        for quad in got.chunks(4) {
            assert_eq!(
                quad.iter().map(|e| e.event_type).collect::<Vec<_>>(),
                [0, 1, 2, 3]
            );
            assert!(
                quad.iter().all(|e| e.value == quad[0].value),
                "partial batch"
            );
            assert!(ids.insert(quad[0].value), "duplicate batch");
        }
    }
}
