//! One process's store file, written as NIXL writes it: created owner-only and unnamed
//! (`O_TMPFILE`, or a `.staging` name when the file system cannot), locked with an exclusive
//! `flock` for the writer's life, sized to 6,800 bytes (plus the workload-labels extension
//! when the writer has labels and the native-histograms extension when it keeps native
//! histograms, see [`crate::layout`]), filled (header, heartbeat, magic last
//! with release ordering), then published under its final name
//! `nixl.<pid>.<run marker>.<instance>.mmap` in one step (`linkat`, or `rename`). Dropping the
//! writer unmaps and closes it (releasing the lock) and leaves the file for the store scan,
//! which serves it for the stale TTL and then removes it.
//!
//! [`StoreWriter::apply`] runs on the agent's collector's flush thread, inside the exporter's export:
//! the producer hot path never touches the store. It is the only writer of its store (the
//! lock keeps other processes out, the agent's collector serialises its flushes), so every
//! update is a relaxed load and store of one word; readers load words atomically too. The
//! native histograms (when kept) are observed into the writer's own copy, then the ones a
//! batch changed are copied into the mapping as one update under the extension's sequence,
//! so that a reader never keeps a torn histogram.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::OnceLock;

use memmap2::{MmapOptions, MmapRaw};
use nixl_telemetry_base::fork::{replace_in_child, ReplacedInChild};
use nixl_telemetry_base::sync::LockUnpoisoned;
use nixl_telemetry_base::{Event, EventType};
use nixl_telemetry_series::native::{NativeHistogram, DEFAULT_SCHEMA};
use nixl_telemetry_series::{Buckets, WorkloadLabels, HISTOGRAM_EVENTS, NATIVE_EVENTS};

use crate::layout::*;
use crate::sys;

/// What a store says about its writer (its labels) besides the values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The agent's name (at most 255 bytes are kept).
    pub agent_name: String,
    /// The host name (at most 127 bytes).
    pub hostname: String,
    /// The local rank, empty for none (at most 63 bytes).
    pub local_rank: String,
    /// The writer's process id.
    pub pid: i64,
    /// The process's run marker (`CLOCK_REALTIME` ns when the process first created a store).
    pub run_marker: u64,
    /// The exporter's number within the process, from 0.
    pub instance: u64,
    /// The workload labels, kept in the store's labels extension (none: a store of exactly
    /// NIXL's bytes).
    pub labels: WorkloadLabels,
}

impl Identity {
    /// The identity of a new store of this process: its pid, its run marker and the next
    /// instance number.
    pub fn for_this_process(
        agent_name: &str,
        hostname: &str,
        local_rank: &str,
        labels: WorkloadLabels,
    ) -> Identity {
        static RUN_MARKER: OnceLock<u64> = OnceLock::new();
        static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(0);
        Identity {
            agent_name: agent_name.to_owned(),
            hostname: hostname.to_owned(),
            local_rank: local_rank.to_owned(),
            pid: i64::from(std::process::id()),
            run_marker: *RUN_MARKER.get_or_init(sys::realtime_ns),
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            labels,
        }
    }

    /// The store's file name.
    pub fn file_name(&self) -> String {
        format!(
            "nixl.{}.{}.{}.mmap",
            self.pid, self.run_marker, self.instance
        )
    }
}

/// Whether `name` is a store file name (`nixl.*.mmap`), as the store scan matches it.
pub fn is_store_name(name: &[u8]) -> bool {
    name.len() >= b"nixl..mmap".len() && name.starts_with(b"nixl.") && name.ends_with(b".mmap")
}

/// The per-event-type facts the writer needs, from the shared descriptor.
struct Slots {
    /// Bit `t` set: event type `t` has a last-value gauge.
    gauges: u32,
    /// Bit `t` set: event type `t` feeds a histogram.
    histograms: u32,
}

fn slots() -> Slots {
    let mut s = Slots {
        gauges: 0,
        histograms: 0,
    };
    for t in EventType::ALL {
        if t.metrics().gauge.is_some() {
            s.gauges |= t.bit();
        }
    }
    for t in HISTOGRAM_EVENTS {
        s.histograms |= t.bit();
    }
    s
}

/// A live store: the mapped file, the writer's lock (through `file`) and its bucket bounds.
pub struct StoreWriter {
    /// Declared first, so the mapping is unregistered before it is unmapped: a forked child
    /// does not keep it (nor so the file and its lock, which tells a store scan the writer
    /// lives).
    _in_child: ReplacedInChild,
    map: MmapRaw,
    /// Keeps the descriptor, and so the `flock`, for the writer's life.
    _file: File,
    path: PathBuf,
    buckets: Buckets,
    gauges: u32,
    histograms: u32,
    /// The native histograms, when kept: their extension, and this process's copy of them.
    native: Option<NativeStore>,
}

/// A writer's native histograms: the process's own copy (the writer updates it, then copies
/// what changed into the mapping under the extension's sequence) and where they are mapped.
struct NativeStore {
    /// The file offset of the native-histograms extension.
    at: usize,
    /// The histograms of [`NATIVE_EVENTS`], and the bucket count each had when last written
    /// (words past a shorter new count are zeroed). Only the flush thread takes the lock.
    state: std::sync::Mutex<(
        [NativeHistogram; NATIVE_HISTOGRAM_COUNT],
        [usize; NATIVE_HISTOGRAM_COUNT],
    )>,
}

impl std::fmt::Debug for StoreWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreWriter")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl StoreWriter {
    /// Creates, fills and publishes the store of `id` in `dir` with histograms over `buckets`
    /// (at most [`MAX_BUCKETS`] bounds). Names longer than the layout holds are truncated
    /// with a warning.
    pub fn create(dir: &Path, id: &Identity, buckets: &Buckets) -> io::Result<StoreWriter> {
        StoreWriter::create_with(dir, id, buckets, false)
    }

    /// [`StoreWriter::create`], keeping native histograms of [`NATIVE_EVENTS`] (schema 3 at
    /// first, at most [`NATIVE_MAX_BUCKETS`] buckets each) in the store's native-histograms
    /// extension when `native` is true (see [`crate::layout`]); false writes the same store
    /// as [`StoreWriter::create`].
    pub fn create_with(
        dir: &Path,
        id: &Identity,
        buckets: &Buckets,
        native: bool,
    ) -> io::Result<StoreWriter> {
        if buckets.bounds().len() > MAX_BUCKETS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} histogram bounds; a store holds at most {MAX_BUCKETS}",
                    buckets.bounds().len()
                ),
            ));
        }
        let path = dir.join(id.file_name());
        let header = header(id, buckets);
        let histograms: Option<[NativeHistogram; NATIVE_HISTOGRAM_COUNT]> = native.then(|| {
            std::array::from_fn(|_| NativeHistogram::new(DEFAULT_SCHEMA, NATIVE_MAX_BUCKETS))
        });
        let (extension, native_at) = encode_extensions(&id.labels, histograms.as_ref());
        let (file, map) = match create_unnamed(dir, &path, &header, &extension) {
            Ok(created) => created,
            // No O_TMPFILE on this file system (or no /proc to link it through): a staging
            // name the store scan does not match, renamed into place once filled.
            Err(_) => create_staged(&path, &header, &extension)?,
        };
        let s = slots();
        Ok(StoreWriter {
            _in_child: replace_in_child(map.as_ptr(), map.len()),
            map,
            _file: file,
            path,
            buckets: buckets.clone(),
            gauges: s.gauges,
            histograms: s.histograms,
            native: native_at.zip(histograms).map(|(at, h)| NativeStore {
                at,
                state: std::sync::Mutex::new((h, [0; NATIVE_HISTOGRAM_COUNT])),
            }),
        })
    }

    /// The store's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        word_of(&self.map, off)
    }

    /// Applies a batch in order: each event adds its value to its counter, sets its gauge
    /// (event types that have one), and for the transfer times counts its bucket and adds to
    /// the histogram's sum; then the heartbeat is refreshed once. Unknown types are skipped.
    /// Returns how many events were applied.
    pub fn apply(&self, events: &[Event]) -> usize {
        let mut applied = 0;
        for e in events {
            let t = e.event_type as usize;
            if t >= SLOT_COUNT {
                continue;
            }
            applied += 1;
            add(self.word(counter(t)), e.value);
            let bit = 1u32 << t;
            if self.gauges & bit != 0 {
                self.word(gauge(t)).store(e.value, Ordering::Relaxed);
            }
            if self.histograms & bit != 0 {
                add(self.word(hist_bucket(t, self.buckets.index_of(e.value))), 1);
                add(self.word(hist_sum(t)), e.value);
            }
        }
        if let Some(native) = &self.native {
            self.apply_native(native, events);
        }
        if applied > 0 {
            self.word(OFF_LAST_UPDATE)
                .store(sys::monotonic_ns(), Ordering::Relaxed);
        }
        applied
    }

    /// Observes the native histograms of `events`, then writes those that changed into the
    /// mapping as one update under the extension's sequence (see [`crate::layout`]).
    fn apply_native(&self, native: &NativeStore, events: &[Event]) {
        let mut state = native.state.lock_unpoisoned();
        let (histograms, written) = &mut *state;
        let mut changed = [false; NATIVE_HISTOGRAM_COUNT];
        for e in events {
            if let Some(slot) = e
                .kind()
                .and_then(|t| NATIVE_EVENTS.iter().position(|&n| n == t))
            {
                histograms[slot].observe(e.value);
                changed[slot] = true;
            }
        }
        if !changed.contains(&true) {
            return;
        }
        let word = |off: usize| self.word(native.at + off);
        let sequence = word(NATIVE_OFF_SEQUENCE);
        let before = sequence.load(Ordering::Relaxed);
        sequence.store(before.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for slot in (0..NATIVE_HISTOGRAM_COUNT).filter(|&s| changed[s]) {
            let h = &histograms[slot];
            for (i, value) in native_histogram_words(h).enumerate() {
                word(native_word(slot, i)).store(value, Ordering::Relaxed);
            }
            let held = h.bucket_span();
            for i in held..written[slot] {
                word(native_word(slot, NATIVE_HISTOGRAM_HEADER_WORDS + i))
                    .store(0, Ordering::Relaxed);
            }
            written[slot] = held;
        }
        sequence.store(before.wrapping_add(2), Ordering::Release);
    }
}

/// The store's one writer adds without a read-modify-write instruction.
#[inline]
fn add(word: &AtomicU64, value: u64) {
    word.store(
        word.load(Ordering::Relaxed).wrapping_add(value),
        Ordering::Relaxed,
    );
}

/// The word at byte offset `off` of a store mapping.
fn word_of(map: &MmapRaw, off: usize) -> &AtomicU64 {
    assert!(off.is_multiple_of(8) && off + 8 <= map.len());
    // SAFETY: `map` is a live shared mapping whose base is page-aligned, so `off` (a multiple
    // of 8 whose word is inside the mapping, asserted) addresses an aligned, in-bounds u64 that
    // stays mapped as long as `map` is borrowed. Other processes
    // access the same bytes only with atomic operations (ours, or NIXL's `__atomic` builtins),
    // so viewing them as an AtomicU64 does not race with a non-atomic access.
    unsafe { AtomicU64::from_ptr(map.as_mut_ptr().add(off).cast::<u64>()) }
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

/// Sizes `file` to a store (and its `extension` bytes, possibly none), writes the extension,
/// maps the store, writes `header`, the heartbeat and, last, the magic.
fn fill(file: &File, header: &[u8], extension: &[u8]) -> io::Result<MmapRaw> {
    file.set_len((STORE_SIZE + extension.len()) as u64)?;
    file.write_all_at(extension, OFF_LABELS as u64)?;
    // The whole file: the native-histograms extension (if any) is updated in place.
    let map = MmapOptions::new()
        .len(STORE_SIZE + extension.len())
        .map_raw(file)?;
    for (i, chunk) in header.chunks_exact(8).enumerate().skip(1) {
        let value = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
        word_of(&map, 8 * i).store(value, Ordering::Relaxed);
    }
    word_of(&map, OFF_LAST_UPDATE).store(sys::monotonic_ns(), Ordering::Relaxed);
    word_of(&map, OFF_MAGIC).store(MAGIC, Ordering::Release);
    Ok(map)
}

/// Takes the writer's lock; a failure is logged and the store is written anyway (its writer
/// then looks departed to a store scan, which serves it for the TTL after each update).
fn lock(file: &File, path: &Path) {
    match sys::try_claim(file) {
        Ok(true) => {}
        Ok(false) => log::warn!(
            "prometheus_mp: store {} is locked by another process; writing it anyway",
            path.display()
        ),
        Err(e) => log::warn!(
            "prometheus_mp: cannot lock store {} ({e}); collectors will judge its liveness by \
             the stale TTL",
            path.display()
        ),
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// An unnamed file in `dir`, filled, then linked as `path`.
fn create_unnamed(
    dir: &Path,
    path: &Path,
    header: &[u8],
    extension: &[u8],
) -> io::Result<(File, MmapRaw)> {
    let dir_c = c_path(dir)?;
    // SAFETY: open(2) with a NUL-terminated path that outlives the call; O_TMPFILE takes a
    // mode argument, passed as the variadic third argument.
    let fd = unsafe {
        libc::open(
            dir_c.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            nixl_telemetry_base::owner_only::FILE_MODE as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open(2) and nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    lock(&file, path);
    let map = fill(&file, header, extension)?;
    let proc_path = c_path(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())))?;
    let target = c_path(path)?;
    // SAFETY: linkat(2) with two NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((file, map))
}

/// A file created as `<path>.staging`, filled, then renamed to `path`.
fn create_staged(path: &Path, header: &[u8], extension: &[u8]) -> io::Result<(File, MmapRaw)> {
    let mut staging = path.as_os_str().to_owned();
    staging.push(".staging");
    let staging = PathBuf::from(staging);
    let file = sys::open_file(&staging, true)?;
    lock(&file, path);
    let published = fill(&file, header, extension).and_then(|map| {
        std::fs::rename(&staging, path)?;
        Ok(map)
    });
    if published.is_err() {
        let _ = std::fs::remove_file(&staging);
    }
    Ok((file, published?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::{read_store, ReadOutcome};
    use std::os::unix::fs::PermissionsExt;

    fn identity(name: &str) -> Identity {
        Identity {
            agent_name: name.into(),
            hostname: "host".into(),
            local_rank: "2".into(),
            pid: 4242,
            run_marker: 17,
            instance: 3,
            labels: WorkloadLabels::none(),
        }
    }

    fn words(path: &Path) -> Vec<u64> {
        std::fs::read(path)
            .unwrap()
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn a_new_store_is_published_filled_owner_only_and_locked() {
        let dir = tempfile::tempdir().unwrap();
        let w = StoreWriter::create(dir.path(), &identity("a"), &Buckets::default()).unwrap();
        assert_eq!(w.path(), dir.path().join("nixl.4242.17.3.mmap"));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("nixl.4242.17.3.mmap")]);
        let meta = std::fs::metadata(w.path()).unwrap();
        assert_eq!(meta.len(), STORE_SIZE as u64);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let probe = sys::open_read_nofollow(w.path()).unwrap();
        assert!(!sys::try_lock_exclusive(&probe).unwrap());
        let img = words(w.path());
        assert_eq!(img[0], MAGIC);
        assert_eq!(img[1], 1 | (21 << 32));
        assert_eq!((img[2], img[4], img[5]), (4242, 3, 18));
        assert!(img[3] > 0, "heartbeat");
        // The store outlives its writer, unlocked.
        let path = w.path().to_owned();
        drop(w);
        assert!(sys::try_lock_exclusive(&probe).unwrap());
        assert_eq!(words(&path)[0], MAGIC);
    }

    #[test]
    fn events_update_counters_gauges_and_inclusive_buckets() {
        let dir = tempfile::tempdir().unwrap();
        let bounds = Buckets::new(&[10.0, 100.0, 1000.0]).unwrap();
        let w = StoreWriter::create(dir.path(), &identity("a"), &bounds).unwrap();
        let before = words(w.path())[3];
        let xfer = |v| Event::new(EventType::AgentXferTime, v);
        let batch = [1, 10, 11, 1000, 1001].map(xfer);
        assert_eq!(w.apply(&batch), 5);
        let tx = |v| Event::new(EventType::AgentTxBytes, v);
        let unknown = Event {
            event_type: 21,
            value: 9,
        };
        assert_eq!(w.apply(&[tx(5), tx(7), unknown]), 2);
        assert_eq!(w.apply(&[Event::new(EventType::AgentErrBackend, 1)]), 1);
        assert_eq!(w.apply(&[Event::new(EventType::AgentTxRequestsNum, 1)]), 1);
        let img = words(w.path());
        let at = |off: usize| img[off / 8];
        assert_eq!(
            (0..4).map(|b| at(hist_bucket(6, b))).collect::<Vec<_>>(),
            [2, 1, 1, 1]
        );
        assert_eq!(at(hist_sum(6)), 2023);
        assert_eq!((at(counter(6)), at(gauge(6))), (2023, 1001));
        assert_eq!((at(counter(0)), at(gauge(0))), (12, 7));
        // Errors and request counts have no gauge slot value.
        assert_eq!((at(counter(10)), at(gauge(10))), (1, 0));
        assert_eq!((at(counter(2)), at(gauge(2))), (1, 0));
        assert!(at(OFF_LAST_UPDATE) >= before);
        // Nothing else moved.
        for slot in (0..SLOT_COUNT).filter(|s| ![0, 2, 6, 10].contains(s)) {
            assert_eq!(at(counter(slot)), 0, "counter {slot}");
        }
        assert_eq!(at(hist_sum(7)), 0);
        let ReadOutcome::Valid(view) = read_store(w.path()).unwrap() else {
            panic!("not valid");
        };
        assert_eq!(view.local_rank, "2");
    }

    #[test]
    fn too_many_bounds_are_refused_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let bounds: Vec<f64> = (1..=33).map(f64::from).collect();
        let e = StoreWriter::create(dir.path(), &identity("a"), &Buckets::new(&bounds).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("at most 32"), "{e}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn long_names_are_truncated_with_one_warning() {
        let dir = tempfile::tempdir().unwrap();
        let name = "n".repeat(1000);
        let (w, logged) = nixl_telemetry_base::logging::capture(|| {
            StoreWriter::create(dir.path(), &identity(&name), &Buckets::default()).unwrap()
        });
        let warnings = nixl_telemetry_base::logging::warnings(&logged);
        assert_eq!(warnings.len(), 1, "{logged:?}");
        assert!(warnings[0].contains("exceeds 255 chars"), "{}", warnings[0]);
        let bytes = std::fs::read(w.path()).unwrap();
        assert_eq!(
            &bytes[OFF_AGENT_NAME..OFF_AGENT_NAME + 255],
            &name.as_bytes()[..255]
        );
        assert_eq!(bytes[OFF_AGENT_NAME + 255], 0);
    }

    #[test]
    fn the_staging_fallback_publishes_the_same_store() {
        let dir = tempfile::tempdir().unwrap();
        let id = identity("a");
        let path = dir.path().join(id.file_name());
        let header = header(&id, &Buckets::default());
        let (_file, _map) = create_staged(&path, &header, &[]).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [id.file_name()]);
        assert_eq!(words(&path)[0], MAGIC);
    }

    fn native_of(path: &Path) -> Option<Box<[NativeHistogram; 4]>> {
        let ReadOutcome::Valid(view) = read_store(path).unwrap() else {
            panic!("invalid")
        };
        view.snapshot.native
    }

    #[test]
    fn native_histograms_are_the_series_engines_for_the_same_events() {
        let dir = tempfile::tempdir().unwrap();
        let mut id = identity("a");
        let w = StoreWriter::create_with(dir.path(), &id, &Buckets::default(), true).unwrap();
        assert_eq!(
            std::fs::metadata(w.path()).unwrap().len(),
            (STORE_SIZE + NATIVE_EXTENSION_SIZE) as u64
        );
        // Published with empty histograms at schema 3.
        let empty = native_of(w.path()).unwrap();
        assert!(empty.iter().all(|h| h.count() == 0 && h.schema() == 3));
        let engine = nixl_telemetry_series::AgentSeries::new("a", "host", Buckets::default())
            .with_native_histograms(true, DEFAULT_SCHEMA, NATIVE_MAX_BUCKETS);
        // Far apart values lower the schema; later batches shrink nothing but rewrite.
        let batches: Vec<Vec<Event>> = (0..6u64)
            .map(|k| {
                vec![
                    Event::new(EventType::AgentXferTime, 3 + k * 1000),
                    Event::new(EventType::AgentXferPostTime, 1 << (5 * k)),
                    Event::new(EventType::AgentTxBytes, 4096 << k),
                    Event::new(EventType::AgentRxBytes, k),
                    Event::new(EventType::AgentTxRequestsNum, 1),
                ]
            })
            .collect();
        for b in &batches {
            w.apply(b);
            engine.apply(b);
        }
        let stored = native_of(w.path()).unwrap();
        assert_eq!(Some(stored), engine.snapshot().native);
        assert!(native_of(w.path()).unwrap()[1].schema() < 3);
        // No native event: nothing rewritten (the sequence stays).
        let seq = |w: &StoreWriter| {
            let at = w.native.as_ref().unwrap().at;
            w.word(at + NATIVE_OFF_SEQUENCE).load(Ordering::Relaxed)
        };
        let before = seq(&w);
        assert_eq!(before, 2 * batches.len() as u64);
        w.apply(&[Event::new(EventType::AgentTxRequestsNum, 1)]);
        assert_eq!(seq(&w), before);
        // With labels: after them, 8-aligned; the labels read as before.
        id.instance = 4;
        id.labels = WorkloadLabels::from_pairs(vec![("team".into(), "x".into())]).unwrap();
        let l = StoreWriter::create_with(dir.path(), &id, &Buckets::default(), true).unwrap();
        l.apply(&batches[0]);
        let len = std::fs::metadata(l.path()).unwrap().len() as usize;
        assert_eq!(
            len,
            (STORE_SIZE + 16 + 7).next_multiple_of(8) + NATIVE_EXTENSION_SIZE
        );
        let ReadOutcome::Valid(view) = read_store(l.path()).unwrap() else {
            panic!()
        };
        assert_eq!(view.snapshot.labels, id.labels);
        assert_eq!(view.snapshot.native.unwrap()[0].count(), 1);
    }

    #[test]
    fn without_native_histograms_the_store_is_what_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let (mut a, mut b) = (identity("a"), identity("a"));
        b.instance = 9;
        let batch = [
            Event::new(EventType::AgentXferTime, 30),
            Event::new(EventType::AgentTxBytes, 4096),
        ];
        let plain = StoreWriter::create(dir.path(), &a, &Buckets::default()).unwrap();
        let off = StoreWriter::create_with(dir.path(), &b, &Buckets::default(), false).unwrap();
        a.instance = 10;
        let on = StoreWriter::create_with(dir.path(), &a, &Buckets::default(), true).unwrap();
        for w in [&plain, &off, &on] {
            w.apply(&batch);
        }
        let bytes = |w: &StoreWriter| {
            let mut b = std::fs::read(w.path()).unwrap();
            b[OFF_LAST_UPDATE..OFF_LAST_UPDATE + 8].fill(0);
            b[OFF_INSTANCE..OFF_INSTANCE + 8].fill(0);
            b
        };
        assert_eq!(bytes(&off).len(), STORE_SIZE);
        assert_eq!(bytes(&off), bytes(&plain));
        // On: NIXL's 6,800 bytes are the same, the extension follows.
        assert_eq!(bytes(&on)[..STORE_SIZE], bytes(&off)[..]);
        assert_eq!(&bytes(&on)[STORE_SIZE..STORE_SIZE + 8], b"NIXLNHS1");
        assert_eq!(native_of(off.path()), None);
    }

    /// A writer killed in the middle of an update leaves the sequence odd: its store is still
    /// read, without its native histograms (never the half-written ones).
    #[test]
    fn a_store_left_in_the_middle_of_an_update_is_read_without_native_histograms() {
        let dir = tempfile::tempdir().unwrap();
        let w = StoreWriter::create_with(dir.path(), &identity("a"), &Buckets::default(), true)
            .unwrap();
        w.apply(&[Event::new(EventType::AgentXferTime, 30)]);
        let at = w.native.as_ref().unwrap().at;
        w.word(at + NATIVE_OFF_SEQUENCE).store(3, Ordering::Relaxed);
        let ReadOutcome::Valid(view) = read_store(w.path()).unwrap() else {
            panic!("invalid")
        };
        assert_eq!(view.snapshot.native, None);
        assert_eq!(view.snapshot.counter(EventType::AgentXferTime), 30);
        w.word(at + NATIVE_OFF_SEQUENCE).store(4, Ordering::Relaxed);
        assert_eq!(native_of(w.path()).unwrap()[0].count(), 1);
    }

    /// A writer applying batches as fast as it can while a reader with its own mapping of the
    /// file (as another process has) reads the store again and again: every batch gives the
    /// four native histograms the same values (spread over 2^40, so the schema drops and the
    /// spans move), so a read that kept a torn histogram, or histograms of two different
    /// updates, would find them different, or fail to decode them.
    #[test]
    fn a_reader_never_sees_a_torn_native_histogram() {
        let dir = tempfile::tempdir().unwrap();
        let w = StoreWriter::create_with(dir.path(), &identity("a"), &Buckets::default(), true)
            .unwrap();
        let path = w.path().to_owned();
        let done = std::sync::atomic::AtomicBool::new(false);
        let batches = 20_000u64;
        let (kept, without) = std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let file = crate::sys::open_read_nofollow(&path).unwrap();
                let len = file.metadata().unwrap().len();
                let store = crate::reader::OpenStore::map(&file, len).unwrap().unwrap();
                let (mut kept, mut without, mut last) = (0u64, 0u64, 0u64);
                // Reads until the writer is done, and once more after.
                let mut finished = false;
                while !finished {
                    finished = done.load(Ordering::Acquire);
                    let ReadOutcome::Valid(view) = store.read(&file).unwrap() else {
                        panic!("invalid while written")
                    };
                    let Some(n) = view.snapshot.native else {
                        without += 1;
                        continue;
                    };
                    assert!(n.iter().all(|h| *h == n[0]), "torn: {n:?}");
                    assert!(n[0].count() >= last, "went back");
                    last = n[0].count();
                    kept += 1;
                }
                (kept, without)
            });
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..batches {
                let mut batch = Vec::new();
                for _ in 0..8 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let v = x >> (24 + x % 40);
                    for t in NATIVE_EVENTS {
                        batch.push(Event::new(t, v));
                    }
                }
                w.apply(&batch);
            }
            done.store(true, Ordering::Release);
            reader.join().unwrap()
        });
        println!("{kept} reads kept the histograms, {without} went without");
        assert!(kept > 0);
        let last = native_of(&path).unwrap();
        assert_eq!(last[3].count(), 8 * batches);
        assert!(last[0].schema() < 3);
    }

    #[test]
    fn identities_of_this_process_share_the_marker_and_count_instances() {
        let a = Identity::for_this_process("a", "h", "", WorkloadLabels::none());
        let b = Identity::for_this_process("b", "h", "", WorkloadLabels::none());
        assert_eq!(a.run_marker, b.run_marker);
        assert_eq!(a.pid, i64::from(std::process::id()));
        assert!(b.instance > a.instance);
        assert!(is_store_name(a.file_name().as_bytes()));
        for bad in [
            "nixl.mmap",
            "nixl-owner.x.lock",
            "x.nixl.1.mmap",
            "nixl.1.mmap.staging",
        ] {
            assert!(!is_store_name(bad.as_bytes()), "{bad}");
        }
    }
}
