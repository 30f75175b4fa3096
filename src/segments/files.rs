//! How the segment store creates files and directories, and whose files it trusts.
//!
//! - **Modes**: every directory a writer creates is mode 0700 and every segment, lock or probe
//!   file 0600, whatever the umask: the mode is set again explicitly after creation (the umask
//!   only ever removes bits, and `umask 000` would otherwise give 0666/0777).
//! - **Ownership**: a file owned by another user than the effective uid is never this writer's,
//!   whoever can create files next to it (any user can, under the default `/tmp` prefix): it
//!   does not move the restart index, it is not counted as history and never deleted by
//!   retention ([`crate::segments::writer`]), and a lock file owned by another user is not
//!   trusted ([`crate::segments::guard`]). Its name is still taken: a writer skips it.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of the directories a writer creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the files a writer creates.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` and its missing parents, each mode 0700 whatever the umask; directories that
/// already exist are left as they are.
pub(crate) fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_private_dir_all(parent)?;
    }
    match DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)),
        // Created meanwhile by someone else: fine if it is a directory.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates the new file `path` (failing if anything, a symbolic link included, is there) for
/// writing (appending with `append`), mode 0600 whatever the umask.
pub(crate) fn create_new_private(path: &Path, append: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .append(append)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    set_private(&file)?;
    Ok(file)
}

/// Sets an open file of ours to mode 0600.
pub(crate) fn set_private(file: &File) -> io::Result<()> {
    file.set_permissions(Permissions::from_mode(FILE_MODE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn created_directories_and_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        create_private_dir_all(&deep).unwrap();
        create_private_dir_all(&deep).unwrap();
        for d in ["a", "a/b", "a/b/c"] {
            let mode = fs::metadata(dir.path().join(d)).unwrap().mode() & 0o7777;
            assert_eq!(mode, DIR_MODE, "{d}");
        }
        let f = deep.join("f");
        create_new_private(&f, true).unwrap();
        assert_eq!(fs::metadata(&f).unwrap().mode() & 0o7777, FILE_MODE);
        assert!(crate::file_lock::is_mine(&fs::metadata(&f).unwrap()));
        let e = create_new_private(&f, true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        std::os::unix::fs::symlink(&f, deep.join("link")).unwrap();
        assert!(create_new_private(&deep.join("link"), false).is_err());
        let blocker = dir.path().join("file");
        fs::write(&blocker, b"").unwrap();
        assert!(create_private_dir_all(&blocker.join("sub")).is_err());
    }
}
