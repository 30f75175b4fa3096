//! The store scan: the scrape-time reader of every rank's store in a directory, run on every
//! scrape by the serving process (a rank that won the election, or `nixl-telemetry serve`). It
//! reads every `nixl.*.mmap` file, serves the stores whose writer is alive (its `flock` is held)
//! or left less than the stale TTL ago, removes the others, and skips, with one warning per
//! file (per minute for files of other users), what it cannot use. Each scrape's page is made
//! from the stores as they are when the scrape asks.
//!
//! One concept per file, in the order a scan goes:
//!
//! - this file: [`StoreScan`], the scan of one directory ([`StoreScan::live_stores`]);
//! - `listing`: the directory's store files, listed again only when the directory changed;
//! - `foreign`: files of other users, refused once and not looked at again while they are the
//!   same files, and summed up in one line a minute at most;
//! - `files`: each store file, kept open and mapped between scans;
//! - `removal`: which stores are served (writer alive, or updated within the stale TTL) and the
//!   removal of the others and of invalid files nobody holds;
//! - `page`: the page made from the served stores, text or protobuf ([`encode`],
//!   [`encode_protobuf`], [`StoreScan::scrape_as`]);
//! - `totals`: the node totals summed over the ranks of one host and job;
//! - `health`: `/health`, and the scan as an endpoint's pages ([`ScanPages`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::config::ScanConfig;
use crate::reader::StoreView;
use crate::sys;
use nixl_telemetry_base::sync::LockUnpoisoned;

mod files;
mod foreign;
mod health;
mod listing;
mod page;
mod removal;
#[cfg(test)]
mod test_util;
mod totals;

pub use foreign::REPORT_INTERVAL;
pub use health::{HealthDetails, ScanPages};
pub use page::{encode, encode_protobuf};

use files::OpenFile;
use foreign::ForeignFiles;
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
    /// Files of other users, refused (see `foreign`).
    foreign: Mutex<ForeignFiles>,
    /// Files looked at (an `lstat`, and for a file of this user an `open`) because they were
    /// neither kept open nor refused before: what the tests count.
    examined: AtomicU64,
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
            foreign: Mutex::new(ForeignFiles::default()),
            examined: AtomicU64::new(0),
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
        self.scan_at(sys::monotonic_ns())
    }

    /// [`live_stores`](Self::live_stores) at `now` (monotonic ns): the clock of the stale TTL
    /// and of the summary of files of other users.
    fn scan_at(&self, now: u64) -> Vec<StoreView> {
        let dir = &self.config.dir;
        let files = match self.store_files() {
            Ok(files) => {
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
        let euid = sys::euid();
        let mut stores = Vec::new();
        let mut refused = Vec::new();
        let mut open = self.open.lock_unpoisoned();
        {
            let mut foreign = self.foreign.lock_unpoisoned();
            for (path, inode) in files.iter() {
                match self.read_one(&mut open, &mut foreign, path, *inode, now, euid) {
                    Ok(Some(view)) => stores.push(view),
                    Ok(None) => {}
                    Err(files::Refused) => refused.push(path.as_path()),
                }
            }
            foreign.report(dir, now);
        }
        // Files gone since the last scan: closed and unmapped.
        if !open.is_empty() {
            let listed: HashSet<&Path> = files.iter().map(|(p, _)| p.as_path()).collect();
            open.retain(|path, _| listed.contains(path.as_path()));
        }
        drop(open);
        if !refused.is_empty() {
            self.leave_out(&files, &refused);
        }
        stores.sort_by_key(|s| (s.pid, s.instance));
        stores
    }
}
