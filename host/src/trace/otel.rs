//! OpenTelemetry spans in OTLP's protobuf types (`opentelemetry.proto.trace.v1`), built the way
//! tritonserver's spans come out of the OpenTelemetry C++ SDK: every span of kind SERVER, in the
//! instrumentation scope `triton-server`.
use crate::proto::otlp::common::v1::{AnyValue, KeyValue, any_value};
use crate::proto::otlp::trace::v1::{Span, Status, span, status};

use super::context::{SAMPLED, SpanId, TraceId};

/// The instrumentation scope tritonserver's tracer is named.
pub const SCOPE: &str = "triton-server";

/// Span flags: the W3C trace flags (sampled), and whether the parent is in another process.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// A string attribute.
pub fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.to_string())) }),
        ..Default::default()
    }
}

/// An integer attribute.
pub fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(any_value::Value::IntValue(value)) }),
        ..Default::default()
    }
}

/// What a span is made of, times in nanoseconds since the Unix epoch.
pub struct SpanParts<'a> {
    pub name: &'a str,
    pub trace_id: &'a TraceId,
    pub span_id: &'a SpanId,
    /// The parent span, and whether it is the caller's (another process's).
    pub parent: Option<(&'a SpanId, bool)>,
    pub trace_state: &'a str,
    pub start: u64,
    pub end: u64,
    pub events: Vec<(&'a str, u64)>,
    pub attributes: Vec<KeyValue>,
    /// The error the span's request failed with, if it did.
    pub error: Option<&'a str>,
}

impl SpanParts<'_> {
    pub fn build(self) -> Span {
        let remote = self.parent.is_some_and(|(_, remote)| remote);
        Span {
            trace_id: self.trace_id.to_vec(),
            span_id: self.span_id.to_vec(),
            trace_state: self.trace_state.to_string(),
            parent_span_id: self.parent.map(|(p, _)| p.to_vec()).unwrap_or_default(),
            flags: u32::from(SAMPLED) | HAS_IS_REMOTE | if remote { IS_REMOTE } else { 0 },
            name: self.name.to_string(),
            kind: span::SpanKind::Server as i32,
            start_time_unix_nano: self.start,
            end_time_unix_nano: self.end.max(self.start),
            attributes: self.attributes,
            events: self
                .events
                .into_iter()
                .map(|(name, time)| span::Event { time_unix_nano: time, name: name.to_string(), ..Default::default() })
                .collect(),
            status: self
                .error
                .map(|message| Status { message: message.to_string(), code: status::StatusCode::Error as i32 }),
            ..Default::default()
        }
    }
}
