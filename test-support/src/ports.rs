//! Ports for servers that must be told their port before they bind it (the exporters read
//! `NIXL_TELEMETRY_PROMETHEUS_PORT`, the ranks of a node agree on one port): a port nobody else
//! can be given while the test process lives.
//!
//! Binding port 0 and dropping the socket to learn a "free" port races everything else on the
//! machine: the kernel hands the same port to the next `bind(0)` or outgoing connection of any
//! process, since it comes from the ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`).
//! [`reserve`] instead takes a port *below* that range, which the kernel never gives out on its
//! own, and holds an exclusive `flock` on a per-port file in a directory shared by every test
//! process for as long as this process lives, so two test processes (and two tests of one) never
//! get the same port. Where a server can bind port 0 and report the port it got (the CLI's
//! `serve`, the Go-built receivers, the series endpoint), tests do that instead.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;

use nixl_telemetry_base::sync::LockUnpoisoned;

/// The lowest port handed out: above the registered services most machines run (9090, 9100 and
/// the like stay out of reach).
const LOWEST: u16 = 20_000;

/// The reservations of this process: each port's lock file, held open until the process ends.
static HELD: Mutex<Option<HashMap<u16, File>>> = Mutex::new(None);

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The directory of the lock files, shared by every user's test processes (mode 1777, as /tmp).
fn lock_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("nixl-telemetry-test-ports");
    if std::fs::create_dir(&dir).is_ok() {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
    }
    dir
}

/// Takes `port`'s lock file, or `None` when another test process holds it (or it cannot be
/// opened, say another user's file without write permission for us).
fn lock(port: u16) -> Option<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW)
        .open(lock_dir().join(format!("{port}.lock")))
        .ok()?;
    // SAFETY: `flock` on a descriptor this function owns; LOCK_NB never blocks.
    let taken = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    taken.then_some(file)
}

/// A loopback port below the kernel's ephemeral range that no other test (of this process or of
/// another) holds, and that nothing listens on right now; it stays this process's until it ends.
pub fn reserve() -> u16 {
    let highest = ephemeral_start().saturating_sub(1).max(LOWEST + 1000);
    let span = u32::from(highest - LOWEST) + 1;
    // Start where another process is unlikely to: its pid and the time spread the processes.
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    let mut held = HELD.lock_unpoisoned();
    let held = held.get_or_insert_with(HashMap::new);
    for i in 0..span {
        let port = LOWEST + ((seed.wrapping_add(i.wrapping_mul(7919))) % span) as u16;
        if held.contains_key(&port) {
            continue;
        }
        let Some(file) = lock(port) else { continue };
        // A process outside the tests may listen on it (a fixed-port service): skip it. What
        // binds it after this check is a test of ours, holding the reservation.
        if TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_err() {
            continue;
        }
        held.insert(port, file);
        return port;
    }
    panic!("no loopback port between {LOWEST} and {highest} could be reserved");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_are_distinct_below_the_ephemeral_range_and_locked() {
        let ports: Vec<u16> = (0..50).map(|_| reserve()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
        for &p in &ports {
            assert!((LOWEST..ephemeral_start()).contains(&p), "{p}");
            // Another open file description cannot take the lock while this process holds it.
            assert!(lock(p).is_none(), "{p} is not locked");
        }
    }
}
