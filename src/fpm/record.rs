//! The FPM trace record `dynamo.fpm.trace.v1`: what goes in the `event` of a segment row
//! ([`crate::segments::row`]), and the [`Source`] that produced it.

use serde::Serialize;

use crate::fpm::config::CaptureMode;
use crate::fpm::payload::ValidPayload;

/// The schema name of FPM trace records.
pub const FPM_SCHEMA: &str = "dynamo.fpm.trace.v1";

/// Who produced a record. `producer_id` is written unsanitized; only file names sanitize it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Source {
    /// The component's namespace (for example `default`).
    pub namespace: String,
    /// The component name (for example `backend`).
    pub component: String,
    /// The runtime connection id of the producer process (for example `4192`).
    pub producer_id: String,
}

impl Source {
    /// A source from its three parts.
    pub fn new(namespace: &str, component: &str, producer_id: &str) -> Source {
        Source {
            namespace: namespace.to_owned(),
            component: component.to_owned(),
            producer_id: producer_id.to_owned(),
        }
    }
}

/// One FPM trace record (the `event` of a row), serialized in this field order.
#[derive(Debug, Serialize)]
pub struct FpmRecord<'a> {
    /// Always [`FPM_SCHEMA`].
    pub schema: &'static str,
    /// The producer.
    pub source: &'a Source,
    /// `sampled` or `full`.
    pub capture_mode: &'static str,
    /// Wall-clock milliseconds since the Unix epoch when the payload was recorded.
    pub observed_at_unix_ms: u64,
    /// The complete payload.
    pub fpm: &'a ValidPayload,
}

impl<'a> FpmRecord<'a> {
    /// A record of `fpm` observed at `observed_at_unix_ms`.
    pub fn new(
        source: &'a Source,
        mode: CaptureMode,
        observed_at_unix_ms: u64,
        fpm: &'a ValidPayload,
    ) -> FpmRecord<'a> {
        FpmRecord {
            schema: FPM_SCHEMA,
            source,
            capture_mode: mode.as_str(),
            observed_at_unix_ms,
            fpm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fpm::payload::FpmPayload;
    use crate::segments::row::encode_row;

    #[test]
    fn rows_are_compact_and_ordered() {
        let source = Source::new("default", "backend", "4192");
        let fpm = FpmPayload::heartbeat("4192", 0, 7).validate().unwrap();
        let mut out = b"x".to_vec();
        let n = encode_row(
            &mut out,
            1250,
            &FpmRecord::new(&source, CaptureMode::Sampled, 1_782_777_601_250, &fpm),
        )
        .unwrap();
        let row = std::str::from_utf8(&out[1..]).unwrap();
        assert_eq!(n, row.len());
        assert!(row.starts_with(
            r#"{"timestamp":1250,"event":{"schema":"dynamo.fpm.trace.v1","source":{"namespace":"default","component":"backend","producer_id":"4192"},"capture_mode":"sampled","observed_at_unix_ms":1782777601250,"fpm":{"version":1,"worker_id":"4192","dp_rank":0,"counter_id":7,"wall_time":0.0,"#
        ), "{row}");
        assert!(row.ends_with("}}}\n"));
        assert_eq!(row.matches('\n').count(), 1);
    }
}
