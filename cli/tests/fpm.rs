//! `nixl-telemetry fpm cat|summary` on segments written by the library: index order across
//! segments and producers, multi-member files, a truncated final member, and errors.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{cmd, stdout_of};
use nixl_telemetry_core::fpm::{CaptureMode, FpmConfig, FpmPayload, FpmTrace, Source};
use nixl_telemetry_core::segments::{ManualClock, SegmentNaming, SegmentWriter, WriterOptions};
use nixl_telemetry_test_support::manual_fpm_trace;
use serde_json::Value;

fn busy(worker: &str, rank: i64, counter: i64, wall_time: f64) -> FpmPayload {
    let mut p = FpmPayload::heartbeat(worker, rank, counter);
    p.wall_time = wall_time;
    p
}

/// Producer "4192" in full mode with small segments, so its rows span several files; each
/// `pump` + `flush` writes one member. Counters: rank 0: 1, 2, 3, 6 (a gap of 2), with a
/// heartbeat at 3; rank 1: 10, 11.
fn write_trace(dir: &Path) -> u64 {
    let config = FpmConfig {
        output_path: dir.join("dynamo-fpm"),
        mode: CaptureMode::Full,
        roll_bytes: 1500,
        max_segments: 100,
        ..FpmConfig::default()
    };
    let (clock, trace) = manual_fpm_trace(&config, "4192", 1_700_000_000_000, 64);
    for (rank, counter, wall) in [
        (0, 1, 0.5),
        (1, 10, 0.25),
        (0, 2, 1.5),
        (0, 3, 0.0),
        (1, 11, 0.75),
        (0, 6, 1.0),
    ] {
        trace.record(busy("w", rank, counter, wall));
        clock.advance_ms(1000);
        trace.pump();
        trace.flush();
    }
    let stats = trace.close();
    assert!(stats.segments_rolled >= 2, "{stats:?}");
    stats.written
}

/// Runs the command, checks its exit status, and returns its stdout and stderr.
fn run_with_status(args: &[&std::ffi::OsStr], code: i32) -> (Vec<u8>, String) {
    let out = cmd().args(args).assert().code(code).get_output().clone();
    (out.stdout, String::from_utf8(out.stderr).unwrap())
}

fn stdout_lines(args: &[&std::ffi::OsStr]) -> Vec<String> {
    stdout_of(args).lines().map(str::to_owned).collect()
}

fn counters(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event"]["fpm"]["counter_id"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

#[test]
fn cat_prints_a_producers_rows_in_index_order() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(write_trace(dir.path()), 6);
    let prefix = dir.path().join("dynamo-fpm.4192");
    let lines = stdout_lines(&["fpm".as_ref(), "cat".as_ref(), prefix.as_os_str()]);
    assert_eq!(counters(&lines), [1, 10, 2, 3, 11, 6]);
    // The output prefix finds the producer too; an explicit file is read alone.
    let by_output = stdout_lines(&[
        "fpm".as_ref(),
        "cat".as_ref(),
        dir.path().join("dynamo-fpm").as_os_str(),
    ]);
    assert_eq!(by_output, lines);
    let first = dir.path().join("dynamo-fpm.4192.000000.jsonl.gz");
    let one = stdout_lines(&["fpm".as_ref(), "cat".as_ref(), first.as_os_str()]);
    assert!(!one.is_empty() && one.len() < lines.len());
    assert_eq!(one[..], lines[..one.len()]);
}

#[test]
fn cat_reads_a_truncated_file_up_to_the_cut_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = SegmentWriter::open(
        SegmentNaming::new(&dir.path().join("fpm"), "p"),
        WriterOptions {
            roll_bytes: 1 << 30,
            max_segments: 4,
            buffer_bytes: 1 << 20,
            flush_interval: Duration::from_secs(1),
        },
        Arc::new(ManualClock::new(0)),
    )
    .unwrap();
    let path = dir.path().join("fpm.p.000000.jsonl.gz");
    for i in 0..10 {
        w.push(&format!("complete {i}"));
    }
    w.flush();
    let cut_at = std::fs::metadata(&path).unwrap().len();
    for i in 0..200 {
        w.push(&format!("lost {i} {}", "z".repeat(i)));
    }
    w.close();
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(cut_at + (len - cut_at) / 3)
        .unwrap();

    let (stdout, stderr) = run_with_status(&["fpm".as_ref(), "cat".as_ref(), path.as_os_str()], 3);
    let stdout = String::from_utf8(stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let expected: Vec<String> = (0..10)
        .map(|i| format!(r#"{{"timestamp":0,"event":"complete {i}"}}"#))
        .collect();
    assert_eq!(lines[..10], expected[..]);
    assert!(lines[10..]
        .iter()
        .all(|l| l.contains("\"lost ") && l.ends_with("\"}")));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    assert!(stderr.contains(&format!("at byte {cut_at}")), "{stderr}");
}

#[test]
fn summary_reports_each_rank() {
    let dir = tempfile::tempdir().unwrap();
    write_trace(dir.path());
    let prefix = dir.path().join("dynamo-fpm.4192");
    let out = stdout_lines(&[
        "fpm".as_ref(),
        "summary".as_ref(),
        "--json".as_ref(),
        prefix.as_os_str(),
    ]);
    let doc: Value = serde_json::from_str(&out[0]).unwrap();
    assert_eq!(doc["rows"], 6);
    assert_eq!(doc["complete"], true);
    let ranks = doc["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    let r0 = &ranks[0];
    assert_eq!(
        (r0["worker_id"].as_str(), r0["dp_rank"].as_u64()),
        (Some("w"), Some(0))
    );
    assert_eq!(r0["rows"], 4);
    assert_eq!(
        (
            r0["first_counter_id"].as_u64(),
            r0["last_counter_id"].as_u64()
        ),
        (Some(1), Some(6))
    );
    assert_eq!(
        (r0["counter_gaps"].as_u64(), r0["missing_counters"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(r0["heartbeats"], 1);
    assert_eq!(
        r0["mean_wall_time_s"], 1.0,
        "(0.5 + 1.5 + 1.0) / 3, heartbeat excluded"
    );
    assert_eq!(r0["span_s"], 5.0);
    let r1 = &ranks[1];
    assert_eq!(
        (r1["rows"].as_u64(), r1["counter_gaps"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(r1["mean_wall_time_s"], 0.5);

    let table = stdout_lines(&["fpm".as_ref(), "summary".as_ref(), prefix.as_os_str()]);
    assert!(table[0].starts_with("namespace"));
    assert_eq!(table.len(), 4, "{table:?}");
    assert!(
        table[3].starts_with("2 files") || table[3].contains("6 rows"),
        "{table:?}"
    );
}

#[test]
fn a_missing_prefix_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    let (_, err) = run_with_status(&["fpm".as_ref(), "cat".as_ref(), missing.as_os_str()], 1);
    assert!(err.contains("nothing-here"), "{err}");
    cmd().args(["fpm", "cat"]).assert().code(2);
}

#[test]
fn summary_keeps_two_components_of_one_producer_apart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let config = FpmConfig {
        output_path: dir.path().join("dynamo-fpm"),
        mode: CaptureMode::Full,
        ..FpmConfig::default()
    };
    // One producer, two components, the same worker and rank.
    let traces: Vec<FpmTrace> = ["backend", "prefill"]
        .iter()
        .map(|c| {
            FpmTrace::open_manual(Source::new("ns", c, "7"), &config, clock.clone(), 64).unwrap()
        })
        .collect();
    for (i, t) in traces.iter().enumerate() {
        for counter in 1..=(2 + i as i64) {
            t.record(busy("w", 0, counter, 0.5));
        }
        t.pump();
        t.flush();
    }
    for t in traces {
        t.close();
    }
    let out = stdout_lines(&[
        "fpm".as_ref(),
        "summary".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        dir.path().join("dynamo-fpm.7").as_os_str(),
    ]);
    let doc: Value = serde_json::from_str(&out[0]).unwrap();
    let ranks = doc["ranks"].as_array().unwrap();
    let got: Vec<(&str, &str, &str, u64, u64)> = ranks
        .iter()
        .map(|r| {
            (
                r["namespace"].as_str().unwrap(),
                r["component"].as_str().unwrap(),
                r["worker_id"].as_str().unwrap(),
                r["dp_rank"].as_u64().unwrap(),
                r["rows"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [("ns", "backend", "w", 0, 2), ("ns", "prefill", "w", 0, 3)]
    );
    assert!(ranks.iter().all(|r| r["counter_gaps"] == 0), "{doc}");
}

#[test]
fn a_file_that_is_not_gzip_is_an_error_not_a_truncated_segment() {
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    std::fs::write(&passwd, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    for sub in ["cat", "summary"] {
        let (_, err) = run_with_status(&["fpm".as_ref(), sub.as_ref(), passwd.as_os_str()], 1);
        assert!(err.contains("not a gzip JSONL segment"), "{err}");
    }
}

#[test]
fn a_row_longer_than_the_bound_is_skipped_with_a_warning_and_the_rest_is_read() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fpm.p.000000.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b"{\"timestamp\":0,\"event\":\"fine\"}\n")
        .unwrap();
    // 17 MiB in one row: a few KiB compressed. Then a row after it, in the same member.
    gz.write_all(&vec![b'x'; 17 << 20]).unwrap();
    gz.write_all(b"\n{\"timestamp\":1,\"event\":\"after\"}\n")
        .unwrap();
    std::fs::write(&path, gz.finish().unwrap()).unwrap();
    let (out, err) = run_with_status(&["fpm".as_ref(), "cat".as_ref(), path.as_os_str()], 3);
    assert!(
        err.contains("skipped 1 rows longer than 16777216 bytes") && err.contains("row 2"),
        "{err}"
    );
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert_eq!(
        out,
        b"{\"timestamp\":0,\"event\":\"fine\"}\n{\"timestamp\":1,\"event\":\"after\"}\n"
    );
}

#[test]
fn rows_written_after_an_over_long_payload_are_summarised() {
    // A real trace: the writer drops (and counts) the row it would make of a payload longer
    // than the readers' bound, so every row it wrote is read back.
    let dir = tempfile::tempdir().unwrap();
    let config = FpmConfig {
        output_path: dir.path().join("dynamo-fpm"),
        mode: CaptureMode::Full,
        ..FpmConfig::default()
    };
    let (_clock, trace) = manual_fpm_trace(&config, "9", 1_700_000_000_000, 64);
    for counter in 1..=3 {
        trace.record(busy("w", 0, counter, 0.5));
    }
    trace.record(busy(&"w".repeat(17 << 20), 0, 4, 0.5));
    for counter in 5..=6 {
        trace.record(busy("w", 0, counter, 0.5));
    }
    let stats = trace.close();
    assert_eq!((stats.written, stats.rejected), (5, 1));
    let (out, _) = run_with_status(&["fpm".as_ref(), "cat".as_ref(), dir.path().as_os_str()], 0);
    let lines: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(counters(&lines), [1, 2, 3, 5, 6]);
}

/// Producer "77" in sampled mode (1 s interval): counters 1..=5 in the first interval and
/// 6..=9 in the second, so rows 5 and 9 are written and 6, 7, 8 were coalesced by design.
fn write_sampled_trace(dir: &Path) {
    let config = FpmConfig {
        output_path: dir.join("dynamo-fpm"),
        mode: CaptureMode::Sampled,
        sample_interval: Duration::from_millis(1000),
        ..FpmConfig::default()
    };
    let (clock, trace) = manual_fpm_trace(&config, "77", 1_700_000_000_000, 64);
    for counters in [1..=5, 6..=9] {
        for counter in counters {
            trace.record(busy("s", 0, counter, 0.5));
        }
        trace.pump();
        clock.advance_ms(1000);
        trace.pump();
        trace.flush();
    }
    let stats = trace.close();
    assert_eq!((stats.written, stats.coalesced), (2, 7), "{stats:?}");
}

#[test]
fn a_directory_is_every_producer_in_it_and_sampling_gaps_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    write_trace(dir.path());
    write_sampled_trace(dir.path());
    // cat: the directory reads like the output prefix, every producer in order.
    let by_dir = stdout_lines(&["fpm".as_ref(), "cat".as_ref(), dir.path().as_os_str()]);
    assert_eq!(counters(&by_dir), [1, 10, 2, 3, 11, 6, 5, 9]);
    let by_prefix = stdout_lines(&[
        "fpm".as_ref(),
        "cat".as_ref(),
        dir.path().join("dynamo-fpm").as_os_str(),
    ]);
    assert_eq!(by_dir, by_prefix);

    let out = stdout_lines(&[
        "fpm".as_ref(),
        "summary".as_ref(),
        "--json".as_ref(),
        dir.path().as_os_str(),
    ]);
    let doc: Value = serde_json::from_str(&out[0]).unwrap();
    assert_eq!(doc["rows"], 8);
    let ranks = doc["ranks"].as_array().unwrap();
    let rank = |worker: &str, dp: u64| {
        ranks
            .iter()
            .find(|r| r["worker_id"] == worker && r["dp_rank"] == dp)
            .unwrap_or_else(|| panic!("{doc}"))
    };
    let gaps = |r: &Value| {
        [
            "counter_gaps",
            "missing_counters",
            "sampling_gaps",
            "coalesced_counters",
        ]
        .map(|k| r[k].as_u64().unwrap())
    };
    // Full mode: 3 -> 6 is a real gap; sampled: 5 -> 9 is sampling's.
    assert_eq!(gaps(rank("w", 0)), [1, 2, 0, 0]);
    assert_eq!(gaps(rank("s", 0)), [0, 0, 1, 3]);

    let table = stdout_lines(&["fpm".as_ref(), "summary".as_ref(), dir.path().as_os_str()]);
    assert!(table[0].contains(" coalesced "), "{table:?}");
    assert!(
        table.iter().any(|l| l.starts_with("coalesced: ")),
        "{table:?}"
    );

    // A directory without segments is an error that says so.
    let empty = tempfile::tempdir().unwrap();
    let (_, err) = run_with_status(
        &["fpm".as_ref(), "summary".as_ref(), empty.path().as_os_str()],
        1,
    );
    assert!(err.contains("a directory without any segment"), "{err}");
}
