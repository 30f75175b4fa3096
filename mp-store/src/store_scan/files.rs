//! Each store file of the directory: kept open and mapped between scans ([`OpenStore`], keyed
//! by its name and inode, dropped when the file is gone or another file has its name), so a
//! scrape costs a read of each mapping rather than an open, a map and an unmap each (the unmaps
//! were most of a scrape's time in a serving rank with other threads); or refused, with one
//! warning, when it belongs to another user, and not opened again while it is the same file.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::StoreScan;
use crate::reader::{OpenStore, StoreView};
use crate::sys;

/// Files of other users a store scan remembers, by path and inode, so that each is warned
/// about once for the life of the process and not opened again while it is the same file: 16,384
/// paths (about 2 MB at most). Past that, the rest are opened at every scrape and summed up in
/// one line per scrape.
pub const MAX_REFUSED_FILES: usize = 16_384;

/// What one scan does with files of other users: remember them, or count them when the memory
/// is full.
pub(super) struct Foreign<'a> {
    pub(super) refused: &'a mut HashMap<PathBuf, (u64, u32)>,
    pub(super) unnamed: &'a mut usize,
}

/// A store file kept open and mapped between scans.
#[derive(Debug)]
pub(super) struct OpenFile {
    inode: u64,
    file: File,
    store: OpenStore,
}

impl StoreScan {
    /// One file: `Some` to serve it; removes it when it is stale or invalid and unheld. Keeps
    /// it open and mapped in `open` for the next scan.
    pub(super) fn read_one(
        &self,
        open: &mut HashMap<PathBuf, OpenFile>,
        foreign: Foreign<'_>,
        path: &Path,
        inode: u64,
        now: u64,
        euid: u32,
    ) -> Option<StoreView> {
        if open.get(path).is_some_and(|f| f.inode != inode) {
            // Another file has the name now.
            open.remove(path);
        }
        if !open.contains_key(path) {
            // A file that cannot be opened is not ours to judge (it counts as alive).
            let file = sys::open_read_nofollow(path).ok()?;
            let meta = file.metadata().ok()?;
            if meta.uid() != euid {
                if foreign.refused.len() < MAX_REFUSED_FILES {
                    foreign
                        .refused
                        .insert(path.to_owned(), (meta.ino(), meta.uid()));
                    log::warn!(
                        "prometheus_mp: skipping {}: it is owned by uid {}, not by this user",
                        path.display(),
                        meta.uid()
                    );
                } else {
                    *foreign.unnamed += 1;
                }
                return None;
            }
            match OpenStore::map(&file, meta.len()) {
                Ok(Ok(store)) => {
                    let f = OpenFile {
                        inode: meta.ino(),
                        file,
                        store,
                    };
                    open.insert(path.to_owned(), f);
                }
                Ok(Err(outcome)) => return self.judge(path, &file, outcome, now),
                Err(e) => {
                    self.warn_once(path, &format!("it cannot be mapped ({e})"));
                    return None;
                }
            }
        }
        let OpenFile { file, store, .. } = open.get(path)?;
        let outcome = match store.read(file) {
            Ok(o) => o,
            Err(e) => {
                self.warn_once(path, &format!("it cannot be read ({e})"));
                // Mapped again (and judged as it is now) at the next scan.
                open.remove(path);
                return None;
            }
        };
        let view = self.judge(path, file, outcome, now);
        if view.is_none() && !path.exists() {
            open.remove(path);
        }
        view
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{config, writer};
    use super::*;
    use crate::config::Aggregate;
    use nixl_telemetry_base::sync::LockUnpoisoned;
    use nixl_telemetry_series::Buckets;
    use std::time::Duration;

    #[test]
    fn another_users_store_is_skipped_with_one_warning_and_kept() {
        if crate::sys::euid() != 0 {
            return; // only root can give a file away
        }
        let dir = tempfile::tempdir().unwrap();
        let w = writer(dir.path(), "foreign", 9, "", &Buckets::default());
        let path = w.path().to_owned();
        drop(w);
        std::os::unix::fs::chown(&path, Some(12345), None).unwrap();
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        let (stores, logged) =
            nixl_telemetry_base::logging::capture(|| (scan.live_stores(), scan.live_stores()));
        assert!(stores.0.is_empty() && stores.1.is_empty());
        let warnings = nixl_telemetry_base::logging::warnings(&logged);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("owned by uid 12345"),
            "{}",
            warnings[0]
        );
        assert!(path.exists(), "never removed");
    }

    /// 5,000 files of another user with store names in a shared directory: each is warned about
    /// once for the life of the scan (they gave 5,000 warnings at every scrape, each file
    /// reopened), then skipped without being opened while it is the same file; a file replaced
    /// under its name is looked at again. Needs root, to give files away; otherwise it says why.
    #[test]
    fn foreign_files_are_warned_about_once_each_and_not_reopened() {
        if crate::sys::euid() != 0 {
            eprintln!("skipped: not root, so files cannot be given to another user");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mine = writer(dir.path(), "mine", 1, "", &Buckets::default());
        for i in 0..5000 {
            let path = dir.path().join(format!("nixl.{}.1.0.mmap", 100_000 + i));
            std::fs::write(&path, [0u8; 16]).unwrap();
            std::os::unix::fs::chown(&path, Some(12345), None).unwrap();
        }
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        let (first, logged) = nixl_telemetry_base::logging::capture(|| scan.live_stores());
        assert_eq!(first.len(), 1, "my store is served");
        let warnings = nixl_telemetry_base::logging::warnings(&logged);
        assert_eq!(warnings.len(), 5000);
        assert!(warnings.iter().all(|w| w.contains("owned by uid 12345")));
        let (second, logged) =
            nixl_telemetry_base::logging::capture(|| (scan.live_stores(), scan.live_stores()));
        assert_eq!((second.0.len(), second.1.len()), (1, 1));
        assert!(
            nixl_telemetry_base::logging::warnings(&logged).is_empty(),
            "warned again"
        );
        assert_eq!(scan.refused.lock_unpoisoned().len(), 5000);
        // Replaced under the same name (a new inode): looked at, and warned about, again.
        let replaced = dir.path().join("nixl.100000.1.0.mmap");
        std::fs::remove_file(&replaced).unwrap();
        std::fs::write(&replaced, [0u8; 16]).unwrap();
        std::os::unix::fs::chown(&replaced, Some(12346), None).unwrap();
        // A changed directory is listed again at once only when it is not too recent (see
        // `Listing`): drop the listing, as a later scrape would.
        *scan.listing.lock_unpoisoned() = None;
        let (_, logged) = nixl_telemetry_base::logging::capture(|| scan.live_stores());
        let warnings = nixl_telemetry_base::logging::warnings(&logged);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("owned by uid 12346"),
            "{}",
            warnings[0]
        );
        drop(mine);
    }
}
