//! The bounded trace queue between a producer's record calls and its trace worker: many
//! producers push, one consumer takes everything at once. When full, a push **drops the oldest**
//! entry (keeping the newest, as Dynamo's broadcast ring does) and counts it; a push never waits
//! for the consumer.
//!
//! Both buffers are allocated once at construction and swapped on drain, so pushing and draining
//! never allocate; the lock is held for a constant number of instructions.

use crate::sync::LockUnpoisoned;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Default capacity of a producer's trace queue.
pub const DEFAULT_QUEUE_CAPACITY: usize = 8192;

/// A bounded multi-producer, single-consumer queue with drop-oldest semantics.
#[derive(Debug)]
pub struct DropOldestQueue<T> {
    capacity: usize,
    items: Mutex<VecDeque<T>>,
    pushed: AtomicU64,
    dropped: AtomicU64,
}

/// What a push did.
#[derive(Debug, PartialEq, Eq)]
pub struct Pushed {
    /// Entries queued after this push.
    pub len: usize,
    /// Whether the oldest entry was dropped to make room.
    pub dropped_oldest: bool,
}

impl<T> DropOldestQueue<T> {
    /// A queue holding at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> DropOldestQueue<T> {
        let capacity = capacity.max(1);
        DropOldestQueue {
            capacity,
            items: Mutex::new(VecDeque::with_capacity(capacity)),
            pushed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// A buffer for [`DropOldestQueue::drain`], as large as the queue.
    pub fn new_drain_buffer(&self) -> VecDeque<T> {
        VecDeque::with_capacity(self.capacity)
    }

    /// Maximum number of queued entries.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<T>> {
        // Nothing can panic while the lock is held, so a poisoned queue is still consistent.
        self.items.lock_unpoisoned()
    }

    /// Appends `item`, dropping (and counting) the oldest entry when the queue is full.
    pub fn push(&self, item: T) -> Pushed {
        let (len, displaced) = {
            let mut items = self.lock();
            let displaced = if items.len() >= self.capacity {
                items.pop_front()
            } else {
                None
            };
            items.push_back(item);
            (items.len(), displaced)
        };
        self.pushed.fetch_add(1, Ordering::Relaxed);
        let dropped_oldest = displaced.is_some();
        if dropped_oldest {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        // `displaced` is freed here, outside the lock.
        Pushed {
            len,
            dropped_oldest,
        }
    }

    /// Moves every queued entry, oldest first, into `out` (which must be empty; it is swapped
    /// with the queue's buffer, so neither side allocates).
    pub fn drain(&self, out: &mut VecDeque<T>) {
        debug_assert!(out.is_empty());
        std::mem::swap(&mut *self.lock(), out);
    }

    /// Entries queued now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries pushed since creation (dropped ones included).
    pub fn pushed(&self) -> u64 {
        self.pushed.load(Ordering::Relaxed)
    }

    /// Entries dropped to make room since creation.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_queue_keeps_the_newest_and_counts_every_drop() {
        let q = DropOldestQueue::new(2);
        assert!(!q.push(1).dropped_oldest);
        assert_eq!(q.push(2).len, 2);
        assert!(q.push(3).dropped_oldest);
        let mut out = q.new_drain_buffer();
        q.drain(&mut out);
        assert_eq!(Vec::from(out.clone()), [2, 3]);
        assert_eq!((q.pushed(), q.dropped()), (3, 1));
        assert!(q.is_empty());
        out.clear();
        for i in 0..10 {
            q.push(i);
        }
        q.drain(&mut out);
        assert_eq!(Vec::from(out), [8, 9]);
        assert_eq!((q.pushed(), q.dropped()), (13, 9));
    }

    #[test]
    fn concurrent_pushes_are_all_accounted_for() {
        let q = std::sync::Arc::new(DropOldestQueue::new(64));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        q.push(t * 100_000 + i);
                    }
                })
            })
            .collect();
        let mut taken = 0u64;
        let mut out = q.new_drain_buffer();
        while threads.iter().any(|t| !t.is_finished()) {
            q.drain(&mut out);
            taken += out.len() as u64;
            out.clear();
        }
        for t in threads {
            t.join().unwrap();
        }
        q.drain(&mut out);
        taken += out.len() as u64;
        assert_eq!(q.pushed(), 40_000);
        assert_eq!(taken + q.dropped(), 40_000);
    }
}
