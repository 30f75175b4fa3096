//! The terminal handling of `top`: the full-screen state (raw keys, alternate screen, hidden
//! cursor, restored on drop), drawing a frame in place, and waiting for the next frame while
//! watching for `q` or Ctrl+C. Plain ANSI escapes and termios, no terminal library.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::output;

/// The terminal, in the state a full-screen view needs: keys read one at a time without echo
/// (Ctrl+C still raises SIGINT), the alternate screen and a hidden cursor; restored on drop.
pub(super) struct Screen {
    saved: Option<libc::termios>,
}

/// Whether `fd` is a terminal.
pub(super) fn is_tty(fd: libc::c_int) -> bool {
    // SAFETY: isatty takes a file descriptor and touches no memory of ours.
    unsafe { libc::isatty(fd) == 1 }
}

impl Screen {
    /// Puts the terminal in the full-screen state.
    pub(super) fn enter() -> Screen {
        let mut saved = None;
        if is_tty(0) {
            let mut t = std::mem::MaybeUninit::<libc::termios>::uninit();
            // SAFETY: tcgetattr writes a termios into the pointer it is given, which points to
            // storage of that type; it is read only when the call succeeded.
            if unsafe { libc::tcgetattr(0, t.as_mut_ptr()) } == 0 {
                // SAFETY: initialised by the successful tcgetattr above.
                let original = unsafe { t.assume_init() };
                let mut raw = original;
                raw.c_lflag &= !(libc::ICANON | libc::ECHO);
                raw.c_cc[libc::VMIN] = 0;
                raw.c_cc[libc::VTIME] = 0;
                // SAFETY: a valid termios for the terminal on fd 0.
                if unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) } == 0 {
                    saved = Some(original);
                }
            }
        }
        print!("\x1b[?1049h\x1b[?25l");
        let _ = std::io::stdout().flush();
        Screen { saved }
    }

    /// The terminal's size (columns, rows), if known.
    pub(super) fn size() -> Option<(usize, usize)> {
        let mut ws = std::mem::MaybeUninit::<libc::winsize>::zeroed();
        // SAFETY: TIOCGWINSZ writes a winsize into the pointer, which points to one.
        let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, ws.as_mut_ptr()) } == 0;
        // SAFETY: zero-initialised, and filled in when the call succeeded.
        let ws = unsafe { ws.assume_init() };
        (ok && ws.ws_col > 0).then_some((ws.ws_col as usize, ws.ws_row as usize))
    }

    /// Draws `lines` from the top left, cut to the terminal's size.
    pub(super) fn draw(&self, lines: &[String]) -> std::io::Result<()> {
        let (cols, rows) = Screen::size().unwrap_or((usize::MAX, usize::MAX));
        let mut text = String::from("\x1b[H");
        for line in lines.iter().take(rows.max(1)) {
            text.extend(line.chars().take(cols));
            text.push_str("\x1b[K\r\n");
        }
        text.push_str("\x1b[J");
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        out.write_all(text.as_bytes())?;
        out.flush()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        print!("\x1b[?25h\x1b[?1049l");
        let _ = std::io::stdout().flush();
        if let Some(t) = &self.saved {
            // SAFETY: restores the termios read by `enter` on the same terminal.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, t) };
        }
    }
}

/// Waits until `deadline`, calling `tick` about every 50 ms; returns true when the user asked
/// to quit (q, or Ctrl+C).
pub(super) fn wait_for_quit(deadline: Instant, keys: &mut bool, mut tick: impl FnMut()) -> bool {
    loop {
        tick();
        if output::interrupted() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let slice = (deadline - now).min(Duration::from_millis(50));
        if !*keys {
            std::thread::sleep(slice);
            continue;
        }
        let mut fd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the duration of the call.
        let ready = unsafe { libc::poll(&mut fd, 1, slice.as_millis() as libc::c_int) };
        if ready <= 0 {
            continue; // timeout, or EINTR (Ctrl+C: checked above)
        }
        let mut buf = [0u8; 64];
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            *keys = false; // end of input: no keys will come
            continue;
        }
        if buf[..n as usize]
            .iter()
            .any(|&b| b == b'q' || b == b'Q' || b == 3)
        {
            return true;
        }
    }
}
