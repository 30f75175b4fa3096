//! The per-process store file of NIXL's `prometheus_mp` exporter (`storeLayout`, schema 1):
//! 6,800 bytes, native endian (little-endian on every platform NIXL ships), every field at
//! NIXL's offset, so NIXL's scrape-time reader reads our stores and our store scan reads NIXL's.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `NIXLMPS1` (written last, with release ordering) |
//! | 8 | 4 | schema version (1) |
//! | 12 | 4 | slot count (21, one per event type of NIXL's merged sources) |
//! | 16 | 8 | pid (i64) |
//! | 24 | 8 | last update, `CLOCK_MONOTONIC` ns |
//! | 32 | 8 | instance (per-process exporter counter) |
//! | 40 | 8 | bucket count (at most 32) |
//! | 48 | 256 | agent name, NUL-terminated |
//! | 304 | 128 | hostname, NUL-terminated |
//! | 432 | 64 | local rank, NUL-terminated (empty: no `local_rank` label) |
//! | 496 | 256 | bucket bounds, f64\[32\] |
//! | 752 | 168 | counters, u64\[21\] |
//! | 920 | 168 | gauges, u64\[21\] |
//! | 1088 | 5544 | per-bucket (not cumulative) histogram counts, u64\[21\]\[33\]; index `bucket count` is the overflow (`+Inf`) bucket |
//! | 6632 | 168 | histogram sums, u64\[21\] |
//!
//! # Event types without a slot
//!
//! The store has a slot for each event type of NIXL's merged sources (0..20). The stalled
//! transfer of NIXL's open pull request #2047 (`agent_err_xfer_stalled`, 21) has none, and the
//! layout stays NIXL's (6,800 bytes: NIXL's reader keeps reading our stores, ours NIXL's), so the
//! writer counts it in `agent_err_unknown`'s slot ([`slot_of`]): every reader of the store,
//! NIXL's included, counts it as an error, under `status="unknown"`, which is also what a process
//! records when `NIXL_TELEMETRY_XFER_STALLED_EVENT` is unset; a node page has no
//! `status="xfer_stalled"` series.
//!
//! # The workload-labels extension (ours)
//!
//! A store whose writer has workload labels (`NIXL_TELEMETRY_LABELS`,
//! `NIXL_TELEMETRY_LABELS_FROM`) is longer than 6,800 bytes: after them comes
//!
//! | offset | size | field |
//! |---|---|---|
//! | 6800 | 8 | magic `NIXLLBL1` |
//! | 6808 | 4 | length `n` of the label bytes (u32), at most [`MAX_LABEL_BYTES`] |
//! | 6812 | 4 | 0 (reserved) |
//! | 6816 | `n` | each label as `name`, NUL, `value`, NUL, in order |
//!
//! written before the store is published (before the magic at 0), never changed after.
//! NIXL's reader only refuses stores *shorter* than 6,800 bytes and maps the first 6,800, so it
//! reads such a store as any other (without the labels); a store without labels (every store
//! NIXL writes, and ours when no label is set) is exactly 6,800 bytes and reads without
//! labels.
//!
//! # The native-histograms extension (ours)
//!
//! A store whose writer keeps native histograms (`NIXL_TELEMETRY_NATIVE_HISTOGRAMS`, see
//! [`nixl_telemetry_series::native`]) carries them in a second extension of fixed size,
//! [`NATIVE_EXTENSION_SIZE`] = 5,344 bytes, at offset `E`: 6,800 when the store has no labels,
//! else the end of the labels extension rounded up to a multiple of 8 (the padding is zeros).
//! Offsets from `E`:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `NIXLNHS1` |
//! | 8 | 4 | length of the rest of the extension (u32): 5,328 |
//! | 12 | 4 | 0 (reserved) |
//! | 16 | 4 | histogram count (u32): 4 |
//! | 20 | 4 | buckets per histogram at most (u32): 160 |
//! | 24 | 8 | sequence (u64): odd while the writer updates the histograms (the publication sequence's value, below) |
//! | 32 | 4 x 1,328 | the histograms of `agent_xfer_time_us`, `agent_xfer_post_time_us`, `agent_tx_request_size_bytes`, `agent_rx_request_size_bytes` (the series engine's `NATIVE_EVENTS`), each: |
//! | +0 | 8 | schema (i64), from 3 down to -4 |
//! | +8 | 8 | index of the first held bucket (i64) |
//! | +16 | 8 | `n`, buckets held (u64), at most 160 |
//! | +24 | 8 | zero-bucket count (u64) |
//! | +32 | 8 | count (u64): the zero bucket's and the buckets' together |
//! | +40 | 8 | sum (u64) |
//! | +48 | 8 x 160 | per-bucket counts of buckets `first` .. `first + n - 1` (u64, dense: empty buckets inside the span are 0); words past `n` are 0 |
//!
//! Its header (everything but the sequence and the histograms) is written before the store is
//! published and never changed. The histograms change at every flush that observes a transfer,
//! inside the flush's publication (below); the extension's own sequence takes the publication
//! sequence's values, so that a reader of an earlier version, which reads the histograms under
//! this sequence alone, still never keeps a torn one. Every word is written and read atomically,
//! as the counters are. The 160-bucket bound (the histograms lower their schema rather than hold
//! more) is what makes the size fixed.
//!
//! # The publication extension (ours)
//!
//! Every store our writer creates ends with a last extension, 24 bytes at the next multiple of
//! 8 after the others (6,800 when there is none):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `NIXLSEQ1` |
//! | 8 | 4 | length of the rest (u32): 8 |
//! | 12 | 4 | 0 (reserved) |
//! | 16 | 8 | the publication sequence (u64): odd while the writer publishes a flush |
//!
//! Each flush is published as one update under it (a seqlock, the series engine's scheme for its
//! batches): the writer makes the sequence odd, writes every value the flush changed (counters,
//! gauges, histogram buckets and sums, the heartbeat, the native histograms), makes it even
//! again (release). A reader takes the sequence (acquire), reads the values, and keeps what it
//! read only when the sequence was even and is unchanged afterwards (an acquire fence before
//! the second load): it sees the store as it was before a flush or after it, never in between,
//! for the classic values and the native histograms alike. It is last so that a reader of an
//! earlier version, which stops at a magic it does not know, still finds the others.
//!
//! A reader walks the extensions from 6,800: each starts with its magic and the u32 length of
//! the rest, and the next one starts at the end of the previous one rounded up to a multiple of
//! 8. A magic it does not know ends the walk (the bytes after it are ignored). NIXL's reader
//! maps only the first 6,800 bytes and reads such a store as any other; a store written with
//! native histograms off has no native-histograms extension. A native-histograms extension
//! that is not of this shape costs the store its native histograms only (it is read without
//! them); a labels extension that is not valid makes the store invalid (its series would lose
//! the labels that tell them apart).

use nixl_telemetry_base::event::EventType;
use nixl_telemetry_series::native::{NativeHistogram, DEFAULT_MAX_BUCKETS};
use nixl_telemetry_series::{WorkloadLabels, NATIVE_EVENTS};

/// Size of a store file.
pub const STORE_SIZE: usize = 6800;
/// Size of a store in 8-byte words.
pub const STORE_WORDS: usize = STORE_SIZE / 8;
/// The magic, the bytes `NIXLMPS1` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"NIXLMPS1");
/// The layout version this module describes.
pub const SCHEMA_VERSION: u32 = 1;
/// Slots per array: one per event type of NIXL's merged sources (0..20, the dropped-events
/// report last).
pub const SLOT_COUNT: usize = 21;
/// Largest number of finite bucket bounds a store holds.
pub const MAX_BUCKETS: usize = 32;
/// Histogram counts per slot: the bounds plus the overflow bucket.
pub const HIST_STRIDE: usize = MAX_BUCKETS + 1;

/// `magic`.
pub const OFF_MAGIC: usize = 0;
/// `schemaVersion` (u32) and, in the same word, `slotCount` (u32) at 12.
pub const OFF_SCHEMA: usize = 8;
/// `slotCount`.
pub const OFF_SLOTS: usize = 12;
/// `pid`.
pub const OFF_PID: usize = 16;
/// `lastUpdateNs`.
pub const OFF_LAST_UPDATE: usize = 24;
/// `instance`.
pub const OFF_INSTANCE: usize = 32;
/// `bucketCount`.
pub const OFF_BUCKET_COUNT: usize = 40;
/// `agentName`.
pub const OFF_AGENT_NAME: usize = 48;
/// Bytes of `agentName`, its NUL included.
pub const AGENT_NAME_LEN: usize = 256;
/// `hostname`.
pub const OFF_HOSTNAME: usize = 304;
/// Bytes of `hostname`, its NUL included.
pub const HOSTNAME_LEN: usize = 128;
/// `localRank`.
pub const OFF_LOCAL_RANK: usize = 432;
/// Bytes of `localRank`, its NUL included.
pub const LOCAL_RANK_LEN: usize = 64;
/// `bucketBounds`.
pub const OFF_BOUNDS: usize = 496;
/// `counters`.
pub const OFF_COUNTERS: usize = 752;
/// `gauges`.
pub const OFF_GAUGES: usize = 920;
/// `histBuckets`.
pub const OFF_HIST_BUCKETS: usize = 1088;
/// `histSums`.
pub const OFF_HIST_SUMS: usize = 6632;

const _: () = {
    assert!(SLOT_COUNT == EventType::AgentTelemetryEventsDropped as usize + 1);
    assert!(OFF_HOSTNAME == OFF_AGENT_NAME + AGENT_NAME_LEN);
    assert!(OFF_LOCAL_RANK == OFF_HOSTNAME + HOSTNAME_LEN);
    assert!(OFF_BOUNDS == OFF_LOCAL_RANK + LOCAL_RANK_LEN);
    assert!(OFF_COUNTERS == OFF_BOUNDS + 8 * MAX_BUCKETS);
    assert!(OFF_GAUGES == OFF_COUNTERS + 8 * SLOT_COUNT);
    assert!(OFF_HIST_BUCKETS == OFF_GAUGES + 8 * SLOT_COUNT);
    assert!(OFF_HIST_SUMS == OFF_HIST_BUCKETS + 8 * SLOT_COUNT * HIST_STRIDE);
    assert!(STORE_SIZE == OFF_HIST_SUMS + 8 * SLOT_COUNT);
};

/// Offset of the workload-labels extension: the end of NIXL's layout.
pub const OFF_LABELS: usize = STORE_SIZE;
/// The extension's magic, the bytes `NIXLLBL1` read as a little-endian u64.
pub const LABELS_MAGIC: u64 = u64::from_le_bytes(*b"NIXLLBL1");
/// Bytes of the extension before the labels: magic, length, reserved.
pub const LABELS_HEADER: usize = 16;
/// The most label bytes an extension may hold (the bounds of
/// [`nixl_telemetry_series::labels`] need at most 16 x (128 + 1 + 256 + 1)).
pub const MAX_LABEL_BYTES: usize = 8192;

/// The native-histograms extension's magic, the bytes `NIXLNHS1` read as a little-endian u64.
pub const NATIVE_MAGIC: u64 = u64::from_le_bytes(*b"NIXLNHS1");
/// Histograms in the native-histograms extension: one per event of
/// [`nixl_telemetry_series::NATIVE_EVENTS`], in that order.
pub const NATIVE_HISTOGRAM_COUNT: usize = NATIVE_EVENTS.len();
/// Buckets a stored native histogram holds at most (the series' default bound).
pub const NATIVE_MAX_BUCKETS: usize = DEFAULT_MAX_BUCKETS;
/// Words of a stored native histogram before its bucket counts: schema, first index, bucket
/// count, zero count, count, sum.
pub const NATIVE_HISTOGRAM_HEADER_WORDS: usize = 6;
/// Bytes of one stored native histogram.
pub const NATIVE_HISTOGRAM_BYTES: usize = 8 * (NATIVE_HISTOGRAM_HEADER_WORDS + NATIVE_MAX_BUCKETS);
/// Offset, in the native-histograms extension, of its histogram count and bucket bound.
pub const NATIVE_OFF_SHAPE: usize = 16;
/// Offset, in the native-histograms extension, of its sequence.
pub const NATIVE_OFF_SEQUENCE: usize = 24;
/// Offset, in the native-histograms extension, of its first histogram.
pub const NATIVE_OFF_HISTOGRAMS: usize = 32;
/// Bytes of the native-histograms extension (fixed).
pub const NATIVE_EXTENSION_SIZE: usize =
    NATIVE_OFF_HISTOGRAMS + NATIVE_HISTOGRAM_COUNT * NATIVE_HISTOGRAM_BYTES;
/// The publication extension's magic, the bytes `NIXLSEQ1` read as a little-endian u64.
pub const SEQUENCE_MAGIC: u64 = u64::from_le_bytes(*b"NIXLSEQ1");
/// Offset, in the publication extension, of the publication sequence.
pub const SEQUENCE_OFF_VALUE: usize = 16;
/// Bytes of the publication extension.
pub const SEQUENCE_EXTENSION_SIZE: usize = SEQUENCE_OFF_VALUE + 8;
/// The most bytes a store file has: NIXL's, the largest labels extension, its padding, the
/// native-histograms extension and the publication extension.
pub const MAX_FILE_SIZE: usize = STORE_SIZE
    + LABELS_HEADER
    + MAX_LABEL_BYTES
    + 7
    + NATIVE_EXTENSION_SIZE
    + SEQUENCE_EXTENSION_SIZE;

const _: () = {
    assert!(NATIVE_EXTENSION_SIZE == 5344);
    assert!(NATIVE_HISTOGRAM_COUNT == 4);
};

/// Offset, in the native-histograms extension, of word `word` of histogram `slot`.
pub const fn native_word(slot: usize, word: usize) -> usize {
    NATIVE_OFF_HISTOGRAMS + slot * NATIVE_HISTOGRAM_BYTES + 8 * word
}

/// What a store's extensions hold: its workload labels, where its native histograms and its
/// publication sequence are, and why it has no native histograms when it has a native-histograms
/// extension that is not of its shape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Extensions {
    /// The workload labels (none without a labels extension).
    pub labels: WorkloadLabels,
    /// The file offset of the native-histograms extension, if the store has one that is of its
    /// shape.
    pub native: Option<usize>,
    /// Why a native-histograms extension is not read (its header is not of its shape).
    pub native_problem: Option<String>,
    /// The file offset of the publication extension, if the store has one.
    pub sequence: Option<usize>,
}

/// The extension bytes of a store (the bytes after [`OFF_LABELS`]): the labels extension for
/// `labels` (none when there is no label), then, when `native` holds histograms, the padding
/// and the native-histograms extension with them (sequence 0), then the padding and the
/// publication extension (sequence 0); and where they are (as [`decode_extensions`] finds
/// them).
pub fn encode_extensions(
    labels: &WorkloadLabels,
    native: Option<&[NativeHistogram; NATIVE_HISTOGRAM_COUNT]>,
) -> (Vec<u8>, Extensions) {
    let mut out = encode_labels(labels);
    let native_at = native.map(|native| encode_native(&mut out, native));
    out.resize(out.len().next_multiple_of(8), 0);
    let sequence_at = OFF_LABELS + out.len();
    out.extend_from_slice(&SEQUENCE_MAGIC.to_ne_bytes());
    out.extend_from_slice(&((SEQUENCE_EXTENSION_SIZE - LABELS_HEADER) as u32).to_ne_bytes());
    out.extend_from_slice(&[0; 4 + 8]);
    let placed = Extensions {
        labels: labels.clone(),
        native: native_at,
        native_problem: None,
        sequence: Some(sequence_at),
    };
    (out, placed)
}

/// Appends the padding and the native-histograms extension holding `native` to `out` (the
/// extension bytes so far); returns its file offset.
fn encode_native(out: &mut Vec<u8>, native: &[NativeHistogram; NATIVE_HISTOGRAM_COUNT]) -> usize {
    out.resize(out.len().next_multiple_of(8), 0);
    let at = OFF_LABELS + out.len();
    let mut ext = vec![0u8; NATIVE_EXTENSION_SIZE];
    let mut put = |off: usize, bytes: &[u8]| ext[off..off + bytes.len()].copy_from_slice(bytes);
    put(0, &NATIVE_MAGIC.to_ne_bytes());
    put(
        8,
        &((NATIVE_EXTENSION_SIZE - LABELS_HEADER) as u32).to_ne_bytes(),
    );
    put(
        NATIVE_OFF_SHAPE,
        &(NATIVE_HISTOGRAM_COUNT as u32).to_ne_bytes(),
    );
    put(
        NATIVE_OFF_SHAPE + 4,
        &(NATIVE_MAX_BUCKETS as u32).to_ne_bytes(),
    );
    for (slot, h) in native.iter().enumerate() {
        for (i, word) in native_histogram_words(h).enumerate() {
            put(native_word(slot, i), &word.to_ne_bytes());
        }
    }
    out.extend_from_slice(&ext);
    at
}

/// The words of a stored native histogram, from its first (the schema) to its last bucket
/// count (at most [`NATIVE_HISTOGRAM_HEADER_WORDS`] + [`NATIVE_MAX_BUCKETS`]; the histogram's
/// bound must be at most [`NATIVE_MAX_BUCKETS`]).
pub fn native_histogram_words(h: &NativeHistogram) -> impl Iterator<Item = u64> + '_ {
    let (first, counts) = h.dense();
    debug_assert!(counts.len() <= NATIVE_MAX_BUCKETS);
    [
        i64::from(h.schema()) as u64,
        i64::from(first) as u64,
        counts.len() as u64,
        h.zero_count(),
        h.count(),
        h.sum(),
    ]
    .into_iter()
    .chain(counts.iter().copied())
}

/// The native histogram of `slot` of a native-histograms extension whose words `word` reads
/// (by offset in the extension); an error saying why when they are not a histogram (a reader
/// reading while the writer updates may see that: it decides by the sequence first).
pub fn decode_native_histogram(
    word: impl Fn(usize) -> u64,
    slot: usize,
) -> Result<NativeHistogram, String> {
    let at = |i: usize| word(native_word(slot, i));
    let (schema, first, n) = (at(0) as i64, at(1) as i64, at(2));
    let held = n.min(NATIVE_MAX_BUCKETS as u64) as usize;
    let counts: Vec<u64> = (0..held)
        .map(|i| at(NATIVE_HISTOGRAM_HEADER_WORDS + i))
        .collect();
    let bad = || format!("its native histogram {slot} is malformed");
    if n > NATIVE_MAX_BUCKETS as u64 {
        return Err(bad());
    }
    let schema = i8::try_from(schema).map_err(|_| bad())?;
    let first = i32::try_from(first).map_err(|_| bad())?;
    NativeHistogram::from_dense(
        schema,
        NATIVE_MAX_BUCKETS,
        at(3),
        at(4),
        at(5),
        first,
        &counts,
    )
    .ok_or_else(bad)
}

/// Walks the extensions of a store (`tail`: the bytes of the file after [`OFF_LABELS`]): its
/// labels, where its native histograms and its publication sequence are; an error saying why
/// when its labels extension is truncated or malformed. A native-histograms extension that is
/// not of its shape is noted ([`Extensions::native_problem`]) and the walk goes on after it
/// when its length is the extension's; a publication extension that is not of its shape, or
/// anything else, ends the walk.
pub fn decode_extensions(tail: &[u8]) -> Result<Extensions, String> {
    let mut out = Extensions::default();
    let mut at = 0usize;
    let word = |i: usize| {
        tail.get(i..i + 8)
            .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
    };
    let fits = |at: usize, size: usize| tail.len() >= at + size;
    while let Some(magic) = word(at) {
        let header = word(at + 8).unwrap_or(u64::MAX);
        let (len, reserved) = ((header & 0xffff_ffff) as usize, header >> 32);
        match magic {
            LABELS_MAGIC if at == 0 => {
                out.labels = decode_labels(&tail[at..])?;
                at += LABELS_HEADER + len;
            }
            NATIVE_MAGIC if out.native.is_none() && out.native_problem.is_none() => {
                let shape = word(at + NATIVE_OFF_SHAPE).unwrap_or(0);
                let expected =
                    (NATIVE_HISTOGRAM_COUNT as u64) | ((NATIVE_MAX_BUCKETS as u64) << 32);
                let sized = len == NATIVE_EXTENSION_SIZE - LABELS_HEADER;
                if sized && reserved == 0 && shape == expected && fits(at, NATIVE_EXTENSION_SIZE) {
                    out.native = Some(OFF_LABELS + at);
                } else {
                    out.native_problem = Some(
                        "its native-histograms extension is truncated or of another shape".into(),
                    );
                    if !sized {
                        break;
                    }
                }
                at += NATIVE_EXTENSION_SIZE;
            }
            SEQUENCE_MAGIC if out.sequence.is_none() => {
                if len != SEQUENCE_EXTENSION_SIZE - LABELS_HEADER
                    || reserved != 0
                    || !fits(at, SEQUENCE_EXTENSION_SIZE)
                {
                    break;
                }
                out.sequence = Some(OFF_LABELS + at);
                at += SEQUENCE_EXTENSION_SIZE;
            }
            _ => break,
        }
        at = at.next_multiple_of(8);
    }
    Ok(out)
}

/// The extension bytes for `labels` (header and labels); empty when there is no label.
pub fn encode_labels(labels: &WorkloadLabels) -> Vec<u8> {
    if labels.is_empty() {
        return Vec::new();
    }
    let mut body = Vec::new();
    for (name, value) in labels.iter() {
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    let mut out = Vec::with_capacity(LABELS_HEADER + body.len());
    out.extend_from_slice(&LABELS_MAGIC.to_ne_bytes());
    out.extend_from_slice(&(body.len() as u32).to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&body);
    out
}

/// The labels of the extension bytes `tail` (the bytes of a store file after
/// [`OFF_LABELS`]): none when `tail` does not start with [`LABELS_MAGIC`], an error saying why
/// when it does but does not hold valid labels.
pub fn decode_labels(tail: &[u8]) -> Result<WorkloadLabels, String> {
    let word = |i: usize| tail.get(i..i + 8).map(|b| b.try_into().expect("8 bytes"));
    if word(0).map(u64::from_ne_bytes) != Some(LABELS_MAGIC) {
        return Ok(WorkloadLabels::none());
    }
    let header = word(8).map(u64::from_ne_bytes).unwrap_or(u64::MAX);
    let len = (header & 0xffff_ffff) as usize;
    let (len, reserved) = (len, header >> 32);
    let rest = &tail[LABELS_HEADER.min(tail.len())..];
    if tail.len() < LABELS_HEADER || reserved != 0 || len > MAX_LABEL_BYTES || rest.len() < len {
        return Err("its workload-labels extension is truncated or malformed".into());
    }
    let body = &rest[..len];
    let fields: Vec<&[u8]> = body.split(|&b| b == 0).collect();
    // `n` NUL-terminated fields split into `n + 1` pieces, the last one empty.
    if body.last() != Some(&0) || fields.len() % 2 != 1 {
        return Err("its workload labels are not NUL-terminated name/value pairs".into());
    }
    let mut pairs = Vec::new();
    for pair in fields[..fields.len() - 1].chunks_exact(2) {
        let text = |b: &[u8]| {
            std::str::from_utf8(b)
                .map(str::to_owned)
                .map_err(|_| "its workload labels are not UTF-8".to_owned())
        };
        pairs.push((text(pair[0])?, text(pair[1])?));
    }
    WorkloadLabels::from_pairs(pairs).map_err(|e| format!("its workload labels are invalid: {e}"))
}

/// The slot events of numeric type `event_type` are counted in: their own for NIXL's event types,
/// `agent_err_unknown`'s for `agent_err_xfer_stalled` (see "Event types without a slot" above),
/// `None` for a type this library does not know.
pub const fn slot_of(event_type: u32) -> Option<usize> {
    if (event_type as usize) < SLOT_COUNT {
        Some(event_type as usize)
    } else if event_type == EventType::AgentErrXferStalled as u32 {
        Some(EventType::AgentErrUnknown as usize)
    } else {
        None
    }
}

/// Offset of `counters[slot]`.
pub const fn counter(slot: usize) -> usize {
    OFF_COUNTERS + 8 * slot
}

/// Offset of `gauges[slot]`.
pub const fn gauge(slot: usize) -> usize {
    OFF_GAUGES + 8 * slot
}

/// Offset of `histBuckets[slot][bucket]`.
pub const fn hist_bucket(slot: usize, bucket: usize) -> usize {
    OFF_HIST_BUCKETS + 8 * (slot * HIST_STRIDE + bucket)
}

/// Offset of `histSums[slot]`.
pub const fn hist_sum(slot: usize) -> usize {
    OFF_HIST_SUMS + 8 * slot
}

/// Offset of `bucketBounds[i]`.
pub const fn bound(i: usize) -> usize {
    OFF_BOUNDS + 8 * i
}

/// A store's bytes read as 8-byte words at byte offsets, with the fields decoded there: a live
/// mapping (the reader's `OpenStore`, which loads only the words a decode reads), or the tests'
/// images built word by word.
pub trait StoreWords {
    /// The u64 at byte offset `off` (a multiple of 8).
    fn u64_at(&self, off: usize) -> u64;

    /// The u32 at byte offset `off` (a multiple of 4).
    fn u32_at(&self, off: usize) -> u32 {
        let bytes = self.u64_at(off & !7).to_ne_bytes();
        let i = off & 4;
        u32::from_ne_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]])
    }

    /// The NUL-terminated string in the `len` bytes at `off` (all of them when there is no
    /// NUL), invalid UTF-8 replaced.
    fn c_str_at(&self, off: usize, len: usize) -> String {
        let mut bytes = Vec::with_capacity(len);
        for word in (off..off + len).step_by(8) {
            let word = self.u64_at(word).to_ne_bytes();
            match word.iter().position(|&b| b == 0) {
                Some(end) => {
                    bytes.extend_from_slice(&word[..end]);
                    break;
                }
                None => bytes.extend_from_slice(&word),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// A store's bytes as 8-byte words, built by the tests.
#[cfg(test)]
pub(crate) struct Image(pub Box<[u64; STORE_WORDS]>);

#[cfg(test)]
impl Image {
    /// All zeros.
    pub fn zeroed() -> Image {
        Image(Box::new([0; STORE_WORDS]))
    }
}

#[cfg(test)]
impl StoreWords for Image {
    fn u64_at(&self, off: usize) -> u64 {
        self.0[off / 8]
    }
}

/// Truncates `s` to at most `max` bytes at a character boundary.
pub use nixl_telemetry_series::labels::truncate_str;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_nixls() {
        assert_eq!(MAGIC.to_le_bytes(), *b"NIXLMPS1");
        assert_eq!(MAGIC, 0x3153_504d_4c58_494e);
        assert_eq!(counter(20), 912);
        assert_eq!(gauge(0), 920);
        assert_eq!(hist_bucket(6, 0), 2672);
        assert_eq!(hist_bucket(7, 4), 2968);
        assert_eq!(hist_sum(6), 6680);
        assert_eq!(bound(31), 744);
    }

    #[test]
    fn labels_round_trip_and_bad_extensions_are_refused() {
        let labels = WorkloadLabels::from_pairs(vec![
            ("slurm_job_id".into(), "42".into()),
            ("team".into(), "kv cache é".into()),
        ])
        .unwrap();
        let bytes = encode_labels(&labels);
        assert_eq!(&bytes[..8], b"NIXLLBL1");
        assert_eq!(
            bytes.len(),
            LABELS_HEADER + "slurm_job_id\x0042\x00team\x00kv cache é\x00".len()
        );
        assert_eq!(decode_labels(&bytes).unwrap(), labels);
        // Trailing bytes after the extension are ignored; no extension, no labels.
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0; 64]);
        assert_eq!(decode_labels(&longer).unwrap(), labels);
        assert!(encode_labels(&WorkloadLabels::none()).is_empty());
        assert!(decode_labels(&[]).unwrap().is_empty());
        assert!(decode_labels(&[0xff; 40]).unwrap().is_empty());
        // Malformed: truncated, an unpaired field, an invalid name, a length over the bound.
        assert!(decode_labels(&bytes[..bytes.len() - 1]).is_err());
        let mut odd = bytes.clone();
        odd.extend_from_slice(b"x\0");
        let n = (odd.len() - LABELS_HEADER) as u32;
        odd[8..12].copy_from_slice(&n.to_ne_bytes());
        assert!(decode_labels(&odd).unwrap_err().contains("pairs"));
        let mut bad_name = bytes.clone();
        bad_name[LABELS_HEADER] = b'-';
        assert!(decode_labels(&bad_name)
            .unwrap_err()
            .contains("not a Prometheus label name"));
        let mut huge = bytes.clone();
        huge[8..12].copy_from_slice(&(MAX_LABEL_BYTES as u32 + 1).to_ne_bytes());
        assert!(decode_labels(&huge).is_err());
    }

    /// Histograms of `values` as a writer keeps them: the widest one at its bound.
    fn histograms(values: &[&[u64]; 4]) -> [NativeHistogram; 4] {
        std::array::from_fn(|slot| {
            let mut h = NativeHistogram::new(3, NATIVE_MAX_BUCKETS);
            values[slot].iter().for_each(|&v| h.observe(v));
            h
        })
    }

    #[test]
    fn native_histograms_round_trip_in_a_fixed_size_after_the_labels() {
        // Buckets 0 to 159 at schema 3, and zeros: the span is the bound, at schema 3.
        let wide: Vec<u64> = (0..160)
            .flat_map(|i| {
                [
                    nixl_telemetry_series::native::upper_bound(i, 3).floor() as u64,
                    0,
                ]
            })
            .collect();
        let hs = histograms(&[&[5, 100, 1000], &[], &wide, &[0, 0, 7]]);
        assert_eq!(
            (hs[2].schema(), hs[2].bucket_span()),
            (3, NATIVE_MAX_BUCKETS)
        );
        let labels = WorkloadLabels::from_pairs(vec![("team".into(), "abc".into())]).unwrap();
        for labels in [WorkloadLabels::none(), labels] {
            let (bytes, placed) = encode_extensions(&labels, Some(&hs));
            let at = placed.native.unwrap();
            let labels_len = encode_labels(&labels).len();
            // After the labels, at a multiple of 8, always the same size; the publication
            // extension last.
            assert_eq!(at, OFF_LABELS + labels_len.next_multiple_of(8));
            assert_eq!(at % 8, 0);
            let sequence = at + NATIVE_EXTENSION_SIZE;
            assert_eq!(placed.sequence, Some(sequence));
            assert_eq!(bytes.len() + OFF_LABELS, sequence + SEQUENCE_EXTENSION_SIZE);
            assert!(OFF_LABELS + bytes.len() <= MAX_FILE_SIZE);
            assert_eq!(&bytes[at - OFF_LABELS..][..8], b"NIXLNHS1");
            assert_eq!(&bytes[sequence - OFF_LABELS..][..8], b"NIXLSEQ1");
            let ext = decode_extensions(&bytes).unwrap();
            assert_eq!(ext, placed);
            assert_eq!((ext.labels, ext.native), (labels.clone(), Some(at)));
            let word = |off: usize| {
                let i = at - OFF_LABELS + off;
                u64::from_ne_bytes(bytes[i..i + 8].try_into().unwrap())
            };
            assert_eq!(word(NATIVE_OFF_SEQUENCE), 0);
            for (slot, h) in hs.iter().enumerate() {
                assert_eq!(decode_native_histogram(word, slot).as_ref(), Ok(h));
            }
        }
        // Native histograms off: the publication extension alone, at 6,800.
        let (bytes, placed) = encode_extensions(&WorkloadLabels::none(), None);
        assert_eq!(bytes.len(), SEQUENCE_EXTENSION_SIZE);
        assert_eq!(&bytes[..8], b"NIXLSEQ1");
        assert_eq!((placed.native, placed.sequence), (None, Some(OFF_LABELS)));
        assert_eq!(decode_extensions(&bytes).unwrap(), placed);
        assert_eq!(decode_extensions(&[]).unwrap(), Extensions::default());
    }

    #[test]
    fn a_native_extension_of_another_shape_is_refused_and_unknown_bytes_are_ignored() {
        let hs = histograms(&[&[5], &[6], &[7], &[8]]);
        let (bytes, placed) = encode_extensions(&WorkloadLabels::none(), Some(&hs));
        let native_only = &bytes[..NATIVE_EXTENSION_SIZE];
        // Truncated, or of another shape: no native histograms, with why; the publication
        // extension after one of the right length is still found.
        let mut other = bytes.clone();
        other[NATIVE_OFF_SHAPE + 4] = 100; // another bucket bound
        for (bad, sequence) in [
            (&native_only[..NATIVE_EXTENSION_SIZE - 8], None),
            (&other[..], placed.sequence),
        ] {
            let ext = decode_extensions(bad).unwrap();
            assert_eq!((ext.native, ext.sequence), (None, sequence));
            assert!(ext.native_problem.unwrap().contains("another shape"));
        }
        // Bytes after the extensions that are not one we know are ignored.
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0xff; 24]);
        assert_eq!(decode_extensions(&longer).unwrap(), placed);
        assert_eq!(
            decode_extensions(native_only).unwrap().native,
            Some(OFF_LABELS)
        );
        // A histogram whose words are not one: more buckets than the bound, a count that is
        // not its buckets', a schema out of range, a first bucket no value can be in.
        for (word, value) in [(2, 161), (4, 99), (0, 9), (1, i32::MAX as u64 - 1)] {
            let mut bad = bytes.clone();
            let off = native_word(1, word);
            bad[off..off + 8].copy_from_slice(&value.to_ne_bytes());
            let read = |off: usize| u64::from_ne_bytes(bad[off..off + 8].try_into().unwrap());
            assert!(decode_native_histogram(read, 1).is_err(), "word {word}");
            assert!(decode_native_histogram(read, 0).is_ok());
        }
    }

    #[test]
    fn image_fields_decode() {
        let mut img = Image::zeroed();
        img.0[OFF_SCHEMA / 8] = u64::from(SCHEMA_VERSION) | (21u64 << 32);
        let name = b"rank\xc3\xa9\0zz";
        let mut word = [0u8; 8];
        word.copy_from_slice(&name[..8]);
        img.0[OFF_AGENT_NAME / 8] = u64::from_ne_bytes(word);
        assert_eq!((img.u32_at(OFF_SCHEMA), img.u32_at(OFF_SLOTS)), (1, 21));
        assert_eq!(img.c_str_at(OFF_AGENT_NAME, AGENT_NAME_LEN), "ranké");
        assert_eq!(img.c_str_at(OFF_HOSTNAME, HOSTNAME_LEN), "");
        assert_eq!(truncate_str("ééé", 5), "éé");
        assert_eq!(truncate_str("abc", 5), "abc");
    }
}
