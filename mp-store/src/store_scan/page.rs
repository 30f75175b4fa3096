//! The page made from the served stores: the `prometheus` exporter's families, names, HELP
//! texts, types and buckets (the shared encoder, [`text::encode_rows_into`]), one series per
//! store labelled `hostname`, `agent_name`, `pid`, `agent_instance` and, when set, `local_rank`
//! (NIXL's labels, in NIXL's order), then the store's workload labels if it has any, never
//! summed across processes; with [`Aggregate::Sum`], also the node totals (see `totals`). No
//! live store: an empty page. A scraper whose `Accept` prefers Prometheus's protobuf exposition
//! gets the same families and series in it ([`StoreScan::scrape_as`]), with the native
//! histograms of the stores that keep them.

use std::sync::atomic::Ordering;

use nixl_telemetry_series::text::{self, Row};
use nixl_telemetry_series::FamilyKind;

use super::totals::totals;
use super::StoreScan;
use crate::config::Aggregate;
use crate::reader::StoreView;

impl StoreScan {
    /// The scrape page: every live store's series (and node totals when configured).
    pub fn scrape(&self) -> String {
        let stores = self.live_stores();
        let (text, mixed) = encode(&stores, self.config.aggregate);
        self.warn_mixed(mixed);
        text
    }

    /// The scrape response (content type and body): with `protobuf`, the protobuf exposition
    /// ([`encode_protobuf`]) when a live store keeps native histograms; otherwise (the default)
    /// the text page of [`StoreScan::scrape`].
    pub fn scrape_as(&self, protobuf: bool) -> (&'static str, Vec<u8>) {
        let stores = self.live_stores();
        if protobuf && stores.iter().any(|s| s.snapshot.native.is_some()) {
            let (body, mixed) = encode_protobuf(&stores, self.config.aggregate);
            self.warn_mixed(mixed);
            return (nixl_telemetry_series::protobuf::CONTENT_TYPE, body);
        }
        let (text, mixed) = encode(&stores, self.config.aggregate);
        self.warn_mixed(mixed);
        (text::CONTENT_TYPE, text.into_bytes())
    }

    /// Warns once that some totals have no histograms (`mixed`: their ranks' bounds differ).
    fn warn_mixed(&self, mixed: bool) {
        if mixed && !self.warned_bounds.swap(true, Ordering::Relaxed) {
            log::warn!(
                "prometheus_mp: ranks of telemetry dir {} with the same agent name use different \
                 NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US; their node totals have no histograms",
                self.config.dir.display()
            );
        }
    }
}

/// Encodes `stores` (and their node totals with [`Aggregate::Sum`]); the flag says whether
/// some totals lost their histograms to differing bucket bounds.
pub fn encode(stores: &[StoreView], aggregate: Aggregate) -> (String, bool) {
    with_rows(stores, aggregate, |rows| {
        let mut out = String::with_capacity(rows.len() * 14 * 1024);
        text::encode_rows_into(rows, &mut out);
        out
    })
}

/// [`encode`] in the protobuf exposition: the same families, series and labels, with the native
/// histograms of the stores that keep them (and of the node totals whose ranks all do, merged
/// at the lowest schema).
pub fn encode_protobuf(stores: &[StoreView], aggregate: Aggregate) -> (Vec<u8>, bool) {
    with_rows(
        stores,
        aggregate,
        nixl_telemetry_series::protobuf::encode_rows,
    )
}

/// The rows of `stores` (and their node totals with [`Aggregate::Sum`]) given to `encode`; the
/// flag says whether some totals lost their histograms to differing bucket bounds.
fn with_rows<R>(
    stores: &[StoreView],
    aggregate: Aggregate,
    encode: impl FnOnce(&[Row]) -> R,
) -> (R, bool) {
    let ids: Vec<(String, String)> = stores
        .iter()
        .map(|s| (s.pid.to_string(), s.instance.to_string()))
        .collect();
    let labels: Vec<Vec<(&str, &str)>> = stores
        .iter()
        .zip(&ids)
        .map(|(s, (pid, instance))| {
            let mut l = vec![
                ("hostname", &*s.snapshot.hostname),
                ("agent_name", &*s.snapshot.agent_name),
                ("pid", pid.as_str()),
                ("agent_instance", instance.as_str()),
            ];
            if !s.local_rank.is_empty() {
                l.push(("local_rank", s.local_rank.as_str()));
            }
            l.extend(s.snapshot.labels.iter());
            l
        })
        .collect();
    let mut rows: Vec<Row> = stores
        .iter()
        .zip(&labels)
        .map(|(s, labels)| Row {
            snapshot: &s.snapshot,
            labels,
            kinds: &text::ALL_KINDS,
        })
        .collect();
    let totals = match aggregate {
        Aggregate::None => Vec::new(),
        Aggregate::Sum => totals(stores),
    };
    let total_labels: Vec<Vec<(&str, &str)>> = totals
        .iter()
        .map(|t| {
            std::iter::once(("hostname", &*t.snapshot.hostname))
                .chain(t.snapshot.labels.iter())
                .collect()
        })
        .collect();
    const SUMMED: [FamilyKind; 2] = [FamilyKind::Counter, FamilyKind::Histogram];
    const COUNTERS: [FamilyKind; 1] = [FamilyKind::Counter];
    rows.extend(totals.iter().zip(&total_labels).map(|(t, labels)| Row {
        snapshot: &t.snapshot,
        labels,
        kinds: if t.histograms { &SUMMED } else { &COUNTERS },
    }));
    (encode(&rows), totals.iter().any(|t| !t.histograms))
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{config, value, writer};
    use super::*;
    use crate::store::{Identity, StoreWriter};
    use nixl_telemetry_base::{Event, EventType};
    use nixl_telemetry_series::{text::parse, Buckets, WorkloadLabels};
    use std::path::Path;
    use std::time::Duration;

    #[test]
    fn every_store_is_its_own_series_with_nixls_labels() {
        let dir = tempfile::tempdir().unwrap();
        let b = Buckets::default();
        let a = writer(dir.path(), "same", 10, "0", &b);
        let c = writer(dir.path(), "same", 11, "", &b);
        a.apply(&[Event::new(EventType::AgentTxBytes, 999)]);
        c.apply(&[Event::new(EventType::AgentTxBytes, 1)]);
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        let page = scan.scrape();
        let rank0 = [
            ("hostname", "node"),
            ("agent_name", "same"),
            ("pid", "10"),
            ("agent_instance", "0"),
            ("local_rank", "0"),
        ];
        assert_eq!(value(&page, "agent_tx_bytes_total", &rank0), Some(999.0));
        assert!(page.contains(
            "agent_tx_bytes_total{hostname=\"node\",agent_name=\"same\",pid=\"10\",\
             agent_instance=\"0\",local_rank=\"0\"} 999"
        ));
        // No local_rank label when it is empty; never summed across processes by default.
        let other = &rank0[..4];
        let mut other = other.to_vec();
        other[2] = ("pid", "11");
        assert_eq!(value(&page, "agent_tx_bytes_total", &other), Some(1.0));
        assert_eq!(value(&page, "agent_tx_bytes_total", &rank0[..2]), None);
        assert_eq!(
            parse(&page)
                .unwrap()
                .iter()
                .filter(|s| s.name == "agent_errors_total")
                .count(),
            24
        );
    }

    fn native_writer(dir: &Path, pid: i64, native: bool) -> StoreWriter {
        let id = Identity {
            agent_name: format!("rank{pid}"),
            hostname: "node".into(),
            local_rank: pid.to_string(),
            pid,
            run_marker: 1,
            instance: 0,
            labels: WorkloadLabels::none(),
        };
        StoreWriter::create_with(dir, &id, &Buckets::default(), native).unwrap()
    }

    /// Native histograms in the protobuf scrape: each rank's, and the node total's merged at the
    /// lower schema; the text page is the same as without them; text stays the default.
    #[test]
    fn the_protobuf_scrape_carries_each_ranks_native_histograms_and_their_total() {
        use nixl_telemetry_series::native::bucket_index;
        use nixl_telemetry_series::protobuf;
        let (on_dir, off_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let ranks: Vec<Vec<u64>> = vec![
            (1..=200).map(|k| 10 * k).collect(),
            // Far apart: this rank's histogram drops its schema.
            (0..60).map(|k| 1u64 << (k % 60)).collect(),
        ];
        let mut writers = Vec::new();
        for (dir, native) in [(on_dir.path(), true), (off_dir.path(), false)] {
            for (i, values) in ranks.iter().enumerate() {
                let w = native_writer(dir, i as i64 + 1, native);
                let batch: Vec<Event> = values
                    .iter()
                    .flat_map(|&v| {
                        [
                            Event::new(EventType::AgentXferTime, v),
                            Event::new(EventType::AgentTxBytes, v * 4),
                        ]
                    })
                    .collect();
                w.apply(&batch);
                writers.push(w);
            }
        }
        let scan = |dir: &Path| StoreScan::new(config(dir, Duration::ZERO, Aggregate::Sum));
        let (on, off) = (scan(on_dir.path()), scan(off_dir.path()));
        // Text: the same page, native histograms or not; the default, and the answer to a
        // protobuf scraper where no store keeps native histograms.
        let text_on = on.scrape();
        assert_eq!(text_on, off.scrape());
        assert_eq!(
            on.scrape_as(false),
            (text::CONTENT_TYPE, text_on.into_bytes())
        );
        assert_eq!(off.scrape_as(true).0, text::CONTENT_TYPE);
        let (content_type, body) = on.scrape_as(true);
        assert_eq!(content_type, protobuf::CONTENT_TYPE);
        let families = protobuf::decode(&body).unwrap();
        let family = |n: &str| families.iter().find(|f| f.name == n).unwrap();
        let pid = |m: &protobuf::Metric| {
            m.label
                .iter()
                .find(|l| l.name == "pid")
                .map(|l| l.value.clone())
        };
        let time = family("agent_xfer_time_us");
        assert_eq!(time.metric.len(), 3, "two ranks and their total");
        let as_native = |m: &protobuf::Metric| {
            let h = m.histogram.as_ref().unwrap();
            let mut index = 0;
            let mut count = 0i64;
            let mut buckets = Vec::new();
            let mut deltas = h.positive_delta.iter();
            for s in &h.positive_span {
                index += s.offset;
                for _ in 0..s.length {
                    count += deltas.next().unwrap();
                    buckets.push((index, count as u64));
                    index += 1;
                }
            }
            (h.schema, h.sample_count, buckets)
        };
        let expected = |values: &[u64], schema: i32| {
            let mut b = std::collections::BTreeMap::new();
            for &v in values {
                *b.entry(bucket_index(v as f64, schema as i8))
                    .or_insert(0u64) += 1;
            }
            b.into_iter().collect::<Vec<_>>()
        };
        let mut schemas = Vec::new();
        for (i, values) in ranks.iter().enumerate() {
            let m = time
                .metric
                .iter()
                .find(|m| pid(m) == Some((i + 1).to_string()))
                .unwrap();
            let (schema, count, buckets) = as_native(m);
            assert_eq!(count, values.len() as u64);
            assert_eq!(buckets, expected(values, schema));
            schemas.push(schema);
        }
        assert!(schemas[1] < schemas[0], "{schemas:?}");
        let total = time.metric.iter().find(|m| pid(m).is_none()).unwrap();
        let (schema, count, buckets) = as_native(total);
        assert_eq!(schema, schemas[1], "the lower schema");
        assert_eq!(count, 260);
        let all: Vec<u64> = ranks.concat();
        assert_eq!(buckets, expected(&all, schema));
        assert_eq!(
            total.histogram.as_ref().unwrap().bucket.len(),
            18,
            "classic too"
        );
        // The size families: each rank and the total.
        assert_eq!(family("agent_tx_request_size_bytes").metric.len(), 3);
        // A rank without native histograms: its series stay, the total has none.
        let plain = native_writer(on_dir.path(), 3, false);
        plain.apply(&[Event::new(EventType::AgentXferTime, 5)]);
        let families = protobuf::decode(&on.scrape_as(true).1).unwrap();
        let time = families
            .iter()
            .find(|f| f.name == "agent_xfer_time_us")
            .unwrap();
        let native: Vec<(Option<String>, bool)> = time
            .metric
            .iter()
            .map(|m| (pid(m), m.histogram.as_ref().unwrap().zero_threshold > 0.0))
            .collect();
        assert_eq!(
            native,
            [
                (Some("1".into()), true),
                (Some("2".into()), true),
                (Some("3".into()), false),
                (None, false)
            ]
        );
        drop(writers);
    }
}
