//! The few system calls the stores and the election need beyond `std`: the core's owner-only
//! files and `flock` (re-exported), the two clocks of the store format, the effective user id,
//! opening files read-only without following a symbolic link, and whether a directory is on a
//! local file system.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// `open_file(path, create_new)`: read-write, created 0600, never through a link;
/// `try_lock_exclusive(file)`: a non-blocking exclusive `flock`, `Ok(false)` when another open
/// file holds it; `try_claim(file)`: the same for a lock held for the holder's life, which a
/// forked child does not keep. A writer holds its store and an owner its lock with
/// `try_claim`; a store scan probes liveness with `try_lock_exclusive` (as NIXL's does) and
/// releases a dead writer's lock at once ([`unlock`]).
pub use nixl_telemetry_base::owner_only::{euid, open_file, try_claim, try_lock_exclusive};

/// Releases a `flock` taken on `file` (a store scan's probe of a store kept open between
/// scans, so that another scanner does not see a dead writer as alive).
pub fn unlock(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor that `file` keeps open for the duration of the call.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one timespec into `ts`, a live local.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` in nanoseconds (a store's `lastUpdateNs`; ranks of one node share it).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in nanoseconds (the run marker in a store's file name).
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// Opens `path` read-only without following a symbolic link (`ELOOP` for one) and without
/// blocking on a FIFO.
pub fn open_read_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

/// File systems whose directory modification time a reader on this host sees as soon as it
/// changes (no attribute cache between it and the writers): tmpfs, ext2/3/4, XFS, Btrfs, ZFS,
/// overlayfs, F2FS. A network file system (NFS, CIFS, Lustre, GPFS, CephFS) or FUSE may serve a
/// cached time for a while after another client changed the directory.
const LOCAL_FILE_SYSTEMS: [u32; 7] = [
    0x0102_1994, // tmpfs
    0xEF53,      // ext2, ext3, ext4
    0x5846_5342, // XFS
    0x9123_683E, // Btrfs
    0x2FC1_2FC1, // ZFS
    0x794C_7630, // overlayfs
    0xF2F5_2010, // F2FS
];

/// Whether `path` is on one of the [`LOCAL_FILE_SYSTEMS`] (false when it cannot be told).
pub fn on_local_file_system(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statfs is a valid value of a plain C struct, overwritten below.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs(2) reads the NUL-terminated `path` and writes one statfs into `st`, both
    // alive for the call.
    if unsafe { libc::statfs(path.as_ptr(), &mut st) } != 0 {
        return false;
    }
    // `f_type` is as wide as a long on some targets and an int on others: the magics fit in 32
    // bits.
    LOCAL_FILE_SYSTEMS.contains(&(st.f_type as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_fail_while_a_writer_holds_the_file_and_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let writer = open_file(&path, true).unwrap();
        assert!(try_lock_exclusive(&writer).unwrap());
        let probe = open_read_nofollow(&path).unwrap();
        assert!(!try_lock_exclusive(&probe).unwrap());
        drop(writer);
        assert!(try_lock_exclusive(&probe).unwrap());
        std::os::unix::fs::symlink(&path, dir.path().join("link")).unwrap();
        assert!(open_read_nofollow(&dir.path().join("link")).is_err());
        assert!(monotonic_ns() > 0 && realtime_ns() > 1_600_000_000_000_000_000);
    }

    #[test]
    fn local_file_systems_are_told_from_others() {
        assert!(on_local_file_system(Path::new("/dev/shm")), "tmpfs");
        assert!(
            !on_local_file_system(Path::new("/proc")),
            "procfs is not in the list"
        );
        assert!(!on_local_file_system(Path::new("/nonexistent/dir")));
    }
}
