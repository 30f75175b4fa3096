//! The one trust rule for a file whose contents this process acts on: NIXL's configuration file,
//! the password, token and CA files it or the environment point at, and the exporter plug-ins
//! the loader runs ([`crate::plugin::trust`]). Trusted as OpenSSH trusts `~/.ssh/config` and
//! sudo its sudoers: only a regular file, owned by this process's user or by root, writable by
//! nobody else, in a directory likewise; opened without following a symbolic link and without
//! blocking (a FIFO or a device is refused before any read), its owner, mode and kind checked on
//! the opened descriptor (`fstat`, so the file checked is the file read: no check-then-open
//! race), and read up to a stated bound. Anything else is refused with a message naming the
//! file and the fix.
//!
//! The one difference between the two kinds of file is their directory ([`Place`]):
//! - a file the user **names** (a configuration or secret file, [`Place::Named`]) may also be in
//!   a root-owned directory with the sticky bit, such as `/tmp`: others can create files there
//!   but cannot replace or rename this one, and a file of theirs under another name is never
//!   read;
//! - a plug-in is **searched for** by its name in a list of directories ([`Place::Searched`]),
//!   so whatever a directory holds under that name is what runs: a directory in which anyone
//!   else can create entries, sticky or not, is refused, since there another user could put a
//!   file (or a hard link to another root-owned library) under the name searched for, or a
//!   refused first candidate that changes which later one is loaded.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::owner_only::euid;

/// The largest configuration file read: NIXL's file holds a few dozen settings.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;

/// The largest secret (password or token) file read.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 << 10;

/// Why a file is not trusted, or cannot be read: the text completes "`<file>` ..." (for example
/// "is writable by group or others (mode 0666): run chmod go-w `<file>`").
pub type Untrusted = String;

/// How a trusted file was found, which decides what its directory must be (see the module
/// documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Named by the user or a setting: a root-owned sticky directory (`/tmp`) is accepted.
    Named,
    /// Found by searching directories for a name (plug-ins): no other user may write the
    /// directory at all.
    Searched,
}

/// Reads the file the user named at `path` ([`Place::Named`]) as described in the module
/// documentation, at most `limit` bytes.
pub fn read_trusted(path: &Path, limit: u64) -> Result<Vec<u8>, Untrusted> {
    read_bounded(open_trusted(path, Place::Named)?, limit)
}

/// Opens `path` for reading if it is trusted as a file found as `place` says: the checks of
/// the file are made on the returned descriptor, so a caller that reads it (with
/// [`read_bounded`]) reads exactly the file that was checked.
pub fn open_trusted(path: &Path, place: Place) -> Result<File, Untrusted> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "is a symbolic link: name the file itself".to_owned(),
            _ => format!("cannot be opened: {e}"),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot be read: {e}"))?;
    check_file(path, &meta)?;
    check_directory(path, place)?;
    Ok(file)
}

/// Whether `meta`'s owner is this process's user or root.
fn owner_trusted(meta: &Metadata) -> bool {
    meta.uid() == euid() || meta.uid() == 0
}

/// What a file and its directory must be to be trusted: owned by this process's user or by
/// root, and writable by nobody else. `None` when `meta` passes; else why not, completing
/// "`<path>` ..." (for example "is writable by group or others (mode 0777)").
fn owner_or_mode_problem(meta: &Metadata) -> Option<Untrusted> {
    if !owner_trusted(meta) {
        Some(format!(
            "is owned by uid {}, neither this process's user (uid {}) nor root",
            meta.uid(),
            euid()
        ))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!(
            "is writable by group or others (mode {:04o})",
            meta.mode() & 0o7777
        ))
    } else {
        None
    }
}

fn check_file(path: &Path, meta: &Metadata) -> Result<(), Untrusted> {
    if let Some(kind) = crate::owner_only::not_regular(meta) {
        return Err(format!("is {kind}, not a regular file"));
    }
    match owner_or_mode_problem(meta) {
        None => Ok(()),
        Some(why) if !owner_trusted(meta) => Err(format!(
            "{why}: a file another user controls is not trusted; use a file of your own"
        )),
        Some(why) => Err(format!("{why}: run chmod go-w {}", path.display())),
    }
}

fn check_directory(path: &Path, place: Place) -> Result<(), Untrusted> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(dir).map_err(|e| {
        format!(
            "is in directory {}, which cannot be read: {e}",
            dir.display()
        )
    })?;
    let sticky_root = meta.uid() == 0 && meta.mode() & 0o1000 != 0;
    let risk = match place {
        Place::Named => "another user could replace the file",
        Place::Searched => "another user could put a file there under the name searched for",
    };
    match owner_or_mode_problem(&meta) {
        Some(_) if sticky_root && place == Place::Named => Ok(()),
        Some(why) => Err(format!(
            "is in directory {}, which {why}: {risk}; {}",
            dir.display(),
            if owner_trusted(&meta) {
                format!("run chmod go-w {} or move the file", dir.display())
            } else {
                "move the file".to_owned()
            }
        )),
        None => Ok(()),
    }
}

/// Reads `file` whole if it holds at most `limit` bytes; refuses it otherwise.
pub fn read_bounded(file: File, limit: u64) -> Result<Vec<u8>, Untrusted> {
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!("is larger than {limit} bytes, the most read"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_private_regular_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "abc").unwrap();
        chmod(&path, 0o644);
        assert_eq!(read_trusted(&path, 3).unwrap(), b"abc");
        let e = read_trusted(&path, 2).unwrap_err();
        assert!(e.contains("larger than 2 bytes"), "{e}");
    }

    #[test]
    fn links_fifos_devices_directories_and_writable_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o700);
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(read_trusted(&link, 10)
            .unwrap_err()
            .contains("symbolic link"));
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Without a writer: refused at once, not waited on.
        assert!(read_trusted(&fifo, 10).unwrap_err().contains("a FIFO"));
        let e = read_trusted(Path::new("/dev/zero"), 10).unwrap_err();
        assert!(e.contains("a device"), "{e}");
        assert!(read_trusted(dir.path(), 10)
            .unwrap_err()
            .contains("a directory"));
        chmod(&file, 0o666);
        let e = read_trusted(&file, 10).unwrap_err();
        assert!(e.contains("writable by group or others (mode 0666)"), "{e}");
        assert!(e.contains("chmod go-w"), "{e}");
        chmod(&file, 0o600);
        chmod(dir.path(), 0o777);
        let e = read_trusted(&file, 10).unwrap_err();
        assert!(e.contains("in directory") && e.contains("mode 0777"), "{e}");
        chmod(dir.path(), 0o700);
        assert_eq!(read_trusted(&file, 10).unwrap(), b"x");
    }

    #[test]
    fn a_root_owned_sticky_directory_holds_named_files_not_searched_ones() {
        let tmp = Path::new("/tmp");
        let meta = std::fs::metadata(tmp).unwrap();
        assert!(
            meta.uid() == 0 && meta.mode() & 0o1002 == 0o1002,
            "/tmp is root's, sticky and writable by all (mode {:o})",
            meta.mode()
        );
        let file = tempfile::Builder::new().tempfile_in(tmp).unwrap();
        chmod(file.path(), 0o600);
        assert!(open_trusted(file.path(), Place::Named).is_ok());
        let e = open_trusted(file.path(), Place::Searched).unwrap_err();
        assert!(
            e.contains("in directory /tmp") && e.contains("under the name searched for"),
            "{e}"
        );
    }
}
