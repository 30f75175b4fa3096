//! The `otlp` plug-in pushing to a real OpenTelemetry Collector (v0.165, built from
//! `test-deps/go/otelcol` by scripts/install-test-deps.sh): what its OTLP/HTTP receiver took,
//! as its file exporter wrote it, passes the same checks as the Python receiver's
//! (`python_receiver.rs`: totals, resource and point attributes, exponential histograms, with
//! and without gzip, over https, the last push at exit); and sent on by its Prometheus
//! remote-write exporter into Prometheus 3.16, the series keep the `prometheus` exporter's names
//! and totals, `histogram_quantile` over the native histograms the exponential ones became is
//! within the schema's bound, and with `resource_to_telemetry_conversion` a `hostname` resource
//! attribute is the `hostname` label the dashboard and the rules group by. Without the Go-built
//! programs these tests fail saying how to build them, unless
//! `NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1`.

mod common;

use std::path::Path;

use common::*;
use nixl_telemetry_series::native::{bucket_width_bound, DEFAULT_SCHEMA};
use nixl_telemetry_test_support::certs::{make_ca, server_certificate};
use nixl_telemetry_test_support::otlp_json::proto_field_names;
use nixl_telemetry_test_support::prometheus::label_names;
use nixl_telemetry_test_support::receivers::collector::{self, OtelCollector};
use nixl_telemetry_test_support::receivers::prometheus3::{self, Options};
use nixl_telemetry_test_support::receivers::{scratch, QueryServer};
use nixl_telemetry_test_support::transfers::assert_quantiles;

fn exact_totals_through_the_collector(gzip: bool) {
    let Some(work) = scratch() else { return };
    let _s = serial();
    let otelcol = OtelCollector::start(work.path(), &collector::Options::default());
    push_recorded_once(&otelcol.endpoint(), gzip);
    let all = otelcol.wait_for(1);
    assert_eq!(all.len(), 1, "the last push only (the interval is 60 s)");
    check_recorded(&proto_field_names(&all[0]));
}

#[test]
fn the_collector_receives_exact_totals() {
    exact_totals_through_the_collector(false);
}

#[test]
fn the_collector_receives_exact_totals_gzipped() {
    exact_totals_through_the_collector(true);
}

/// Over https: the Collector's receiver presents a certificate for 127.0.0.1 signed by a CA
/// the test makes (`tls: cert_file, key_file`), which the exporter trusts
/// (`OTEL_EXPORTER_OTLP_CERTIFICATE`): the same exact totals, gzipped.
#[test]
fn the_collector_receives_exact_totals_over_https() {
    let Some(work) = scratch() else { return };
    let _s = serial();
    let dir = work.path();
    let ca = make_ca(dir, "ca");
    let (cert, key) = server_certificate(dir, "ca", "otelcol");
    let otelcol = OtelCollector::start(
        dir,
        &collector::Options {
            tls: Some((&cert, &key)),
            ..Default::default()
        },
    );
    assert!(otelcol.endpoint().starts_with("https://127.0.0.1:"));
    std::env::set_var("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca);
    push_recorded_once(&otelcol.endpoint(), true);
    let all = otelcol.wait_for(1);
    assert_eq!(all.len(), 1, "the last push only (the interval is 60 s)");
    check_recorded(&proto_field_names(&all[0]));
}

#[test]
fn the_collector_receives_the_exponential_histograms() {
    let Some(work) = scratch() else { return };
    let _s = serial();
    let otelcol = OtelCollector::start(work.path(), &collector::Options::default());
    let values = push_exponential(&otelcol.endpoint(), 3000);
    let all = otelcol.wait_for(1);
    check_exponential_request(&proto_field_names(all.last().unwrap()), &values);
}

/// A Prometheus 3.16 and, in front of it, a Collector sending on every metric it receives by
/// remote write, with `resource_to_telemetry_conversion` as `resource_to_telemetry` says.
fn into_prometheus3(work: &Path, resource_to_telemetry: bool) -> (QueryServer, OtelCollector) {
    let prom = prometheus3::start(work, &Options::default());
    let otelcol = OtelCollector::start(
        work,
        &collector::Options {
            remote_write: Some(&prom.write_url()),
            resource_to_telemetry,
            ..Default::default()
        },
    );
    (prom, otelcol)
}

/// Through the Collector's `prometheus_remote_write` exporter (default settings) into Prometheus
/// 3.16: the same names as the `prometheus` exporter's, exact totals, the resource's
/// `service.name` and `service.instance.id` as `job` and `instance` (its other attributes in
/// `target_info`), and the exponential histograms as native histograms with p50, p90 and p99
/// within the schema's bound.
#[test]
fn through_the_collector_into_prometheus3_the_quantiles_are_within_the_schemas_bound() {
    let Some(work) = scratch() else { return };
    let _s = serial();
    let (prom, otelcol) = into_prometheus3(work.path(), false);
    let n = 6000;
    let mut values = push_exponential(&otelcol.endpoint(), n);
    let sel = "{agent_name=\"otlp-exp\"}";
    let total = |v: &[u64]| v.iter().sum::<u64>() as f64;
    prom.wait_for_value(
        &format!("histogram_count(agent_xfer_time_us{sel})"),
        values.times.len() as f64,
    );
    prom.wait_for_value(
        &format!("histogram_sum(agent_tx_request_size_bytes{sel})"),
        total(&values.tx),
    );
    let tx = prom.wait_for_value(&format!("agent_tx_bytes_total{sel}"), total(&values.tx));
    // The point's attributes, the resource's identity as job and instance, and the exporter's
    // scope; the other resource attributes are target_info's.
    assert_eq!(
        label_names(&tx),
        [
            "__name__",
            "agent_name",
            "instance",
            "job",
            "otel_scope_name",
            "otel_scope_version"
        ]
    );
    let pid = std::process::id().to_string();
    let host = tx["instance"].as_str().unwrap().split(':').next().unwrap();
    assert_eq!(tx["job"], "nixl", "{tx}");
    assert_eq!(tx["instance"], format!("{host}:{pid}"), "{tx}");
    let info = prom.wait_for_value("target_info{job=\"nixl\"}", 1.0);
    assert_eq!(
        label_names(&info),
        ["__name__", "host_name", "instance", "job", "process_pid"]
    );
    assert_eq!(
        (&info["host_name"], &info["process_pid"]),
        (&host.into(), &pid.into())
    );
    // The host back on the series by a join with target_info.
    prom.wait_for_value(
        &format!(
            "sum by (host_name) (agent_tx_bytes_total{sel} * on (job, instance) \
             group_left (host_name) target_info{{host_name=\"{host}\"}})"
        ),
        total(&values.tx),
    );
    prom.wait_for_value(&format!("agent_rx_bytes_total{sel}"), total(&values.rx));
    prom.wait_for_value(
        &format!("agent_tx_requests_num_total{sel}"),
        values.tx.len() as f64,
    );
    let bound = bucket_width_bound(DEFAULT_SCHEMA);
    for (what, family, sorted) in [
        ("time (µs)", "agent_xfer_time_us", &mut values.times),
        ("TX size (B)", "agent_tx_request_size_bytes", &mut values.tx),
        ("RX size (B)", "agent_rx_request_size_bytes", &mut values.rx),
    ] {
        sorted.sort_unstable();
        assert_quantiles(what, sorted, bound, |q| {
            prom.one_value(&format!("histogram_quantile({q}, {family}{sel})"))
        });
    }
    assert!(!otelcol.log().contains("\terror\t"), "{}", otelcol.log());
}

/// The dashboard and the recording rules keep hosts apart by the `hostname` label, which series
/// through the Collector's `prometheus_remote_write` exporter lack (the host is `target_info`'s
/// `host_name`). With `resource_to_telemetry_conversion: enabled: true` every resource
/// attribute becomes a label of every series: `host.name` as `host_name`, and a `hostname`
/// resource attribute of the sender (`OTEL_RESOURCE_ATTRIBUTES=hostname=...`) as `hostname`,
/// by which the per-node sums group.
#[test]
fn with_resource_to_telemetry_conversion_a_hostname_attribute_is_the_hostname_label() {
    let Some(work) = scratch() else { return };
    let _s = serial();
    let (prom, otelcol) = into_prometheus3(work.path(), true);
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", otelcol.endpoint());
    std::env::set_var("OTEL_RESOURCE_ATTRIBUTES", "hostname=node-7");
    let c = collector("otlp-host");
    record(&c);
    drop(c);
    let tx = prom.wait_for_value("agent_tx_bytes_total{agent_name=\"otlp-host\"}", 5096.0);
    assert_eq!(
        label_names(&tx),
        [
            "__name__",
            "agent_name",
            "host_name",
            "hostname",
            "instance",
            "job",
            "otel_scope_name",
            "otel_scope_version",
            "process_pid",
            "service_instance_id",
            "service_name"
        ]
    );
    // The attribute given, and the sender's own host and pid: those of its `instance`.
    assert_eq!(tx["hostname"], "node-7");
    let label = |name: &str| tx[name].as_str().unwrap_or_default();
    assert_eq!(
        label("instance"),
        format!("{}:{}", label("host_name"), label("process_pid"))
    );
    assert_eq!(tx["process_pid"], std::process::id().to_string());
    assert_eq!(
        prom.by_label("hostname", "sum by (hostname) (agent_tx_bytes_total)"),
        Some(vec![("node-7".to_owned(), 5096.0)])
    );
}
