//! Backend selection, the `scrape` backend's process rules, and the `ipc` backend without
//! NVIDIA's libraries. This binary never loads the DOCA test double.

mod common;

use std::net::{Ipv4Addr, TcpListener};

use common::*;
use nixl_telemetry_base::logging::capture;
use nixl_telemetry_core::{Collector, EventType, Status};

#[test]
fn an_unknown_backend_fails_creation_listing_the_valid_ones() {
    let _s = serial();
    for value in ["prometheus", "scrape,dts", " IPC "] {
        std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", value);
        let e = try_collector("a", "doca", 64).err().unwrap();
        assert_eq!(e.status, Status::InvalidParam, "{value}");
        let token = value.split(',').next_back().unwrap().trim();
        assert!(
            e.message.contains(&format!(
                "NIXL_TELEMETRY_DOCA_BACKENDS: unknown backend '{token}'; valid backends are \
                 'scrape', 'ipc'"
            )),
            "{}",
            e.message
        );
    }
}

#[test]
fn invalid_settings_fail_creation_naming_the_variable() {
    let _s = serial();
    for (var, value, text) in [
        (
            "NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT",
            "70000",
            "NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT='70000' is out of range",
        ),
        (
            "NIXL_TELEMETRY_DOCA_PROMETHEUS_LOCAL",
            "perhaps",
            "NIXL_TELEMETRY_DOCA_PROMETHEUS_LOCAL='perhaps' is not a boolean",
        ),
        (
            "NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US",
            "10,5",
            "NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US='10,5' is invalid",
        ),
    ] {
        std::env::set_var(var, value);
        let e = try_collector("a", "doca", 64).err().unwrap();
        assert_eq!(e.status, Status::InvalidParam, "{var}");
        assert!(e.message.contains(text), "{}", e.message);
        std::env::remove_var(var);
    }
}

#[test]
fn scrape_is_the_default_on_port_9091_or_the_configured_one() {
    let _s = serial();
    let port = free_port();
    use_doca_port(port);
    let ((), logged) = capture(|| {
        let c = collector("scraped", "doca", 64);
        let _ = c.add_xfer_stats(700, true, 3500, 300);
        c.flush();
        let (_, samples) = scrape(port);
        assert_eq!(agents(&samples), ["scraped"]);
        assert_eq!(
            value(
                &samples,
                "agent_xfer_time_us_bucket",
                "scraped",
                &[("le", "1000")]
            ),
            Some(1.0)
        );
        drop(c);
        assert!(port_closed(port), "the endpoint stops with its last agent");
    });
    assert!(warnings(&logged).is_empty(), "{logged:?}");
    assert!(
        logged
            .iter()
            .any(|(_, m)| m.contains("DOCA telemetry exporter: backends scrape for this process")),
        "{logged:?}"
    );
    // Without the port variable the default is 9091 (probed only if it is free here).
    std::env::remove_var("NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT");
    if TcpListener::bind((Ipv4Addr::UNSPECIFIED, 9091)).is_ok() {
        let c = collector("default-port", "doca", 64);
        let (_, samples) = scrape(9091);
        assert_eq!(agents(&samples), ["default-port"]);
        drop(c);
    }
}

#[test]
fn repeated_backends_count_once() {
    let _s = serial();
    let port = free_port();
    use_doca_port(port);
    let libs = empty_dir();
    std::env::set_var("NIXL_TELEMETRY_DOCA_LIB_DIR", libs.path());
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "scrape,ipc, scrape");
    let ((), logged) = capture(|| {
        let c = collector("both", "doca", 64);
        drop(c);
    });
    let infos: Vec<&String> = logged
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m.contains("DOCA telemetry exporter: backends"))
        .collect();
    assert_eq!(infos.len(), 1, "{logged:?}");
    assert!(
        infos[0].contains("backends scrape, ipc for this process"),
        "{}",
        infos[0]
    );
}

#[test]
fn ipc_without_the_libraries_is_one_warning_and_scrape_still_serves() {
    let _s = serial();
    let port = free_port();
    use_doca_port(port);
    let libs = empty_dir();
    std::env::set_var("NIXL_TELEMETRY_DOCA_LIB_DIR", libs.path());
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "scrape,ipc");
    let (stats, logged) = capture(|| {
        let a = collector("with-scrape", "doca", 64);
        // A second agent joins the same (degraded) context: no second warning.
        let b = collector("second", "doca", 64);
        for (xfer, post) in [(5, 2), (30, 15), (200, 80), (700, 300)] {
            let _ = a.add_xfer_stats(xfer, true, 1000, post);
        }
        a.update_error(-4).unwrap();
        a.flush();
        let _ = b.update_data(EventType::AgentRxBytes, 9);
        b.flush();
        let (_, samples) = scrape(port);
        assert_eq!(agents(&samples), ["second", "with-scrape"]);
        assert_eq!(
            value(&samples, "agent_xfer_time_us_sum", "with-scrape", &[]),
            Some(935.0)
        );
        assert_eq!(
            value(
                &samples,
                "agent_errors_total",
                "with-scrape",
                &[("status", "not_found")]
            ),
            Some(1.0)
        );
        assert_eq!(
            value(&samples, "agent_rx_bytes_total", "second", &[]),
            Some(9.0)
        );
        drop(b);
        a.close()
    });
    let w = warnings(&logged);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("the ipc backend is unavailable"), "{}", w[0]);
    assert!(
        w[0].contains("libdoca_common.so was not found in"),
        "{}",
        w[0]
    );
    assert!(
        w[0].contains(&libs.path().display().to_string()),
        "{}",
        w[0]
    );
    assert!(w[0].contains("NIXL_TELEMETRY_DOCA_LIB_DIR"), "{}", w[0]);
    assert!(
        w[0].contains("the scrape backend is unaffected"),
        "{}",
        w[0]
    );
    // Everything was kept by the scrape backend.
    assert_eq!((stats.events_exported, stats.events_lost), (17, 0));
}

#[test]
fn ipc_alone_without_the_libraries_warns_once_and_counts_the_loss() {
    let _s = serial();
    let port = free_port();
    use_doca_port(port);
    let libs = empty_dir();
    std::env::set_var("NIXL_TELEMETRY_DOCA_LIB_DIR", libs.path());
    std::env::set_var("NIXL_TELEMETRY_DOCA_BACKENDS", "ipc");
    let (c, logged) = capture(|| collector("alone", "doca", 64));
    let w = warnings(&logged);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("the ipc backend is unavailable"), "{}", w[0]);
    assert!(
        w[0].contains("the events of this process are counted as not exported"),
        "{}",
        w[0]
    );
    // The agent works: it records and flushes; what DTS never got is counted as lost. The
    // only further warning is the collector's own (once), none from the plug-in.
    let (stats, logged) = capture(|| {
        for _ in 0..3 {
            let _ = c.add_xfer_stats(10, false, 64, 1);
            c.flush();
        }
        let s = c.stats();
        drop(c);
        s
    });
    let w = warnings(&logged);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("could not keep 4 events"), "{}", w[0]);
    assert_eq!(
        (
            stats.events_accepted,
            stats.events_exported,
            stats.events_lost
        ),
        (12, 0, 12)
    );
    assert!(port_closed(port), "no scrape endpoint with ipc alone");
}

#[test]
fn agents_share_the_endpoint_and_leave_alone() {
    let _s = serial();
    let port = free_port();
    use_doca_port(port);
    let a = collector("a", "doca", 64);
    let b = collector("b", "doca", 64);
    let _ = a.update_data(EventType::AgentTxBytes, 1);
    let _ = b.update_data(EventType::AgentTxBytes, 2);
    a.flush();
    b.flush();
    let (_, samples) = scrape(port);
    assert_eq!(agents(&samples), ["a", "b"]);
    assert_eq!(value(&samples, "agent_tx_bytes_total", "b", &[]), Some(2.0));
    // A duplicate name is refused, through the Rust API and the C ABI alike.
    let e = try_collector("a", "doca", 64).err().unwrap();
    assert_eq!(e.status, Status::InvalidParam);
    assert!(
        e.message
            .contains("DOCA exporter: duplicate agent name 'a'"),
        "{}",
        e.message
    );
    // A later agent asking for another port joins the running endpoint, with a warning.
    use_doca_port(free_port());
    let (c, logged) = capture(|| collector("c", "doca", 64));
    let w = warnings(&logged);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("the first agent's address wins"), "{}", w[0]);
    drop(a);
    let (_, samples) = scrape(port);
    assert_eq!(agents(&samples), ["b", "c"]);
    drop(b);
    drop(c);
    assert!(port_closed(port));
}

#[test]
fn a_port_held_elsewhere_is_a_benign_collision() {
    let _s = serial();
    let holder = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = holder.local_addr().unwrap().port();
    use_doca_port(port);
    let (e, logged) = capture(|| try_collector("loser", "doca", 64).err());
    let e = e.expect("the port is held");
    assert_eq!(e.status, Status::BindFailed);
    let w = warnings(&logged);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains(&format!(
            "DOCA telemetry endpoint '127.0.0.1:{port}' could not be bound (likely already in \
             use by another process)"
        )),
        "{}",
        w[0]
    );
    // Through the C ABI, as NIXL's core would call it: BIND_FAILED, no handle.
    std::env::set_var("NIXL_TELEMETRY_EXPORTER", "doca");
    let agent = std::ffi::CString::new("loser").unwrap();
    let mut handle = std::ptr::null_mut();
    // SAFETY: `nixl_telemetry_create` requires `agent_name` to be NULL or NUL-terminated and
    // `out` to be NULL or writable: `agent` is a `CString` alive across the call and `handle` a
    // local pointer it may overwrite (with NULL on the failure asserted below, so no collector is
    // left to destroy).
    let status =
        unsafe { nixl_telemetry::nixl_telemetry_create(agent.as_ptr(), true, &mut handle) };
    std::env::remove_var("NIXL_TELEMETRY_EXPORTER");
    assert_eq!(status, nixl_telemetry::NIXL_TELEMETRY_ERR_BIND_FAILED);
    assert!(handle.is_null());
    // The name was not kept: once the port is free the same agent is created.
    drop(holder);
    let c: Collector = collector("loser", "doca", 64);
    let (_, samples) = scrape(port);
    assert_eq!(agents(&samples), ["loser"]);
    drop(c);
}
