//! What happens to the library when its process forks: the `pthread_atfork` handlers, the
//! process's fork generation, the locks held across a fork, and the descriptors and mappings
//! the child gives up.
//!
//! A host may fork at any moment (Python's multiprocessing does by default on Linux), while the
//! library's threads (producers, flush threads, the scrape server, push threads) are anywhere.
//! The child has only the forking thread; everything else the parent had is copied as it was.
//! The rules, and how each is kept:
//!
//! - **No library lock is left held in the child.** Every process-wide lock a child may need
//!   (the logging sink and this copy's stderr lock, the plug-in registries, the open segment
//!   prefixes, the warned-once sets, this module's registries, and a plug-in's own) is
//!   registered with [`hold_across_fork`] before it is first taken; the `prepare` handler takes
//!   every registered lock, in one fixed order ([`LockOrder`]), and the `parent` and `child`
//!   handlers release them: the fork happens while the forking thread holds them all, so no
//!   other thread holds one. (Holding them is simpler and safer than re-creating them in the
//!   child: a `std` lock cannot be re-initialised in place. Registering, rather than this
//!   module naming them, keeps this module below every module it serves.) The order is the
//!   nesting order (a lock taken while another is held comes after it): a plug-in's locks
//!   first, then the core's registries, then this module's, then the logging sink (messages
//!   are logged under any other lock). A plug-in links its own copy of this crate, with its own
//!   registry for its own locks, but not its own handlers: it adds them to its host's through
//!   the plug-in ABI's host services ([`install`]), and the host's `prepare` runs every
//!   plug-in's `prepare` first (a plug-in logs into the host under its own locks; the host never
//!   calls a plug-in under one of its locks), its `parent` and `child` last. The process has one
//!   set of `pthread_atfork` handlers, and each lock is taken once per fork. (A plug-in whose
//!   host offers no fork services installs its own, as a separate library would.)
//!   Per-object locks (a collector's flush state, its staging, a trace's queue) are not held:
//!   the objects inherited from the parent are never used again in the child (next rule), and a
//!   new object has new locks. The staging's thread-local lane cache is inherited too, but it
//!   finds lanes by the id of their queue, which is never reused, so a new collector in the
//!   child claims a new lane.
//! - **Inherited handles are refused.** The `child` handler bumps the process's fork
//!   [`generation`]. Every collector and FPM trace writer remembers the generation it was
//!   created in ([`Generation`]); every C entry point on such a handle checks it before taking
//!   any lock and refuses with `NIXL_TELEMETRY_ERR_FORKED` (and one error message per process),
//!   so a child never flushes into the parent's ring, stores or trace files, and never waits on
//!   a lock a thread of the parent held. Destroying an inherited handle in the child releases
//!   nothing: its memory is left to the child's exit (its threads do not exist in the child, and
//!   its files belong to the parent). Process-wide registries that remember objects (the open
//!   segment prefixes, a plug-in's endpoint or elections) ignore entries of another generation.
//! - **Inherited lock and listening descriptors are closed in the child.** Whoever holds a
//!   `flock` or a listening socket for the process's sake registers its descriptor
//!   ([`close_in_child`]; [`crate::owner_only::try_claim`] does it for every writer's `flock`);
//!   the `child` handler puts `/dev/null` over each one with `dup3`, so the child drops its
//!   share of the parent's locks and sockets (the parent's failover and restarts never wait for
//!   the parent's children) while the descriptor number stays taken, so nothing inherited can
//!   later close a new descriptor by accident. A registration remembers the file's device and
//!   inode, and a descriptor that is no longer that file (closed, its number reused) is skipped
//!   and forgotten. A shared mapping holds its file (and so its `flock`) too: writers register
//!   their mapping ([`replace_in_child`]: the ring, a `prometheus_mp` store), which the child
//!   handler replaces with anonymous memory.
//!
//! Limits: a lock's lazy initialisation (`OnceLock`) running in another thread at the fork
//! stays unfinished in the child (these run once, early); the `child` handler allocates, which
//! glibc's `fork` allows; a scrape connection accepted by the parent's server is not closed in
//! the child (a client in the middle of a scrape at the fork waits for its own timeout if the
//! parent dies); a host's log callback must not wait, while a library thread logs, for a lock
//! the forking thread holds across `fork`.

use std::any::Any;
use std::cell::RefCell;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock, RwLock};

use crate::error::{Error, Status};
use crate::sync::{LockUnpoisoned, RwLockUnpoisoned};

/// Bumped by the `child` handler: how many forks separate this process from the process that
/// first loaded this copy of the library.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Whether the one message about a refused inherited handle was logged in this process (reset
/// in each child).
static REFUSAL_LOGGED: AtomicBool = AtomicBool::new(false);

/// A process-wide lock that [`hold_across_fork`] can register.
pub trait HeldAcrossFork: Sync {
    /// Takes the lock (blocking, for writing) and returns its guard.
    fn hold(&'static self) -> Box<dyn Any>;
}

impl<T: Send + 'static> HeldAcrossFork for Mutex<T> {
    fn hold(&'static self) -> Box<dyn Any> {
        Box::new(self.lock_unpoisoned())
    }
}

impl<T: Send + Sync + 'static> HeldAcrossFork for RwLock<T> {
    fn hold(&'static self) -> Box<dyn Any> {
        Box::new(self.write_unpoisoned())
    }
}

/// Where a lock goes in the order the `prepare` handler takes them (first to last): the order
/// they nest in, a lock taken while another is held coming after it. Locks of one place are
/// taken in the order they were registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LockOrder {
    /// A plug-in's own state (its endpoint, elections, process state): a plug-in logs into the
    /// host and registers its locks under it.
    Plugin,
    /// The registry of loaded plug-ins (a plug-in library is opened under it).
    LoadedPlugins,
    /// The C++ plug-in bridge's slot (opened under the registry of plug-ins).
    CppBridge,
    /// The added plug-in directories (read under both).
    PluginDirs,
    /// The segment prefixes open for writing in the process.
    OpenPrefixes,
    /// A set of what was warned about once (a message is logged under it).
    WarnedOnce,
    /// The ring guard's SIGBUS handler, while it is put back on top (takes no other lock).
    RingSignalHandler,
    /// This module's own registries (taken under any lock above, taking none).
    ForkRegistry,
    /// The logging sink, then stderr: every message goes through them, under any other lock.
    Logging,
    /// Who reads NIXL's configuration file (taken under any lock above, even the logging
    /// sink's, whose threshold is a setting; taking none, and logging nothing, while held). Held
    /// only to claim the read or publish its result, never while the file is read, so a fork
    /// never waits for a slow read.
    ConfigFile,
}

/// Locks registered by [`hold_across_fork`], with their place in the order.
static REGISTERED: Mutex<Vec<(LockOrder, &'static dyn HeldAcrossFork)>> = Mutex::new(Vec::new());

/// What the `child` handler takes away from the child.
struct ChildCleanup {
    /// Descriptors to cover with `/dev/null`: (descriptor, device, inode).
    fds: Vec<(RawFd, u64, u64)>,
    /// Shared file mappings to replace with anonymous memory: (registration, address, length).
    mappings: Vec<(u64, usize, usize)>,
    next_mapping: u64,
}

static CHILD_CLEANUP: Mutex<ChildCleanup> = Mutex::new(ChildCleanup {
    fds: Vec::new(),
    mappings: Vec::new(),
    next_mapping: 0,
});

thread_local! {
    /// The guards the `prepare` handler took, released by the `parent` or `child` handler (all
    /// three run on the forking thread).
    static HELD: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// The process's fork generation: 0 in the process that first loaded this copy of the
/// library, one more in each forked child.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The fork generation an object was created in: whether it was inherited through a fork.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation(u64);

impl Generation {
    /// This process's generation; installs the fork handlers (once) first, so a fork after this
    /// call is seen.
    pub fn current() -> Generation {
        install();
        Generation(generation())
    }

    /// Whether the object was created in an ancestor of this process (it was inherited).
    #[inline]
    pub fn inherited(self) -> bool {
        self.0 != GENERATION.load(Ordering::Relaxed)
    }
}

/// The error for a call on a handle inherited through a fork (`what` names the call and the
/// handle); the first one of the process is also logged.
#[cold]
pub fn inherited_handle(what: &str) -> Error {
    let message = format!(
        "{what}: this handle was created before this process was forked; in a child process it \
         is refused (create a new one in the child; destroying the inherited one is allowed and \
         releases nothing)"
    );
    if !REFUSAL_LOGGED.swap(true, Ordering::Relaxed) {
        log::error!("{message}");
    }
    Error::new(Status::Forked, message)
}

/// Installs this copy's fork handlers (once per process; a child inherits them). In a plug-in
/// whose host offers fork services ([`join_host`]), the handlers join the host's
/// instead, so the process has one set of `pthread_atfork` handlers: the host's, which run a
/// plug-in's `prepare` before taking any lock of its own, and its `parent` or `child` last.
pub fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        if HOST_AT_FORK
            .get()
            .is_some_and(|at_fork| at_fork(prepare, parent, child))
        {
            return;
        }
        // SAFETY: the three handlers are `extern "C"` functions of this library, which is never
        // unloaded (plug-ins are opened with RTLD_NODELETE), and never unwind (see below).
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if rc != 0 {
            log::warn!(
                "cannot install the telemetry fork handlers (error {rc}); a forked child must \
                 not use this library"
            );
        }
    });
}

/// Adds this copy's three fork handlers to a host's: `true` when the host took them.
pub type HostAtFork = fn(
    prepare: unsafe extern "C" fn(),
    parent: unsafe extern "C" fn(),
    child: unsafe extern "C" fn(),
) -> bool;

/// The host's `at_fork`, once a plug-in's copy of this crate has joined the host's handlers.
static HOST_AT_FORK: OnceLock<HostAtFork> = OnceLock::new();

/// Makes [`install`] add this copy's handlers to the host's through `at_fork` instead of
/// installing its own (the plug-in side of the host services, `crate::plugin::services`, calls
/// it before the handlers are first needed; the first one given stays).
pub fn join_host(at_fork: HostAtFork) {
    let _ = HOST_AT_FORK.set(at_fork);
}

/// How many plug-in libraries can add their fork handlers ([`add_plugin_handlers`]): far more
/// than a process loads (one exporter plug-in each, loaded once and never unloaded).
const MAX_PLUGIN_HANDLERS: usize = 32;

/// The fork handlers plug-ins added, `(prepare, parent, child)` as addresses. A slot is in use
/// once its `prepare` word is not 0 (1 when the plug-in gave no `prepare`), which is written
/// last. Atomics rather than a lock: the handlers read them while the process forks.
static PLUGIN_HANDLERS: [[AtomicUsize; 3]; MAX_PLUGIN_HANDLERS] =
    [const { [const { AtomicUsize::new(0) }; 3] }; MAX_PLUGIN_HANDLERS];
/// The next free slot of [`PLUGIN_HANDLERS`].
static NEXT_PLUGIN_SLOT: AtomicUsize = AtomicUsize::new(0);

/// Adds a plug-in's fork handlers to this library's (the host side of the plug-in ABI's
/// `at_fork`): `false` when all slots are taken.
pub fn add_plugin_handlers(
    prepare: Option<unsafe extern "C" fn()>,
    parent: Option<unsafe extern "C" fn()>,
    child: Option<unsafe extern "C" fn()>,
) -> bool {
    install();
    let slot = NEXT_PLUGIN_SLOT.fetch_add(1, Ordering::AcqRel);
    let Some(handlers) = PLUGIN_HANDLERS.get(slot) else {
        return false;
    };
    let address = |f: Option<unsafe extern "C" fn()>| f.map_or(0, |f| f as usize);
    handlers[1].store(address(parent), Ordering::Relaxed);
    handlers[2].store(address(child), Ordering::Relaxed);
    handlers[0].store(address(prepare).max(1), Ordering::Release);
    true
}

/// Calls handler `which` (0 prepare, 1 parent, 2 child) of every plug-in that added them, in the
/// order they were added (`prepare`) or the reverse (`parent`, `child`).
fn run_plugin_handlers(which: usize) {
    let count = NEXT_PLUGIN_SLOT
        .load(Ordering::Acquire)
        .min(MAX_PLUGIN_HANDLERS);
    let call = |slot: usize| {
        let handlers = &PLUGIN_HANDLERS[slot];
        if handlers[0].load(Ordering::Acquire) == 0 {
            return;
        }
        let address = handlers[which].load(Ordering::Relaxed);
        // 1 marks a slot whose plug-in gave no `prepare`.
        if address > 1 {
            // SAFETY: the address of an `unsafe extern "C" fn()` a plug-in added, in a library
            // that is never unloaded; the plug-in ABI says it does not unwind.
            let handler: unsafe extern "C" fn() = unsafe { std::mem::transmute(address) };
            // SAFETY: as above.
            unsafe { handler() };
        }
    };
    if which == 0 {
        (0..count).for_each(call);
    } else {
        (0..count).rev().for_each(call);
    }
}

/// Registers a process-wide lock (a `static`, or part of one) to be held across every fork, at
/// its place in the order (registering it again changes nothing). Register a lock before
/// taking it: a lock never taken needs no holding. (A lock registered for the first time while
/// another thread forks may not be held by that fork.)
pub fn hold_across_fork(order: LockOrder, lock: &'static dyn HeldAcrossFork) {
    install();
    let mut registered = REGISTERED.lock_unpoisoned();
    let address = |l: &dyn HeldAcrossFork| (l as *const dyn HeldAcrossFork).cast::<()>();
    if !registered.iter().any(|(_, r)| address(*r) == address(lock)) {
        registered.push((order, lock));
    }
}

/// Registers `fd` (a `flock`ed file or a listening socket kept for this process) to be covered
/// with `/dev/null` in every forked child. A descriptor that is no longer the same file at the
/// fork is skipped.
pub fn close_in_child(fd: RawFd) {
    install();
    let Some((dev, ino)) = identity(fd) else {
        return;
    };
    let mut cleanup = CHILD_CLEANUP.lock_unpoisoned();
    cleanup
        .fds
        .retain(|&(f, d, i)| f != fd && identity(f) == Some((d, i)));
    cleanup.fds.push((fd, dev, ino));
}

/// A shared mapping of a `flock`ed file that forked children do not keep, while this value
/// lives (drop it before unmapping).
///
/// A mapping holds its file open: a child's copy of the mapping would keep the writer's lock
/// after the writer's process ends (closing the descriptor is not enough). The `child` handler
/// replaces each registered range with private anonymous memory of the same size, so the
/// address stays valid in the child (the inherited writer is never used there) and the file is
/// released.
#[derive(Debug)]
pub struct ReplacedInChild(u64);

/// Registers the mapping of `len` bytes at `addr` (see [`ReplacedInChild`]).
pub fn replace_in_child(addr: *const u8, len: usize) -> ReplacedInChild {
    install();
    let mut cleanup = CHILD_CLEANUP.lock_unpoisoned();
    let id = cleanup.next_mapping;
    cleanup.next_mapping += 1;
    cleanup.mappings.push((id, addr as usize, len));
    ReplacedInChild(id)
}

impl Drop for ReplacedInChild {
    fn drop(&mut self) {
        CHILD_CLEANUP
            .lock_unpoisoned()
            .mappings
            .retain(|&(id, ..)| id != self.0);
    }
}

/// The device and inode of the file `fd` is open on (`fstat` is async-signal-safe).
fn identity(fd: RawFd) -> Option<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `stat` into the buffer, which is large enough; a bad descriptor is
    // an error return, not undefined behaviour.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it initialised the buffer.
    let st = unsafe { st.assume_init() };
    Some((st.st_dev, st.st_ino))
}

extern "C" fn prepare() {
    // A plug-in's locks come first in the order (`LockOrder::Plugin`): they are taken before any
    // of this library's.
    run_plugin_handlers(0);
    // A panic must not unwind into libc: a lock that cannot be taken is simply not held.
    let _ = std::panic::catch_unwind(|| {
        // The registry is copied out first: it is itself held later, at its place.
        let mut locks = REGISTERED.lock_unpoisoned().clone();
        locks.push((LockOrder::ForkRegistry, &REGISTERED));
        locks.push((LockOrder::ForkRegistry, &CHILD_CLEANUP));
        locks.sort_by_key(|(order, _)| *order);
        let mut guards: Vec<Box<dyn Any>> = Vec::with_capacity(locks.len());
        for (_, lock) in locks {
            guards.push(lock.hold());
        }
        let _ = HELD.try_with(|held| held.borrow_mut().append(&mut guards));
    });
}

/// Releases what `prepare` took, in the reverse order.
fn release_held() {
    let _ = std::panic::catch_unwind(|| {
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            while held.pop().is_some() {}
        });
    });
}

extern "C" fn parent() {
    release_held();
    run_plugin_handlers(1);
}

extern "C" fn child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    REFUSAL_LOGGED.store(false, Ordering::Relaxed);
    let _ = std::panic::catch_unwind(clean_up_child);
    release_held();
    run_plugin_handlers(2);
}

/// Puts `/dev/null` over every registered descriptor that is still the file it was, and
/// anonymous memory over every registered mapping (in the child, before the held locks are
/// released: the registry is read through its guard, which `prepare` took).
fn clean_up_child() {
    let _ = HELD.try_with(|held| {
        let held = held.borrow();
        let Some(cleanup) = held
            .iter()
            .find_map(|g| g.downcast_ref::<MutexGuard<'static, ChildCleanup>>())
        else {
            return;
        };
        for &(_, addr, len) in &cleanup.mappings {
            // SAFETY: the range is a live mapping of this process (registered while mapped,
            // unregistered before unmapped); MAP_FIXED replaces it atomically with zeroed
            // private memory, which the inherited writer (never used in the child) may keep
            // pointing at.
            unsafe {
                libc::mmap(
                    addr as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
        }
        if cleanup.fds.is_empty() {
            return;
        }
        // SAFETY: a NUL-terminated path; open returns a new descriptor or -1.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if null < 0 {
            return;
        }
        for &(fd, dev, ino) in &cleanup.fds {
            if fd != null && identity(fd) == Some((dev, ino)) {
                // SAFETY: both are open descriptors of this process; dup3 closes `fd`'s file
                // (dropping this process's share of its lock or socket) and makes `fd` refer to
                // /dev/null, so the number stays taken.
                unsafe { libc::dup3(null, fd, libc::O_CLOEXEC) };
            }
        }
        // SAFETY: `null` is the descriptor opened above, no longer used.
        unsafe { libc::close(null) };
    });
}
