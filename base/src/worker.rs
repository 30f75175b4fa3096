//! The one helper that starts, wakes, stops and guards every background thread of the crate
//! (the collector's flush thread, the FPM trace writer, the `TRACE` exporter's flusher).
//!
//! A worker calls its step function repeatedly; each call returns how long to wait before the
//! next one. The panic policy is decided here, once: a panicking step is caught, reported with
//! one error message per worker (later panics are not logged again), and the worker carries on
//! with its next step after the same wait as the last successful one, so one bad batch never
//! silences a collector or a trace for good. Stopping wakes the worker at once and joins it;
//! whatever the owner still has to write after that (a final flush) it does on its own thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::panic_message;
use crate::fork::Generation;
use crate::sync::LockUnpoisoned;

#[derive(Default)]
struct Signals {
    stop: bool,
    woken: bool,
}

#[derive(Default)]
struct Control {
    signals: Mutex<Signals>,
    changed: Condvar,
}

impl Control {
    fn lock(&self) -> MutexGuard<'_, Signals> {
        self.signals.lock_unpoisoned()
    }

    /// Waits up to `wait`, or until woken or stopped; true when stopped.
    fn wait(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut signals = self.lock();
        loop {
            if signals.stop {
                return true;
            }
            let now = Instant::now();
            if signals.woken || now >= deadline {
                signals.woken = false;
                return false;
            }
            signals = self
                .changed
                .wait_timeout(signals, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Cuts a worker's current wait short (cheap to clone, usable from any thread).
#[derive(Clone)]
pub struct Waker(Arc<Control>);

impl Waker {
    /// Makes the worker run its next step now (or as soon as the current one ends).
    pub fn wake(&self) {
        self.0.lock().woken = true;
        self.0.changed.notify_one();
    }
}

/// A running background thread; stopped and joined when dropped.
pub struct Worker {
    control: Arc<Control>,
    thread: Option<JoinHandle<()>>,
    /// The fork generation of the process that started the thread.
    generation: Generation,
}

impl Worker {
    /// Starts the thread `name`: it waits `first_wait`, then calls `step` until stopped, waiting
    /// between two calls as long as the last call returned. `what` names the worker in the
    /// message about a panicking step.
    pub fn spawn(
        name: &str,
        what: String,
        first_wait: Duration,
        mut step: impl FnMut() -> Duration + Send + 'static,
    ) -> std::io::Result<Worker> {
        let control = Arc::new(Control::default());
        let own = control.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let mut wait = first_wait;
                let mut reported = false;
                while !own.wait(wait) {
                    match catch_unwind(AssertUnwindSafe(&mut step)) {
                        Ok(next) => wait = next,
                        Err(payload) if !reported => {
                            reported = true;
                            log::error!(
                                "{what} panicked: {}; it carries on (further panics are not \
                                 reported)",
                                panic_message(&*payload)
                            );
                        }
                        Err(_) => {}
                    }
                }
            })?;
        Ok(Worker {
            control,
            thread: Some(thread),
            generation: Generation::current(),
        })
    }

    /// A handle that wakes this worker.
    pub fn waker(&self) -> Waker {
        Waker(self.control.clone())
    }

    /// Stops the worker and waits for its current step to end. Idempotent. In a child created
    /// by `fork` after the worker started, its thread does not exist: nothing is stopped or
    /// joined (joining would wait forever), and nothing of it is released.
    pub fn stop(&mut self) {
        if self.generation.inherited() {
            std::mem::forget(self.thread.take());
            std::mem::forget(self.control.clone());
            return;
        }
        if let Some(thread) = self.thread.take() {
            self.control.lock().stop = true;
            self.control.changed.notify_all();
            let _ = thread.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn steps_until_stopped_and_survives_a_panic() {
        let calls = Arc::new(AtomicU32::new(0));
        let seen = calls.clone();
        let mut w = Worker::spawn("t", "test worker".into(), Duration::ZERO, move || {
            if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("first step");
            }
            Duration::from_millis(1)
        })
        .unwrap();
        // The first step panicked; the worker kept stepping.
        while calls.load(Ordering::SeqCst) < 5 {
            std::thread::sleep(Duration::from_millis(1));
        }
        w.stop();
        let after = calls.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), after, "no step after stop");
    }

    #[test]
    fn a_waker_cuts_a_long_wait_short() {
        let calls = Arc::new(AtomicU32::new(0));
        let seen = calls.clone();
        let mut w = Worker::spawn(
            "t",
            "test worker".into(),
            Duration::from_secs(3600),
            move || {
                seen.fetch_add(1, Ordering::SeqCst);
                Duration::from_secs(3600)
            },
        )
        .unwrap();
        w.waker().wake();
        let start = Instant::now();
        while calls.load(Ordering::SeqCst) == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "never woken");
            std::thread::sleep(Duration::from_millis(1));
        }
        w.stop();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
