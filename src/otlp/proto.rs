//! The OTLP metrics messages tokenprobe sends, as prost messages with the field numbers of the
//! official schema (open-telemetry/opentelemetry-proto: `collector/metrics/v1/metrics_service.proto`,
//! `metrics/v1/metrics.proto`, `resource/v1/resource.proto`, `common/v1/common.proto`). Only
//! what is sent is declared (histograms and monotonic sums of string, int and double
//! attributes); a receiver skips nothing, since nothing else is written. The official Rust
//! crates were not used: `opentelemetry-otlp`'s HTTP exporter brings its own HTTP client
//! (reqwest, a second stack beside the probes' hyper) and the SDK's periodic reader and
//! aggregation, which tokenprobe does in [`super::aggregate`] over its own results; the tests
//! decode these bytes with the official schema (PyPI `opentelemetry-proto`).

/// `ExportMetricsServiceRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportMetricsServiceRequest {
    /// The resources' metrics.
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

/// `ResourceMetrics`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceMetrics {
    /// The resource (service.name, ...).
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    /// Metrics by instrumentation scope.
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

/// `Resource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    /// Its attributes.
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

/// `ScopeMetrics`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeMetrics {
    /// The instrumentation scope.
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    /// The metrics.
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

/// `InstrumentationScope`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its version.
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `Metric` (a histogram or a sum).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its description.
    #[prost(string, tag = "2")]
    pub description: String,
    /// Its unit (UCUM).
    #[prost(string, tag = "3")]
    pub unit: String,
    /// Its data.
    #[prost(oneof = "Data", tags = "7, 9")]
    pub data: Option<Data>,
}

/// `Metric.data`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    /// A sum.
    #[prost(message, tag = "7")]
    Sum(Sum),
    /// A histogram with explicit bounds.
    #[prost(message, tag = "9")]
    Histogram(Histogram),
}

/// `AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE`.
pub const CUMULATIVE: i32 = 2;

/// `Sum`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sum {
    /// Its points.
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    /// [`CUMULATIVE`].
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
    /// A counter.
    #[prost(bool, tag = "3")]
    pub is_monotonic: bool,
}

/// `NumberDataPoint` with an integer value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumberDataPoint {
    /// Its attributes.
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    /// Since when it counts (ns since the Unix epoch).
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    /// Its instant.
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    /// Its value (`as_int`).
    #[prost(sfixed64, tag = "6")]
    pub as_int: i64,
}

/// `Histogram`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    /// Its points.
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<HistogramDataPoint>,
    /// [`CUMULATIVE`].
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
}

/// `HistogramDataPoint`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HistogramDataPoint {
    /// Its attributes.
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    /// Since when it counts.
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    /// Its instant.
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    /// Values observed.
    #[prost(fixed64, tag = "4")]
    pub count: u64,
    /// Their sum.
    #[prost(double, optional, tag = "5")]
    pub sum: Option<f64>,
    /// Count per bucket (one more than the bounds).
    #[prost(fixed64, repeated, tag = "6")]
    pub bucket_counts: Vec<u64>,
    /// The buckets' upper bounds.
    #[prost(double, repeated, tag = "7")]
    pub explicit_bounds: Vec<f64>,
    /// The least value.
    #[prost(double, optional, tag = "11")]
    pub min: Option<f64>,
    /// The largest value.
    #[prost(double, optional, tag = "12")]
    pub max: Option<f64>,
    /// Single measurements with what the aggregate leaves out (the last one of the point).
    #[prost(message, repeated, tag = "8")]
    pub exemplars: Vec<Exemplar>,
}

/// `Exemplar`: one measurement with attributes the point's series does not have.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Exemplar {
    /// The measurement's own attributes.
    #[prost(message, repeated, tag = "7")]
    pub filtered_attributes: Vec<KeyValue>,
    /// When it was measured.
    #[prost(fixed64, tag = "2")]
    pub time_unix_nano: u64,
    /// Its value (the `as_double` of the `value` oneof: always encoded, 0 included).
    #[prost(double, optional, tag = "3")]
    pub as_double: Option<f64>,
}

/// `KeyValue`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, prost::Message)]
pub struct KeyValue {
    /// The key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `AnyValue` (a string or an integer).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, prost::Message)]
pub struct AnyValue {
    /// The value.
    #[prost(oneof = "Value", tags = "1, 3")]
    pub value: Option<Value>,
}

/// `AnyValue.value`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, prost::Oneof)]
pub enum Value {
    /// A string.
    #[prost(string, tag = "1")]
    String(String),
    /// An integer.
    #[prost(int64, tag = "3")]
    Int(i64),
}

/// A string attribute.
pub fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(Value::String(value.to_owned())),
        }),
    }
}

/// An integer attribute.
pub fn kv_int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(Value::Int(value)),
        }),
    }
}
