//! One writer per segment prefix: the guard shared by FPM traces and `TRACE` exporters.
//!
//! Two writers on one `<prefix>.<producer>` would write and prune the same
//! `<prefix>.<producer>.<index>.jsonl.gz` files, so one's retention would delete the other's
//! open segment. That happens when two producer ids or agent names sanitize to the same producer
//! (`node/a` and `node:a` are both `node_a`), or when one name is opened twice, in one process
//! or in two processes writing to the same path. A [`PrefixGuard`] prevents it:
//!
//! - **In the process**, a set of the prefixes open for writing refuses a second writer on a
//!   prefix already in it.
//! - **Across processes**, the guard holds an exclusive non-blocking `flock` on the lock file
//!   `<prefix>.<producer>.lock` for the writer's lifetime and refuses when another process holds
//!   it. The file is created with mode 0600 and `O_NOFOLLOW` (a symlink there is refused, never
//!   followed), is never deleted (deleting it would let a third writer lock a new inode while the
//!   first still writes), and is not a segment: retention and `nixl-telemetry fpm cat` ignore it.
//!   The lock is released by the kernel when the writer ends, even if the process crashes.

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::trace::segment::SegmentNaming;

/// Suffix of the lock file added to the producer prefix.
pub const LOCK_SUFFIX: &str = ".lock";

/// The prefixes open for writing in this process (FPM traces and TRACE exporters alike).
pub(crate) fn open_prefixes() -> MutexGuard<'static, HashSet<PathBuf>> {
    static OPEN: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Why a prefix could not be claimed.
#[derive(Debug)]
pub enum GuardError {
    /// Another writer of this process has the prefix.
    OpenInProcess(String),
    /// Another process holds the prefix's lock file.
    HeldByAnotherProcess(String),
    /// The lock file could not be created or locked.
    Io(String, io::Error),
}

impl GuardError {
    /// True when another writer (of this process or another one) owns the prefix.
    pub fn is_conflict(&self) -> bool {
        !matches!(self, GuardError::Io(..))
    }
}

impl fmt::Display for GuardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::OpenInProcess(m) | GuardError::HeldByAnotherProcess(m) => f.write_str(m),
            GuardError::Io(m, e) => write!(f, "{m}: {e}"),
        }
    }
}

impl std::error::Error for GuardError {}

/// The exclusive claim of one writer on one producer prefix; released when dropped.
#[derive(Debug)]
pub struct PrefixGuard {
    prefix: PathBuf,
    _lock: File,
}

/// The lock file of `naming`: `<prefix>.<producer>.lock`.
pub fn lock_path(naming: &SegmentNaming) -> PathBuf {
    let mut p = naming.prefix().into_os_string();
    p.push(LOCK_SUFFIX);
    PathBuf::from(p)
}

impl PrefixGuard {
    /// Claims the prefix of `naming` for one writer (`what` names it in messages, e.g. "FPM
    /// trace"): creates the directory if needed, then the lock file, and locks it.
    pub fn acquire(naming: &SegmentNaming, what: &str) -> Result<PrefixGuard, GuardError> {
        let prefix = naming.prefix();
        if !open_prefixes().insert(prefix.clone()) {
            return Err(GuardError::OpenInProcess(format!(
                "{what}: segment prefix {} is already open for writing in this process, by another \
                 writer (two producer ids or agent names that sanitize to the same name, or \
                 one opened twice)",
                prefix.display()
            )));
        }
        match lock_prefix(naming, &prefix, what) {
            Ok(lock) => Ok(PrefixGuard {
                prefix,
                _lock: lock,
            }),
            Err(e) => {
                open_prefixes().remove(&prefix);
                Err(e)
            }
        }
    }

    /// The claimed prefix.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }
}

fn lock_prefix(naming: &SegmentNaming, prefix: &Path, what: &str) -> Result<File, GuardError> {
    let path = lock_path(naming);
    let io_err = |e: io::Error| {
        GuardError::Io(
            format!("{what}: cannot create the lock file {}", path.display()),
            e,
        )
    };
    fs::create_dir_all(naming.dir()).map_err(io_err)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(io_err)?;
    // SAFETY: flock on a file descriptor we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(GuardError::HeldByAnotherProcess(format!(
                "{what}: segment prefix {} is already open for writing by another process (its \
                 lock file {} is held)",
                prefix.display(),
                path.display()
            )));
        }
        return Err(GuardError::Io(
            format!("{what}: cannot lock {}", path.display()),
            e,
        ));
    }
    Ok(file)
}

impl Drop for PrefixGuard {
    fn drop(&mut self) {
        open_prefixes().remove(&self.prefix);
        // The lock is released when the file is closed; the file itself stays.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn a_prefix_is_claimed_once_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let a = SegmentNaming::new(&dir.path().join("t"), "node/a");
        let b = SegmentNaming::new(&dir.path().join("t"), "node:a");
        let g = PrefixGuard::acquire(&a, "test").unwrap();
        let e = PrefixGuard::acquire(&b, "test").unwrap_err();
        assert!(matches!(e, GuardError::OpenInProcess(_)), "{e}");
        assert!(e.to_string().contains("t.node_a"), "{e}");
        // Another path to the same directory still meets the flock.
        symlink(dir.path(), dir.path().join("alias")).unwrap();
        let c = SegmentNaming::new(&dir.path().join("alias/t"), "node_a");
        let e = PrefixGuard::acquire(&c, "test").unwrap_err();
        assert!(matches!(e, GuardError::HeldByAnotherProcess(_)), "{e}");
        let lock = lock_path(&a);
        assert_eq!(
            fs::metadata(&lock).unwrap().permissions().mode() & 0o777,
            0o600
        );
        drop(g);
        assert!(lock.exists(), "the lock file is never deleted");
        PrefixGuard::acquire(&b, "test").unwrap();
    }

    #[test]
    fn a_symlink_at_the_lock_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let n = SegmentNaming::new(&dir.path().join("t"), "p");
        fs::write(dir.path().join("victim"), b"x").unwrap();
        symlink(dir.path().join("victim"), lock_path(&n)).unwrap();
        let e = PrefixGuard::acquire(&n, "test").unwrap_err();
        assert!(matches!(e, GuardError::Io(..)), "{e}");
        assert!(!open_prefixes().contains(&n.prefix()));
    }
}
