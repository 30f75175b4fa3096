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
