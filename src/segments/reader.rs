//! Reading segments back: every row of a multi-member gzip JSONL file, member by member, so that
//! a truncated or damaged final member (a crash while writing) costs only that member. Every
//! complete row before the cut is returned, the partial row at the cut is not, and the damage is
//! reported with the file and the byte offset where the damaged member starts.
//!
//! An empty (0-byte) segment, which a crash between creating a file and writing its first member
//! can leave, reads as zero rows without a warning.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::trace::segment::{SegmentNaming, INDEX_DIGITS, SEGMENT_SUFFIX};

/// A member that could not be decoded to its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruncatedMember {
    /// The file.
    pub path: PathBuf,
    /// Byte offset in the file where the damaged member starts.
    pub offset: u64,
    /// The decoder's explanation.
    pub error: String,
}

/// The outcome of reading one segment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadOutcome {
    /// Rows returned.
    pub rows: u64,
    /// Complete gzip members decoded.
    pub members: u64,
    /// Set when the file ends in a truncated or damaged member.
    pub truncated: Option<TruncatedMember>,
}

/// Counts the bytes consumed from a buffered reader.
struct Counting<R> {
    inner: R,
    pos: u64,
}

impl<R: BufRead> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.pos += amt as u64;
        self.inner.consume(amt);
    }
}

/// Reads a segment file and the rows of every member in order.
pub struct SegmentReader;

impl SegmentReader {
    /// Calls `row` with every complete row of `path` (without its newline), in order. Errors
    /// opening or reading the file, and errors returned by `row`, are returned; a damaged final
    /// member is reported in the outcome instead.
    pub fn for_each_row(
        path: &Path,
        mut row: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<ReadOutcome> {
        let file = File::open(path)?;
        let mut source = Counting {
            inner: BufReader::with_capacity(64 * 1024, file),
            pos: 0,
        };
        let mut outcome = ReadOutcome::default();
        let mut line = Vec::new();
        loop {
            if source.fill_buf()?.is_empty() {
                return Ok(outcome);
            }
            let start = source.pos;
            let mut member = BufReader::new(flate2::bufread::GzDecoder::new(&mut source));
            loop {
                line.clear();
                match member.read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        if line.last() == Some(&b'\n') {
                            line.pop();
                            outcome.rows += 1;
                            row(&line)?;
                        } else {
                            // A row without its newline is complete only if the member ends
                            // cleanly right after it.
                            let pending = std::mem::take(&mut line);
                            match member.read_until(b'\n', &mut line) {
                                Ok(0) => {
                                    outcome.rows += 1;
                                    row(&pending)?;
                                    break;
                                }
                                Ok(_) => unreachable!("read_until stops only at a newline or EOF"),
                                Err(e) => {
                                    outcome.truncated = Some(TruncatedMember {
                                        path: path.to_owned(),
                                        offset: start,
                                        error: e.to_string(),
                                    });
                                    return Ok(outcome);
                                }
                            }
                        }
                    }
                    Err(e) => {
                        outcome.truncated = Some(TruncatedMember {
                            path: path.to_owned(),
                            offset: start,
                            error: e.to_string(),
                        });
                        return Ok(outcome);
                    }
                }
            }
            outcome.members += 1;
        }
    }

    /// Every row of `path` (for tests and small files).
    pub fn read_rows(path: &Path) -> io::Result<(Vec<Vec<u8>>, ReadOutcome)> {
        let mut rows = Vec::new();
        let outcome = SegmentReader::for_each_row(path, |r| {
            rows.push(r.to_vec());
            Ok(())
        })?;
        Ok((rows, outcome))
    }
}

/// The segment files named by `arg`: the file itself when it exists and is not a directory;
/// otherwise `arg` is a producer prefix (`/tmp/dynamo-fpm.4192`) whose segments are returned in
/// index order, or, when it has none, an output prefix (`/tmp/dynamo-fpm`) whose producers'
/// segments are returned grouped by producer (sorted), each in index order.
pub fn segments_of(arg: &Path) -> io::Result<Vec<PathBuf>> {
    if arg.is_file() {
        return Ok(vec![arg.to_owned()]);
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
    let mut found: Vec<(String, u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let Some(rest) = name
            .strip_prefix(stem.as_str())
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.strip_suffix(SEGMENT_SUFFIX))
        else {
            continue;
        };
        let Some((producer, digits)) = rest.rsplit_once('.') else {
            continue;
        };
        if producer.is_empty()
            || producer.contains('.')
            || digits.len() < INDEX_DIGITS
            || !digits.bytes().all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(index) = digits.parse::<u64>() else {
            continue;
        };
        if format!("{index:0INDEX_DIGITS$}") != digits
            || !entry.file_type().map(|t| t.is_file()).unwrap_or(false)
        {
            continue;
        }
        found.push((producer.to_owned(), index, entry.path()));
    }
    found.sort();
    Ok(found.into_iter().map(|(_, _, p)| p).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn member(text: &str) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn reads_every_member_and_reports_the_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl.gz");
        let first = member("{\"a\":1}\n{\"a\":2}\n");
        let second = member("{\"a\":3}\n{\"a\":4}\n");
        let mut bytes = first.clone();
        bytes.extend_from_slice(&second);
        std::fs::write(&path, &bytes).unwrap();
        let (rows, out) = SegmentReader::read_rows(&path).unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!((out.members, out.truncated), (2, None));

        std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
        let (rows, out) = SegmentReader::read_rows(&path).unwrap();
        assert!(rows.len() >= 2, "{rows:?}");
        assert_eq!(&rows[..2], &[b"{\"a\":1}".to_vec(), b"{\"a\":2}".to_vec()]);
        let t = out.truncated.unwrap();
        assert_eq!(t.offset, first.len() as u64);
        assert_eq!(t.path, path);

        std::fs::write(&path, b"").unwrap();
        let (rows, out) = SegmentReader::read_rows(&path).unwrap();
        assert!(rows.is_empty() && out.truncated.is_none());

        std::fs::write(&path, b"garbage!").unwrap();
        let (_, out) = SegmentReader::read_rows(&path).unwrap();
        assert_eq!(out.truncated.unwrap().offset, 0);
    }

    #[test]
    fn a_final_row_without_newline_counts_only_in_a_complete_member() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl.gz");
        std::fs::write(&path, member("1\n2")).unwrap();
        let (rows, _) = SegmentReader::read_rows(&path).unwrap();
        assert_eq!(rows, [b"1".to_vec(), b"2".to_vec()]);
    }
}
