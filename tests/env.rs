//! Creation through the environment, as a NIXL agent does it. The environment is
//! process-global, so these tests take a lock and set exactly the variables they need.

use std::sync::Mutex;

use nixl_telemetry_base::logging::{capture, warnings};
use nixl_telemetry_base::sync::LockUnpoisoned;
use nixl_telemetry_core::{Collector, EventType, Status};

static ENV: Mutex<()> = Mutex::new(());

const VARS: [&str; 8] = [
    "NIXL_TELEMETRY_ENABLE",
    "NIXL_TELEMETRY_BUFFER_SIZE",
    "NIXL_TELEMETRY_RUN_INTERVAL",
    "NIXL_TELEMETRY_EXPORTER",
    "NIXL_TELEMETRY_DIR",
    "NIXL_TELEMETRY_ENABLED_METRICS",
    "NIXL_TELEMETRY_RING_VERSION",
    "NIXL_TELEMETRY_XFER_STALLED_EVENT",
];

/// Runs `f` with exactly `vars` set among the telemetry variables.
fn with_env<R>(vars: &[(&str, &str)], f: impl FnOnce() -> R) -> R {
    let _guard = ENV.lock_unpoisoned();
    for v in VARS {
        std::env::remove_var(v);
    }
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
    let r = f();
    for v in VARS {
        std::env::remove_var(v);
    }
    r
}

fn create_error(vars: &[(&str, &str)], agent: &str) -> nixl_telemetry_core::Error {
    with_env(vars, || {
        Collector::from_env(agent, true)
            .err()
            .expect("creation must fail")
    })
}

#[test]
fn not_requested_means_no_telemetry() {
    let e = with_env(&[], || Collector::from_env("a", false).err().unwrap());
    assert_eq!(e.status, Status::NoTelemetry);
    let (e, logged) = capture(|| {
        with_env(&[("NIXL_TELEMETRY_ENABLE", "n")], || {
            Collector::from_env("a", true).err().unwrap()
        })
    });
    assert_eq!(e.status, Status::NoTelemetry);
    let w = warnings(&logged);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("ignoring telemetry requested through agent config"));
    let (e, logged) = capture(|| {
        with_env(&[("NIXL_TELEMETRY_ENABLE", "off")], || {
            Collector::from_env("a", false).err().unwrap()
        })
    });
    assert_eq!(e.status, Status::NoTelemetry);
    assert!(warnings(&logged).is_empty());
}

#[test]
fn enable_alone_gives_a_nop_collector() {
    let c = with_env(&[("NIXL_TELEMETRY_ENABLE", "YES")], || {
        Collector::from_env("a", false).unwrap()
    });
    assert_eq!(c.exporter_name(), "NOP");
    c.update_data(EventType::AgentTxBytes, 5);
    let s = c.close();
    assert_eq!((s.events_accepted, s.events_exported), (1, 1));
}

#[test]
fn every_bad_value_names_its_variable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for (var, value, extra) in [
        ("NIXL_TELEMETRY_ENABLE", "maybe", None),
        ("NIXL_TELEMETRY_BUFFER_SIZE", "0", None),
        ("NIXL_TELEMETRY_BUFFER_SIZE", "-1", None),
        ("NIXL_TELEMETRY_BUFFER_SIZE", "12abc", None),
        (
            "NIXL_TELEMETRY_BUFFER_SIZE",
            "12",
            Some(("NIXL_TELEMETRY_DIR", d)),
        ),
        ("NIXL_TELEMETRY_RUN_INTERVAL", "fast", None),
        ("NIXL_TELEMETRY_RUN_INTERVAL", "0", None),
        (
            "NIXL_TELEMETRY_EXPORTER",
            "BUFFER",
            Some(("NIXL_TELEMETRY_DIR", "")),
        ),
        (
            "NIXL_TELEMETRY_RING_VERSION",
            "3",
            Some(("NIXL_TELEMETRY_DIR", d)),
        ),
        (
            "NIXL_TELEMETRY_RING_VERSION",
            "v5",
            Some(("NIXL_TELEMETRY_DIR", d)),
        ),
        ("NIXL_TELEMETRY_XFER_STALLED_EVENT", "maybe", None),
    ] {
        let mut vars = vec![(var, value)];
        vars.extend(extra);
        let e = create_error(&vars, "agent");
        assert_eq!(
            e.status,
            Status::InvalidParam,
            "{var}={value}: {}",
            e.message
        );
        assert!(e.message.contains(var), "{var}={value}: {}", e.message);
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn an_empty_value_is_unset() {
    // Every core variable empty: the defaults, with the capture flag deciding.
    let empty: Vec<(&str, &str)> = VARS.iter().map(|v| (*v, "")).collect();
    let c = with_env(&empty, || Collector::from_env("a", true).unwrap());
    assert_eq!(c.exporter_name(), "NOP");
    c.close();
    let e = with_env(&empty, || Collector::from_env("a", false).err().unwrap());
    assert_eq!(e.status, Status::NoTelemetry);
}

#[test]
fn buffer_rings_are_private_and_names_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for hostile in ["../escape", "a/b", ".", "..", "/etc/x"] {
        let e = create_error(&[("NIXL_TELEMETRY_DIR", d)], hostile);
        assert_eq!(e.status, Status::InvalidParam, "{hostile}");
    }
    assert!(!dir.path().parent().unwrap().join("escape").exists());
    let c = with_env(
        &[
            ("NIXL_TELEMETRY_DIR", d),
            ("NIXL_TELEMETRY_BUFFER_SIZE", "32"),
        ],
        || Collector::from_env("agent-1", true).unwrap(),
    );
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir.path().join("agent-1")).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 40 + 16 * 32);
    // A second agent with the same name in the same directory is refused.
    let e = create_error(&[("NIXL_TELEMETRY_DIR", d)], "agent-1");
    assert_eq!(e.status, Status::NotAllowed);
    drop(c);
    // NOP named explicitly beats the directory: no file.
    let c = with_env(
        &[
            ("NIXL_TELEMETRY_DIR", d),
            ("NIXL_TELEMETRY_EXPORTER", "NOP"),
        ],
        || Collector::from_env("agent-2", true).unwrap(),
    );
    assert_eq!(c.exporter_name(), "NOP");
    assert!(!dir.path().join("agent-2").exists());
}

/// `NIXL_TELEMETRY_RING_VERSION` chooses the layout BUFFER writes (4 unless set), and
/// `NIXL_TELEMETRY_XFER_STALLED_EVENT` what a stalled transfer (-13, or event 21 given directly)
/// is recorded as: `agent_err_unknown` unless it is true.
#[test]
fn the_ring_version_and_the_stalled_event_follow_their_settings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let stalled = EventType::AgentErrXferStalled;
    for (version, on, header, recorded) in [
        (None, None, 40, EventType::AgentErrUnknown),
        (Some("5"), None, 512, EventType::AgentErrUnknown),
        (Some("4"), Some("true"), 40, stalled),
        (Some("5"), Some("yes"), 512, stalled),
        (Some("5"), Some("false"), 512, EventType::AgentErrUnknown),
    ] {
        let mut vars = vec![
            ("NIXL_TELEMETRY_DIR", d),
            ("NIXL_TELEMETRY_BUFFER_SIZE", "16"),
        ];
        vars.extend(version.map(|v| ("NIXL_TELEMETRY_RING_VERSION", v)));
        vars.extend(on.map(|v| ("NIXL_TELEMETRY_XFER_STALLED_EVENT", v)));
        let c = with_env(&vars, || Collector::from_env("agent", true).unwrap());
        c.update_error(-13).unwrap();
        c.update_data(stalled, 1);
        c.update_error(-8).unwrap();
        c.close();
        let path = dir.path().join("agent");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), header + 16 * 16);
        let mut ring = nixl_telemetry_core::RingReader::open(&path).unwrap();
        assert_eq!(ring.header().version, if header == 40 { 4 } else { 5 });
        let types: Vec<u32> = ring.by_ref().map(|e| e.event_type).collect();
        let (r, unknown) = (recorded as u32, EventType::AgentErrUnknown as u32);
        assert_eq!(types, [r, r, unknown], "{version:?} {on:?}");
    }
    // Statuses beyond -13 are still refused.
    let c = with_env(&[], || Collector::from_env("a", true).unwrap());
    assert_eq!(
        c.update_error(-14).unwrap_err().status,
        Status::InvalidParam
    );
}

/// NIXL does not create `NIXL_TELEMETRY_DIR` and neither do we (a mistyped directory must not
/// silently collect rings where no reader looks); the message says what to do.
#[test]
fn a_missing_telemetry_directory_is_not_created_and_the_error_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-yet");
    let d = missing.to_str().unwrap();
    let e = create_error(&[("NIXL_TELEMETRY_DIR", d)], "myagent");
    assert_eq!(e.status, Status::NotFound);
    assert!(!missing.exists(), "the directory must not be created");
    for needle in [
        "NIXL_TELEMETRY_DIR",
        d,
        "does not exist",
        "create the directory first",
    ] {
        assert!(e.message.contains(needle), "{needle}: {}", e.message);
    }
    // A file where the directory should be is named as such.
    std::fs::write(&missing, b"").unwrap();
    let e = create_error(&[("NIXL_TELEMETRY_DIR", d)], "myagent");
    assert!(e.message.contains("is not a directory"), "{}", e.message);
}

#[test]
fn unknown_exporter_and_unmatched_metrics() {
    let e = create_error(&[("NIXL_TELEMETRY_EXPORTER", "nosuch")], "a");
    assert_eq!(e.status, Status::NotFound);
    assert!(e.message.contains("nosuch"));
    let (c, logged) = capture(|| {
        with_env(
            &[(
                "NIXL_TELEMETRY_ENABLED_METRICS",
                "agent_rx_*, bogus ,agent_tx_bytes_total",
            )],
            || Collector::from_env("a", true).unwrap(),
        )
    });
    let w = warnings(&logged);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("'bogus'") && w[1].contains("'agent_tx_bytes_total'"));
    assert!(c.enabled_metrics().contains(EventType::AgentRxBytes));
    assert!(!c.enabled_metrics().contains(EventType::AgentTxBytes));
}
