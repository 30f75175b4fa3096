//! A pipe closed early by its reader, as `| head` closes it, that still tells the test every
//! byte the command wrote into it.

/// The pipe of `nixl-telemetry read ring | head`, which a test reads and closes early as
/// `head` does, but exactly: it is a FIFO of which the test keeps a write end open, so what the
/// command wrote into it that the test did not read stays in it (a pipe's data is discarded only
/// when every descriptor of it is closed) and is read once the command has exited. The test so
/// knows every byte the command wrote. The pipe holds one page, so that even a small ring's
/// output does not fit in it.
pub struct ClosedEarly {
    /// Every byte the command wrote into the pipe.
    pub written: Vec<u8>,
    /// The command's stderr.
    pub stderr: String,
}

/// Makes the pipe of `file` hold one page.
fn hold_one_page(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: F_SETPIPE_SZ takes an integer argument and touches no memory of this process;
    // `file` owns the descriptor for the duration of the call.
    assert!(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) } >= 0);
}

/// Runs `nixl-telemetry ARGS` into a pipe, reads at least `lines` lines of it (or all it writes,
/// if fewer), closes it, checks that the command exits 0, and returns what it wrote.
pub fn closed_after(lines: usize, args: &[&std::ffi::OsStr]) -> ClosedEarly {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    let scratch = tempfile::tempdir().unwrap();
    let fifo = scratch.path().join("pipe");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path that `c_path` owns for the whole call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // Non-blocking, so the open does not wait for a writer; reads then wait in poll(2).
    let open_reader = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap()
    };
    let mut reader = open_reader();
    let keeper = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    hold_one_page(&keeper);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nixl-telemetry"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(keeper.try_clone().unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut written = Vec::new();
    let mut buf = [0u8; 512];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut newlines = 0;
    while newlines < lines {
        assert!(std::time::Instant::now() < deadline, "timed out reading");
        let mut fd = libc::pollfd {
            fd: reader.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `fd` is one valid pollfd, alive for the call, naming a descriptor `reader`
        // owns.
        assert!(unsafe { libc::poll(&mut fd, 1, 100) } >= 0);
        match reader.read(&mut buf) {
            Ok(n) => {
                newlines += buf[..n].iter().filter(|&&b| b == b'\n').count();
                written.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    drop(reader);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // What the command wrote and nobody read is still in the pipe: the test's write end kept it.
    reader = open_reader();
    loop {
        match reader.read(&mut buf) {
            Ok(n) => written.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    drop(keeper);
    ClosedEarly { written, stderr }
}
