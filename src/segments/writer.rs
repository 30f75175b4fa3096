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
//! - **Creation** is lazy (the first non-empty flush of a segment) and uses create-new (mode
//!   0600 whatever the umask; missing directories 0700, [`crate::owner_only`]): a name that
//!   already exists (a file, a directory, a symlink) is skipped to the next index, never followed
//!   or appended to. The handle stays open for the segment's life.
//! - **Restart** starts at one more than the highest index of this exact prefix among the
//!   entries of this user (the effective uid), so a segment whose tail was truncated by a crash
//!   is never extended. Entries of other users do not move it (their names are skipped when the
//!   writer gets there), and indexes above [`MAX_INDEX`] are no segment names, so a planted file
//!   can never make the index overflow.
//! - **Retention**: after the first successful write into each new segment (including the first
//!   one, so leftovers of an earlier run are pruned too), the oldest segments of this exact
//!   prefix are deleted until `max_segments` remain, the active one included. Only this writer's
//!   *history* counts and is deleted: non-empty regular files of this user. Other producers'
//!   files, other extensions, directories, symlinks and files of other users are never touched
//!   (they do use up indexes). Empty segments of this user (a crash between creating and writing
//!   one) hold no history: they are not counted and are deleted. A segment that cannot be deleted
//!   is warned about once, then no longer counted, and retention goes on with the next one. The
//!   active segment itself is never deleted.
//! - **Write errors** (disk full, I/O error) lose that batch, which is counted (`write_errors`,
//!   `rows_lost`) and logged once per streak of failures; the writer keeps going. The partial
//!   member a failed write may leave is cut off (the file is truncated back to its last complete
//!   member) and the next batch appends to the same segment, so a full disk creates no new
//!   segments and never leaves anything but complete members: `gzip -cd <prefix>.*.jsonl.gz`
//!   reads every segment once writing works again. Rows lost do not count toward the roll
//!   threshold. Only when the cut itself fails is the segment abandoned (a partial member is then
//!   the last thing in that file) and the next batch starts a new one. A segment holding no
//!   complete member when the writer leaves it (rolls, closes) is deleted.
//! - **Deleted or replaced under the writer**: the writer checks that its open segment is still
//!   the file at its path (the device and inode of the open descriptor against the path's
//!   `lstat`, no link followed, as rings do) before every member it writes, at close, and, idle
//!   or not, at least once a second on its timer ([`SegmentWriter::tick`],
//!   [`PATH_CHECK_INTERVAL`]). When the file or its directory was deleted, or another file was
//!   renamed over it, the rows counted as written into it are moved from `rows_written` to
//!   `rows_lost` (they are on no disk anyone can read at that path), one warning says so, and
//!   what follows goes into a new segment (and a new directory, 0700); the other file is never
//!   written to. So the stats never call a row of the open segment written that is not in the
//!   file at its path for longer than that second, and never after close. (Segments the writer
//!   has left, by rolling, belong to retention and to the user: deleting one changes no count.)
//! - **Row bound**: a row longer than [`MAX_ROW_BYTES`] (newline excluded), which the reader
//!   would skip, is dropped instead, counted (`rows_too_long`) and warned about once per writer,
//!   so everything written can be read back.
//! - **Durability**: no `fsync`; see the module documentation of [`crate::segments`].

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flate2::write::GzEncoder;
use flate2::Compression;
use serde::Serialize;

use crate::owner_only::{create_dir_all, create_new_file};
use crate::segments::clock::Clock;
use crate::segments::naming::{SegmentEntry, SegmentNaming, MAX_INDEX};
use crate::segments::row::{encode_row, MAX_ROW_BYTES};

/// Default roll threshold: 256 MiB of uncompressed JSONL.
pub const DEFAULT_ROLL_BYTES: u64 = 268_435_456;
/// Default number of segments kept per producer, the active one included.
pub const DEFAULT_MAX_SEGMENTS: usize = 4;
/// Default in-memory batch size that triggers an early flush.
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 20;
/// Default flush cadence.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// gzip level of every member.
pub const GZIP_LEVEL: u32 = 6;

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
    /// Rows dropped before being written because they are longer than [`MAX_ROW_BYTES`].
    pub rows_too_long: u64,
    /// Failed batch writes (each loses its batch).
    pub write_errors: u64,
    /// Gzip members written.
    pub members_written: u64,
    /// Compressed bytes written.
    pub bytes_written: u64,
    /// Segments closed because the next row would exceed the threshold (or after a write
    /// error whose partial member could not be cut off).
    pub segments_rolled: u64,
    /// Old segment files deleted by retention (empty ones not included).
    pub segments_pruned: u64,
}

/// Counters readable from other threads while the writer runs.
#[derive(Debug, Default)]
pub struct WriterCounters {
    rows_written: AtomicU64,
    rows_lost: AtomicU64,
    rows_too_long: AtomicU64,
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
            rows_too_long: get(&self.rows_too_long),
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

/// How often the writer checks that its open segment is still at its path.
pub const PATH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

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
    /// Bytes of the complete members in `file` (a failed write is cut back to this length).
    file_len: u64,
    /// Rows in the complete members of `file`: counted as written while `file` is at its path.
    file_rows: u64,
    /// When `file` was last found at its path (see [`SegmentWriter::check_path`]).
    checked_at: Duration,
    /// Uncompressed bytes and rows of the active segment: written and buffered, not lost.
    segment_bytes: u64,
    segment_rows: u64,
    line: Vec<u8>,
    batch: Vec<u8>,
    batch_rows: u64,
    compressed: Vec<u8>,
    prune_pending: bool,
    /// Segments retention could not delete: no longer counted, not tried again.
    undeletable: HashSet<u64>,
    failing_since: Option<u64>,
    /// A row longer than the bound was warned about.
    warned_too_long: bool,
    counters: Arc<WriterCounters>,
}

impl SegmentWriter {
    /// Opens the writer: creates the directory if needed (0700) and finds the start index (one
    /// more than the highest index of this user's entries). No file is created until the first
    /// flush with rows.
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
        create_dir_all(naming.dir())?;
        let index = naming
            .scan()?
            .iter()
            .filter(|e| e.mine)
            .map(|e| e.index + 1)
            .max()
            .unwrap_or(0);
        let started = clock.monotonic();
        Ok(SegmentWriter {
            naming,
            options,
            started,
            next_flush: started + options.flush_interval,
            clock,
            index,
            file: None,
            file_len: 0,
            file_rows: 0,
            checked_at: started,
            segment_bytes: 0,
            segment_rows: 0,
            line: Vec::with_capacity(1024),
            batch: Vec::new(),
            batch_rows: 0,
            compressed: Vec::new(),
            prune_pending: true,
            undeletable: HashSet::new(),
            failing_since: None,
            warned_too_long: false,
            counters: Arc::default(),
        })
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

    /// When [`SegmentWriter::tick`] next has something to do (the periodic flush, or the check of
    /// the open segment's path), on the writer's monotonic clock.
    pub fn next_tick_due(&self) -> Duration {
        match self.file {
            Some(_) => self.next_flush.min(self.checked_at + PATH_CHECK_INTERVAL),
            None => self.next_flush,
        }
    }

    /// Appends the row `{"timestamp":<ms since open>,"event":event}`, rolling first if it would
    /// push the segment over the threshold and flushing when the batch reaches its size.
    pub fn push<E: Serialize + ?Sized>(&mut self, event: &E) {
        let elapsed = self.clock.monotonic().saturating_sub(self.started);
        let timestamp = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        match encode_row(&mut line, timestamp, event) {
            Ok(len) if len - 1 > MAX_ROW_BYTES => {
                bump(&self.counters.rows_too_long, 1);
                if !std::mem::replace(&mut self.warned_too_long, true) {
                    log::warn!(
                        "trace {}: a row of {} bytes is longer than the readers' bound of {} \
                         bytes and was dropped (further ones are counted)",
                        self.naming.prefix().display(),
                        len - 1,
                        MAX_ROW_BYTES
                    );
                }
                // Do not keep the long row's capacity.
                line = Vec::with_capacity(1024);
            }
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
            // A failed flush leaves the segment as it was before that batch: roll only a segment
            // that holds rows (not one whose every write failed, nor one already abandoned).
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

    /// The writer's timer, to be called often (its owners call it every 100 to 250 ms, and on
    /// every batch): flushes when the periodic flush is due (then schedules the next one), and
    /// otherwise checks the open segment's path when that is due ([`PATH_CHECK_INTERVAL`]), so
    /// a deleted or replaced segment is noticed within a second even while nothing is written.
    pub fn tick(&mut self) {
        let now = self.clock.monotonic();
        if now >= self.next_flush {
            self.flush();
            self.next_flush += self.options.flush_interval;
            if self.next_flush <= now {
                self.next_flush = now + self.options.flush_interval;
            }
        } else if now >= self.checked_at + PATH_CHECK_INTERVAL {
            self.check_path();
        }
    }

    /// Checks that the open segment is still the file at its path ([`SegmentWriter::tick`]
    /// does when due, [`SegmentWriter::flush`] always): when it is not, the rows counted as
    /// written into it are counted lost instead, one warning says so, and the next member goes
    /// into a new segment.
    pub fn check_path(&mut self) {
        self.checked_at = self.clock.monotonic();
        if let Some(gone) = self.file.as_ref().and_then(|f| self.segment_gone(f)) {
            self.lose_segment(gone);
        }
    }

    /// Writes the buffered rows as one gzip member (nothing when no row is buffered), into the
    /// open segment if it is still at its path ([`SegmentWriter::check_path`], made even when
    /// nothing is buffered), else into a new one.
    pub fn flush(&mut self) {
        self.check_path();
        if self.batch.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.batch_rows);
        let batch_bytes = self.batch.len() as u64;
        let compressed = compress(&self.batch, std::mem::take(&mut self.compressed));
        self.batch.clear();
        self.compressed = compressed;
        match self.write_member() {
            Ok(()) => {
                self.file_rows += rows;
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
                // The lost rows are not in the segment: they do not count toward its roll.
                self.segment_bytes = self.segment_bytes.saturating_sub(batch_bytes);
                self.segment_rows = self.segment_rows.saturating_sub(rows);
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
            // The directory too may have been deleted: made again (0700) before the file.
            create_dir_all(self.naming.dir())?;
            self.file = Some(self.create_segment()?);
            self.file_len = 0;
            self.file_rows = 0;
            self.checked_at = self.clock.monotonic();
        }
        let file = self.file.as_mut().expect("opened above");
        match file.write_all(&self.compressed) {
            Ok(()) => {
                self.file_len += self.compressed.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Cut off the partial member so the segment ends in complete members and the
                // next batch appends to it (O_APPEND writes at the new end).
                if file.set_len(self.file_len).is_err() {
                    // The file may end in a partial member: never append after it.
                    self.roll();
                }
                Err(e)
            }
        }
    }

    /// Creates the active segment with create-new, skipping names that already exist.
    fn create_segment(&mut self) -> io::Result<File> {
        loop {
            if self.index > MAX_INDEX {
                return Err(io::Error::other(format!(
                    "every segment index up to {MAX_INDEX} is taken"
                )));
            }
            match create_new_file(&self.naming.path(self.index), true) {
                Ok(f) => return Ok(f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => self.index += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// How `file`, the open segment, left its path, if it did: someone deleted it or its
    /// directory, or renamed another file over it (the path's `lstat` names another device
    /// and inode, or nothing). Rows written into such a file are on no disk anyone reads there.
    fn segment_gone(&self, file: &File) -> Option<Gone> {
        let open = match file.metadata() {
            Ok(meta) => meta,
            Err(_) => return Some(Gone::Deleted),
        };
        match fs::symlink_metadata(self.naming.path(self.index)) {
            Err(_) => Some(Gone::Deleted),
            Ok(at_path) if (at_path.dev(), at_path.ino()) != (open.dev(), open.ino()) => {
                Some(Gone::Replaced)
            }
            Ok(_) if open.nlink() == 0 => Some(Gone::Deleted),
            Ok(_) => None,
        }
    }

    /// The open segment is no longer at its path: the rows counted as written into it are
    /// lost (and no longer counted as written), and the next member goes into a new segment.
    fn lose_segment(&mut self, gone: Gone) {
        let rows = std::mem::take(&mut self.file_rows);
        self.counters
            .rows_written
            .fetch_sub(rows, Ordering::Relaxed);
        bump(&self.counters.rows_lost, rows);
        let how = match gone {
            Gone::Deleted => "was deleted (or its directory was)",
            Gone::Replaced => "was replaced by another file",
        };
        log::warn!(
            "trace {}: segment {} {how} while open: the {rows} rows written into it are lost \
             (counted as lost, no longer as written); writing goes on in a new segment",
            self.naming.prefix().display(),
            self.naming.path(self.index).display()
        );
        // Nothing to delete (the file at the path, if any, is not this writer's): the next
        // member starts the next segment.
        self.file = None;
        self.file_len = 0;
        self.index = self.index.saturating_add(1);
        self.segment_bytes = 0;
        self.segment_rows = 0;
        self.prune_pending = true;
    }

    /// Leaves the active segment (if one is open): one holding no complete member is deleted.
    fn close_segment(&mut self) {
        if let Some(file) = self.file.take() {
            // Only while it is still at its path: a file renamed over it is not this writer's.
            if self.file_len == 0 && self.segment_gone(&file).is_none() {
                let _ = fs::remove_file(self.naming.path(self.index));
            }
        }
        self.file_len = 0;
        self.file_rows = 0;
    }

    /// Starts a new segment: the next row goes into a new file.
    fn roll(&mut self) {
        self.close_segment();
        self.index = self.index.saturating_add(1);
        self.segment_bytes = 0;
        self.segment_rows = 0;
        self.prune_pending = true;
        bump(&self.counters.segments_rolled, 1);
    }

    /// Deletes the oldest segments of this writer's history (non-empty regular files of this
    /// user) until `max_segments` remain, and this user's empty segments.
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
        let active = self.file.as_ref().map(|_| self.index);
        let mut history: Vec<&SegmentEntry> = Vec::new();
        for entry in &entries {
            if !entry.is_file || !entry.mine || self.undeletable.contains(&entry.index) {
                continue;
            }
            if Some(entry.index) == active {
                history.push(entry);
            } else if entry.len == 0 {
                // No history: a crash between creating and writing it.
                self.remove(entry);
            } else {
                history.push(entry);
            }
        }
        let excess = history.len().saturating_sub(self.options.max_segments);
        for entry in history
            .into_iter()
            .filter(|e| Some(e.index) != active)
            .take(excess)
        {
            // Deleted, or no longer counted: either way one segment less of history.
            if self.remove(entry) {
                bump(&self.counters.segments_pruned, 1);
            }
        }
    }

    /// Deletes a segment for retention; true when this writer deleted it. A segment that cannot
    /// be deleted is warned about once and not counted (nor tried) again.
    fn remove(&mut self, entry: &SegmentEntry) -> bool {
        match fs::remove_file(&entry.path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => {
                self.undeletable.insert(entry.index);
                log::warn!(
                    "trace {}: retention could not delete {}: {e}; it no longer counts as a \
                     segment of this writer, whose next oldest segments are deleted instead",
                    self.naming.prefix().display(),
                    entry.path.display()
                );
                false
            }
        }
    }

    /// Writes what is buffered and leaves the active segment (deleted if it holds no complete
    /// member). Idempotent.
    fn finish(&mut self) {
        self.flush();
        self.close_segment();
    }

    /// Writes what is buffered and returns the final counters.
    pub fn close(mut self) -> WriterStats {
        self.finish();
        self.stats()
    }
}

impl Drop for SegmentWriter {
    /// Writes what is still buffered (a writer is never dropped with rows silently lost).
    fn drop(&mut self) {
        self.finish();
    }
}

/// How an open segment left its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gone {
    /// Nothing is at the path (the file or its directory was deleted).
    Deleted,
    /// Another file is at the path.
    Replaced,
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
mod tests;
