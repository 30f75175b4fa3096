//! The one helper that starts, wakes, stops and guards every background thread (the core's
//! collector flush thread, the FPM trace writer, the `TRACE` exporter's flusher, and the push
//! exporters' push loop).
//!
//! A worker runs a [`Task`]: it calls the task's step repeatedly; each call returns how long to
//! wait before the next one. The panic policy is decided here, once: a panicking step is
//! caught, reported with one error message per worker (later panics are not logged again),
//! handed to the task ([`Task::panicked`], which may count it and choose the next wait; by
//! default the same wait as the last successful step), and the worker carries on, so one bad
//! batch never silences a collector, a trace or a push loop for good. Stopping wakes the worker
//! at once; the task then makes its last step ([`Task::finish`], under the same policy) on the
//! worker's thread, and the owner waits for the thread to end, for good ([`Worker::stop`]) or
//! at most a bounded time ([`Worker::stop_within`]). The thread marks its end even when it
//! unwinds, so an owner never waits out its bound for a thread that is gone.

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
    /// When the owner stops waiting for the last step (`None`: it waits for the end).
    deadline: Option<Instant>,
    /// The thread has ended (or unwound).
    ended: bool,
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

/// Marks the worker's thread as ended when dropped: when its function returns, and also when
/// it unwinds.
struct Ended(Arc<Control>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.lock().ended = true;
        self.0.changed.notify_all();
    }
}

/// What a worker runs on its thread.
pub trait Task: Send + 'static {
    /// One step; returns how long to wait before the next one.
    fn step(&mut self) -> Duration;

    /// Called after [`step`](Task::step) or [`finish`](Task::finish) panicked (the worker has
    /// already reported it): the task may count it and repair its state. Returns the wait
    /// before the next step (unused after `finish`); `wait` is the last wait a step asked
    /// for, the default.
    fn panicked(&mut self, wait: Duration) -> Duration {
        wait
    }

    /// The last step, called once on the worker's thread when it is stopped (a final push);
    /// `deadline`: when the owner stops waiting for it (`None`: the owner waits for the end).
    fn finish(&mut self, deadline: Option<Instant>) {
        let _ = deadline;
    }
}

/// A step function as a task (no last step).
struct Steps<F>(F);

impl<F: FnMut() -> Duration + Send + 'static> Task for Steps<F> {
    fn step(&mut self) -> Duration {
        (self.0)()
    }
}

/// Reports a panic of `what` unless one was reported already; `then` says what the worker does
/// next.
fn report(what: &str, payload: &(dyn std::any::Any + Send), reported: &mut bool, then: &str) {
    if !*reported {
        *reported = true;
        log::error!(
            "{what} panicked: {}; {then} (further panics are not reported)",
            panic_message(payload)
        );
    }
}

/// Cuts a worker's current wait short (cheap to clone, usable from any thread).
#[derive(Clone)]
pub struct Waker(Arc<Control>);

impl Waker {
    /// Makes the worker run its next step now (or as soon as the current one ends).
    pub fn wake(&self) {
        self.0.lock().woken = true;
        self.0.changed.notify_all();
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
        step: impl FnMut() -> Duration + Send + 'static,
    ) -> std::io::Result<Worker> {
        Worker::spawn_task(name, what, first_wait, Steps(step))
    }

    /// Starts the thread `name` running `task`: it waits `first_wait`, then calls its step until
    /// stopped, waiting between two calls as long as the last call returned (or
    /// [`Task::panicked`] after a panic), then its [`finish`](Task::finish). `what` names the
    /// worker in the message about a panic.
    pub fn spawn_task(
        name: &str,
        what: String,
        first_wait: Duration,
        mut task: impl Task,
    ) -> std::io::Result<Worker> {
        let control = Arc::new(Control::default());
        let own = control.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let _ended = Ended(own.clone());
                let mut wait = first_wait;
                let mut reported = false;
                while !own.wait(wait) {
                    match catch_unwind(AssertUnwindSafe(|| task.step())) {
                        Ok(next) => wait = next,
                        Err(payload) => {
                            report(&what, &*payload, &mut reported, "it carries on");
                            wait = catch_unwind(AssertUnwindSafe(|| task.panicked(wait)))
                                .unwrap_or(wait);
                        }
                    }
                }
                let deadline = own.lock().deadline;
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| task.finish(deadline))) {
                    report(&what, &*payload, &mut reported, "it was stopping: it ends");
                    let _ = catch_unwind(AssertUnwindSafe(|| task.panicked(wait)));
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

    /// Stops the worker and waits for its current step and its last step to end. Idempotent.
    /// In a child created by `fork` after the worker started, its thread does not exist:
    /// nothing is stopped or joined (joining would wait forever), and nothing of it is
    /// released.
    pub fn stop(&mut self) {
        self.stop_until(None);
    }

    /// Stops the worker and waits at most `timeout` for its current step and its last step
    /// (which is given the same deadline) to end. Returns whether the thread ended (or there
    /// was nothing to stop); if not, it is left to end on its own. Returns as soon as the
    /// thread ends, also when it ended early (it unwound). Idempotent; in a child created by
    /// `fork`, as [`stop`](Worker::stop).
    pub fn stop_within(&mut self, timeout: Duration) -> bool {
        self.stop_until(Some(Instant::now() + timeout))
    }

    fn stop_until(&mut self, deadline: Option<Instant>) -> bool {
        if self.generation.inherited() {
            std::mem::forget(self.thread.take());
            std::mem::forget(self.control.clone());
            return true;
        }
        let Some(thread) = self.thread.take() else {
            return true;
        };
        let mut signals = self.control.lock();
        signals.stop = true;
        signals.deadline = deadline;
        self.control.changed.notify_all();
        while !signals.ended {
            signals = match deadline {
                None => self
                    .control
                    .changed
                    .wait(signals)
                    .unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        // Left to end on its own: dropping the handle detaches the thread.
                        return false;
                    }
                    self.control
                        .changed
                        .wait_timeout(signals, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        drop(signals);
        let _ = thread.join();
        true
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

    /// A task that records what its worker did with it.
    #[derive(Default)]
    struct Recorder {
        steps: Arc<AtomicU32>,
        panics: Arc<AtomicU32>,
        finished: Arc<Mutex<Option<Option<Instant>>>>,
        /// `finish` waits for this before it ends.
        hold: Option<std::sync::mpsc::Receiver<()>>,
        panic_in_finish: bool,
    }

    impl Task for Recorder {
        fn step(&mut self) -> Duration {
            self.steps.fetch_add(1, Ordering::SeqCst);
            panic!("step");
        }
        fn panicked(&mut self, _wait: Duration) -> Duration {
            self.panics.fetch_add(1, Ordering::SeqCst);
            if self.panic_in_finish && self.finished.lock().unwrap().is_some() {
                panic!("panicked while finishing");
            }
            Duration::from_millis(1)
        }
        fn finish(&mut self, deadline: Option<Instant>) {
            *self.finished.lock().unwrap() = Some(deadline);
            if let Some(hold) = &self.hold {
                let _ = hold.recv();
            }
            if self.panic_in_finish {
                panic!("finish");
            }
        }
    }

    #[test]
    fn a_task_is_handed_its_panics_and_makes_its_last_step_with_the_deadline() {
        let task = Recorder::default();
        let (steps, panics, finished) = (
            task.steps.clone(),
            task.panics.clone(),
            task.finished.clone(),
        );
        let mut w = Worker::spawn_task("t", "test task".into(), Duration::ZERO, task).unwrap();
        // Every step panics; the worker goes on, with the wait the task chose.
        while panics.load(Ordering::SeqCst) < 3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let before = Instant::now();
        assert!(w.stop_within(Duration::from_secs(3600)));
        assert_eq!(steps.load(Ordering::SeqCst), panics.load(Ordering::SeqCst));
        let deadline = finished.lock().unwrap().expect("finish was called");
        assert!(deadline.expect("with a deadline") > before);
        assert!(w.stop_within(Duration::ZERO), "idempotent");
    }

    #[test]
    fn stop_within_leaves_a_last_step_that_outlasts_it() {
        let (release, hold) = std::sync::mpsc::channel();
        let task = Recorder {
            hold: Some(hold),
            ..Recorder::default()
        };
        let finished = task.finished.clone();
        let mut w =
            Worker::spawn_task("t", "test task".into(), Duration::from_secs(3600), task).unwrap();
        // `finish` cannot end before `release`: no time to wait means the thread is left.
        assert!(!w.stop_within(Duration::ZERO));
        // It still makes its last step, on its own.
        release.send(()).unwrap();
        let start = Instant::now();
        while finished.lock().unwrap().is_none() {
            assert!(start.elapsed() < Duration::from_secs(60), "no last step");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(w.stop_within(Duration::ZERO), "nothing left to stop");
    }

    #[test]
    fn a_panicking_last_step_does_not_hold_the_owner_up() {
        let task = Recorder {
            panic_in_finish: true,
            ..Recorder::default()
        };
        let panics = task.panics.clone();
        let mut w =
            Worker::spawn_task("t", "test task".into(), Duration::from_secs(3600), task).unwrap();
        // The owner would wait an hour for a thread that never marked its end.
        let (done, stopped) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(w.stop_within(Duration::from_secs(3600))));
        let ended = stopped
            .recv_timeout(Duration::from_secs(600))
            .expect("the owner waited for a thread that had ended");
        assert!(ended);
        // `finish` panicked and was handed to `panicked`, which panicked in turn.
        assert_eq!(panics.load(Ordering::SeqCst), 1);
    }
}
