//! A scripted HTTP receiver on 127.0.0.1 for the push exporters' tests: it records every
//! request (path, headers, body, arrival time) and answers as told ([`Answer`]), including not
//! at all. Keep-alive connections are served; each connection has its own thread. It can go
//! down (connections refused, open ones closed) and come back on the same port
//! ([`Receiver::go_down`], [`Receiver::come_back`]): a socket bound to the port and never
//! listening holds it meanwhile (`SO_REUSEPORT`), so no other process can take it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::sockets::reuseport_socket;

/// How the receiver answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// This status with this body (`204` for a plain accept).
    Status(u16, String),
    /// This status with `Retry-After: <seconds>`.
    RetryAfter(u16, u64),
    /// Read the request and never answer (the connection stays open).
    Never,
}

/// One request received.
#[derive(Clone, Debug)]
pub struct Request {
    /// The request target (`/api/v1/write`).
    pub path: String,
    /// Header names (lower case) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body as sent (still compressed).
    pub body: Vec<u8>,
    /// When it had arrived in full.
    pub at: Instant,
}

impl Request {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

struct State {
    answer: Answer,
    requests: Vec<Request>,
    /// Connections held open by [`Answer::Never`].
    held: Vec<TcpStream>,
    /// Every connection accepted (a clone), closed when the receiver goes down.
    open: Vec<TcpStream>,
}

/// The receiver; it serves until the test process ends, or until it goes down.
pub struct Receiver {
    port: u16,
    state: Arc<(Mutex<State>, Condvar)>,
    /// Bound to the port and never listening: holds it while the receiver is down.
    _holder: OwnedFd,
    /// The listening socket and its accepting thread, while up.
    serving: Mutex<Option<Serving>>,
}

/// A receiver's listening socket and the thread accepting on it.
struct Serving {
    listener: Arc<TcpListener>,
    stopping: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Receiver {
    /// A receiver on a free port answering `answer`.
    pub fn start(answer: Answer) -> Receiver {
        Receiver::start_on(0, answer)
    }

    /// A receiver on `port` (0: a free one) answering `answer`.
    pub fn start_on(port: u16, answer: Answer) -> Receiver {
        let holder = reuseport_socket(port, false).expect("bind the test receiver");
        // The port bound (a socket's address, read through a listener's accessor).
        let port = TcpListener::from(holder.try_clone().unwrap())
            .local_addr()
            .unwrap()
            .port();
        let state = Arc::new((
            Mutex::new(State {
                answer,
                requests: Vec::new(),
                held: Vec::new(),
                open: Vec::new(),
            }),
            Condvar::new(),
        ));
        let rx = Receiver {
            port,
            state,
            _holder: holder,
            serving: Mutex::new(None),
        };
        rx.come_back();
        rx
    }

    /// Stops listening (new connections are refused) and closes every open connection; the
    /// port stays held. Nothing happens when it is down already.
    pub fn go_down(&self) {
        let Some(serving) = self.serving.lock().unwrap().take() else {
            return;
        };
        serving.stopping.store(true, Ordering::SeqCst);
        // Wakes the blocked accept (Linux), which then fails and ends the thread.
        // SAFETY: shutdown(2) on the listening socket `serving.listener` holds open.
        unsafe { libc::shutdown(serving.listener.as_raw_fd(), libc::SHUT_RDWR) };
        serving.thread.join().unwrap();
        drop(serving.listener);
        let mut state = self.state.0.lock().unwrap();
        let state = &mut *state;
        for c in state.open.drain(..).chain(state.held.drain(..)) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Listens again on the same port. Nothing happens when it is up already.
    pub fn come_back(&self) {
        let mut serving = self.serving.lock().unwrap();
        if serving.is_some() {
            return;
        }
        let fd = reuseport_socket(self.port, true).expect("listen on the held port");
        let listener = Arc::new(TcpListener::from(fd));
        let stopping = Arc::new(AtomicBool::new(false));
        let (shared, accepting, stop) = (self.state.clone(), listener.clone(), stopping.clone());
        let thread = std::thread::spawn(move || {
            for stream in accepting.incoming() {
                match stream {
                    Ok(stream) => {
                        if let Ok(clone) = stream.try_clone() {
                            shared.0.lock().unwrap().open.push(clone);
                        }
                        let shared = shared.clone();
                        std::thread::spawn(move || serve(stream, &shared));
                    }
                    Err(_) if stop.load(Ordering::SeqCst) => return,
                    Err(_) => {}
                }
            }
        });
        *serving = Some(Serving {
            listener,
            stopping,
            thread,
        });
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Answers the next requests with `answer`.
    pub fn answer(&self, answer: Answer) {
        self.state.0.lock().unwrap().answer = answer;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state.0.lock().unwrap().requests.clone()
    }

    /// Waits until at least `n` requests have arrived (at most `limit`); returns them all.
    pub fn wait_for(&self, n: usize, limit: Duration) -> Vec<Request> {
        let deadline = Instant::now() + limit;
        let (lock, cv) = &*self.state;
        let mut state = lock.lock().unwrap();
        while state.requests.len() < n {
            let now = Instant::now();
            assert!(
                now < deadline,
                "the receiver got {} requests, not {n}, within {limit:?}",
                state.requests.len()
            );
            state = cv.wait_timeout(state, deadline - now).unwrap().0;
        }
        state.requests.clone()
    }
}

fn serve(stream: TcpStream, shared: &(Mutex<State>, Condvar)) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let (lock, cv) = shared;
        let answer = {
            let mut state = lock.lock().unwrap();
            state.requests.push(Request {
                path,
                headers,
                body,
                at: Instant::now(),
            });
            cv.notify_all();
            state.answer.clone()
        };
        let response = match answer {
            Answer::Status(status, text) => format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{text}",
                text.len()
            ),
            Answer::RetryAfter(status, secs) => {
                format!("HTTP/1.1 {status} X\r\nRetry-After: {secs}\r\nContent-Length: 0\r\n\r\n")
            }
            Answer::Never => {
                lock.lock().unwrap().held.push(out);
                return;
            }
        };
        if out.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}
