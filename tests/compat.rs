//! Compatibility with NIXL's own ring files: the fixtures were written by NIXL's C++
//! `sharedRingBuffer` writer; our reader must return exactly the listed events. They are read
//! from `$NIXL_TELEMETRY_FIXTURES` when it is set (scripts/test.sh sets it, as for the C and
//! Python tests), else from the repository's copies in `tests/fixtures/`; a missing file fails.

use std::path::{Path, PathBuf};

use nixl_telemetry_core::{Event, RingReader, RingWriter};

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

#[test]
fn reads_every_nixl_fixture_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let expected = expected();
    let files = expected.as_object().unwrap();
    assert_eq!(files.len(), 3);
    for (file, want) in files {
        // Reading moves read_pos inside the file: always read a copy.
        let copy = tmp.path().join(file);
        std::fs::write(&copy, read(&fixtures().join(file))).unwrap();
        let mut ring = RingReader::open(&copy).unwrap();
        let header = ring.header();
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
