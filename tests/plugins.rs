//! Exporter plug-ins loaded by name with dlopen: the Rust example plug-in receives exactly the
//! events produced; missing and foreign files give clear errors.
//!
//! Needs `cargo build --workspace` first (cargo test does not build cdylibs).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nixl_telemetry_base::sync::LockUnpoisoned;
use nixl_telemetry_core::{plugin, Collector, EventType, Status};
use nixl_telemetry_test_support::plugin_config as config;

static ENV: Mutex<()> = Mutex::new(());

fn plugin_dir() -> PathBuf {
    let dir = nixl_telemetry_test_support::built_plugins(&["example_rust"]);
    plugin::add_plugin_dir(&dir).unwrap();
    dir
}

#[test]
fn rust_plugin_receives_exactly_the_events() {
    let _g = ENV.lock_unpoisoned();
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
    let _g = ENV.lock_unpoisoned();
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
    assert!(
        e.message.contains("BUFFER, NOP and TRACE are built in"),
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
        e.message.contains("cannot load telemetry exporter plug-in"),
        "{}",
        e.message
    );
    assert!(plugin::add_plugin_dir(Path::new("/no/such/dir")).is_err());
}

/// Compiles `source` (C) into the shared library `dir/libtelemetry_exporter_<name>.so`.
fn build_c_plugin(dir: &Path, name: &str, source: &str) {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join(format!("libtelemetry_exporter_{name}.so")))
        .arg(&src)
        .status()
        .expect("a C compiler (cc) is needed");
    assert!(status.success());
}

#[test]
fn an_untrusted_or_foreign_library_is_refused_before_any_of_its_code_runs() {
    use std::os::unix::fs::PermissionsExt;
    let _g = ENV.lock_unpoisoned();
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("constructor-ran");
    // A library with a constructor but no entry point: its constructor must not run.
    build_c_plugin(
        tmp.path(),
        "ctor",
        &format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void ran(void) {{\n  \
             FILE *f = fopen(\"{}\", \"w\"); if (f) fclose(f);\n}}\nint other(void) {{ return 1; }}\n",
            marker.display()
        ),
    );
    let dir = tmp.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    std::fs::rename(
        tmp.path().join("libtelemetry_exporter_ctor.so"),
        dir.join("libtelemetry_exporter_ctor.so"),
    )
    .unwrap();
    plugin::add_plugin_dir(&dir).unwrap();
    let e = Collector::new("a", config("ctor")).err().unwrap();
    assert_eq!(e.status, Status::Mismatch);
    assert!(
        e.message.contains("not a telemetry exporter plug-in"),
        "{}",
        e.message
    );
    assert!(!marker.exists(), "the library's constructor ran");
    // A plug-in in a directory that others can write is refused, whatever it is.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = Collector::new("a", config("ctor")).err().unwrap();
    assert_eq!(e.status, Status::NotAllowed);
    assert!(
        e.message.contains("writable by group or others"),
        "{}",
        e.message
    );
    assert!(!marker.exists());
    // A relative NIXL_PLUGIN_DIR is refused, not resolved against the working directory.
    std::env::set_var("NIXL_PLUGIN_DIR", "plugins");
    let e = Collector::new("a", config("ctor")).err().unwrap();
    std::env::remove_var("NIXL_PLUGIN_DIR");
    assert_eq!(e.status, Status::InvalidParam);
    assert!(e.message.contains("relative path"), "{}", e.message);
}

#[test]
fn a_candidate_that_cannot_be_loaded_is_reported_when_a_later_one_is_used() {
    let _g = ENV.lock_unpoisoned();
    let built = plugin_dir().join("libtelemetry_exporter_example_rust.so");
    let later = tempfile::tempdir().unwrap();
    let first = tempfile::tempdir().unwrap();
    std::fs::copy(
        &built,
        later.path().join("libtelemetry_exporter_skipped.so"),
    )
    .unwrap();
    std::fs::write(
        first.path().join("libtelemetry_exporter_skipped.so"),
        b"not an ELF file",
    )
    .unwrap();
    plugin::add_plugin_dir(later.path()).unwrap();
    plugin::add_plugin_dir(first.path()).unwrap(); // searched first
    std::env::set_var("NIXL_TELEMETRY_EXAMPLE_RUST_DIR", later.path());
    let (collector, logged) =
        nixl_telemetry_base::logging::capture(|| Collector::new("agent-s", config("skipped")));
    assert!(collector.is_ok(), "{:?}", collector.err());
    let warnings = nixl_telemetry_base::logging::warnings(&logged);
    assert_eq!(warnings.len(), 1, "{logged:?}");
    assert!(
        warnings[0].contains(&later.path().display().to_string())
            && warnings[0].contains("1 earlier candidate")
            && warnings[0].contains("not an ELF file"),
        "{}",
        warnings[0]
    );
    drop(collector);
    std::env::remove_var("NIXL_TELEMETRY_EXAMPLE_RUST_DIR");
}

/// The shared trust rule (the base crate's `plugin::trust`, which the NIXL adapter calls too)
/// refuses a symbolic link named as a plug-in, even to a trusted plug-in, and a plug-in owned by
/// another user (as root, playing `nobody`), whatever its mode.
#[test]
fn a_linked_plugin_or_another_users_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let _g = ENV.lock_unpoisoned();
    let built = plugin_dir().join("libtelemetry_exporter_example_rust.so");
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&built, tmp.path().join("libtelemetry_exporter_linked.so")).unwrap();
    plugin::add_plugin_dir(tmp.path()).unwrap();
    let e = Collector::new("a", config("linked")).err().unwrap();
    assert_eq!(e.status, Status::NotAllowed);
    assert!(e.message.contains("is a symbolic link"), "{}", e.message);
    let (uid, gid) = match nixl_telemetry_test_support::other_user::other_user() {
        Ok(ids) => ids,
        Err(why) => {
            eprintln!("another user's plug-in skipped: {why}");
            return;
        }
    };
    let foreign = tmp.path().join("libtelemetry_exporter_foreign.so");
    std::fs::copy(&built, &foreign).unwrap();
    std::os::unix::fs::chown(&foreign, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = Collector::new("a", config("foreign")).err().unwrap();
    assert_eq!(e.status, Status::NotAllowed);
    assert!(
        e.message.contains(&format!("is owned by uid {uid}")),
        "{}",
        e.message
    );
}
