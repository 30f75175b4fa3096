//! Files and directories only their owner can use: the one policy of the ring writer, the
//! segment store, the plug-in loader and the `prometheus_mp` plug-in's stores and locks.
//!
//! - **Modes**: every directory created here is mode 0700 ([`DIR_MODE`]) and every file 0600
//!   ([`FILE_MODE`]), whatever the umask: the mode is set again explicitly after creation (the
//!   umask only ever removes bits, and `umask 000` would otherwise give 0666/0777).
//! - **No symbolic links**: files are opened with `O_NOFOLLOW`; a link where a file is expected
//!   fails with `ELOOP`.
//! - **Ownership**: whose a file is, against the effective uid ([`is_mine`]). A file owned by
//!   another user is never a writer's, whoever can create files next to it (any user can, under
//!   `/tmp`): the segment store does not count it as history nor delete it, and a lock file
//!   owned by another user is not trusted.
//! - **A file of its own beside others'**: a file a writer opens again by its name in a
//!   directory others may write (a ring, the ring's loss file, a segment prefix's lock file) is
//!   used only when it is a regular file with a single link, owned by the effective uid
//!   ([`not_file_of`] the effective uid, checked on the opened descriptor by
//!   [`open_own_file`]); anything else
//!   planted at that name (another user's file, a symbolic link, a FIFO, a hard link to
//!   another file) is refused, never written through.
//! - **Claims**: a writer claims its file with an exclusive `flock` ([`try_claim`]) that the
//!   kernel releases when the writer ends, even if it crashes, and that a forked child does not
//!   keep ([`crate::fork`]). [`try_lock_exclusive`] alone is the probe of a lock.

use std::fs::{self, DirBuilder, File, Metadata, OpenOptions, Permissions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of the directories created here.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the files created here.
pub const FILE_MODE: u32 = 0o600;

/// The effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `meta` (of a file, a directory or a link) belongs to this process's effective uid.
pub fn is_mine(meta: &Metadata) -> bool {
    meta.uid() == euid()
}

/// What the entry `meta` is when it is not a regular file, in words ("a symbolic link", "a
/// FIFO", ...); `None` for a regular file.
pub fn not_regular(meta: &Metadata) -> Option<&'static str> {
    let kind = meta.file_type();
    if kind.is_file() {
        return None;
    }
    Some(if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    })
}

/// Why the entry `meta` (from `lstat`, or `fstat` of an open descriptor) is not a file of
/// `owner`'s own: `None` when it is a regular file with a single link owned by `owner`, else
/// what it is, completing "`<path>` is ..." (for example "owned by uid 65534, not uid 1000").
/// A writer asks it of its own files with its effective uid ([`open_own_file`]); a reader, of
/// a file beside another's with that owner's uid.
pub fn not_file_of(meta: &Metadata, owner: u32) -> Option<String> {
    if let Some(kind) = not_regular(meta) {
        Some(kind.to_owned())
    } else if meta.uid() != owner {
        Some(format!("owned by uid {}, not uid {owner}", meta.uid()))
    } else if meta.nlink() != 1 {
        Some("a file with other hard links".to_owned())
    } else {
        None
    }
}

/// Why [`open_own_file`] gave no file.
#[derive(Debug)]
pub enum OwnFileError {
    /// What is at the name is not this process's own file ([`not_file_of`]): what it is.
    Refused(String),
    /// The file could not be opened or created.
    Io(io::Error),
}

impl std::fmt::Display for OwnFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OwnFileError::Refused(what) => write!(f, "it is {what}"),
            OwnFileError::Io(e) => e.fmt(f),
        }
    }
}

/// Opens `path` as [`open_file`] does (with `O_NONBLOCK`, so a FIFO never waits), as a file
/// this process keeps beside others' files: refused when what is at the name is not its own
/// file ([`not_file_of`] the effective uid), checked on the opened descriptor, so the file checked is the file
/// written. An open that fails because of what is at the name (a symbolic link, or another
/// user's file this user may not open) is refused with what it is, too. Nothing is truncated
/// and nothing refused is changed.
pub fn open_own_file(path: &Path, create_new: bool) -> Result<File, OwnFileError> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
    if create_new {
        options.create_new(true);
    } else {
        options.create(true).truncate(false);
    }
    let mine = |meta: &Metadata| not_file_of(meta, euid());
    let file = options.open(path).map_err(|e| {
        match fs::symlink_metadata(path).ok().as_ref().and_then(mine) {
            Some(what) => OwnFileError::Refused(what),
            None => OwnFileError::Io(e),
        }
    })?;
    match mine(&file.metadata().map_err(OwnFileError::Io)?) {
        Some(what) => Err(OwnFileError::Refused(what)),
        None => Ok(file),
    }
}

/// Opens `path` for reading and writing, creating it with mode 0600 if it does not exist (or,
/// with `create_new`, only if it does not exist). A symbolic link at `path` fails with `ELOOP`;
/// nothing is truncated.
pub fn open_file(path: &Path, create_new: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if create_new {
        options.create_new(true);
    } else {
        options.create(true).truncate(false);
    }
    options.open(path)
}

/// Creates the new file `path` (failing if anything, a symbolic link included, is there) for
/// writing (appending with `append`), mode 0600 whatever the umask.
pub fn create_new_file(path: &Path, append: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .append(append)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    set_file_mode(&file)?;
    Ok(file)
}

/// Sets an open file to mode 0600 (a no-op when it already is).
pub fn set_file_mode(file: &File) -> io::Result<()> {
    if file.metadata()?.mode() & 0o7777 == FILE_MODE {
        return Ok(());
    }
    file.set_permissions(Permissions::from_mode(FILE_MODE))
}

/// Creates `dir` and its missing parents, each mode 0700 whatever the umask; directories that
/// already exist are left as they are.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_all(parent)?;
    }
    match DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)),
        // Created meanwhile by someone else: fine if it is a directory.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
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

/// A writer's claim on `file` for its lifetime: [`try_lock_exclusive`], and when the lock is
/// taken, the descriptor is registered to be closed in a forked child ([`crate::fork`]), so a
/// child never keeps the claim after the writer's process ends.
pub fn try_claim(file: &File) -> io::Result<bool> {
    let taken = try_lock_exclusive(file)?;
    if taken {
        crate::fork::close_in_child(file.as_raw_fd());
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_directories_and_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        create_dir_all(&deep).unwrap();
        create_dir_all(&deep).unwrap();
        for d in ["a", "a/b", "a/b/c"] {
            let mode = fs::metadata(dir.path().join(d)).unwrap().mode() & 0o7777;
            assert_eq!(mode, DIR_MODE, "{d}");
        }
        let f = deep.join("f");
        create_new_file(&f, true).unwrap();
        assert_eq!(fs::metadata(&f).unwrap().mode() & 0o7777, FILE_MODE);
        assert!(is_mine(&fs::metadata(&f).unwrap()));
        let e = create_new_file(&f, true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        std::os::unix::fs::symlink(&f, deep.join("link")).unwrap();
        assert!(create_new_file(&deep.join("link"), false).is_err());
        assert!(open_file(&deep.join("link"), false).is_err());
        let blocker = dir.path().join("file");
        fs::write(&blocker, b"").unwrap();
        assert!(create_dir_all(&blocker.join("sub")).is_err());
    }

    #[test]
    fn only_a_single_linked_regular_file_of_this_user_is_opened_as_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("own");
        let file = open_own_file(&own, false).unwrap();
        let meta = file.metadata().unwrap();
        assert!(not_file_of(&meta, euid()).is_none());
        let other = euid().wrapping_add(1);
        assert_eq!(
            not_file_of(&meta, other),
            Some(format!("owned by uid {}, not uid {other}", euid()))
        );
        let refused = |path: &Path| match open_own_file(path, false) {
            Err(OwnFileError::Refused(what)) => what,
            other => panic!("{}: {other:?}", path.display()),
        };
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("link")).unwrap();
        assert_eq!(refused(&dir.path().join("link")), "a symbolic link");
        fs::hard_link(&victim, dir.path().join("hard")).unwrap();
        assert_eq!(
            refused(&dir.path().join("hard")),
            "a file with other hard links"
        );
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(refused(&fifo), "a FIFO");
        assert_eq!(refused(dir.path()), "a directory");
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        let e = open_own_file(&dir.path().join("missing/x"), false).unwrap_err();
        assert!(matches!(e, OwnFileError::Io(_)), "{e:?}");
    }

    #[test]
    fn set_file_mode_makes_an_open_file_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, b"").unwrap();
        fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        set_file_mode(&File::open(&path).unwrap()).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, FILE_MODE);
    }
}
