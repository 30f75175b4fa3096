//! The FPM page's pandas and DuckDB examples (`docs/fpm.md`, "Reading traces with pandas or
//! DuckDB"), run as written on segments the library wrote, with outer timestamps past the point
//! where pandas' `read_json` turns them into dates; and that claim itself. Skipped, with a
//! note, when `python3` lacks pandas or duckdb (`scripts/install-test-deps.sh` installs them),
//! unless `NIXL_TELEMETRY_REQUIRE_PYDATA` is set (as `scripts/test.sh` does): then it fails.

use std::path::Path;
use std::process::Command;

use nixl_telemetry_core::fpm::{CaptureMode, FpmConfig, FpmPayload};
use nixl_telemetry_core::segments::segments_of;
use nixl_telemetry_test_support::manual_fpm_trace;

/// pandas reads a `timestamp` column of numbers as seconds since 1970 once every value of the
/// file exceeds one year in seconds.
const PANDAS_DATE_THRESHOLD: u64 = 31_536_000;

fn python_has_pandas_and_duckdb() -> bool {
    Command::new("python3")
        .args(["-c", "import pandas, duckdb"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `python3 -c script args...`; returns its stdout, panicking with stderr on failure.
fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python3 failed:\n{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The body of the first fenced block of `language` after `heading` in `markdown`.
fn code_block(markdown: &str, heading: &str, language: &str) -> String {
    let section = &markdown[markdown.find(heading).expect("the section exists")..];
    let open = format!("```{language}\n");
    let start = section.find(&open).expect("the code block exists") + open.len();
    let len = section[start..].find("```").unwrap();
    section[start..start + len].to_owned()
}

/// Producer 4192 in full mode, its clock 33,000 s (9.2 hours) past its start: six rows, each
/// flushed as its own gzip member (a multi-member file, as the writer makes every second).
fn write_trace(dir: &Path) {
    let config = FpmConfig {
        output_path: dir.join("dynamo-fpm"),
        mode: CaptureMode::Full,
        ..FpmConfig::default()
    };
    let (clock, trace) = manual_fpm_trace(&config, "4192", 1_782_777_600_000, 64);
    clock.advance_ms(33_000_000);
    for counter in 1..=6 {
        let mut p = FpmPayload::heartbeat("w", 0, counter);
        p.wall_time = 0.25 * counter as f64;
        trace.record(p);
        // Two rows per millisecond: the examples must order them by counter, not by luck.
        if counter % 2 == 0 {
            clock.advance_ms(5000);
        }
        trace.pump();
        trace.flush();
    }
    trace.close();
}

const HEADING: &str = "## Reading traces with pandas or DuckDB";

#[test]
fn the_pandas_and_duckdb_examples_read_the_segments_and_keep_timestamps_numbers() {
    if !python_has_pandas_and_duckdb() {
        assert!(
            std::env::var_os("NIXL_TELEMETRY_REQUIRE_PYDATA").is_none(),
            "python3 lacks pandas or duckdb (pip install pandas duckdb); scripts/test.sh installs \
             them (scripts/install-test-deps.sh)"
        );
        eprintln!(
            "skipping: python3 lacks pandas or duckdb (pip install pandas duckdb; \
             scripts/install-test-deps.sh installs them)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_trace(dir.path());
    let files = segments_of(&dir.path().join("dynamo-fpm.4192")).unwrap();
    assert!(!files.is_empty());
    let prefix = dir.path().join("dynamo-fpm");
    let prefix = prefix.to_str().unwrap();
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/fpm.md")).unwrap();

    // The claim: without dtype=False, pandas turns these timestamps into dates; with
    // convert_dates=False it keeps them but pandas 3 warns of the deprecation.
    let claim = python(
        r#"
import sys, warnings
import pandas as pd
f = sys.argv[1]
print(pd.read_json(f, lines=True)["timestamp"].dtype.kind)
print(pd.read_json(f, lines=True, dtype=False)["timestamp"].dtype.kind)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    kind = pd.read_json(f, lines=True, convert_dates=False)["timestamp"].dtype.kind
deprecated = any("convert_dates" in str(w.message) for w in caught)
print(kind, int(pd.__version__.split(".")[0]) < 3 or deprecated)
"#,
        &[files[0].to_str().unwrap()],
    );
    assert_eq!(claim, "M\ni\ni True\n", "datetime, then integers twice");

    // The pandas example, as written, on this trace.
    let example = code_block(&docs, HEADING, "python").replace("/tmp/dynamo-fpm", prefix);
    let printed = python(&example, &[]);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 7, "a header and 6 rows:\n{printed}");
    for (i, line) in lines[1..].iter().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // index, timestamp, observed_at_unix_ms, dp_rank, counter_id, wall_time
        assert_eq!(fields.len(), 6, "{line}");
        let timestamp: u64 = fields[1].parse().unwrap_or_else(|_| panic!("{printed}"));
        assert!(timestamp > PANDAS_DATE_THRESHOLD, "{line}");
        assert_eq!(fields[4], (i + 1).to_string(), "counter order: {printed}");
    }

    // The DuckDB example, as written.
    let sql = code_block(&docs, HEADING, "sql").replace("/tmp/dynamo-fpm", prefix);
    let result = python(
        r#"
import sys
import duckdb
r = duckdb.sql(sys.argv[1])
print(r.types[0])
for row in r.fetchall():
    print(*row)
"#,
        &[&sql],
    );
    let lines: Vec<&str> = result.lines().collect();
    assert_eq!(lines[0], "BIGINT", "{result}");
    assert_eq!(lines.len(), 7, "{result}");
    for (i, line) in lines[1..].iter().enumerate() {
        let fields: Vec<&str> = line.split(' ').collect();
        assert!(
            fields[0].parse::<u64>().unwrap() > PANDAS_DATE_THRESHOLD,
            "{line}"
        );
        assert_eq!(fields[3], (i + 1).to_string(), "{result}");
    }
}
