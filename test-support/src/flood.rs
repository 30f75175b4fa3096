//! An idle-connection flood from many loopback source addresses ([`IdleFlood`]), and the
//! legitimate requests made beside it ([`request_from`]), for the scrape endpoints' tests: a
//! client socket bound to `127.0.0.N` before it connects ([`crate::sockets::connect_from`])
//! stands for another host, so one test plays clients at many addresses on 127.0.0.0/8.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sockets::{connect_from, reset_on_close};

/// `GET path` from `from` to `addr`, sent `pause` after connecting (as a client descheduled on
/// a loaded machine sends it), the whole reply read within `patience`: the status, or why
/// there was none (refused, reset, an empty or cut reply, a timeout); with the body.
pub fn request_from(
    from: Ipv4Addr,
    addr: SocketAddr,
    path: &str,
    pause: Duration,
    patience: Duration,
) -> Result<(u16, String), String> {
    let mut s = connect_from(from, addr).map_err(|e| format!("connect: {e}"))?;
    std::thread::sleep(pause);
    s.set_read_timeout(Some(patience))
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)
        .map_err(|e| format!("receive: {e} after {} bytes", all.len()))?;
    let text = String::from_utf8_lossy(&all);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no complete head in {} bytes", all.len()))?;
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or("no Content-Length")?;
    if body.len() != length {
        return Err(format!("a body of {} bytes of {length}", body.len()));
    }
    let status = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_owned()))
}

/// What [`requests_under_flood`] saw.
#[derive(Debug)]
pub struct FloodReport {
    /// Requests made.
    pub requests: usize,
    /// The requests that got no 200, each described (path, source, pause, what came back).
    pub failures: Vec<String>,
    /// Idle connections the flood made meanwhile.
    pub connects: u64,
}

/// `requests` legitimate requests to `addr` while an [`IdleFlood`] of 30 threads holds idle
/// connections from the 40 addresses `127.0.0.10` to `127.0.0.49` (16 each thread, the newest):
/// `/metrics` and `/health` in turn, from `127.0.0.1` and `127.0.0.2` in turn, each sent 0, 5,
/// 20 or 100 ms after connecting, in turn; each waited for up to 10 s.
pub fn requests_under_flood(addr: SocketAddr, requests: usize) -> FloodReport {
    const PAUSES_MS: [u64; 4] = [0, 5, 20, 100];
    let flood = IdleFlood::start(addr, &IdleFlood::sources(10, 40), 30, 16);
    flood.wait_for(500);
    let failures = (0..requests)
        .filter_map(|i| {
            let path = ["/metrics", "/health"][i % 2];
            let from = Ipv4Addr::new(127, 0, 0, 1 + (i / 2 % 2) as u8);
            let pause = Duration::from_millis(PAUSES_MS[i / 4 % PAUSES_MS.len()]);
            match request_from(from, addr, path, pause, Duration::from_secs(10)) {
                Ok((200, _)) => None,
                Ok((status, body)) => Some(format!(
                    "{path} from {from} after {pause:?}: {status} {body:?}"
                )),
                Err(e) => Some(format!("{path} from {from} after {pause:?}: {e}")),
            }
        })
        .collect();
    FloodReport {
        requests,
        failures,
        connects: flood.connects(),
    }
}

/// Threads connecting to one address from many source addresses as fast as they can, never
/// sending a byte, each holding its newest connections open; stopped (and every connection
/// closed) on drop.
pub struct IdleFlood {
    stop: Arc<AtomicBool>,
    connects: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl IdleFlood {
    /// `threads` threads flooding `addr`, each connecting from every address of `sources` in
    /// turn (thread `i` starting at the `i`-th) and holding its newest `hold` connections.
    pub fn start(addr: SocketAddr, sources: &[Ipv4Addr], threads: usize, hold: usize) -> IdleFlood {
        let stop = Arc::new(AtomicBool::new(false));
        let connects = Arc::new(AtomicU64::new(0));
        let threads = (0..threads)
            .map(|i| {
                let (stop, connects) = (stop.clone(), connects.clone());
                let sources = sources.to_vec();
                std::thread::spawn(move || {
                    let mut held = VecDeque::with_capacity(hold + 1);
                    let mut from = sources.iter().cycle().skip(i);
                    while !stop.load(Ordering::Relaxed) {
                        let Some(&source) = from.next() else { return };
                        if let Ok(c) = connect_from(source, addr) {
                            let _ = reset_on_close(&c);
                            connects.fetch_add(1, Ordering::Relaxed);
                            held.push_back(c);
                            if held.len() > hold {
                                held.pop_front();
                            }
                        }
                    }
                })
            })
            .collect();
        IdleFlood {
            stop,
            connects,
            threads,
        }
    }

    /// The loopback addresses `127.0.0.first` to `127.0.0.(first + n - 1)`.
    pub fn sources(first: u8, n: u8) -> Vec<Ipv4Addr> {
        (0..n)
            .map(|i| Ipv4Addr::new(127, 0, 0, first + i))
            .collect()
    }

    /// Connections made so far.
    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    /// Waits until `n` connections have been made (the flood is under way).
    pub fn wait_for(&self, n: u64) {
        while self.connects() < n {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for IdleFlood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
