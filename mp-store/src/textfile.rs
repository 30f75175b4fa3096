//! The store scan's page as a file for node_exporter's textfile collector
//! (`--collector.textfile.directory`), for nodes whose Prometheus scrapes node_exporter rather
//! than a port of ours (`nixl-telemetry serve --dir DIR --textfile PATH`).
//!
//! What the collector takes, checked against Debian's node_exporter 1.5 (the `textfile`
//! integration test runs it): files named `*.prom` only; no sample timestamps (a file with one
//! is skipped whole and `node_textfile_scrape_error` is 1); every family once, with one HELP
//! and TYPE, the same in every file of the directory (another HELP for the same family in
//! another file drops that file's samples with a gather error); no two samples with the same
//! name and labels across all files (the later one is dropped). Samples of one family with
//! different label sets are accepted (node_exporter fills the missing labels with empty
//! values, which Prometheus reads as absent). The scan's page meets all of that: families
//! once each, HELP texts from the shared descriptor, no timestamps, one series per store (and
//! per node total). Two files for the same stores (two `serve --textfile` for one directory)
//! would duplicate every series: one file per directory.
//!
//! Atomicity: the page is written to a temporary name in the same directory that the
//! collector does not read (`.<name>.tmp.<pid>.<random>`, not ending in `.prom`), flushed, made
//! readable by other users (node_exporter usually runs as its own user), then renamed over
//! `PATH`, so the collector reads either the previous page or the new one, never a part.
//!
//! Safety in a directory other users can write (the batch-scheduler recipe lets job users write
//! into node_exporter's directory, and `serve` may run as root): the temporary file is created
//! new (`O_CREAT | O_EXCL | O_NOFOLLOW`), under a name nobody can predict, so a file or symbolic
//! link planted by another user is never opened, truncated or written through; its mode is set
//! through the descriptor (`fchmod`), never by path. The rename replaces `PATH` itself, even
//! when `PATH` is a planted symbolic link, never the file such a link points to.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of the file: readable by node_exporter's user, writable by ours.
pub const FILE_MODE: u32 = 0o644;

/// Checks that `path` can be a textfile: its name ends in `.prom` (the collector reads nothing
/// else) and its directory exists. The error says what is wrong; the caller names the option.
pub fn check_path(path: &Path) -> Result<(), String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{} has no file name", path.display()))?;
    if !name.ends_with(".prom") || name == ".prom" {
        return Err(format!(
            "{} does not end in .prom: node_exporter's textfile collector reads only *.prom files",
            path.display()
        ));
    }
    let dir = parent(path);
    if !dir.is_dir() {
        return Err(format!(
            "{}: directory {} does not exist (it is node_exporter's \
             --collector.textfile.directory)",
            path.display(),
            dir.display()
        ));
    }
    Ok(())
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A fresh temporary name for `path`'s page, in its directory: `.<name>.tmp.<pid>.<random>`
/// (64 random bits, so another user cannot plant a file or link there in advance).
pub fn temporary_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy().into_owned());
    let mut random = [0u8; 8];
    // SAFETY: getrandom writes at most `random.len()` bytes into the buffer.
    let n = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
    let random = if n == random.len() as isize {
        u64::from_ne_bytes(random)
    } else {
        // Without getrandom (a kernel before 3.17): the clock's nanoseconds. O_EXCL still
        // refuses anything planted under the name; only the name is less of a secret.
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    parent(path).join(format!(".{name}.tmp.{}.{random:016x}", std::process::id()))
}

/// Creates `tmp` as a new file of ours: fails when anything (a file, a symbolic link) is
/// already there, and never follows a link.
fn create_new(tmp: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp)
}

/// Writes `page` to `path` atomically (see the module documentation).
pub fn write_atomically(path: &Path, page: &str) -> io::Result<()> {
    write_atomically_via(path, &temporary_path(path), page)
}

/// [`write_atomically`] through the temporary name `tmp` (a test chooses it).
fn write_atomically_via(path: &Path, tmp: &Path, page: &str) -> io::Result<()> {
    // Created new, or nothing to clean up: a failed create leaves whatever was there alone.
    let mut f = create_new(tmp)?;
    let written = (|| {
        f.write_all(page.as_bytes())?;
        f.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
        f.sync_all()?;
        fs::rename(tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_prom_files_in_an_existing_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_path(&dir.path().join("nixl.prom")).is_ok());
        let e = check_path(&dir.path().join("nixl.txt")).unwrap_err();
        assert!(e.contains("does not end in .prom"), "{e}");
        let e = check_path(&dir.path().join("missing/nixl.prom")).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        let tmp = temporary_path(&dir.path().join("nixl.prom"));
        assert_eq!(tmp.parent(), Some(dir.path()));
        assert!(!tmp.to_string_lossy().ends_with(".prom"));
    }

    #[test]
    fn a_write_replaces_the_whole_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nixl.prom");
        write_atomically(&path, "a 1\n").unwrap();
        write_atomically(&path, "b 2\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "b 2\n");
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, FILE_MODE);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["nixl.prom"]);
        // A directory that disappeared: an error, and no temporary left behind.
        let gone = dir.path().join("gone");
        fs::create_dir(&gone).unwrap();
        fs::remove_dir(&gone).unwrap();
        assert!(write_atomically(&gone.join("x.prom"), "c 3\n").is_err());
    }

    #[test]
    fn temporary_names_differ_from_write_to_write() {
        let path = Path::new("/d/nixl.prom");
        assert_ne!(temporary_path(path), temporary_path(path));
    }

    #[test]
    fn a_link_or_file_planted_at_the_temporary_name_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nixl.prom");
        let secret = dir.path().join("secret");
        fs::write(&secret, "root only\n").unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
        let tmp = temporary_path(&path);
        std::os::unix::fs::symlink(&secret, &tmp).unwrap();
        let e = write_atomically_via(&path, &tmp, "page 1\n").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(fs::read_to_string(&secret).unwrap(), "root only\n");
        let mode = fs::metadata(&secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(fs::symlink_metadata(&tmp).unwrap().file_type().is_symlink());
        assert!(!path.exists());
        // A planted regular file is left alone too.
        let tmp = temporary_path(&path);
        fs::write(&tmp, "theirs\n").unwrap();
        assert!(write_atomically_via(&path, &tmp, "page 2\n").is_err());
        assert_eq!(fs::read_to_string(&tmp).unwrap(), "theirs\n");
    }
}
