//! An FPM trace in a process that forks (one test: the `DYN_FPM_*` environment is read once
//! per process). In the child, every call on the inherited trace is refused with
//! `ERR_FORKED` and closing it releases nothing; a trace the child opens works, and the exit
//! handler writes it out while leaving the parent's alone. The parent's segments hold only
//! the parent's rows.

mod common;

use std::ffi::CStr;
use std::time::Duration;

use common::last_error;
use nixl_telemetry::fpm::*;
use nixl_telemetry_base::constants::*;
use nixl_telemetry_core::fpm::{FpmPayload, FpmStats, QueuedRequests, ScheduledRequests};
use nixl_telemetry_core::segments::{segments_of, SegmentReader};
use nixl_telemetry_test_support::forked;
use serde_json::Value;

fn payload(worker_id: &CStr, counter: i64) -> nixl_telemetry_fpm_payload_t {
    nixl_telemetry_fpm_payload_t {
        version: 1,
        worker_id: worker_id.as_ptr(),
        dp_rank: 0,
        counter_id: counter,
        wall_time: 0.5,
        scheduled_requests: ScheduledRequests::default(),
        queued_requests: QueuedRequests::default(),
    }
}

/// Opens the trace of `producer`.
fn open(producer: &CStr) -> *mut nixl_telemetry_fpm_trace_t {
    let mut t = std::ptr::null_mut();
    // SAFETY: static C strings and a local out-parameter.
    let status = unsafe {
        nixl_telemetry_fpm_trace_open(
            c"default".as_ptr(),
            c"backend".as_ptr(),
            producer.as_ptr(),
            &mut t,
        )
    };
    assert_eq!(status, NIXL_TELEMETRY_SUCCESS, "{}", last_error());
    t
}

/// The counter ids of the rows of `producer`'s segments under `dir`.
fn counters(dir: &std::path::Path, producer: &str) -> Vec<u64> {
    let mut all = Vec::new();
    for file in segments_of(&dir.join(format!("dynamo-fpm.{producer}"))).unwrap() {
        let (rows, _) = SegmentReader::read_rows(&file).unwrap();
        all.extend(rows.iter().map(|r| {
            serde_json::from_slice::<Value>(r).unwrap()["event"]["fpm"]["counter_id"]
                .as_u64()
                .unwrap()
        }));
    }
    all
}

#[test]
fn a_forked_child_refuses_the_inherited_trace_and_writes_its_own() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("DYN_FPM_TRACE", "1");
    std::env::set_var(
        "DYN_FPM_OUTPUT_PATH",
        dir.path().join("dynamo-fpm.jsonl.gz"),
    );
    std::env::set_var("DYN_FPM_MODE", "full");
    let parent = open(c"parent");
    // SAFETY: `parent` is the live handle opened above; payloads are live locals.
    unsafe {
        assert_eq!(
            nixl_telemetry_fpm_trace_record(parent, &payload(c"w", 1)),
            NIXL_TELEMETRY_SUCCESS
        );
    }
    let parent_addr = parent as usize;
    let mut child = forked::fork(move |_| {
        let inherited = parent_addr as *mut nixl_telemetry_fpm_trace_t;
        let bytes = FpmPayload::heartbeat("w", 0, 66).to_msgpack();
        let mut stats = FpmStats::default();
        // SAFETY: the inherited handle is live (the parent's, copied by the fork); payloads
        // and buffers are live locals.
        unsafe {
            assert_eq!(
                nixl_telemetry_fpm_trace_record(inherited, &payload(c"w", 66)),
                NIXL_TELEMETRY_ERR_FORKED
            );
            assert!(last_error().contains("forked"), "{}", last_error());
            assert_eq!(
                nixl_telemetry_fpm_trace_record_msgpack(inherited, bytes.as_ptr(), bytes.len()),
                NIXL_TELEMETRY_ERR_FORKED
            );
            assert_eq!(
                nixl_telemetry_fpm_trace_flush(inherited),
                NIXL_TELEMETRY_ERR_FORKED
            );
            assert_eq!(
                nixl_telemetry_fpm_trace_get_stats(inherited, &mut stats),
                NIXL_TELEMETRY_ERR_FORKED
            );
            nixl_telemetry_fpm_trace_close(inherited);
            assert!(!last_error().contains("internal error"), "{}", last_error());
        }
        let own = open(c"child");
        // SAFETY: `own` is the live handle opened above.
        unsafe {
            assert_eq!(
                nixl_telemetry_fpm_trace_record(own, &payload(c"w", 77)),
                NIXL_TELEMETRY_SUCCESS
            );
        }
        // Left open: the exit handler closes the child's trace (writing its row), and leaves
        // the inherited one alone.
        // SAFETY: ends the child through exit(3), running its exit handlers.
        unsafe { libc::exit(0) }
    });
    assert_eq!(child.wait(Duration::from_secs(60)), 0);
    assert_eq!(counters(dir.path(), "child"), [77]);
    // SAFETY: `parent` is still the live handle opened above; closed once.
    unsafe {
        assert_eq!(
            nixl_telemetry_fpm_trace_record(parent, &payload(c"w", 2)),
            NIXL_TELEMETRY_SUCCESS
        );
        nixl_telemetry_fpm_trace_close(parent);
    }
    assert_eq!(counters(dir.path(), "parent"), [1, 2]);
}
