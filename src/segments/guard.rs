//! One writer per segment prefix: the guard shared by FPM traces and `TRACE` exporters.
//!
//! Two writers on one `<prefix>.<producer>` would write and prune the same
//! `<prefix>.<producer>.<index>.jsonl.gz` files, so one's retention would delete the other's
//! open segment. That happens when two producer ids or agent names sanitize to the same producer
//! (`node/a` and `node:a` are both `node_a`), or when one name is opened twice, in one process
//! or in two processes writing to the same path. A [`PrefixGuard`] prevents it:
//!
//! - **In the process**, the registry of open prefixes ([`OpenPrefixes`], the only one in the
//!   crate) refuses a second writer on a prefix already claimed. It also records which writer
//!   holds a prefix, so an FPM trace of another component of the same producer can share that
//!   writer instead of opening a second one.
//! - **Across processes**, the guard holds an exclusive non-blocking `flock` on the lock file
//!   `<prefix>.<producer>.lock` for the writer's lifetime and refuses when another process holds
//!   it. The file is created with mode 0600 (whatever the umask) and `O_NOFOLLOW` (a symlink
//!   there is never followed), is never deleted (deleting it would let a third writer lock a new
//!   inode while the first still writes), and is not a segment: retention and `nixl-telemetry
//!   fpm cat` ignore it. The lock is released by the kernel when the writer ends, even if the
//!   process crashes ([`crate::owner_only`]).
//! - **A lock file this user does not own is not trusted.** Anyone can create
//!   `<prefix>.<producer>.lock` before the writer does (under the default `/tmp` prefix any user
//!   can), read-only for us or locked forever by its owner. So a lock file is used only when it is
//!   a regular file with a single link owned by the effective uid, the rule of every file a
//!   writer keeps beside others' ([`crate::owner_only`]). Anything else at that name (another
//!   user's file, a symlink, a FIFO, a hard link to another file) is left alone, one warning per lock file and process says so, and the
//!   writer goes on **without** the cross-process lock: it writes, but a second process of this
//!   user writing the same prefix would not be refused (in this process the prefix is still
//!   claimed once).

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use crate::fork::{Generation, LockOrder};
use crate::owner_only::{self, OwnFileError};
use crate::owner_only::{create_dir_all, set_file_mode};
use crate::segments::naming::SegmentNaming;
use crate::sync::LockUnpoisoned;

/// Suffix of the lock file added to the producer prefix.
pub const LOCK_SUFFIX: &str = ".lock";

/// A writer that holds a prefix, as the registry keeps it (weakly, whatever its type).
pub(crate) type Owner = Weak<dyn Any + Send + Sync>;

/// One claimed prefix: alive while its [`PrefixGuard`] is, and the writer holding it, if any
/// was recorded.
struct Entry {
    claim: Weak<()>,
    owner: Option<Owner>,
    /// The fork generation of the claim.
    generation: Generation,
}

impl Entry {
    fn is_live(&self) -> bool {
        self.claim.strong_count() > 0 && !self.generation.inherited()
    }
}

/// The prefixes open for writing in this process (FPM traces and TRACE exporters alike), locked
/// for as long as this value lives: look up, claim and record an owner in one critical section.
pub(crate) struct OpenPrefixes(MutexGuard<'static, HashMap<PathBuf, Entry>>);

impl OpenPrefixes {
    /// Locks the registry.
    pub(crate) fn lock() -> OpenPrefixes {
        static OPEN: OnceLock<Mutex<HashMap<PathBuf, Entry>>> = OnceLock::new();
        let open = OPEN.get_or_init(Default::default);
        crate::fork::hold_across_fork(LockOrder::OpenPrefixes, open);
        OpenPrefixes(open.lock_unpoisoned())
    }

    /// A prefix claimed by a live guard of this process: an entry inherited through a fork is
    /// the parent's (its writer is never used in the child), so it does not count.
    fn live(&self, prefix: &Path) -> Option<&Entry> {
        self.0.get(prefix).filter(|entry| entry.is_live())
    }

    /// Whether `prefix` is claimed by a live guard.
    pub(crate) fn is_open(&self, prefix: &Path) -> bool {
        self.live(prefix).is_some()
    }

    /// The writer of type `T` recorded for the claimed `prefix`, if it is still alive.
    pub(crate) fn owner<T: Any + Send + Sync>(&self, prefix: &Path) -> Option<Arc<T>> {
        let owner = self.live(prefix)?.owner.as_ref()?.upgrade()?;
        owner.downcast::<T>().ok()
    }

    /// Every live writer of type `T` recorded for a claimed prefix.
    pub(crate) fn owners<T: Any + Send + Sync>(&self) -> Vec<Arc<T>> {
        self.0
            .keys()
            .filter_map(|prefix| self.owner::<T>(prefix))
            .collect()
    }

    /// Records (or, with `None`, forgets) the writer holding the claimed `prefix`.
    pub(crate) fn set_owner(&mut self, prefix: &Path, owner: Option<Owner>) {
        if let Some(entry) = self.0.get_mut(prefix) {
            entry.owner = owner;
        }
    }

    /// Claims the prefix of `naming` for one writer (`what` names it in messages, e.g. "FPM
    /// trace"): creates the directory if needed, then the lock file, and locks it.
    pub(crate) fn claim(
        &mut self,
        naming: &SegmentNaming,
        what: &str,
    ) -> Result<PrefixGuard, GuardError> {
        let prefix = naming.prefix();
        if self.is_open(&prefix) {
            return Err(GuardError::OpenInProcess(format!(
                "{what}: segment prefix {} is already open for writing in this process, by another \
                 writer (two producer ids or agent names that sanitize to the same name, or \
                 one opened twice)",
                prefix.display()
            )));
        }
        let lock = lock_prefix(naming, &prefix, what)?;
        let claim = Arc::new(());
        self.0.retain(|_, entry| entry.is_live());
        self.0.insert(
            prefix,
            Entry {
                claim: Arc::downgrade(&claim),
                owner: None,
                generation: Generation::current(),
            },
        );
        Ok(PrefixGuard {
            _claim: claim,
            _lock: lock,
        })
    }
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

impl fmt::Display for GuardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::OpenInProcess(m) | GuardError::HeldByAnotherProcess(m) => f.write_str(m),
            GuardError::Io(m, e) => write!(f, "{m}: {e}"),
        }
    }
}

impl std::error::Error for GuardError {}

/// The exclusive claim of one writer on one producer prefix; released when dropped (the
/// registry entry dies with it, and closing the lock file releases the `flock`).
#[derive(Debug)]
pub struct PrefixGuard {
    _claim: Arc<()>,
    /// `None` when the lock file was not trusted (see the module documentation).
    _lock: Option<File>,
}

/// The lock file of `naming`: `<prefix>.<producer>.lock`.
pub fn lock_path(naming: &SegmentNaming) -> PathBuf {
    let mut p = naming.prefix().into_os_string();
    p.push(LOCK_SUFFIX);
    PathBuf::from(p)
}

impl PrefixGuard {
    /// Claims the prefix of `naming` for one writer (see [`OpenPrefixes::claim`]).
    pub fn acquire(naming: &SegmentNaming, what: &str) -> Result<PrefixGuard, GuardError> {
        OpenPrefixes::lock().claim(naming, what)
    }
}

/// The lock files already reported as not trusted.
fn untrusted_warned() -> MutexGuard<'static, HashSet<PathBuf>> {
    static WARNED: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    let warned = WARNED.get_or_init(Default::default);
    crate::fork::hold_across_fork(LockOrder::WarnedOnce, warned);
    warned.lock_unpoisoned()
}

/// Warns, once per lock file and process, that `path` is not used.
fn warn_untrusted(what: &str, path: &Path, why: &str) {
    let first = untrusted_warned().insert(path.to_owned());
    if first {
        log::warn!(
            "{what}: the lock file {} is {why}: it is not trusted and not used; writing without \
             the lock, so another process of this user writing the same prefix would not be \
             refused",
            path.display()
        );
    }
}

/// The locked lock file of `naming`, or `None` when what is at its name is not trusted.
fn lock_prefix(
    naming: &SegmentNaming,
    prefix: &Path,
    what: &str,
) -> Result<Option<File>, GuardError> {
    let path = lock_path(naming);
    let io_err = |e: io::Error| {
        GuardError::Io(
            format!("{what}: cannot create the lock file {}", path.display()),
            e,
        )
    };
    create_dir_all(naming.dir()).map_err(io_err)?;
    // The rule of every file a writer keeps beside others' (checked on the opened descriptor:
    // root opens anyone's file).
    let file = match owner_only::open_own_file(&path, false) {
        Ok(file) => file,
        Err(OwnFileError::Refused(why)) => {
            warn_untrusted(what, &path, &why);
            return Ok(None);
        }
        Err(OwnFileError::Io(e)) => return Err(io_err(e)),
    };
    set_file_mode(&file).map_err(io_err)?;
    match owner_only::try_claim(&file) {
        Ok(true) => Ok(Some(file)),
        Ok(false) => Err(GuardError::HeldByAnotherProcess(format!(
            "{what}: segment prefix {} is already open for writing by another process (its \
             lock file {} is held)",
            prefix.display(),
            path.display()
        ))),
        Err(e) => Err(GuardError::Io(
            format!("{what}: cannot lock {}", path.display()),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
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
    fn a_symlink_at_the_lock_name_is_neither_followed_nor_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let n = SegmentNaming::new(&dir.path().join("t"), "p");
        fs::write(dir.path().join("victim"), b"x").unwrap();
        symlink(dir.path().join("victim"), lock_path(&n)).unwrap();
        let (g, logged) = crate::logging::capture(|| PrefixGuard::acquire(&n, "test"));
        let g = g.unwrap();
        let warnings = crate::logging::warnings(&logged);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("a symbolic link"), "{}", warnings[0]);
        assert_eq!(fs::read(dir.path().join("victim")).unwrap(), b"x");
        // Still claimed once in this process.
        let e = PrefixGuard::acquire(&n, "test").unwrap_err();
        assert!(matches!(e, GuardError::OpenInProcess(_)), "{e}");
        drop(g);
        let (_, logged) = crate::logging::capture(|| PrefixGuard::acquire(&n, "test").unwrap());
        assert!(crate::logging::warnings(&logged).is_empty(), "warned once");
    }
}
