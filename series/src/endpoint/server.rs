//! The HTTP server: one thread multiplexing the listening socket and every connection with
//! `poll(2)` over non-blocking sockets, so no client can hold the others up.
//!
//! Each connection reads one request head (bounded by [`Limits::max_head_bytes`], within
//! [`Limits::request_timeout`] of being accepted), gets one complete response (written within
//! [`Limits::write_timeout`]), and is closed after a short drain of anything the client still
//! sends ([`Limits::linger`]), so the client sees the response rather than a reset.
//!
//! Floods: a connection whose client has sent nothing stays in the kernel until it sends, or
//! has been silent for a second (`TCP_DEFER_ACCEPT`), so idle connections do not
//! take slots and a request is there to read when its connection is accepted; it is read (and
//! answered) at once. One client address's connections still waiting for their request hold at
//! most a quarter of [`Limits::max_connections`]: beyond that it evicts its own, so a flood from
//! one address never pushes another client out, and a client whose requests are being answered
//! is never cut short for having several. At most [`Limits::max_connections`] connections are
//! kept; when full, the oldest connection that has sent nothing within a grace period goes
//! first, then slow senders. Eviction never closes a connection whose request is readable: a
//! candidate is read first, and one whose request arrived is answered instead; an evicted
//! connection is told why (503) rather than reset. The listen backlog is raised so a flood
//! does not overflow it into 1 s SYN retransmits. Writes use `MSG_NOSIGNAL`: a vanished client
//! never raises `SIGPIPE` in the host process. Stopping (drop) wakes the thread, joins it and
//! closes the listening socket.

use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::http;
use nixl_telemetry_base::fork::Generation;

/// What an endpoint serves, called on the server thread: `/metrics` and the health probes.
pub trait Pages: Send + Sync {
    /// The `/metrics` response in the format the scraper asked for (one it cannot give falls
    /// back to text): content type and body.
    fn metrics(&self, format: http::Format) -> (&'static str, Vec<u8>);

    /// Whether `/metrics` is served here (the default); an endpoint of health checks only
    /// answers it 404.
    fn serves_metrics(&self) -> bool {
        true
    }

    /// The readiness probe (`/readyz`, `/health`): whether the endpoint delivers (200) or not
    /// (503), with a short JSON object saying what it sees. The default: ready,
    /// `{"status":"ok"}`.
    fn health(&self) -> http::Health {
        http::Health::ready(String::new())
    }

    /// The liveness probe (`/livez`): whether the process's loops are alive. The default:
    /// alive, since the server's own loop is answering.
    fn liveness(&self) -> http::Health {
        http::Health::ready(String::new())
    }
}

/// An endpoint's pages, shared with its server thread.
pub type MetricsFn = Arc<dyn Pages>;

/// A text `/metrics` page from a function, always healthy (tests, simple endpoints).
pub struct PageFn<F>(pub F);

impl<F: Fn() -> (&'static str, Vec<u8>) + Send + Sync> Pages for PageFn<F> {
    fn metrics(&self, _format: http::Format) -> (&'static str, Vec<u8>) {
        (self.0)()
    }
}

/// Resource bounds of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections kept open at once.
    pub max_connections: usize,
    /// Largest request head (request line and headers) accepted; larger gets 431.
    pub max_head_bytes: usize,
    /// Time from accepting a connection to having its whole request head (and a chunked
    /// body); then 408.
    pub request_timeout: Duration,
    /// Time to send a response before the connection is dropped.
    pub write_timeout: Duration,
    /// Time to drain a client's leftover bytes after the response before closing.
    pub linger: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 32,
            max_head_bytes: 8 * 1024,
            request_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            linger: Duration::from_secs(1),
        }
    }
}

/// Why the server could not listen.
#[derive(Debug)]
pub enum BindError {
    /// The address is in use (another process holds the port): a benign collision.
    AddrInUse(io::Error),
    /// Any other failure (address not available, permission, no thread, ...).
    Other(io::Error),
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindError::AddrInUse(e) | BindError::Other(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BindError {}

/// A running server; dropping it stops the thread and frees the port.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: UnixStream,
    thread: Option<JoinHandle<()>>,
    /// The fork generation of the process that started the server.
    generation: Generation,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Binds `addr` and starts serving.
    pub fn bind(addr: SocketAddr, limits: Limits, metrics: MetricsFn) -> Result<Server, BindError> {
        let listener = TcpListener::bind(addr).map_err(|e| match e.kind() {
            io::ErrorKind::AddrInUse => BindError::AddrInUse(e),
            _ => BindError::Other(e),
        })?;
        Server::start(listener, limits, metrics).map_err(BindError::Other)
    }

    /// Serves on an already bound listener.
    pub fn start(listener: TcpListener, limits: Limits, metrics: MetricsFn) -> io::Result<Server> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        // Accepted sockets inherit TCP_NODELAY from the listener (Linux): a response's last
        // segment never waits for the client's acknowledgement of the others.
        set_option(&listener, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
        // A connection whose client has sent nothing stays in the kernel until it sends (or
        // for DEFER_ACCEPT_SECS): an idle flood does not take slots, and a request is there to
        // read when its connection is accepted, however long its client took to send it.
        if let Err(e) = set_option(
            &listener,
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            DEFER_ACCEPT_SECS,
        ) {
            log::debug!("scrape endpoint {addr}: cannot defer accepting idle connections: {e}");
        }
        // A forked child must not keep the port: the parent's restarts and failover (another
        // process binding it once the parent is gone) do not wait for its children.
        nixl_telemetry_base::fork::close_in_child(listener.as_raw_fd());
        // Listening again on a listening socket changes its backlog (Linux); the kernel caps
        // it at net.core.somaxconn.
        // SAFETY: listen(2) on the descriptor `listener` owns and keeps open across the call.
        if unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG) } != 0 {
            log::debug!(
                "scrape endpoint {addr}: cannot raise the listen backlog: {}",
                io::Error::last_os_error()
            );
        }
        let (waker, wake_rx) = UnixStream::pair()?;
        wake_rx.set_nonblocking(true)?;
        waker.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut event_loop = EventLoop {
            listener,
            wake_rx,
            stop: stop.clone(),
            conns: Vec::new(),
            limits,
            metrics,
            accept_paused_until: None,
            warned_accept: false,
        };
        let thread = std::thread::Builder::new()
            .name("nixl-scrape".into())
            .spawn(move || event_loop.run())?;
        Ok(Server {
            addr,
            stop,
            waker,
            thread: Some(thread),
            generation: Generation::current(),
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the server was started before this process was forked: in a child it serves
    /// nothing (its thread does not exist there, and its listening socket is closed).
    pub fn inherited(&self) -> bool {
        self.generation.inherited()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.inherited() {
            // Its thread does not exist in this child: joining it would wait forever.
            std::mem::forget(self.thread.take());
            return;
        }
        self.stop.store(true, Ordering::Release);
        let _ = send(self.waker.as_raw_fd(), &[1]);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `send(2)` with `MSG_NOSIGNAL` (the waker's byte; responses go out with [`send_from`]).
fn send(fd: i32, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: send(2) reads at most `buf.len()` bytes from `buf.as_ptr()`, and the borrow of
    // `buf` keeps exactly those bytes alive and unchanged for the call. Every caller passes the
    // `as_raw_fd()` of a socket it holds a reference to across the call (the server's waker),
    // so `fd` is open and is that socket, not a recycled descriptor.
    // `MSG_NOSIGNAL` turns a write to a closed peer into EPIPE instead of SIGPIPE.
    let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `sendmsg(2)` with `MSG_NOSIGNAL` of `parts`, one after the other, from byte `from` of the
/// whole (one system call, no copy of the parts into one buffer).
fn send_from(fd: i32, parts: &[Vec<u8>; 2], from: usize) -> io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 2];
    let mut skip = from;
    let mut n = 0;
    for part in parts {
        let rest = &part[skip.min(part.len())..];
        skip = skip.saturating_sub(part.len());
        if !rest.is_empty() {
            iov[n] = libc::iovec {
                iov_base: rest.as_ptr().cast_mut().cast(),
                iov_len: rest.len(),
            };
            n += 1;
        }
    }
    // SAFETY: zeroed is a valid msghdr (no name, no control data); its iovecs are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    // SAFETY: sendmsg(2) reads `n` iovecs from `iov`, each describing bytes of `parts`, which
    // the borrow keeps alive and unchanged for the call; it never writes through them. Every
    // caller passes the `as_raw_fd()` of a socket it holds a reference to across the call, so
    // `fd` is open and is that socket. `MSG_NOSIGNAL` turns a write to a closed peer into
    // EPIPE instead of SIGPIPE.
    let sent = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(sent as usize)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Reading,
    Writing,
    Draining,
}

struct Conn {
    stream: TcpStream,
    /// The client's address (port aside): connections of one peer share a quota.
    peer: std::net::IpAddr,
    phase: Phase,
    /// The request head read so far.
    head: Vec<u8>,
    /// The response (head, then body) and how much of it was sent.
    out: [Vec<u8>; 2],
    sent: usize,
    drained: usize,
    accepted: Instant,
    deadline: Instant,
}

/// Bytes of leftovers drained after a response before giving up on a polite close: a request
/// body up to [`http::MAX_REQUEST_BODY`] (larger ones are refused with 413).
const MAX_DRAIN: usize = http::MAX_REQUEST_BODY;

/// How long a new connection has to send its request before it counts as idle for eviction.
const GRACE: Duration = Duration::from_millis(250);

/// Seconds the kernel holds a connection whose client has sent nothing before handing it to
/// `accept` anyway (`TCP_DEFER_ACCEPT`; Linux counts it in SYN-ACK retransmissions, the first
/// after 1 s).
const DEFER_ACCEPT_SECS: libc::c_int = 1;

/// Pending connections the kernel queues for the server (the standard library listens with
/// 128; a connect flood overflows that, and a dropped SYN costs a client a 1 s retransmit).
const LISTEN_BACKLOG: libc::c_int = 4096;

impl Conn {
    fn respond(&mut self, response: http::Response, limits: &Limits, now: Instant) {
        self.out = [response.head, response.body];
        self.sent = 0;
        self.head = Vec::new();
        self.phase = Phase::Writing;
        self.deadline = now + limits.write_timeout;
    }

    /// Makes as much progress as the socket allows; false when the connection is finished.
    fn progress(&mut self, limits: &Limits, metrics: &MetricsFn, now: Instant) -> bool {
        let mut chunk = [0u8; 4096];
        loop {
            match self.phase {
                Phase::Reading => match (&self.stream).read(&mut chunk) {
                    Ok(0) => return false,
                    Ok(n) => {
                        self.head.extend_from_slice(&chunk[..n]);
                        if let Some(response) = answer(&self.head, limits, metrics) {
                            self.respond(response, limits, now);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                },
                Phase::Writing => match send_from(self.stream.as_raw_fd(), &self.out, self.sent) {
                    Ok(0) => return false,
                    Ok(n) => {
                        self.sent += n;
                        if self.sent == self.out[0].len() + self.out[1].len() {
                            let _ = self.stream.shutdown(Shutdown::Write);
                            self.out = Default::default();
                            self.phase = Phase::Draining;
                            self.deadline = now + limits.linger;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                },
                Phase::Draining => match (&self.stream).read(&mut chunk) {
                    Ok(0) => return false,
                    Ok(n) => {
                        self.drained += n;
                        if self.drained > MAX_DRAIN {
                            return false;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                },
            }
        }
    }

    fn events(&self) -> libc::c_short {
        match self.phase {
            Phase::Reading | Phase::Draining => libc::POLLIN,
            Phase::Writing => libc::POLLOUT,
        }
    }
}

/// The response to the request read so far (`buf`), once it is complete: its head, and a
/// chunked body whole (read and discarded, up to [`http::MAX_REQUEST_BODY`]: a small body of
/// unknown length is read past as one with a `Content-Length` is, a larger one gets 413).
/// `None` while more is needed.
fn answer(buf: &[u8], limits: &Limits, metrics: &MetricsFn) -> Option<http::Response> {
    let Some(end) = http::head_end(buf).filter(|&end| end <= limits.max_head_bytes) else {
        return (buf.len() > limits.max_head_bytes)
            .then(|| http::error(431, "the request head is too large"));
    };
    let request = match http::parse_head(&buf[..end]) {
        Ok(request) => request,
        Err(e) => return Some(http::refuse(&e)),
    };
    if http::body_length(&request) == Ok(http::BodyLength::Chunked) {
        match http::chunked_end(&buf[end..]) {
            http::ChunkedEnd::Complete(_) => {}
            http::ChunkedEnd::Malformed(why) => return Some(http::error(400, why)),
            http::ChunkedEnd::Incomplete if buf.len() - end > http::MAX_REQUEST_BODY => {
                return Some(http::too_large())
            }
            http::ChunkedEnd::Incomplete => return None,
        }
    }
    Some(
        catch_unwind(AssertUnwindSafe(|| {
            http::route(
                &request,
                || {
                    metrics
                        .serves_metrics()
                        .then(|| metrics.metrics(http::Format::of(&request)))
                },
                |probe| match probe {
                    http::Probe::Live => metrics.liveness(),
                    http::Probe::Ready => metrics.health(),
                },
            )
        }))
        .unwrap_or_else(|_| http::error(500, "the metrics could not be produced")),
    )
}

struct EventLoop {
    listener: TcpListener,
    wake_rx: UnixStream,
    stop: Arc<AtomicBool>,
    conns: Vec<Conn>,
    limits: Limits,
    metrics: MetricsFn,
    accept_paused_until: Option<Instant>,
    warned_accept: bool,
}

impl EventLoop {
    fn run(&mut self) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        while !self.stop.load(Ordering::Acquire) {
            let now = Instant::now();
            self.expire(now);
            if self.accept_paused_until.is_some_and(|t| now >= t) {
                self.accept_paused_until = None;
            }
            fds.clear();
            let listen_events = match self.accept_paused_until {
                None => libc::POLLIN,
                Some(_) => 0,
            };
            fds.push(pollfd(self.listener.as_raw_fd(), listen_events));
            fds.push(pollfd(self.wake_rx.as_raw_fd(), libc::POLLIN));
            for c in &self.conns {
                fds.push(pollfd(c.stream.as_raw_fd(), c.events()));
            }
            let timeout = self.poll_timeout(now);
            // SAFETY: poll(2) reads and writes (`revents`) exactly `fds.len()` pollfd entries
            // from `fds.as_mut_ptr()`: the vector is exclusively borrowed, initialised by
            // `pollfd()`, and not resized during the call. Its length converts to `nfds_t`
            // (an unsigned long, as wide as `usize` on Linux) without loss.
            // The descriptors belong to `self.listener`, `self.wake_rx` and `self.conns`, which
            // stay open across the call; poll only inspects them.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                log::error!("scrape endpoint: poll failed: {e}; stopping the endpoint");
                return;
            }
            if fds[1].revents != 0 {
                let mut buf = [0u8; 64];
                while matches!((&self.wake_rx).read(&mut buf), Ok(n) if n > 0) {}
                if self.stop.load(Ordering::Acquire) {
                    return;
                }
            }
            let now = Instant::now();
            let mut finished = vec![false; self.conns.len()];
            for (i, (c, fd)) in self.conns.iter_mut().zip(&fds[2..]).enumerate() {
                if fd.revents != 0 {
                    finished[i] = !c.progress(&self.limits, &self.metrics, now);
                }
            }
            let mut it = finished.iter();
            self.conns.retain(|_| !*it.next().unwrap_or(&false));
            if fds[0].revents != 0 {
                self.accept(now);
            }
        }
    }

    /// Milliseconds until the nearest deadline (or the end of an accept pause); -1 = none.
    fn poll_timeout(&self, now: Instant) -> i32 {
        let next = self
            .conns
            .iter()
            .map(|c| c.deadline)
            .chain(self.accept_paused_until)
            .min();
        match next {
            None => -1,
            Some(t) => {
                let ms = t.saturating_duration_since(now).as_micros().div_ceil(1000);
                ms.clamp(1, 60_000) as i32
            }
        }
    }

    /// Closes connections past their deadline (a request still incomplete gets a best-effort
    /// 408).
    fn expire(&mut self, now: Instant) {
        self.conns.retain(|c| {
            if now < c.deadline {
                return true;
            }
            if c.phase == Phase::Reading {
                let r = http::error(408, "the request was not received in time");
                let _ = send_from(c.stream.as_raw_fd(), &[r.head, r.body], 0);
            }
            false
        });
    }

    fn accept(&mut self, now: Instant) {
        loop {
            match accept_nonblocking(&self.listener) {
                Ok((stream, peer)) => {
                    let mut conn = Conn {
                        stream,
                        peer,
                        phase: Phase::Reading,
                        head: Vec::new(),
                        out: Default::default(),
                        sent: 0,
                        drained: 0,
                        accepted: now,
                        deadline: now + self.limits.request_timeout,
                    };
                    // A scraper's request is usually there already: read and answer it now,
                    // so it is past the reading phase before any eviction is considered.
                    if !conn.progress(&self.limits, &self.metrics, now) {
                        continue;
                    }
                    // One peer's connections still waiting for their request hold at most a
                    // quarter of the slots: a flood from one address evicts its own silent
                    // connections, never another client's, and a client whose requests are
                    // being answered is never cut short for having several.
                    let quota = (self.limits.max_connections / 4).max(1);
                    let peer = conn.peer;
                    let waiting_of_peer = |c: &Conn| c.peer == peer && c.phase == Phase::Reading;
                    if self.conns.iter().filter(|c| waiting_of_peer(c)).count() >= quota {
                        self.evict(now, &waiting_of_peer);
                    }
                    while self.conns.len() >= self.limits.max_connections.max(1)
                        && self.evict(now, &|_| true)
                    {}
                    self.conns.push(conn);
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => return,
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted => {}
                    _ => {
                        // Out of descriptors or memory: stop accepting for a moment rather
                        // than spinning on a listener that stays readable.
                        if !self.warned_accept {
                            self.warned_accept = true;
                            log::warn!(
                                "scrape endpoint {}: cannot accept connections ({e}); retrying",
                                self.listener
                                    .local_addr()
                                    .map(|a| a.to_string())
                                    .unwrap_or_default()
                            );
                        }
                        self.accept_paused_until = Some(now + Duration::from_millis(100));
                        return;
                    }
                },
            }
        }
    }

    /// Makes room for one connection among those `among` selects; false when none of them
    /// could go. The victim is the oldest connection still reading its request, chosen in this
    /// order: one that has sent nothing for longer than [`GRACE`] (a flood's idle connection),
    /// one still incomplete after [`GRACE`] (a slow sender), one that has sent nothing yet, any
    /// still reading; only then one whose response was sent (draining), and last the oldest of
    /// all. A candidate still reading is read first (non-blocking): one whose request has
    /// arrived meanwhile is answered, not evicted, and the choice is made again; one that has
    /// closed frees its slot. So eviction never closes a connection whose request is readable,
    /// and a connection it closes is told why (503) rather than reset.
    fn evict(&mut self, now: Instant, among: &dyn Fn(&Conn) -> bool) -> bool {
        loop {
            let pick = |keep: &dyn Fn(&Conn) -> bool| {
                self.conns
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| among(c) && keep(c))
                    .min_by_key(|(_, c)| c.accepted)
                    .map(|(i, _)| i)
            };
            let reading = |c: &Conn| c.phase == Phase::Reading;
            let silent = |c: &Conn| reading(c) && c.head.is_empty();
            let past_grace = |c: &Conn| now.saturating_duration_since(c.accepted) >= GRACE;
            let victim = pick(&|c| silent(c) && past_grace(c))
                .or_else(|| pick(&|c| reading(c) && past_grace(c)))
                .or_else(|| pick(&silent))
                .or_else(|| pick(&reading));
            let Some(i) = victim else {
                let Some(i) = pick(&|c| c.phase == Phase::Draining).or_else(|| pick(&|_| true))
                else {
                    return false;
                };
                self.conns.swap_remove(i);
                return true;
            };
            let c = &mut self.conns[i];
            let before = c.head.len();
            if !c.progress(&self.limits, &self.metrics, now) {
                // It closed (or failed): its slot is free, nothing of its is lost.
                self.conns.swap_remove(i);
                return true;
            }
            if c.phase == Phase::Reading && c.head.len() == before {
                // Nothing arrived: the victim.
                let c = self.conns.swap_remove(i);
                let busy = http::error(503, "too many connections; try again");
                let _ = send_from(c.stream.as_raw_fd(), &[busy.head, busy.body], 0);
                return true;
            }
            // Its request (or more of it) arrived: answered or read, not evicted.
        }
    }
}

/// Sets the `int` option `name` of `level` on `listener` to `value`.
fn set_option(
    listener: &TcpListener,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt(2) reads `size_of::<c_int>()` bytes from `&value`, alive for the
    // call; the descriptor is `listener`'s, open for the call.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `accept4(2)` of a non-blocking, close-on-exec connection and its peer's address (one system
/// call, where the standard library's accept and `set_nonblocking` take two).
fn accept_nonblocking(listener: &TcpListener) -> io::Result<(TcpStream, std::net::IpAddr)> {
    // SAFETY: an all-zero sockaddr_storage is a valid value (AF_UNSPEC, no address).
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: accept4(2) writes at most `len` bytes of the peer's address into `storage`
    // (exclusively borrowed, `len` its size) and the address's length into `len`; the
    // listening descriptor is `listener`'s, open for the call.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is the connection accept4 just returned, owned by nobody else.
    let stream = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let peer = match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (its family says so) into `storage`,
            // which is larger and suitably aligned for any socket address.
            let sin = unsafe {
                &*(&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            std::net::IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a sockaddr_in6.
            let sin6 = unsafe {
                &*(&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            std::net::IpAddr::from(sin6.sin6_addr.s6_addr)
        }
        _ => std::net::IpAddr::from([0u8; 4]),
    };
    Ok((stream, peer))
}

fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_in_two_parts_is_sent_whole_and_in_order_across_partial_writes() {
        let (writer, mut reader) = UnixStream::pair().unwrap();
        writer.set_nonblocking(true).unwrap();
        let parts = [
            b"HTTP/1.1 200 OK\r\n\r\n".to_vec(),
            (0..600_000u32).map(|i| (i % 251) as u8).collect(),
        ];
        let whole = parts.concat();
        // From inside the head, as after a partial write of it.
        let mut sent = 5;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut partial_writes = 0;
        while sent < whole.len() {
            match send_from(writer.as_raw_fd(), &parts, sent) {
                Ok(n) => {
                    sent += n;
                    partial_writes += usize::from(sent < whole.len());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let n = reader.read(&mut buf).unwrap();
                    got.extend_from_slice(&buf[..n]);
                }
                Err(e) => panic!("{e}"),
            }
        }
        drop(writer);
        reader.read_to_end(&mut got).unwrap();
        assert!(
            partial_writes > 0,
            "the socket took the response in several writes"
        );
        assert_eq!(got, whole[5..]);
    }
}
