//! [`Slot`]: how a Python object holds a library handle that it can close from any thread, and
//! abandon in a child created by `fork`.

use nixl_telemetry_base::sync::RwLockUnpoisoned;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

/// A handle that is open (`Some`), disabled or closed (`None`), or abandoned.
///
/// Calls read-lock it and run concurrently; only taking the handle out (to close it)
/// write-locks it. An abandoned slot (in a forked child, where the handle's background thread
/// does not exist and its lock may have been copied while held) is never locked, used, closed
/// or dropped again: its handle is leaked.
pub struct Slot<T> {
    handle: RwLock<Option<T>>,
    abandoned: AtomicBool,
}

impl<T> Slot<T> {
    /// A slot holding `handle` (None for a disabled one).
    pub fn new(handle: Option<T>) -> Slot<T> {
        Slot {
            handle: RwLock::new(handle),
            abandoned: AtomicBool::new(false),
        }
    }

    /// Runs `f` on the handle; None when there is none or the slot is abandoned.
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        if self.abandoned.load(Ordering::Relaxed) {
            return None;
        }
        let handle = self.handle.read_unpoisoned();
        handle.as_ref().map(f)
    }

    /// Takes the handle out (to close it): later calls find none. Waits for the calls in
    /// progress, so run it without holding the interpreter.
    pub fn take(&self) -> Option<T> {
        if self.abandoned.load(Ordering::Relaxed) {
            return None;
        }
        self.handle.write_unpoisoned().take()
    }

    /// Gives the handle up for good, without touching it (see the type's documentation).
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }
}

impl<T> Drop for Slot<T> {
    fn drop(&mut self) {
        if *self.abandoned.get_mut() {
            let handle = self.handle.get_mut().unwrap_or_else(|e| e.into_inner());
            std::mem::forget(handle.take());
        }
    }
}
