//! The file-ownership policy shared by the ring writer, the segment store, the plug-in loader
//! and the `prometheus_mp` plug-in's stores and owner locks: whose a file is (its owner against
//! the effective uid); files a writer owns are opened owner-only (mode 0600 when created), never
//! through a symbolic link, and claimed with an exclusive `flock` that the kernel releases when
//! the writer ends, even if it crashes.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// The effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `meta` (of a file, a directory or a link) belongs to this process's effective uid.
pub fn is_mine(meta: &Metadata) -> bool {
    meta.uid() == euid()
}

/// Opens `path` for reading and writing, creating it with mode 0600 if it does not exist (or,
/// with `create_new`, only if it does not exist). A symbolic link at `path` fails with `ELOOP`;
/// nothing is truncated.
pub fn open_owner_only(path: &Path, create_new: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if create_new {
        options.create_new(true);
    } else {
        options.create(true).truncate(false);
    }
    options.open(path)
}

/// Takes an exclusive, non-blocking `flock` on `file`, held until the file is closed: `Ok(true)`
/// when taken, `Ok(false)` when another open file (of this or another process) holds it.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor that `file` keeps open for the duration of the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}
