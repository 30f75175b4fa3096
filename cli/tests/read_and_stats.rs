//! What `nixl-telemetry read` and `stats` share: bad files give one clear line, a filter that
//! matches nothing is a usage error, an oversized ring is refused, and neither consumes events
//! when it should not.

mod common;

use std::path::PathBuf;

use common::*;

#[test]
fn bad_files_give_one_clear_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    std::fs::write(&small, [0u8; 12]).unwrap();
    let mut v3 = vec![0u8; 40 + 16 * 8];
    v3[16..20].copy_from_slice(&3i32.to_ne_bytes());
    v3[24..32].copy_from_slice(&8u64.to_ne_bytes());
    v3[32..40].copy_from_slice(&7u64.to_ne_bytes());
    let wrong_version = dir.path().join("v3");
    std::fs::write(&wrong_version, &v3).unwrap();
    let text_file = dir.path().join("notes.txt");
    std::fs::write(
        &text_file,
        "this is not a ring file at all, just some text\n",
    )
    .unwrap();
    let cases: [(PathBuf, &str); 4] = [
        (dir.path().join("missing"), "does not exist"),
        (small, "too small"),
        (
            wrong_version.clone(),
            "version mismatch: expected 4 or 5, got 3",
        ),
        (text_file, "version mismatch"),
    ];
    for (path, needle) in cases {
        for sub in ["read", "stats"] {
            let (_, err) = run_with_status(&[sub.as_ref(), path.as_os_str()], 1);
            assert_eq!(err.lines().count(), 1, "{sub} {}: {err}", path.display());
            assert!(err.starts_with("nixl-telemetry: error: "), "{err}");
            assert!(err.contains(needle), "{sub} {}: {err}", path.display());
            assert!(!err.contains("panicked"));
        }
    }
    assert_eq!(std::fs::read(&wrong_version).unwrap(), v3, "left untouched");
    // A directory of files that are not rings: one note each, then the error.
    for sub in ["read", "stats"] {
        let (_, err) = run_with_status(&[sub.as_ref(), dir.path().as_os_str()], 1);
        assert_eq!(
            err.matches("skipping a file that is not a ring").count(),
            3,
            "{err}"
        );
        assert!(
            err.contains("error: no telemetry ring in directory"),
            "{err}"
        );
    }
}

#[test]
fn a_filter_that_matches_nothing_is_a_usage_error_and_consumes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ring = ring_with(dir.path(), "a", &sample_events());
    for bad in ["agent_tx_byte", "[", "", "AGENT_ERR_*"] {
        for sub in ["read", "stats"] {
            let args = [
                sub.as_ref(),
                "--filter".as_ref(),
                bad.as_ref(),
                ring.path().as_os_str(),
            ];
            let (out, err) = run_with_status(&args, 2);
            assert!(err.contains(&format!("--filter '{bad}'")), "{err}");
            assert!(out.is_empty());
        }
    }
    assert_eq!(ring.len(), 3, "nothing consumed");
    let text = stdout_of(&[
        "stats".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--filter".as_ref(),
        "agent_err_*".as_ref(),
        ring.path().as_os_str(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["total_events"], 1);
    assert_eq!(v["events"][0]["event"], "agent_err_backend");
}

#[test]
fn a_ring_larger_than_the_readers_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge");
    let capacity: u64 = nixl_telemetry_core::ring::MAX_READER_CAPACITY * 2;
    let mut h = vec![0u8; 40];
    h[16..20].copy_from_slice(&4i32.to_ne_bytes());
    h[20..24].copy_from_slice(&4i32.to_ne_bytes());
    h[24..32].copy_from_slice(&capacity.to_ne_bytes());
    h[32..40].copy_from_slice(&(capacity - 1).to_ne_bytes());
    std::fs::write(&path, &h).unwrap();
    // Sparse: as long as the header says, without the disk space.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(40 + 16 * capacity)
        .unwrap();
    for sub in ["read", "stats"] {
        let (_, err) = run_with_status(&[sub.as_ref(), path.as_os_str()], 1);
        assert!(err.contains("exceeds the readers' limit"), "{err}");
    }
}

#[test]
fn peek_and_stats_consume_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ring = ring_with(dir.path(), "a", &sample_events());
    let path = ring.path().to_owned();
    for _ in 0..2 {
        let text = stdout_of(&["read".as_ref(), "--peek".as_ref(), path.as_os_str()]);
        assert!(text.contains("Total events read: 3"), "{text}");
        assert!(text.contains("Final buffer size: 3 events"), "{text}");
        assert!(text.contains("--peek: nothing was consumed"), "{text}");
    }
    let stats = stdout_of(&["stats".as_ref(), path.as_os_str()]);
    assert!(stats.contains("total events: 3"), "{stats}");
    assert_eq!(ring.len(), 3);
    // Then a consuming read gets them all.
    let text = stdout_of(&["read".as_ref(), path.as_os_str()]);
    assert!(text.contains("Total events read: 3"), "{text}");
    assert_eq!(ring.len(), 0);
}

/// Our version-5 ring (NIXL's open pull request #2018; NIXL has written none, so the fixture is
/// ours): `read` says its version and names every event, the stalled transfer (21) included, and
/// `stats` counts them without consuming.
#[test]
fn read_and_stats_read_a_version_5_ring_and_know_the_stalled_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let name = "nixl-telemetry-ring-v5-cap16-wrapped.bin";
    let path = dir.path().join(name);
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name),
        &path,
    )
    .unwrap();
    let stats = stdout_of(&["stats".as_ref(), "--json".as_ref(), path.as_os_str()]);
    let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(v["total_events"], 12, "{stats}");
    let names: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"agent_err_xfer_stalled"), "{names:?}");
    let text = stdout_of(&["read".as_ref(), path.as_os_str()]);
    assert!(
        text.contains("Successfully opened telemetry buffer (version: 5)\nBuffer capacity: 16"),
        "{text}"
    );
    assert_eq!(text.matches("=== NIXL Telemetry Event ===").count(), 12);
    assert!(
        text.contains("Event: agent_err_xfer_stalled\nValue: 1021\n"),
        "{text}"
    );
    assert!(text.contains("Total events read: 12"), "{text}");
}
