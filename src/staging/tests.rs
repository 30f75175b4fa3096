//! The staging queue's unit tests (sized to run under Miri too).

use super::threads::cached_lanes;
use super::*;
use crate::event::{Event, EventType};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
    let lane = cached_lanes()[0].clone();
    drop(first);
    assert!(lane.retired.load(Ordering::Acquire));
    let second = StagingQueue::new(4).unwrap();
    assert!(second.try_push(ev(2)));
    assert_eq!(drain_all(&second), [ev(2)]);
    assert!(
        cached_lanes().iter().all(|l| !Arc::ptr_eq(l, &lane)),
        "retired lane pruned"
    );
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
fn drain_until(q: Arc<StagingQueue>, done: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Event>> {
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
