//! The row format of every segment: one compact JSON object per line,
//! `{"timestamp":<ms since the writer started>,"event":<record>}` followed by `\n`.

use serde::Serialize;

/// Longest row of a segment, newline excluded: 16 MiB. The writers drop (and count) a row that
/// would be longer, and the reader skips (and counts) one it finds, so what a writer keeps is
/// always readable. The trace writers' rows are a few KiB.
pub const MAX_ROW_BYTES: usize = 16 << 20;

#[derive(Serialize)]
struct Envelope<'a, E: ?Sized> {
    timestamp: u64,
    event: &'a E,
}

/// Appends the row `{"timestamp":..,"event":..}\n` to `out` and returns its length in bytes.
/// On a serialization error (impossible for the records of this crate) `out` is unchanged.
pub fn encode_row<E: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    timestamp_ms: u64,
    event: &E,
) -> Result<usize, serde_json::Error> {
    let start = out.len();
    let result = serde_json::to_writer(
        &mut *out,
        &Envelope {
            timestamp: timestamp_ms,
            event,
        },
    );
    if let Err(e) = result {
        out.truncate(start);
        return Err(e);
    }
    out.push(b'\n');
    Ok(out.len() - start)
}
