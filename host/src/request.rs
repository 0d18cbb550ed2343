//! The one request type and one response type that flow frontend → server → scheduler → instance →
//! backend → response sender. Frontends translate at the edge; nothing below them knows which
//! protocol a request came from.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::call_chain::CallChain;
use crate::device_io::DeviceTensors;
use crate::error::InferError;
use crate::shm::{HostSpan, ShmInputs};
use crate::stats::{ModelStats, ResponseKind};
use crate::tensor::DataType;
use crate::trace::{Trace, TraceNode};

/// A request or response parameter value (Triton's InferParameter oneof).
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    Bool(bool),
    Int64(i64),
    Uint64(u64),
    Double(f64),
    String(String),
}

/// A named tensor whose bytes are a slice of the request body (no copy), or backend output.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    /// Row-major, little-endian; BYTES elements length-prefixed.
    pub data: Bytes,
}

impl Tensor {
    /// Checks an input's declared datatype name and shape, as a frontend decodes them, before any
    /// of its data is looked at; returns the datatype and the element count the shape describes.
    pub fn parse_header(name: &str, datatype: &str, shape: &[i64]) -> Result<(DataType, u64), InferError> {
        let dt: DataType = datatype
            .parse()
            .map_err(|_| InferError::invalid(format!("invalid datatype '{datatype}' for input '{name}'")))?;
        let elements = element_count_checked(name, shape)?;
        // The tensor's byte size must fit an int64 as well, as tritonserver checks before it
        // allocates (BYTES elements have no fixed size; their data decides).
        if let Some(size) = dt.element_size().filter(|s| *s > 1)
            && elements > i64::MAX as u64 / size as u64
        {
            return Err(InferError::invalid(format!(
                "byte size overflow for input '{name}': element count ({elements}) * data type size ({size}) \
                 exceeds maximum allowed size ({})",
                i64::MAX
            )));
        }
        Ok((dt, elements))
    }
}

/// The element count of an input's shape, refused in tritonserver's words (its
/// GetElementCount) when a dimension is negative or the count passes int64's maximum.
fn element_count_checked(name: &str, shape: &[i64]) -> Result<u64, InferError> {
    // The shape is formatted only for an error: this runs for every input of every request.
    let shown = || crate::tensor::shape_string(shape);
    if shape.iter().any(|d| *d < 0) {
        return Err(InferError::invalid(format!(
            "invalid shape for input '{name}': shape {} contains one or more invalid dimensions",
            shown()
        )));
    }
    shape.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d)).map(|n| n as u64).ok_or_else(|| {
        InferError::invalid(format!(
            "invalid shape for input '{name}': shape {} causes total element count to exceed maximum size of {}",
            shown(),
            i64::MAX
        ))
    })
}

/// Whether a request parameter is one Triton reserves to steer the server (sequence, scheduling,
/// transport and `triton_*` keys); those are never passed to backends as custom parameters.
pub fn is_reserved_parameter(key: &str) -> bool {
    const RESERVED: &[&str] =
        &["sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers", "binary_data_output"];
    RESERVED.contains(&key) || key.starts_with("triton_")
}

/// A sequence correlation id (`sequence_id`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum CorrelationId {
    #[default]
    None,
    Numeric(u64),
    Text(String),
}

impl CorrelationId {
    /// Triton treats 0 and "" as "no sequence".
    pub fn normalized(self) -> Self {
        match self {
            CorrelationId::Numeric(0) => CorrelationId::None,
            CorrelationId::Text(s) if s.is_empty() => CorrelationId::None,
            other => other,
        }
    }
}

/// An inference request after decoding, before validation against the model.
#[derive(Clone, Debug, Default)]
pub struct InferenceRequest {
    pub model_name: String,
    /// `None` selects the version the version policy makes current (the highest ready one).
    pub model_version: Option<i64>,
    pub id: String,
    pub correlation_id: CorrelationId,
    pub sequence_start: bool,
    pub sequence_end: bool,
    /// Schedule-policy `priority` (0: the model's default level; 1 is the highest).
    pub priority: u64,
    /// Schedule-policy `timeout` in microseconds (0: none), honoured where the queue policy allows.
    pub timeout_us: u64,
    /// Custom parameters for the backend (reserved keys removed by the frontend).
    pub parameters: Vec<(String, ParamValue)>,
    pub inputs: Vec<Tensor>,
    /// Names of the outputs to return; empty means every output of the model.
    pub requested_outputs: Vec<String>,
    /// The request's trace, when it was sampled (the model it reaches records into it).
    pub trace: Option<Trace>,
    /// The models that called it and the deadline it inherited (empty for a client's request).
    pub calls: CallChain,
    /// The system shared memory its inputs are read from in place, checked when its answer comes
    /// (`api::infer`).
    pub shm_inputs: ShmInputs,
    /// Inputs still in a client's GPU memory (their tensors hold no bytes until settled).
    pub device_inputs: DeviceTensors,
    /// Where the outputs the client placed in its GPU memory go.
    pub device_outputs: DeviceTensors,
    /// Where the outputs the client placed in system shared memory go, by name: a backend may write
    /// one there itself (and name it in its response's `in_place`); else the frontend writes it.
    pub host_outputs: Vec<(String, HostSpan)>,
}

impl InferenceRequest {
    /// Copies to the host every input still in a client's GPU memory that the model will not read
    /// there: all of them unless `device` (the GPU whose memory the model's instances read in
    /// place) is the one an input lies on, and always BYTES and BOOL tensors (strings cannot live
    /// on a GPU; booleans are normalised on the host). Called as the request reaches its model.
    pub fn settle_device_inputs(&mut self, device: Option<usize>) -> Result<(), InferError> {
        if self.device_inputs.is_empty() {
            return Ok(());
        }
        for (name, span) in self.device_inputs.take_all() {
            let Some(tensor) = self.inputs.iter_mut().find(|t| t.name == name) else { continue };
            if device == Some(span.device()) && tensor.datatype.goes_to_device_as_is() {
                self.device_inputs.push(name, span);
            } else {
                // Before the copy, not after it in validation: the span's size is the client's
                // `shared_memory_byte_size`, bounded only by its own GPU allocation (tens of GiB),
                // and a copy of that to the host for a one-element tensor could exhaust memory.
                if tensor.datatype.element_size().is_some() {
                    crate::validate::check_len(tensor, span.len(), Some(&self.model_name))
                        .map_err(InferError::invalid)?;
                }
                tensor.data = span.to_host()?;
            }
        }
        Ok(())
    }

    /// Whether `other` gives the same inputs, by name (the batchers' rule for models with optional
    /// inputs: an input of a batch covers every row or none).
    pub fn gives_the_same_inputs_as(&self, other: &InferenceRequest) -> bool {
        fn names(r: &InferenceRequest) -> Vec<&str> {
            let mut n: Vec<&str> = r.inputs.iter().map(|t| t.name.as_str()).collect();
            n.sort_unstable();
            n
        }
        names(self) == names(other)
    }

    /// How many inferences the request carries: its batch dimension when the model batches
    /// (`batching`, i.e. `max_batch_size` > 0; validation has checked it; zero is a batch too,
    /// as tritonserver serves it), else 1.
    pub fn batch_size(&self, batching: bool) -> i64 {
        match self.inputs.first().and_then(|t| t.shape.first()) {
            Some(&b) if batching => b.max(0),
            _ => 1,
        }
    }
}

/// A response: the outputs a backend produced, already checked against the model configuration.
#[derive(Clone, Debug)]
pub struct InferenceResponse {
    pub model_name: Arc<str>,
    pub model_version: i64,
    pub id: String,
    pub parameters: Vec<(String, ParamValue)>,
    pub outputs: Vec<Tensor>,
    /// The outputs a backend wrote straight into the client's shared memory (a GPU's, or a system
    /// region's): their tensors carry the name, datatype and shape but no bytes.
    pub in_place: Vec<String>,
    /// The request's inputs, carried back to be freed by whoever drops the response.
    pub spent: Spent,
}

/// A request's input tensors, travelling back with its response ([`Job::answer`]) so that the
/// frontend's thread that answers the client frees them: the thread that read the request and
/// allocated their buffers, in its own malloc arena. Freed on the thread that ran the request
/// (another I/O thread, or the instance's worker), each buffer took the reader's arena lock while
/// the reader was allocating in it: at 256 HTTP connections to one instance, half the waits on
/// glibc's arena locks (`perf`, bench/README.md).
#[derive(Default)]
pub struct Spent(Vec<Tensor>);

impl Clone for Spent {
    /// A copy of a response (the response cache's, an ensemble's) carries nothing back.
    fn clone(&self) -> Self {
        Spent::default()
    }
}

impl std::fmt::Debug for Spent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Spent({} inputs)", self.0.len())
    }
}

impl InferenceResponse {
    /// How many bytes output `t` has: its data's, or for one written in place, what its shape and
    /// (fixed-size) datatype make.
    pub fn output_len(&self, t: &Tensor) -> usize {
        if !self.in_place.contains(&t.name) {
            return t.data.len();
        }
        let elements: i64 = t.shape.iter().product();
        usize::try_from(elements).unwrap_or(0) * t.datatype.element_size().unwrap_or(0)
    }
}

/// What a frontend awaits for a unary request: its one final outcome.
pub type ResponseReceiver = oneshot::Receiver<Result<InferenceResponse, InferError>>;

/// One item of a streamed request: a response (or an error), or — for a decoupled model that
/// completes a request without a response — only the final flag.
#[derive(Debug)]
pub struct StreamItem {
    pub response: Option<Result<InferenceResponse, InferError>>,
    /// True on the request's last item.
    pub final_: bool,
}

/// The most responses a stream holds for a reader that has not taken them yet; past it (or past
/// [`STREAM_BUFFER_BYTES`]) a decoupled backend's next non-final response waits, within its
/// deadline, instead of the host buffering without bound. The final response always goes.
pub const STREAM_BUFFER_RESPONSES: usize = 64;

/// The most bytes of responses a stream holds for its reader (one larger response still goes
/// when nothing is held).
pub const STREAM_BUFFER_BYTES: u64 = 64 << 20;

/// What a stream holds between its sender and its reader, and the signal that it has drained.
#[derive(Default)]
struct StreamBuffer {
    responses: AtomicUsize,
    bytes: AtomicU64,
    drained: Notify,
}

impl StreamBuffer {
    fn put(&self, bytes: u64) {
        self.responses.fetch_add(1, Ordering::AcqRel);
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
    }

    fn take(&self, bytes: u64) {
        self.responses.fetch_sub(1, Ordering::AcqRel);
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.drained.notify_waiters();
    }

    /// Whether one more response of `bytes` may be held now.
    fn has_room(&self, bytes: u64) -> bool {
        let (held, held_bytes) = (self.responses.load(Ordering::Acquire), self.bytes.load(Ordering::Acquire));
        held == 0 || (held < STREAM_BUFFER_RESPONSES && held_bytes + bytes <= STREAM_BUFFER_BYTES)
    }
}

/// An item on a stream channel: which request it belongs to, the item, and what it holds of that
/// request's buffer (given back when the reader takes it).
struct Tagged {
    tag: u64,
    item: StreamItem,
    bytes: u64,
    buffer: Arc<StreamBuffer>,
}

/// A channel streamed requests send their responses into, in the order they are sent: one
/// request's own (see [`ModelVersion::infer_stream`](crate::model::ModelVersion::infer_stream)), or
/// one shared by every request of a gRPC stream, so that responses leave the stream in the order
/// the backends gave them (responses of one batch in the batch's order; a sequence's in its
/// requests' order) as tritonserver's do, not in the order forwarding tasks happen to run.
pub fn stream_channel() -> (StreamTx, StreamReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    (StreamTx { tx }, StreamReceiver { rx })
}

/// The sending side of a [`stream_channel`]: a request takes it [`for_request`](Self::for_request).
#[derive(Clone)]
pub struct StreamTx {
    tx: mpsc::UnboundedSender<Tagged>,
}

impl StreamTx {
    /// Where the request `tag` sends its responses (the tag comes back with each).
    pub fn for_request(&self, tag: u64) -> StreamSink {
        StreamSink { tx: self.tx.clone(), tag, buffer: Arc::new(StreamBuffer::default()) }
    }

    /// Ends request `tag` with `error` before it reached a scheduler (it could not be decoded or
    /// queued): its one final item, in its place among the stream's responses.
    pub fn fail(&self, tag: u64, error: InferError) {
        let item = StreamItem { response: Some(Err(error)), final_: true };
        let _ = self.tx.send(Tagged { tag, item, bytes: 0, buffer: Arc::default() });
    }

    /// Resolves once nobody reads the channel any more.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

/// One request's place on a [`stream_channel`]: its tag and its own buffer accounting.
pub struct StreamSink {
    tx: mpsc::UnboundedSender<Tagged>,
    tag: u64,
    buffer: Arc<StreamBuffer>,
}

impl StreamSink {
    fn send(&self, item: StreamItem, bytes: u64) -> Result<(), ()> {
        self.buffer.put(bytes);
        let tagged = Tagged { tag: self.tag, item, bytes, buffer: self.buffer.clone() };
        self.tx.send(tagged).map_err(|_| ())
    }
}

/// What a frontend reads for streamed requests (gRPC ModelStreamInfer): each response, as the
/// backends sent them. Taking one makes room for its request's next.
pub struct StreamReceiver {
    rx: mpsc::UnboundedReceiver<Tagged>,
}

impl StreamReceiver {
    /// The next item, or `None` once every sender is gone.
    pub async fn recv(&mut self) -> Option<StreamItem> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next item and the tag of its request, or `None` once every sender is gone.
    pub async fn recv_tagged(&mut self) -> Option<(u64, StreamItem)> {
        std::future::poll_fn(|cx| self.poll_recv_tagged(cx)).await
    }

    /// Polls for the next item (see [`recv`](Self::recv)).
    pub fn poll_recv(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<StreamItem>> {
        self.poll_recv_tagged(cx).map(|item| item.map(|(_, item)| item))
    }

    /// Polls for the next item and its tag (see [`recv_tagged`](Self::recv_tagged)).
    pub fn poll_recv_tagged(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<(u64, StreamItem)>> {
        self.rx.poll_recv(cx).map(|tagged| {
            tagged.map(|Tagged { tag, item, bytes, buffer }| {
                buffer.take(bytes);
                (tag, item)
            })
        })
    }
}

/// Why a non-final response was not sent.
#[derive(Debug)]
pub enum PartialRefused {
    /// The stream holds as much as it may for its reader: wait until it has
    /// [`drained`](ResponseSender::drained) enough, and send the response again (boxed: rare,
    /// and the response is large).
    Full(Box<InferenceResponse>),
    /// Nobody reads the stream any more: its client cancelled or went away.
    Cancelled,
    /// Not a stream that takes this response (a unary request, a complete one).
    Refused(&'static str),
}

/// The bytes a response holds a stream's buffer with: its tensors and its parameters.
fn response_bytes(response: &InferenceResponse) -> u64 {
    let tensors: usize = response.outputs.iter().map(|t| t.data.len()).sum();
    let parameters: usize = response
        .parameters
        .iter()
        .map(|(k, v)| k.len() + if let ParamValue::String(s) = v { s.len() } else { 8 })
        .sum();
    (tensors + parameters) as u64
}

enum Sink {
    Unary(oneshot::Sender<Result<InferenceResponse, InferError>>),
    Stream(StreamSink),
    /// A padding request's (an empty sequence slot's): whatever it is sent goes nowhere.
    Discard,
}

/// What a backend of a model that is not decoupled sent before completing a request: Triton lets it
/// send several responses and the final flag after them (its repeat backend does), and its
/// frontends settle them when the request completes ([`Early::settle`]).
struct Early {
    first: InferenceResponse,
    /// Responses sent so far, the first included.
    count: u32,
}

impl Early {
    /// The request's outcome once it completes, with `last` the response that came with the final
    /// flag, if one did. A unary request (HTTP, gRPC `ModelInfer`, a model's call of another) takes
    /// exactly one response, so more than one is the error tritonserver's frontends give ("expected
    /// a single response, got N", src/http_server.cc and src/grpc/infer_handler.cc); a stream
    /// answers with the first response alone, as tritonserver's gRPC stream writes only the first of
    /// a non-decoupled request's (src/grpc/infer_handler.h `WriteResponseIfReady`, server PR #7265).
    fn settle(self, last: Option<InferenceResponse>, unary: bool) -> Result<InferenceResponse, InferError> {
        let count = self.count + u32::from(last.is_some());
        if unary && count > 1 {
            return Err(InferError::internal(format!("expected a single response, got {count}")));
        }
        Ok(self.first)
    }
}

/// The final outcome of a request, held until the worker flushes it.
enum Final {
    Outcome(Result<InferenceResponse, InferError>),
    /// Completed without a response (decoupled models only).
    FlagOnly,
}

/// Where a request's responses go. It enforces "exactly one final response": sending after the
/// final one is refused, and dropping it unanswered makes the frontend see an error instead of a
/// hang. The final response is held until [`flush`](Self::flush) (or drop), so the instance worker
/// can record the execution's statistics before any client sees its answer. A decoupled model's
/// non-final responses go out at once.
pub struct ResponseSender {
    sink: Option<Sink>,
    held: Option<Final>,
    /// A model that is not decoupled: the responses its backend sent before completing the
    /// request (see [`send_early`](Self::send_early)). Boxed: rare, and every request's sender
    /// moves through the queues.
    early: Option<Box<Early>>,
    stats: Arc<ModelStats>,
    arrived: Instant,
    /// For decoupled models: responses sent so far and when the last one went, for
    /// `response_stats`.
    responses: Option<(u64, Instant)>,
    /// The model's trace record of a traced request.
    trace: Option<TraceNode>,
    /// Whether a response has gone out (the first one is timed for the first-response histogram).
    answered: bool,
    /// Called with the final response (`None` for an error or a flag-only completion) as it is
    /// delivered, before the client can see it: the response cache keeps it there.
    on_final: Option<FinalHook>,
    /// The held final outcome as the statistics count it, recorded at [`flush`](Self::flush): a
    /// request's duration ends where tritonserver's does, when it is released after its
    /// execution was recorded (so it always covers its compute time, even when the backend ran
    /// on after giving its final response).
    to_record: Option<Result<(), crate::metrics::FailureReason>>,
}

/// What a request's sender calls with its final response ([`ResponseSender::on_final`]).
pub type FinalHook = Box<dyn FnOnce(Option<&InferenceResponse>) + Send + Sync>;

impl std::fmt::Debug for ResponseSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseSender").field("complete", &self.is_complete()).finish()
    }
}

impl ResponseSender {
    /// A sender for a request that expects exactly one response, and the frontend's receiver.
    /// The outcome is recorded in `stats` when the final response is delivered.
    pub fn unary(stats: Arc<ModelStats>) -> (Self, ResponseReceiver) {
        let (tx, rx) = oneshot::channel();
        let now = Instant::now();
        (
            ResponseSender {
                sink: Some(Sink::Unary(tx)),
                held: None,
                early: None,
                stats,
                arrived: now,
                responses: None,
                trace: None,
                answered: false,
                on_final: None,
                to_record: None,
            },
            rx,
        )
    }

    /// A sender for a streamed request, which may receive several responses when the model is
    /// `decoupled` (whose responses are then counted in `response_stats`), into `sink`.
    pub fn stream(stats: Arc<ModelStats>, decoupled: bool, sink: StreamSink) -> Self {
        let now = Instant::now();
        let responses = decoupled.then_some((0, now));
        ResponseSender {
            sink: Some(Sink::Stream(sink)),
            held: None,
            early: None,
            stats,
            arrived: now,
            responses,
            trace: None,
            answered: false,
            on_final: None,
            to_record: None,
        }
    }

    /// A sender for a padding request the scheduler adds to fill an empty sequence slot: the
    /// backend answers it like any other, the answer is dropped and counted nowhere.
    pub fn discard(stats: Arc<ModelStats>) -> Self {
        ResponseSender {
            sink: Some(Sink::Discard),
            held: None,
            early: None,
            stats,
            arrived: Instant::now(),
            responses: None,
            trace: None,
            answered: false,
            on_final: None,
            to_record: None,
        }
    }

    /// When the request arrived (the sender was made): the start of its queue time.
    pub fn arrived(&self) -> Instant {
        self.arrived
    }

    /// Calls `hook` with the final response as it is delivered (see [`FinalHook`]).
    pub fn on_final(&mut self, hook: FinalHook) {
        self.on_final = Some(hook);
    }

    /// Records the request into `trace` (REQUEST_START: when it arrived here, at `model`).
    pub fn trace_into(&mut self, trace: &Trace, model: &Arc<str>, version: i64, request_id: &str) {
        self.trace = Some(trace.start(model, version, request_id, self.arrived));
    }

    /// The request's trace record, when it is traced.
    #[inline]
    pub fn trace(&self) -> Option<&TraceNode> {
        self.trace.as_ref()
    }

    /// Whether this is a padding request's sender ([`discard`](Self::discard)).
    pub fn is_padding(&self) -> bool {
        matches!(self.sink, Some(Sink::Discard))
    }

    /// The outputs of the final response, while it is held (for the scheduler to take implicit
    /// state out of it before the client sees it).
    pub fn held_outputs_mut(&mut self) -> Option<&mut Vec<Tensor>> {
        match &mut self.held {
            Some(Final::Outcome(Ok(response))) => Some(&mut response.outputs),
            _ => None,
        }
    }

    /// Counts a decoupled model's response in `response_stats`, and times the first response of
    /// any request (flag-only completions are not responses).
    fn count_response(&mut self, kind: ResponseKind) {
        if !self.answered && kind != ResponseKind::Empty {
            self.answered = true;
            self.stats.record_first_response(self.arrived);
        }
        if let Some((index, last)) = &mut self.responses {
            let now = Instant::now();
            self.stats.record_response(*index, kind, now - *last);
            *index += 1;
            *last = now;
        }
    }

    /// Whether nobody waits for this request's responses any more: the frontend dropped its
    /// receiver (the client disconnected or cancelled) — the backend may stop working on it.
    /// False once the request is complete, and for padding requests.
    pub fn is_cancelled(&self) -> bool {
        if self.is_complete() {
            return false;
        }
        match &self.sink {
            Some(Sink::Unary(tx)) => tx.is_closed(),
            Some(Sink::Stream(sink)) => sink.tx.is_closed(),
            Some(Sink::Discard) | None => false,
        }
    }

    /// Resolves once the request is cancelled (see [`is_cancelled`](Self::is_cancelled)); never
    /// for a complete or padding request.
    pub async fn cancelled(&mut self) {
        if self.is_complete() {
            return std::future::pending().await;
        }
        match &mut self.sink {
            Some(Sink::Unary(tx)) => tx.closed().await,
            Some(Sink::Stream(sink)) => sink.tx.closed().await,
            Some(Sink::Discard) | None => std::future::pending().await,
        }
    }

    /// Whether the request failed with an internal error (the backend's fault: a trap, a limit, an
    /// invalid response), while its final outcome is held.
    pub fn failed_internally(&self) -> bool {
        matches!(&self.held, Some(Final::Outcome(Err(e))) if e.kind == crate::error::ErrorKind::Internal)
    }

    /// Whether the final response has been given.
    pub fn is_complete(&self) -> bool {
        self.held.is_some() || self.sink.is_none()
    }

    fn finish(&mut self, last: Final) -> bool {
        self.finish_as(last, None)
    }

    /// Completes the request; a failure counts as `reason` when given, else by its error's kind.
    fn finish_as(&mut self, last: Final, reason: Option<crate::metrics::FailureReason>) -> bool {
        if self.is_complete() {
            return false;
        }
        if self.is_padding() {
            self.held = Some(last);
            return true;
        }
        let outcome = match &last {
            Final::Outcome(Err(e)) => Err(reason.unwrap_or(crate::metrics::FailureReason::of(e.kind))),
            _ => Ok(()),
        };
        self.count_response(match &last {
            Final::Outcome(Ok(_)) => ResponseKind::Success,
            Final::Outcome(Err(e)) if e.kind == crate::error::ErrorKind::Cancelled => ResponseKind::Cancel,
            Final::Outcome(Err(_)) => ResponseKind::Fail,
            Final::FlagOnly => ResponseKind::Empty,
        });
        self.to_record = Some(outcome);
        self.held = Some(last);
        true
    }

    /// Gives the final outcome (delivered at [`flush`](Self::flush)). Returns `false` when the
    /// request was already complete.
    pub fn send_final(&mut self, outcome: Result<InferenceResponse, InferError>) -> bool {
        // An error wins over responses sent before it: the client learns the request failed.
        let outcome = match (self.early.take(), outcome) {
            (Some(early), Ok(last)) => (*early).settle(Some(last), self.is_unary()),
            (_, outcome) => outcome,
        };
        self.finish(Final::Outcome(outcome))
    }

    /// Whether the request takes exactly one response (see [`Early::settle`]).
    fn is_unary(&self) -> bool {
        matches!(self.sink, Some(Sink::Unary(_)))
    }

    /// Whether the backend sent a response before completing the request (a model that is not
    /// decoupled, see [`send_early`](Self::send_early)).
    pub fn sent_early(&self) -> bool {
        self.early.is_some()
    }

    /// Takes a response sent before the final flag by the backend of a model that is not
    /// decoupled, as Triton allows: the first is kept and the rest counted, and the request's
    /// outcome is settled when it completes ([`Early::settle`]). Refused for a decoupled model's
    /// request (its responses go out at once, [`try_send_partial`](Self::try_send_partial)) and
    /// a complete one.
    pub fn send_early(&mut self, response: InferenceResponse) -> Result<(), &'static str> {
        if self.is_complete() {
            return Err("the request is already complete");
        }
        if self.responses.is_some() {
            return Err("a decoupled model's responses go out as they are sent");
        }
        match &mut self.early {
            Some(early) => early.count = early.count.saturating_add(1),
            None => self.early = Some(Box::new(Early { first: response, count: 1 })),
        }
        Ok(())
    }

    /// Fails the request as rejected by its scheduler (a full queue, a queue timeout): it never
    /// executed, and counts as `REJECTED`. Returns `false` when it was already complete.
    pub fn reject(&mut self, error: InferError) -> bool {
        self.finish_as(Final::Outcome(Err(error)), Some(crate::metrics::FailureReason::Rejected))
    }

    /// Completes the request without a response (TRITONSERVER_RESPONSE_COMPLETE_FINAL alone).
    /// Only streamed requests can end this way.
    pub fn send_final_flag(&mut self) -> Result<(), &'static str> {
        if let Some(early) = self.early.take() {
            let outcome = (*early).settle(None, self.is_unary());
            self.finish(Final::Outcome(outcome));
            return Ok(());
        }
        match self.sink {
            Some(Sink::Stream(..)) if !self.is_complete() => {
                self.finish(Final::FlagOnly);
                Ok(())
            }
            Some(Sink::Discard) if !self.is_complete() => {
                self.finish(Final::FlagOnly);
                Ok(())
            }
            Some(Sink::Unary(_)) => Err("a unary request needs a response"),
            _ => Err("the request is already complete"),
        }
    }

    /// Sends a non-final response at once (decoupled models on a stream), if the stream has room
    /// for it (see [`STREAM_BUFFER_RESPONSES`]); otherwise gives it back, to send again once the
    /// stream has [`drained`](Self::drained).
    pub fn try_send_partial(&mut self, response: InferenceResponse) -> Result<(), PartialRefused> {
        match (&self.sink, self.held.is_some()) {
            (Some(Sink::Stream(sink)), false) => {
                if sink.tx.is_closed() {
                    return Err(PartialRefused::Cancelled);
                }
                let bytes = response_bytes(&response);
                if !sink.buffer.has_room(bytes) {
                    return Err(PartialRefused::Full(Box::new(response)));
                }
                if sink.send(StreamItem { response: Some(Ok(response)), final_: false }, bytes).is_err() {
                    return Err(PartialRefused::Cancelled);
                }
                self.count_response(ResponseKind::Success);
                Ok(())
            }
            (Some(Sink::Discard), false) => Ok(()),
            (Some(Sink::Unary(_)), false) => Err(PartialRefused::Refused("a unary request takes exactly one response")),
            _ => Err(PartialRefused::Refused("the request is already complete")),
        }
    }

    /// Resolves once the stream has room for `pending` (its reader has taken enough), or nobody
    /// reads it any more; at once for anything but a stream: the moment to send a
    /// [`PartialRefused::Full`] response again.
    pub async fn drained(&self, pending: &InferenceResponse) {
        let Some(Sink::Stream(StreamSink { tx, buffer, .. })) = &self.sink else { return };
        let bytes = response_bytes(pending);
        loop {
            // Registered before the buffer is looked at, so that a take in between still wakes it.
            let drained = buffer.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if buffer.has_room(bytes) || tx.is_closed() {
                return;
            }
            tokio::select! {
                () = drained => {}
                () = tx.closed() => return,
            }
        }
    }

    /// Sends a non-final response, waiting while the stream is full (see
    /// [`try_send_partial`](Self::try_send_partial)).
    pub async fn send_partial(&mut self, mut response: InferenceResponse) -> Result<(), PartialRefused> {
        loop {
            match self.try_send_partial(response) {
                Err(PartialRefused::Full(back)) => {
                    response = *back;
                    self.drained(&response).await;
                }
                done => return done,
            }
        }
    }

    /// Delivers the held outcome, as [`flush`](Self::flush), with `inputs` (the request's) taken
    /// into its response if it is one (see [`Spent`]); otherwise `inputs` stay.
    pub fn flush_returning(&mut self, inputs: &mut Vec<Tensor>) {
        if let Some(Final::Outcome(Ok(response))) = &mut self.held {
            response.spent = Spent(std::mem::take(inputs));
        }
        self.flush();
    }

    /// Delivers the final outcome to the frontend, if one was given. A traced request's record
    /// ends here (REQUEST_END): its execution is over and recorded, as tritonserver releases a
    /// request after the backend reported its statistics.
    pub fn flush(&mut self) {
        let Some(last) = self.held.take() else { return };
        if let Some(outcome) = self.to_record.take() {
            self.stats.record_outcome(outcome, self.arrived.elapsed());
        }
        // After the execution (not within a plugin's call, whose deadline the hook's copy would
        // count against), before the client sees the response.
        if let Some(hook) = self.on_final.take() {
            hook(match &last {
                Final::Outcome(Ok(response)) => Some(response),
                _ => None,
            });
        }
        if let Some(trace) = &self.trace {
            let error = match &last {
                Final::Outcome(Err(e)) => Some(e.message.as_str()),
                _ => None,
            };
            trace.finished(Instant::now(), error);
        }
        match self.sink.take() {
            Some(Sink::Unary(tx)) => {
                let outcome = match last {
                    Final::Outcome(o) => o,
                    Final::FlagOnly => Err(InferError::internal("the request completed without a response")),
                };
                let _ = tx.send(outcome);
            }
            Some(Sink::Stream(sink)) => {
                let response = match last {
                    Final::Outcome(o) => Some(o),
                    Final::FlagOnly => None,
                };
                // The final response goes whatever the stream holds: it must never be lost.
                let bytes = match &response {
                    Some(Ok(r)) => response_bytes(r),
                    _ => 0,
                };
                let _ = sink.send(StreamItem { response, final_: true }, bytes);
            }
            Some(Sink::Discard) | None => {}
        }
    }
}

impl Drop for ResponseSender {
    fn drop(&mut self) {
        if !self.is_complete() {
            self.send_final(Err(InferError::internal("the request was dropped without a response")));
        }
        self.flush();
    }
}

/// A validated request on its way through a scheduler, with its response sender.
#[derive(Debug)]
pub struct Job {
    pub request: InferenceRequest,
    pub sender: ResponseSender,
    /// When the request entered the scheduler's queue.
    pub enqueued: Instant,
}

impl Job {
    /// Fails the request unless it is already complete.
    pub fn fail(&mut self, error: InferError) {
        self.sender.send_final(Err(error));
    }

    /// Delivers the request's held answer, its inputs carried back with a response (see
    /// [`Spent`]).
    pub fn answer(&mut self) {
        self.sender.flush_returning(&mut self.request.inputs);
    }

    /// Fails the request as rejected by its scheduler, unless it is already complete.
    pub fn reject(&mut self, error: InferError) {
        self.sender.reject(error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(idx: i32) -> InferenceResponse {
        InferenceResponse {
            model_name: "repeat".into(),
            model_version: 1,
            id: String::new(),
            parameters: Vec::new(),
            outputs: vec![Tensor {
                name: "IDX".into(),
                datatype: DataType::Int32,
                shape: vec![1],
                data: Bytes::copy_from_slice(&idx.to_le_bytes()),
            }],
            in_place: Vec::new(),
            spent: Default::default(),
        }
    }

    fn idx(outcome: Result<InferenceResponse, InferError>) -> Result<i32, String> {
        let r = outcome.map_err(|e| e.message)?;
        let data = &r.outputs[0].data;
        Ok(i32::from_le_bytes([data[0], data[1], data[2], data[3]]))
    }

    /// A unary request of a model that is not decoupled, answered by `send` and flushed.
    fn unary(send: impl FnOnce(&mut ResponseSender)) -> Result<i32, String> {
        let (mut sender, mut rx) = ResponseSender::unary(Arc::new(ModelStats::default()));
        send(&mut sender);
        sender.flush();
        idx(rx.try_recv().expect("one outcome"))
    }

    #[test]
    fn an_answered_request_s_inputs_travel_back_with_its_response_and_a_failed_one_s_stay() {
        let job = |inputs: usize| {
            let (sender, rx) = ResponseSender::unary(Arc::new(ModelStats::default()));
            let input = |k: usize| Tensor {
                name: format!("IN{k}"),
                datatype: DataType::Int32,
                shape: vec![1],
                data: Bytes::from(vec![k as u8; 4]),
            };
            let request = InferenceRequest { inputs: (0..inputs).map(input).collect(), ..Default::default() };
            (Job { request, sender, enqueued: Instant::now() }, rx)
        };
        let (mut answered, mut rx) = job(2);
        answered.sender.send_final(Ok(response(7)));
        answered.answer();
        assert!(answered.request.inputs.is_empty(), "taken by the response");
        let r = rx.try_recv().expect("one outcome").expect("a response");
        let names: Vec<_> = r.spent.0.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["IN0", "IN1"]);
        assert!(r.clone().spent.0.is_empty(), "a copy carries nothing back");
        let (mut failed, mut rx) = job(2);
        failed.fail(InferError::invalid("bad input"));
        failed.answer();
        assert_eq!(failed.request.inputs.len(), 2, "an error carries nothing back");
        assert_eq!(rx.try_recv().expect("one outcome").map_err(|e| e.message).err().as_deref(), Some("bad input"));
        // Not yet answered (a request left for a later run): the inputs stay for it.
        let (mut pending, _rx) = job(1);
        pending.answer();
        assert_eq!(pending.request.inputs.len(), 1);
    }

    #[test]
    fn a_request_is_counted_as_it_is_delivered_not_as_its_backend_answers() {
        let stats = Arc::new(ModelStats::default());
        let counted = |stats: &ModelStats| {
            let s = stats.snapshot("m", 1).inference_stats.expect("inference statistics");
            (s.success.expect("success").count, s.fail.expect("fail").count)
        };
        let (mut ok, mut rx) = ResponseSender::unary(stats.clone());
        ok.send_final(Ok(response(1)));
        assert_eq!(counted(&stats), (0, 0), "held: the backend may still be running");
        assert!(rx.try_recv().is_err());
        ok.flush();
        assert_eq!(counted(&stats), (1, 0));
        assert!(rx.try_recv().is_ok());
        let (mut failed, _rx) = ResponseSender::unary(stats.clone());
        failed.send_final(Err(InferError::invalid("bad input")));
        drop(failed);
        assert_eq!(counted(&stats), (1, 1), "a dropped sender delivers, and counts, its outcome");
    }

    #[test]
    fn a_unary_request_takes_one_early_response_and_refuses_more_as_tritonserver() {
        let one = unary(|s| {
            s.send_early(response(0)).unwrap();
            s.send_final_flag().unwrap();
        });
        assert_eq!(one, Ok(0));
        let four = unary(|s| {
            for i in 0..4 {
                s.send_early(response(i)).unwrap();
            }
            s.send_final_flag().unwrap();
        });
        assert_eq!(four, Err("expected a single response, got 4".into()));
        // an early response then a final one are two responses
        let two = unary(|s| {
            s.send_early(response(0)).unwrap();
            s.send_final(Ok(response(1)));
        });
        assert_eq!(two, Err("expected a single response, got 2".into()));
        // an error after early responses is the request's outcome
        let failed = unary(|s| {
            s.send_early(response(0)).unwrap();
            s.send_final(Err(InferError::invalid("bad input")));
        });
        assert_eq!(failed, Err("bad input".into()));
        // a flag alone still is no answer for a unary request
        let (mut sender, _rx) = ResponseSender::unary(Arc::new(ModelStats::default()));
        assert!(sender.send_final_flag().is_err());
    }

    #[test]
    fn a_stream_gets_the_first_of_a_non_decoupled_requests_responses_once() {
        let (tx, mut rx) = stream_channel();
        let mut sender = ResponseSender::stream(Arc::new(ModelStats::default()), false, tx.for_request(7));
        drop(tx);
        for i in 0..4 {
            sender.send_early(response(10 + i)).unwrap();
        }
        assert!(sender.sent_early() && !sender.is_complete());
        sender.send_final_flag().unwrap();
        assert!(sender.send_early(response(99)).is_err(), "the request is complete");
        drop(sender);
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let items = runtime.block_on(async {
            let mut items = Vec::new();
            while let Some((tag, item)) = rx.recv_tagged().await {
                items.push((tag, item.final_, item.response.map(idx)));
            }
            items
        });
        assert_eq!(items, vec![(7, true, Some(Ok(10)))]);
    }

    #[test]
    fn a_decoupled_models_responses_are_not_held() {
        let (tx, _rx) = stream_channel();
        let mut sender = ResponseSender::stream(Arc::new(ModelStats::default()), true, tx.for_request(0));
        assert!(sender.send_early(response(0)).is_err());
        assert!(sender.try_send_partial(response(0)).is_ok());
    }
}
