//! Files of other users in the directory. A shared directory (mode 1777) lets anyone create
//! files with store names there; the scan never opens or serves them, and a scrape pays nothing
//! for the ones it has already refused, however many they are or however fast they come and go:
//!
//! - A refused file is remembered by its name and the inode number of its directory entry
//!   (`d_ino`, which the listing already has: no system call), and is not looked at again while
//!   the directory lists that name with that inode. A file replaced under its name (another
//!   inode) is looked at again. A listing leaves the remembered files out of the files a scrape
//!   reads, so a scrape that reuses the listing (the directory unchanged) does not even look
//!   them up.
//! - What is remembered is bounded by the directory: names the last listing did not have are
//!   forgotten (a listing holds every store name of the directory anyway).
//! - The log is a summary: at most one line every [`REPORT_INTERVAL`], with the number of files
//!   refused since the last line and the first of them, whatever the number of files or their
//!   churn.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The shortest time between two lines about files of other users.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(60);

/// A refused file's directory entry: its inode, and the listing that last had it.
#[derive(Debug)]
struct Refused {
    inode: u64,
    listing: u64,
}

/// The files of other users a scan has refused, and the summary not yet logged.
#[derive(Debug, Default)]
pub(super) struct ForeignFiles {
    /// By path.
    refused: HashMap<PathBuf, Refused>,
    /// The directory they are in (device, inode): another directory starts afresh.
    dir: Option<(u64, u64)>,
    /// The number of the current listing.
    listing: u64,
    /// Files refused since the last line, and the first of them with its owner.
    unreported: usize,
    first: Option<(PathBuf, u32)>,
    /// When the last line was logged (monotonic ns).
    last_report_ns: Option<u64>,
}

impl ForeignFiles {
    /// Starts a listing of the directory whose device and inode are `dir`.
    pub(super) fn start_listing(&mut self, dir: (u64, u64)) {
        if self.dir != Some(dir) {
            self.refused.clear();
            self.dir = Some(dir);
        }
        self.listing += 1;
    }

    /// Whether the entry `path` with inode `inode` is a file already refused (then kept for
    /// the current listing). A name that now has another inode is forgotten: its file is
    /// looked at again.
    pub(super) fn is_refused(&mut self, path: &Path, inode: u64) -> bool {
        let Some(r) = self.refused.get_mut(path) else {
            return false;
        };
        if r.inode == inode {
            r.listing = self.listing;
            return true;
        }
        self.refused.remove(path);
        false
    }

    /// Ends a listing: forgets the files it did not list.
    pub(super) fn end_listing(&mut self) {
        let listing = self.listing;
        self.refused.retain(|_, r| r.listing == listing);
    }

    /// Refuses `path`, whose directory entry has inode `inode`, owned by `uid`.
    pub(super) fn refuse(&mut self, path: &Path, inode: u64, uid: u32) {
        let listing = self.listing;
        self.refused
            .insert(path.to_owned(), Refused { inode, listing });
        self.unreported += 1;
        if self.first.is_none() {
            self.first = Some((path.to_owned(), uid));
        }
    }

    /// The number of files remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.refused.len()
    }

    /// Logs the files refused since the last line, unless a line was logged less than
    /// [`REPORT_INTERVAL`] before `now_ns`.
    pub(super) fn report(&mut self, dir: &Path, now_ns: u64) {
        let interval = REPORT_INTERVAL.as_nanos() as u64;
        if self.unreported == 0
            || self
                .last_report_ns
                .is_some_and(|last| now_ns.saturating_sub(last) < interval)
        {
            return;
        }
        let Some((first, uid)) = self.first.take() else {
            return;
        };
        log::warn!(
            "prometheus_mp: skipping {} files in {} owned by other users (the first: {}, owned \
             by uid {uid}); {} such files are in the directory. They are never opened again \
             while they are the same files, and this line comes at most once every {} s",
            self.unreported,
            dir.display(),
            first.display(),
            self.refused.len(),
            REPORT_INTERVAL.as_secs()
        );
        self.unreported = 0;
        self.last_report_ns = Some(now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{config, set_dir_mtime, writer};
    use super::super::StoreScan;
    use super::*;
    use crate::config::Aggregate;
    use nixl_telemetry_base::logging::{capture, warnings};
    use nixl_telemetry_base::sync::LockUnpoisoned;
    use nixl_telemetry_series::Buckets;
    use nixl_telemetry_test_support::other_user::{
        other_user, plant_store_files, planted_store_name, remove_store_files,
    };
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::Ordering;

    const SECOND: u64 = 1_000_000_000;

    /// The number of files named in a summary line ("skipping N files").
    fn count(line: &str) -> usize {
        let rest = line.split("skipping ").nth(1).expect("a summary line");
        rest.split(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn the_summary_comes_at_most_once_a_minute_and_counts_every_file() {
        let mut f = ForeignFiles::default();
        f.start_listing((1, 2));
        let dir = Path::new("/shared");
        let t0 = 5 * SECOND;
        let (_, logged) = capture(|| {
            // A file refused every second for five minutes.
            for s in 0..300u64 {
                f.refuse(&dir.join(format!("nixl.{s}.1.0.mmap")), s, 65534);
                f.report(dir, t0 + s * SECOND);
            }
        });
        let lines = warnings(&logged);
        // At 0, 60, 120, 180 and 240 s.
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert_eq!(count(lines[0]), 1);
        assert!(
            lines[0].contains("nixl.0.1.0.mmap, owned by uid 65534"),
            "{}",
            lines[0]
        );
        assert!(lines[1..].iter().all(|l| count(l) == 60), "{lines:?}");
        assert!(lines[4].contains("(the first: /shared/nixl.181.1.0.mmap"));
        // The 59 refused since the last line come with the next one, a minute after it.
        let (_, logged) = capture(|| {
            f.report(dir, t0 + 299 * SECOND);
            f.report(dir, t0 + 300 * SECOND);
        });
        let lines = warnings(&logged);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(count(lines[0]), 59);
        // Nothing new, nothing said.
        let (_, logged) = capture(|| f.report(dir, t0 + 1000 * SECOND));
        assert!(logged.is_empty(), "{logged:?}");
    }

    #[test]
    fn names_are_remembered_with_their_inode_for_the_listings_that_have_them() {
        let mut f = ForeignFiles::default();
        let (a, b) = (
            Path::new("/d/nixl.1.1.0.mmap"),
            Path::new("/d/nixl.2.1.0.mmap"),
        );
        f.start_listing((1, 2));
        f.refuse(a, 10, 7);
        f.refuse(b, 11, 7);
        f.end_listing();
        // Listed again with the same inodes: refused.
        f.start_listing((1, 2));
        assert!(f.is_refused(a, 10) && f.is_refused(b, 11));
        f.end_listing();
        assert_eq!(f.len(), 2);
        // `a` gone, `b` replaced (another inode): `a` forgotten, `b` looked at again.
        f.start_listing((1, 2));
        assert!(!f.is_refused(b, 12));
        f.end_listing();
        assert_eq!(f.len(), 0);
        // Another directory (its device and inode) starts afresh.
        f.start_listing((1, 2));
        f.refuse(a, 10, 7);
        f.start_listing((1, 3));
        assert!(!f.is_refused(a, 10));
    }

    #[test]
    fn another_users_store_is_skipped_with_one_warning_and_kept() {
        if crate::sys::euid() != 0 {
            eprintln!("skipped: not root, so a file cannot be given to another user");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let w = writer(dir.path(), "foreign", 9, "", &Buckets::default());
        let path = w.path().to_owned();
        drop(w);
        std::os::unix::fs::chown(&path, Some(12345), None).unwrap();
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        let (stores, logged) = capture(|| (scan.live_stores(), scan.live_stores()));
        assert!(stores.0.is_empty() && stores.1.is_empty());
        let lines = warnings(&logged);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("owned by uid 12345"), "{}", lines[0]);
        assert!(path.exists(), "never removed");
    }

    fn examined(scan: &StoreScan) -> u64 {
        scan.examined.load(Ordering::Relaxed)
    }

    /// 20,000 files of `nobody` with store names in a 1777 directory (issue 42, item 5: they
    /// cost 53 ms at every scrape, against 0.44 ms without them, and 16,384 warnings, then a line
    /// at every scrape; 200 new names every 0.1 s gave 3,982 warnings in 10 s). Here: the first
    /// scan looks at each file once and says so in one line; later scans, the directory listed
    /// again or not, look at none of them; under churn (200 new names and 200 gone between
    /// scans, 150 scans a second apart on a manual clock) each scan looks at the 200 new files
    /// only, and one line a minute sums them up; what is remembered is what the directory
    /// holds; a file replaced under a refused name is looked at again, and served when it is
    /// this user's. Needs root, to act as `nobody`.
    #[test]
    fn foreign_files_are_looked_at_once_and_summed_up_once_a_minute() {
        let uid = match other_user() {
            Ok((uid, _)) => uid,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        };
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("shared");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let mine = writer(&dir, "mine", 1, "", &Buckets::default());
        let store = std::fs::read(mine.path()).unwrap();
        const FOREIGN: usize = 20_000;
        plant_store_files(&dir, 0..FOREIGN, &store);
        // A directory unchanged for a minute: its listing is reused (see `listing`).
        set_dir_mtime(&dir, std::time::SystemTime::now() - Duration::from_secs(60));
        let scan = StoreScan::new(config(&dir, Duration::from_secs(3600), Aggregate::None));
        let t0 = crate::sys::monotonic_ns();

        let (first, logged) = capture(|| scan.scan_at(t0));
        assert_eq!(first.len(), 1, "only my store is served");
        assert_eq!(
            examined(&scan),
            FOREIGN as u64 + 1,
            "each file looked at once"
        );
        let lines = warnings(&logged);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(count(lines[0]), FOREIGN);
        assert!(
            lines[0].contains(&format!("owned by uid {uid}")),
            "{}",
            lines[0]
        );
        let reused = |scan: &StoreScan| scan.listing.lock_unpoisoned().as_ref().unwrap().len();
        assert_eq!(
            reused(&scan),
            1,
            "the listing a scrape reuses has my store only"
        );

        // The listing reused, then the directory listed again (the listing dropped, as a
        // change would): no file looked at, nothing said.
        let (served, logged) = capture(|| {
            let reused = scan.scan_at(t0 + SECOND);
            *scan.listing.lock_unpoisoned() = None;
            (reused.len(), scan.scan_at(t0 + SECOND).len())
        });
        assert_eq!(served, (1, 1));
        assert_eq!(reused(&scan), 1);
        assert_eq!(examined(&scan), FOREIGN as u64 + 1, "none looked at again");
        assert!(warnings(&logged).is_empty(), "{logged:?}");

        // Churn: 200 new names a scan, the previous 200 deleted.
        const ROUNDS: usize = 150;
        const CHURN: usize = 200;
        let mut lines = Vec::new();
        for round in 0..ROUNDS {
            let first_new = FOREIGN + round * CHURN;
            plant_store_files(&dir, first_new..first_new + CHURN, &store);
            if round > 0 {
                remove_store_files(&dir, first_new - CHURN..first_new);
            }
            let before = examined(&scan);
            let now = t0 + (2 + round as u64) * SECOND;
            let (served, logged) = capture(|| scan.scan_at(now));
            assert_eq!(served.len(), 1);
            assert_eq!(examined(&scan) - before, CHURN as u64, "round {round}");
            lines.extend(warnings(&logged).into_iter().map(str::to_owned));
        }
        // Scans at 2..=151 s; the last line was at 0 s: lines at 60 and 120 s, each counting
        // the files refused since the one before.
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(count(&lines[0]), 59 * CHURN, "{}", lines[0]);
        assert_eq!(count(&lines[1]), 60 * CHURN, "{}", lines[1]);
        assert_eq!(scan.foreign.lock_unpoisoned().len(), FOREIGN + CHURN);

        // Replaced under a refused name (renamed over it, so another inode): looked at again.
        let replace = |name: &str, uid: u32| {
            let tmp = base.path().join("replacement");
            std::fs::write(&tmp, &store).unwrap();
            std::os::unix::fs::chown(&tmp, Some(uid), None).unwrap();
            std::fs::rename(&tmp, dir.join(name)).unwrap();
        };
        replace(&planted_store_name(0), uid);
        let before = examined(&scan);
        let (served, logged) = capture(|| scan.scan_at(t0 + 200 * SECOND));
        assert_eq!((served.len(), examined(&scan) - before), (1, 1));
        assert_eq!(warnings(&logged).len(), 1, "{logged:?}");
        // Replaced by a store of this user: served.
        replace(&planted_store_name(1), crate::sys::euid());
        let served = scan.scan_at(t0 + 201 * SECOND);
        assert_eq!(served.len(), 2, "the replacement is served");
        assert_eq!(examined(&scan) - before, 2);
        drop(mine);
    }
}
