//! The per-process store file of NIXL's `prometheus_mp` exporter (`storeLayout`, schema 1):
//! 6,800 bytes, native endian (little-endian on every platform NIXL ships), every field at
//! NIXL's offset, so NIXL's scrape-time reader reads our stores and our store scan reads NIXL's.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `NIXLMPS1` (written last, with release ordering) |
//! | 8 | 4 | schema version (1) |
//! | 12 | 4 | slot count (21, one per event type) |
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
//! labels. Bytes after 6,800 that do not start with this magic are ignored.

use nixl_telemetry_base::event::EVENT_TYPE_COUNT;
use nixl_telemetry_series::WorkloadLabels;

/// Size of a store file.
pub const STORE_SIZE: usize = 6800;
/// Size of a store in 8-byte words.
pub const STORE_WORDS: usize = STORE_SIZE / 8;
/// The magic, the bytes `NIXLMPS1` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"NIXLMPS1");
/// The layout version this module describes.
pub const SCHEMA_VERSION: u32 = 1;
/// Slots per array: one per event type.
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
    assert!(SLOT_COUNT == EVENT_TYPE_COUNT);
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
