//! Compatibility with NIXL's own ring files: the fixtures were written by NIXL's C++
//! `sharedRingBuffer` writer; our reader must return exactly the listed events. They are read
//! from `$NIXL_TELEMETRY_FIXTURES` when it is set (scripts/test.sh sets it, as for the C and
//! Python tests), else from the repository's copies in `tests/fixtures/`; a missing file fails.
//!
//! The version-5 layout (NIXL's open pull request #2018) has no NIXL-written file, NIXL not
//! having merged it: its fixture (`tests/fixtures/nixl-telemetry-rings.expected.json`) was
//! written by our writer, and a test checks that our writer still writes exactly it.

use std::path::{Path, PathBuf};

use nixl_telemetry_core::ring::layout::{self, Layout};
use nixl_telemetry_core::{Event, EventType, RingReader, RingWriter};

/// The repository's copies of NIXL's files.
fn repository_copies() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Where the tests read NIXL's files: `$NIXL_TELEMETRY_FIXTURES`, else [`repository_copies`].
fn fixtures() -> PathBuf {
    std::env::var_os("NIXL_TELEMETRY_FIXTURES").map_or_else(repository_copies, PathBuf::from)
}

/// The bytes of `path`; a missing file fails, naming it.
fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "NIXL fixture {} ($NIXL_TELEMETRY_FIXTURES, else tests/fixtures/): {e}",
            path.display()
        )
    })
}

fn expected() -> serde_json::Value {
    serde_json::from_slice(&read(&fixtures().join("nixl-rings.expected.json"))).unwrap()
}

/// Our own ring files, always from the repository (they are not NIXL's).
fn our_expected() -> serde_json::Value {
    let path = repository_copies().join("nixl-telemetry-rings.expected.json");
    serde_json::from_slice(&read(&path)).unwrap()
}

#[test]
fn reads_every_nixl_fixture_exactly() {
    let expected = expected();
    assert_eq!(expected.as_object().unwrap().len(), 3);
    reads_exactly(&fixtures(), &expected, layout::V4);
}

#[test]
fn reads_our_version_5_fixture_exactly() {
    let expected = our_expected();
    assert_eq!(expected.as_object().unwrap().len(), 1);
    reads_exactly(&repository_copies(), &expected, layout::V5);
}

/// Reads every file `expected` lists in `dir` (of `layout`): its header and its events.
fn reads_exactly(dir: &Path, expected: &serde_json::Value, layout: Layout) {
    let tmp = tempfile::tempdir().unwrap();
    for (file, want) in expected.as_object().unwrap() {
        // Reading moves read_pos inside the file: always read a copy.
        let copy = tmp.path().join(file);
        std::fs::write(&copy, read(&dir.join(file))).unwrap();
        let mut ring = RingReader::open(&copy).unwrap();
        let header = ring.header();
        assert_eq!(header.version, layout.version, "{file}");
        assert_eq!(
            header.capacity,
            want["capacity"].as_u64().unwrap(),
            "{file}"
        );
        assert_eq!(
            header.write_pos,
            want["write_pos"].as_u64().unwrap(),
            "{file}"
        );
        assert_eq!(
            header.read_pos,
            want["read_pos"].as_u64().unwrap(),
            "{file}"
        );
        let got: Vec<Event> = ring.by_ref().collect();
        let want_events: Vec<Event> = want["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| Event {
                event_type: e["type"].as_u64().unwrap() as u32,
                value: e["value"].as_u64().unwrap(),
            })
            .collect();
        assert_eq!(got, want_events, "{file}");
        for (g, w) in got.iter().zip(want["events"].as_array().unwrap()) {
            assert_eq!(g.name(), w["name"].as_str().unwrap());
        }
        assert!(ring.pop().is_none());
        assert_eq!(ring.header().read_pos, want["write_pos"].as_u64().unwrap());
    }
}

#[test]
fn fixture_copies_match_the_shared_originals() {
    // The in-repo copies exist so a clean clone can test on its own; when the shared originals
    // are next to the repository, they must be identical. A clean clone has no originals to
    // compare with (nothing can install them): the test then says so and passes.
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures");
    if !shared.exists() {
        eprintln!(
            "skipped: the shared originals {} are not next to this repository (a clean clone); \
             nothing to compare tests/fixtures/ with",
            shared.display()
        );
        return;
    }
    let copies = repository_copies();
    let listed = serde_json::from_slice::<serde_json::Value>(&read(
        &copies.join("nixl-rings.expected.json"),
    ))
    .unwrap();
    let mut files: Vec<&str> = listed
        .as_object()
        .unwrap()
        .keys()
        .map(|f| f.as_str())
        .collect();
    files.push("nixl-rings.expected.json");
    for file in files {
        assert!(
            read(&shared.join(file)) == read(&copies.join(file)),
            "tests/fixtures/{file} differs from the shared original {}",
            shared.join(file).display()
        );
    }
}

#[test]
fn our_ring_has_the_same_bytes_as_nixls() {
    // Reproduce the cap8-full fixture's history with our writer: 9 pushes of agent_xfer_time
    // 0, 50, .., 400 into an empty capacity-8 ring keep the first 7. Header and records must
    // match NIXL's file byte for byte, except the 4 padding bytes of each record, whose
    // content is unspecified for both writers.
    let tmp = tempfile::tempdir().unwrap();
    let writer = RingWriter::create(tmp.path(), "agent", 8).unwrap();
    let events: Vec<Event> = (0..9)
        .map(|i| Event {
            event_type: 6,
            value: i * 50,
        })
        .collect();
    assert_eq!(writer.push_batch(&events), 7);
    drop(writer);
    let mut ours = std::fs::read(tmp.path().join("agent")).unwrap();
    let mut theirs = read(&fixtures().join("nixl-ring-v4-cap8-full.bin"));
    assert_eq!(ours.len(), theirs.len());
    for record in (40..ours.len()).step_by(16) {
        ours[record + 4..record + 8].fill(0);
        theirs[record + 4..record + 8].fill(0);
    }
    assert_eq!(ours, theirs);
}

/// What the version-5 fixture holds, written again by our writer: NIXL's wrapped scenario (10
/// events pushed into a capacity-16 ring, 8 popped, 10 more pushed), its events chosen so that
/// the 12 left unread end with the dropped-events report and the stalled transfer (20, 21).
fn our_version_5_ring(dir: &Path) -> PathBuf {
    let writer = RingWriter::create_with(dir, "v5", 16, layout::V5).unwrap();
    let events = |types: std::ops::Range<u32>| -> Vec<Event> {
        types
            .map(|t| Event {
                event_type: t,
                value: 1000 + u64::from(t),
            })
            .collect()
    };
    assert_eq!(writer.push_batch(&events(0..10)), 10);
    let mut reader = RingReader::open(writer.path()).unwrap();
    assert_eq!(reader.by_ref().take(8).count(), 8);
    assert_eq!(writer.push_batch(&events(12..22)), 10);
    writer.path().to_owned()
}

/// `bytes` of a ring of `layout` with the 4 padding bytes of every record zeroed (their content
/// is unspecified, for NIXL's writer as for ours).
fn without_padding(mut bytes: Vec<u8>, layout: Layout) -> Vec<u8> {
    for record in (layout.header_size..bytes.len()).step_by(16) {
        bytes[record + 4..record + 8].fill(0);
    }
    bytes
}

#[test]
fn our_writer_still_writes_the_version_5_fixture() {
    // Regenerate the fixture (after a deliberate change of the layout) with
    // NIXL_TELEMETRY_BLESS=1 cargo test -p nixl-telemetry-core --test compat.
    let tmp = tempfile::tempdir().unwrap();
    let written = std::fs::read(our_version_5_ring(tmp.path())).unwrap();
    let fixture = repository_copies().join("nixl-telemetry-ring-v5-cap16-wrapped.bin");
    if std::env::var_os("NIXL_TELEMETRY_BLESS").is_some() {
        std::fs::write(&fixture, without_padding(written.clone(), layout::V5)).unwrap();
    }
    assert_eq!(
        without_padding(written, layout::V5),
        without_padding(read(&fixture), layout::V5),
        "our writer no longer writes {}: regenerate it with NIXL_TELEMETRY_BLESS=1 if the \
         layout changed on purpose",
        fixture.display()
    );
    // And the file says what its expectations say (the names included: 21 is
    // agent_err_xfer_stalled).
    let want = &our_expected()["nixl-telemetry-ring-v5-cap16-wrapped.bin"];
    let listed: Vec<(u64, &str)> = want["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["type"].as_u64().unwrap(), e["name"].as_str().unwrap()))
        .collect();
    assert_eq!(listed.len(), 12);
    assert_eq!(
        listed[11],
        (21, EventType::AgentErrXferStalled.name()),
        "{listed:?}"
    );
}
