//! The store directory, prepared as NIXL does: created owner-only (0700) with its parents when
//! missing; an existing one owned by another user, or writable by group or other, gets one
//! warning per process (the stores in it are still written and read).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nixl_telemetry_base::fork::LockOrder;
use nixl_telemetry_base::owner_only;

use crate::sys;
use nixl_telemetry_base::sync::LockUnpoisoned;

/// Makes sure `dir` exists; errors are fatal to the exporter's creation.
pub fn prepare(dir: &Path) -> Result<(), String> {
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {
            check(dir, &meta);
            Ok(())
        }
        Ok(_) => Err(format!(
            "telemetry dir {} exists and is not a directory",
            dir.display()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => create(dir),
        Err(e) => Err(format!("cannot use telemetry dir {}: {e}", dir.display())),
    }
}

fn create(dir: &Path) -> Result<(), String> {
    owner_only::create_dir_all(dir)
        .map_err(|e| format!("cannot create telemetry dir {}: {e}", dir.display()))
}

/// Directories already warned about in this process.
static WARNED: Mutex<Option<HashSet<(PathBuf, &'static str)>>> = Mutex::new(None);

fn warn_once(dir: &Path, what: &'static str, message: String) {
    nixl_telemetry_base::fork::hold_across_fork(LockOrder::Plugin, &WARNED);
    let mut warned = WARNED.lock_unpoisoned();
    if warned
        .get_or_insert_with(HashSet::new)
        .insert((dir.to_owned(), what))
    {
        log::warn!("{message}");
    }
}

fn check(dir: &Path, meta: &fs::Metadata) {
    let euid = sys::euid();
    if meta.uid() != euid {
        warn_once(
            dir,
            "owner",
            format!(
                "prometheus_mp: telemetry dir {} is owned by uid {}, not by this process's uid \
                 {euid}",
                dir.display(),
                meta.uid()
            ),
        );
    }
    if meta.mode() & 0o022 != 0 {
        warn_once(
            dir,
            "mode",
            format!(
                "prometheus_mp: telemetry dir {} is writable by group or other (mode {:o}); \
                 other users could plant or remove stores: make it 0700",
                dir.display(),
                meta.mode() & 0o777
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::logging::{capture, warnings};
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_missing_directory_is_created_owner_only() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("a/b");
        prepare(&dir).unwrap();
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Again: nothing to say.
        let (r, logged) = capture(|| prepare(&dir));
        r.unwrap();
        assert!(warnings(&logged).is_empty(), "{logged:?}");
        let file = base.path().join("f");
        fs::write(&file, "").unwrap();
        assert!(prepare(&file).unwrap_err().contains("not a directory"));
    }

    #[test]
    fn group_or_other_writable_directories_warn_once_each() {
        let base = tempfile::tempdir().unwrap();
        for (name, mode) in [("g", 0o770), ("o", 0o702)] {
            let dir = base.path().join(name);
            fs::create_dir(&dir).unwrap();
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
            let (r, logged) = capture(|| (prepare(&dir), prepare(&dir)));
            assert!(r.0.is_ok() && r.1.is_ok());
            let w = warnings(&logged);
            assert_eq!(w.len(), 1, "{w:?}");
            assert!(w[0].contains("writable by group or other"), "{}", w[0]);
        }
    }
}
