//! Helpers shared by the segment store's unit tests (`writer/tests.rs`) and its integration
//! tests (`tests/segments.rs`): a writer on a manual clock, rows of an exact length, and what a
//! directory of segments holds. A test hook (feature `test-util`), never in a shipped build.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{ManualClock, SegmentNaming, SegmentReader, SegmentWriter, WriterOptions};

/// A segment writer of `producer` under `prefix` on a manual clock at 0, with a 1 MiB buffer
/// and a 1 s flush interval.
pub fn writer(
    prefix: &Path,
    producer: &str,
    roll_bytes: u64,
    max_segments: usize,
) -> SegmentWriter {
    let options = WriterOptions {
        roll_bytes,
        max_segments,
        buffer_bytes: 1 << 20,
        flush_interval: Duration::from_secs(1),
    };
    clocked_writer(prefix, producer, options).0
}

/// A segment writer of `producer` under `prefix` with `options`, on the manual clock returned
/// with it (at 0).
pub fn clocked_writer(
    prefix: &Path,
    producer: &str,
    options: WriterOptions,
) -> (SegmentWriter, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(0));
    let naming = SegmentNaming::new(prefix, producer);
    let writer = SegmentWriter::open(naming, options, clock.clone()).unwrap();
    (writer, clock)
}

/// An event whose row (`{"timestamp":0,"event":"..."}\n`) is exactly `len` bytes.
pub fn event_of_row_len(len: usize) -> String {
    let overhead = r#"{"timestamp":0,"event":""}"#.len() + 1;
    "x".repeat(len - overhead)
}

/// The names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Every row of the segment at `path` as text, asserting that it is not truncated.
pub fn rows(path: &Path) -> Vec<String> {
    let (rows, outcome) = SegmentReader::read_rows(path).unwrap();
    assert_eq!(outcome.truncated, None, "{}", path.display());
    rows.into_iter()
        .map(|r| String::from_utf8(r).unwrap())
        .collect()
}

/// The path of `producer`'s segment `index` under the prefix `dir/fpm`.
pub fn segment(dir: &Path, producer: &str, index: u64) -> PathBuf {
    dir.join(format!("fpm.{producer}.{index:06}.jsonl.gz"))
}

/// One gzip member holding the row `{"timestamp":0,"event":<text>}`.
pub fn member_of(text: &str) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    writeln!(e, r#"{{"timestamp":0,"event":"{text}"}}"#).unwrap();
    e.finish().unwrap()
}

/// The regular files of `producer`'s segments under the prefix `dir/fpm`, by index, with
/// their sizes.
pub fn segment_sizes(dir: &Path, producer: &str) -> Vec<(u64, u64)> {
    let naming = SegmentNaming::new(&dir.join("fpm"), producer);
    let mut v: Vec<(u64, u64)> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let index = naming.parse_index(&e.file_name())?;
            let m = fs::symlink_metadata(e.path()).unwrap();
            m.is_file().then_some((index, m.len()))
        })
        .collect();
    v.sort();
    v
}
