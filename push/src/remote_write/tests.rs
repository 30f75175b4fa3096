//! The unit tests of the remote-write encoding (`remote_write/mod.rs`).

use super::*;
use nixl_telemetry_base::{Event, EventType};
use nixl_telemetry_series::{AgentSeries, Buckets, WorkloadLabels};

#[test]
fn the_encoder_gives_the_bytes_of_a_fresh_build_at_every_push() {
    let series = |name: &str| AgentSeries::new(name, "h", Buckets::default());
    let (a, b) = (series("a"), series("b"));
    let native = series("n").with_native_histograms(true, 3, 160);
    let labelled = series("w").with_labels(
        WorkloadLabels::from_pairs(vec![("slurm_job_id".into(), "7".into())]).unwrap(),
    );
    let counters = |attempts| PushStatsSnapshot {
        attempts,
        successes: attempts / 2,
        failures: 0,
        bytes: 10 * attempts,
        exits: 0,
    };
    let mut encoder = Encoder::new();
    let mut check =
        |rows: &[(&AgentSnapshot, &[(&str, &str)])], own: Option<OwnSeries>, ts: i64| {
            let fresh = body(rows, own, ts);
            let kept = encoder.body(rows, own, ts);
            assert_eq!(kept.bytes, fresh.bytes);
            assert_eq!(
                (kept.content_type, kept.content_encoding, kept.headers),
                (fresh.content_type, fresh.content_encoding, fresh.headers)
            );
            encoder.rebuilds()
        };
    let apply = |s: &AgentSeries, n: u64| {
        s.apply(&[
            Event::new(EventType::AgentXferTime, 10 * n),
            Event::new(EventType::AgentTxBytes, n),
            Event::new(EventType::AgentErrBackend, 1),
        ])
    };
    let pushes = counters(3);
    let own = Some(OwnSeries {
        labels: &[("hostname", "h"), ("pusher", "test")],
        pushes: &pushes,
    });
    // Nothing pushed yet (values of 0 leave their field out), then values change.
    let (sa, sb) = (a.snapshot(), b.snapshot());
    let rows = [
        (&sa, &[("agent_name", "a")][..]),
        (&sb, &[("agent_name", "b")][..]),
    ];
    assert_eq!(check(&rows, own, 1_700_000_000_000), 1);
    for n in 1..4 {
        apply(&a, n);
        apply(&b, 2 * n);
        let (sa, sb) = (a.snapshot(), b.snapshot());
        let pushes = counters(n + 3);
        let own = Some(OwnSeries {
            labels: &[("hostname", "h"), ("pusher", "test")],
            pushes: &pushes,
        });
        let rows = [
            (&sa, &[("agent_name", "a")][..]),
            (&sb, &[("agent_name", "b")][..]),
        ];
        assert_eq!(check(&rows, own, 1_700_000_000_000 + n as i64), 1);
    }
    // A rank restarts: its values go back to 0 under the same labels.
    let restarted = series("a").snapshot();
    let rows = [
        (&restarted, &[("agent_name", "a")][..]),
        (&sb, &[("agent_name", "b")][..]),
    ];
    assert_eq!(check(&rows, own, 1_700_000_000_009), 1);
    // A timestamp of 0 is left out too; the labels are kept.
    let (sa, sb) = (a.snapshot(), b.snapshot());
    let rows = [
        (&sa, &[("agent_name", "a")][..]),
        (&sb, &[("agent_name", "b")][..]),
    ];
    assert_eq!(check(&rows, own, 0), 1);
    // A row's labels change, then the rows' order, then a row comes.
    let rows = [
        (&sa, &[("agent_name", "a")][..]),
        (&sb, &[("agent_name", "b2")][..]),
    ];
    assert_eq!(check(&rows, own, 5), 2);
    assert_eq!(check(&rows, own, 6), 2);
    let rows = [
        (&sb, &[("agent_name", "b2")][..]),
        (&sa, &[("agent_name", "a")][..]),
    ];
    assert_eq!(check(&rows, own, 7), 3);
    apply(&native, 5);
    apply(&labelled, 6);
    let (sn, sw) = (native.snapshot(), labelled.snapshot());
    let rows = [
        (&sa, &[("agent_name", "a")][..]),
        (&sn, &[("agent_name", "n"), ("local_rank", "0")][..]),
        (&sw, &[("agent_name", "w")][..]),
    ];
    assert_eq!(check(&rows, own, 8), 4);
    apply(&native, 7);
    let sn = native.snapshot();
    let rows = [
        (&sa, &[("agent_name", "a")][..]),
        (&sn, &[("agent_name", "n"), ("local_rank", "0")][..]),
        (&sw, &[("agent_name", "w")][..]),
    ];
    assert_eq!(check(&rows, own, 9), 4);
    // The sender's labels change, then go.
    let other = Some(OwnSeries {
        labels: &[("hostname", "h2"), ("pusher", "test")],
        pushes: &pushes,
    });
    assert_eq!(check(&rows, other, 10), 5);
    assert_eq!(check(&rows, None, 11), 6);
    assert_eq!(check(&[], None, 12), 7);
}

#[test]
fn every_series_carries_the_workload_labels_sorted_among_the_others() {
    let labels = WorkloadLabels::from_pairs(vec![("slurm_job_id".into(), "42".into())]).unwrap();
    let s = AgentSeries::new("a", "h", Buckets::default()).with_labels(labels);
    s.apply(&[Event::new(EventType::AgentTxBytes, 10)]);
    let snapshot = s.snapshot();
    let request = write_request(&[(&snapshot, &[("agent_name", "a")])], None, 1);
    assert!(!request.timeseries.is_empty());
    for series in &request.timeseries {
        let names: Vec<&str> = series.labels.iter().map(|l| l.name.as_str()).collect();
        assert!(names.contains(&"slurm_job_id"), "{names:?}");
        assert!(names.windows(2).all(|w| w[0] <= w[1]), "{names:?}");
    }
}

#[test]
fn native_histograms_are_one_histogram_sample_per_family_beside_the_classic_series() {
    let off = AgentSeries::new("a", "h", Buckets::default());
    let on = AgentSeries::new("a", "h", Buckets::default()).with_native_histograms(true, 3, 160);
    for s in [&off, &on] {
        s.apply(&[
            Event::new(EventType::AgentXferTime, 100),
            Event::new(EventType::AgentTxBytes, 4096),
        ]);
    }
    let (off, on) = (off.snapshot(), on.snapshot());
    let plain = write_request(&[(&off, &[("agent_name", "a")])], None, 7);
    assert!(plain.timeseries.iter().all(|t| t.histograms.is_empty()));
    let native = write_request(&[(&on, &[("agent_name", "a")])], None, 7);
    let histograms: Vec<(&str, &proto::Histogram)> = native
        .timeseries
        .iter()
        .filter(|t| !t.histograms.is_empty())
        .map(|t| (t.labels[0].value.as_str(), &t.histograms[0]))
        .collect();
    let names: Vec<&str> = histograms.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "agent_rx_request_size_bytes",
            "agent_tx_request_size_bytes",
            "agent_xfer_post_time_us",
            "agent_xfer_time_us"
        ]
    );
    let time = histograms[3].1;
    assert_eq!(
        (time.count_int, time.sum, time.schema, time.timestamp),
        (1, 100.0, 3, 7)
    );
    assert_eq!(
        time.positive_spans,
        [proto::BucketSpan {
            offset: 54,
            length: 1
        }]
    );
    assert_eq!(time.positive_deltas, [1]);
    assert!(native
        .timeseries
        .iter()
        .all(|t| t.samples.is_empty() != t.histograms.is_empty()));
    // The classic series are all still there, with the same samples.
    let classic: Vec<&proto::TimeSeries> = native
        .timeseries
        .iter()
        .filter(|t| t.histograms.is_empty())
        .collect();
    assert_eq!(classic, plain.timeseries.iter().collect::<Vec<_>>());
}

#[test]
fn the_senders_own_counters_are_pushed_with_its_labels_in_sorted_order() {
    let s = AgentSeries::new("a", "h", Buckets::default());
    let snapshot = s.snapshot();
    let pushes = PushStatsSnapshot {
        attempts: 3,
        successes: 2,
        failures: 1,
        bytes: 700,
        exits: 1,
    };
    let own = OwnSeries {
        labels: &[("hostname", "h"), ("agent_name", "a")],
        pushes: &pushes,
    };
    let request = write_request(&[(&snapshot, &[("agent_name", "a")])], Some(own), 1);
    let value = |name: &str| {
        let found: Vec<&proto::TimeSeries> = request
            .timeseries
            .iter()
            .filter(|t| t.labels[0].value == name)
            .collect();
        assert_eq!(found.len(), 1, "{name}");
        let names: Vec<&str> = found[0].labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["__name__", "agent_name", "hostname"]);
        found[0].samples[0].value
    };
    assert_eq!(value("nixl_telemetry_push_attempts_total"), 3.0);
    assert_eq!(value("nixl_telemetry_push_successes_total"), 2.0);
    assert_eq!(value("nixl_telemetry_push_failures_total"), 1.0);
    assert_eq!(value("nixl_telemetry_push_bytes_total"), 700.0);
    assert_eq!(value("nixl_telemetry_push_exits_total"), 1.0);
    let keys: Vec<Vec<(&str, &str)>> = request
        .timeseries
        .iter()
        .map(|t| {
            t.labels
                .iter()
                .map(|l| (l.name.as_str(), l.value.as_str()))
                .collect()
        })
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] <= w[1]),
        "series sorted by labels"
    );
}
