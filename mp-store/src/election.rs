//! Which process serves a store directory on an address: the one holding an exclusive `flock`
//! on the owner lock file `nixl-owner.<address>.lock` in the directory (NIXL's election, so our
//! ranks and NIXL's ranks elect one owner together). The owner binds the address with the
//! scrape endpoint and serves the directory's store scan; the others stand by and try again
//! every [`RETRY`], so when the owner exits or is killed (the kernel releases its lock and its
//! socket) a survivor takes over.
//!
//! [`Election::poll`] is cheap when nothing is due (one mutex, one clock read) and is called
//! from every flush of every agent, the idle ones included (an empty flush reaches the
//! plug-in as a tick): unlike NIXL, whose ranks only re-elect when they export an event, an
//! idle node does not stay without an endpoint. `nixl-telemetry serve` polls it from its own
//! loop.
//!
//! - Lost to a sibling: silent (info), retried every [`RETRY`].
//! - Won, but the port is held by a process that is not a rank of the directory: one warning,
//!   the lock is kept (so the other ranks stay silent) and binding is retried every
//!   [`BACKOFF`]; the process keeps writing its store.
//! - The lock file cannot be used (not a regular file of ours, or `flock` fails): one warning,
//!   and the bind alone decides.
//! - Another failure to bind (an address not on this machine, a privileged port): an error
//!   the caller reports (fatal when an agent is created, one warning on later attempts).
//! - Once serving, another owner lock of the directory held by a live process (ranks that
//!   disagree on the port, or a sidecar on another port) gets one warning.

use std::fs::{self, File};
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::store_scan::ScanPages;
use nixl_telemetry_series::endpoint::server::MetricsFn;
use nixl_telemetry_series::endpoint::{BindError, Limits, Server};

use crate::store_scan::StoreScan;
use crate::sys;
use nixl_telemetry_base::fork::Generation;
use nixl_telemetry_base::sync::LockUnpoisoned;

/// How often a process that is not serving tries again.
pub const RETRY: Duration = Duration::from_millis(200);
/// How often the elected process retries a port held outside the directory's ranks.
pub const BACKOFF: Duration = Duration::from_secs(5);

/// The owner lock file's name for `addr` (`nixl-owner.0.0.0.0:9090.lock`).
pub fn lock_file_name(addr: &SocketAddr) -> String {
    format!("nixl-owner.{}.lock", addr.to_string().replace('/', "_"))
}

/// What this process is for the address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Serving, on this address.
    Serving(SocketAddr),
    /// Another process of the directory serves it (or may: without a usable lock file, a
    /// port in use is taken to be a sibling's).
    Standby,
    /// Elected, but the port is held by a process outside the directory's ranks.
    Blocked,
}

/// Fields drop in order: the server (freeing the port) before the owner lock, so a sibling
/// that wins the lock finds the port free.
#[derive(Default)]
struct State {
    server: Option<Server>,
    owner_lock: Option<File>,
    /// The lock file is unusable: the bind decides.
    lockless: bool,
    role: Option<Role>,
    next_attempt: Option<Instant>,
    /// Consecutive in-use bind failures since winning the lock.
    in_use: u32,
    warned_blocked: bool,
    warned_failure: bool,
    warned_others: bool,
}

/// One process's part in the election for (directory, address).
pub struct Election {
    scan: Arc<StoreScan>,
    addr: SocketAddr,
    lock_path: PathBuf,
    state: Mutex<State>,
    /// The fork generation of the process that created the election.
    generation: Generation,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("dir", &self.dir())
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Election {
    /// The store scan this election serves.
    pub fn scan(&self) -> &Arc<StoreScan> {
        &self.scan
    }

    /// Takes part in serving `scan`'s directory on `addr` (nothing happens before the
    /// first [`poll`](Self::poll)).
    pub fn new(scan: Arc<StoreScan>, addr: SocketAddr) -> Election {
        let lock_path = scan.config().dir.join(lock_file_name(&addr));
        Election {
            scan,
            addr,
            lock_path,
            state: Mutex::new(State::default()),
            generation: Generation::current(),
        }
    }

    /// Whether the election was created before this process was forked: in a child it is the
    /// parent's (its server's thread does not exist there, and its lock and socket are closed).
    pub fn inherited(&self) -> bool {
        self.generation.inherited()
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.scan.config().dir
    }

    /// The address asked for.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock_unpoisoned()
    }

    /// The role after the last attempt (`None` before the first).
    pub fn role(&self) -> Option<Role> {
        let st = self.lock();
        match &st.server {
            Some(s) => Some(Role::Serving(s.local_addr())),
            None => st.role,
        }
    }

    /// Runs an election attempt if one is due at `now`, and returns the role. An error is a
    /// bind failure other than the address being in use (retried after [`BACKOFF`]).
    pub fn poll(&self, now: Instant) -> Result<Role, String> {
        let mut st = self.lock();
        if let Some(s) = &st.server {
            return Ok(Role::Serving(s.local_addr()));
        }
        if st.next_attempt.is_some_and(|t| now < t) {
            return Ok(st.role.unwrap_or(Role::Standby));
        }
        if st.owner_lock.is_none() && !st.lockless {
            match claim(&self.lock_path) {
                Ok(Some(file)) => {
                    st.owner_lock = Some(file);
                    st.in_use = 0;
                }
                Ok(None) => {
                    if st.role != Some(Role::Standby) {
                        log::info!(
                            "prometheus_mp: another process serves telemetry dir {} on {}; \
                             standing by",
                            self.dir().display(),
                            self.addr
                        );
                    }
                    return Ok(st.retry(now, RETRY, Role::Standby));
                }
                Err(why) => {
                    log::warn!(
                        "prometheus_mp: cannot use {} ({why}); falling back to letting the port \
                         bind decide which process serves",
                        self.lock_path.display()
                    );
                    st.lockless = true;
                }
            }
        }
        let metrics: MetricsFn = Arc::new(ScanPages::new(self.scan.clone()));
        match Server::bind(self.addr, Limits::default(), metrics) {
            Ok(server) => {
                let local = server.local_addr();
                log::info!(
                    "prometheus_mp: serving http://{local}/metrics for telemetry dir {}",
                    self.dir().display()
                );
                st.server = Some(server);
                st.role = Some(Role::Serving(local));
                st.warned_blocked = false;
                if !st.warned_others {
                    if let Some(other) = self.other_owner() {
                        st.warned_others = true;
                        log::warn!(
                            "prometheus_mp: telemetry dir {} is also being served on another \
                             address ({other} is held): ranks of this dir disagree on \
                             NIXL_TELEMETRY_PROMETHEUS_PORT/NIXL_TELEMETRY_PROMETHEUS_LOCAL, or \
                             a sidecar serves it on another port",
                            self.dir().display()
                        );
                    }
                }
                Ok(Role::Serving(local))
            }
            Err(BindError::AddrInUse(e)) => {
                if st.lockless {
                    return Ok(st.retry(now, RETRY, Role::Standby));
                }
                st.in_use += 1;
                // The first failure right after winning may be a previous owner's socket not
                // yet closed: try again soon before calling the holder a stranger.
                if st.in_use == 1 {
                    return Ok(st.retry(now, RETRY, Role::Blocked));
                }
                if !st.warned_blocked {
                    st.warned_blocked = true;
                    log::warn!(
                        "prometheus_mp: elected to serve telemetry dir {} but {} is held by a \
                         process outside this run ({e}); this process keeps writing its store \
                         and tries again every {} s",
                        self.dir().display(),
                        self.addr,
                        BACKOFF.as_secs()
                    );
                }
                Ok(st.retry(now, BACKOFF, Role::Blocked))
            }
            Err(BindError::Other(e)) => {
                st.owner_lock = None;
                st.retry(now, BACKOFF, Role::Standby);
                Err(format!(
                    "prometheus_mp telemetry endpoint '{}' could not be started: {e}",
                    self.addr
                ))
            }
        }
    }

    /// [`poll`](Self::poll) for the flush thread: a failure is logged once, never returned.
    pub fn tick(&self, now: Instant) {
        if let Err(message) = self.poll(now) {
            let mut st = self.lock();
            if !st.warned_failure {
                st.warned_failure = true;
                log::warn!("{message}; trying again every {} s", BACKOFF.as_secs());
            }
        }
    }

    /// Another owner lock file of the directory that a live process holds.
    fn other_owner(&self) -> Option<String> {
        let ours = lock_file_name(&self.addr);
        fs::read_dir(self.dir()).ok()?.flatten().find_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            if name == ours || !name.starts_with("nixl-owner.") || !name.ends_with(".lock") {
                return None;
            }
            let file = sys::open_read_nofollow(&entry.path()).ok()?;
            (!sys::try_lock_exclusive(&file).ok()?).then_some(name)
        })
    }
}

impl State {
    fn retry(&mut self, now: Instant, after: Duration, role: Role) -> Role {
        self.next_attempt = Some(now + after);
        self.role = Some(role);
        role
    }
}

/// Tries to take the owner lock: `Some` when won, `None` when another process holds it, an
/// error when the file cannot serve as a lock.
fn claim(path: &Path) -> Result<Option<File>, String> {
    let file = sys::open_file(path, false).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.uid() != sys::euid() {
        return Err(format!("it is owned by uid {}", meta.uid()));
    }
    match sys::try_claim(&file) {
        Ok(true) => Ok(Some(file)),
        Ok(false) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Aggregate, ScanConfig};
    use nixl_telemetry_base::logging::{capture, warnings};
    use std::net::{Ipv4Addr, TcpListener};

    fn election(dir: &Path, port: u16) -> Election {
        let scan = Arc::new(StoreScan::new(ScanConfig {
            dir: dir.to_owned(),
            stale_ttl: Duration::ZERO,
            aggregate: Aggregate::None,
        }));
        Election::new(scan, SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    }

    #[test]
    fn one_owner_serves_and_a_sibling_takes_over_when_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        let port = nixl_telemetry_test_support::free_port();
        let a = election(dir.path(), port);
        let b = election(dir.path(), port);
        let now = Instant::now();
        let served = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        assert_eq!(a.poll(now), Ok(Role::Serving(served)));
        // Losing to a sibling is silent, and the loser does not retry before RETRY.
        let (role, logged) = capture(|| b.poll(now));
        assert_eq!(role, Ok(Role::Standby));
        assert!(warnings(&logged).is_empty(), "{logged:?}");
        let name = lock_file_name(&served);
        assert_eq!(name, format!("nixl-owner.127.0.0.1:{port}.lock"));
        assert!(dir.path().join(&name).exists());
        // The owner exits: the sibling serves at its next attempt.
        drop(a);
        assert_eq!(b.poll(now), Ok(Role::Standby), "not yet due");
        assert_eq!(b.poll(now + RETRY), Ok(Role::Serving(served)));
        assert_eq!(b.role(), Some(Role::Serving(served)));
    }

    #[test]
    fn a_stranger_on_the_port_gets_one_warning_and_the_lock_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let stranger = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = stranger.local_addr().unwrap().port();
        let a = election(dir.path(), port);
        let b = election(dir.path(), port);
        let t0 = Instant::now();
        let (roles, logged) = capture(|| {
            let mut roles = Vec::new();
            for i in 0..4u32 {
                let now = t0 + (RETRY + BACKOFF) * i;
                roles.push(a.poll(now).unwrap());
                roles.push(b.poll(now).unwrap());
            }
            roles
        });
        assert!(
            roles.iter().step_by(2).all(|r| *r == Role::Blocked),
            "{roles:?}"
        );
        assert!(roles.iter().skip(1).step_by(2).all(|r| *r == Role::Standby));
        let w = warnings(&logged);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("held by a process outside this run"),
            "{}",
            w[0]
        );
        // Once the stranger leaves, the elected process binds at its next attempt.
        drop(stranger);
        let later = t0 + (RETRY + BACKOFF) * 5;
        assert!(matches!(a.poll(later), Ok(Role::Serving(_))));
    }

    #[test]
    fn an_unusable_lock_file_falls_back_to_the_bind() {
        let dir = tempfile::tempdir().unwrap();
        let port = nixl_telemetry_test_support::free_port();
        let a = election(dir.path(), port);
        fs::create_dir(dir.path().join(lock_file_name(&a.addr()))).unwrap();
        let (role, logged) = capture(|| a.poll(Instant::now()));
        assert!(matches!(role, Ok(Role::Serving(_))), "{role:?}");
        let w = warnings(&logged);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("falling back to letting the port bind decide"));
    }

    #[test]
    fn an_owner_on_another_address_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let a = election(dir.path(), nixl_telemetry_test_support::free_port());
        let b = election(dir.path(), nixl_telemetry_test_support::free_port());
        assert!(matches!(a.poll(Instant::now()), Ok(Role::Serving(_))));
        let (role, logged) = capture(|| b.poll(Instant::now()));
        assert!(matches!(role, Ok(Role::Serving(_))));
        let w = warnings(&logged);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("also being served on another address"),
            "{}",
            w[0]
        );
    }

    #[test]
    fn other_bind_failures_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let scan = Arc::new(StoreScan::new(ScanConfig {
            dir: dir.path().to_owned(),
            stale_ttl: Duration::ZERO,
            aggregate: Aggregate::None,
        }));
        // An address that is not on this machine.
        let e = Election::new(scan, "192.0.2.1:9".parse().unwrap());
        let err = e.poll(Instant::now()).unwrap_err();
        assert!(err.contains("could not be started"), "{err}");
        assert_eq!(e.poll(Instant::now()), Ok(Role::Standby), "backing off");
    }
}
