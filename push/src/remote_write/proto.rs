//! The messages of Prometheus remote-write 1.0 (`prometheus.WriteRequest` and what it holds),
//! declared from the specification's protobuf definition for prost. Field numbers are the
//! specification's; fields it reserves (metadata) are not sent.

/// The request: a list of series.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// The series.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// One series: its labels (sorted by name, `__name__` included) and its samples.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// The labels.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// The samples, oldest first.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    /// Native histogram samples (a series has these or `samples`, not both).
    #[prost(message, repeated, tag = "4")]
    pub histograms: Vec<Histogram>,
}

/// A label.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    /// The name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A sample.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// A native histogram sample (remote-write 1.0's `Histogram`, integer counts): the schema,
/// zero bucket, positive spans and their count deltas.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    /// Observations (`count_int` of the `count` oneof).
    #[prost(uint64, tag = "1")]
    pub count_int: u64,
    /// Their sum.
    #[prost(double, tag = "3")]
    pub sum: f64,
    /// The schema.
    #[prost(sint32, tag = "4")]
    pub schema: i32,
    /// The zero bucket's threshold.
    #[prost(double, tag = "5")]
    pub zero_threshold: f64,
    /// Observations in the zero bucket (`zero_count_int`).
    #[prost(uint64, tag = "6")]
    pub zero_count_int: u64,
    /// Spans of positive buckets.
    #[prost(message, repeated, tag = "11")]
    pub positive_spans: Vec<BucketSpan>,
    /// Positive bucket counts as deltas from the previous one.
    #[prost(sint64, repeated, tag = "12")]
    pub positive_deltas: Vec<i64>,
    /// Reset hint (0 unknown: Prometheus detects resets itself).
    #[prost(int32, tag = "14")]
    pub reset_hint: i32,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "15")]
    pub timestamp: i64,
}

/// Consecutive native buckets: remote-write's `BucketSpan` is the exposition format's message
/// field for field (offset `sint32` 1, length `uint32` 2), so the series crate's one serves both.
pub use nixl_telemetry_series::protobuf::BucketSpan;
