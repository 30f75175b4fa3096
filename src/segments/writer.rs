//! The rolling gzip JSONL segment writer, shared by the FPM trace and the NIXL `TRACE` exporter.
//!
//! Files are `<prefix>.<producer>.<index>.jsonl.gz` ([`SegmentNaming`]). Rows are batched in
//! memory and written as **one complete gzip member per flush** (every second, when 1 MiB is
//! buffered, before a roll, at close; never an empty member), so a segment is a concatenation of
//! members and every reader must accept multi-member gzip (`gzip -cd`, Python's `gzip`, flate2's
//! `MultiGzDecoder`).
//!
//! - **Rolling** counts uncompressed bytes, newlines included: the writer rolls *before* a row
//!   that would push the segment over the threshold; a row landing exactly on it stays. A row
//!   larger than the threshold goes intact into an otherwise empty segment.
//! - **Creation** is lazy (the first non-empty flush of a segment) and uses create-new: a name
//!   that already exists (a file, a directory, a symlink) is skipped to the next index, never
//!   followed or appended to. The handle stays open for the segment's life.
//! - **Restart** starts at one more than the highest index present for this exact prefix, so a
//!   segment whose tail was truncated by a crash is never extended.
//! - **Retention**: after the first successful write into each new segment (including the first
//!   one, so leftovers of an earlier run are pruned too), the oldest regular files matching this
//!   exact prefix are deleted until `max_segments` remain, the active one included. Other
//!   producers' files, other extensions, directories and symlinks are never touched (they do use
//!   up indexes). The active segment itself is never deleted.
//! - **Write errors** (disk full, I/O error) lose that batch, which is counted (`write_errors`,
//!   `rows_lost`) and logged once per streak of failures; the writer keeps going. If the error
//!   happened while appending to an open segment, that segment is abandoned and the next batch
//!   starts a new one: a partial member is only ever the last thing in a file, so every member
//!   before it stays readable by standard tools.
//! - **Durability**: no `fsync`; see the module documentation of [`crate::trace`].

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flate2::write::GzEncoder;
use flate2::Compression;
use serde::Serialize;

use crate::trace::clock::Clock;
use crate::trace::envelope::encode_row;

/// The segment file extension.
pub const SEGMENT_SUFFIX: &str = ".jsonl.gz";
/// Minimum number of digits of a segment index.
pub const INDEX_DIGITS: usize = 6;
/// Default in-memory batch size that triggers an early flush.
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 20;
/// Default flush cadence.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// gzip level of every member.
pub const GZIP_LEVEL: u32 = 6;

/// Replaces every character outside `[A-Za-z0-9_-]` by `_` (one per character, so a non-ASCII
/// character becomes one `_`); an empty id becomes `unknown`.
pub fn sanitize_producer(producer_id: &str) -> String {
    if producer_id.is_empty() {
        return "unknown".to_owned();
    }
    producer_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Removes one trailing `.jsonl.gz`, or else one trailing `.jsonl`.
fn strip_jsonl_suffix(bytes: &[u8]) -> &[u8] {
    bytes
        .strip_suffix(b".jsonl.gz")
        .or_else(|| bytes.strip_suffix(b".jsonl"))
        .unwrap_or(bytes)
}

/// What occupies a matching name in the output directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentEntry {
    /// The segment index.
    pub index: u64,
    /// Its path.
    pub path: PathBuf,
    /// True for a regular file (not a directory, not a symlink): only those are pruned.
    pub is_file: bool,
}

/// Names the segments of one producer: `<dir>/<stem>.<index:06>.jsonl.gz`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentNaming {
    dir: PathBuf,
    stem: OsString,
}

impl SegmentNaming {
    /// The naming for `producer_id` under the output prefix `output_path` (a trailing
    /// `.jsonl.gz` or `.jsonl` is removed; the producer id is sanitized). A relative prefix is
    /// relative to the working directory; a prefix ending in `/` gives hidden file names
    /// (`dir/.<producer>...`).
    pub fn new(output_path: &Path, producer_id: &str) -> SegmentNaming {
        let mut prefix = strip_jsonl_suffix(output_path.as_os_str().as_bytes()).to_vec();
        prefix.push(b'.');
        prefix.extend_from_slice(sanitize_producer(producer_id).as_bytes());
        let prefix = PathBuf::from(OsString::from_vec(prefix));
        let dir = match prefix.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        let stem = prefix
            .file_name()
            .map(OsStr::to_owned)
            .unwrap_or_else(|| OsString::from("unknown"));
        SegmentNaming { dir, stem }
    }

    /// The directory holding the segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The producer prefix: `<dir>/<stem>` (segment names add `.<index>.jsonl.gz`).
    pub fn prefix(&self) -> PathBuf {
        self.dir.join(&self.stem)
    }

    /// The file name of segment `index`.
    pub fn file_name(&self, index: u64) -> OsString {
        let mut name = self.stem.clone();
        name.push(format!(".{index:0INDEX_DIGITS$}{SEGMENT_SUFFIX}"));
        name
    }

    /// The path of segment `index`.
    pub fn path(&self, index: u64) -> PathBuf {
        self.dir.join(self.file_name(index))
    }

    /// The index of `file_name` if it is exactly one of this producer's segment names (at least
    /// six digits, and no extra leading zero beyond that padding).
    pub fn parse_index(&self, file_name: &OsStr) -> Option<u64> {
        let rest = file_name
            .as_bytes()
            .strip_prefix(self.stem.as_bytes())?
            .strip_prefix(b".")?
            .strip_suffix(SEGMENT_SUFFIX.as_bytes())?;
        if rest.len() < INDEX_DIGITS || !rest.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let index: u64 = std::str::from_utf8(rest).ok()?.parse().ok()?;
        (self.file_name(index) == file_name).then_some(index)
    }

    /// Every entry of the directory whose name is one of this producer's segments, by index.
    pub fn scan(&self) -> io::Result<Vec<SegmentEntry>> {
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if let Some(index) = self.parse_index(&entry.file_name()) {
                // DirEntry::file_type does not follow symlinks.
                let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
                found.push(SegmentEntry {
                    index,
                    path: entry.path(),
                    is_file,
                });
            }
        }
        found.sort_by_key(|e| e.index);
        Ok(found)
    }
}

/// Writer settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    /// Roll threshold in uncompressed bytes (at least 1).
    pub roll_bytes: u64,
    /// Segments kept, the active one included (at least 1).
    pub max_segments: usize,
    /// Batch size that triggers an early flush.
    pub buffer_bytes: usize,
    /// Flush cadence.
    pub flush_interval: Duration,
}

impl WriterOptions {
    /// The FPM settings: 1 MiB batches flushed every second.
    pub fn new(roll_bytes: u64, max_segments: usize) -> WriterOptions {
        WriterOptions {
            roll_bytes,
            max_segments,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            flush_interval: DEFAULT_FLUSH_INTERVAL,
        }
    }
}

/// Writer counters since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Rows in members written successfully.
    pub rows_written: u64,
    /// Rows lost with a batch that could not be written.
    pub rows_lost: u64,
    /// Failed batch writes (each loses its batch).
    pub write_errors: u64,
    /// Gzip members written.
    pub members_written: u64,
    /// Compressed bytes written.
    pub bytes_written: u64,
    /// Segments closed because the next row would exceed the threshold (or after a write
    /// error).
    pub segments_rolled: u64,
    /// Old segment files deleted by retention.
    pub segments_pruned: u64,
}

/// Counters readable from other threads while the writer runs.
#[derive(Debug, Default)]
pub struct WriterCounters {
    rows_written: AtomicU64,
    rows_lost: AtomicU64,
    write_errors: AtomicU64,
    members_written: AtomicU64,
    bytes_written: AtomicU64,
    segments_rolled: AtomicU64,
    segments_pruned: AtomicU64,
}

impl WriterCounters {
    /// A snapshot.
    pub fn snapshot(&self) -> WriterStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WriterStats {
            rows_written: get(&self.rows_written),
            rows_lost: get(&self.rows_lost),
            write_errors: get(&self.write_errors),
            members_written: get(&self.members_written),
            bytes_written: get(&self.bytes_written),
            segments_rolled: get(&self.segments_rolled),
            segments_pruned: get(&self.segments_pruned),
        }
    }
}

fn bump(a: &AtomicU64, by: u64) {
    a.fetch_add(by, Ordering::Relaxed);
}

/// The rolling gzip JSONL writer of one producer. Not thread-safe: one owner pushes rows;
/// [`SegmentWriter::counters`] can be read from anywhere.
pub struct SegmentWriter {
    naming: SegmentNaming,
    options: WriterOptions,
    clock: Arc<dyn Clock>,
    started: Duration,
    next_flush: Duration,
    /// Index of the active segment (the next one to create when `file` is `None`).
    index: u64,
    file: Option<File>,
    segment_bytes: u64,
    segment_rows: u64,
    line: Vec<u8>,
    batch: Vec<u8>,
    batch_rows: u64,
    compressed: Vec<u8>,
    prune_pending: bool,
    failing_since: Option<u64>,
    counters: Arc<WriterCounters>,
}

impl SegmentWriter {
    /// Opens the writer: creates the directory if needed and finds the start index (one more
    /// than the highest index present). No file is created until the first flush with rows.
    pub fn open(
        naming: SegmentNaming,
        options: WriterOptions,
        clock: Arc<dyn Clock>,
    ) -> io::Result<SegmentWriter> {
        if options.roll_bytes == 0 || options.max_segments == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "roll bytes and max segments must be positive",
            ));
        }
        fs::create_dir_all(naming.dir())?;
        let index = naming
            .scan()?
            .last()
            .map_or(0, |e| e.index.saturating_add(1));
        let started = clock.monotonic();
        Ok(SegmentWriter {
            naming,
            options,
            started,
            next_flush: started + options.flush_interval,
            clock,
            index,
            file: None,
            segment_bytes: 0,
            segment_rows: 0,
            line: Vec::with_capacity(1024),
            batch: Vec::new(),
            batch_rows: 0,
            compressed: Vec::new(),
            prune_pending: true,
            failing_since: None,
            counters: Arc::default(),
        })
    }

    /// The naming of this producer's segments.
    pub fn naming(&self) -> &SegmentNaming {
        &self.naming
    }

    /// The index of the active segment (or of the next one to be created).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The shared counters.
    pub fn counters(&self) -> Arc<WriterCounters> {
        self.counters.clone()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> WriterStats {
        self.counters.snapshot()
    }

    /// Rows buffered and not yet written.
    pub fn buffered_rows(&self) -> u64 {
        self.batch_rows
    }

    /// When the next periodic flush is due, on the writer's monotonic clock.
    pub fn next_flush_due(&self) -> Duration {
        self.next_flush
    }

    /// Appends the row `{"timestamp":<ms since open>,"event":event}`, rolling first if it would
    /// push the segment over the threshold and flushing when the batch reaches its size.
    pub fn push<E: Serialize + ?Sized>(&mut self, event: &E) {
        let elapsed = self.clock.monotonic().saturating_sub(self.started);
        let timestamp = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        match encode_row(&mut line, timestamp, event) {
            Ok(_) => self.push_encoded(&line),
            Err(e) => {
                bump(&self.counters.rows_lost, 1);
                log::warn!(
                    "trace {}: a row could not be encoded and was dropped: {e}",
                    self.naming.prefix().display()
                );
            }
        }
        self.line = line;
    }

    /// Appends one already encoded row (ending in `\n`).
    fn push_encoded(&mut self, line: &[u8]) {
        let len = line.len() as u64;
        if self.segment_rows > 0 && self.segment_bytes.saturating_add(len) > self.options.roll_bytes
        {
            self.flush();
            // A failed write has already abandoned the segment (and rolled): roll once only.
            if self.segment_rows > 0 {
                self.roll();
            }
        }
        self.batch.extend_from_slice(line);
        self.batch_rows += 1;
        self.segment_bytes = self.segment_bytes.saturating_add(len);
        self.segment_rows += 1;
        if self.batch.len() >= self.options.buffer_bytes {
            self.flush();
        }
    }

    /// Flushes if the periodic flush is due (then schedules the next one).
    pub fn flush_if_due(&mut self) {
        let now = self.clock.monotonic();
        if now >= self.next_flush {
            self.flush();
            self.next_flush += self.options.flush_interval;
            if self.next_flush <= now {
                self.next_flush = now + self.options.flush_interval;
            }
        }
    }

    /// Writes the buffered rows as one gzip member (nothing when no row is buffered).
    pub fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.batch_rows);
        let compressed = compress(&self.batch, std::mem::take(&mut self.compressed));
        self.batch.clear();
        self.compressed = compressed;
        match self.write_member() {
            Ok(()) => {
                bump(&self.counters.rows_written, rows);
                bump(&self.counters.members_written, 1);
                bump(&self.counters.bytes_written, self.compressed.len() as u64);
                if let Some(lost) = self.failing_since.take() {
                    let now_lost = self.counters.snapshot().rows_lost;
                    log::info!(
                        "trace {}: writing works again ({} rows were lost)",
                        self.naming.prefix().display(),
                        now_lost.saturating_sub(lost)
                    );
                }
                if self.prune_pending {
                    self.prune_pending = false;
                    self.prune();
                }
            }
            Err(e) => {
                bump(&self.counters.write_errors, 1);
                bump(&self.counters.rows_lost, rows);
                if self.failing_since.is_none() {
                    self.failing_since = Some(self.counters.snapshot().rows_lost - rows);
                    log::warn!(
                        "trace {}: could not write segment {}: {e}; {rows} rows lost (further \
                         failures are counted, not logged, until writing works again)",
                        self.naming.prefix().display(),
                        self.index
                    );
                }
            }
        }
    }

    fn write_member(&mut self) -> io::Result<()> {
        if self.file.is_none() {
            self.file = Some(self.create_segment()?);
        }
        let file = self.file.as_mut().expect("opened above");
        if let Err(e) = file.write_all(&self.compressed) {
            // The file may now end in a partial member: never append after it.
            self.roll();
            return Err(e);
        }
        Ok(())
    }

    /// Creates the active segment with create-new, skipping names that already exist.
    fn create_segment(&mut self) -> io::Result<File> {
        loop {
            let path = self.naming.path(self.index);
            match OpenOptions::new().append(true).create_new(true).open(&path) {
                Ok(f) => return Ok(f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    self.index = self
                        .index
                        .checked_add(1)
                        .ok_or_else(|| io::Error::other("segment index overflow"))?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts a new segment: the next row goes into a new file.
    fn roll(&mut self) {
        self.file = None;
        self.index = self.index.saturating_add(1);
        self.segment_bytes = 0;
        self.segment_rows = 0;
        self.prune_pending = true;
        bump(&self.counters.segments_rolled, 1);
    }

    /// Deletes the oldest regular files of this prefix until `max_segments` remain.
    fn prune(&mut self) {
        let entries = match self.naming.scan() {
            Ok(e) => e,
            Err(e) => {
                log::warn!(
                    "trace {}: retention could not list {}: {e}",
                    self.naming.prefix().display(),
                    self.naming.dir().display()
                );
                return;
            }
        };
        let files: Vec<&SegmentEntry> = entries.iter().filter(|e| e.is_file).collect();
        let excess = files.len().saturating_sub(self.options.max_segments);
        let active = self.file.as_ref().map(|_| self.index);
        for entry in files
            .into_iter()
            .filter(|e| Some(e.index) != active)
            .take(excess)
        {
            if let Err(e) = fs::remove_file(&entry.path) {
                log::warn!(
                    "trace {}: retention could not delete {}: {e}",
                    self.naming.prefix().display(),
                    entry.path.display()
                );
                return;
            }
            bump(&self.counters.segments_pruned, 1);
        }
    }

    /// Writes what is buffered and returns the final counters.
    pub fn close(mut self) -> WriterStats {
        self.flush();
        self.file = None;
        self.stats()
    }
}

impl Drop for SegmentWriter {
    /// Writes what is still buffered (a writer is never dropped with rows silently lost).
    fn drop(&mut self) {
        self.flush();
    }
}

/// Compresses `data` into one complete gzip member (level 6, MTIME 0, OS 255), reusing `out`.
fn compress(data: &[u8], mut out: Vec<u8>) -> Vec<u8> {
    out.clear();
    let mut encoder = GzEncoder::new(out, Compression::new(GZIP_LEVEL));
    encoder
        .write_all(data)
        .expect("writing into memory cannot fail");
    encoder.finish().expect("writing into memory cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_ids_are_sanitized() {
        assert_eq!(sanitize_producer("4192"), "4192");
        assert_eq!(sanitize_producer("worker/a:b"), "worker_a_b");
        assert_eq!(sanitize_producer("a.b c-d_e"), "a_b_c-d_e");
        assert_eq!(sanitize_producer("é∂x"), "__x");
        assert_eq!(sanitize_producer(""), "unknown");
    }

    #[test]
    fn names_insert_the_producer_before_the_index() {
        let n = SegmentNaming::new(Path::new("/tmp/dynamo-fpm.jsonl.gz"), "worker/a:b");
        assert_eq!(n.prefix(), Path::new("/tmp/dynamo-fpm.worker_a_b"));
        assert_eq!(
            n.path(0),
            Path::new("/tmp/dynamo-fpm.worker_a_b.000000.jsonl.gz")
        );
        let n = SegmentNaming::new(Path::new("/tmp/dynamo-fpm.jsonl"), "");
        assert_eq!(
            n.path(12),
            Path::new("/tmp/dynamo-fpm.unknown.000012.jsonl.gz")
        );
        let n = SegmentNaming::new(Path::new("trace"), "7");
        assert_eq!(n.dir(), Path::new("."));
        assert_eq!(n.file_name(1_234_567), "trace.7.1234567.jsonl.gz");
    }

    #[test]
    fn only_exact_names_parse() {
        let n = SegmentNaming::new(Path::new("/d/x"), "4192");
        let p = |s: &str| n.parse_index(OsStr::new(s));
        assert_eq!(p("x.4192.000000.jsonl.gz"), Some(0));
        assert_eq!(p("x.4192.000042.jsonl.gz"), Some(42));
        assert_eq!(p("x.4192.1000000.jsonl.gz"), Some(1_000_000));
        for bad in [
            "x.4192.00001.jsonl.gz",
            "x.4192.0000001.jsonl.gz",
            "x.4192.000001.jsonl.gz.bak",
            "x.4192.000001.jsonl",
            "x.41920.000001.jsonl.gz",
            "x.419.000001.jsonl.gz",
            "y.4192.000001.jsonl.gz",
            "x.4192.00000a.jsonl.gz",
            "x.4192.-00001.jsonl.gz",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
    }
}
