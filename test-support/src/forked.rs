//! A child process made by `fork(2)` from a test: it runs a closure and exits with its
//! result, talking to the parent through two pipes (the child says it is ready, the parent
//! says when it may go on). The parent waits for it with a deadline: a child that hangs is
//! killed and fails the test. A child still running when its [`Forked`] is dropped is killed.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The child's side of the pipes.
pub struct ChildSide {
    to_parent: std::fs::File,
    from_parent: std::fs::File,
}

impl ChildSide {
    /// Tells the parent the child is ready ([`Forked::wait_ready`]).
    pub fn ready(&mut self) {
        self.to_parent.write_all(b"r").unwrap();
    }

    /// Waits until the parent lets the child go on ([`Forked::release`]), or the parent is
    /// gone.
    pub fn wait_for_parent(&mut self) {
        let mut byte = [0u8; 1];
        let _ = self.from_parent.read(&mut byte);
    }
}

/// A forked child, seen from the parent.
pub struct Forked {
    pid: libc::pid_t,
    from_child: std::fs::File,
    to_child: Option<std::fs::File>,
    exited: bool,
}

fn pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array on success.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    (r.into(), w.into())
}

/// Forks; the child runs `body` and exits with the code it returns (a panic is reported on
/// stderr and exits with 101), never returning from this call.
pub fn fork(body: impl FnOnce(&mut ChildSide) -> i32) -> Forked {
    let (from_child, to_parent) = pipe();
    let (from_parent, to_child) = pipe();
    // SAFETY: fork has no preconditions; the child only runs `body` and exits with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        drop((from_child, to_child));
        let mut side = ChildSide {
            to_parent,
            from_parent,
        };
        let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut side)))
        {
            Ok(code) => code,
            Err(payload) => {
                let text = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let line = format!("forked child {} panicked: {text}\n", std::process::id());
                // SAFETY: writes the bytes of `line` to the standard error descriptor (the
                // test harness's capture of this thread's output stays in the parent).
                unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
                101
            }
        };
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    Forked {
        pid,
        from_child,
        to_child: Some(to_child),
        exited: false,
    }
}

impl Forked {
    /// The child's process id.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits (at most `limit`) until the child calls [`ChildSide::ready`]; panics when it
    /// exits or hangs first.
    pub fn wait_ready(&mut self, limit: Duration) {
        let mut poll = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&self.from_child),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut poll, 1, limit.as_millis() as i32) };
        assert!(
            n == 1,
            "forked child {} not ready within {limit:?}",
            self.pid
        );
        let mut byte = [0u8; 1];
        assert_eq!(
            self.from_child.read(&mut byte).unwrap(),
            1,
            "forked child {} exited before it was ready",
            self.pid
        );
    }

    /// Lets the child go on from [`ChildSide::wait_for_parent`].
    pub fn release(&mut self) {
        drop(self.to_child.take());
    }

    /// Waits (at most `limit`) for the child to exit and returns its exit code; a child still
    /// running then is killed and the test fails ("hung").
    pub fn wait(&mut self, limit: Duration) -> i32 {
        self.release();
        let deadline = Instant::now() + limit;
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child without blocking.
            let w = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            assert!(w == 0 || w == self.pid, "waitpid failed");
            if w == self.pid {
                self.exited = true;
                assert!(
                    libc::WIFEXITED(status),
                    "forked child {} was killed",
                    self.pid
                );
                return libc::WEXITSTATUS(status);
            }
            if Instant::now() > deadline {
                self.kill();
                panic!("forked child {} hung (killed after {limit:?})", self.pid);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Kills the child (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if !self.exited {
            self.exited = true;
            // SAFETY: signals and reaps our own child.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        self.kill();
    }
}
