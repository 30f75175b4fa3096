//! The C types of the FPM trace ABI (`include/nixl_telemetry_fpm.h`): the opaque trace handle,
//! the typed payload with its two request structs, and the counters struct. Each is converted at
//! the boundary to or from the core's own value ([`FpmTrace`], [`FpmPayload`] with
//! [`ScheduledRequests`] and [`QueuedRequests`], [`FpmStats`]), which has no C layout.
//!
//! [`FpmPayload`]: crate::fpm::FpmPayload
#![allow(non_camel_case_types)]

use std::ffi::c_char;

use crate::fpm::{FpmStats, FpmTrace, QueuedRequests, ScheduledRequests};

/// The FPM trace of one producer (opaque). Created by `nixl_telemetry_fpm_trace_open`, released
/// by `nixl_telemetry_fpm_trace_close`.
pub struct nixl_telemetry_fpm_trace_t {
    pub(crate) trace: FpmTrace,
}

/// Requests scheduled in this iteration (`ScheduledRequestMetrics`). Integer fields must be >= 0
/// and variances finite and >= 0, or the payload is rejected.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct nixl_telemetry_fpm_scheduled_requests_t {
    /// Prefill requests scheduled.
    pub num_prefill_requests: i64,
    /// Tokens freshly computed for prefill (the chunk size).
    pub sum_prefill_tokens: i64,
    /// Population variance of the full prompt lengths.
    pub var_prefill_length: f64,
    /// KV tokens read for prefill (prefix hits plus earlier chunks).
    pub sum_prefill_kv_tokens: i64,
    /// Decode requests scheduled.
    pub num_decode_requests: i64,
    /// Total decode context.
    pub sum_decode_kv_tokens: i64,
    /// Variance of the decode context lengths.
    pub var_decode_kv_tokens: f64,
}

impl From<nixl_telemetry_fpm_scheduled_requests_t> for ScheduledRequests {
    fn from(r: nixl_telemetry_fpm_scheduled_requests_t) -> ScheduledRequests {
        ScheduledRequests {
            num_prefill_requests: r.num_prefill_requests,
            sum_prefill_tokens: r.sum_prefill_tokens,
            var_prefill_length: r.var_prefill_length,
            sum_prefill_kv_tokens: r.sum_prefill_kv_tokens,
            num_decode_requests: r.num_decode_requests,
            sum_decode_kv_tokens: r.sum_decode_kv_tokens,
            var_decode_kv_tokens: r.var_decode_kv_tokens,
        }
    }
}

/// Requests waiting, not scheduled (`QueuedRequestMetrics`); same rules.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct nixl_telemetry_fpm_queued_requests_t {
    /// Prefill requests waiting.
    pub num_prefill_requests: i64,
    /// Prompt tokens waiting.
    pub sum_prefill_tokens: i64,
    /// Population variance of the waiting prompt lengths.
    pub var_prefill_length: f64,
    /// Preempted decode requests.
    pub num_decode_requests: i64,
    /// Their total context.
    pub sum_decode_kv_tokens: i64,
    /// Variance of their context lengths.
    pub var_decode_kv_tokens: f64,
}

impl From<nixl_telemetry_fpm_queued_requests_t> for QueuedRequests {
    fn from(r: nixl_telemetry_fpm_queued_requests_t) -> QueuedRequests {
        QueuedRequests {
            num_prefill_requests: r.num_prefill_requests,
            sum_prefill_tokens: r.sum_prefill_tokens,
            var_prefill_length: r.var_prefill_length,
            num_decode_requests: r.num_decode_requests,
            sum_decode_kv_tokens: r.sum_decode_kv_tokens,
            var_decode_kv_tokens: r.var_decode_kv_tokens,
        }
    }
}

/// One forward pass's metrics (`ForwardPassMetrics`, version 1).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct nixl_telemetry_fpm_payload_t {
    /// Must be 1.
    pub version: i32,
    /// The engine instance's runtime connection id (NUL-terminated UTF-8; may be empty).
    pub worker_id: *const c_char,
    /// Data-parallel rank (>= 0).
    pub dp_rank: i64,
    /// Per-(worker, rank) sequence number (>= 0).
    pub counter_id: i64,
    /// Iteration duration in seconds (finite, >= 0; 0 for an idle heartbeat).
    pub wall_time: f64,
    /// Requests run in this iteration.
    pub scheduled_requests: nixl_telemetry_fpm_scheduled_requests_t,
    /// Requests waiting.
    pub queued_requests: nixl_telemetry_fpm_queued_requests_t,
}

/// Counters of a producer's writer since it opened. After the last trace of the producer
/// closed, `recorded == dropped + rejected + coalesced + written + rows_lost`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct nixl_telemetry_fpm_trace_stats_t {
    /// Payloads accepted by record calls (including those later dropped).
    pub recorded: u64,
    /// Rows written to disk.
    pub written: u64,
    /// Payloads dropped because the queue (8192) was full; the oldest go first.
    pub dropped: u64,
    /// Payloads rejected as invalid (never written).
    pub rejected: u64,
    /// Failed batch writes (each loses its batch).
    pub write_errors: u64,
    /// Segments rolled.
    pub segments_rolled: u64,
    /// Old segments deleted by retention.
    pub segments_pruned: u64,
    /// Sampled mode: payloads replaced by a newer one before a tick, or suppressed because
    /// their counter was already written.
    pub coalesced: u64,
    /// Rows lost with the batches that failed.
    pub rows_lost: u64,
}

impl From<FpmStats> for nixl_telemetry_fpm_trace_stats_t {
    fn from(s: FpmStats) -> nixl_telemetry_fpm_trace_stats_t {
        nixl_telemetry_fpm_trace_stats_t {
            recorded: s.recorded,
            written: s.written,
            dropped: s.dropped,
            rejected: s.rejected,
            write_errors: s.write_errors,
            segments_rolled: s.segments_rolled,
            segments_pruned: s.segments_pruned,
            coalesced: s.coalesced,
            rows_lost: s.rows_lost,
        }
    }
}
