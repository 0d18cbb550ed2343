//! Calling other models from `execute` (business logic scripting, `nereus:backend/models`, needs a
//! host with `nereus:backend@1.2.0`): build a [`ModelRequest`] on behalf of a request of the batch,
//! then [`infer`](ModelRequest::infer) it, or [`start`](ModelRequest::start) several and
//! [`wait`](PendingCall::wait) for each (fan-out), or read a decoupled model's responses with
//! [`next`](PendingCall::next).
//!
//! The model's `config.pbtxt` must allow the calls:
//! `parameters { key: "sandbox.callable_models" value: { string_value: "simple,other" } }` (or `*`).
use crate::bindings::nereus::backend::models::{
    self as raw, CallError as RawCallError, InferenceRequest as RawRequest, InferenceResponse as RawResponse,
};
use crate::bindings::nereus::backend::types::{CorrelationId, ErrorKind, Parameter, ParameterValue, SequenceFlags};
use crate::{Request, Tensor};

pub use raw::CallErrorKind;

/// Why a call failed: its kind and the host's message (which names the model).
#[derive(Clone, Debug, PartialEq)]
pub struct CallError {
    pub kind: CallErrorKind,
    pub message: String,
}

impl CallError {
    /// The error kind to fail the calling request with when passing the failure on
    /// ([`Request::fail_call`]): the callee's own kind where it has one; a call the host refused
    /// (policy, cycle, depth) is the server's fault (internal); a deadline or cancellation makes
    /// the model unavailable for this request.
    pub fn error_kind(&self) -> ErrorKind {
        match self.kind {
            CallErrorKind::InvalidArgument => ErrorKind::InvalidArgument,
            CallErrorKind::Unsupported => ErrorKind::Unsupported,
            CallErrorKind::NotFound
            | CallErrorKind::Unavailable
            | CallErrorKind::Timeout
            | CallErrorKind::Cancelled => ErrorKind::Unavailable,
            CallErrorKind::Internal | CallErrorKind::NotAllowed | CallErrorKind::Cycle | CallErrorKind::TooDeep => {
                ErrorKind::Internal
            }
        }
    }

    /// The kind as the WIT names it (`not-allowed`, `cycle`, …).
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            CallErrorKind::InvalidArgument => "invalid-argument",
            CallErrorKind::NotFound => "not-found",
            CallErrorKind::Unavailable => "unavailable",
            CallErrorKind::Unsupported => "unsupported",
            CallErrorKind::Internal => "internal",
            CallErrorKind::NotAllowed => "not-allowed",
            CallErrorKind::Cycle => "cycle",
            CallErrorKind::TooDeep => "too-deep",
            CallErrorKind::Timeout => "timeout",
            CallErrorKind::Cancelled => "cancelled",
        }
    }
}

impl From<RawCallError> for CallError {
    fn from(e: RawCallError) -> Self {
        CallError { kind: e.kind, message: e.message }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.kind_name())
    }
}

impl std::error::Error for CallError {}

/// So that `?` passes a failed call on as `execute`'s error.
impl From<CallError> for String {
    fn from(e: CallError) -> String {
        e.to_string()
    }
}

/// A request to another model, made on behalf of one request of the batch (whose deadline,
/// priority, cancellation and call chain it inherits).
pub struct ModelRequest {
    parent: u32,
    raw: RawRequest,
}

impl ModelRequest {
    /// A request to `model` (its current version, every output) on behalf of `parent`.
    pub fn new(parent: &Request, model: &str) -> Self {
        ModelRequest {
            parent: parent.index(),
            raw: RawRequest {
                model: model.to_string(),
                version: -1,
                inputs: Vec::new(),
                requested_outputs: Vec::new(),
                parameters: Vec::new(),
                correlation_id: CorrelationId::None,
                flags: SequenceFlags::empty(),
                timeout_ms: 0,
            },
        }
    }

    /// A specific version of the model.
    pub fn version(mut self, version: i64) -> Self {
        self.raw.version = version;
        self
    }

    /// Adds an input (its name is the callee's input name). The bytes cross to the host once.
    pub fn input(mut self, tensor: Tensor) -> Self {
        self.raw.inputs.push(tensor.into_raw());
        self
    }

    /// Asks for `name` (by default every output of the model comes back).
    pub fn output(mut self, name: &str) -> Self {
        self.raw.requested_outputs.push(name.to_string());
        self
    }

    /// Adds a custom request parameter for the callee.
    pub fn parameter(mut self, key: impl Into<String>, value: ParameterValue) -> Self {
        self.raw.parameters.push(Parameter { key: key.into(), value });
        self
    }

    /// Sends the request as part of sequence `id`, with its start and end flags (a stateful,
    /// sequence-batched callee).
    pub fn sequence(mut self, id: CorrelationId, flags: SequenceFlags) -> Self {
        self.raw.correlation_id = id;
        self.raw.flags = flags;
        self
    }

    /// Gives the call at most `ms` milliseconds (never more than the caller's own deadline).
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.raw.timeout_ms = ms;
        self
    }

    /// Runs the request and waits for its one response.
    pub fn infer(self) -> Result<ModelResponse, CallError> {
        raw::infer(self.parent, &self.raw).map(ModelResponse::from_raw).map_err(CallError::from)
    }

    /// Starts the request without waiting: start several, then wait for each.
    pub fn start(self) -> Result<PendingCall, CallError> {
        raw::PendingCall::start(self.parent, &self.raw).map(PendingCall).map_err(CallError::from)
    }
}

/// A call in flight. Dropping it cancels the call if it has not finished.
pub struct PendingCall(raw::PendingCall);

impl PendingCall {
    /// Waits for the one response of a model that is not decoupled.
    pub fn wait(self) -> Result<ModelResponse, CallError> {
        self.0.wait().map(ModelResponse::from_raw).map_err(CallError::from)
    }

    /// Waits for the next response (a decoupled model's, one by one); `None` once the callee has
    /// completed the request.
    pub fn next(&self) -> Option<Result<ModelResponse, CallError>> {
        self.0.next().map(|r| r.map(ModelResponse::from_raw).map_err(CallError::from))
    }

    /// Whether `wait` or `next` would answer at once.
    pub fn is_ready(&self) -> bool {
        self.0.is_ready()
    }
}

/// A response of a called model.
#[derive(Debug)]
pub struct ModelResponse {
    outputs: Vec<Tensor>,
    parameters: Vec<Parameter>,
}

impl ModelResponse {
    fn from_raw(raw: RawResponse) -> Self {
        ModelResponse { outputs: raw.outputs.into_iter().map(Tensor).collect(), parameters: raw.parameters }
    }

    pub fn outputs(&self) -> &[Tensor] {
        &self.outputs
    }

    /// An output by name.
    pub fn output(&self, name: &str) -> Result<&Tensor, String> {
        self.outputs.iter().find(|t| t.name() == name).ok_or_else(|| format!("the response has no output '{name}'"))
    }

    /// Takes an output out of the response, without copying it, e.g. to pass it to the next
    /// model or into the caller's own response (rename it with [`Tensor::renamed`]).
    pub fn take_output(&mut self, name: &str) -> Result<Tensor, String> {
        let pos = self
            .outputs
            .iter()
            .position(|t| t.name() == name)
            .ok_or_else(|| format!("the response has no output '{name}'"))?;
        Ok(self.outputs.swap_remove(pos))
    }

    pub fn parameters(&self) -> &[Parameter] {
        &self.parameters
    }

    /// A response parameter by key.
    pub fn parameter(&self, key: &str) -> Option<&ParameterValue> {
        self.parameters.iter().find(|p| p.key == key).map(|p| &p.value)
    }
}

impl Request {
    /// A request to `model` on behalf of this one (see [`ModelRequest`]).
    pub fn call(&self, model: &str) -> ModelRequest {
        ModelRequest::new(self, model)
    }

    /// Fails this request with a failed call's error, passed on with its kind
    /// ([`CallError::error_kind`]).
    pub fn fail_call(&self, error: &CallError) -> Result<(), String> {
        self.fail_with(error.error_kind(), &error.to_string())
    }
}
