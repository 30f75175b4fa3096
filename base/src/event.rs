//! The NIXL event model: the 22 event types with their file-format values and names (NIXL's 21
//! and `agent_err_xfer_stalled` of its open pull request #2047), the `nixl_status_t` ->
//! error-event mapping, and the shared metric descriptor from which every series-exposing
//! exporter derives its counters, gauges and histograms.

use std::ffi::CStr;
use std::fmt;

use crate::constants as c;
use crate::env::{read_bool, Lookup};
use crate::error::Result;
use crate::settings::XFER_STALLED_EVENT;

/// `NIXL_TELEMETRY_XFER_STALLED_EVENT` through `env` (unset: false): whether a stalled transfer
/// (`NIXL_ERR_XFER_STALLED`, -13) is recorded as `agent_err_xfer_stalled`
/// ([`EventType::recorded_as`]), and so whether exporters show its `status="xfer_stalled"`
/// series. An error for a value that is not a boolean word.
pub fn xfer_stalled_event(env: Lookup) -> Result<bool> {
    Ok(read_bool(env, XFER_STALLED_EVENT.name)?.unwrap_or(XFER_STALLED_EVENT.default_bool()))
}

/// One telemetry record: an event type and a single per-operation reading.
///
/// This is also the 16-byte record of the shared-memory ring (`u32` type, 4 bytes of padding,
/// `u64` value), and `nixl_telemetry_event_t` in C.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Event {
    /// Numeric event type (0..21); other values are possible in foreign files.
    pub event_type: u32,
    /// The reading: bytes, a count, or microseconds, depending on the type.
    pub value: u64,
}

const _: () = assert!(std::mem::size_of::<Event>() == 16);
const _: () = assert!(std::mem::align_of::<Event>() == 8);

impl Event {
    /// An event of a known type.
    pub const fn new(event_type: EventType, value: u64) -> Event {
        Event {
            event_type: event_type as u32,
            value,
        }
    }

    /// Writes this event at `dst` as a whole 16-byte record whose 4 padding bytes are zero (a
    /// plain copy of an `Event` copies whatever its padding holds, which would put stack bytes
    /// into ring files): two 8-byte stores.
    ///
    /// # Safety
    /// `dst` is valid for writes of 16 bytes and 8-byte aligned.
    #[inline(always)]
    pub unsafe fn write_record(self, dst: *mut Event) {
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&self.event_type.to_ne_bytes());
        let words = dst.cast::<u64>();
        // SAFETY: the caller's contract: 16 writable, 8-byte aligned bytes at `dst`.
        unsafe {
            words.write(u64::from_ne_bytes(head));
            words.add(1).write(self.value);
        }
    }

    /// The type, if it is one of the 22 known ones.
    pub fn kind(&self) -> Option<EventType> {
        EventType::from_u32(self.event_type)
    }

    /// The event's name, `unknown_event_<n>` for a value outside the known set.
    pub fn name(&self) -> String {
        match self.kind() {
            Some(t) => t.name().to_owned(),
            None => format!("unknown_event_{}", self.event_type),
        }
    }
}

macro_rules! event_types {
    ($( $variant:ident = $value:ident, $name:literal; )*) => {
        /// The 22 telemetry event types; the numeric values are part of the ring format.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum EventType {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant = c::$value,
            )*
        }

        impl EventType {
            /// Every event type, in numeric order.
            pub const ALL: [EventType; EVENT_TYPE_COUNT] = [$(EventType::$variant),*];

            /// The base event name (`agent_tx_bytes`, ...), as readers print it.
            pub const fn name(self) -> &'static str {
                match self {
                    $(EventType::$variant => $name,)*
                }
            }

            /// The base name as a static C string (what `nixl_telemetry_event_name` returns).
            pub const fn c_name(self) -> &'static CStr {
                match self {
                    $(EventType::$variant => {
                        match CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()) {
                            Ok(name) => name,
                            Err(_) => panic!("event names contain no NUL"),
                        }
                    })*
                }
            }
        }
    };
}

event_types! {
    AgentTxBytes = NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, "agent_tx_bytes";
    AgentRxBytes = NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, "agent_rx_bytes";
    AgentTxRequestsNum = NIXL_TELEMETRY_EVENT_AGENT_TX_REQUESTS_NUM, "agent_tx_requests_num";
    AgentRxRequestsNum = NIXL_TELEMETRY_EVENT_AGENT_RX_REQUESTS_NUM, "agent_rx_requests_num";
    AgentMemoryRegistered = NIXL_TELEMETRY_EVENT_AGENT_MEMORY_REGISTERED, "agent_memory_registered";
    AgentMemoryDeregistered = NIXL_TELEMETRY_EVENT_AGENT_MEMORY_DEREGISTERED, "agent_memory_deregistered";
    AgentXferTime = NIXL_TELEMETRY_EVENT_AGENT_XFER_TIME, "agent_xfer_time";
    AgentXferPostTime = NIXL_TELEMETRY_EVENT_AGENT_XFER_POST_TIME, "agent_xfer_post_time";
    AgentErrNotPosted = NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_POSTED, "agent_err_not_posted";
    AgentErrInvalidParam = NIXL_TELEMETRY_EVENT_AGENT_ERR_INVALID_PARAM, "agent_err_invalid_param";
    AgentErrBackend = NIXL_TELEMETRY_EVENT_AGENT_ERR_BACKEND, "agent_err_backend";
    AgentErrNotFound = NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_FOUND, "agent_err_not_found";
    AgentErrMismatch = NIXL_TELEMETRY_EVENT_AGENT_ERR_MISMATCH, "agent_err_mismatch";
    AgentErrNotAllowed = NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_ALLOWED, "agent_err_not_allowed";
    AgentErrRepostActive = NIXL_TELEMETRY_EVENT_AGENT_ERR_REPOST_ACTIVE, "agent_err_repost_active";
    AgentErrUnknown = NIXL_TELEMETRY_EVENT_AGENT_ERR_UNKNOWN, "agent_err_unknown";
    AgentErrNotSupported = NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_SUPPORTED, "agent_err_not_supported";
    AgentErrRemoteDisconnect = NIXL_TELEMETRY_EVENT_AGENT_ERR_REMOTE_DISCONNECT, "agent_err_remote_disconnect";
    AgentErrCanceled = NIXL_TELEMETRY_EVENT_AGENT_ERR_CANCELED, "agent_err_canceled";
    AgentErrNoTelemetry = NIXL_TELEMETRY_EVENT_AGENT_ERR_NO_TELEMETRY, "agent_err_no_telemetry";
    AgentTelemetryEventsDropped = NIXL_TELEMETRY_EVENT_AGENT_TELEMETRY_EVENTS_DROPPED, "agent_telemetry_events_dropped";
    AgentErrXferStalled = NIXL_TELEMETRY_EVENT_AGENT_ERR_XFER_STALLED, "agent_err_xfer_stalled";
}

/// Number of event types (the last one, `agent_err_xfer_stalled`, is 21).
pub const EVENT_TYPE_COUNT: usize = c::NIXL_TELEMETRY_EVENT_TYPE_COUNT as usize;

/// First and last of the contiguous error events (`agent_err_not_posted` ..
/// `agent_err_no_telemetry`); `agent_err_xfer_stalled` follows the dropped-events report.
const FIRST_ERROR_EVENT: u32 = c::NIXL_TELEMETRY_EVENT_AGENT_ERR_NOT_POSTED;
const LAST_ERROR_EVENT: u32 = c::NIXL_TELEMETRY_EVENT_AGENT_ERR_NO_TELEMETRY;

/// The events of one transfer, in the order `add_xfer_stats` stages them, for a write and for
/// a read: post time, transfer time, bytes, one request. With deactivated metrics a transfer
/// is the subsequence of the active ones, in the same order.
pub const TRANSFER_ORDER: [[EventType; 4]; 2] = [
    [
        EventType::AgentXferPostTime,
        EventType::AgentXferTime,
        EventType::AgentTxBytes,
        EventType::AgentTxRequestsNum,
    ],
    [
        EventType::AgentXferPostTime,
        EventType::AgentXferTime,
        EventType::AgentRxBytes,
        EventType::AgentRxRequestsNum,
    ],
];

impl Event {
    /// Whether `next`, staged right after `self`, may belong to the same transfer: both are
    /// transfer events of one direction with `next` later in [`TRANSFER_ORDER`]. Events of one
    /// transfer always satisfy this pairwise, so a cut between two events that do not never
    /// splits a transfer; two single updates can satisfy it too, which only makes a cut that
    /// avoids splitting transfers a little earlier than needed.
    pub fn may_continue_with(&self, next: &Event) -> bool {
        TRANSFER_ORDER.iter().any(|order| {
            let at = |e: &Event| order.iter().position(|t| *t as u32 == e.event_type);
            matches!((at(self), at(next)), (Some(a), Some(b)) if b > a)
        })
    }
}

impl EventType {
    /// The event type with this numeric value.
    pub fn from_u32(value: u32) -> Option<EventType> {
        EventType::ALL.get(value as usize).copied()
    }

    /// The event type with this base name.
    pub fn from_name(name: &str) -> Option<EventType> {
        EventType::ALL.iter().copied().find(|t| t.name() == name)
    }

    /// The static C name of the event type with this numeric value (`None` for an unknown one):
    /// what the core ABI and the plug-in host hand out.
    pub fn c_name_of(value: u32) -> Option<&'static CStr> {
        EventType::from_u32(value).map(EventType::c_name)
    }

    /// The error event for a negative `nixl_status_t` (-1 -> `agent_err_not_posted` ...
    /// -12 -> `agent_err_no_telemetry`, and -13, `NIXL_ERR_XFER_STALLED`, ->
    /// `agent_err_xfer_stalled`, as NIXL's pull request #2047 maps it); `None` for success,
    /// in-progress or unknown codes. What is recorded for -13 is [`EventType::recorded_as`].
    pub fn from_nixl_status(status: i32) -> Option<EventType> {
        match status {
            -12..=-1 => EventType::from_u32((7 - status) as u32),
            c::NIXL_TELEMETRY_ERR_XFER_STALLED => Some(EventType::AgentErrXferStalled),
            _ => None,
        }
    }

    /// The type recorded for this one: itself, but `agent_err_xfer_stalled` is recorded as
    /// `agent_err_unknown` unless `xfer_stalled_event` (`NIXL_TELEMETRY_XFER_STALLED_EVENT`)
    /// is true, as NIXL's merged sources, which have no event 21, would count the error.
    pub const fn recorded_as(self, xfer_stalled_event: bool) -> EventType {
        match self {
            EventType::AgentErrXferStalled if !xfer_stalled_event => EventType::AgentErrUnknown,
            t => t,
        }
    }

    /// True for the thirteen `agent_err_*` events.
    pub const fn is_error(self) -> bool {
        let v = self as u32;
        (v >= FIRST_ERROR_EVENT && v <= LAST_ERROR_EVENT)
            || v == c::NIXL_TELEMETRY_EVENT_AGENT_ERR_XFER_STALLED
    }

    /// The `status` label of an error event (`not_posted`, ...), `None` for other events.
    pub fn status_label(self) -> Option<&'static str> {
        if self.is_error() {
            self.name().strip_prefix("agent_err_")
        } else {
            None
        }
    }

    /// The series this event feeds on every exporter that exposes series.
    pub fn metrics(self) -> &'static MetricDescriptor {
        &METRIC_DESCRIPTORS[self as usize]
    }

    /// This type's bit in an event mask (see the core's `filter::MetricMask`).
    pub const fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One derived series: its family name and HELP text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Series {
    /// Family name as exposed (`agent_tx_bytes_total`, ...).
    pub name: &'static str,
    /// HELP text.
    pub help: &'static str,
}

/// The series one event type feeds: a cumulative counter (errors share one labelled family),
/// optionally a last-operation gauge and a latency histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricDescriptor {
    /// Cumulative counter (`..._total`): the sum of every value.
    pub counter: Series,
    /// Last-operation gauge: the most recent value.
    pub gauge: Option<Series>,
    /// Distribution of values in microseconds (transfer times only).
    pub histogram: Option<Series>,
}

const fn series(name: &'static str, help: &'static str) -> Series {
    Series { name, help }
}

/// The error family shared by the thirteen `agent_err_*` events, labelled by `status`.
pub const ERRORS_SERIES: Series = series("agent_errors_total", "Cumulative error count by status");

const ERROR_DESCRIPTOR: MetricDescriptor = MetricDescriptor {
    counter: ERRORS_SERIES,
    gauge: None,
    histogram: None,
};

/// The shared metric descriptor, indexed by event type: the single source of series names,
/// types and HELP texts for the Prometheus and DOCA exporters.
pub static METRIC_DESCRIPTORS: [MetricDescriptor; EVENT_TYPE_COUNT] = [
    MetricDescriptor {
        counter: series("agent_tx_bytes_total", "Number of bytes sent by the agent"),
        gauge: Some(series(
            "agent_tx_last_bytes",
            "Bytes sent by the last request",
        )),
        histogram: None,
    },
    MetricDescriptor {
        counter: series(
            "agent_rx_bytes_total",
            "Number of bytes received by the agent",
        ),
        gauge: Some(series(
            "agent_rx_last_bytes",
            "Bytes received by the last request",
        )),
        histogram: None,
    },
    MetricDescriptor {
        counter: series(
            "agent_tx_requests_num_total",
            "Number of requests sent by the agent",
        ),
        gauge: None,
        histogram: None,
    },
    MetricDescriptor {
        counter: series(
            "agent_rx_requests_num_total",
            "Number of requests received by the agent",
        ),
        gauge: None,
        histogram: None,
    },
    MetricDescriptor {
        counter: series(
            "agent_memory_registered_total",
            "Cumulative memory registered",
        ),
        gauge: Some(series(
            "agent_memory_registered_last_bytes",
            "Memory registered by the last operation",
        )),
        histogram: None,
    },
    MetricDescriptor {
        counter: series(
            "agent_memory_deregistered_total",
            "Cumulative memory deregistered",
        ),
        gauge: Some(series(
            "agent_memory_deregistered_last_bytes",
            "Memory deregistered by the last operation",
        )),
        histogram: None,
    },
    MetricDescriptor {
        counter: series(
            "agent_xfer_time_total",
            "Cumulative sum of transfer time from start to completion",
        ),
        gauge: Some(series(
            "agent_xfer_time",
            "Transfer time of the last request",
        )),
        histogram: Some(series(
            "agent_xfer_time_us",
            "Distribution of transfer time from start to completion, in microseconds",
        )),
    },
    MetricDescriptor {
        counter: series(
            "agent_xfer_post_time_total",
            "Cumulative sum of time from start to posting to the back-end",
        ),
        gauge: Some(series(
            "agent_xfer_post_time",
            "Post time of the last request",
        )),
        histogram: Some(series(
            "agent_xfer_post_time_us",
            "Distribution of time from start to posting to the back-end, in microseconds",
        )),
    },
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    ERROR_DESCRIPTOR,
    MetricDescriptor {
        counter: series(
            "agent_telemetry_events_dropped_total",
            "Cumulative telemetry events dropped at the producer-side staging queue",
        ),
        gauge: None,
        histogram: None,
    },
    ERROR_DESCRIPTOR,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_names_match_nixl() {
        assert_eq!(EventType::ALL.len(), 22);
        for (i, t) in EventType::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i);
            assert_eq!(EventType::from_u32(i as u32), Some(*t));
            assert_eq!(EventType::from_name(t.name()), Some(*t));
        }
        assert_eq!(EventType::AgentTxBytes.name(), "agent_tx_bytes");
        assert_eq!(EventType::AgentXferPostTime as u32, 7);
        assert_eq!(EventType::AgentErrNoTelemetry as u32, 19);
        assert_eq!(
            EventType::AgentTelemetryEventsDropped.name(),
            "agent_telemetry_events_dropped"
        );
        assert_eq!(EventType::AgentErrXferStalled as u32, 21);
        assert_eq!(
            EventType::AgentErrXferStalled.name(),
            "agent_err_xfer_stalled"
        );
        assert_eq!(EventType::from_u32(22), None);
        assert_eq!(
            Event {
                event_type: 77,
                value: 1
            }
            .name(),
            "unknown_event_77"
        );
    }

    #[test]
    fn status_mapping_covers_minus_one_to_minus_thirteen() {
        let labels: Vec<&str> = (1..=12)
            .map(|s| {
                let t = EventType::from_nixl_status(-s).unwrap();
                assert_eq!(t as u32, (7 + s) as u32);
                t.status_label().unwrap()
            })
            .collect();
        assert_eq!(
            labels,
            [
                "not_posted",
                "invalid_param",
                "backend",
                "not_found",
                "mismatch",
                "not_allowed",
                "repost_active",
                "unknown",
                "not_supported",
                "remote_disconnect",
                "canceled",
                "no_telemetry"
            ]
        );
        let stalled = EventType::from_nixl_status(-13).unwrap();
        assert_eq!(stalled, EventType::AgentErrXferStalled);
        assert_eq!(stalled.status_label(), Some("xfer_stalled"));
        assert!(stalled.is_error());
        assert!(!EventType::AgentTelemetryEventsDropped.is_error());
        for bad in [0, 1, -14, i32::MIN, i32::MAX] {
            assert_eq!(EventType::from_nixl_status(bad), None);
        }
        assert_eq!(EventType::AgentTxBytes.status_label(), None);
    }

    #[test]
    fn a_stalled_transfer_is_recorded_as_unknown_unless_asked() {
        let stalled = EventType::AgentErrXferStalled;
        assert_eq!(stalled.recorded_as(false), EventType::AgentErrUnknown);
        assert_eq!(stalled.recorded_as(true), stalled);
        for t in EventType::ALL.into_iter().filter(|t| *t != stalled) {
            assert_eq!((t.recorded_as(false), t.recorded_as(true)), (t, t));
        }
    }

    #[test]
    fn descriptor_follows_the_naming_contract() {
        let mut counters = std::collections::BTreeSet::new();
        let mut gauges = Vec::new();
        let mut histograms = Vec::new();
        for t in EventType::ALL {
            let d = t.metrics();
            assert!(d.counter.name.ends_with("_total"), "{}", d.counter.name);
            counters.insert(d.counter.name);
            if let Some(g) = d.gauge {
                assert!(!g.name.ends_with("_total"));
                gauges.push(g.name);
            }
            if let Some(h) = d.histogram {
                assert!(
                    matches!(t, EventType::AgentXferTime | EventType::AgentXferPostTime),
                    "{t}: only transfer times (microseconds) have histograms"
                );
                histograms.push(h.name);
            }
            assert_eq!(t.is_error(), d.counter == ERRORS_SERIES);
        }
        // 9 per-event counters plus the shared error family.
        assert_eq!(counters.len(), 10);
        assert_eq!(
            gauges,
            [
                "agent_tx_last_bytes",
                "agent_rx_last_bytes",
                "agent_memory_registered_last_bytes",
                "agent_memory_deregistered_last_bytes",
                "agent_xfer_time",
                "agent_xfer_post_time"
            ]
        );
        assert_eq!(
            histograms,
            ["agent_xfer_time_us", "agent_xfer_post_time_us"]
        );
    }
}
