//! One sampled request's trace, as tritonserver records it: the frontend's timestamps (when the
//! request was received, its response complete and sent), and for every model the request went
//! through — the model it named, and an ensemble's steps below it — a record with REQUEST_START,
//! QUEUE_START, the execution's COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START and
//! COMPUTE_END, and REQUEST_END.
//!
//! The times are the ones the statistics take anyway (`stats.rs`): when the request arrived at its
//! model, when it was queued, the execution's start and phase durations, when its final answer was
//! given; nothing is measured twice. They become, in OpenTelemetry mode, an `InferRequest` span
//! (the frontend's events; its parent is the caller's span when the caller sent a `traceparent`),
//! a span per model named after it, and a `compute` span per execution, exported as each ends; in
//! Triton mode, the trace file's JSON records, written when the whole trace is over.
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::context::{IdGenerator, SpanContext, SpanId, TraceId};
use super::export::SpanQueue;
use super::otel::{self, SpanParts};
use super::settings::{Setting, TraceMode};
use crate::proto::otlp::trace::v1::Span;

/// A timestamp a frontend takes, with tritonserver's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontendEvent {
    HttpRecvStart,
    HttpRecvEnd,
    HttpSendStart,
    HttpSendEnd,
    GrpcWaitReadStart,
    GrpcWaitReadEnd,
    GrpcSendStart,
    GrpcSendEnd,
    /// The frontend has the request's (final) response.
    InferResponseComplete,
}

impl FrontendEvent {
    pub fn name(self) -> &'static str {
        match self {
            FrontendEvent::HttpRecvStart => "HTTP_RECV_START",
            FrontendEvent::HttpRecvEnd => "HTTP_RECV_END",
            FrontendEvent::HttpSendStart => "HTTP_SEND_START",
            FrontendEvent::HttpSendEnd => "HTTP_SEND_END",
            FrontendEvent::GrpcWaitReadStart => "GRPC_WAITREAD_START",
            FrontendEvent::GrpcWaitReadEnd => "GRPC_WAITREAD_END",
            FrontendEvent::GrpcSendStart => "GRPC_SEND_START",
            FrontendEvent::GrpcSendEnd => "GRPC_SEND_END",
            FrontendEvent::InferResponseComplete => "INFER_RESPONSE_COMPLETE",
        }
    }
}

/// One execution of a request, as the instance worker measured it for the statistics.
#[derive(Clone, Copy, Debug)]
pub struct Execution {
    /// When the request entered its scheduler's queue.
    pub queued: Instant,
    pub start: Instant,
    pub input: Duration,
    pub infer: Duration,
    pub output: Duration,
    /// Inferences in the whole execution (the batch), and requests in it.
    pub batch_size: u64,
    pub requests: u64,
}

/// `Instant`s as tritonserver's trace file reports times: nanoseconds of the monotonic clock.
#[derive(Debug)]
struct MonotonicClock {
    anchor: Instant,
    anchor_ns: u64,
}

impl MonotonicClock {
    fn new() -> Self {
        let anchor = Instant::now();
        MonotonicClock { anchor, anchor_ns: monotonic_ns().unwrap_or(0) }
    }

    fn ns(&self, t: Instant) -> u64 {
        match t.checked_duration_since(self.anchor) {
            Some(d) => self.anchor_ns.saturating_add(d.as_nanos() as u64),
            None => self.anchor_ns.saturating_sub(self.anchor.duration_since(t).as_nanos() as u64),
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds (what `Instant` reads on Linux, and tritonserver's steady clock).
fn monotonic_ns() -> Option<u64> {
    #[cfg(unix)]
    #[allow(unsafe_code)]
    {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes only the timespec it is given.
        if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) } == 0 {
            return Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
        }
    }
    None
}

/// What every trace of a server shares: ids, the clock, and where finished spans go.
#[derive(Debug)]
pub struct Recorder {
    ids: IdGenerator,
    /// tritonserver's trace ids: 1, 2, … (0 means "no parent").
    next_id: AtomicU64,
    clock: MonotonicClock,
    spans: Option<SpanQueue>,
}

impl Recorder {
    /// `spans`: where OpenTelemetry mode's finished spans go.
    pub fn new(spans: Option<SpanQueue>) -> Self {
        Recorder { ids: IdGenerator::default(), next_id: AtomicU64::new(1), clock: MonotonicClock::new(), spans }
    }
}

/// A request's place in a trace, before a model takes it: a top-level request's, or an ensemble
/// step's (below the ensemble's record). Requests carry it (`InferenceRequest::trace`); cloning is
/// one reference count.
#[derive(Clone)]
pub struct Trace {
    inner: Arc<TraceInner>,
    /// The record of the model whose step this is (`None`: the request the client sent).
    parent: Option<usize>,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace").field("id", &self.inner.id).field("parent", &self.parent).finish()
    }
}

/// A model's record of a traced request; its response sender holds it and reports the execution
/// and the end.
pub struct TraceNode {
    inner: Arc<TraceInner>,
    index: usize,
}

impl std::fmt::Debug for TraceNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceNode").field("trace", &self.inner.id).field("index", &self.index).finish()
    }
}

struct TraceInner {
    recorder: Arc<Recorder>,
    setting: Arc<Setting>,
    /// The trace's id (tritonserver's), which the top-level request's record has too.
    id: u64,
    /// Whether timestamps are recorded (the level has TIMESTAMPS).
    timestamps: bool,
    started: Instant,
    /// The wall clock at `started`, in nanoseconds since the Unix epoch.
    unix_at_start: u64,
    otel: Option<OtelIds>,
    state: Mutex<State>,
}

/// OpenTelemetry mode: the trace's ids, the `InferRequest` span's, and the caller's span.
struct OtelIds {
    trace_id: TraceId,
    root_span: SpanId,
    caller: Option<SpanId>,
    trace_state: String,
}

#[derive(Default)]
struct State {
    frontend: Vec<(FrontendEvent, Instant)>,
    nodes: Vec<Node>,
}

/// A model's record.
struct Node {
    id: u64,
    /// The id of the ensemble's record this is a step of (0: none).
    parent_id: u64,
    parent: Option<usize>,
    model: Arc<str>,
    version: i64,
    request_id: String,
    span_id: SpanId,
    request_start: Instant,
    queue_start: Instant,
    execution: Option<Execution>,
    request_end: Option<Instant>,
    error: Option<String>,
}

impl Trace {
    /// Starts the trace of a request sampled under `setting`; `caller`: the span the request's
    /// `traceparent` named (OpenTelemetry mode).
    pub fn begin(recorder: Arc<Recorder>, setting: Arc<Setting>, caller: Option<SpanContext>) -> Trace {
        let started = Instant::now();
        let unix_at_start = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let otel = (setting.mode == TraceMode::OpenTelemetry).then(|| OtelIds {
            trace_id: caller.as_ref().map_or_else(|| recorder.ids.trace_id(), |c| c.trace_id),
            root_span: recorder.ids.span_id(),
            caller: caller.as_ref().map(|c| c.span_id),
            trace_state: caller.map(|c| c.trace_state).unwrap_or_default(),
        });
        let inner = TraceInner {
            id: recorder.next_id.fetch_add(1, Ordering::Relaxed),
            timestamps: setting.values.level.timestamps,
            recorder,
            setting,
            started,
            unix_at_start,
            otel,
            state: Mutex::new(State::default()),
        };
        Trace { inner: Arc::new(inner), parent: None }
    }

    /// The trace's id (tritonserver's numbering).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Records a frontend's timestamp.
    pub fn capture(&self, event: FrontendEvent, at: Instant) {
        if self.inner.timestamps {
            self.inner.state.lock().frontend.push((event, at));
        }
    }

    /// The request reached `model` (REQUEST_START, at `arrived`; QUEUE_START too until the
    /// execution says when it was queued).
    pub fn start(&self, model: &Arc<str>, version: i64, request_id: &str, arrived: Instant) -> TraceNode {
        let inner = &self.inner;
        let mut state = inner.state.lock();
        let (id, parent_id) = match self.parent {
            // The top-level request's record has the trace's id.
            None => (inner.id, 0),
            Some(p) => (inner.recorder.next_id.fetch_add(1, Ordering::Relaxed), state.nodes[p].id),
        };
        state.nodes.push(Node {
            id,
            parent_id,
            parent: self.parent,
            model: model.clone(),
            version,
            request_id: request_id.to_string(),
            span_id: inner.recorder.ids.span_id(),
            request_start: arrived,
            queue_start: arrived,
            execution: None,
            request_end: None,
            error: None,
        });
        TraceNode { inner: inner.clone(), index: state.nodes.len() - 1 }
    }
}

impl TraceNode {
    /// The request executed (the last execution counts, should it run again).
    pub fn executed(&self, execution: Execution) {
        let mut state = self.inner.state.lock();
        let node = &mut state.nodes[self.index];
        node.queue_start = execution.queued;
        node.execution = Some(execution);
    }

    /// The request's final answer was given at `end` (REQUEST_END), or its error. In
    /// OpenTelemetry mode its spans are finished and exported.
    pub fn finished(&self, end: Instant, error: Option<&str>) {
        let inner = &*self.inner;
        let mut state = inner.state.lock();
        let node = &mut state.nodes[self.index];
        node.request_end = Some(end);
        node.error = error.map(str::to_string);
        if let (Some(ids), Some(queue)) = (&inner.otel, &inner.recorder.spans)
            && inner.timestamps
        {
            let node = &state.nodes[self.index];
            let parent = node.parent.map_or(&ids.root_span, |p| &state.nodes[p].span_id);
            if let Some(e) = &node.execution {
                queue.push(inner.compute_span(ids, node, e));
            }
            queue.push(inner.model_span(ids, node, parent));
        }
    }

    /// The place of a step this request runs on another model (an ensemble's), below this record.
    pub fn child(&self) -> Trace {
        Trace { inner: self.inner.clone(), parent: Some(self.index) }
    }
}

impl TraceInner {
    fn unix_ns(&self, t: Instant) -> u64 {
        match t.checked_duration_since(self.started) {
            Some(d) => self.unix_at_start.saturating_add(d.as_nanos() as u64),
            None => self.unix_at_start.saturating_sub(self.started.duration_since(t).as_nanos() as u64),
        }
    }

    /// A model's span: named after the model, with tritonserver's attributes and its request
    /// events.
    fn model_span(&self, ids: &OtelIds, node: &Node, parent: &SpanId) -> Span {
        let end = node.request_end.unwrap_or(node.request_start);
        let mut attributes = vec![
            otel::text("triton.model_name", &node.model),
            otel::int("triton.model_version", node.version),
            otel::int("triton.trace_id", node.id as i64),
            otel::int("triton.trace_parent_id", node.parent_id as i64),
        ];
        if !node.request_id.is_empty() {
            attributes.push(otel::text("triton.request_id", &node.request_id));
        }
        SpanParts {
            name: &node.model,
            trace_id: &ids.trace_id,
            span_id: &node.span_id,
            parent: Some((parent, false)),
            trace_state: &ids.trace_state,
            start: self.unix_ns(node.request_start),
            end: self.unix_ns(end),
            events: vec![
                ("REQUEST_START", self.unix_ns(node.request_start)),
                ("QUEUE_START", self.unix_ns(node.queue_start)),
                ("REQUEST_END", self.unix_ns(end)),
            ],
            attributes,
            error: node.error.as_deref(),
        }
        .build()
    }

    /// An execution's `compute` span, below its model's, with the execution's batch size.
    fn compute_span(&self, ids: &OtelIds, node: &Node, e: &Execution) -> Span {
        let [start, input_end, output_start, end] = compute_times(e).map(|t| self.unix_ns(t));
        SpanParts {
            name: "compute",
            trace_id: &ids.trace_id,
            span_id: &self.recorder.ids.span_id(),
            parent: Some((&node.span_id, false)),
            trace_state: &ids.trace_state,
            start,
            end,
            events: vec![
                ("COMPUTE_START", start),
                ("COMPUTE_INPUT_END", input_end),
                ("COMPUTE_OUTPUT_START", output_start),
                ("COMPUTE_END", end),
            ],
            attributes: vec![
                otel::int("nereus.batch_size", e.batch_size as i64),
                otel::int("nereus.batch_requests", e.requests as i64),
            ],
            error: None,
        }
        .build()
    }

    /// The `InferRequest` span: the frontend's events, from when the trace began to now.
    fn root_span(&self, ids: &OtelIds, state: &State) -> Span {
        SpanParts {
            name: "InferRequest",
            trace_id: &ids.trace_id,
            span_id: &ids.root_span,
            parent: ids.caller.as_ref().map(|c| (c, true)),
            trace_state: &ids.trace_state,
            start: self.unix_ns(self.started),
            end: self.unix_ns(Instant::now()),
            events: state.frontend.iter().map(|(e, t)| (e.name(), self.unix_ns(*t))).collect(),
            attributes: Vec::new(),
            error: None,
        }
        .build()
    }

    /// The trace file's records of the whole trace: for each record id, its model entry and one
    /// entry per timestamp, in time order (the frontend's timestamps under the trace's own id).
    fn triton_records(&self, state: &State) -> String {
        let clock = &self.recorder.clock;
        let mut out = String::new();
        let entry = |out: &mut String, text: &str| {
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(text);
        };
        let stamp = |id: u64, name: &str, t: Instant| {
            format!(r#"{{"id":{id},"timestamps":[{{"name":"{name}","ns":{}}}]}}"#, clock.ns(t))
        };
        let mut ids: Vec<u64> = vec![self.id];
        ids.extend(state.nodes.iter().map(|n| n.id).filter(|id| *id != self.id));
        for id in ids {
            // (time, header first at equal times, text)
            let mut entries: Vec<(Instant, u8, String)> = Vec::new();
            if id == self.id {
                entries.extend(state.frontend.iter().map(|(e, t)| (*t, 1, stamp(id, e.name(), *t))));
            }
            for node in state.nodes.iter().filter(|n| n.id == id) {
                let mut header = format!(
                    r#"{{"id":{id},"model_name":{},"model_version":{}"#,
                    json_string(&node.model),
                    node.version
                );
                if !node.request_id.is_empty() {
                    let _ = write!(header, r#","request_id":{}"#, json_string(&node.request_id));
                }
                if node.parent_id != 0 {
                    let _ = write!(header, r#","parent_id":{}"#, node.parent_id);
                }
                header.push('}');
                entries.push((node.request_start, 0, header));
                let mut times = vec![("REQUEST_START", node.request_start), ("QUEUE_START", node.queue_start)];
                if let Some(e) = &node.execution {
                    let [start, input_end, output_start, end] = compute_times(e);
                    times.extend([
                        ("COMPUTE_START", start),
                        ("COMPUTE_INPUT_END", input_end),
                        ("COMPUTE_OUTPUT_START", output_start),
                        ("COMPUTE_END", end),
                    ]);
                }
                if let Some(end) = node.request_end {
                    times.push(("REQUEST_END", end));
                }
                entries.extend(times.into_iter().map(|(name, t)| (t, 1, stamp(id, name, t))));
            }
            entries.sort_by_key(|(t, order, _)| (*t, *order));
            for (_, _, text) in entries {
                entry(&mut out, &text);
            }
        }
        out
    }
}

impl Drop for TraceInner {
    /// The trace is over (the frontend and every model are done with it): the `InferRequest` span
    /// ends, or the trace file gets the records.
    fn drop(&mut self) {
        let state = std::mem::take(self.state.get_mut());
        match (&self.otel, &self.recorder.spans) {
            (Some(ids), Some(queue)) => queue.push(self.root_span(ids, &state)),
            _ if self.setting.mode == TraceMode::Triton && self.timestamps => {
                let records = self.triton_records(&state);
                if !records.is_empty() {
                    self.setting.collect(records);
                }
            }
            _ => {}
        }
    }
}

/// An execution's COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START and COMPUTE_END: its start
/// and the ends of its phases.
fn compute_times(e: &Execution) -> [Instant; 4] {
    let input_end = e.start + e.input;
    let output_start = input_end + e.infer;
    [e.start, input_end, output_start, output_start + e.output]
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}
