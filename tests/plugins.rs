//! Exporter plug-ins loaded by name with dlopen: the Rust example plug-in receives exactly the
//! events produced; missing and foreign files give clear errors.
//!
//! Needs `cargo build --workspace` first (cargo test does not build cdylibs).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use nixl_telemetry::{plugin, Collector, Config, EventType, ExporterChoice, MetricMask, Status};

static ENV: Mutex<()> = Mutex::new(());

fn plugin_dir() -> PathBuf {
    let dir = nixl_telemetry_test_support::built_plugins(&["example_rust"]);
    plugin::add_plugin_dir(&dir).unwrap();
    dir
}

fn config(name: &str) -> Config {
    Config {
        buffer_size: 64,
        run_interval: Duration::from_secs(3600),
        exporter: ExporterChoice::Plugin(name.into()),
        enabled_metrics: MetricMask::ALL,
    }
}

#[test]
fn rust_plugin_receives_exactly_the_events() {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    plugin_dir();
    let out = tempfile::tempdir().unwrap();
    std::env::set_var("NIXL_TELEMETRY_EXAMPLE_RUST_DIR", out.path());
    let c = Collector::new("agent-r", config("example_rust")).unwrap();
    assert_eq!(c.exporter_name(), "example_rust");
    c.update_data(EventType::AgentMemoryRegistered, 4096);
    c.add_xfer_stats(120, true, 1 << 20, 8);
    c.update_error(-10).unwrap();
    c.flush();
    c.add_xfer_stats(30, false, 512, 3);
    for _ in 0..70 {
        c.update_data(EventType::AgentRxBytes, 1);
    }
    let stats = c.close();
    std::env::remove_var("NIXL_TELEMETRY_EXAMPLE_RUST_DIR");
    let text = std::fs::read_to_string(out.path().join("agent-r.events")).unwrap();
    let mut expected = vec![
        "agent_memory_registered 4096",
        "agent_xfer_post_time 8",
        "agent_xfer_time 120",
        "agent_tx_bytes 1048576",
        "agent_tx_requests_num 1",
        "agent_err_remote_disconnect 1",
        "agent_xfer_post_time 3",
        "agent_xfer_time 30",
        "agent_rx_bytes 512",
        "agent_rx_requests_num 1",
    ];
    expected.extend(std::iter::repeat_n("agent_rx_bytes 1", 60));
    expected.push("agent_telemetry_events_dropped 10");
    assert_eq!(text.lines().collect::<Vec<_>>(), expected);
    assert_eq!(
        (
            stats.events_exported,
            stats.events_lost,
            stats.events_dropped
        ),
        (71, 0, 10)
    );
}

#[test]
fn create_failures_carry_the_plugins_message() {
    let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    plugin_dir();
    std::env::remove_var("NIXL_TELEMETRY_EXAMPLE_RUST_DIR");
    let e = Collector::new("a", config("example_rust")).err().unwrap();
    assert_eq!(e.status, Status::InvalidParam);
    assert!(
        e.message
            .contains("NIXL_TELEMETRY_EXAMPLE_RUST_DIR is not set"),
        "{}",
        e.message
    );
}

#[test]
fn missing_plugin_lists_the_directories_searched() {
    let dir = plugin_dir();
    let e = Collector::new("a", config("no_such_exporter"))
        .err()
        .unwrap();
    assert_eq!(e.status, Status::NotFound);
    assert!(
        e.message
            .contains("libtelemetry_exporter_no_such_exporter.so"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains(&dir.display().to_string()),
        "{}",
        e.message
    );
    // Names are case-sensitive.
    let e = Collector::new("a", config("EXAMPLE_RUST")).err().unwrap();
    assert_eq!(e.status, Status::NotFound);
}

#[test]
fn a_library_without_the_entry_point_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let core = nixl_telemetry_test_support::profile_dir().join("libnixl_telemetry.so");
    assert!(core.exists(), "run `cargo build --workspace` first");
    std::fs::copy(&core, tmp.path().join("libtelemetry_exporter_impostor.so")).unwrap();
    std::fs::write(
        tmp.path().join("libtelemetry_exporter_garbage.so"),
        b"not an ELF file",
    )
    .unwrap();
    plugin::add_plugin_dir(tmp.path()).unwrap();
    let e = Collector::new("a", config("impostor")).err().unwrap();
    assert_eq!(e.status, Status::Mismatch);
    assert!(
        e.message.contains("not a telemetry exporter plug-in"),
        "{}",
        e.message
    );
    let e = Collector::new("a", config("garbage")).err().unwrap();
    assert!(
        e.message.contains("cannot load telemetry plug-in"),
        "{}",
        e.message
    );
    assert!(plugin::add_plugin_dir(Path::new("/no/such/dir")).is_err());
}
