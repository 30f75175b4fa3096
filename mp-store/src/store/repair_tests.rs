//! A store that another process truncated, deleted or replaced (played here with the same
//! system calls, from the test's own thread) is made again from the writer's copy: the host
//! process gets no signal, nothing recorded is lost, one warning says so, and the other file,
//! when there is one, is left alone. The intervals are the writer's: a check of the path is
//! made "a second later" by passing a later instant.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use nixl_telemetry_base::{Event, EventType};
use nixl_telemetry_series::Buckets;

use super::tests::{identity, mapped_word};
use super::*;
use crate::layout::*;
use crate::reader::{read_store, ReadOutcome};

/// One transfer: its four events.
fn transfer(us: u64) -> [Event; 4] {
    [
        Event::new(EventType::AgentXferTime, us),
        Event::new(EventType::AgentXferPostTime, us / 4),
        Event::new(EventType::AgentTxBytes, 10 * us),
        Event::new(EventType::AgentTxRequestsNum, 1),
    ]
}

/// A writer keeping native histograms, with 3 transfers applied.
fn writer(dir: &Path) -> StoreWriter {
    let w = StoreWriter::create_with(dir, &identity("a"), &Buckets::default(), true).unwrap();
    for us in [10, 200, 3000] {
        w.apply(&transfer(us));
    }
    w
}

/// A writer of [`writer`] in a directory of its own, with its store's path.
fn fresh() -> (tempfile::TempDir, StoreWriter, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(dir.path());
    let path = w.path();
    (dir, w, path)
}

/// The transfers, the native count and the transmitted bytes the store at `path` holds.
fn held(path: &Path) -> (u64, u64, u64) {
    let ReadOutcome::Valid(view) = read_store(path).unwrap() else {
        panic!("{} is not a valid store", path.display())
    };
    let s = &view.snapshot;
    (
        s.counter(EventType::AgentTxRequestsNum),
        s.native.as_ref().unwrap()[0].count(),
        s.counter(EventType::AgentTxBytes),
    )
}

/// `w`'s check of its path, as it is made once [`CHECK_INTERVAL`] has passed since the last.
fn check_later(w: &StoreWriter) {
    let mut state = w.state.lock_unpoisoned();
    let later = Instant::now().max(state.checked_at + CHECK_INTERVAL);
    state.repair(&w.dir, later, false);
}

/// Truncates (or extends) the file at `path` to `len` bytes, as another process can.
fn cut(path: &Path, len: u64) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(len).unwrap();
}

/// The one warning `logged` holds, which says each of `says`.
fn the_warning(logged: &[(log::Level, String)], says: &[&str]) -> String {
    let warnings = nixl_telemetry_base::logging::warnings(logged);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    for said in says {
        assert!(warnings[0].contains(said), "{}", warnings[0]);
    }
    warnings[0].to_owned()
}

fn inode(path: &Path) -> u64 {
    std::fs::symlink_metadata(path).unwrap().ino()
}

/// Truncated to inside the first page (the counters' page: no write there faults), to
/// nothing, to inside the second page, to NIXL's size (the extensions gone), and emptied then
/// made long again (all zeros, the size right): each noticed before the next batch is written,
/// and made whole again in place (same name and inode).
#[test]
fn a_truncated_store_is_made_whole_again_in_place() {
    for len in [
        Some(100),
        Some(0),
        Some(5000),
        Some(STORE_SIZE as u64),
        None,
    ] {
        let (_dir, w, path) = fresh();
        let ino = inode(&path);
        let full = std::fs::metadata(&path).unwrap().len();
        cut(&path, len.unwrap_or(0));
        if len.is_none() {
            cut(&path, full);
        }
        let ((), logged) = nixl_telemetry_base::logging::capture(|| {
            w.apply(&transfer(50));
            w.apply(&transfer(60));
        });
        the_warning(
            &logged,
            &[
                "was truncated by another process",
                "nothing recorded is lost",
            ],
        );
        assert_eq!((w.path(), inode(&path)), (path.clone(), ino), "to {len:?}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), full);
        assert_eq!(held(&path), (5, 5, 33_200), "to {len:?}");
    }
}

/// The idle check (the exporter's tick) notices a truncation without a batch, and so does the
/// last one when the writer is dropped.
#[test]
fn a_truncation_is_noticed_while_idle_and_at_close() {
    for at_close in [false, true] {
        let (_dir, w, path) = fresh();
        cut(&path, 100);
        match at_close {
            false => w.check(),
            true => drop(w),
        }
        assert_eq!(held(&path), (3, 3, 32_100));
    }
}

/// A publication already under way when the file is truncated writes past its end: the SIGBUS
/// guard absorbs the faults (the process would die without it), the writer notices, and the
/// next batch makes the store whole again.
#[test]
fn a_write_into_a_truncated_store_faults_into_the_guard() {
    let (_dir, w, path) = fresh();
    cut(&path, 0);
    {
        // As a publication does, but without the check that comes before it.
        let mut state = w.state.lock_unpoisoned();
        let State { values, file, .. } = &mut *state;
        values.apply(&transfer(70));
        values.publish(file.as_ref().unwrap());
        assert_eq!(
            file.as_ref().unwrap().damage(false),
            Some(Damage::Truncated)
        );
    }
    w.apply(&transfer(80));
    assert_eq!(held(&path), (5, 5, 33_600));
}

/// Deleted, or its directory deleted: made again under its name at the next check of the
/// path (a second later), whether the agent records or is idle, and at close.
#[test]
fn a_deleted_store_is_made_again_under_its_name() {
    for (whole_dir, how) in [
        (false, "batch"),
        (false, "idle"),
        (false, "close"),
        (true, "batch"),
    ] {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("mp");
        std::fs::create_dir(&dir).unwrap();
        let w = writer(&dir);
        let path = w.path();
        match whole_dir {
            true => std::fs::remove_dir_all(&dir).unwrap(),
            false => std::fs::remove_file(&path).unwrap(),
        }
        // Before the path's check is due, a batch is published into the deleted file.
        w.apply(&transfer(40));
        assert!(!path.exists(), "{how}");
        let (_, logged) = nixl_telemetry_base::logging::capture(|| match how {
            "batch" => {
                check_later(&w);
                w.apply(&transfer(41));
                Some(w)
            }
            "idle" => {
                check_later(&w);
                Some(w)
            }
            _ => {
                drop(w);
                None
            }
        });
        the_warning(&logged, &["was deleted by another process"]);
        let transfers = if how == "batch" { 5 } else { 4 };
        assert_eq!(held(&path).0, transfers, "{how}, whole dir {whole_dir}");
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}

/// Another file renamed over the store's name, or a link put there: the store is made again
/// under a new instance number, and the other file is neither written nor deleted.
#[test]
fn a_replaced_store_is_made_again_under_a_new_name() {
    for link in [false, true] {
        let (dir, w, path) = fresh();
        let planted = dir.path().join("planted");
        std::fs::write(&planted, b"not a store").unwrap();
        match link {
            false => std::fs::rename(&planted, &path).unwrap(),
            true => {
                std::fs::remove_file(&path).unwrap();
                std::os::unix::fs::symlink(&planted, &path).unwrap();
            }
        }
        let (_, logged) = nixl_telemetry_base::logging::capture(|| {
            check_later(&w);
            w.apply(&transfer(90));
        });
        let warning = the_warning(&logged, &["was replaced by another file"]);
        let renamed: PathBuf = w.path();
        assert_ne!(renamed, path);
        assert!(warning.contains(&renamed.display().to_string()));
        assert_eq!(held(&renamed), (4, 4, 33_000));
        let ReadOutcome::Valid(view) = read_store(&renamed).unwrap() else {
            panic!()
        };
        assert_eq!(view.instance.to_string(), renamed_instance(&renamed));
        // The other file, as it was.
        let target = if link { &planted } else { &path };
        assert_eq!(std::fs::read(target).unwrap(), b"not a store");
    }
}

/// The instance number in a store's file name.
fn renamed_instance(path: &Path) -> String {
    let name = path.file_name().unwrap().to_str().unwrap();
    name.split('.').nth(3).unwrap().to_owned()
}

/// Damage after damage: one warning for the writer's life, and the values still whole.
#[test]
fn one_warning_for_the_writers_life() {
    let (_dir, w, path) = fresh();
    let (_, logged) = nixl_telemetry_base::logging::capture(|| {
        for round in 0..5 {
            std::fs::remove_file(&path).unwrap();
            check_later(&w);
            cut(&path, 10 * round);
            w.apply(&transfer(5));
        }
    });
    assert_eq!(nixl_telemetry_base::logging::warnings(&logged).len(), 1);
    assert_eq!(held(&path).0, 8);
    // And the publication sequence is even.
    let (_, sequence_at) = super::tests::placed(&w);
    let sequence = mapped_word(&w, sequence_at + SEQUENCE_OFF_VALUE).load(Ordering::Relaxed);
    assert_eq!(sequence % 2, 0);
}

/// A store that cannot be made again (its directory's name taken by a file): one warning, a
/// try every check, and once the name is free again the store is back with everything.
#[test]
fn a_store_that_cannot_be_made_again_is_retried_at_every_check() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("mp");
    std::fs::create_dir(&dir).unwrap();
    let w = writer(&dir);
    let path = w.path();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"a file").unwrap();
    let (_, logged) = nixl_telemetry_base::logging::capture(|| {
        for _ in 0..3 {
            check_later(&w);
            w.apply(&transfer(7));
        }
    });
    the_warning(&logged, &["cannot be made again", "retrying every 1 s"]);
    std::fs::remove_file(&dir).unwrap();
    let (_, logged) = nixl_telemetry_base::logging::capture(|| check_later(&w));
    assert_eq!(nixl_telemetry_base::logging::warnings(&logged).len(), 1);
    assert_eq!(held(&path).0, 6);
}
