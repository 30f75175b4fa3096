//! The FPM trace C ABI with tracing enabled by the environment (one test: the environment is
//! read once per process).

mod common;

use std::ffi::CStr;

use common::last_error;
use nixl_telemetry::fpm::*;
use nixl_telemetry_base::constants::*;
use nixl_telemetry_core::fpm::{FpmPayload, FpmStats, QueuedRequests, ScheduledRequests};
use nixl_telemetry_core::segments::segments_of;
use nixl_telemetry_core::segments::SegmentReader;
use serde_json::Value;

fn payload(worker_id: &CStr, rank: i64, counter: i64) -> nixl_telemetry_fpm_payload_t {
    nixl_telemetry_fpm_payload_t {
        version: 1,
        worker_id: worker_id.as_ptr(),
        dp_rank: rank,
        counter_id: counter,
        wall_time: 0.5,
        scheduled_requests: ScheduledRequests {
            num_decode_requests: 3,
            ..Default::default()
        },
        queued_requests: QueuedRequests::default(),
    }
}

#[test]
fn open_record_stats_close_through_the_c_abi() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("DYN_FPM_TRACE", " On ");
    std::env::set_var(
        "DYN_FPM_OUTPUT_PATH",
        dir.path().join("dynamo-fpm.jsonl.gz"),
    );
    std::env::set_var("DYN_FPM_MODE", "full");
    std::env::set_var("DYN_FPM_MAX_SEGMENTS", "3");
    // SAFETY: every pointer passed is a static C string, a live local (payload, CString, stats,
    // out-parameter) or the handle opened here, closed once at the end.
    unsafe {
        let mut t: *mut nixl_telemetry_fpm_trace_t = std::ptr::null_mut();
        assert_eq!(
            nixl_telemetry_fpm_trace_open(
                c"default".as_ptr(),
                c"backend".as_ptr(),
                c"41:92".as_ptr(),
                &mut t
            ),
            NIXL_TELEMETRY_SUCCESS
        );
        assert!(!t.is_null());

        // The same (namespace, component, producer) again (one relay per data-parallel rank)
        // shares the trace: a second handle, released on its own.
        let mut second: *mut nixl_telemetry_fpm_trace_t = std::ptr::null_mut();
        assert_eq!(
            nixl_telemetry_fpm_trace_open(
                c"default".as_ptr(),
                c"backend".as_ptr(),
                c"41:92".as_ptr(),
                &mut second
            ),
            NIXL_TELEMETRY_SUCCESS
        );
        assert!(!second.is_null() && second != t);
        assert_eq!(
            nixl_telemetry_fpm_trace_record(second, &payload(c"w", 1, 9)),
            NIXL_TELEMETRY_SUCCESS
        );
        nixl_telemetry_fpm_trace_close(second);
        // A producer id that sanitizes to the same file prefix is refused.
        let mut again: *mut nixl_telemetry_fpm_trace_t = std::ptr::dangling_mut();
        assert_eq!(
            nixl_telemetry_fpm_trace_open(
                c"default".as_ptr(),
                c"other".as_ptr(),
                c"41/92".as_ptr(),
                &mut again
            ),
            NIXL_TELEMETRY_ERR_NOT_ALLOWED
        );
        assert!(again.is_null());
        assert!(last_error().contains("already open"), "{}", last_error());

        let bytes = FpmPayload::heartbeat("w", 0, 1).to_msgpack();
        assert_eq!(
            nixl_telemetry_fpm_trace_record_msgpack(t, bytes.as_ptr(), bytes.len()),
            NIXL_TELEMETRY_SUCCESS
        );
        assert_eq!(
            nixl_telemetry_fpm_trace_record(t, &payload(c"w", 0, 2)),
            NIXL_TELEMETRY_SUCCESS
        );
        // Invalid values are accepted by the call, then rejected and counted.
        assert_eq!(
            nixl_telemetry_fpm_trace_record(t, &payload(c"w", -1, 3)),
            NIXL_TELEMETRY_SUCCESS
        );
        assert_eq!(
            nixl_telemetry_fpm_trace_record_msgpack(t, b"junk".as_ptr(), 4),
            NIXL_TELEMETRY_SUCCESS
        );
        let mut p = payload(c"w", 0, 4);
        p.worker_id = std::ptr::null();
        assert_eq!(
            nixl_telemetry_fpm_trace_record(t, &p),
            NIXL_TELEMETRY_ERR_INVALID_PARAM
        );
        assert!(last_error().contains("worker_id"));
        assert_eq!(
            nixl_telemetry_fpm_trace_record_msgpack(t, std::ptr::null(), 0),
            NIXL_TELEMETRY_ERR_INVALID_PARAM
        );
        assert_eq!(nixl_telemetry_fpm_trace_flush(t), NIXL_TELEMETRY_SUCCESS);
        let mut stats = FpmStats::default();
        assert_eq!(
            nixl_telemetry_fpm_trace_get_stats(t, &mut stats),
            NIXL_TELEMETRY_SUCCESS
        );
        assert_eq!(stats.recorded, 5);
        assert_eq!((stats.written, stats.rejected), (3, 2));
        assert_eq!(
            nixl_telemetry_fpm_trace_record(t, &payload(c"w", 1, 5)),
            NIXL_TELEMETRY_SUCCESS
        );
        nixl_telemetry_fpm_trace_close(t);
    }
    let files = segments_of(&dir.path().join("dynamo-fpm.41_92")).unwrap();
    assert_eq!(files.len(), 1);
    let (rows, outcome) = SegmentReader::read_rows(&files[0]).unwrap();
    assert_eq!(outcome.members, 2, "one member per flush");
    let events: Vec<Value> = rows
        .iter()
        .map(|r| serde_json::from_slice::<Value>(r).unwrap()["event"].clone())
        .collect();
    let counters: Vec<u64> = events
        .iter()
        .map(|e| e["fpm"]["counter_id"].as_u64().unwrap())
        .collect();
    assert_eq!(counters, [9, 1, 2, 5]);
    assert_eq!(
        events[1]["source"]["producer_id"], "41:92",
        "unsanitized in the record"
    );
    assert_eq!(events[0]["source"]["component"], "backend");
    assert_eq!(events[2]["fpm"]["wall_time"], 0.5);
}
