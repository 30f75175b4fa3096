//! The writer's own copy of its store: every word of NIXL's layout (header and values) and the
//! native histograms. A batch updates the copy, then the values it changed are published into
//! the mapped file as one update under the publication sequence ([`crate::layout`]), so a
//! reader in another process sees the store before the batch or after it, never in between.
//! Because the copy is the writer's, a store file another process truncated, deleted or
//! replaced is made again whole from it: nothing recorded is lost.

use std::sync::atomic::{fence, Ordering};

use nixl_telemetry_base::{Event, EventType};
use nixl_telemetry_series::native::{NativeHistogram, DEFAULT_SCHEMA};
use nixl_telemetry_series::{Buckets, WorkloadLabels, HISTOGRAM_EVENTS, NATIVE_EVENTS};

use super::file::StoreFile;
use super::Identity;
use crate::layout::*;
use crate::sys;

/// The values of a store, as its writer keeps them.
pub(super) struct Values {
    /// NIXL's layout, word by word (the magic included).
    words: Box<[u64; STORE_WORDS]>,
    buckets: Buckets,
    /// Bit `t` set: event type `t` has a last-value gauge.
    gauges: u32,
    labels: WorkloadLabels,
    /// The native histograms, when kept.
    native: Option<Native>,
    /// The publication sequence last written (even).
    sequence: u64,
}

/// The native histograms of [`NATIVE_EVENTS`], the bucket count each had when last published
/// (words past a shorter new count are zeroed) and which changed since.
struct Native {
    histograms: [NativeHistogram; NATIVE_HISTOGRAM_COUNT],
    written: [usize; NATIVE_HISTOGRAM_COUNT],
    changed: [bool; NATIVE_HISTOGRAM_COUNT],
}

impl Values {
    /// A new store's values for `id` with histograms over `buckets` (at most
    /// [`MAX_BUCKETS`] bounds), and native histograms when `native` (schema 3 at first, at most
    /// [`NATIVE_MAX_BUCKETS`] buckets each). Names longer than the layout holds are truncated
    /// with a warning.
    pub(super) fn new(id: &Identity, buckets: &Buckets, native: bool) -> Values {
        let mut words = Box::new([0u64; STORE_WORDS]);
        for (i, chunk) in header(id, buckets).chunks_exact(8).enumerate() {
            words[i] = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
        }
        words[OFF_MAGIC / 8] = MAGIC;
        words[OFF_LAST_UPDATE / 8] = sys::monotonic_ns();
        let gauges = EventType::ALL
            .iter()
            .filter(|t| t.metrics().gauge.is_some())
            .fold(0, |bits, t| bits | t.bit());
        Values {
            words,
            buckets: buckets.clone(),
            gauges,
            labels: id.labels.clone(),
            native: native.then(|| Native {
                histograms: std::array::from_fn(|_| {
                    NativeHistogram::new(DEFAULT_SCHEMA, NATIVE_MAX_BUCKETS)
                }),
                written: [0; NATIVE_HISTOGRAM_COUNT],
                changed: [false; NATIVE_HISTOGRAM_COUNT],
            }),
            sequence: 0,
        }
    }

    /// The words of NIXL's layout.
    pub(super) fn words(&self) -> &[u64; STORE_WORDS] {
        &self.words
    }

    /// The store's instance number (in its header) becomes `instance`.
    pub(super) fn set_instance(&mut self, instance: u64) {
        self.words[OFF_INSTANCE / 8] = instance;
    }

    /// The extension bytes of a store file holding these values now, and where they are.
    pub(super) fn extension(&self) -> (Vec<u8>, Extensions) {
        encode_extensions(&self.labels, self.native.as_ref().map(|n| &n.histograms))
    }

    /// Applies a batch in order: each event adds its value to its counter, sets its gauge
    /// (event types that have one), and for the transfer times counts its bucket and adds to
    /// the histogram's sum, and is observed by its native histogram (when kept); the heartbeat
    /// is then set once. A stalled transfer is counted in `agent_err_unknown`'s slot
    /// ([`slot_of`]); unknown types are skipped. Returns how many events were applied.
    pub(super) fn apply(&mut self, events: &[Event]) -> usize {
        let mut applied = 0;
        let histograms = HISTOGRAM_EVENTS.iter().fold(0, |bits, t| bits | t.bit());
        for e in events {
            let Some(t) = slot_of(e.event_type) else {
                continue;
            };
            applied += 1;
            add(&mut self.words[counter(t) / 8], e.value);
            let bit = 1u32 << t;
            if self.gauges & bit != 0 {
                self.words[gauge(t) / 8] = e.value;
            }
            if histograms & bit != 0 {
                add(
                    &mut self.words[hist_bucket(t, self.buckets.index_of(e.value)) / 8],
                    1,
                );
                add(&mut self.words[hist_sum(t) / 8], e.value);
            }
            if let Some(native) = &mut self.native {
                let slot = e
                    .kind()
                    .and_then(|t| NATIVE_EVENTS.iter().position(|&n| n == t));
                if let Some(slot) = slot {
                    native.histograms[slot].observe(e.value);
                    native.changed[slot] = true;
                }
            }
        }
        if applied > 0 {
            self.words[OFF_LAST_UPDATE / 8] = sys::monotonic_ns();
        }
        applied
    }

    /// Publishes what the batches applied since the last publication changed into `file`, as
    /// one update under the publication sequence: the sequence odd (and the native-histograms
    /// extension's, for readers of earlier versions), the counters, gauges, the histograms'
    /// buckets and sums, the heartbeat and the native histograms that changed, then the
    /// sequence even again with release ordering.
    pub(super) fn publish(&mut self, file: &StoreFile) {
        let placed = file.placed();
        let sequences = [
            placed.sequence.map(|at| at + SEQUENCE_OFF_VALUE),
            placed.native.map(|at| at + NATIVE_OFF_SEQUENCE),
        ];
        let sequences = sequences.iter().flatten().map(|&off| file.word(off));
        let odd = self.sequence.wrapping_add(1);
        for word in sequences.clone() {
            word.store(odd, Ordering::Relaxed);
        }
        fence(Ordering::Release);
        let put = |off: usize| file.word(off).store(self.words[off / 8], Ordering::Relaxed);
        (OFF_COUNTERS..OFF_HIST_BUCKETS).step_by(8).for_each(put);
        for t in HISTOGRAM_EVENTS {
            let slot = t as usize;
            (0..=self.buckets.bounds().len()).for_each(|b| put(hist_bucket(slot, b)));
            put(hist_sum(slot));
        }
        put(OFF_LAST_UPDATE);
        if let (Some(native), Some(at)) = (&mut self.native, placed.native) {
            publish_native(native, |off| file.word(at + off));
        }
        self.sequence = odd.wrapping_add(1);
        for word in sequences {
            word.store(self.sequence, Ordering::Release);
        }
    }

    /// The native histograms, when kept (the tests compare them with the series engine's).
    #[cfg(test)]
    pub(super) fn native_histograms(&self) -> Option<&[NativeHistogram; NATIVE_HISTOGRAM_COUNT]> {
        self.native.as_ref().map(|n| &n.histograms)
    }
}

/// Writes the native histograms that changed into the extension whose word at offset `off` (in
/// the extension) `word` gives, and marks them written.
fn publish_native<'a>(
    native: &mut Native,
    word: impl Fn(usize) -> &'a std::sync::atomic::AtomicU64,
) {
    let changed = std::mem::take(&mut native.changed);
    for slot in (0..NATIVE_HISTOGRAM_COUNT).filter(|&s| changed[s]) {
        let h = &native.histograms[slot];
        for (i, value) in native_histogram_words(h).enumerate() {
            word(native_word(slot, i)).store(value, Ordering::Relaxed);
        }
        let held = h.bucket_span();
        for i in held..native.written[slot] {
            word(native_word(slot, NATIVE_HISTOGRAM_HEADER_WORDS + i)).store(0, Ordering::Relaxed);
        }
        native.written[slot] = held;
    }
}

#[inline]
fn add(word: &mut u64, value: u64) {
    *word = word.wrapping_add(value);
}

/// The header fields of `id`, as the bytes before the counters (the magic left 0).
fn header(id: &Identity, buckets: &Buckets) -> Vec<u8> {
    let mut h = vec![0u8; OFF_COUNTERS];
    let mut put = |off: usize, bytes: &[u8]| h[off..off + bytes.len()].copy_from_slice(bytes);
    put(OFF_SCHEMA, &SCHEMA_VERSION.to_ne_bytes());
    put(OFF_SLOTS, &(SLOT_COUNT as u32).to_ne_bytes());
    put(OFF_PID, &id.pid.to_ne_bytes());
    put(OFF_INSTANCE, &id.instance.to_ne_bytes());
    put(
        OFF_BUCKET_COUNT,
        &(buckets.bounds().len() as u64).to_ne_bytes(),
    );
    for (field, value, off, len) in [
        ("agent name", &id.agent_name, OFF_AGENT_NAME, AGENT_NAME_LEN),
        ("hostname", &id.hostname, OFF_HOSTNAME, HOSTNAME_LEN),
        ("local rank", &id.local_rank, OFF_LOCAL_RANK, LOCAL_RANK_LEN),
    ] {
        let kept = truncate_str(value, len - 1);
        if kept.len() < value.len() {
            log::warn!(
                "prometheus_mp: {field} '{value}' exceeds {} chars; the store keeps '{kept}'",
                len - 1
            );
        }
        put(off, kept.as_bytes());
    }
    for (i, b) in buckets.bounds().iter().enumerate() {
        put(bound(i), &b.to_ne_bytes());
    }
    h
}
