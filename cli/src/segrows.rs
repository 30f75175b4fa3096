//! The rows of a gzip JSONL segment (FPM traces, TRACE exporter files), member by member, with
//! a bound on the length of a row: a hostile or corrupt segment (one 1 GiB line compresses to a
//! few MB) is refused with a clear error instead of exhausting memory. A truncated or damaged
//! final member is reported in the outcome, as [`nixl_telemetry::segments::reader`] does; a
//! file that is not gzip at all is an error.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek};
use std::path::Path;

use nixl_telemetry::segments::reader::{ReadOutcome, TruncatedMember};

/// Longest row accepted, newline excluded. The writers' rows are under a few KiB.
pub const MAX_ROW_BYTES: usize = 16 << 20;

/// Why one row could not be read.
enum RowError {
    /// The decoder failed: a truncated or damaged member.
    Damaged(io::Error),
    /// The row exceeds the bound.
    TooLong,
}

/// Reads the next row into `line` (cleared first): `Ok(None)` at the end of the member,
/// `Ok(Some(true))` for a row ended by a newline, `Ok(Some(false))` for the bytes after the
/// last newline of a member that ended cleanly.
fn next_row(
    member: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> Result<Option<bool>, RowError> {
    line.clear();
    loop {
        let buf = member.fill_buf().map_err(RowError::Damaged)?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then_some(false));
        }
        let (take, ended) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            return Err(RowError::TooLong);
        }
        line.extend_from_slice(&buf[..take]);
        member.consume(take + usize::from(ended));
        if ended {
            return Ok(Some(true));
        }
    }
}

/// Calls `row` with every complete row of `path` (without its newline), in order. Errors: the
/// file cannot be read, it is not gzip, a row is longer than `max_row` bytes, or `row` failed.
pub fn for_each_row(
    path: &Path,
    max_row: usize,
    mut row: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<ReadOutcome> {
    let mut source = BufReader::with_capacity(64 * 1024, File::open(path)?);
    let mut outcome = ReadOutcome::default();
    let head = source.fill_buf()?;
    if !head.is_empty() && !head.starts_with(&[0x1f, 0x8b]) {
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
        let damaged = |e: io::Error| TruncatedMember {
            path: path.to_owned(),
            offset: start,
            error: e.to_string(),
        };
        loop {
            match next_row(&mut member, &mut line, max_row) {
                Ok(None) => break,
                Ok(Some(true)) => {
                    outcome.rows += 1;
                    row(&line)?;
                }
                // The last row of a member, without a newline: the member ended cleanly (the
                // decoder reports a cut or damage as an error, not as the end).
                Ok(Some(false)) => {
                    outcome.rows += 1;
                    row(&line)?;
                    break;
                }
                Err(RowError::Damaged(e)) => {
                    outcome.truncated = Some(damaged(e));
                    return Ok(outcome);
                }
                Err(RowError::TooLong) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "row {} (in the gzip member at byte {start}) is longer than {max_row} \
                             bytes: not a segment the trace writers produce",
                            outcome.rows + 1
                        ),
                    ))
                }
            }
        }
        outcome.members += 1;
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

    fn rows_of(bytes: &[u8], max: usize) -> io::Result<(Vec<String>, ReadOutcome)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl.gz");
        std::fs::write(&path, bytes).unwrap();
        let mut rows = Vec::new();
        let outcome = for_each_row(&path, max, |r| {
            rows.push(String::from_utf8_lossy(r).into_owned());
            Ok(())
        })?;
        Ok((rows, outcome))
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
    fn long_rows_and_foreign_files_are_errors() {
        let long = member(&[b'z'; 5000]);
        let e = rows_of(&long, 4096).unwrap_err();
        assert!(e.to_string().contains("longer than 4096 bytes"), "{e}");
        assert_eq!(rows_of(&long, 5000).unwrap().0[0].len(), 5000);
        let e = rows_of(b"root:x:0:0:root:/root:/bin/bash\n", 100).unwrap_err();
        assert!(e.to_string().contains("not a gzip"), "{e}");
    }
}
