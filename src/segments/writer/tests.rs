//! The segment writer's own tests: rolling, restart, retention, symlinks planted at the next
//! name, the periodic flush, the row timestamp and write errors. How the FPM trace and the
//! `TRACE` exporter use the store, other readers of its files, other users' files and full
//! disks are tested through the public API in `tests/segments.rs`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use super::{SegmentWriter, WriterOptions};
use crate::segments::testing::{
    clocked_writer, event_of_row_len, member_of, names, rows, segment, segment_sizes, writer,
};
use crate::segments::{segments_of, ManualClock, SegmentNaming};

#[test]
fn a_row_landing_exactly_on_the_limit_stays_one_byte_more_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(&dir.path().join("a"), "p", 100, 10);
    w.push(&event_of_row_len(50));
    w.push(&event_of_row_len(50));
    assert_eq!(w.close().segments_rolled, 0);
    assert_eq!(names(dir.path()), ["a.p.000000.jsonl.gz"]);
    assert_eq!(rows(&dir.path().join("a.p.000000.jsonl.gz")).len(), 2);

    let mut w = writer(&dir.path().join("b"), "p", 100, 10);
    w.push(&event_of_row_len(50));
    w.push(&event_of_row_len(51));
    let stats = w.close();
    assert_eq!((stats.segments_rolled, stats.rows_written), (1, 2));
    let b: Vec<String> = names(dir.path())
        .into_iter()
        .filter(|n| n.starts_with("b."))
        .collect();
    assert_eq!(b, ["b.p.000000.jsonl.gz", "b.p.000001.jsonl.gz"]);
    assert_eq!(rows(&dir.path().join("b.p.000000.jsonl.gz"))[0].len(), 49);
    assert_eq!(rows(&dir.path().join("b.p.000001.jsonl.gz"))[0].len(), 50);
}

#[test]
fn an_oversized_row_sits_alone_in_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(&dir.path().join("fpm"), "p", 32, 10);
    let big = event_of_row_len(1024);
    w.push(&big);
    w.push(&event_of_row_len(30));
    w.push(&event_of_row_len(30));
    w.close();
    let first = rows(&segment(dir.path(), "p", 0));
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].len(), 1023, "written intact");
    assert!(first[0].contains(&big));
    assert_eq!(rows(&segment(dir.path(), "p", 1)).len(), 1);
    assert_eq!(rows(&segment(dir.path(), "p", 2)).len(), 1);
}

#[test]
fn a_row_longer_than_the_readers_bound_is_dropped_counted_and_the_next_rows_written() {
    use crate::segments::row::MAX_ROW_BYTES;
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(&dir.path().join("fpm"), "p", 64 << 20, 10);
    // The longest row the reader accepts is written; one byte more is not.
    w.push(&event_of_row_len(MAX_ROW_BYTES + 1));
    w.push(&event_of_row_len(MAX_ROW_BYTES + 2));
    w.push(&event_of_row_len(30));
    let stats = w.close();
    assert_eq!((stats.rows_written, stats.rows_too_long), (2, 1));
    let written = rows(&segment(dir.path(), "p", 0));
    assert_eq!(
        written.iter().map(String::len).collect::<Vec<_>>(),
        [MAX_ROW_BYTES, 29]
    );
}

#[test]
fn restart_continues_after_the_highest_index() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(segment(dir.path(), "p", 0), member_of("old")).unwrap();
    fs::write(segment(dir.path(), "p", 2), member_of("old")).unwrap();
    let mut w = writer(&dir.path().join("fpm"), "p", 1 << 20, 10);
    assert_eq!(w.index(), 3);
    w.push("row");
    w.close();
    assert_eq!(
        names(dir.path()),
        [
            "fpm.p.000000.jsonl.gz",
            "fpm.p.000002.jsonl.gz",
            "fpm.p.000003.jsonl.gz"
        ]
    );
    assert_eq!(rows(&segment(dir.path(), "p", 3)).len(), 1);
}

#[test]
fn a_flush_with_nothing_buffered_writes_no_member() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(&dir.path().join("fpm"), "p", 1 << 20, 10);
    w.flush();
    w.push("a");
    w.flush();
    w.flush();
    w.push("b");
    let stats = w.close();
    assert_eq!(stats.members_written, 2);
    assert_eq!(rows(&segment(dir.path(), "p", 0)).len(), 2);
}

#[test]
fn retention_of_one_keeps_only_the_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(&dir.path().join("fpm"), "p", 40, 1);
    for i in 0..5 {
        w.push(&event_of_row_len(35));
        w.flush();
        assert_eq!(
            names(dir.path()),
            [format!("fpm.p.{i:06}.jsonl.gz")],
            "after segment {i}"
        );
    }
    let stats = w.close();
    assert_eq!((stats.segments_rolled, stats.segments_pruned), (4, 4));
}

#[test]
fn retention_keeps_the_newest_segments_only_of_this_exact_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let keep = [
        "fpm.other.000000.jsonl.gz",
        "fpm.41920.000000.jsonl.gz",
        "fpm.p.000000.jsonl.gz.bak",
        "fpm.p.000001.jsonl",
        "fpm.p.0000001.jsonl.gz",
        "fpm.p_x.000000.jsonl.gz",
        "victim",
    ];
    for name in keep {
        fs::write(d.join(name), b"keep").unwrap();
    }
    fs::write(segment(d, "p", 0), b"old").unwrap();
    fs::write(segment(d, "p", 1), b"old").unwrap();
    fs::create_dir(segment(d, "p", 2)).unwrap();
    symlink(d.join("victim"), segment(d, "p", 3)).unwrap();
    let mut w = writer(&d.join("fpm"), "p", 40, 2);
    assert_eq!(w.index(), 4, "directories and symlinks take up indexes");
    w.push(&event_of_row_len(35));
    w.flush();
    // Regular files 0, 1 and the active 4: the oldest one goes.
    assert!(!segment(d, "p", 0).exists());
    assert!(segment(d, "p", 1).exists());
    w.push(&event_of_row_len(35));
    w.flush();
    assert!(!segment(d, "p", 1).exists());
    let stats = w.close();
    assert_eq!(stats.segments_pruned, 2);
    for name in keep {
        assert_eq!(fs::read(d.join(name)).unwrap(), b"keep", "{name}");
    }
    assert!(segment(d, "p", 2).is_dir());
    assert!(fs::symlink_metadata(segment(d, "p", 3))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(segment(d, "p", 4).is_file() && segment(d, "p", 5).is_file());
}

#[test]
fn a_symlink_planted_at_the_next_segment_name_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("victim"), b"precious").unwrap();
    let mut w = writer(&d.join("fpm"), "p", 1 << 20, 10);
    assert_eq!(w.index(), 0);
    // Planted after the writer chose its index, before the segment is created.
    symlink(d.join("victim"), segment(d, "p", 0)).unwrap();
    w.push("row");
    w.flush();
    assert_eq!(w.index(), 1);
    w.close();
    assert_eq!(fs::read(d.join("victim")).unwrap(), b"precious");
    assert_eq!(rows(&segment(d, "p", 1)).len(), 1);
    assert_eq!(segments_of(&d.join("fpm.p")).unwrap(), [segment(d, "p", 1)]);
}

#[test]
fn the_row_timestamp_is_ms_since_the_writer_opened_and_survives_a_roll() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    clock.advance_ms(5_000);
    let mut w = SegmentWriter::open(
        SegmentNaming::new(&dir.path().join("fpm"), "p"),
        WriterOptions::new(40, 10),
        clock.clone(),
    )
    .unwrap();
    w.push(&event_of_row_len(35));
    clock.advance_ms(1_500);
    w.push(&event_of_row_len(36));
    w.close();
    assert!(rows(&segment(dir.path(), "p", 0))[0].starts_with(r#"{"timestamp":0,"#));
    assert!(rows(&segment(dir.path(), "p", 1))[0].starts_with(r#"{"timestamp":1500,"#));
}

#[test]
fn the_periodic_flush_follows_the_clock_and_the_buffer_size() {
    let dir = tempfile::tempdir().unwrap();
    let options = WriterOptions {
        buffer_bytes: 1000,
        ..WriterOptions::new(1 << 30, 4)
    };
    let (mut w, clock) = clocked_writer(&dir.path().join("fpm"), "p", options);
    w.push("a");
    w.tick();
    assert_eq!(w.stats().members_written, 0, "not due yet");
    clock.advance_ms(1000);
    w.tick();
    assert_eq!(w.stats().members_written, 1);
    w.tick();
    assert_eq!(w.stats().members_written, 1, "nothing buffered");
    for _ in 0..10 {
        w.push(&event_of_row_len(100));
    }
    assert_eq!(
        w.stats().members_written,
        2,
        "1000 bytes buffered: flushed at once"
    );
    assert_eq!(w.buffered_rows(), 0);
}

#[test]
fn a_write_error_loses_only_that_batch_and_the_writer_keeps_going() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    fs::create_dir(&out).unwrap();
    // A file takes the directory's place before the first segment is created: the directory
    // cannot be made again, and that batch is lost.
    let mut w = writer(&out.join("fpm"), "p", 1 << 20, 10);
    fs::remove_dir_all(&out).unwrap();
    fs::write(&out, "in the way").unwrap();
    w.push("lost");
    w.push("lost too");
    w.flush();
    let stats = w.stats();
    assert_eq!((stats.write_errors, stats.rows_lost), (1, 2));
    fs::remove_file(&out).unwrap();
    fs::create_dir(&out).unwrap();
    w.push("kept");
    w.flush();
    let stats = w.close();
    assert_eq!((stats.write_errors, stats.rows_written), (1, 1));
    assert_eq!(
        rows(&segment(&out, "p", 0)),
        [r#"{"timestamp":0,"event":"kept"}"#]
    );
}

#[test]
fn a_planted_segment_at_the_highest_index_does_not_silence_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Any user can create these under the default /tmp prefix.
    for index in [u64::MAX, u64::MAX - 1, 10u64.pow(19)] {
        fs::write(segment(d, "p", index), b"").unwrap();
    }
    let mut w = writer(&d.join("fpm"), "p", 1 << 20, 4);
    w.push("row");
    w.flush();
    let stats = w.close();
    assert_eq!((stats.rows_written, stats.rows_lost), (1, 0), "{stats:?}");
    assert_eq!(
        rows(&segment(d, "p", 0)),
        [r#"{"timestamp":0,"event":"row"}"#]
    );
    assert_eq!(
        segments_of(&d.join("fpm.p")).unwrap(),
        [segment(d, "p", 0)],
        "such an index is no segment of ours"
    );
}

#[test]
fn retention_goes_on_past_a_segment_it_cannot_delete() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for index in 0..3 {
        fs::write(segment(d, "p", index), member_of(&format!("old {index}"))).unwrap();
    }
    // An immutable file cannot be deleted, even by root.
    let stuck = segment(d, "p", 0);
    let immutable = Command::new("chattr").arg("+i").arg(&stuck).status();
    if !immutable.is_ok_and(|s| s.success()) {
        eprintln!("skipped: `chattr +i` is not available here (needs root and ext2/3/4, xfs...)");
        return;
    }
    struct Mutable(PathBuf);
    impl Drop for Mutable {
        fn drop(&mut self) {
            let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
        }
    }
    let _mutable = Mutable(stuck.clone());
    let mut w = writer(&d.join("fpm"), "p", 40, 2);
    for _ in 0..6 {
        w.push(&event_of_row_len(35));
        w.flush();
    }
    let stats = w.close();
    // The stuck segment is not this writer's history any more: two others are kept.
    let left: Vec<u64> = segment_sizes(d, "p").iter().map(|s| s.0).collect();
    assert_eq!(left, [0, 7, 8], "{stats:?}");
    assert_eq!(stats.segments_pruned, 6);
}

/// A writer of 1 GiB segments with prefix `<dir>/out/fpm` on a manual clock, flushing every
/// `flush_ms`, that has written `rows` rows into its segment 0 (`<dir>/out/fpm.p.000000...`).
struct Written {
    dir: tempfile::TempDir,
    writer: SegmentWriter,
    clock: Arc<ManualClock>,
}

impl Written {
    fn new(flush_ms: u64, rows: usize) -> Written {
        let dir = tempfile::tempdir().unwrap();
        let options = WriterOptions {
            flush_interval: Duration::from_millis(flush_ms),
            ..WriterOptions::new(1 << 30, 4)
        };
        let (mut writer, clock) = clocked_writer(&dir.path().join("out/fpm"), "p", options);
        for _ in 0..rows {
            writer.push("a");
        }
        writer.flush();
        Written { dir, writer, clock }
    }

    /// The writer's segment `index`.
    fn segment(&self, index: u64) -> PathBuf {
        segment(&self.dir.path().join("out"), "p", index)
    }

    /// Rows in every segment at its path in `<dir>/out`.
    fn rows_on_disk(&self) -> usize {
        let Ok(entries) = fs::read_dir(self.dir.path().join("out")) else {
            return 0;
        };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl.gz"))
            .map(|e| rows(&e.path()).len())
            .sum()
    }
}

/// The one warning among `logged`.
fn one_warning(logged: &[(log::Level, String)]) -> &str {
    let warned = crate::logging::warnings(logged);
    assert_eq!(warned.len(), 1, "{logged:?}");
    warned[0]
}

#[test]
fn rows_of_a_deleted_segment_are_counted_lost_and_writing_goes_on_in_a_new_one() {
    let mut w = Written::new(1000, 3);
    fs::remove_file(w.segment(0)).unwrap();
    // At once, not a second later: the next member is never written into the unlinked file.
    w.writer.push("b");
    w.writer.push("b");
    let (_, logged) = crate::logging::capture(|| w.writer.flush());
    let stats = w.writer.stats();
    assert_eq!((stats.rows_written, stats.rows_lost), (2, 3));
    assert_eq!(w.rows_on_disk(), 2, "written == on disk");
    assert_eq!(rows(&w.segment(1)).len(), 2);
    let warning = one_warning(&logged);
    let said = [
        "fpm.p.000000.jsonl.gz was deleted",
        "the 3 rows written into it are lost",
    ];
    assert!(said.iter().all(|s| warning.contains(s)), "{warning}");
}

#[test]
fn a_deleted_directory_is_made_again_and_its_rows_counted_lost() {
    use std::os::unix::fs::PermissionsExt;
    let mut w = Written::new(1000, 2);
    let out = w.dir.path().join("out");
    fs::remove_dir_all(&out).unwrap();
    w.writer.push("b");
    w.writer.flush();
    let stats = w.writer.stats();
    assert_eq!((stats.rows_written, stats.rows_lost), (1, 2));
    assert_eq!(w.rows_on_disk(), 1, "written == on disk");
    let mode = fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn an_idle_writer_notices_within_a_second_without_flushing() {
    // A flush every minute: only the path check can notice anything in between.
    let mut w = Written::new(60_000, 1);
    fs::remove_file(w.segment(0)).unwrap();
    w.clock.advance_ms(999);
    w.writer.tick();
    assert_eq!(w.writer.stats().rows_lost, 0, "not due yet");
    assert_eq!(
        w.writer.next_tick_due(),
        Duration::from_secs(1),
        "the check is what is due next"
    );
    w.clock.advance_ms(1);
    w.writer.tick();
    let stats = w.writer.stats();
    assert_eq!((stats.rows_written, stats.rows_lost), (0, 1));
    assert_eq!(stats.members_written, 1, "no flush ran");
    // Nothing follows: no new segment is made for nothing.
    let Written { dir, writer, .. } = w;
    writer.close();
    assert!(names(&dir.path().join("out"))
        .iter()
        .all(|n| !n.ends_with(".jsonl.gz")));
}

#[test]
fn a_file_renamed_over_the_segment_is_left_alone_and_the_rows_counted_lost() {
    let w = Written::new(1000, 1);
    let theirs = w.dir.path().join("theirs");
    fs::write(&theirs, b"another file").unwrap();
    fs::rename(&theirs, w.segment(0)).unwrap();
    let segment = w.segment(0);
    let Written {
        dir: _dir, writer, ..
    } = w;
    let (stats, logged) = crate::logging::capture(|| writer.close());
    assert_eq!((stats.rows_written, stats.rows_lost), (0, 1));
    assert_eq!(fs::read(&segment).unwrap(), b"another file");
    let warning = one_warning(&logged);
    assert!(
        warning.contains("was replaced by another file"),
        "{warning}"
    );
}
