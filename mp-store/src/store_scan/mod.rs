//! The store scan: the scrape-time reader of every rank's store in a directory, run on every
//! scrape by the serving process (a rank that won the election, or `nixl-telemetry serve`). It
//! reads every `nixl.*.mmap` file, serves the stores whose writer is alive (its `flock` is held)
//! or left less than the stale TTL ago, removes the others, and skips, with one warning per
//! file, what it cannot use. Each scrape's page is made from the stores as they are when the
//! scrape asks.
//!
//! One concept per file, in the order a scan goes:
//!
//! - this file: [`StoreScan`], the scan of one directory ([`StoreScan::live_stores`]);
//! - `listing`: the directory's store files, listed again only when the directory changed;
//! - `files`: each store file, kept open and mapped between scans, or refused when it belongs
//!   to another user ([`MAX_REFUSED_FILES`]);
//! - `removal`: which stores are served (writer alive, or updated within the stale TTL) and the
//!   removal of the others and of invalid files nobody holds;
//! - `page`: the page made from the served stores, text or protobuf ([`encode`],
//!   [`encode_protobuf`], [`StoreScan::scrape_as`]);
//! - `totals`: the node totals summed over the ranks of one host and job;
//! - `health`: `/health`, and the scan as an endpoint's pages ([`ScanPages`]).

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::config::ScanConfig;
use crate::reader::StoreView;
use crate::sys;
use nixl_telemetry_base::sync::LockUnpoisoned;

mod files;
mod health;
mod listing;
mod page;
mod removal;
#[cfg(test)]
mod test_util;
mod totals;

pub use files::MAX_REFUSED_FILES;
pub use health::{HealthDetails, ScanPages};
pub use page::{encode, encode_protobuf};

use files::{Foreign, OpenFile};
use health::DetailsSlot;
use listing::Listing;

/// Files a store scan remembers having warned about (NIXL's bound).
const WARNED_PATHS: usize = 64;

/// The scan of one directory; shared with the scrape endpoint's thread.
#[derive(Debug)]
pub struct StoreScan {
    config: ScanConfig,
    ttl_ns: u64,
    warned: Mutex<VecDeque<PathBuf>>,
    warned_dir: AtomicBool,
    warned_bounds: AtomicBool,
    /// The store files kept open and mapped, by path.
    open: Mutex<HashMap<PathBuf, OpenFile>>,
    /// Files of other users, by path: their inode and owner (see [`MAX_REFUSED_FILES`]).
    refused: Mutex<HashMap<PathBuf, (u64, u32)>>,
    /// More members of `/health`'s JSON object (`serve`'s push state), if any.
    health_details: DetailsSlot,
    /// The last listing of the directory.
    listing: Mutex<Option<Listing>>,
}

impl StoreScan {
    /// The scan of `config.dir`.
    pub fn new(config: ScanConfig) -> StoreScan {
        StoreScan {
            ttl_ns: u64::try_from(config.stale_ttl.as_nanos()).unwrap_or(u64::MAX),
            config,
            warned: Mutex::new(VecDeque::new()),
            warned_dir: AtomicBool::new(false),
            warned_bounds: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            health_details: DetailsSlot::default(),
            listing: Mutex::new(None),
        }
    }

    /// The directory and the rules it scans with.
    pub fn config(&self) -> &ScanConfig {
        &self.config
    }

    /// Warns about `path` unless it already did (remembering the last 64 paths).
    fn warn_once(&self, path: &Path, why: &str) {
        let mut warned = self.warned.lock_unpoisoned();
        if warned.iter().any(|p| p == path) {
            return;
        }
        if warned.len() == WARNED_PATHS {
            warned.pop_front();
        }
        warned.push_back(path.to_owned());
        log::warn!("prometheus_mp: skipping {}: {why}", path.display());
    }

    /// Reads the directory: the stores to serve, ordered by pid and instance. Stores of
    /// departed writers older than the TTL, and invalid files nobody holds, are removed.
    pub fn live_stores(&self) -> Vec<StoreView> {
        let dir = &self.config.dir;
        let files = match self.store_files() {
            Ok((files, listed)) => {
                if listed {
                    // The directory changed: a remembered file of another user may have been
                    // replaced, even by one that reuses its inode (one `lstat` each).
                    self.refused
                        .lock_unpoisoned()
                        .retain(|path, &mut (ino, uid)| {
                            fs::symlink_metadata(path)
                                .is_ok_and(|m| m.ino() == ino && m.uid() == uid)
                        });
                }
                self.warned_dir.store(false, Ordering::Relaxed);
                files
            }
            Err(e) => {
                if !self.warned_dir.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "prometheus_mp: cannot read telemetry dir {} ({e}); serving no stores",
                        dir.display()
                    );
                }
                return Vec::new();
            }
        };
        let now = sys::monotonic_ns();
        let euid = sys::euid();
        let mut stores = Vec::new();
        let mut open = self.open.lock_unpoisoned();
        let mut refused = self.refused.lock_unpoisoned();
        let mut unnamed = 0;
        for (path, inode) in files.iter() {
            if refused.get(path).is_some_and(|(ino, _)| ino == inode) {
                // Another user's file, warned about already, and still the same file.
                continue;
            }
            let foreign = Foreign {
                refused: &mut refused,
                unnamed: &mut unnamed,
            };
            if let Some(view) = self.read_one(&mut open, foreign, path, *inode, now, euid) {
                stores.push(view);
            }
        }
        if unnamed > 0 {
            log::warn!(
                "prometheus_mp: skipping {unnamed} more files in {} owned by other users \
                 (past the {MAX_REFUSED_FILES} named one by one)",
                dir.display()
            );
        }
        // Files gone since the last scan: closed and unmapped, or forgotten.
        if !open.is_empty() || !refused.is_empty() {
            let listed: std::collections::HashSet<&Path> =
                files.iter().map(|(p, _)| p.as_path()).collect();
            open.retain(|path, _| listed.contains(path.as_path()));
            refused.retain(|path, _| listed.contains(path.as_path()));
        }
        stores.sort_by_key(|s| (s.pid, s.instance));
        stores
    }
}
