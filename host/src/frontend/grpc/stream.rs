//! `ModelStreamInfer`: many requests on one bidirectional stream, each answered (one response, or
//! several from a decoupled model, or an error in `error_message`) as it completes.
//!
//! Two tasks per stream. The reader decodes each request in stream order and queues it, so a
//! sequence's requests reach its scheduler in the order they were sent. Every request answers
//! into one channel the stream shares ([`request::stream_channel`]), tagged with its place on the
//! stream; the writer forwards that channel to the client in the order the backends answered, as
//! tritonserver writes each response when its backend completes it: the requests of one batch in
//! the batch's order, a sequence's in its requests' order. (A task per request, as before, sent
//! a batch's answers in whatever order the tasks ran; Triton's own tests read them by position.)
//! A message that cannot be read (it does not decode, or the body ends inside it) stops the
//! reading; its status ends the stream once every request read before it has been answered, so
//! that none of them loses its answer to a later message's fault.
//!
//! A client that keeps its connection but stops reading stops the writer once HTTP/2's flow
//! control and the buffers before it are full. Everything waiting to answer on the stream then
//! waits with it: a decoupled model's responses, an ensemble's request (and with it the
//! ensemble's `max_inflight_requests` share and an unload waiting for it). The wait is for room in
//! the channel to the client, which frees as the client takes each message: a client reading
//! slowly but steadily is never given up unless one message takes it longer than the timeout.
//! So the writer waits at most `--grpc-stream-stall-timeout-ms` to hand the client a message;
//! past that it gives the stream up as a client that went away, cancelling every request on it.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use super::convert;
use super::{StreamHeaders, start_trace};
use crate::api;
use crate::error::InferError;
use crate::model::ModelVersion;
use crate::proto::inference as pb;
use crate::request::{self, StreamItem, StreamReceiver, StreamTx};
use crate::scheduler::Caller;
use crate::server::{Phase, Server};
use crate::shm::ShmInputs;
use crate::trace::{FrontendEvent, Trace};

type Message = Result<pb::ModelStreamInferResponse, Status>;
type Outgoing = mpsc::Sender<Message>;

/// The stream's requests as they are read: tonic's decoder, or [`super::direct`]'s.
pub(super) trait Incoming:
    Stream<Item = Result<pb::ModelInferRequest, Status>> + Send + Unpin + 'static
{
}
impl<T: Stream<Item = Result<pb::ModelInferRequest, Status>> + Send + Unpin + 'static> Incoming for T {}

/// Serves one stream: reads `incoming`, answers on the returned stream, which ends once the
/// client has finished sending and every request has been answered.
pub(super) fn serve(
    server: Arc<Server>,
    incoming: impl Incoming,
    context: StreamHeaders,
    stall_timeout: Option<Duration>,
) -> ReceiverStream<Result<pb::ModelStreamInferResponse, Status>> {
    let (out, rx) = mpsc::channel(64);
    let (replies, answers) = request::stream_channel();
    let (register, registered) = mpsc::unbounded_channel();
    tokio::spawn(read(server.clone(), incoming, context, replies, register));
    tokio::spawn(write(answers, registered, out, stall_timeout));
    ReceiverStream::new(rx)
}

/// What the writer needs to turn a request's answers into stream messages.
struct Reply {
    id: String,
    /// `triton_enable_empty_final_response`: a decoupled model's flag-only completion is sent as
    /// an empty response marked final.
    empty_final: bool,
    shm_outputs: api::infer::ShmOutputs,
    /// The shared memory its inputs were read from, checked before each answer goes out.
    shm_inputs: ShmInputs,
    classes: api::classification::ClassOutputs,
    /// The model version answering it; `None` for a request refused before it had one.
    model: Option<Arc<ModelVersion>>,
    trace: Option<Trace>,
}

/// What the reader tells the writer.
enum Registered {
    /// A request about to be queued, registered before it is so that the writer knows it before
    /// its first answer arrives.
    Request(u64, Reply),
    /// The stream could not be read on (a message that does not decode, a body cut short): its
    /// status, which ends the stream once every request read before it has been answered.
    Failed(Status),
}

/// Decodes and queues each request in stream order. Each one's [`Reply`] is registered before it
/// is queued, so the writer knows it before its first answer arrives.
async fn read(
    server: Arc<Server>,
    mut incoming: impl Incoming,
    context: StreamHeaders,
    replies: StreamTx,
    register: mpsc::UnboundedSender<Registered>,
) {
    let mut tag = 0u64;
    loop {
        let waiting = server.tracer().is_active().then(Instant::now);
        let message = tokio::select! {
            message = incoming.next() => message,
            // The writer is gone (the client went away): nothing read now could be answered.
            () = replies.closed() => return,
        };
        let Some(message) = message else { return };
        let message = match message {
            Ok(m) => m,
            Err(e) => {
                let _ = register.send(Registered::Failed(e));
                return;
            }
        };
        tag += 1;
        let read = waiting.map(|since| (since, Instant::now()));
        let (reply, queued) = start(&server, message, &context, read);
        let started = match queued {
            Ok((request, model)) => {
                let _ = register.send(Registered::Request(tag, Reply { model: Some(model.clone()), ..reply }));
                model.infer_into(request, Caller::IoThread, replies.for_request(tag))
            }
            Err(e) => {
                let _ = register.send(Registered::Request(tag, reply));
                Err(e)
            }
        };
        if let Err(e) = started {
            replies.fail(tag, e);
        }
    }
}

/// Decodes a request and finds its model: its [`Reply`] (without the model yet), and the request
/// to queue with the model that answers it, or why it cannot be.
#[allow(clippy::type_complexity)]
fn start(
    server: &Server,
    message: pb::ModelInferRequest,
    context: &StreamHeaders,
    read: Option<(Instant, Instant)>,
) -> (Reply, Result<(request::InferenceRequest, Arc<ModelVersion>), InferError>) {
    use pb::infer_parameter::ParameterChoice;
    let id = message.id.clone();
    let empty_final = matches!(
        message.parameters.get("triton_enable_empty_final_response").and_then(|p| p.parameter_choice.as_ref()),
        Some(ParameterChoice::BoolParam(true))
    );
    let trace = start_trace(server, &message, context.trace());
    if let (Some(trace), Some((since, arrived))) = (&trace, read) {
        trace.capture(FrontendEvent::GrpcWaitReadStart, since);
        trace.capture(FrontendEvent::GrpcWaitReadEnd, arrived);
    }
    let (mut shm_outputs, mut shm_inputs, mut classes) = (Vec::new(), ShmInputs::default(), Vec::new());
    let queued = accepting(server).and_then(|()| convert::request(message, server.shm())).and_then(
        |(mut request, places, asked)| {
            (shm_outputs, classes) = (places, asked);
            shm_inputs = std::mem::take(&mut request.shm_inputs);
            request.trace = trace.clone();
            let model = server.model_for(&mut request)?;
            // After the model is found, as tritonserver forwards headers into a request it made.
            context.forward(&mut request)?;
            Ok((request, model))
        },
    );
    (Reply { id, empty_final, shm_outputs, shm_inputs, classes, model: None, trace }, queued)
}

/// Refuses a stream's request once a shutdown has begun, as tritonserver's stream handler does
/// (`accepting_new_conn_`): a stream opened before keeps being answered what it sent until then,
/// but starts nothing new, whatever the request (the rest of a sequence too), so that the
/// shutdown is not held open by a client that keeps sending.
fn accepting(server: &Server) -> Result<(), InferError> {
    match server.phase() {
        Phase::Draining | Phase::Stopping => {
            Err(InferError::unavailable("GRPC server is shutting down and has stopped accepting new requests."))
        }
        Phase::Starting | Phase::Serving => Ok(()),
    }
}

/// Forwards every request's answers to the client, in the order they were given, until the client
/// goes away or leaves a message untaken for `stall_timeout`.
async fn write(
    mut answers: StreamReceiver,
    mut registered: mpsc::UnboundedReceiver<Registered>,
    out: Outgoing,
    stall_timeout: Option<Duration>,
) {
    let mut replies: HashMap<u64, Reply> = HashMap::new();
    let mut failed = None;
    loop {
        // A client that cancels the stream ends this loop at once, and dropping `answers` tells
        // every backend still working on one of its requests (`is-cancelled`).
        let answer = tokio::select! {
            answer = answers.recv_tagged() => answer,
            () = out.closed() => return,
        };
        let Some((tag, item)) = answer else {
            // Every request is answered and the reader is done: the status it stopped at, if any,
            // ends the stream (after those answers, so that each request read gets its own).
            while let Ok(r) = registered.try_recv() {
                if let Registered::Failed(status) = r {
                    failed = Some(status);
                }
            }
            if let Some(status) = failed {
                send_within(&out, Err(status), stall_timeout).await;
            }
            return;
        };
        // Registered before the request was queued, so it is there by now.
        while !replies.contains_key(&tag) {
            match registered.try_recv() {
                Ok(Registered::Request(t, reply)) => _ = replies.insert(t, reply),
                Ok(Registered::Failed(status)) => failed = Some(status),
                Err(_) => break,
            }
        }
        let Some(reply) = replies.get(&tag) else {
            tracing::error!("a streamed answer for request {tag}, which the stream never registered");
            continue;
        };
        let final_ = item.final_;
        let message = reply.message(item);
        if let Some(trace) = &reply.trace {
            let now = Instant::now();
            if final_ {
                trace.capture(FrontendEvent::InferResponseComplete, now);
            }
            trace.capture(FrontendEvent::GrpcSendStart, now);
        }
        let sent = match message {
            Some(message) => match out.try_send(Ok(message)) {
                Ok(()) => true,
                Err(TrySendError::Closed(_)) => false,
                // The client is behind: wait for it (the only timer, so none on the fast path).
                Err(TrySendError::Full(message)) => send_within(&out, message, stall_timeout).await,
            },
            None => true,
        };
        if let Some(trace) = &reply.trace {
            trace.capture(FrontendEvent::GrpcSendEnd, Instant::now());
        }
        if final_ {
            replies.remove(&tag);
        }
        if !sent {
            return;
        }
    }
}

/// Sends `message` once the client has taken enough of the stream, waiting at most `limit`; false
/// when the client went away or stalled. A stalled stream is given up: returning drops the
/// writer's `answers`, so every request still on the stream sees its client gone (`is-cancelled`,
/// an ensemble's `cancelled`) and ends. The client, should it read on, finds the messages sent
/// before, then ABORTED.
async fn send_within(out: &Outgoing, message: Message, limit: Option<Duration>) -> bool {
    let Some(limit) = limit else { return out.send(message).await.is_ok() };
    match tokio::time::timeout(limit, out.send(message)).await {
        Ok(sent) => sent.is_ok(),
        Err(_) => {
            tracing::warn!(
                "gRPC stream: the client took no message for {} ms (--grpc-stream-stall-timeout-ms); \
                 giving the stream up and cancelling the requests still running on it",
                limit.as_millis()
            );
            let status = Status::aborted(format!(
                "the client took no message for {} ms (--grpc-stream-stall-timeout-ms): the stream was given up",
                limit.as_millis()
            ));
            // Queued behind what the client has yet to take; gone with the connection.
            let out = out.clone();
            tokio::spawn(async move { _ = out.send(Err(status)).await });
            false
        }
    }
}

impl Reply {
    /// The stream message for one of the request's answers; `None` for a flag-only completion
    /// the client did not ask to see.
    fn message(&self, item: StreamItem) -> Option<pb::ModelStreamInferResponse> {
        use pb::infer_parameter::ParameterChoice;
        let final_flag = |last: bool| pb::InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(last)) };
        let ok =
            |response| pb::ModelStreamInferResponse { error_message: String::new(), infer_response: Some(response) };
        let Some(model) = &self.model else {
            // Refused before it reached a model: its one answer is the error.
            return match item.response {
                Some(Err(e)) => Some(self.error(e)),
                _ => None,
            };
        };
        match item.response {
            Some(Ok(mut response)) => {
                let shm =
                    self.shm_inputs.check().and_then(|()| api::infer::write_shm_outputs(&response, &self.shm_outputs));
                match shm.and_then(|()| api::classification::apply(&mut response, &self.classes, &model.io)) {
                    Ok(()) => {
                        let mut response = convert::response(response, &self.shm_outputs);
                        if model.is_decoupled() {
                            response.parameters.insert("triton_final_response".into(), final_flag(item.final_));
                        }
                        Some(ok(response))
                    }
                    Err(e) => Some(self.error(e)),
                }
            }
            Some(Err(e)) => Some(self.error(e)),
            None if self.empty_final => {
                let mut response = pb::ModelInferResponse {
                    model_name: model.name.to_string(),
                    model_version: model.version.to_string(),
                    id: self.id.clone(),
                    ..Default::default()
                };
                response.parameters.insert("triton_final_response".into(), final_flag(true));
                Some(ok(response))
            }
            None => None,
        }
    }

    /// An error message; the request id lets the client match it to its request.
    fn error(&self, e: InferError) -> pb::ModelStreamInferResponse {
        pb::ModelStreamInferResponse {
            error_message: e.message,
            infer_response: Some(pb::ModelInferResponse { id: self.id.clone(), ..Default::default() }),
        }
    }
}
