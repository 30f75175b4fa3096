//! The bounded trace queue between a producer's record calls and its trace worker: many
//! producers push, one consumer takes everything at once. The queue is bounded twice: in
//! entries and in bytes (the sizes of the queued payloads), so a few huge payloads cannot hold
//! gigabytes. When a bound would be exceeded, a push **drops the oldest** entries (keeping the
//! newest, as Dynamo's broadcast ring does) and counts them; an entry larger than the whole
//! byte bound is dropped itself, and counted. A push never waits for the consumer.
//!
//! Both buffers are allocated once at construction and swapped on drain, so pushing and draining
//! never allocate; the lock is held for a constant number of instructions.

use crate::sync::LockUnpoisoned;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Default capacity of a producer's trace queue, in entries.
pub const DEFAULT_QUEUE_CAPACITY: usize = 8192;
/// Default bound of the bytes a producer's trace queue holds (`DYN_FPM_QUEUE_MAX_BYTES`): 64 MiB,
/// far above the 8,192 payloads of a few KiB a busy engine queues.
pub const DEFAULT_QUEUE_MAX_BYTES: usize = 64 << 20;

/// What an entry weighs against the queue's byte bound.
pub trait QueuedBytes {
    /// The bytes this entry holds (its payload; a fixed estimate for a typed one).
    fn queued_bytes(&self) -> usize;
}

/// A bounded multi-producer, single-consumer queue with drop-oldest semantics.
#[derive(Debug)]
pub struct DropOldestQueue<T> {
    capacity: usize,
    max_bytes: usize,
    items: Mutex<Queued<T>>,
    pushed: AtomicU64,
    dropped: AtomicU64,
}

/// The entries and their total bytes.
#[derive(Debug)]
struct Queued<T> {
    entries: VecDeque<T>,
    bytes: usize,
}

/// What a push did.
#[derive(Debug, PartialEq, Eq)]
pub struct Pushed {
    /// Entries queued after this push.
    pub len: usize,
    /// Whether entries were dropped by this push: the oldest to make room, or the pushed entry
    /// itself when it alone is larger than the byte bound.
    pub dropped_oldest: bool,
}

impl<T: QueuedBytes> DropOldestQueue<T> {
    /// A queue holding at most `capacity` entries (at least 1) and `max_bytes` bytes (at
    /// least 1).
    pub fn new(capacity: usize, max_bytes: usize) -> DropOldestQueue<T> {
        let capacity = capacity.max(1);
        DropOldestQueue {
            capacity,
            max_bytes: max_bytes.max(1),
            items: Mutex::new(Queued {
                entries: VecDeque::with_capacity(capacity),
                bytes: 0,
            }),
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

    fn lock(&self) -> MutexGuard<'_, Queued<T>> {
        // Nothing can panic while the lock is held, so a poisoned queue is still consistent.
        self.items.lock_unpoisoned()
    }

    /// Maximum number of queued bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Appends `item`, first dropping (and counting) the oldest entries while the queue is full
    /// in entries or the item would not fit in the byte bound; an item larger than the whole
    /// byte bound is dropped (and counted) instead, and the queue is left as it is.
    pub fn push(&self, item: T) -> Pushed {
        let bytes = item.queued_bytes();
        self.pushed.fetch_add(1, Ordering::Relaxed);
        if bytes > self.max_bytes {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            let len = self.lock().entries.len();
            // `item` is freed here, outside the lock.
            return Pushed {
                len,
                dropped_oldest: true,
            };
        }
        let mut displaced = Vec::new();
        let len = {
            let mut queued = self.lock();
            while queued.entries.len() >= self.capacity || queued.bytes + bytes > self.max_bytes {
                let Some(oldest) = queued.entries.pop_front() else {
                    break;
                };
                queued.bytes -= oldest.queued_bytes();
                displaced.push(oldest);
            }
            queued.bytes += bytes;
            queued.entries.push_back(item);
            queued.entries.len()
        };
        let dropped_oldest = !displaced.is_empty();
        if dropped_oldest {
            self.dropped
                .fetch_add(displaced.len() as u64, Ordering::Relaxed);
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
        let mut queued = self.lock();
        queued.bytes = 0;
        std::mem::swap(&mut queued.entries, out);
    }

    /// Entries queued now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Bytes queued now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
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

    impl QueuedBytes for u64 {
        fn queued_bytes(&self) -> usize {
            8
        }
    }

    /// A test entry of a given size.
    #[derive(Debug, PartialEq)]
    struct Sized(u32, usize);

    impl QueuedBytes for Sized {
        fn queued_bytes(&self) -> usize {
            self.1
        }
    }

    #[test]
    fn the_byte_bound_drops_the_oldest_and_refuses_what_can_never_fit() {
        let q = DropOldestQueue::new(100, 1000);
        for i in 0..4 {
            assert!(!q.push(Sized(i, 250)).dropped_oldest);
        }
        assert_eq!(q.bytes(), 1000);
        // 600 more bytes: the three oldest go.
        let pushed = q.push(Sized(4, 600));
        assert_eq!(
            pushed,
            Pushed {
                len: 2,
                dropped_oldest: true
            }
        );
        assert_eq!((q.bytes(), q.dropped()), (850, 3));
        // Larger than the whole bound: refused and counted, the queue unchanged.
        assert!(q.push(Sized(5, 1001)).dropped_oldest);
        assert_eq!(
            (q.len(), q.bytes(), q.dropped(), q.pushed()),
            (2, 850, 4, 6)
        );
        let mut out = q.new_drain_buffer();
        q.drain(&mut out);
        assert_eq!(Vec::from(out), [Sized(3, 250), Sized(4, 600)]);
        assert_eq!(q.bytes(), 0);
        // Accepted + dropped == pushed.
        assert_eq!(2 + q.dropped(), q.pushed());
    }

    #[test]
    fn full_queue_keeps_the_newest_and_counts_every_drop() {
        let q = DropOldestQueue::new(2, usize::MAX);
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
        let q = std::sync::Arc::new(DropOldestQueue::new(64, usize::MAX));
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
