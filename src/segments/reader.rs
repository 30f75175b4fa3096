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
        let cut = |offset: u64, e: &io::Error| TruncatedMember {
            path: path.to_owned(),
            offset,
            error: e.to_string(),
        };
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
                                    outcome.truncated = Some(cut(start, &e));
                                    return Ok(outcome);
                                }
                            }
                        }
                    }
                    Err(e) => {
                        outcome.truncated = Some(cut(start, &e));
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
