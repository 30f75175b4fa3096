//! Mutexes and read-write locks that outlive a panic of their holder.
//!
//! A panic inside this library is caught where it would cross into foreign code (the C entry
//! points, a plug-in's calls, the background workers) and reported; the state every mutex here
//! guards (caches, counters, handles, buffered rows) is updated by single assignments and stays
//! usable at every point a panic can happen. A poisoned mutex therefore means "a holder
//! panicked and that was reported", not "the data is broken", and
//! [`LockUnpoisoned::lock_unpoisoned`] takes the lock whatever a panicking thread left in it, so
//! one caught panic never turns every later call into a second one.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locking that ignores poisoning (see the module documentation).
pub trait LockUnpoisoned<T: ?Sized> {
    /// Locks the mutex, blocking until it is free, whether or not a holder panicked.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockUnpoisoned<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Read and write locking that ignores poisoning (see the module documentation).
pub trait RwLockUnpoisoned<T: ?Sized> {
    /// Locks for reading, whether or not a writer panicked.
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    /// Locks for writing, whether or not a writer panicked.
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockUnpoisoned<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mutex_poisoned_by_a_panic_still_locks() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let mut g = held.lock().unwrap();
            *g = 2;
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*m.lock_unpoisoned(), 2);
        let rw = std::sync::Arc::new(RwLock::new(1));
        let held = rw.clone();
        let _ = std::thread::spawn(move || {
            let mut g = held.write().unwrap();
            *g = 3;
            panic!("poison it");
        })
        .join();
        assert!(rw.is_poisoned());
        assert_eq!(*rw.read_unpoisoned(), 3);
        *rw.write_unpoisoned() = 4;
        assert_eq!(*rw.read_unpoisoned(), 4);
    }
}
