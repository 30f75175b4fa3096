//! The staging protocol's synchronisation primitives, from one place: the standard library's in
//! a normal build, loom's under `--cfg loom` (`tests/loom_staging.rs`, a concurrency model check
//! of the protocol: every interleaving of a few threads, and every value a relaxed or acquire
//! load may return under the C++ memory model). Nothing here costs anything in a normal build:
//! the types are the standard ones and the cell accesses are inlined to plain pointers.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};

pub(crate) use std::sync::atomic::Ordering;

/// Signals a busy-wait (under loom, lets another thread run: a spin that waits on another
/// thread would otherwise never end).
#[inline(always)]
pub(crate) fn spin_loop() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::hint::spin_loop();
}

/// Gives the processor to another thread.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(not(loom))]
    std::thread::yield_now();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// A cell whose value is reached through raw pointers; under loom every access is checked
/// against the others (a write not ordered with another access is reported as a data race).
pub(crate) struct UnsafeCell<T> {
    #[cfg(not(loom))]
    value: std::cell::UnsafeCell<T>,
    #[cfg(loom)]
    value: loom::cell::UnsafeCell<T>,
}

impl<T> UnsafeCell<T> {
    /// A cell holding `value`.
    pub(crate) fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell {
            #[cfg(not(loom))]
            value: std::cell::UnsafeCell::new(value),
            #[cfg(loom)]
            value: loom::cell::UnsafeCell::new(value),
        }
    }

    /// Runs `f` with a pointer for reading the value (under loom: one checked read).
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(not(loom))]
        return f(self.value.get());
        #[cfg(loom)]
        return self.value.with(f);
    }

    /// Runs `f` with a pointer for writing the value (under loom: one checked write).
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(not(loom))]
        return f(self.value.get());
        #[cfg(loom)]
        return self.value.with_mut(f);
    }
}
