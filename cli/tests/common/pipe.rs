//! A pipe whose reader takes a known number of bytes and then closes it, as `| head` does, but
//! knowing exactly which bytes it took.

/// What the reader of [`read_then_close`] took, and the command's stderr.
pub struct Taken {
    /// The bytes the reader read before closing the pipe, in order.
    pub read: Vec<u8>,
    /// The command's stderr.
    pub stderr: String,
}

/// A pipe that holds one page: a small ring's output does not fit in it, so the command is
/// still writing when its reader closes it.
pub const ONE_PAGE: usize = 4096;

/// A pipe of Linux's default size (64 KiB): a few hundred events' output fits in it whole, so
/// the command has written everything before its reader has read much (as `read | head -5`).
pub const DEFAULT_SIZE: usize = 65536;

/// Runs `nixl-telemetry ARGS` with its stdout into a pipe holding `pipe_size` bytes, reads
/// exactly `bytes` bytes of it (or all it writes, if fewer: `usize::MAX` drains it), waits until
/// the command has written `held` more bytes into the pipe (that nobody will read), closes the
/// read end, checks that the command exits 0 (all within 120 s), and returns what was read. The
/// command holds the only write end, so it sees the close as it would see `head` exit.
pub fn read_then_close(
    bytes: usize,
    held: usize,
    pipe_size: usize,
    args: &[&std::ffi::OsStr],
) -> Taken {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let (mut reader, writer) = std::io::pipe().unwrap();
    let size = libc::c_int::try_from(pipe_size).unwrap();
    // SAFETY: F_SETPIPE_SZ takes an integer argument and touches no memory of this process;
    // `writer` owns the descriptor for the duration of the call.
    let set = unsafe { libc::fcntl(writer.as_raw_fd(), libc::F_SETPIPE_SZ, size) };
    assert_eq!(set, size);
    let mut child = {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_nixl-telemetry"));
        command
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(writer)
            .stderr(std::process::Stdio::piped());
        // Dropped at the end of this block: the test's write end with it.
        command.spawn().unwrap()
    };
    let mut read = Vec::new();
    let mut buf = vec![0u8; 65536];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while read.len() < bytes {
        assert!(std::time::Instant::now() < deadline, "timed out reading");
        let mut fd = libc::pollfd {
            fd: reader.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `fd` is one valid pollfd, alive for the call, naming a descriptor `reader`
        // owns.
        assert!(unsafe { libc::poll(&mut fd, 1, 100) } >= 0);
        if fd.revents == 0 {
            continue;
        }
        // Readable (or at its end): the read does not wait.
        let want = buf.len().min(bytes - read.len());
        match reader.read(&mut buf[..want]).unwrap() {
            0 => break,
            n => read.extend_from_slice(&buf[..n]),
        }
    }
    while in_pipe(&reader) < held {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for output"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    drop(reader);
    // It exits once it sees the pipe closed; one that never does fails the test.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the command did not exit after its output was closed");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    Taken { read, stderr }
}

/// How many bytes `pipe` holds, not read yet.
fn in_pipe(pipe: &std::io::PipeReader) -> usize {
    use std::os::fd::AsRawFd;
    let mut bytes: libc::c_int = 0;
    // SAFETY: FIONREAD stores one c_int through the pointer, which points at `bytes`, alive for
    // the call; `pipe` owns the descriptor.
    let done = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut bytes) };
    assert_eq!(done, 0);
    usize::try_from(bytes).unwrap()
}
