//! The standard output of `read`: written unbuffered, so that it knows how many bytes the
//! output accepted, and, when it is a pipe, watched until its reader has taken them, so that
//! it knows how many its reader saw.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// The process's standard output without the buffering of `std::io::stdout`: every write is
/// one `write(2)`, so a command knows how much the output accepted (see [`Stdout::write_counting`]);
/// on a pipe, [`Stdout::wait_taken`] says how much of it its reader took.
pub struct Stdout {
    file: std::fs::File,
    /// Whether it is a pipe (or FIFO) on Linux, whose reader [`Stdout::wait_taken`] watches.
    pipe: bool,
}

/// What the reader of a pipe left of the bytes written into it, once [`Stdout::wait_taken`]
/// stopped waiting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unread {
    /// How many bytes were still in the pipe: the last ones written, which the reader never
    /// took (0 when it took them all, and for an output that is not a pipe).
    pub bytes: usize,
    /// Whether the reader had closed the pipe (`head` exited): no more will be taken.
    pub closed: bool,
}

/// The longest nap between two looks at how much a pipe still holds. A closed pipe wakes the
/// wait at once; only a reader that is still reading is looked at this often.
const MAX_NAP: Duration = Duration::from_millis(20);

impl Stdout {
    /// The process's standard output (a new descriptor of it).
    pub fn open() -> std::io::Result<Stdout> {
        use std::os::fd::AsFd;
        use std::os::unix::fs::FileTypeExt;
        let file: std::fs::File = std::io::stdout().as_fd().try_clone_to_owned()?.into();
        let pipe =
            cfg!(target_os = "linux") && file.metadata().is_ok_and(|m| m.file_type().is_fifo());
        Ok(Stdout { file, pipe })
    }

    /// Writes all of `bytes` as `write_all` does, and returns how many bytes the output accepted
    /// beside the outcome: when a write fails (a closed pipe), the bytes before it were
    /// accepted, those after it were not.
    pub fn write_counting(&mut self, bytes: &[u8]) -> (usize, std::io::Result<()>) {
        let mut accepted = 0;
        while accepted < bytes.len() {
            match self.file.write(&bytes[accepted..]) {
                Ok(0) => return (accepted, Err(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => accepted += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return (accepted, Err(e)),
            }
        }
        (accepted, Ok(()))
    }

    /// Waits until the reader of this pipe has taken every byte written into it, or has closed
    /// it, or `stop()` says to give up (Ctrl+C while following), and says how many bytes it left
    /// unread: the last ones written, which nobody saw. Like a write into a full pipe, the wait
    /// lasts as long as the reader takes. An output that is not a pipe took what it accepted:
    /// nothing is unread, at once.
    ///
    /// The pipe's write end wakes `poll(2)` at once when its last reader closes it (POLLERR);
    /// nothing wakes it when the reader empties it, so how much it holds (`FIONREAD`) is looked
    /// at again after naps of 1 ms, growing to 20 ms while the reader is slow.
    pub fn wait_taken(&self, stop: impl Fn() -> bool) -> Unread {
        let mut unread = Unread::default();
        if !self.pipe {
            return unread;
        }
        let mut nap = Duration::ZERO;
        loop {
            let mut watched = libc::pollfd {
                fd: self.file.as_raw_fd(),
                // Nothing asked for: only POLLERR (no reader left), always reported, ends it.
                events: 0,
                revents: 0,
            };
            // SAFETY: `watched` is one valid pollfd, alive for the call, naming a descriptor
            // `self.file` owns. An error (EINTR: Ctrl+C) is another look, as a timeout is.
            unsafe { libc::poll(&mut watched, 1, nap.as_millis() as libc::c_int) };
            // Read after the poll: once the reader is gone, what it left is final.
            unread.closed = watched.revents & libc::POLLERR != 0;
            unread.bytes = self.in_pipe();
            if unread.closed || unread.bytes == 0 || stop() {
                return unread;
            }
            nap = (nap * 2).clamp(Duration::from_millis(1), MAX_NAP);
        }
    }

    /// How many bytes the pipe holds that its reader has not taken (`FIONREAD` on the write
    /// end counts them as on the read end).
    fn in_pipe(&self) -> usize {
        let mut bytes: libc::c_int = 0;
        // SAFETY: FIONREAD stores one c_int through the pointer, which points at `bytes`, alive
        // for the call; `self.file` owns the descriptor.
        let done = unsafe { libc::ioctl(self.file.as_raw_fd(), libc::FIONREAD, &mut bytes) };
        // It does not fail on a pipe; if it did, what was accepted counts as taken (as on a file).
        if done < 0 {
            0
        } else {
            bytes as usize
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.file.write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}
