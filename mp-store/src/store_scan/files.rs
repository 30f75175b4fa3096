//! Each store file of the directory: kept open and mapped between scans ([`OpenStore`], keyed
//! by its name and the inode its directory entry had, dropped when the file is gone or another
//! file has its name), so a scrape costs a read of each mapping rather than an open, a map and
//! an unmap each (the unmaps were most of a scrape's time in a serving rank with other
//! threads). A file of another user is refused before it is opened, and remembered (`foreign`).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::foreign::ForeignFiles;
use super::StoreScan;
use crate::reader::{OpenStore, StoreView};
use crate::sys;

/// A file refused because it belongs to another user.
#[derive(Debug)]
pub(super) struct Refused;

/// A store file kept open and mapped between scans.
#[derive(Debug)]
pub(super) struct OpenFile {
    /// The inode of its directory entry when it was opened.
    inode: u64,
    file: File,
    store: OpenStore,
}

impl StoreScan {
    /// One file, whose directory entry has inode `inode`: `Ok(Some)` to serve it, `Err` when it
    /// belongs to another user (remembered in `foreign`). Removes it when it is stale or invalid
    /// and unheld. Keeps it open and mapped in `open` for the next scan.
    pub(super) fn read_one(
        &self,
        open: &mut HashMap<PathBuf, OpenFile>,
        foreign: &mut ForeignFiles,
        path: &Path,
        inode: u64,
        now: u64,
        euid: u32,
    ) -> Result<Option<StoreView>, Refused> {
        if open.get(path).is_some_and(|f| f.inode != inode) {
            // Another file has the name now.
            open.remove(path);
        }
        if !open.contains_key(path) {
            if foreign.is_refused(path, inode) {
                return Err(Refused);
            }
            self.examined.fetch_add(1, Ordering::Relaxed);
            // Another user's file is refused without being opened (it may not be readable, and
            // opening costs two more system calls); the owner is checked again on the opened
            // file, which may have replaced it since.
            let Ok(meta) = std::fs::symlink_metadata(path) else {
                return Ok(None); // gone
            };
            if meta.uid() != euid {
                foreign.refuse(path, inode, meta.uid());
                return Err(Refused);
            }
            // A file that cannot be opened is not ours to judge (it counts as alive).
            let Ok(file) = sys::open_read_nofollow(path) else {
                return Ok(None);
            };
            let Ok(meta) = file.metadata() else {
                return Ok(None);
            };
            if meta.uid() != euid {
                foreign.refuse(path, inode, meta.uid());
                return Err(Refused);
            }
            match OpenStore::map(&file, meta.len()) {
                Ok(Ok(store)) => {
                    open.insert(path.to_owned(), OpenFile { inode, file, store });
                }
                Ok(Err(outcome)) => return Ok(self.judge(path, &file, outcome, now)),
                Err(e) => {
                    self.warn_once(path, &format!("it cannot be mapped ({e})"));
                    return Ok(None);
                }
            }
        }
        let Some(OpenFile { file, store, .. }) = open.get(path) else {
            return Ok(None);
        };
        let outcome = match store.read(file) {
            Ok(o) => o,
            Err(e) => {
                self.warn_once(path, &format!("it cannot be read ({e})"));
                // Mapped again (and judged as it is now) at the next scan.
                open.remove(path);
                return Ok(None);
            }
        };
        let view = self.judge(path, file, outcome, now);
        if view.is_none() && !path.exists() {
            open.remove(path);
        }
        Ok(view)
    }
}
