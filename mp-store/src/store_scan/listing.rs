//! The directory's store files. The listing of the directory is kept between scans and reused
//! while the directory's modification time is unchanged and was not recent when it was listed,
//! on a local file system ([`Listing`]; on NFS and the like every scrape lists the directory):
//! a scrape of a directory whose ranks are running costs one `statx` for the directory rather
//! than an `open`, the `getdents` and a `close` (a third of a scrape's time when the serving
//! process's caches are cold). A reused listing is always the directory's current one.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirEntryExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use super::StoreScan;
use crate::store::is_store_name;
use crate::sys;
use nixl_telemetry_base::sync::LockUnpoisoned;

/// What identifies a state of the directory: its device, inode and modification time (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DirStamp {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
}

impl DirStamp {
    fn of(meta: &fs::Metadata) -> DirStamp {
        DirStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// Store files of the directory and their inodes, shared by a listing and the scans that
/// reuse it (no copy of the paths per scrape).
pub(super) type StoreFiles = std::sync::Arc<[(PathBuf, u64)]>;

/// A listing of the directory's store files, reused while the directory keeps the stamp it had
/// before it was listed: creating, removing or renaming an entry sets the directory's
/// modification time. File systems keep that time at a coarse granularity (a clock tick, or a
/// second), so two changes within one granule leave the same time: a listing is trusted only
/// when its stamp was already [`RACY_MARGIN`] old when the listing started, so any later change
/// has a later time (the idea of git's "racily clean" index entries).
#[derive(Debug)]
pub(super) struct Listing {
    stamp: DirStamp,
    /// When the listing started (wall clock, as file times are).
    started: std::time::SystemTime,
    /// Whether the directory is on a local file system ([`sys::on_local_file_system`]): on
    /// another (NFS and the like), a changed directory may show its old time for a while, so
    /// its listing is never reused.
    local: bool,
    files: StoreFiles,
}

/// How old a directory's modification time must be when it is listed for the listing to be
/// reused: more than any file system's time granularity (one second for the coarsest).
const RACY_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

impl Listing {
    /// The number of files listed (those a scrape reusing the listing reads).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether the directory, now stamped `stamp`, still has this listing's entries.
    fn still_valid(&self, stamp: DirStamp) -> bool {
        let started_ns = self
            .started
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        self.local
            && stamp == self.stamp
            && self.stamp.mtime_ns + RACY_MARGIN.as_nanos() as i128 <= started_ns
    }
}

impl StoreScan {
    /// The directory's store files (regular files with a store's name; a symbolic link is not
    /// followed) and their inodes, but the files of other users already refused (see
    /// `foreign`). The listing of the previous scan is reused while the directory is unchanged
    /// (see [`Listing`]): one `statx` instead of an `open`, the `getdents` and a `close`.
    pub(super) fn store_files(&self) -> std::io::Result<StoreFiles> {
        let dir = &self.config.dir;
        let stamp = DirStamp::of(&fs::metadata(dir)?);
        let mut listing = self.listing.lock_unpoisoned();
        if let Some(l) = listing.as_ref().filter(|l| l.still_valid(stamp)) {
            return Ok(l.files.clone());
        }
        let started = std::time::SystemTime::now();
        let mut files = Vec::new();
        let mut foreign = self.foreign.lock_unpoisoned();
        foreign.start_listing((stamp.dev, stamp.ino));
        for entry in fs::read_dir(dir)?.flatten() {
            if !is_store_name(entry.file_name().as_bytes()) {
                continue;
            }
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path();
            if !foreign.is_refused(&path, entry.ino()) {
                files.push((path, entry.ino()));
            }
        }
        foreign.end_listing();
        let files: StoreFiles = files.into();
        *listing = Some(Listing {
            stamp,
            started,
            local: sys::on_local_file_system(dir),
            files: files.clone(),
        });
        Ok(files)
    }

    /// Leaves the files `refused` in this scan out of the listing they came from, `files`,
    /// when it is still the one a later scan would reuse.
    pub(super) fn leave_out(&self, files: &StoreFiles, refused: &[&std::path::Path]) {
        let mut listing = self.listing.lock_unpoisoned();
        if let Some(l) = listing
            .as_mut()
            .filter(|l| StoreFiles::ptr_eq(&l.files, files))
        {
            let refused: std::collections::HashSet<_> = refused.iter().copied().collect();
            l.files = l
                .files
                .iter()
                .filter(|(p, _)| !refused.contains(p.as_path()))
                .cloned()
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{config, set_dir_mtime, writer};
    use super::*;
    use crate::config::Aggregate;
    use nixl_telemetry_series::Buckets;
    use std::time::Duration;

    fn pids(scan: &StoreScan) -> Vec<i64> {
        scan.live_stores().iter().map(|s| s.pid).collect()
    }

    #[test]
    fn the_listing_is_reused_only_while_the_directory_is_unchanged_and_not_racy() {
        let dir = tempfile::tempdir().unwrap();
        let b = Buckets::default();
        let _a = writer(dir.path(), "a", 10, "0", &b);
        let scan = StoreScan::new(config(dir.path(), Duration::from_secs(30), Aggregate::None));
        // On a file system that is not local, every scan lists the directory (checked below).
        let local = sys::on_local_file_system(dir.path());
        // A directory changed long ago: its listing is kept.
        let old = std::time::SystemTime::now() - Duration::from_secs(60);
        set_dir_mtime(dir.path(), old);
        assert_eq!(pids(&scan), [10]);
        // A new store sets the directory's time: listed again.
        let _b = writer(dir.path(), "b", 11, "1", &b);
        assert_eq!(pids(&scan), [10, 11]);
        set_dir_mtime(dir.path(), old);
        assert_eq!(pids(&scan), [10, 11]);
        // A change that left the directory's time as it was (as one within the same time
        // granule would): the old listing is still used, which shows that it is reused.
        let _c = writer(dir.path(), "c", 12, "2", &b);
        set_dir_mtime(dir.path(), old);
        if local {
            assert_eq!(pids(&scan), [10, 11], "the listing is reused");
        } else {
            assert_eq!(
                pids(&scan),
                [10, 11, 12],
                "not reused off a local file system"
            );
            return;
        }
        // A time that was recent when the directory was listed is not trusted: the same kind
        // of change is seen.
        let recent = std::time::SystemTime::now();
        set_dir_mtime(dir.path(), recent);
        assert_eq!(pids(&scan), [10, 11, 12]);
        let _d = writer(dir.path(), "d", 13, "3", &b);
        set_dir_mtime(dir.path(), recent);
        assert_eq!(
            pids(&scan),
            [10, 11, 12, 13],
            "a racy listing is not reused"
        );
    }
}
