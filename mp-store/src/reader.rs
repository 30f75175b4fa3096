//! Reading one store file (ours or NIXL's): the words a decode needs, loaded from the mapping
//! with atomic loads (the magic first, with acquire ordering; in place for NIXL's stores, copied
//! between two publications for ours, below), checked, and decoded into the series engine's
//! [`AgentSnapshot`] so the shared encoders can expose it; the workload labels and the native
//! histograms, when the file has their extensions ([`crate::layout`]), with it.
//!
//! A store of ours is read between two of its writer's publications (its publication
//! sequence, [`crate::layout`]): the values of one moment, before or after a flush, never
//! part of each. A read that meets a publication at every one of [`READ_ATTEMPTS`] tries
//! serves the last values this reader kept of the store, or, when it has none,
//! [`ReadOutcome::InUpdate`]. A native part that is not valid costs the store its native
//! histograms only ([`StoreView::native_problem`]).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};
use nixl_telemetry_base::fault_guard::{self, FaultGuard};
use nixl_telemetry_base::sync::LockUnpoisoned;
use nixl_telemetry_series::native::NativeHistogram;
use nixl_telemetry_series::{
    AgentSnapshot, Buckets, HistogramSnapshot, WorkloadLabels, HISTOGRAM_EVENTS,
};

use crate::layout::*;

/// A valid store, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreView {
    /// The writer's process id (the `pid` label).
    pub pid: i64,
    /// The exporter's number within its process (the `agent_instance` label).
    pub instance: u64,
    /// `CLOCK_MONOTONIC` ns of the last update.
    pub last_update_ns: u64,
    /// The `local_rank` label, empty for none.
    pub local_rank: String,
    /// The values, with the agent name and host name.
    pub snapshot: AgentSnapshot,
    /// Why the store is read without its native histograms although it has a native part
    /// (that part is not valid): its other series are served, and the reason is worth one
    /// warning.
    pub native_problem: Option<String>,
}

/// What a store file holds.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadOutcome {
    /// A store of this schema.
    Valid(Box<StoreView>),
    /// Not a store this reader can use: why, and whether that deserves a warning (a file
    /// whose magic is still 0 does not).
    Invalid {
        /// What is wrong.
        reason: String,
        /// True when the reason is not worth a warning.
        quiet: bool,
    },
    /// A store of ours whose writer was publishing at each of [`READ_ATTEMPTS`] tries, read by
    /// a reader that kept no earlier values of it: what the store held then, without its
    /// native histograms, possibly part of one flush and part of the next. Its writer is either
    /// alive (in the middle of a publication: serve nothing of it this time) or died in the
    /// middle of one (what it left is final).
    InUpdate(Box<StoreView>),
}

fn invalid(reason: String) -> ReadOutcome {
    ReadOutcome::Invalid {
        reason,
        quiet: false,
    }
}

/// Opens and reads the store at `path` (no symbolic link followed).
pub fn read_store(path: &Path) -> io::Result<ReadOutcome> {
    let file = crate::sys::open_read_nofollow(path)?;
    let len = file.metadata()?.len();
    read_file(&file, len)
}

/// Reads the store open as `file`, `len` bytes long, and its labels extension if it has one.
/// An error is a file that could not be mapped or read.
pub fn read_file(file: &File, len: u64) -> io::Result<ReadOutcome> {
    match OpenStore::map(file, len)? {
        Ok(store) => store.read(file),
        Err(outcome) => Ok(outcome),
    }
}

/// How many times a read tries to find the writer between two publications (each try after
/// the first yields the processor) before it gives up (see [`ReadOutcome::InUpdate`]).
pub const READ_ATTEMPTS: usize = 100;

/// A store file mapped once and read at every scrape (the store scan keeps one per file
/// between scrapes: no open, map and unmap per scrape); its extensions' headers, written
/// before the store is published and never changed, are read once; its native histograms,
/// which change, at every read.
///
/// The mapping is guarded against SIGBUS (`nixl_telemetry_base::fault_guard`): a process of the
/// same user that truncates the store while the serving process reads it cannot end that
/// process; the read that faulted is discarded ([`OpenStore::read`] fails).
pub struct OpenStore {
    /// Declared before `map`, so it is unregistered before the map is unmapped.
    guard: FaultGuard,
    map: MmapRaw,
    len: u64,
    /// The extensions, once read.
    extensions: std::sync::OnceLock<Result<Extensions, String>>,
    /// The last copy read between two publications (served when a later read meets a
    /// publication at every try), and a spare one to copy into.
    copies: std::sync::Mutex<Copies>,
}

/// An [`OpenStore`]'s copies of its store's values.
#[derive(Default)]
struct Copies {
    /// The last one read between two publications.
    last: Option<Copied>,
    /// One to copy into (the last but one), so that reads after the first two allocate none.
    spare: Option<Copied>,
}

impl OpenStore {
    /// Maps the store open as `file`, `len` bytes long (NIXL's 6,800 bytes and our extensions,
    /// at most [`MAX_FILE_SIZE`] bytes); `Err` with the outcome when it is too small to be a
    /// store.
    pub fn map(file: &File, len: u64) -> io::Result<Result<OpenStore, ReadOutcome>> {
        if len < STORE_SIZE as u64 {
            return Ok(Err(invalid(format!(
                "it is {len} bytes, smaller than a store ({STORE_SIZE})"
            ))));
        }
        let mapped = len.min(MAX_FILE_SIZE as u64) as usize;
        let map = MmapOptions::new().len(mapped).map_raw_read_only(file)?;
        fault_guard::reassert();
        Ok(Ok(OpenStore {
            guard: FaultGuard::new(map.as_ptr(), map.len()),
            map,
            len,
            extensions: std::sync::OnceLock::new(),
            copies: std::sync::Mutex::new(Copies::default()),
        }))
    }

    /// What the store holds now (`file` is the file it was mapped from, for its labels). An
    /// error when the file was truncated under the mapping (the read saw zeros, not the store).
    pub fn read(&self, file: &File) -> io::Result<ReadOutcome> {
        let truncated = || {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "it was truncated while it was read",
            )
        };
        let published = self.len > STORE_SIZE as u64 && self.words().u64_at(OFF_MAGIC) == MAGIC;
        let outcome = match published {
            // NIXL's layout alone (NIXL's stores), or not a store: no extension to read.
            false => decode(&self.words()),
            true => match self.extensions(file)? {
                Err(reason) => invalid(reason.clone()),
                Ok(extensions) => match extensions.sequence {
                    Some(at) => self.read_published(extensions, at),
                    None => self.read_unpublished(extensions),
                },
            },
        };
        if self.guard.faulted() {
            return Err(truncated());
        }
        Ok(outcome)
    }

    /// The store's extensions, read once (they are written before the store is published and
    /// never changed).
    fn extensions(&self, file: &File) -> io::Result<&Result<Extensions, String>> {
        if let Some(extensions) = self.extensions.get() {
            return Ok(extensions);
        }
        let tail_len = (self.len.min(MAX_FILE_SIZE as u64)) as usize - STORE_SIZE;
        let mut tail = vec![0u8; tail_len];
        file.read_exact_at(&mut tail, OFF_LABELS as u64)?;
        Ok(self.extensions.get_or_init(|| decode_extensions(&tail)))
    }

    /// A store with a publication extension at file offset `at`: its values copied between two
    /// publications (the sequence even and unchanged around the copy), then decoded; after
    /// [`READ_ATTEMPTS`] tries that each met a publication, the last copy this reader kept, or,
    /// with none, what the last try copied ([`ReadOutcome::InUpdate`]).
    fn read_published(&self, extensions: &Extensions, at: usize) -> ReadOutcome {
        let sequence = |order| self.ext_word(at + SEQUENCE_OFF_VALUE, order);
        let native = extensions.native.is_some();
        let spare = self.copies.lock_unpoisoned().spare.take();
        let mut copy = spare.unwrap_or_else(|| Copied::new(native));
        let consistent = (0..READ_ATTEMPTS).any(|attempt| {
            if attempt > 0 {
                std::thread::yield_now();
            }
            let before = sequence(Ordering::Acquire);
            self.copy(&mut copy, extensions.native);
            fence(Ordering::Acquire);
            before & 1 == 0 && sequence(Ordering::Relaxed) == before
        });
        let mut copies = self.copies.lock_unpoisoned();
        if consistent {
            copies.spare = copies.last.replace(copy);
        } else if copies.last.is_none() {
            return match decode(&copy) {
                ReadOutcome::Valid(mut view) => {
                    view.snapshot.labels = extensions.labels.clone();
                    ReadOutcome::InUpdate(view)
                }
                not_valid => not_valid,
            };
        }
        let kept = copies
            .last
            .as_ref()
            .expect("a copy read between two publications");
        let mut view = match decode(kept) {
            ReadOutcome::Valid(view) => view,
            not_valid => return not_valid,
        };
        let native = extensions.native.map(|_| kept.histograms());
        with_extensions(&mut view, extensions, native);
        ReadOutcome::Valid(view)
    }

    /// A store of ours of an earlier version (no publication extension): its classic values as
    /// they are, its native histograms copied under the native-histograms extension's own
    /// sequence, without them when the writer was updating them at every try.
    fn read_unpublished(&self, extensions: &Extensions) -> ReadOutcome {
        let mut view = match decode(&self.words()) {
            ReadOutcome::Valid(view) => view,
            not_valid => return not_valid,
        };
        let mut copy = Copied::new(true);
        let native = extensions.native.and_then(|at| {
            let sequence = |order| self.ext_word(at + NATIVE_OFF_SEQUENCE, order);
            (0..READ_ATTEMPTS).find_map(|attempt| {
                if attempt > 0 {
                    std::thread::yield_now();
                }
                let before = sequence(Ordering::Acquire);
                self.copy(&mut copy, Some(at));
                fence(Ordering::Acquire);
                (before & 1 == 0 && sequence(Ordering::Relaxed) == before)
                    .then(|| copy.histograms())
            })
        });
        match native {
            None if extensions.native.is_some() => {
                view.snapshot.labels = extensions.labels.clone();
            }
            native => with_extensions(&mut view, extensions, native),
        }
        ReadOutcome::Valid(view)
    }

    /// Copies into `copy` (relaxed loads) the words of NIXL's layout a decode reads (the
    /// header, the counters and gauges, the histograms' buckets and sums) and, when `native`
    /// (the file offset of the native-histograms extension) is given, each native histogram's
    /// words up to its last held bucket.
    fn copy(&self, copy: &mut Copied, native: Option<usize>) {
        let words = self.words();
        let mut take = |from: usize, to: usize| {
            for off in (from..to).step_by(8) {
                copy.words[off / 8] = words.u64_at(off);
            }
        };
        take(OFF_MAGIC, OFF_HIST_BUCKETS);
        for t in HISTOGRAM_EVENTS {
            let slot = t as usize;
            take(hist_bucket(slot, 0), hist_bucket(slot, HIST_STRIDE));
            take(hist_sum(slot), hist_sum(slot) + 8);
        }
        let Some(at) = native else {
            return;
        };
        for slot in 0..NATIVE_HISTOGRAM_COUNT {
            let held = self.ext_word(at + native_word(slot, 2), Ordering::Relaxed);
            let held = held.min(NATIVE_MAX_BUCKETS as u64) as usize;
            let end = native_word(slot, NATIVE_HISTOGRAM_HEADER_WORDS + held);
            for off in (native_word(slot, 0)..end).step_by(8) {
                copy.native[off / 8] = self.ext_word(at + off, Ordering::Relaxed);
            }
        }
    }

    /// The word at file offset `off` of the mapping (past NIXL's 6,800 bytes), loaded with
    /// `order`; 0 outside the mapping.
    fn ext_word(&self, off: usize, order: Ordering) -> u64 {
        if !off.is_multiple_of(8) || off + 8 > self.map.len() {
            return 0;
        }
        // SAFETY: as for `MappedWords::u64_at`: the mapping lives as long as `self`, its base
        // is page-aligned and `off` (8-aligned, its word inside the mapping, checked above)
        // addresses an aligned u64; writers change it only atomically, and an atomic load is
        // allowed on a read-only page.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(off).cast::<u64>().cast_mut()) }
            .load(order)
    }

    /// The mapping's words, read where a decode reads them.
    fn words(&self) -> MappedWords<'_> {
        MappedWords(&self.map)
    }
}

/// `view` with the labels of `extensions` and the native histograms `native` read from them:
/// none, with why, when they are not valid (the native part only is lost).
fn with_extensions(
    view: &mut StoreView,
    extensions: &Extensions,
    native: Option<Result<Box<[NativeHistogram; 4]>, String>>,
) {
    view.snapshot.labels = extensions.labels.clone();
    match native {
        Some(Ok(native)) => view.snapshot.native = Some(native),
        Some(Err(reason)) => view.native_problem = Some(reason),
        None => view.native_problem = extensions.native_problem.clone(),
    }
}

impl std::fmt::Debug for OpenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenStore")
            .field("map", &self.map)
            .field("len", &self.len)
            .field("truncated", &self.guard.faulted())
            .finish()
    }
}

/// A store's words copied out of the mapping (a read copies them between two publications,
/// then decodes the copy): NIXL's layout, and the native-histograms extension when it has one.
struct Copied {
    words: Box<[u64; STORE_WORDS]>,
    native: Vec<u64>,
}

impl Copied {
    /// Room for a store's words, and for its native histograms when `native`.
    fn new(native: bool) -> Copied {
        Copied {
            words: Box::new([0; STORE_WORDS]),
            native: vec![0; if native { NATIVE_EXTENSION_SIZE / 8 } else { 0 }],
        }
    }

    /// The four native histograms copied; an error saying why when the words are not
    /// histograms.
    fn histograms(&self) -> Result<Box<[NativeHistogram; 4]>, String> {
        let word = |off: usize| self.native[off / 8];
        let read: [Result<NativeHistogram, String>; NATIVE_HISTOGRAM_COUNT] =
            std::array::from_fn(|slot| decode_native_histogram(word, slot));
        let [a, b, c, d] = read;
        Ok(Box::new([a?, b?, c?, d?]))
    }
}

impl StoreWords for Copied {
    fn u64_at(&self, off: usize) -> u64 {
        self.words[off / 8]
    }
}

/// A mapped store read in place: each word with an atomic load, the magic with acquire
/// ordering (a decode reads it first), the others relaxed. A decode reads about 1.5 KB of the
/// 6,800 bytes (the names, the bounds, the counters and gauges, the two histograms' buckets):
/// no copy of the rest, which matters for a scrape that finds the stores out of cache.
struct MappedWords<'a>(&'a MmapRaw);

impl StoreWords for MappedWords<'_> {
    fn u64_at(&self, off: usize) -> u64 {
        assert!(
            off.is_multiple_of(8) && off < STORE_SIZE,
            "store word at {off}"
        );
        let order = if off == OFF_MAGIC {
            Ordering::Acquire
        } else {
            Ordering::Relaxed
        };
        // SAFETY: the mapping is STORE_SIZE bytes with a page-aligned base and lives as long
        // as the borrow of it, so the word at `off` (asserted in bounds and 8-aligned) is an
        // aligned u64 that stays mapped during the load. Writers change these bytes only with
        // atomic operations, and an atomic load of a native-width word is allowed on the
        // read-only pages of this mapping; `from_ptr` only needs the address, it never writes.
        unsafe { AtomicU64::from_ptr(self.0.as_ptr().add(off).cast::<u64>().cast_mut()) }
            .load(order)
    }
}

/// Checks and decodes a store (its magic first).
pub fn decode(image: &impl StoreWords) -> ReadOutcome {
    match image.u64_at(OFF_MAGIC) {
        MAGIC => {}
        0 => {
            return ReadOutcome::Invalid {
                reason: "its magic is 0 (not a published store)".into(),
                quiet: true,
            }
        }
        m => return invalid(format!("bad magic {m:#018x} (expected NIXLMPS1)")),
    }
    let schema = image.u32_at(OFF_SCHEMA);
    let slots = image.u32_at(OFF_SLOTS);
    let bucket_count = image.u64_at(OFF_BUCKET_COUNT);
    if schema != SCHEMA_VERSION || slots as usize != SLOT_COUNT {
        return invalid(format!(
            "schema {schema} with {slots} slots (this reader knows schema {SCHEMA_VERSION} with \
             {SLOT_COUNT} slots)"
        ));
    }
    if bucket_count == 0 || bucket_count > MAX_BUCKETS as u64 {
        return invalid(format!(
            "bucket count {bucket_count} (expected 1 to {MAX_BUCKETS})"
        ));
    }
    let bucket_count = bucket_count as usize;
    let bounds: Vec<f64> = (0..bucket_count)
        .map(|i| f64::from_bits(image.u64_at(bound(i))))
        .collect();
    let Ok(buckets) = Buckets::new(&bounds) else {
        return invalid(format!(
            "its bucket bounds {bounds:?} are not strictly increasing positive numbers"
        ));
    };
    // One slot per event type NIXL's store knows; the stalled transfer has none (its writer
    // counts it as `unknown`, see `crate::layout`): 0.
    let slot = |t: usize, offset: fn(usize) -> usize| {
        if t < SLOT_COUNT {
            image.u64_at(offset(t))
        } else {
            0
        }
    };
    let counters = std::array::from_fn(|t| slot(t, counter));
    let gauges = std::array::from_fn(|t| slot(t, gauge));
    let histograms = HISTOGRAM_EVENTS.map(|t| {
        let slot = t as usize;
        HistogramSnapshot {
            bounds: buckets.clone(),
            buckets: (0..=bucket_count)
                .map(|b| image.u64_at(hist_bucket(slot, b)))
                .collect(),
            sum: image.u64_at(hist_sum(slot)),
        }
    });
    ReadOutcome::Valid(Box::new(StoreView {
        pid: image.u64_at(OFF_PID) as i64,
        instance: image.u64_at(OFF_INSTANCE),
        last_update_ns: image.u64_at(OFF_LAST_UPDATE),
        local_rank: image.c_str_at(OFF_LOCAL_RANK, LOCAL_RANK_LEN),
        snapshot: AgentSnapshot {
            agent_name: Arc::from(image.c_str_at(OFF_AGENT_NAME, AGENT_NAME_LEN)),
            hostname: Arc::from(image.c_str_at(OFF_HOSTNAME, HOSTNAME_LEN)),
            labels: WorkloadLabels::none(),
            xfer_stalled: false,
            counters,
            gauges,
            histograms,
            native: None,
        },
        native_problem: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::EventType;

    fn valid_image() -> Image {
        let mut img = Image::zeroed();
        img.0[0] = MAGIC;
        img.0[OFF_SCHEMA / 8] = 1 | (21 << 32);
        img.0[OFF_PID / 8] = 99;
        img.0[OFF_BUCKET_COUNT / 8] = 2;
        img.0[bound(0) / 8] = 10f64.to_bits();
        img.0[bound(1) / 8] = 100f64.to_bits();
        img.0[OFF_AGENT_NAME / 8] = u64::from_le_bytes(*b"agent\0\0\0");
        img.0[hist_bucket(6, 0) / 8] = 1;
        img.0[hist_bucket(6, 2) / 8] = 2;
        img.0[hist_sum(6) / 8] = 2005;
        img.0[counter(10) / 8] = 4;
        img
    }

    #[test]
    fn a_valid_image_decodes_into_a_snapshot() {
        let ReadOutcome::Valid(v) = decode(&valid_image()) else {
            panic!()
        };
        assert_eq!((v.pid, v.instance, v.local_rank.as_str()), (99, 0, ""));
        let s = &v.snapshot;
        assert_eq!((&*s.agent_name, &*s.hostname), ("agent", ""));
        let h = s.histogram(EventType::AgentXferTime).unwrap();
        assert_eq!(h.cumulative(), [1, 1, 3]);
        assert_eq!((h.count(), h.sum), (3, 2005));
        assert_eq!(h.bounds.bounds(), [10.0, 100.0]);
        assert_eq!(s.errors("backend"), Some(4));
    }

    #[test]
    fn invalid_images_say_why() {
        let with = |off: usize, value: u64| {
            let mut img = valid_image();
            img.0[off / 8] = value;
            decode(&img)
        };
        let reason = |o: ReadOutcome| match o {
            ReadOutcome::Invalid { reason, quiet } => (reason, quiet),
            other => panic!("{other:?}"),
        };
        let (r, quiet) = reason(with(OFF_MAGIC, 0));
        assert!(quiet && r.contains("magic is 0"), "{r}");
        let (r, quiet) = reason(with(OFF_MAGIC, 7));
        assert!(!quiet && r.contains("bad magic"), "{r}");
        assert!(reason(with(OFF_SCHEMA, 2 | (21 << 32)))
            .0
            .contains("schema 2"));
        assert!(reason(with(OFF_SCHEMA, 1 | (20 << 32)))
            .0
            .contains("20 slots"));
        assert!(reason(with(OFF_BUCKET_COUNT, 33))
            .0
            .contains("bucket count 33"));
        assert!(reason(with(OFF_BUCKET_COUNT, 0))
            .0
            .contains("bucket count 0"));
        assert!(reason(with(bound(1), 5f64.to_bits()))
            .0
            .contains("bucket bounds"));
    }

    #[test]
    fn short_files_are_invalid_and_missing_ones_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nixl.1.2.3.mmap");
        std::fs::write(&p, [0u8; 16]).unwrap();
        let ReadOutcome::Invalid { reason, quiet } = read_store(&p).unwrap() else {
            panic!()
        };
        assert!(!quiet && reason.contains("16 bytes"), "{reason}");
        assert!(read_store(&dir.path().join("missing")).is_err());
    }
}
