//! One call a plugin made to another model: turning the guest's request into the core's, queueing
//! it on the callee's scheduler as a request of its own, and waiting for its answers within the
//! deadline it inherited.
//!
//! Copies: the guest's input bytes are lifted out of its memory once (by wasmtime) into a `Vec`
//! that becomes the callee's `Bytes` without another copy; an output's `Bytes`, held by nobody
//! else once the callee answered, becomes the guest's `Vec` without a copy and is lowered into
//! the guest's memory once.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::oneshot::error::TryRecvError;
use wasmtime_wasi::runtime::in_tokio;

use super::super::bindings::nereus::backend::models::{CallError, CallErrorKind, InferenceRequest, InferenceResponse};
use super::super::bindings::{self, CorrelationId, SequenceFlags};
use super::context::ModelCalls;
use crate::call_chain::ChainError;
use crate::error::{ErrorKind, InferError};
use crate::request::{self, InferenceResponse as CoreResponse, Job, ResponseReceiver, StreamItem, StreamReceiver};
use crate::scheduler::Caller;

/// How often a waiting call looks whether its parent request was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(10);

/// How long a call first polls for a unary callee's answer (yielding the CPU) before it parks its
/// thread: waking a parked thread costs tens of microseconds here, as much as a small model's
/// whole execution (the instance workers' `--instance-poll-us` window, for the same reason).
const ANSWER_POLL: Duration = Duration::from_micros(100);

/// Where a call's answers arrive.
enum Answers {
    /// A model that is not decoupled: one outcome; `None` once taken.
    Unary(Option<ResponseReceiver>),
    /// A decoupled model's stream; `done` once its final item came.
    Stream { rx: StreamReceiver, done: bool },
}

/// The callee's sender went away without an answer.
pub struct Gone;

/// An answer a waiting call got.
pub enum Next {
    Response(InferenceResponse),
    /// The callee completed the request (no further response).
    Done,
}

/// A call in flight. Dropping it drops its receiver, which cancels the callee's request.
pub struct PendingCall {
    parent: u32,
    model: String,
    deadline: Option<Instant>,
    answers: Answers,
    /// Answers taken by `is_ready` before the guest asked for them.
    ready: VecDeque<Result<Next, CallError>>,
}

/// A call's error of `kind`, as the plugin is told.
pub fn error(kind: CallErrorKind, message: impl Into<String>) -> CallError {
    CallError { kind, message: message.into() }
}

/// The kind a plugin is told for an error of the core.
fn kind_of(e: &InferError) -> CallErrorKind {
    match e.kind {
        ErrorKind::InvalidArg => CallErrorKind::InvalidArgument,
        ErrorKind::NotFound => CallErrorKind::NotFound,
        ErrorKind::Unavailable | ErrorKind::Unknown => CallErrorKind::Unavailable,
        ErrorKind::Unsupported => CallErrorKind::Unsupported,
        ErrorKind::Cancelled => CallErrorKind::Cancelled,
        ErrorKind::Timeout => CallErrorKind::Timeout,
        ErrorKind::Internal | ErrorKind::Restricted | ErrorKind::UnsupportedEncoding | ErrorKind::AlreadyExists => {
            CallErrorKind::Internal
        }
    }
}

fn call_error(model: &str, e: InferError) -> CallError {
    error(kind_of(&e), format!("model '{model}': {}", e.message))
}

fn response(r: CoreResponse) -> InferenceResponse {
    InferenceResponse {
        outputs: r
            .outputs
            .into_iter()
            .map(|t| bindings::Tensor {
                name: t.name,
                datatype: t.datatype.into(),
                shape: t.shape,
                // No copy when the callee's response held the only reference (the usual case).
                data: Vec::from(t.data),
            })
            .collect(),
        parameters: r.parameters.iter().map(|(k, v)| bindings::Parameter { key: k.clone(), value: v.into() }).collect(),
    }
}

/// The sooner of two deadlines.
fn sooner(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Starts `request` on behalf of `parent` (the batch's request `index`), with the deadline of the
/// caller's execution (`execution_deadline`), priority, trace and call chain.
pub fn start(
    context: &ModelCalls,
    parent: &Job,
    index: u32,
    wanted: InferenceRequest,
    execution_deadline: Option<Instant>,
) -> Result<PendingCall, CallError> {
    let now = Instant::now();
    let own = (wanted.timeout_ms > 0).then(|| now + Duration::from_millis(wanted.timeout_ms));
    let deadline = sooner(own, execution_deadline);
    let calls = parent.request.calls.enter(&context.model, &wanted.model, deadline).map_err(|e| match e {
        ChainError::Cycle(m) => error(CallErrorKind::Cycle, m),
        ChainError::TooDeep(m) => error(CallErrorKind::TooDeep, m),
    })?;
    let models =
        context.models.upgrade().ok_or_else(|| error(CallErrorKind::Unavailable, "the server is shutting down"))?;
    let version = (wanted.version > 0).then_some(wanted.version);
    let callee = models.version(&wanted.model, version).map_err(|e| call_error(&wanted.model, e))?;
    // The callee's queue may honour a timeout: what is left of the deadline.
    let timeout_us = calls.deadline.map_or(0, |d| d.saturating_duration_since(now).as_micros().max(1) as u64);
    let model = wanted.model;
    let core = request::InferenceRequest {
        model_name: model.clone(),
        model_version: version,
        id: parent.request.id.clone(),
        correlation_id: match wanted.correlation_id {
            CorrelationId::None => request::CorrelationId::None,
            CorrelationId::Numeric(n) => request::CorrelationId::Numeric(n),
            CorrelationId::Text(s) => request::CorrelationId::Text(s),
        }
        .normalized(),
        sequence_start: wanted.flags.contains(SequenceFlags::START),
        sequence_end: wanted.flags.contains(SequenceFlags::END),
        priority: parent.request.priority,
        timeout_us,
        parameters: wanted.parameters.into_iter().map(|p| (p.key, p.value.into())).collect(),
        inputs: wanted
            .inputs
            .into_iter()
            .map(|t| request::Tensor {
                name: t.name,
                datatype: t.datatype.into(),
                shape: t.shape,
                data: Bytes::from(t.data),
            })
            .collect(),
        requested_outputs: wanted.requested_outputs,
        trace: parent.sender.trace().map(|t| t.child()),
        calls,
        shm_inputs: Default::default(),
        device_inputs: Default::default(),
        device_outputs: Default::default(),
        host_outputs: Vec::new(),
    };
    let deadline = core.calls.deadline;
    // A called ensemble spawns its steps on the server's runtime.
    let _reactor = context.reactor.as_ref().map(|r| r.enter());
    let answers = if callee.is_decoupled() {
        let rx = callee.infer_stream(core, Caller::Waiting).map_err(|e| call_error(&model, e))?;
        Answers::Stream { rx, done: false }
    } else {
        Answers::Unary(Some(callee.infer(core, "a plugin's call", Caller::Waiting).map_err(|e| call_error(&model, e))?))
    };
    Ok(PendingCall { parent: index, model, deadline, answers, ready: VecDeque::new() })
}

impl PendingCall {
    pub fn parent(&self) -> u32 {
        self.parent
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn is_stream(&self) -> bool {
        matches!(self.answers, Answers::Stream { .. })
    }

    /// Whether the guest has taken every answer: the host holds nothing more of the call.
    pub fn is_spent(&self) -> bool {
        self.ready.is_empty() && matches!(self.answers, Answers::Unary(None) | Answers::Stream { done: true, .. })
    }

    /// Whether an answer (or the end) is there without waiting.
    pub fn is_ready(&mut self) -> bool {
        if !self.ready.is_empty() {
            return true;
        }
        let model = self.model.clone();
        let taken = match &mut self.answers {
            Answers::Unary(None) | Answers::Stream { done: true, .. } => return true,
            Answers::Unary(Some(rx)) => {
                rx.now_or_never().map(|outcome| Self::unary(&model, Some(outcome.map_err(|_| Gone))))
            }
            Answers::Stream { rx, done } => std::future::poll_fn(|cx| rx.poll_recv(cx))
                .now_or_never()
                .map(|item| Self::streamed(&model, item, done)),
        };
        if let Some(answer) = taken {
            if matches!(self.answers, Answers::Unary(_)) {
                self.answers = Answers::Unary(None);
            }
            self.ready.push_back(answer);
            return true;
        }
        false
    }

    fn unary(model: &str, outcome: Option<Result<Result<CoreResponse, InferError>, Gone>>) -> Result<Next, CallError> {
        match outcome {
            Some(Ok(Ok(r))) => Ok(Next::Response(response(r))),
            Some(Ok(Err(e))) => Err(call_error(model, e)),
            Some(Err(_)) | None => Err(error(CallErrorKind::Internal, format!("model '{model}' gave no response"))),
        }
    }

    fn streamed(model: &str, item: Option<StreamItem>, done: &mut bool) -> Result<Next, CallError> {
        match item {
            Some(StreamItem { response: answer, final_ }) => {
                *done = final_;
                match answer {
                    Some(Ok(r)) => Ok(Next::Response(response(r))),
                    Some(Err(e)) => {
                        *done = true;
                        Err(call_error(model, e))
                    }
                    None => Ok(Next::Done),
                }
            }
            None => {
                *done = true;
                Err(error(CallErrorKind::Internal, format!("model '{model}' ended without its final response")))
            }
        }
    }

    /// Waits for the next answer until the deadline, or until `cancelled` says the parent
    /// request's client has gone; either ends the call.
    pub fn next(&mut self, cancelled: &dyn Fn() -> bool) -> Result<Next, CallError> {
        if let Some(answer) = self.ready.pop_front() {
            return answer;
        }
        let (model, deadline) = (self.model.clone(), self.deadline);
        let answer = match &mut self.answers {
            Answers::Unary(None) | Answers::Stream { done: true, .. } => return Ok(Next::Done),
            Answers::Unary(Some(rx)) => {
                let polled = Instant::now() + ANSWER_POLL;
                let early = loop {
                    match rx.try_recv() {
                        Ok(outcome) => break Some(Ok(outcome)),
                        Err(TryRecvError::Empty) if Instant::now() < polled => std::thread::yield_now(),
                        Err(TryRecvError::Empty) => break None,
                        Err(TryRecvError::Closed) => break Some(Err(Gone)),
                    }
                };
                let outcome = match early {
                    Some(outcome) => Ok(outcome),
                    None => in_tokio(wait_within(deadline, cancelled, &model, rx)).map(|o| o.map_err(|_| Gone)),
                };
                self.answers = Answers::Unary(None);
                outcome.and_then(|o| Self::unary(&model, Some(o)))
            }
            Answers::Stream { rx, done } => {
                let item = in_tokio(wait_within(deadline, cancelled, &model, rx.recv()));
                item.and_then(|item| Self::streamed(&model, item, done))
            }
        };
        if let Err(e) = &answer
            && matches!(e.kind, CallErrorKind::Timeout | CallErrorKind::Cancelled)
        {
            // Dropping the receiver cancels the callee's request.
            self.answers = Answers::Unary(None);
        }
        answer
    }
}

/// Awaits `answer` until `deadline`, looking every [`CANCEL_POLL`] whether the parent was
/// cancelled.
async fn wait_within<F: std::future::Future>(
    deadline: Option<Instant>,
    cancelled: &dyn Fn() -> bool,
    model: &str,
    answer: F,
) -> Result<F::Output, CallError> {
    tokio::pin!(answer);
    loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| d <= now) {
            return Err(error(
                CallErrorKind::Timeout,
                format!("model '{model}' did not answer before the caller's deadline; the call was cancelled"),
            ));
        }
        let until = deadline.map_or(now + CANCEL_POLL, |d| d.min(now + CANCEL_POLL));
        if let Ok(output) = tokio::time::timeout_at(until.into(), &mut answer).await {
            return Ok(output);
        }
        if cancelled() {
            return Err(error(
                CallErrorKind::Cancelled,
                format!("the request calling model '{model}' was cancelled; so was the call"),
            ));
        }
    }
}
