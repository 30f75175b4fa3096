//! The Prometheus protobuf exposition format: length-delimited `io.prometheus.client.MetricFamily`
//! messages, the only scrape format that carries native histograms.
//!
//! The messages are declared for prost from Prometheus's `metrics.proto` (client_model), with
//! its field numbers; only the fields this exporter fills are declared (a decoder skips what
//! it does not know, and fields left out are absent on the wire). No maintained crate offers
//! these definitions for prost: the `prometheus` crate generates them with rust-protobuf, and
//! `prometheus-client`'s protobuf is OpenMetrics' data model, which Prometheus does not scrape.
//!
//! The families, labels and values are the text format's ([`crate::text`]), in the same order;
//! with native histograms on, the transfer-time histograms carry their native buckets beside
//! the classic ones (Prometheus 2.42 with `--enable-feature=native-histograms` keeps the native
//! ones; later versions can keep both with `scrape_classic_histograms`), and the families of
//! [`crate::NATIVE_SIZE_FAMILIES`] follow `agent_errors_total`.
//!
//! The encoder ([`encode_rows`]) writes the wire format itself, as prost would encode these
//! messages, without building them: a scrape's series share their rank's labels, which it
//! encodes once per page. The messages serve decoding ([`decode`]) and, in the tests, as the
//! oracle the encoder matches byte for byte.

use crate::engine::AgentSnapshot;
use crate::native::{NativeHistogram, ZERO_THRESHOLD};
use crate::text::Row;
use crate::{families, FamilyKind, FamilySource, NATIVE_SIZE_FAMILIES};

/// The `Content-Type` of the protobuf exposition (and what a scraper's `Accept` names).
pub const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// `io.prometheus.client.LabelPair`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    /// The name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `io.prometheus.client.Gauge`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Gauge {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// `io.prometheus.client.Counter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Counter {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// `io.prometheus.client.Bucket`: a classic bucket.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Bucket {
    /// Observations at or below `upper_bound`.
    #[prost(uint64, tag = "1")]
    pub cumulative_count: u64,
    /// The bound (`le`).
    #[prost(double, tag = "2")]
    pub upper_bound: f64,
}

/// `io.prometheus.client.BucketSpan`: consecutive native buckets.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    /// Gap from the previous span's end (the first span: the index of its first bucket).
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    /// Buckets in the span.
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// `io.prometheus.client.Histogram`: classic buckets and, for a native histogram, the schema,
/// zero bucket and positive spans with their count deltas.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    /// Observations.
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    /// Their sum.
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    /// Classic buckets (without `+Inf`).
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    /// Native: the schema.
    #[prost(sint32, tag = "5")]
    pub schema: i32,
    /// Native: the zero bucket's threshold (non-zero marks the histogram native).
    #[prost(double, tag = "6")]
    pub zero_threshold: f64,
    /// Native: observations in the zero bucket.
    #[prost(uint64, tag = "7")]
    pub zero_count: u64,
    /// Native: spans of positive buckets.
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    /// Native: positive bucket counts, each as the delta from the previous one.
    #[prost(sint64, repeated, tag = "13")]
    pub positive_delta: Vec<i64>,
}

impl Histogram {
    /// Whether it carries a native histogram (client_golang's test: a zero threshold, a zero
    /// count or spans; a classic-only histogram has none of them).
    pub fn is_native(&self) -> bool {
        self.zero_threshold != 0.0 || self.zero_count != 0 || !self.positive_span.is_empty()
    }

    /// Its native histogram (positive buckets: NIXL's values are never negative), if it
    /// carries one; an error for a malformed one.
    pub fn native(&self) -> Option<Result<NativeHistogram, String>> {
        self.is_native().then(|| {
            let spans: Vec<(i32, u32)> = self
                .positive_span
                .iter()
                .map(|s| (s.offset, s.length))
                .collect();
            NativeHistogram::from_sparse(
                self.schema,
                self.zero_count,
                self.sample_count,
                self.sample_sum.max(0.0) as u64,
                &spans,
                &self.positive_delta,
            )
        })
    }
}

/// `io.prometheus.client.Metric`: labels and one value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    /// The labels.
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    /// A gauge's value.
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Gauge>,
    /// A counter's value.
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Counter>,
    /// A histogram's value.
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

/// `io.prometheus.client.MetricType` values used here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    /// A counter.
    Counter = 0,
    /// A gauge.
    Gauge = 1,
    /// A histogram (classic, native or both).
    Histogram = 4,
}

/// `io.prometheus.client.MetricFamily`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricFamily {
    /// The family name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// HELP text.
    #[prost(string, tag = "2")]
    pub help: String,
    /// The type.
    #[prost(enumeration = "MetricType", tag = "3")]
    pub r#type: i32,
    /// One metric per series.
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
}

/// Every agent's families, encoded: [`encode_rows`] with the rows `agent_name`, `hostname`
/// (and the workload labels) of every agent, as [`crate::text::encode`] has them (no agents:
/// empty output).
pub fn encode(agents: &[AgentSnapshot]) -> Vec<u8> {
    crate::text::with_agent_rows(agents, encode_rows)
}

/// Encodes rows of series with their own labels and family kinds (the multi-process exporter's
/// per-rank series and node totals), each family a length-delimited [`MetricFamily`]: the
/// families of [`crate::text::encode_rows_into`], in its order (a family without any row left
/// out), then the size families of the rows that are in histogram families and keep native
/// histograms (no rows: empty output).
///
/// The wire format is written straight from the rows, as prost would encode the messages
/// (fields in number order, zero values and empty strings left out; the tests compare the two
/// byte for byte), without building them: each row's labels are encoded once per page, not
/// copied into every series' message.
pub fn encode_rows(rows: &[Row]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.len() * 8 * 1024);
    let mut page = Page::new(rows);
    for family in families() {
        let (kind, field) = match family.kind {
            FamilyKind::Counter => (MetricType::Counter, METRIC_COUNTER),
            FamilyKind::Gauge => (MetricType::Gauge, METRIC_GAUGE),
            FamilyKind::Histogram => (MetricType::Histogram, METRIC_HISTOGRAM),
        };
        for (i, row) in rows.iter().enumerate() {
            if !row.kinds.contains(&family.kind) {
                continue;
            }
            let agent = row.snapshot;
            if let FamilySource::Histogram(t) = family.source {
                let h = agent.histogram(t).expect("histogram event");
                // With native buckets, the native histogram's own count and sum: a reader
                // checks the count against them, whatever the classic buckets say.
                let native = agent.native_histogram(t);
                let (count, sum) = native.map_or((h.count(), h.sum), |n| (n.count(), n.sum()));
                page.histogram(i, count, sum, |hist| {
                    let bounds = h.bounds.bounds().iter();
                    for (&upper_bound, cumulative_count) in bounds.zip(h.cumulative_counts()) {
                        let len = varint_len(cumulative_count) + double_len(upper_bound);
                        hist.push(HISTOGRAM_BUCKET);
                        varint(len as u64, hist);
                        varint_field(hist, BUCKET_CUMULATIVE_COUNT, cumulative_count);
                        double_field(hist, BUCKET_UPPER_BOUND, upper_bound);
                    }
                    if let Some(n) = native {
                        native_fields(hist, n);
                    }
                });
            } else {
                crate::for_each_sample(family, agent, |_, extra, value| {
                    page.value(i, extra, field, value)
                });
            }
        }
        page.family(family.name, family.help, kind, &mut out);
    }
    for (name, help, t) in NATIVE_SIZE_FAMILIES {
        for (i, row) in rows.iter().enumerate() {
            if !row.kinds.contains(&FamilyKind::Histogram) {
                continue;
            }
            if let Some(n) = row.snapshot.native_histogram(t) {
                page.histogram(i, n.count(), n.sum(), |hist| native_fields(hist, n));
            }
        }
        page.family(name, help, MetricType::Histogram, &mut out);
    }
    out
}

/// A page being encoded: its rows' labels, encoded once, and the buffers every family and
/// series reuse.
struct Page {
    /// Every row's `Metric.label` fields, one row after the other: row `i`'s from `ends[i - 1]`
    /// (0 for the first) to `ends[i]`.
    labels: Vec<u8>,
    ends: Vec<usize>,
    /// The encoded `Metric`s of the family being encoded.
    metrics: Vec<u8>,
    /// The series being encoded: its extra label (`status`) or its histogram's fields.
    scratch: Vec<u8>,
}

impl Page {
    fn new(rows: &[Row]) -> Page {
        let mut labels = Vec::new();
        let mut ends = Vec::with_capacity(rows.len());
        for row in rows {
            for &(name, value) in row.labels {
                label_pair(name, value, &mut labels);
            }
            ends.push(labels.len());
        }
        Page {
            labels,
            ends,
            metrics: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Where row `row`'s encoded labels are in `self.labels`.
    fn labels_of(&self, row: usize) -> std::ops::Range<usize> {
        row.checked_sub(1).map_or(0, |r| self.ends[r])..self.ends[row]
    }

    /// Appends row `row`'s series of a counter or gauge (`field`: the `Metric` field of its
    /// value), with `extra` as its last label.
    fn value(&mut self, row: usize, extra: Option<(&str, &str)>, field: u8, value: u64) {
        self.scratch.clear();
        if let Some((name, value)) = extra {
            label_pair(name, value, &mut self.scratch);
        }
        // `Gauge` or `Counter`: its value, left out when 0.
        let value = value as f64;
        let mut message = [VALUE, 0, 0, 0, 0, 0, 0, 0, 0];
        message[1..].copy_from_slice(&value.to_le_bytes());
        let message = &message[..double_len(value)];
        let labels = [&self.labels[self.labels_of(row)], &self.scratch[..]];
        metric(&mut self.metrics, labels, field, message);
    }

    /// Appends row `row`'s series of a histogram: its count and sum, then the fields `more`
    /// appends.
    fn histogram(&mut self, row: usize, count: u64, sum: u64, more: impl FnOnce(&mut Vec<u8>)) {
        self.scratch.clear();
        varint_field(&mut self.scratch, HISTOGRAM_SAMPLE_COUNT, count);
        double_field(&mut self.scratch, HISTOGRAM_SAMPLE_SUM, sum as f64);
        more(&mut self.scratch);
        let labels = [&self.labels[self.labels_of(row)], &[]];
        metric(&mut self.metrics, labels, METRIC_HISTOGRAM, &self.scratch);
    }

    /// Appends the family of the series appended since the last family to `out`,
    /// length-delimited (nothing when there are none).
    fn family(&mut self, name: &str, help: &str, kind: MetricType, out: &mut Vec<u8>) {
        if self.metrics.is_empty() {
            return;
        }
        let kind = kind as u64;
        let len = string_len(name) + string_len(help) + varint_len(kind) + self.metrics.len();
        varint(len as u64, out);
        string_field(out, FAMILY_NAME, name);
        string_field(out, FAMILY_HELP, help);
        varint_field(out, FAMILY_TYPE, kind);
        out.extend_from_slice(&self.metrics);
        self.metrics.clear();
    }
}

// The one-byte keys (field number << 3 | wire type) of the fields written.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FAMILY_NAME: u8 = 1 << 3 | LEN;
const FAMILY_HELP: u8 = 2 << 3 | LEN;
const FAMILY_TYPE: u8 = 3 << 3 | VARINT;
const FAMILY_METRIC: u8 = 4 << 3 | LEN;
const METRIC_LABEL: u8 = 1 << 3 | LEN;
const METRIC_GAUGE: u8 = 2 << 3 | LEN;
const METRIC_COUNTER: u8 = 3 << 3 | LEN;
const METRIC_HISTOGRAM: u8 = 7 << 3 | LEN;
const LABEL_NAME: u8 = 1 << 3 | LEN;
const LABEL_VALUE: u8 = 2 << 3 | LEN;
/// `Gauge.value` and `Counter.value`.
const VALUE: u8 = 1 << 3 | FIXED64;
const HISTOGRAM_SAMPLE_COUNT: u8 = 1 << 3 | VARINT;
const HISTOGRAM_SAMPLE_SUM: u8 = 2 << 3 | FIXED64;
const HISTOGRAM_BUCKET: u8 = 3 << 3 | LEN;
const HISTOGRAM_SCHEMA: u8 = 5 << 3 | VARINT;
const HISTOGRAM_ZERO_THRESHOLD: u8 = 6 << 3 | FIXED64;
const HISTOGRAM_ZERO_COUNT: u8 = 7 << 3 | VARINT;
/// Field 12: its key takes one byte still (`12 << 3 | 2` = 98 < 128).
const HISTOGRAM_POSITIVE_SPAN: u8 = 12 << 3 | LEN;
const HISTOGRAM_POSITIVE_DELTA: u8 = 13 << 3 | LEN;
const BUCKET_CUMULATIVE_COUNT: u8 = 1 << 3 | VARINT;
const BUCKET_UPPER_BOUND: u8 = 2 << 3 | FIXED64;
const SPAN_OFFSET: u8 = 1 << 3 | VARINT;
const SPAN_LENGTH: u8 = 2 << 3 | VARINT;

/// Appends a `Metric` as a family's field: `labels` (its encoded label fields, in two parts)
/// and its value, the message `value` in field `field`.
fn metric(out: &mut Vec<u8>, labels: [&[u8]; 2], field: u8, value: &[u8]) {
    let value_len = 1 + prost::encoding::encoded_len_varint(value.len() as u64) + value.len();
    out.push(FAMILY_METRIC);
    varint((labels[0].len() + labels[1].len() + value_len) as u64, out);
    out.extend_from_slice(labels[0]);
    out.extend_from_slice(labels[1]);
    bytes_field(out, field, value);
}

/// Appends a `Metric.label` field: the pair `name`, `value`.
fn label_pair(name: &str, value: &str, out: &mut Vec<u8>) {
    out.push(METRIC_LABEL);
    varint((string_len(name) + string_len(value)) as u64, out);
    string_field(out, LABEL_NAME, name);
    string_field(out, LABEL_VALUE, value);
}

/// Appends `h`'s native fields to a histogram's: schema, zero bucket, positive spans and deltas.
fn native_fields(out: &mut Vec<u8>, h: &NativeHistogram) {
    varint_field(out, HISTOGRAM_SCHEMA, zigzag(i64::from(h.schema())));
    double_field(out, HISTOGRAM_ZERO_THRESHOLD, ZERO_THRESHOLD);
    varint_field(out, HISTOGRAM_ZERO_COUNT, h.zero_count());
    // The spans of consecutive populated buckets, each written once the next one begins: the
    // first one's offset is its first index, a later one's the gap after the one before.
    let mut span = None;
    let mut end = 0;
    for (index, _) in h.buckets() {
        span = Some(match span {
            Some((offset, length)) if index == end => (offset, length + 1),
            Some(before) => {
                span_field(out, before);
                (index - end, 1)
            }
            None => (index, 1),
        });
        end = index + 1;
    }
    if let Some(last) = span {
        span_field(out, last);
    }
    // The counts, each as its delta from the one before, packed.
    let deltas = || {
        h.buckets().scan(0, |before, (_, n)| {
            let delta = n as i64 - *before;
            *before = n as i64;
            Some(zigzag(delta))
        })
    };
    let len: usize = deltas().map(prost::encoding::encoded_len_varint).sum();
    if len > 0 {
        out.push(HISTOGRAM_POSITIVE_DELTA);
        varint(len as u64, out);
        deltas().for_each(|d| varint(d, out));
    }
}

/// Appends a `BucketSpan` as a histogram's field.
fn span_field(out: &mut Vec<u8>, (offset, length): (i32, u32)) {
    let (offset, length) = (zigzag(i64::from(offset)), u64::from(length));
    let len = varint_len(offset) + varint_len(length);
    out.push(HISTOGRAM_POSITIVE_SPAN);
    varint(len as u64, out);
    varint_field(out, SPAN_OFFSET, offset);
    varint_field(out, SPAN_LENGTH, length);
}

/// A signed varint's value (`sint32`, `sint64`: zigzag).
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Appends a varint.
fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-delimited field (a message, always written: a set optional one).
fn bytes_field(out: &mut Vec<u8>, key: u8, bytes: &[u8]) {
    out.push(key);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// The bytes of a string field (key, length and string; none when empty).
fn string_len(s: &str) -> usize {
    match s.len() {
        0 => 0,
        n => 1 + prost::encoding::encoded_len_varint(n as u64) + n,
    }
}

/// Appends a string field, left out when empty.
fn string_field(out: &mut Vec<u8>, key: u8, s: &str) {
    if !s.is_empty() {
        bytes_field(out, key, s.as_bytes());
    }
}

/// Appends a varint field (zigzagged already for a signed one), left out when 0.
fn varint_field(out: &mut Vec<u8>, key: u8, v: u64) {
    if v != 0 {
        out.push(key);
        varint(v, out);
    }
}

/// The bytes of a varint field (key and varint; none when 0).
fn varint_len(v: u64) -> usize {
    match v {
        0 => 0,
        v => 1 + prost::encoding::encoded_len_varint(v),
    }
}

/// Appends a `double` field, left out when 0.
fn double_field(out: &mut Vec<u8>, key: u8, v: f64) {
    if v != 0.0 {
        out.push(key);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// The bytes of a `double` field (key and 8 bytes; none when 0).
fn double_len(v: f64) -> usize {
    if v != 0.0 {
        9
    } else {
        0
    }
}

/// Decodes a body of length-delimited families (for tests and tools).
pub fn decode(mut body: &[u8]) -> Result<Vec<MetricFamily>, prost::DecodeError> {
    use prost::Message;
    let mut out = Vec::new();
    while !body.is_empty() {
        out.push(MetricFamily::decode_length_delimited(&mut body)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
