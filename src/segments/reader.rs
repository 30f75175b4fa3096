//! Reading segments back: every row of a multi-member gzip JSONL file, member by member, so that
//! a truncated or damaged final member (a crash while writing) costs only that member. Every
//! complete row before the cut is returned, the partial row at the cut is not, and the damage is
//! reported with the file and the byte offset where the damaged member starts.
//!
//! This is the one reader of segments: the CLI (`nixl-telemetry stats`, `nixl-telemetry fpm`)
//! reads with it and the fuzz target fuzzes it. It refuses, with an error, a file that is not
//! gzip at all (it does not start with the gzip magic bytes).
//!
//! A row longer than a bound ([`MAX_ROW_BYTES`], the bound the writers keep, unless given) is
//! skipped without being held in memory (a hostile or corrupt segment's 1 GiB line, which
//! compresses to a few MB, cannot exhaust memory), counted in the outcome with the position of
//! the first one, and reading goes on with the next row: one bad row never hides the rest.
//!
//! An empty (0-byte) segment, which a crash between creating a file and writing its first member
//! can leave, reads as zero rows without a warning.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek};
use std::path::{Path, PathBuf};

pub use super::row::MAX_ROW_BYTES;

/// The gzip magic bytes every segment starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

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

/// A row skipped because it is longer than the bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LongRow {
    /// Its number in the file (1-based, skipped rows included).
    pub row: u64,
    /// Byte offset in the file of the gzip member holding it.
    pub member_offset: u64,
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
    /// Rows skipped because they are longer than the bound.
    pub long_rows: u64,
    /// The first of them.
    pub first_long_row: Option<LongRow>,
}

/// Why one row could not be read.
enum RowError {
    /// The decoder failed: a truncated or damaged member.
    Damaged(io::Error),
    /// The row exceeds the bound.
    TooLong,
}

/// How a row read by [`next_row`] ended.
#[derive(PartialEq, Eq)]
enum RowEnd {
    /// At its newline.
    Newline,
    /// At the clean end of its member: the bytes after the member's last newline.
    MemberEnd,
}

/// Reads the next row of a member into `line` (cleared first), without its newline:
/// `Ok(None)` at the end of the member. A row is never longer than `max` bytes.
fn next_row(
    member: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> Result<Option<RowEnd>, RowError> {
    line.clear();
    loop {
        // The decoder reports a cut or damaged member as an error, never as its end.
        let buf = member.fill_buf().map_err(RowError::Damaged)?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then_some(RowEnd::MemberEnd));
        }
        let (take, ended) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            skip_row(member).map_err(RowError::Damaged)?;
            return Err(RowError::TooLong);
        }
        line.extend_from_slice(&buf[..take]);
        member.consume(take + usize::from(ended));
        if ended {
            return Ok(Some(RowEnd::Newline));
        }
    }
}

/// Consumes the rest of the current row, up to and including its newline or the member's end,
/// without keeping it.
fn skip_row(member: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buf = member.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                member.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                member.consume(n);
            }
        }
    }
}

/// Reads a segment file and the rows of every member in order.
pub struct SegmentReader;

impl SegmentReader {
    /// Calls `row` with every complete row of `path` (without its newline), in order, with rows
    /// bounded by [`MAX_ROW_BYTES`]. See [`SegmentReader::for_each_row_bounded`].
    pub fn for_each_row(
        path: &Path,
        row: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<ReadOutcome> {
        SegmentReader::for_each_row_bounded(path, MAX_ROW_BYTES, row)
    }

    /// Calls `row` with every complete row of `path` (without its newline), in order, skipping
    /// (and counting in the outcome) rows longer than `max_row` bytes. Errors: the file cannot
    /// be read, it is not gzip, or `row` failed (its error is returned as is). A damaged final
    /// member is reported in the outcome instead.
    pub fn for_each_row_bounded(
        path: &Path,
        max_row: usize,
        mut row: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<ReadOutcome> {
        let mut source = BufReader::with_capacity(64 * 1024, File::open(path)?);
        let mut outcome = ReadOutcome::default();
        let head = source.fill_buf()?;
        if !head.is_empty() && !head.starts_with(&GZIP_MAGIC) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a gzip JSONL segment (it does not start with the gzip magic bytes)",
            ));
        }
        let mut line = Vec::new();
        loop {
            if source.fill_buf()?.is_empty() {
                return Ok(outcome);
            }
            let start = source.stream_position()?;
            let mut member =
                BufReader::with_capacity(64 * 1024, flate2::bufread::GzDecoder::new(&mut source));
            loop {
                match next_row(&mut member, &mut line, max_row) {
                    Ok(None) => break,
                    Ok(Some(end)) => {
                        outcome.rows += 1;
                        row(&line)?;
                        if end == RowEnd::MemberEnd {
                            break;
                        }
                    }
                    Err(RowError::Damaged(e)) => {
                        outcome.truncated = Some(TruncatedMember {
                            path: path.to_owned(),
                            offset: start,
                            error: e.to_string(),
                        });
                        return Ok(outcome);
                    }
                    Err(RowError::TooLong) => {
                        outcome.long_rows += 1;
                        if outcome.first_long_row.is_none() {
                            outcome.first_long_row = Some(LongRow {
                                row: outcome.rows + outcome.long_rows,
                                member_offset: start,
                            });
                        }
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

    fn member(text: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        e.write_all(text).unwrap();
        e.finish().unwrap()
    }

    /// The rows of a file holding `bytes`, read with rows bounded by `max`.
    fn rows_of(bytes: &[u8], max: usize) -> io::Result<(Vec<String>, ReadOutcome)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl.gz");
        std::fs::write(&path, bytes).unwrap();
        let mut rows = Vec::new();
        let outcome = SegmentReader::for_each_row_bounded(&path, max, |r| {
            rows.push(String::from_utf8_lossy(r).into_owned());
            Ok(())
        })?;
        Ok((rows, outcome))
    }

    #[test]
    fn reads_every_member_and_reports_the_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl.gz");
        let first = member(b"{\"a\":1}\n{\"a\":2}\n");
        let second = member(b"{\"a\":3}\n{\"a\":4}\n");
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

        // A damaged first member (gzip magic bytes, then garbage) is reported at byte 0.
        std::fs::write(&path, b"\x1f\x8bgarbage!").unwrap();
        let (_, out) = SegmentReader::read_rows(&path).unwrap();
        assert_eq!(out.truncated.unwrap().offset, 0);
        // Not gzip at all: an error, not a damaged member.
        std::fs::write(&path, b"garbage!").unwrap();
        let e = SegmentReader::read_rows(&path).unwrap_err();
        assert!(e.to_string().contains("not a gzip"), "{e}");
    }

    #[test]
    fn a_final_row_without_newline_counts_only_in_a_complete_member() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl.gz");
        std::fs::write(&path, member(b"1\n2")).unwrap();
        let (rows, _) = SegmentReader::read_rows(&path).unwrap();
        assert_eq!(rows, [b"1".to_vec(), b"2".to_vec()]);
    }

    #[test]
    fn members_rows_and_a_cut() {
        let mut bytes = member(b"a\nb\n");
        bytes.extend(member(b"c\nd"));
        let (rows, outcome) = rows_of(&bytes, 100).unwrap();
        assert_eq!(rows, ["a", "b", "c", "d"]);
        assert_eq!((outcome.members, outcome.truncated), (2, None));
        let good = member(b"x\n");
        let mut cut = good.clone();
        cut.extend(&member(b"y\nzzzzzzzzzzzz\n")[..10]);
        let (rows, outcome) = rows_of(&cut, 100).unwrap();
        assert_eq!(rows, ["x"]);
        assert_eq!(outcome.truncated.unwrap().offset, good.len() as u64);
        assert_eq!(rows_of(b"", 100).unwrap().0.len(), 0);
    }

    #[test]
    fn long_rows_are_skipped_and_counted_and_the_rows_after_them_read() {
        let long = vec![b'z'; 5000];
        // A long row in the middle of a member, one ending a member, then more members.
        let mut bytes = member(&[b"a\n".as_slice(), &long, b"\nb\n"].concat());
        bytes.extend(member(&[b"c\n".as_slice(), &long].concat()));
        bytes.extend(member(b"d\n"));
        let (rows, outcome) = rows_of(&bytes, 4096).unwrap();
        assert_eq!(rows, ["a", "b", "c", "d"]);
        assert_eq!((outcome.rows, outcome.members), (4, 3));
        assert_eq!(outcome.long_rows, 2);
        assert_eq!(
            outcome.first_long_row,
            Some(LongRow {
                row: 2,
                member_offset: 0
            })
        );
        assert_eq!(outcome.truncated, None);
        // With a bound that admits them, the same rows are returned.
        let (rows, outcome) = rows_of(&bytes, 5000).unwrap();
        assert_eq!(rows.len(), 6);
        assert_eq!(outcome.long_rows, 0);
    }

    #[test]
    fn a_foreign_file_is_an_error() {
        let e = rows_of(b"root:x:0:0:root:/root:/bin/bash\n", 100).unwrap_err();
        assert!(e.to_string().contains("not a gzip"), "{e}");
    }
}
