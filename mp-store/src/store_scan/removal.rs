//! Which stores are served, and the removal of the others: a store is served while its writer
//! holds its lock or for the stale TTL after its last update (the lock is probed only past the
//! TTL); a store past it whose writer is gone is removed, and so is an invalid file (too small,
//! of another schema or magic) that nobody holds. A store whose native part is not valid is
//! served without its native histograms (one warning). A store read in the middle of a
//! publication at every try, with no earlier values of it kept
//! ([`ReadOutcome::InUpdate`]), is skipped for that scrape while its writer lives (counted,
//! [`skipped_mid_update`]); a writer that died in the middle of one left it as it will stay,
//! and it is served so, without its native histograms.

use std::fs;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::StoreScan;
use crate::reader::{ReadOutcome, StoreView};
use crate::sys;

/// Stores skipped by this process's scans because their writer was in the middle of a
/// publication at every try (see the module documentation).
static SKIPPED_MID_UPDATE: AtomicU64 = AtomicU64::new(0);

/// How many times this process's scans skipped a store because its writer was in the middle of
/// a publication at every try and no earlier values of it were kept (`/health` gives it).
pub(super) fn skipped_mid_update() -> u64 {
    SKIPPED_MID_UPDATE.load(Ordering::Relaxed)
}

impl StoreScan {
    /// Whether a store whose heartbeat is `last_update_ns` is served without its writer.
    fn fresh(&self, last_update_ns: u64, now: u64) -> bool {
        now >= last_update_ns && now - last_update_ns <= self.ttl_ns
    }

    /// What to do with a store file's outcome: `Some` to serve it; removes it when it is stale
    /// or invalid and its writer is gone.
    pub(super) fn judge(
        &self,
        path: &Path,
        file: &File,
        outcome: ReadOutcome,
        now: u64,
    ) -> Option<StoreView> {
        match outcome {
            ReadOutcome::InUpdate(_) if writer_alive(file) => {
                SKIPPED_MID_UPDATE.fetch_add(1, Ordering::Relaxed);
                None
            }
            // Its writer died in the middle of a publication: what it left is final.
            ReadOutcome::InUpdate(view) => self.judge(path, file, ReadOutcome::Valid(view), now),
            ReadOutcome::Valid(view) => {
                if let Some(why) = &view.native_problem {
                    self.warn_once(
                        path,
                        &format!(
                            "only its native histograms, as {why} (its other series are served)"
                        ),
                    );
                }
                // Updated within the TTL: served whether its writer lives or not, so the lock
                // is probed only past it.
                if self.fresh(view.last_update_ns, now) || writer_alive(file) {
                    return Some(*view);
                }
                log::info!(
                    "prometheus_mp: removing the store of departed process {} ({}): no update \
                     for longer than the stale TTL",
                    view.pid,
                    path.display()
                );
                let _ = fs::remove_file(path);
                None
            }
            ReadOutcome::Invalid { reason, quiet } => {
                if !quiet {
                    self.warn_once(path, &reason);
                }
                if !writer_alive(file) {
                    let _ = fs::remove_file(path);
                }
                None
            }
        }
    }
}

/// Whether a store's writer holds its lock (it is alive): the probe takes the lock only when
/// the writer is gone, and gives it back at once (the file stays open for the next scan). A
/// probe that fails counts as alive.
fn writer_alive(file: &File) -> bool {
    match sys::try_lock_exclusive(file) {
        Ok(true) => {
            sys::unlock(file);
            false
        }
        Ok(false) | Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{config, writer};
    use super::*;
    use crate::config::Aggregate;
    use nixl_telemetry_series::Buckets;
    use std::path::PathBuf;
    use std::time::Duration;

    #[test]
    fn liveness_is_the_lock_then_the_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let b = Buckets::default();
        let live = writer(dir.path(), "live", 1, "", &b);
        let gone = writer(dir.path(), "gone", 2, "", &b);
        let gone_path = gone.path().to_owned();
        drop(gone);
        // Within a long TTL a departed writer's store is still served.
        let long = StoreScan::new(config(
            dir.path(),
            Duration::from_secs(3600),
            Aggregate::None,
        ));
        let names = |c: &StoreScan| -> Vec<String> {
            c.live_stores()
                .iter()
                .map(|s| s.snapshot.agent_name.to_string())
                .collect()
        };
        assert_eq!(names(&long), ["live", "gone"]);
        assert!(gone_path.exists());
        // With TTL 0 it is stale: removed; the live writer stays whatever its age.
        let zero = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        assert_eq!(names(&zero), ["live"]);
        assert!(!gone_path.exists());
        assert!(live.path().exists());
        assert_eq!(names(&zero), ["live"]);
        // An empty directory, or a missing one (one warning), gives an empty page.
        drop(live);
        assert_eq!(zero.scrape(), "");
        let missing = StoreScan::new(config(
            &dir.path().join("nope"),
            Duration::ZERO,
            Aggregate::None,
        ));
        let (pages, logged) =
            nixl_telemetry_base::logging::capture(|| (missing.scrape(), missing.scrape()));
        assert_eq!(pages, (String::new(), String::new()));
        assert_eq!(nixl_telemetry_base::logging::warnings(&logged).len(), 1);
    }

    /// A store file of schema 2 in `dir` (unknown to this reader), and the descriptor holding
    /// its lock (its writer, alive while it is open).
    fn held_store_of_schema_2(dir: &Path) -> (PathBuf, File) {
        let mut schema2 = vec![0u8; crate::layout::STORE_SIZE];
        schema2[..8].copy_from_slice(b"NIXLMPS1");
        schema2[8] = 2;
        let path = dir.join("nixl.7.1.0.mmap");
        std::fs::write(&path, &schema2).unwrap();
        let holder = crate::sys::open_file(&path, false).unwrap();
        assert!(crate::sys::try_lock_exclusive(&holder).unwrap());
        (path, holder)
    }

    #[test]
    fn bad_files_are_skipped_with_one_warning_and_removed_when_unheld() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("nixl.5.1.0.mmap");
        std::fs::write(&small, [1u8; 16]).unwrap();
        let zero = dir.path().join("nixl.6.1.0.mmap");
        std::fs::write(&zero, vec![0u8; crate::layout::STORE_SIZE]).unwrap();
        let (held, _holder) = held_store_of_schema_2(dir.path());
        std::fs::write(dir.path().join("not-a-store.txt"), "x").unwrap();
        std::os::unix::fs::symlink(&held, dir.path().join("nixl.8.1.0.mmap")).unwrap();
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        let (stores, logged) = nixl_telemetry_base::logging::capture(|| {
            let first = scan.live_stores();
            (first, scan.live_stores())
        });
        assert!(stores.0.is_empty() && stores.1.is_empty());
        let warnings = nixl_telemetry_base::logging::warnings(&logged);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings.iter().any(|w| w.contains("16 bytes")),
            "{warnings:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("schema 2")),
            "{warnings:?}"
        );
        // Unheld invalid files are gone; the held one, other files and the link stay.
        assert!(!small.exists() && !zero.exists());
        assert!(held.exists());
        assert!(dir.path().join("not-a-store.txt").exists());
        assert!(dir
            .path()
            .join("nixl.8.1.0.mmap")
            .symlink_metadata()
            .is_ok());
    }
}
