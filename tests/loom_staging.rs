//! A concurrency model check of the staging queue's atomics protocol with loom: each model runs
//! a few threads on a small queue (loom's 4-event blocks, `BLOCK_EVENTS` under `--cfg loom`)
//! under every interleaving loom explores, each atomic load returning any value the C++ memory
//! model allows, and every slot access checked against the others (`src/staging/sync.rs`: a
//! slot written and read, or written twice, without the protocol ordering the two fails the
//! model). What each model covers is said at it: the credit (the budget), slot publication, the
//! blocks' way back through the lane's spare and the free list, and a lane handed to the next
//! thread; the fast path of the C entry points ([`FastPath::try_push_in_place`]) is how the
//! producers record, as the C entry points do.
//!
//! Built only with `--cfg loom` (`scripts/test.sh` runs it, in its own target directory):
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --profile loom -p
//! nixl-telemetry-core --test loom_staging`.
//! `LOOM_MAX_PREEMPTIONS` bounds the preemptions explored per execution (default here: 2).
#![cfg(loom)]

use std::collections::HashMap;
use std::sync::Arc;

use loom::thread;
use nixl_telemetry_base::event::{Event, EventType};
use nixl_telemetry_core::staging::{loom_thread_exit, StagingQueue, BLOCK_EVENTS};

/// Runs `f` under loom with a bound on the preemptions per execution (each model finishes in
/// seconds with 2; `LOOM_MAX_PREEMPTIONS` overrides it).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// Event `seq` of producer `producer`.
fn ev(producer: u64, seq: u64) -> Event {
    Event::new(EventType::AgentTxBytes, producer << 16 | seq)
}

/// Records `batch` as the C entry points do: the fast path, then the full push when the fast
/// path cannot decide.
fn record(queue: &StagingQueue, batch: &[Event; 2]) -> bool {
    // SAFETY: the queue is alive for the call.
    unsafe { queue.fast_path().try_push_in_place(batch) }
        .unwrap_or_else(|| queue.try_push_batch(batch))
}

/// Producer `producer` records `batches` batches of 2 events, then exits; returns the events
/// accepted.
fn produce(queue: &StagingQueue, producer: u64, batches: u64) -> Vec<Event> {
    let mut accepted = Vec::new();
    for b in 0..batches {
        let batch = [ev(producer, 2 * b), ev(producer, 2 * b + 1)];
        if record(queue, &batch) {
            accepted.extend(batch);
        }
    }
    // What the thread's exit does before `join` returns (loom's `join` does not wait for it).
    loom_thread_exit();
    accepted
}

/// Every staged event, in drain order.
fn drain(queue: &StagingQueue) -> Vec<Event> {
    queue.drain(|runs| runs.concat())
}

/// A flush while the producers run: yields first (without it loom's search never lets a
/// producer run before the flush, which then drains nothing), then drains.
fn flush_now(queue: &StagingQueue) -> Vec<Event> {
    thread::yield_now();
    drain(queue)
}

/// Checks what was drained (in drain order) against what each producer had accepted: the same
/// events (nothing lost, duplicated or read before it was written: a slot read too early holds
/// another event or none), each producer's in the order it recorded them and its batches whole.
fn check(drained: &[Event], accepted: &[Vec<Event>]) {
    let mut by_producer: HashMap<u64, Vec<Event>> = HashMap::new();
    for (i, e) in drained.iter().enumerate() {
        if e.value & 1 == 0 {
            assert_eq!(
                drained.get(i + 1).map(|n| n.value),
                Some(e.value + 1),
                "batch split in {drained:?}"
            );
        }
        by_producer.entry(e.value >> 16).or_default().push(*e);
    }
    for (producer, events) in accepted.iter().enumerate() {
        let got = by_producer.remove(&(producer as u64)).unwrap_or_default();
        assert_eq!(&got, events, "producer {producer}'s events");
    }
    assert!(
        by_producer.is_empty(),
        "events nobody recorded: {by_producer:?}"
    );
}

/// The credit and slot publication: two producers share a budget of one block (plus one block
/// for the second thread) while a flush drains; every accepted event is drained once, whole
/// and in order, drops are counted exactly, the queue's account never passes the bound, and
/// once the threads are gone and the queue drained every event of credit is back.
#[test]
fn producers_share_the_credit_and_publish_their_slots() {
    model(|| {
        let capacity = BLOCK_EVENTS as u64;
        let queue = Arc::new(StagingQueue::new(capacity as usize).unwrap());
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let queue = queue.clone();
                thread::spawn(move || produce(&queue, p, 2))
            })
            .collect();
        let mut drained = flush_now(&queue);
        assert!(queue.reserved() <= capacity + BLOCK_EVENTS as u64);
        let accepted: Vec<_> = producers.into_iter().map(|p| p.join().unwrap()).collect();
        drained.extend(drain(&queue));
        check(&drained, &accepted);
        let counts = queue.counts();
        assert_eq!(counts.accepted, drained.len() as u64);
        assert_eq!(counts.accepted + counts.dropped, 2 * 2 * 2);
        assert_eq!(queue.take_dropped(), counts.dropped);
        assert_eq!(queue.reserved(), 0, "credit not given back");
        assert!(queue.is_empty());
    });
}

/// The blocks' way back: one producer fills block after block while a flush drains twice; the
/// drained blocks go to the lane's spare or the free list and are written again, which the
/// model checks is ordered after the flush's last read of them.
#[test]
fn drained_blocks_are_reused_after_their_last_read() {
    model(|| {
        let queue = Arc::new(StagingQueue::new(2 * BLOCK_EVENTS).unwrap());
        let producer = {
            let queue = queue.clone();
            thread::spawn(move || produce(&queue, 0, 6))
        };
        let mut drained = flush_now(&queue);
        drained.extend(flush_now(&queue));
        let accepted = producer.join().unwrap();
        drained.extend(drain(&queue));
        check(&drained, &[accepted]);
        let counts = queue.counts();
        assert_eq!(counts.accepted + counts.dropped, 12);
        // 12 events take 3 blocks at most, and the shared lane has one of its own.
        assert!(
            queue.blocks_allocated() <= 4,
            "{} blocks",
            queue.blocks_allocated()
        );
        assert_eq!(queue.reserved(), 0);
    });
}

/// A lane handed to the next thread: a thread records and exits (giving back its credit and
/// its lane) while another starts recording and a flush drains; the second thread may claim the
/// first one's lane as it is let go, and continues it after the first thread's events.
#[test]
fn a_lane_is_handed_to_the_next_thread() {
    model(|| {
        let queue = Arc::new(StagingQueue::new(BLOCK_EVENTS).unwrap());
        let first = {
            let queue = queue.clone();
            thread::spawn(move || produce(&queue, 0, 1))
        };
        let second = {
            let queue = queue.clone();
            thread::spawn(move || produce(&queue, 1, 1))
        };
        let mut drained = flush_now(&queue);
        let accepted = vec![first.join().unwrap(), second.join().unwrap()];
        drained.extend(drain(&queue));
        check(&drained, &accepted);
        let counts = queue.counts();
        assert_eq!(counts.accepted + counts.dropped, 4);
        assert_eq!(queue.reserved(), 0);
    });
}

/// A lane handed on in sequence: the thread after an exited one takes its lane, with its staged
/// events (no new block), and the flush drains both threads' events in order.
#[test]
fn the_next_thread_continues_an_exited_threads_lane() {
    model(|| {
        let queue = Arc::new(StagingQueue::new(BLOCK_EVENTS).unwrap());
        let queue2 = queue.clone();
        let accepted = thread::spawn(move || {
            let first = {
                let queue = queue2.clone();
                thread::spawn(move || produce(&queue, 0, 1))
            };
            let first = first.join().unwrap();
            let blocks = queue2.blocks_allocated();
            let queue = queue2.clone();
            let second = thread::spawn(move || produce(&queue, 1, 1)).join().unwrap();
            assert_eq!(queue2.blocks_allocated(), blocks, "the lane was not reused");
            vec![first, second]
        });
        let mut drained = flush_now(&queue);
        let accepted = accepted.join().unwrap();
        drained.extend(drain(&queue));
        check(&drained, &accepted);
        assert_eq!(queue.reserved(), 0);
    });
}
