//! A scripted HTTP receiver on 127.0.0.1 for the push exporters' tests: it records every
//! request (path, headers, body, arrival time) and answers as told ([`Answer`]), including not
//! at all. Keep-alive connections are served; each connection has its own thread.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

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
}

/// The receiver; it serves until the test process ends.
pub struct Receiver {
    port: u16,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl Receiver {
    /// A receiver on a free port answering `answer`.
    pub fn start(answer: Answer) -> Receiver {
        Receiver::start_on(0, answer)
    }

    /// A receiver on `port` (0: a free one) answering `answer`.
    pub fn start_on(port: u16, answer: Answer) -> Receiver {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the test receiver");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new((
            Mutex::new(State {
                answer,
                requests: Vec::new(),
                held: Vec::new(),
            }),
            Condvar::new(),
        ));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        Receiver { port, state }
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
