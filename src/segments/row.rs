//! The row format of every segment: one compact JSON object per line,
//! `{"timestamp":<ms since the writer started>,"event":<record>}` followed by `\n`.

use serde::Serialize;

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
