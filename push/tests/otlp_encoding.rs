//! The OTLP encoder against the official messages: `otlp::encode`, written by hand, gives the
//! bytes prost writes for the request built from the messages generated from the official
//! opentelemetry-proto definitions (the oracle, `otlp_oracle`), and prost decodes them into
//! that request; what it says of native histograms is read back through the official messages.

#[path = "otlp_oracle/mod.rs"]
mod otlp_oracle;

use nixl_telemetry_base::{Event, EventType};
use nixl_telemetry_push::otlp::{self, encode, OwnPoints, Row, Temporality};
use nixl_telemetry_push::PushStatsSnapshot;
use nixl_telemetry_series::{AgentSeries, AgentSnapshot, Buckets};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{metric, ExponentialHistogramDataPoint, Metric};
use prost::Message;

/// The metrics `encode` writes for one row of `snapshot` (agent `a`; no own counters, no
/// resource, cumulative), as prost decodes them with the official messages.
fn decoded(snapshot: &AgentSnapshot) -> Vec<Metric> {
    let rows = [Row {
        snapshot,
        attributes: &[("agent_name", "a")],
        start_ns: 1,
    }];
    let mut out = Vec::new();
    encode(&rows, None, &[], Temporality::Cumulative, 2, &mut out);
    let mut request =
        ExportMetricsServiceRequest::decode(&out[..]).expect("the official messages decode it");
    std::mem::take(&mut request.resource_metrics[0].scope_metrics[0].metrics)
}

#[test]
fn the_encoder_writes_the_bytes_of_the_request_message() {
    let plain = AgentSeries::new("a", "h", Buckets::default());
    let native =
        AgentSeries::new("n", "h", Buckets::default()).with_native_histograms(true, 3, 160);
    let labelled = AgentSeries::new("w", "h", Buckets::default()).with_labels(
        nixl_telemetry_series::WorkloadLabels::from_pairs(vec![(
            "slurm_job_id".into(),
            "7".repeat(200),
        )])
        .unwrap(),
    );
    let check = |rows: &[Row], own: Option<OwnPoints>, t: Temporality, now: u64| {
        let resource = otlp::resource(&[("service.name".into(), "nixl".into())], "h");
        let mut out = vec![1, 2, 3];
        encode(rows, own, &resource, t, now, &mut out);
        let expected = otlp_oracle::request(rows, own, &resource, t, now);
        assert_eq!(out[3..], expected.encode_to_vec()[..]);
        assert_eq!(
            ExportMetricsServiceRequest::decode(&out[3..]).unwrap(),
            expected
        );
    };
    let pushes = PushStatsSnapshot {
        attempts: 300,
        successes: 0,
        failures: 1,
        bytes: 1 << 40,
        exits: 1,
    };
    let own = OwnPoints {
        attributes: &[("pusher", "test"), ("empty", "")],
        pushes: &pushes,
        start_ns: 5,
    };
    for n in 0..3u64 {
        let (p, nat, l) = (plain.snapshot(), native.snapshot(), labelled.snapshot());
        let row = |snapshot, attributes, start_ns| Row {
            snapshot,
            attributes,
            start_ns,
        };
        let a: &[(&str, &str)] = &[("agent_name", "a"), ("local_rank", "3")];
        for t in [Temporality::Cumulative, Temporality::Delta] {
            check(&[], None, t, 0);
            check(&[], Some(own), t, 9);
            check(&[row(&p, a, 0)], None, t, 1_700_000_000_000_000_000);
            check(&[row(&p, a, 7), row(&l, &[], 8)], Some(own), t, 10);
            check(&[row(&nat, a, 7)], Some(own), t, 11);
            check(
                &[row(&p, a, 7), row(&nat, &[("agent_name", "n")], 7)],
                Some(own),
                t,
                12,
            );
        }
        for s in [&plain, &native, &labelled] {
            s.apply(&[
                Event::new(EventType::AgentXferTime, 1 + 1000 * n),
                Event::new(EventType::AgentTxBytes, 4096 << n),
                Event::new(EventType::AgentErrBackend, 1),
                Event::new(EventType::AgentRxBytes, 0),
            ]);
        }
    }
}

#[test]
fn native_histograms_become_exponential_histograms() {
    let s = AgentSeries::new("a", "h", Buckets::default()).with_native_histograms(true, 3, 160);
    s.apply(&[
        Event::new(EventType::AgentXferTime, 100),
        Event::new(EventType::AgentXferTime, 200),
        Event::new(EventType::AgentTxBytes, 4096),
        Event::new(EventType::AgentRxBytes, 0),
    ]);
    let metrics = decoded(&s.snapshot());
    let exponential = |name: &str| -> ExponentialHistogramDataPoint {
        let m = metrics.iter().find(|m| m.name == name).unwrap();
        match &m.data {
            Some(metric::Data::ExponentialHistogram(e)) => e.data_points[0].clone(),
            other => panic!("{name}: {other:?}"),
        }
    };
    let time = exponential("agent_xfer_time_us");
    assert_eq!((time.count, time.sum, time.scale), (2, Some(300.0), 3));
    // Prometheus buckets 54 and 62: OpenTelemetry's 53 and 61, dense between.
    let positive = time.positive.unwrap();
    assert_eq!(positive.offset, 53);
    assert_eq!(positive.bucket_counts.len(), 9);
    assert_eq!(
        (positive.bucket_counts[0], positive.bucket_counts[8]),
        (1, 1)
    );
    assert_eq!(positive.bucket_counts.iter().sum::<u64>(), 2);
    assert_eq!(
        exponential("agent_tx_request_size_bytes")
            .positive
            .unwrap()
            .offset,
        95
    );
    let rx = exponential("agent_rx_request_size_bytes");
    assert_eq!((rx.count, rx.zero_count), (1, 1));
    // The post-time histogram has no values yet but is still exponential.
    assert_eq!(exponential("agent_xfer_post_time_us").count, 0);
    // Without native histograms: explicit buckets, no size metrics.
    let metrics = decoded(&AgentSeries::new("a", "h", Buckets::default()).snapshot());
    assert!(metrics.iter().all(|m| !m.name.contains("request_size")));
    assert!(metrics
        .iter()
        .all(|m| !matches!(m.data, Some(metric::Data::ExponentialHistogram(_)))));
}
