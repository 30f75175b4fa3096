//! Surviving a shared mapping whose file shrinks under it.
//!
//! A ring file is mapped shared by its writer (inside the agent) and its readers, and a
//! `prometheus_mp` store by its writer and the process serving the node. If any process
//! truncates such a file (`truncate`, `: > file`), touching the mapping past the new end raises
//! SIGBUS, which by default kills the process: an inference server must not die because a
//! telemetry file was truncated. So every such mapping is registered here, and a SIGBUS handler
//! (installed once, with the previous handler kept and called for every fault that is not
//! ours) maps anonymous zero pages over the rest of a registered mapping when the fault lies in
//! it: the access completes (a write goes nowhere, a read sees zeros) and the mapping is flagged,
//! so its owner notices, discards what it read or wrote, and reports or recovers.
//!
//! A host may install its own SIGBUS handler after ours (Python's `faulthandler.enable()`,
//! pytest, a crash reporter), which takes the protection away until [`reassert`] puts ours
//! back on top: the ring writer calls it before every flush that writes (one `sigaction`
//! call), and readers when they open a ring. The host's handler then becomes the one faults
//! that are not ours are passed to. Should that handler return without resolving a fault
//! (the same address faults 100 times in a row on the same thread), the default action is
//! restored, so a fault that is not ours ends the process as it would have without us, never
//! in an endless loop.
//!
//! A plug-in's copy of this crate (the `prometheus_mp` plug-in guards its stores) installs its
//! own handler the first time it guards a mapping, on top of the host's, and passes every fault
//! that is not in one of its mappings on to it, as it does to any host handler.
//!
//! Limits: the table holds [`MAX_GUARDED`] mappings (more are mapped unguarded, with one
//! warning); between a host replacing our handler and the next [`reassert`], and for a file
//! truncated in the middle of a flush's writes, a fault goes to the host's handler.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

use crate::sync::LockUnpoisoned;

/// Most mappings guarded at once.
pub const MAX_GUARDED: usize = 256;

/// One registered mapping: `[start, end)`, `end == 0` when the entry is free.
struct Region {
    used: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Region = Region {
    used: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};

static REGIONS: [Region; MAX_GUARDED] = [FREE; MAX_GUARDED];
static INSTALL: Once = Once::new();
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(4096);
static WARNED_FULL: AtomicBool = AtomicBool::new(false);

/// The SIGBUS action that was in place before ours, written once before ours is installed.
struct Previous(UnsafeCell<MaybeUninit<libc::sigaction>>);

// SAFETY: written once, inside `INSTALL.call_once`, before the handler that reads it is
// installed (sigaction is a full barrier for the handler's view); read-only afterwards.
unsafe impl Sync for Previous {}

static PREVIOUS: Previous = Previous(UnsafeCell::new(MaybeUninit::uninit()));

/// A registered mapping; unregistered when dropped (drop it before unmapping).
pub struct FaultGuard {
    region: Option<&'static Region>,
}

impl FaultGuard {
    /// Guards the mapping of `len` bytes at `start` (installing the handler on first use).
    pub fn new(start: *const u8, len: usize) -> FaultGuard {
        install();
        let free = REGIONS.iter().find(|r| {
            r.used
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        });
        let Some(region) = free else {
            if !WARNED_FULL.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "more than {MAX_GUARDED} telemetry files (rings, stores) are mapped: the \
                     newest are not protected against a file truncated under them"
                );
            }
            return FaultGuard { region: None };
        };
        region.faulted.store(false, Ordering::Relaxed);
        region.start.store(start as usize, Ordering::Relaxed);
        region
            .end
            .store(start as usize + len.max(1), Ordering::Release);
        FaultGuard {
            region: Some(region),
        }
    }

    /// Whether an access to the mapping faulted (its file shrank) since it was guarded.
    pub fn faulted(&self) -> bool {
        self.region
            .is_some_and(|r| r.faulted.load(Ordering::Acquire))
    }
}

impl Drop for FaultGuard {
    fn drop(&mut self) {
        if let Some(region) = self.region {
            region.end.store(0, Ordering::Release);
            region.start.store(0, Ordering::Relaxed);
            region.used.store(false, Ordering::Release);
        }
    }
}

/// Our SIGBUS action.
fn our_action() -> libc::sigaction {
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) = on_sigbus;
    action.sa_sigaction = handler as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: `sa_mask` is a valid sigset_t to initialise.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    action
}

/// Whether `action` is ours.
fn is_ours(action: &libc::sigaction) -> bool {
    let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) = on_sigbus;
    action.sa_sigaction == handler as usize
}

fn install() {
    INSTALL.call_once(|| {
        crate::fork::hold_across_fork(crate::fork::LockOrder::RingSignalHandler, &REASSERT);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE_SIZE.store(page as usize, Ordering::Relaxed);
        }
        let action = our_action();
        // SAFETY: `action` is our handler with the SA_SIGINFO signature; PREVIOUS is written
        // here, before the handler can run (and later only by `reassert`, while it is not
        // installed).
        unsafe {
            let previous = (*PREVIOUS.0.get()).as_mut_ptr();
            if libc::sigaction(libc::SIGBUS, &action, previous) != 0 {
                log::warn!(
                    "cannot install the SIGBUS handler that protects telemetry rings against \
                     truncated files: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    });
}

/// Puts our SIGBUS handler back on top if the host replaced it since (see the module
/// documentation); the host's handler is kept as the one other faults go to. One `sigaction`
/// call when nothing changed.
pub fn reassert() {
    install();
    static TOLD: AtomicBool = AtomicBool::new(false);
    if reassert_locked() && !TOLD.swap(true, Ordering::Relaxed) {
        log::info!(
            "the host replaced the SIGBUS handler that protects telemetry rings against \
             truncated files; it is back, and passes other faults to the host's"
        );
    }
}

/// Serialises [`reassert`]; held across `fork` ([`crate::fork`]), so a child never finds it
/// taken by a thread it does not have.
static REASSERT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`reassert`] under its lock; whether our handler had to be put back.
fn reassert_locked() -> bool {
    /// The current SIGBUS action, unless ours is installed (or it cannot be read).
    fn replaced() -> Option<libc::sigaction> {
        // SAFETY: an all-zero sigaction is valid to be filled by sigaction(2), which only reads
        // the current action here (a null new action).
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let read = unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut current) };
        (read == 0 && !is_ours(&current)).then_some(current)
    }
    // The common case, ours on top, takes no lock.
    if replaced().is_none() {
        return false;
    }
    let _serial = REASSERT.lock_unpoisoned();
    let Some(current) = replaced() else {
        return false;
    };
    let action = our_action();
    // SAFETY: our handler is not installed (`current` is another one), so it does not read
    // PREVIOUS now; it is written before ours is installed again. Calls are serialised.
    unsafe {
        (*PREVIOUS.0.get()).write(current);
        let mut replaced: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &action, &mut replaced) != 0 {
            return false;
        }
        if !is_ours(&replaced) && replaced.sa_sigaction != current.sa_sigaction {
            // Changed again between the two calls: pass faults to the newest.
            (*PREVIOUS.0.get()).write(replaced);
        }
    }
    true
}

/// The SIGBUS handler: maps zero pages over a registered mapping that faulted, else passes the
/// signal on. Only async-signal-safe work: atomics and system calls.
extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for region in REGIONS.iter() {
        let end = region.end.load(Ordering::Acquire);
        let start = region.start.load(Ordering::Relaxed);
        if end == 0 || addr < start || addr >= end {
            continue;
        }
        let from = addr & !(PAGE_SIZE.load(Ordering::Relaxed) - 1);
        // SAFETY: the range lies inside a mapping this process made and still owns (it is
        // unregistered before being unmapped); MAP_FIXED replaces those pages only.
        let mapped = unsafe {
            libc::mmap(
                from as *mut c_void,
                end - from,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if mapped != libc::MAP_FAILED {
            region.faulted.store(true, Ordering::Release);
            return;
        }
    }
    // SAFETY: PREVIOUS was filled before this handler was installed.
    unsafe { pass_on(signal, info, context, addr) }
}

/// How many times in a row the same fault may be passed on before the default action ends it.
const MAX_REPEATED_PASS: u32 = 100;

std::thread_local! {
    /// The address of the last fault this thread passed on and how many times in a row, to
    /// notice a previous handler that returns without resolving it (a const-initialised
    /// `Cell`: no lazy initialisation, so it can be used in a signal handler).
    static PASSED_ON: std::cell::Cell<(usize, u32)> = const { std::cell::Cell::new((0, 0)) };
}

/// Gives a SIGBUS that is not ours to the handler that was installed before ours, or to the
/// default action (which ends the process, as it would have without us).
///
/// # Safety
/// Called from the signal handler with its arguments, after PREVIOUS was filled.
unsafe fn pass_on(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut c_void,
    addr: usize,
) {
    // SAFETY: filled by `install` before the handler was installed (the caller's contract).
    let previous = unsafe { (*PREVIOUS.0.get()).assume_init_ref() };
    let handler = previous.sa_sigaction;
    // The same fault again and again after passing it on: the previous handler returns without
    // resolving it. End as the default action would rather than loop.
    let repeats = PASSED_ON.with(|p| {
        let (last, n) = p.get();
        let n = if last == addr { n + 1 } else { 0 };
        p.set((addr, n));
        n
    });
    let again = addr != 0 && repeats >= MAX_REPEATED_PASS;
    if again || handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: restoring the default action, then raising the signal again (a fault
        // re-executes and raises it anyway; a signal sent by kill is raised here).
        unsafe {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &default, std::ptr::null_mut());
            if (*info).si_code <= 0 {
                libc::raise(signal);
            }
        }
    } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: an SA_SIGINFO handler has this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(handler) };
        f(signal, info, context);
    } else {
        // SAFETY: a plain handler has this signature.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(signal);
    }
}
