//! The bounded producer-side staging of one collector: every producer thread appends into its
//! own chain of fixed-size blocks (its *lane*), with room granted from one budget of
//! `capacity` events shared by every thread; the one flusher drains every lane at once. When
//! the budget is spent the newest events are dropped (never overwriting staged ones) and every
//! drop is counted exactly.
//!
//! # Design: producer-local blocks from a shared pool, room from a shared budget
//!
//! Memory and room are kept apart. Memory comes in blocks of [`BLOCK_EVENTS`] event slots, as
//! in the block pool of moodycamel's ConcurrentQueue: a thread fills its current block and,
//! when the next batch does not fit, links a new one behind it, taken from the lane's spare
//! block, else from the queue's free list, else newly allocated. A block is never written at
//! allocation (its slots are uninitialised), so memory nobody recorded into is never resident.
//! Room is *credit*: before a thread writes events it must hold credit for them, taken from the
//! queue's budget in chunks of up to a block. The budget holds `capacity` events plus
//! [`BLOCK_EVENTS`] for every thread recording beyond the first, so:
//!
//! * **The bound.** Staged events never exceed `capacity + (T - 1) x BLOCK_EVENTS`, T the
//!   threads recording into the queue at the same time ([`StagingQueue::reserved`] is the
//!   queue's own count: staged events plus credit threads hold). With one thread the capacity
//!   is exactly `capacity`, NIXL's. Resident memory is the blocks in use: staged events fill
//!   their blocks but for the last (at most 3 slots are skipped when a 4-event batch does not
//!   fit), plus per thread its current block, its oldest partly drained block and one spare:
//!   about `capacity x 16` bytes plus `3 x 16 x BLOCK_EVENTS` bytes (12 KiB) per thread. Blocks
//!   freed by a flush go back to the lane (one spare) or the free list and are reused, hot in
//!   cache, by the next block any thread needs.
//! * **Drop-newest, not early.** A thread is refused only when the budget cannot cover its
//!   batch after it gave back its own unused credit; the others hold at most one block of
//!   unused credit each, which the budget's per-thread block covers: a batch is dropped only
//!   when the staged events plus the batch would exceed `capacity`.
//! * **The fast path** touches only lines the thread owns: its lane's producer line (`head`,
//!   the credit `limit`, the current block's slot origin) and its block's slots, then publishes
//!   with one release store of `head`. The shared budget is written once per block (one
//!   compare-and-swap per [`BLOCK_EVENTS`] events), and the free list, on the same cache line,
//!   when the new block is not the lane's spare: one line transfer per block.
//! * **Batches** are written into consecutive slots of one block (a batch that does not fit
//!   the current block starts a new one) and published by one store: all or none, contiguous.
//!   A thread's events are drained in the order it recorded them; threads lane after lane.
//! * **Threads.** A thread finds its lane through a thread-local cache (the last queue used is
//!   one compare away; several collectors in a process are a short search), and the C entry
//!   points' fast path ([`FastPath::try_push_in_place`]) finds it without a thread-local
//!   access, in the queue's slots keyed by the thread pointer
//!   ([`ThreadSlots`](threads::ThreadSlots): in a shared library a thread-local access is a
//!   call to `__tls_get_addr`). Its first call
//!   claims a lane left by an exited thread or links a new one into the queue's lock-free list
//!   of lanes. When a thread exits it gives back its credit and its lane, with what is still
//!   staged in it (the next flush drains it), so 10,000 short-lived threads reuse one lane.
//! * **Without thread-locals** (a call from a thread-local destructor or an atexit handler)
//!   the caller appends to the queue's shared lane under a short lock and gives back the
//!   credit it did not use right away, so the shared lane holds no credit between calls.
//! * When the queue is dropped its blocks are freed and its lanes marked retired; threads drop
//!   a retired lane (a few words) from their cache at their next lookup or when they exit.
//!
//! # Why this design, and the block size
//!
//! Alternatives measured or weighed: per-thread rings of `capacity` slots each (the previous
//! design) need no shared word at all but stage up to `T x capacity` events and keep that much
//! memory resident (350-470 MB with 64 threads and a 1,048,576-event capacity in the
//! benchmark driver, against 34 MB for a model of NIXL's two vectors); one ring shared by
//! every thread (NIXL's design, or a lock-free multi-producer ring) makes every call write a
//! shared word; LTTng's per-CPU sub-buffers need the producer pinned to a CPU (restartable
//! sequences), which a library called from any thread cannot assume. Blocks keep the previous
//! design's fast path (a call writes only its thread's lines: 92 instructions per
//! `add_xfer_stats` under callgrind when this design landed, 66 since session 6, the previous
//! design 117, the model of NIXL's 190) and
//! bound memory (21-22 MB in the same driver runs). 256 events (4 KiB) per block is the
//! trade-off: a producer writes a shared cache line (the budget, and the free list beside it)
//! once per 64 transfers, a flush of 4,096 events is 16 runs, and a thread beyond the first
//! may stage 256 events more; smaller blocks write shared lines more often, larger ones loosen
//! the bound.
//! `docs/dev/performance.md` has the measurements.
//!
//! # Forking
//!
//! No producer ever blocks on a lock of the standard library: the fast path takes none; the
//! lane list is lock-free; the free list, the shared lane and the drain state are guarded by
//! small spin locks (`SpinLock`) held for a few instructions (the free list, the shared lane)
//! or for one flush (the drain state). A fork while another thread holds one leaves it held in
//! the child, so a child must not reuse the parent's staging as it is: every lock here can be
//! released by force and every counter reset, because all of them are plain atomics owned by the
//! queue. Resetting a queue in the child (the parent's staged events belong to the parent, which
//! exports them) is: force-release the three spin locks, set each lane's `tail` to its `head`
//! and its drainer's `first` block to its current block (the blocks before it go to the free
//! list) and its credit `limit` to its `head`, mark every lane but the forking thread's
//! unowned, clear every thread slot but the forking thread's (the child's new threads may get
//! the addresses of the parent's other threads), and set the budget's `outstanding` to 0, its
//! thread count to the lanes still owned and its limit to match. No memory needs to be
//! allocated for it. (The C ABI refuses every call on a collector a child inherited, so no
//! queue is reset today.)
//!
//! # Files
//!
//! One concept each, in layers (each uses only those above it):
//! * `sync`: the atomics and cells of the protocol, the standard library's, or loom's in the
//!   model check (`tests/loom_staging.rs`);
//! * `spin_lock`: `SpinLock`, the lock that can be released by force;
//! * `budget`: the blocks, the budget of credit and the free list, and the pool that allocates
//!   blocks;
//! * `lane`: one thread's chain of blocks, its producer's push and its drainer's side;
//! * `threads`: the thread slots of the fast path ([`FastPath`]) and the thread-local cache
//!   that claims and hands back lanes;
//! * `queue`: [`StagingQueue`], its list of lanes, the shared lane and the drain.

mod budget;
mod lane;
mod queue;
mod spin_lock;
mod sync;
mod threads;

pub use budget::BLOCK_EVENTS;
pub use queue::{StagingCounts, StagingQueue, MAX_CAPACITY};
#[cfg(loom)]
#[doc(hidden)]
pub use threads::loom_thread_exit;
pub use threads::FastPath;

#[cfg(test)]
mod tests;
