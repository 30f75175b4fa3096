//! The store writer: what it writes (NIXL's layout, our extensions), its native histograms,
//! its publication (a reader never sees a batch in part), and how it survives another process
//! truncating, deleting or replacing its file (see `repair_tests`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::Ordering;

use nixl_telemetry_base::{Event, EventType};
use nixl_telemetry_series::native::{NativeHistogram, DEFAULT_SCHEMA};
use nixl_telemetry_series::{Buckets, WorkloadLabels, NATIVE_EVENTS};

use super::*;
use crate::layout::*;
use crate::reader::{read_store, ReadOutcome};

pub(super) fn identity(name: &str) -> Identity {
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

pub(super) fn words(path: &Path) -> Vec<u64> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The word at file offset `off` of `w`'s mapped store, as a reader of the mapping sees it.
pub(super) fn mapped_word(w: &StoreWriter, off: usize) -> &'static std::sync::atomic::AtomicU64 {
    let state = w.state.lock_unpoisoned();
    let word: *const std::sync::atomic::AtomicU64 = state.file.as_ref().unwrap().word(off);
    // SAFETY: the tests use the word while `w`, and so its mapping, lives.
    unsafe { &*word }
}

/// The file offset of `w`'s native-histograms extension and of its publication extension.
pub(super) fn placed(w: &StoreWriter) -> (Option<usize>, usize) {
    let state = w.state.lock_unpoisoned();
    let placed = state.file.as_ref().unwrap().placed();
    (placed.native, placed.sequence.unwrap())
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
    // NIXL's bytes, then the publication extension.
    assert_eq!(meta.len(), (STORE_SIZE + SEQUENCE_EXTENSION_SIZE) as u64);
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let probe = sys::open_read_nofollow(&w.path()).unwrap();
    assert!(!sys::try_lock_exclusive(&probe).unwrap());
    let img = words(&w.path());
    assert_eq!(img[0], MAGIC);
    assert_eq!(img[1], 1 | (21 << 32));
    assert_eq!((img[2], img[4], img[5]), (4242, 3, 18));
    assert!(img[3] > 0, "heartbeat");
    assert_eq!(img[STORE_WORDS], SEQUENCE_MAGIC);
    // The store outlives its writer, unlocked.
    let path = w.path();
    drop(w);
    assert!(sys::try_lock_exclusive(&probe).unwrap());
    assert_eq!(words(&path)[0], MAGIC);
}

#[test]
fn events_update_counters_gauges_and_inclusive_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let bounds = Buckets::new(&[10.0, 100.0, 1000.0]).unwrap();
    let w = StoreWriter::create(dir.path(), &identity("a"), &bounds).unwrap();
    let before = words(&w.path())[3];
    let xfer = |v| Event::new(EventType::AgentXferTime, v);
    let batch = [1, 10, 11, 1000, 1001].map(xfer);
    assert_eq!(w.apply(&batch), 5);
    let tx = |v| Event::new(EventType::AgentTxBytes, v);
    let unknown = Event {
        event_type: 22,
        value: 9,
    };
    assert_eq!(w.apply(&[tx(5), tx(7), unknown]), 2);
    assert_eq!(w.apply(&[Event::new(EventType::AgentErrBackend, 1)]), 1);
    // No slot of its own in NIXL's layout: counted as agent_err_unknown.
    let stalled = Event::new(EventType::AgentErrXferStalled, 1);
    assert_eq!(w.apply(&[stalled, stalled]), 2);
    assert_eq!(w.apply(&[Event::new(EventType::AgentTxRequestsNum, 1)]), 1);
    let img = words(&w.path());
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
    assert_eq!((at(counter(15)), at(gauge(15))), (2, 0));
    assert_eq!((at(counter(2)), at(gauge(2))), (1, 0));
    assert!(at(OFF_LAST_UPDATE) >= before);
    // Nothing else moved.
    for slot in (0..SLOT_COUNT).filter(|s| ![0, 2, 6, 10, 15].contains(s)) {
        assert_eq!(at(counter(slot)), 0, "counter {slot}");
    }
    assert_eq!(at(hist_sum(7)), 0);
    let ReadOutcome::Valid(view) = read_store(&w.path()).unwrap() else {
        panic!("not valid");
    };
    assert_eq!(view.local_rank, "2");
    assert_eq!(view.snapshot.errors("unknown"), Some(2));
    assert_eq!(view.snapshot.errors("xfer_stalled"), None);
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
fn the_staging_fallback_publishes_the_same_store_and_never_replaces_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let id = identity("a");
    let path = dir.path().join(id.file_name());
    let values = Values::new(&id, &Buckets::default(), false);
    let (extension, _) = values.extension();
    let (_file, _map) = file::create_staged(&path, values.words(), &extension).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, [id.file_name()]);
    assert_eq!(words(&path)[0], MAGIC);
    // The name taken: refused, the other file kept, no staging file left.
    let other = file::create_staged(&path, values.words(), &extension);
    assert_eq!(
        other.err().map(|e| e.kind()),
        Some(std::io::ErrorKind::AlreadyExists)
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
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
        (STORE_SIZE + NATIVE_EXTENSION_SIZE + SEQUENCE_EXTENSION_SIZE) as u64
    );
    // Published with empty histograms at schema 3.
    let empty = native_of(&w.path()).unwrap();
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
    let stored = native_of(&w.path()).unwrap();
    assert_eq!(Some(stored), engine.snapshot().native);
    assert!(native_of(&w.path()).unwrap()[1].schema() < 3);
    // Each publication moves both sequences by two, together.
    let (native_at, sequence_at) = placed(&w);
    let native_at = native_at.unwrap();
    let sequences = || {
        (
            mapped_word(&w, native_at + NATIVE_OFF_SEQUENCE).load(Ordering::Relaxed),
            mapped_word(&w, sequence_at + SEQUENCE_OFF_VALUE).load(Ordering::Relaxed),
        )
    };
    let n = 2 * batches.len() as u64;
    assert_eq!(sequences(), (n, n));
    // No native event: the histograms' words are not written again.
    let histogram_words = || {
        let extension = native_at..native_at + NATIVE_EXTENSION_SIZE;
        std::fs::read(w.path()).unwrap()[extension][NATIVE_OFF_HISTOGRAMS..].to_vec()
    };
    let before = histogram_words();
    w.apply(&[Event::new(EventType::AgentTxRequestsNum, 1)]);
    assert_eq!(sequences(), (n + 2, n + 2));
    assert!(histogram_words() == before, "histograms written again");
    // With labels: after them, 8-aligned; the labels read as before.
    id.instance = 4;
    id.labels = WorkloadLabels::from_pairs(vec![("team".into(), "x".into())]).unwrap();
    let l = StoreWriter::create_with(dir.path(), &id, &Buckets::default(), true).unwrap();
    l.apply(&batches[0]);
    let len = std::fs::metadata(l.path()).unwrap().len() as usize;
    assert_eq!(
        len,
        (STORE_SIZE + 16 + 7).next_multiple_of(8) + NATIVE_EXTENSION_SIZE + SEQUENCE_EXTENSION_SIZE
    );
    let ReadOutcome::Valid(view) = read_store(&l.path()).unwrap() else {
        panic!()
    };
    assert_eq!(view.snapshot.labels, id.labels);
    assert_eq!(view.snapshot.native.unwrap()[0].count(), 1);
    assert_eq!(
        w.state
            .lock_unpoisoned()
            .values
            .native_histograms()
            .unwrap()[0]
            .count(),
        batches.len() as u64
    );
}

#[test]
fn without_native_histograms_the_store_is_nixls_bytes_then_the_publication_extension() {
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
    assert_eq!(bytes(&off).len(), STORE_SIZE + SEQUENCE_EXTENSION_SIZE);
    assert_eq!(bytes(&off), bytes(&plain));
    assert_eq!(&bytes(&off)[STORE_SIZE..STORE_SIZE + 8], b"NIXLSEQ1");
    // On: NIXL's 6,800 bytes are the same, the extensions follow.
    assert_eq!(bytes(&on)[..STORE_SIZE], bytes(&off)[..STORE_SIZE]);
    assert_eq!(&bytes(&on)[STORE_SIZE..STORE_SIZE + 8], b"NIXLNHS1");
    assert_eq!(native_of(&off.path()), None);
}

/// A writer killed in the middle of a publication leaves the sequence odd: a read gets what
/// the store holds without its native histograms, as a store in the middle of an update
/// ([`ReadOutcome::InUpdate`]: the store scan serves it so once its writer is gone); once the
/// sequence is even again, the store reads as any other.
#[test]
fn a_store_left_in_the_middle_of_a_publication_is_read_as_in_update() {
    let dir = tempfile::tempdir().unwrap();
    let w =
        StoreWriter::create_with(dir.path(), &identity("a"), &Buckets::default(), true).unwrap();
    w.apply(&[Event::new(EventType::AgentXferTime, 30)]);
    let (_, sequence_at) = placed(&w);
    let sequence = mapped_word(&w, sequence_at + SEQUENCE_OFF_VALUE);
    sequence.store(3, Ordering::Relaxed);
    let ReadOutcome::InUpdate(view) = read_store(&w.path()).unwrap() else {
        panic!("not in update")
    };
    assert_eq!(view.snapshot.native, None);
    assert_eq!(view.snapshot.counter(EventType::AgentXferTime), 30);
    sequence.store(4, Ordering::Relaxed);
    assert_eq!(native_of(&w.path()).unwrap()[0].count(), 1);
}

/// A writer applying batches as fast as it can while a reader with its own mapping of the
/// file (as another process has) reads the store again and again: every batch gives the four
/// native histograms the same values (spread over 2^40, so the schema drops and the spans
/// move) and counts each value once as a transfer time and once as a transmitted request, so
/// a read that kept part of a batch, or values of two batches, would find the histograms
/// different, their counts different from the requests counted, or fail to decode them.
#[test]
fn a_reader_never_sees_part_of_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let w =
        StoreWriter::create_with(dir.path(), &identity("a"), &Buckets::default(), true).unwrap();
    let path = w.path();
    let done = std::sync::atomic::AtomicBool::new(false);
    let batches = 20_000u64;
    let kept = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let file = crate::sys::open_read_nofollow(&path).unwrap();
            let len = file.metadata().unwrap().len();
            let store = crate::reader::OpenStore::map(&file, len).unwrap().unwrap();
            let (mut kept, mut last) = (0u64, 0u64);
            // Reads until the writer is done, and once more after.
            let mut finished = false;
            while !finished {
                finished = done.load(Ordering::Acquire);
                let view = match store.read(&file).unwrap() {
                    ReadOutcome::Valid(view) => view,
                    // Met a publication at every try before any read kept the values.
                    ReadOutcome::InUpdate(_) if kept == 0 => continue,
                    other => panic!("{other:?} while written"),
                };
                let n = view.snapshot.native.clone().unwrap();
                assert!(n.iter().all(|h| *h == n[0]), "torn: {n:?}");
                let requests = view.snapshot.counter(EventType::AgentTxRequestsNum);
                let time = view.snapshot.histogram(EventType::AgentXferTime).unwrap();
                assert_eq!((n[0].count(), time.count()), (requests, requests));
                assert!(n[0].count() >= last, "went back");
                last = n[0].count();
                kept += 1;
            }
            kept
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
                batch.push(Event::new(EventType::AgentTxRequestsNum, 1));
            }
            w.apply(&batch);
        }
        done.store(true, Ordering::Release);
        reader.join().unwrap()
    });
    println!("{kept} consistent reads");
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
