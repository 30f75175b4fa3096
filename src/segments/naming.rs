//! How segment files are named and found: `<prefix>.<producer>.<index>.jsonl.gz`, the
//! producer id sanitized, the index zero-padded to at least six digits. Both the writer (restart
//! index, retention) and the readers (`nixl-telemetry fpm cat`) go through [`SegmentNaming`] and
//! [`segments_of`], which share one parser of the index part.
//!
//! An index is at most [`MAX_INDEX`] (twelve digits): a larger one (such as a planted
//! `<prefix>.<producer>.18446744073709551615.jsonl.gz`) is no segment name, so it can never make
//! a writer's next index overflow.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::owner_only::is_mine;

/// The segment file extension.
pub const SEGMENT_SUFFIX: &str = ".jsonl.gz";
/// Minimum number of digits of a segment index.
pub const INDEX_DIGITS: usize = 6;
/// The highest segment index: a writer rolling every millisecond would need 31 years to get
/// there. Names with a larger index are not segment names.
pub const MAX_INDEX: u64 = 999_999_999_999;

/// The index written as `digits`, if they are exactly how a segment name writes it: at least six
/// ASCII digits, no leading zero beyond that padding, and at most [`MAX_INDEX`].
fn parse_index_digits(digits: &[u8]) -> Option<u64> {
    if digits.len() < INDEX_DIGITS || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let index: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    (index <= MAX_INDEX && format!("{index:0INDEX_DIGITS$}").as_bytes() == digits).then_some(index)
}

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
    /// True when it belongs to this process's effective uid: only those are this writer's
    /// (restart index, retention).
    pub mine: bool,
    /// Its size in bytes (an empty segment holds no history).
    pub len: u64,
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
        parse_index_digits(rest)
    }

    /// Every entry of the directory whose name is one of this producer's segments, by index
    /// (an entry removed while scanning is left out).
    pub fn scan(&self) -> io::Result<Vec<SegmentEntry>> {
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if let Some(index) = self.parse_index(&entry.file_name()) {
                // DirEntry::metadata does not follow symlinks.
                let Ok(meta) = entry.metadata() else {
                    continue;
                };
                found.push(SegmentEntry {
                    index,
                    path: entry.path(),
                    is_file: meta.is_file(),
                    mine: is_mine(&meta),
                    len: meta.len(),
                });
            }
        }
        found.sort_by_key(|e| e.index);
        Ok(found)
    }
}

/// The segment files named by `arg`: the file itself when it exists and is not a directory;
/// every segment of a directory, grouped by producer prefix (sorted), each in index order;
/// otherwise `arg` is a producer prefix (`/tmp/dynamo-fpm.4192`) whose segments are returned in
/// index order, or, when it has none, an output prefix (`/tmp/dynamo-fpm`) whose producers'
/// segments are returned grouped by producer (sorted), each in index order.
pub fn segments_of(arg: &Path) -> io::Result<Vec<PathBuf>> {
    if arg.is_file() {
        return Ok(vec![arg.to_owned()]);
    }
    if arg.is_dir() {
        return scan_segments(arg, None);
    }
    let bytes = arg.as_os_str().as_encoded_bytes();
    let stem_path = PathBuf::from(arg);
    let dir = match stem_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let Some(stem) = stem_path
        .file_name()
        .and_then(|s| s.to_str())
        .map(str::to_owned)
    else {
        return Ok(Vec::new());
    };
    if bytes.ends_with(b"/") {
        return Ok(Vec::new());
    }
    // A producer prefix: `<stem>.<index>.jsonl.gz`. SegmentNaming adds ".<producer>", so split
    // the stem at its last dot into (output prefix, producer).
    let mut exact = Vec::new();
    if let Some((head, producer)) = stem.rsplit_once('.') {
        let naming = SegmentNaming::new(&dir.join(head), producer);
        if naming.prefix().file_name().and_then(|s| s.to_str()) == Some(stem.as_str()) {
            exact = naming
                .scan()?
                .into_iter()
                .filter(|e| e.is_file)
                .map(|e| e.path)
                .collect();
        }
    }
    if !exact.is_empty() {
        return Ok(exact);
    }
    // An output prefix: `<stem>.<producer>.<index>.jsonl.gz` for any producer.
    scan_segments(&dir, Some(&stem))
}

/// The regular files of `dir` named `<prefix>.<index>.jsonl.gz`, sorted by prefix, then index.
/// With `output_prefix`, only those whose prefix is `<output_prefix>.<producer>` (a producer
/// without dots); without it, any non-empty prefix.
fn scan_segments(dir: &Path, output_prefix: Option<&str>) -> io::Result<Vec<PathBuf>> {
    let mut found: Vec<(String, u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let Some((prefix, digits)) = name
            .strip_suffix(SEGMENT_SUFFIX)
            .and_then(|r| r.rsplit_once('.'))
        else {
            continue;
        };
        let Some(index) = parse_index_digits(digits.as_bytes()) else {
            continue;
        };
        let prefix_matches = match output_prefix {
            Some(stem) => prefix
                .strip_prefix(stem)
                .and_then(|r| r.strip_prefix('.'))
                .is_some_and(|producer| !producer.is_empty() && !producer.contains('.')),
            None => !prefix.is_empty(),
        };
        if !prefix_matches || !entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
            continue;
        }
        found.push((prefix.to_owned(), index, entry.path()));
    }
    found.sort();
    Ok(found.into_iter().map(|(_, _, p)| p).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_names_every_segment_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for name in [
            "fpm.b.000001.jsonl.gz",
            "fpm.a.000002.jsonl.gz",
            "fpm.b.000000.jsonl.gz",
            "nixl.agent_0.000000.jsonl.gz",
            "fpm.b.lock",
            "fpm.b.00001.jsonl.gz",
            "notes.txt",
        ] {
            std::fs::write(d.join(name), b"x").unwrap();
        }
        std::fs::create_dir(d.join("fpm.c.000000.jsonl.gz")).unwrap();
        let names: Vec<String> = segments_of(d)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "fpm.a.000002.jsonl.gz",
                "fpm.b.000000.jsonl.gz",
                "fpm.b.000001.jsonl.gz",
                "nixl.agent_0.000000.jsonl.gz"
            ]
        );
        // The output prefix still selects its producers only.
        assert_eq!(segments_of(&d.join("fpm")).unwrap().len(), 3);
        let empty = tempfile::tempdir().unwrap();
        assert!(segments_of(empty.path()).unwrap().is_empty());
    }

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
    fn index_digits_parse_only_as_written() {
        assert_eq!(parse_index_digits(b"000000"), Some(0));
        assert_eq!(parse_index_digits(b"1234567"), Some(1_234_567));
        assert_eq!(parse_index_digits(b"999999999999"), Some(MAX_INDEX));
        for bad in [
            &b"00001"[..],
            b"0000001",
            b"00000a",
            b"-00001",
            b"",
            b"1000000000000",
            b"18446744073709551615",
            b"99999999999999999999999",
        ] {
            assert_eq!(parse_index_digits(bad), None, "{bad:?}");
        }
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
