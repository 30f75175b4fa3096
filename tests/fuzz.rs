//! Fuzzing on the stable toolchain, with a bounded budget in the test command (about a second
//! per target; `NIXL_FUZZ_SECONDS=600 cargo test --release --test fuzz -- --nocapture` runs
//! longer): the ring reader on corrupt files, the msgpack payload decoder, the segment reader
//! on mutated gzip, and the environment parsers. Each target must return an error or a value,
//! never panic, and keep its invariants. The series crate's parsers (histogram bounds, HTTP
//! request heads) have their own targets in series/tests/fuzz.rs.

use std::io::Write;

use nixl_telemetry_base::env::fixed_env;
use nixl_telemetry_core::exporter::{ExporterChoice, TraceExporterConfig};
use nixl_telemetry_core::fpm::{FpmPayload, FpmPolicy, ValidPayload};
use nixl_telemetry_core::ring::layout;
use nixl_telemetry_core::segments::SegmentReader;
use nixl_telemetry_core::{Config, Event, EventType, MetricMask, RingReader, RingWriter};
use nixl_telemetry_test_support::fuzz;

#[test]
fn fuzz_the_ring_reader_on_corrupt_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut seeds = Vec::new();
    for (capacity, layout) in [8, 64].into_iter().zip(layout::LAYOUTS) {
        let name = format!("seed{capacity}");
        let ring = RingWriter::create_with(dir.path(), &name, capacity, layout).unwrap();
        ring.push_batch(
            &(0..5)
                .map(|v| Event::new(EventType::AgentTxBytes, v))
                .collect::<Vec<_>>(),
        );
        seeds.push(std::fs::read(dir.path().join(&name)).unwrap());
    }
    // NIXL's own ring files too: `$NIXL_TELEMETRY_FIXTURES` (scripts/test.sh sets it), else the
    // repository's copies; a missing one fails rather than leaving the fuzzer without them.
    let fixtures = std::env::var_os("NIXL_TELEMETRY_FIXTURES").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
        std::path::PathBuf::from,
    );
    for f in [
        "nixl-ring-v4-cap8-full.bin",
        "nixl-ring-v4-cap16-wrapped.bin",
    ] {
        let path = fixtures.join(f);
        seeds.push(
            std::fs::read(&path).unwrap_or_else(|e| panic!("NIXL fixture {}: {e}", path.display())),
        );
    }
    // Our version-5 file (NIXL has written none), from the repository.
    let ours = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nixl-telemetry-ring-v5-cap16-wrapped.bin");
    seeds.push(std::fs::read(&ours).unwrap_or_else(|e| panic!("{}: {e}", ours.display())));
    let path = dir.path().join("fuzzed");
    fuzz::run("ring_reader", &seeds, |bytes| {
        std::fs::write(&path, bytes).unwrap();
        let Ok(mut reader) = RingReader::open(&path) else {
            return;
        };
        let capacity = reader.capacity();
        assert!(
            reader.len() < capacity,
            "len {} of capacity {capacity}",
            reader.len()
        );
        let mut popped = 0u64;
        while reader.try_pop().unwrap().is_some() {
            popped += 1;
            assert!(
                popped < capacity,
                "a reader never pops more than capacity - 1 events"
            );
        }
    });
}

#[test]
fn fuzz_the_msgpack_payload_decoder() {
    let mut busy = FpmPayload::heartbeat("7587890123456789012", 3, 41);
    busy.wall_time = 0.012;
    busy.scheduled_requests.num_decode_requests = 12;
    busy.queued_requests.var_prefill_length = 3.5;
    let seeds = vec![
        FpmPayload::heartbeat("w", 0, 0).to_msgpack(),
        busy.to_msgpack(),
    ];
    fuzz::run("msgpack_payload", &seeds, |bytes| {
        if let Ok(payload) = ValidPayload::from_msgpack(bytes) {
            // Every accepted payload writes a row that JSON readers parse back.
            let row = serde_json::to_vec(&payload).unwrap();
            serde_json::from_slice::<serde_json::Value>(&row)
                .unwrap_or_else(|e| panic!("an accepted payload does not parse back: {e}"));
        }
    });
}

#[test]
fn fuzz_the_segment_reader_on_mutated_gzip() {
    let member = |text: &str| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    let mut two = member("{\"timestamp\":1,\"event\":{}}\n{\"timestamp\":2,\"event\":{}}\n");
    two.extend(member("{\"timestamp\":3,\"event\":{\"a\":[1,2,3]}}\n"));
    let seeds = vec![two, member(""), member("no newline at the end")];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.x.000000.jsonl.gz");
    fuzz::run("segment_reader", &seeds, |bytes| {
        std::fs::write(&path, bytes).unwrap();
        let mut rows = 0u64;
        if let Ok(outcome) = SegmentReader::for_each_row(&path, |_| {
            rows += 1;
            Ok(())
        }) {
            assert_eq!(outcome.rows, rows);
        }
        // A small bound, so that mutations reach the row-length check: no row longer than it
        // is ever returned.
        let mut rows = 0u64;
        if let Ok(outcome) = SegmentReader::for_each_row_bounded(&path, 16, |row| {
            assert!(
                row.len() <= 16,
                "a row of {} bytes passed a bound of 16",
                row.len()
            );
            rows += 1;
            Ok(())
        }) {
            assert_eq!(outcome.rows, rows);
        }
    });
}

#[test]
fn fuzz_the_environment_parsers() {
    let seeds = fuzz::environment_seeds();
    use nixl_telemetry_core::config::{
        ENV_BUFFER_SIZE, ENV_ENABLE, ENV_ENABLED_METRICS, ENV_RUN_INTERVAL,
    };
    use nixl_telemetry_core::exporter::trace::ENV_TRACE_ROLL_BYTES;
    use nixl_telemetry_core::exporter::{ENV_DIR, ENV_EXPORTER};
    use nixl_telemetry_core::fpm::config::{ENV_MODE, ENV_SAMPLE_INTERVAL_MS, ENV_TRACE};
    const CORE: [&str; 7] = [
        ENV_ENABLE,
        ENV_BUFFER_SIZE,
        ENV_RUN_INTERVAL,
        ENV_EXPORTER,
        ENV_DIR,
        ENV_ENABLED_METRICS,
        ENV_TRACE_ROLL_BYTES,
    ];
    let mut round = 0usize;
    fuzz::run("environment", &seeds, |bytes| {
        let value = String::from_utf8_lossy(bytes);
        let _ = nixl_telemetry_base::env::parse_bool("V", &value);
        let _ = nixl_telemetry_base::env::parse_u64("V", &value);
        let _ = MetricMask::resolve(&value);
        round += 1;
        let var = CORE[round % CORE.len()];
        let pairs = [(var, value.as_ref()), (ENV_EXPORTER, "TRACE")];
        let pairs = if round.is_multiple_of(2) {
            &pairs[..1]
        } else {
            &pairs[..]
        };
        match Config::from_lookup(&fixed_env(pairs)) {
            Ok(config) => {
                assert!(config.buffer_size >= 1 && config.run_interval.as_millis() >= 1);
                if let ExporterChoice::Trace(t) = config.exporter {
                    assert!(t.roll_bytes >= 1 && t.max_segments >= 1);
                }
            }
            Err(e) => assert!(
                e.message.contains("NIXL_TELEMETRY_"),
                "an error that names no variable: {}",
                e.message
            ),
        }
        let _ = TraceExporterConfig::from_lookup(&fixed_env(&[(var, value.as_ref())]));
        let fpm = [ENV_TRACE, ENV_MODE, ENV_SAMPLE_INTERVAL_MS][round % 3];
        let _ = FpmPolicy::from_lookup(&fixed_env(&[(ENV_TRACE, "1"), (fpm, value.as_ref())]));
    });
}
