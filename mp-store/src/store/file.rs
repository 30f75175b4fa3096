//! One store file as its writer holds it: created owner-only and unnamed (`O_TMPFILE`, or a
//! `.staging` name when the file system cannot), locked with an exclusive `flock` for the
//! writer's life, sized, filled with the writer's whole copy of the store (its extensions first,
//! the magic last, with release ordering), then published under its name in one step that
//! never replaces another file (`linkat`, or `link` and then the staging name removed); its
//! mapping guarded against SIGBUS (`nixl_telemetry_base::fault_guard`, as the rings' are), and
//! the checks that tell whether another process truncated, deleted or replaced it.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};
use nixl_telemetry_base::fault_guard::{self, FaultGuard};
use nixl_telemetry_base::fork::{replace_in_child, ReplacedInChild};

use crate::layout::{Extensions, MAGIC, OFF_LABELS, OFF_MAGIC, STORE_SIZE, STORE_WORDS};
use crate::sys;

/// What another process did to a store file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Damage {
    /// Its path still names it, but it was truncated (or emptied and made long again): part of
    /// the store, or all of it, is gone.
    Truncated,
    /// Its path names nothing (the file or its directory was deleted).
    Deleted,
    /// Its path names another file (or a link).
    Replaced,
}

impl Damage {
    /// What happened, for the message.
    pub(super) fn done(self) -> &'static str {
        match self {
            Damage::Truncated => "truncated",
            Damage::Deleted => "deleted",
            Damage::Replaced => "replaced by another file",
        }
    }
}

/// A published store file, mapped and locked.
pub(super) struct StoreFile {
    /// Declared first, so the mapping is unregistered before it is unmapped: a forked child
    /// does not keep it (nor so the file and its lock, which tells a store scan the writer
    /// lives).
    _in_child: ReplacedInChild,
    /// Declared before `map`, so it is unregistered before the map is unmapped.
    guard: FaultGuard,
    map: MmapRaw,
    /// Keeps the descriptor, and so the `flock`, for the writer's life.
    file: File,
    path: PathBuf,
    /// `(st_dev, st_ino)` of `file`: what its path must name.
    id: (u64, u64),
    /// Where its extensions are.
    placed: Extensions,
}

impl StoreFile {
    /// Creates the store `path` holding `words` (NIXL's layout, the magic included) and
    /// `extension` (the bytes after it, placed as `placed` says), and publishes it. An
    /// `AlreadyExists` error when another file has the name: it is never replaced.
    pub(super) fn create(
        path: &Path,
        words: &[u64; STORE_WORDS],
        extension: &[u8],
        placed: &Extensions,
    ) -> io::Result<StoreFile> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let (file, map) = match create_unnamed(dir, path, words, extension) {
            Ok(created) => created,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(e),
            // No O_TMPFILE on this file system (or no /proc to link it through): a staging
            // name the store scan does not match, linked into place once filled.
            Err(_) => create_staged(path, words, extension)?,
        };
        StoreFile::new(map, file, path.to_owned(), placed.clone())
    }

    /// The same file (same name, inode and lock), which another process truncated, made whole
    /// again with `words` and `extension`: its magic is zeroed first, so a reader skips it
    /// until it is whole.
    pub(super) fn restore(
        self,
        words: &[u64; STORE_WORDS],
        extension: &[u8],
    ) -> io::Result<StoreFile> {
        let StoreFile {
            _in_child,
            guard,
            map,
            file,
            path,
            placed,
            ..
        } = self;
        drop((_in_child, guard, map));
        file.write_all_at(&[0; 8], OFF_MAGIC as u64)?;
        let map = fill(&file, words, extension)?;
        StoreFile::new(map, file, path, placed)
    }

    fn new(map: MmapRaw, file: File, path: PathBuf, placed: Extensions) -> io::Result<StoreFile> {
        let meta = file.metadata()?;
        fault_guard::reassert();
        Ok(StoreFile {
            _in_child: replace_in_child(map.as_ptr(), map.len()),
            guard: FaultGuard::new(map.as_ptr(), map.len()),
            map,
            file,
            path,
            id: (meta.dev(), meta.ino()),
            placed,
        })
    }

    /// Where its extensions are.
    pub(super) fn placed(&self) -> &Extensions {
        &self.placed
    }

    /// The word at byte offset `off` of the file.
    pub(super) fn word(&self, off: usize) -> &AtomicU64 {
        word_of(&self.map, off)
    }

    /// What another process did to the file, if anything. Before each batch (the caller's
    /// `check_path` false): the SIGBUS guard put back on top if the host replaced it (one
    /// `sigaction`), whether a write faulted, the file's size (one `fstat`) and its magic, so
    /// that a truncated file is noticed before a write touches it; with `check_path` (once a
    /// second, and whenever the file itself is damaged), also what its path names (one
    /// `lstat`, no link followed): its device and inode must be the file's.
    pub(super) fn damage(&self, check_path: bool) -> Option<Damage> {
        fault_guard::reassert();
        let covered = || {
            self.file
                .metadata()
                .is_ok_and(|m| m.len() >= self.map.len() as u64)
        };
        // Short-circuit: the magic is loaded only from a file that still covers it.
        let in_place = self.guard.faulted()
            || !covered()
            || self.word(OFF_MAGIC).load(Ordering::Relaxed) != MAGIC;
        if !in_place && !check_path {
            return None;
        }
        match std::fs::symlink_metadata(&self.path) {
            // The file, or its directory, is gone (a file may have taken the directory's name).
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                Some(Damage::Deleted)
            }
            Ok(named) if (named.dev(), named.ino()) != self.id => Some(Damage::Replaced),
            // A path that cannot be looked at (its directory made unreadable) says nothing.
            _ => in_place.then_some(Damage::Truncated),
        }
    }
}

/// The word at byte offset `off` of a store mapping.
fn word_of(map: &MmapRaw, off: usize) -> &AtomicU64 {
    assert!(off.is_multiple_of(8) && off + 8 <= map.len());
    // SAFETY: `map` is a live shared mapping whose base is page-aligned, so `off` (a multiple
    // of 8 whose word is inside the mapping, asserted) addresses an aligned, in-bounds u64 that
    // stays mapped as long as `map` is borrowed (a truncated file's pages are replaced by the
    // SIGBUS guard, never unmapped). Other processes access the same bytes only with atomic
    // operations (ours, or NIXL's `__atomic` builtins), so viewing them as an AtomicU64 does not
    // race with a non-atomic access.
    unsafe { AtomicU64::from_ptr(map.as_mut_ptr().add(off).cast::<u64>()) }
}

/// Sizes `file` to a store and its `extension` bytes, writes the extension, maps the file,
/// writes `words` and, last, their first word, the magic (release ordering).
fn fill(file: &File, words: &[u64; STORE_WORDS], extension: &[u8]) -> io::Result<MmapRaw> {
    file.set_len((STORE_SIZE + extension.len()) as u64)?;
    file.write_all_at(extension, OFF_LABELS as u64)?;
    // The whole file: the extensions are updated in place.
    let map = MmapOptions::new()
        .len(STORE_SIZE + extension.len())
        .map_raw(file)?;
    for (i, &word) in words.iter().enumerate().skip(1) {
        word_of(&map, 8 * i).store(word, Ordering::Relaxed);
    }
    word_of(&map, OFF_MAGIC).store(words[0], Ordering::Release);
    Ok(map)
}

/// Takes the writer's lock; a failure is logged and the store is written anyway (its writer
/// then looks departed to a store scan, which serves it for the TTL after each update).
fn lock(file: &File, path: &Path) {
    match sys::try_claim(file) {
        Ok(true) => {}
        Ok(false) => log::warn!(
            "prometheus_mp: store {} is locked by another process; writing it anyway",
            path.display()
        ),
        Err(e) => log::warn!(
            "prometheus_mp: cannot lock store {} ({e}); collectors will judge its liveness by \
             the stale TTL",
            path.display()
        ),
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// An unnamed file in `dir`, filled, then linked as `path`.
fn create_unnamed(
    dir: &Path,
    path: &Path,
    words: &[u64; STORE_WORDS],
    extension: &[u8],
) -> io::Result<(File, MmapRaw)> {
    let dir_c = c_path(dir)?;
    // SAFETY: open(2) with a NUL-terminated path that outlives the call; O_TMPFILE takes a
    // mode argument, passed as the variadic third argument.
    let fd = unsafe {
        libc::open(
            dir_c.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            nixl_telemetry_base::owner_only::FILE_MODE as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open(2) and nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    lock(&file, path);
    let map = fill(&file, words, extension)?;
    let proc_path = c_path(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())))?;
    let target = c_path(path)?;
    // SAFETY: linkat(2) with two NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((file, map))
}

/// A file created as `<path>.staging`, filled, then linked as `path` (renamed there on a file
/// system without hard links) and its staging name removed.
pub(super) fn create_staged(
    path: &Path,
    words: &[u64; STORE_WORDS],
    extension: &[u8],
) -> io::Result<(File, MmapRaw)> {
    let mut staging = path.as_os_str().to_owned();
    staging.push(".staging");
    let staging = PathBuf::from(staging);
    let file = sys::open_file(&staging, true)?;
    lock(&file, path);
    let published = fill(&file, words, extension).and_then(|map| {
        match std::fs::hard_link(&staging, path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(e),
            Err(_) => std::fs::rename(&staging, path)?,
        }
        Ok(map)
    });
    let _ = std::fs::remove_file(&staging);
    Ok((file, published?))
}
