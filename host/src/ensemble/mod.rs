//! Ensembles (`platform: "ensemble"`): one model to clients, a DAG of steps inside. A step is sent
//! to its composing model — through that model's own scheduler, so requests from several ensemble
//! requests are batched there — as soon as every tensor it consumes exists; independent steps run
//! at once and may finish in any order. Tensors pass between steps by reference (the bytes are
//! shared, never copied). The ensemble answers once no further step can run, with the outputs the
//! client asked for; a failing step fails the request with an error naming the step.
mod batch_dims;
pub mod composition;
mod contexts;
mod graph;
mod sequence_order;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::ModelConfig;
use crate::error::InferError;
use crate::model::ModelResolver;
use crate::request::{
    InferenceRequest, InferenceResponse, Job, ResponseReceiver, ResponseSender, StreamItem, StreamReceiver, Tensor,
};
use crate::scheduler::{Caller, Schedule};
use crate::stats::{ExecutionTimes, ModelStats};
use contexts::{Contexts, Held, Tensors};
use sequence_order::{SequenceOrder, Ticket};

/// An ensemble version's scheduler: each request runs the steps on the composing models, which
/// `models` resolves at request time.
pub struct EnsembleScheduler {
    pub ensemble: Arc<Ensemble>,
    pub version: i64,
    pub models: Arc<dyn ModelResolver>,
    pub stats: Arc<ModelStats>,
}

impl Schedule for EnsembleScheduler {
    fn enqueue(&self, job: Job, caller: Caller) {
        self.ensemble.enqueue(job, self.version, self.models.clone(), self.stats.clone(), caller)
    }

    fn queued(&self) -> usize {
        self.ensemble.queued()
    }

    fn in_flight(&self, _executing: usize) -> usize {
        self.ensemble.in_flight.load(Ordering::Acquire)
    }

    fn shutdown(&self) {
        self.ensemble.drain();
    }
}

/// One step: which model it calls and how its inputs and outputs map to the ensemble's tensors.
#[derive(Debug)]
pub struct Step {
    pub model: String,
    /// `None`: the version the model's policy makes current (`model_version: -1`).
    pub version: Option<i64>,
    /// (the model's input, the ensemble tensor it reads)
    pub inputs: Vec<(String, String)>,
    /// (the model's output, the ensemble tensor it writes)
    pub outputs: Vec<(String, String)>,
    /// Steps producing what this one consumes.
    pub depends_on: Vec<usize>,
    /// Whether the model was decoupled at load (several responses per request).
    pub decoupled: bool,
}

pub struct Ensemble {
    name: Arc<str>,
    steps: Vec<Step>,
    batching: bool,
    /// The ensemble's optional inputs: one a request leaves out is absent (see [`contexts`]).
    optional_inputs: Vec<String>,
    /// Each output's dims (its reshape's where it has one), which a tensor from a step is
    /// reshaped against (see [`batch_dims`]).
    output_dims: HashMap<String, Vec<i64>>,
    /// The ensemble's outputs with a `reshape`: (its shape, the `dims` the client sees), undone on
    /// the way out as tritonserver undoes an output's reshape.
    output_reshapes: HashMap<String, (Vec<i64>, Vec<i64>)>,
    /// Some step's model is decoupled: every response it sends drives the steps after it, and the
    /// ensemble answers each time a set of its outputs is complete (so it is decoupled too).
    decoupled: bool,
    /// `max_inflight_requests`: per step, the requests it may have in flight across all ensemble
    /// requests (`None`: no limit).
    limits: Option<Vec<Arc<Semaphore>>>,
    /// Step requests held back by `max_inflight_requests` right now.
    held_back: AtomicUsize,
    /// Requests in flight, so an unload can wait for them.
    in_flight: AtomicUsize,
    drained: (Mutex<()>, Condvar),
    /// Keeps each step's requests of one sequence in the order they arrived (see [`sequence_order`]).
    order: SequenceOrder,
}

/// Where a running step's answers arrive: one response, or a decoupled model's stream of them.
enum Answers {
    Unary(ResponseReceiver),
    Stream(StreamReceiver),
}

/// What a running step reported.
enum StepEvent {
    /// A response; `last` when the step has finished.
    Response(InferenceResponse, bool),
    /// Finished without a further response (a decoupled model's final flag alone).
    Done,
    Failed(InferError),
}

/// A step request in flight, in the context whose tensors it read.
struct Running {
    step: usize,
    context: usize,
    /// Whether the step's model batches: the batch size of the tensors it produces.
    batching: bool,
    answers: Answers,
    /// Released when the step finishes (`max_inflight_requests`).
    _permit: Option<OwnedSemaphorePermit>,
}

impl Running {
    /// Whether the step streams: its responses start contexts of their own instead of adding to
    /// the one it runs in.
    fn streams(&self) -> bool {
        matches!(self.answers, Answers::Stream(_))
    }
}

/// Step launches waiting for `max_inflight_requests`, counted in the ensemble's `held_back` until
/// they launch or the request ends.
struct HeldBack<'a> {
    queue: VecDeque<(usize, usize)>,
    count: &'a AtomicUsize,
}

impl HeldBack<'_> {
    fn push(&mut self, item: (usize, usize)) {
        self.count.fetch_add(1, Ordering::AcqRel);
        self.queue.push_back(item);
    }
}

impl Drop for HeldBack<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(self.queue.len(), Ordering::AcqRel);
    }
}

impl Ensemble {
    fn new(config: &ModelConfig, steps: Vec<Step>) -> Self {
        let max_inflight = crate::config::ensemble_scheduling(config).map_or(0, |e| e.max_inflight_requests);
        let limits =
            (max_inflight > 0).then(|| steps.iter().map(|_| Arc::new(Semaphore::new(max_inflight as usize))).collect());
        Ensemble {
            name: config.name.as_str().into(),
            decoupled: steps.iter().any(|s| s.decoupled),
            steps,
            batching: config.max_batch_size > 0,
            optional_inputs: config.input.iter().filter(|i| i.optional).map(|i| i.name.clone()).collect(),
            output_dims: config
                .output
                .iter()
                .map(|o| (o.name.clone(), o.reshape.as_ref().map_or(&o.dims, |r| &r.shape).clone()))
                .collect(),
            output_reshapes: config
                .output
                .iter()
                .filter_map(|o| Some((o.name.clone(), (o.reshape.as_ref()?.shape.clone(), o.dims.clone()))))
                .collect(),
            limits,
            held_back: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            drained: (Mutex::new(()), Condvar::new()),
            order: SequenceOrder::default(),
        }
    }

    /// Whether a step's model is decoupled, making the ensemble decoupled too.
    pub fn is_decoupled(&self) -> bool {
        self.decoupled
    }

    /// Step requests waiting for `max_inflight_requests` (the ensemble's queue).
    pub fn queued(&self) -> usize {
        self.held_back.load(Ordering::Acquire)
    }

    /// Starts a validated request; its outcome goes to the job's sender. `models` resolves the
    /// composing models at request time (a composing model that became unavailable fails the step).
    ///
    /// The steps whose inputs the request holds are sent to their models here, on the caller's
    /// thread, before this returns, as tritonserver does; the rest of the request runs as a task.
    /// Two requests of one sequence enqueued one after the other thus reach its model in that
    /// order (a task of their own each could start them in either); their later steps keep it
    /// through the request's ticket (see [`sequence_order`]).
    pub fn enqueue(
        self: &Arc<Self>,
        mut job: Job,
        version: i64,
        models: Arc<dyn ModelResolver>,
        stats: Arc<ModelStats>,
        caller: Caller,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return job.fail(InferError::internal("ensembles run on the server's async runtime"));
        };
        let in_flight = InFlight::enter(self);
        let mut ticket = self.order.ticket(&job.request.correlation_id, self.steps.len());
        let this = self.clone();
        let mut request = Box::pin(async move {
            // Counted until the request is over, or its task is dropped unfinished (the runtime
            // shutting down): an unload's `drain` must not wait for a request that will never end.
            let _in_flight = in_flight;
            let mut job = job;
            let started = Instant::now();
            let batch_size = job.request.batch_size(this.batching) as u64;
            let request = std::mem::take(&mut job.request);
            let outcome = this.run(request, version, models.as_ref(), &mut job.sender, caller, ticket.as_mut()).await;
            if outcome.is_ok() {
                // As Triton does for an ensemble: one queue entry and one execution per successful
                // request (perf_analyzer finds the version it measured by its queue count).
                stats.record_queue(started.saturating_duration_since(job.enqueued));
                let times = ExecutionTimes { infer: started.elapsed(), ..Default::default() };
                stats.record_execution(1, batch_size, batch_size, times);
            }
            // A sequence's responses leave in the order its requests came.
            if let Some(ticket) = ticket.as_mut() {
                ticket.first_in_line().await;
            }
            match outcome {
                Ok(Some(response)) => job.sender.send_final(Ok(response)),
                // Every response already went out: only the final flag is left.
                Ok(None) => job.sender.send_final_flag().is_ok(),
                Err(e) => job.sender.send_final(Err(e)),
            };
            job.sender.flush();
            drop(job);
            drop(ticket);
        });
        // The first poll runs up to the first wait: the first steps are launched. Its waker is
        // never woken; the task's first poll polls again with its own, and every future waited on
        // keeps what happened meanwhile (a response in a channel, a permit), so nothing is lost.
        let mut first = std::task::Context::from_waker(std::task::Waker::noop());
        if request.as_mut().poll(&mut first).is_pending() {
            runtime.spawn(request);
        }
    }

    /// Blocks until no request of this ensemble is in flight.
    pub fn drain(&self) {
        let mut guard = self.drained.0.lock();
        while self.in_flight.load(Ordering::Acquire) > 0 {
            self.drained.1.wait_for(&mut guard, std::time::Duration::from_millis(50));
        }
    }

    /// `error`, as the ensemble's error: naming the step it came from, keeping its kind.
    /// A step's error as the ensemble's, in tritonserver's words (the step's own message names
    /// its model where it matters; clients match these messages).
    fn step_error(&self, error: InferError) -> InferError {
        InferError::new(error.kind, format!("in ensemble '{}', {}", self.name, error.message))
    }

    /// Runs the steps as their inputs become available. A unary ensemble returns its one response;
    /// a decoupled one sends each response through `sender` as a set of outputs completes and
    /// returns `None`. A request of a sequence (`ticket`) launches a step only after the earlier
    /// requests of its sequence have (its caller sends its response after theirs).
    async fn run(
        &self,
        request: InferenceRequest,
        version: i64,
        models: &dyn ModelResolver,
        sender: &mut ResponseSender,
        caller: Caller,
        mut ticket: Option<&mut Ticket>,
    ) -> Result<Option<InferenceResponse>, InferError> {
        let InferenceRequest {
            id,
            correlation_id,
            sequence_start,
            sequence_end,
            priority,
            timeout_us,
            parameters,
            inputs,
            requested_outputs,
            calls,
            ..
        } = request;
        let n = self.steps.len();
        // As tritonserver counts an ensemble request's batch: 0 when the ensemble does not batch.
        let request_batch = inputs.first().map_or(0, |t| batch_dims::batch_size(self.batching, &t.shape));
        let mut own: Tensors =
            inputs.into_iter().map(|t| (t.name.clone(), Some(Held::new(t, self.batching)))).collect();
        for name in &self.optional_inputs {
            own.entry(name.clone()).or_insert(None);
        }
        let mut contexts = Contexts::new(own, n);
        // The contexts whose tensors (or an ancestor's) changed since they were last looked at:
        // only there can a step become ready or an answer complete. Looking at every context
        // after every event cost a decoupled step's N responses N² looks.
        let mut changed: Vec<usize> = vec![0];
        let mut running: Vec<Running> = Vec::new();
        // Contexts in which, and below which, the last step just finished: a decoupled ensemble
        // releases them once nothing can read or change them again (see [`contexts`]).
        let mut idle: Vec<usize> = Vec::new();
        let mut held = HeldBack { queue: VecDeque::new(), count: &self.held_back };
        // A slot this request waited for (`max_inflight_requests`), with its step: kept for that
        // step's launch. Dropped and taken again instead, it went to the next request waiting,
        // whose turn it then was, and back: two requests on one thread handed it to each other
        // for ever.
        let mut granted: Option<(usize, OwnedSemaphorePermit)> = None;
        // A traced request's steps are traced below its record, each on its model.
        let step_trace = sender.trace().map(|t| t.child());
        // The first steps are launched from the caller's thread (see `enqueue`), later ones from
        // the request's task on the server's runtime.
        let mut caller = caller;
        let launch =
            |step: usize, context: usize, contexts: &Contexts, permit: Option<OwnedSemaphorePermit>, caller: Caller| {
                let s = &self.steps[step];
                // A request a plugin called carries its chain on through the steps: a step reaching a
                // model already on it (a plugin calling an ensemble that calls the plugin) is a cycle.
                let step_calls = if calls.is_empty() {
                    Default::default()
                } else {
                    match calls.enter(&self.name, &s.model, None) {
                        Ok(chain) => chain,
                        Err(e) => return Err::<Running, InferError>(self.step_error(e.into_infer_error())),
                    }
                };
                let model = models.version(&s.model, s.version).map_err(|e| self.step_error(e))?;
                let batching = model.config.max_batch_size > 0;
                let step_request = InferenceRequest {
                    model_name: s.model.clone(),
                    model_version: s.version,
                    id: id.clone(),
                    correlation_id: correlation_id.clone(),
                    sequence_start,
                    sequence_end,
                    priority,
                    timeout_us,
                    parameters: parameters.clone(),
                    inputs: s
                        .inputs
                        .iter()
                        .filter_map(|(input, tensor)| {
                            let (held, _) = contexts.resolve(context, tensor)?;
                            let dims = model.config.input.iter().find(|i| &i.name == input).map(|i| i.dims.as_slice());
                            held.map(|h| h.meeting(input, dims, batching))
                        })
                        .collect(),
                    requested_outputs: s.outputs.iter().map(|(o, _)| o.clone()).collect(),
                    trace: step_trace.clone(),
                    calls: step_calls,
                    // The ensemble's own request holds the leases of inputs read in place; its
                    // answer is checked against them once every step is done.
                    shm_inputs: Default::default(),
                    device_inputs: Default::default(),
                    device_outputs: Default::default(),
                    host_outputs: Vec::new(),
                };
                let answers = if self.decoupled && model.is_decoupled() {
                    model.infer_stream(step_request, caller).map(Answers::Stream)
                } else {
                    model.infer(step_request, "ensemble", caller).map(Answers::Unary)
                }
                .map_err(|e| self.step_error(e))?;
                Ok::<_, InferError>(Running { step, context, batching, answers, _permit: permit })
            };
        loop {
            // Every step whose inputs now exist, in the deepest context they come from, unless an
            // earlier request of the sequence has yet to launch it.
            let mut out_of_turn = false;
            let mut scan = std::mem::take(&mut changed);
            // Oldest first: a decoupled step's responses are answered, and drive the steps after
            // it, in the order they came.
            scan.sort_unstable_by_key(|&c| contexts.born(c));
            scan.dedup();
            if let Some(t) = ticket.as_mut() {
                t.look();
            }
            for &c in &scan {
                for (i, step) in self.steps.iter().enumerate() {
                    if !contexts[c].launched[i]
                        && contexts.complete_in(c, &mut step.inputs.iter().map(|(_, t)| t.as_str()))
                    {
                        if ticket.as_ref().is_some_and(|t| !t.may_launch(i)) {
                            // Looked at again once the sequence's earlier requests moved on.
                            out_of_turn = true;
                            changed.push(c);
                            continue;
                        }
                        contexts[c].launched[i] = true;
                        // Without `max_inflight_requests` nothing is counted or queued on the way.
                        match self.limits {
                            None => {
                                let step = launch(i, c, &contexts, None, caller)?;
                                contexts.started(c, !step.streams());
                                running.push(step);
                                ticket.as_ref().inspect(|t| t.launched(i));
                            }
                            Some(_) => {
                                contexts.started(c, true);
                                held.push((i, c));
                            }
                        }
                    }
                }
            }
            // Launch what `max_inflight_requests` allows, in order.
            let mut k = 0;
            while k < held.queue.len() {
                let (step, context) = held.queue[k];
                let waited_for = granted.take_if(|(s, _)| *s == step).map(|(_, p)| p);
                let permit = match &self.limits {
                    None => None,
                    Some(limits) => match waited_for.map_or_else(|| limits[step].clone().try_acquire_owned(), Ok) {
                        Ok(p) => Some(p),
                        Err(_) => {
                            k += 1;
                            continue;
                        }
                    },
                };
                held.queue.remove(k);
                self.held_back.fetch_sub(1, Ordering::AcqRel);
                let launched = launch(step, context, &contexts, permit, caller)?;
                if launched.streams() && contexts.streams(context) {
                    // It held the contexts below as one that might add to theirs.
                    contexts.with_descendants(context, &mut idle);
                }
                running.push(launched);
                ticket.as_ref().inspect(|t| t.launched(step));
            }
            if self.decoupled {
                let answer = Answer { requested: &requested_outputs, id: &id, version, request_batch };
                self.answer_complete_contexts(&mut contexts, &scan, &answer, sender).await;
                // After the launches and the answers: what is left of these can no longer change,
                // unless a step waits for its sequence's turn (`changed` holds its context), which
                // may add to a context above any of them: they are kept for a later look.
                idle.extend_from_slice(&scan);
                if changed.is_empty() {
                    contexts.release_idle(&idle);
                    idle.clear();
                } else {
                    idle.sort_unstable();
                    idle.dedup();
                }
            }
            if running.is_empty() && held.queue.is_empty() && !out_of_turn {
                break;
            }
            caller = Caller::IoThread;
            // The next step event or, while launches are held back, a free slot for the first.
            let first_held = held.queue.front().copied();
            let waiting_for = first_held.and_then(|(step, _)| self.limits.as_ref().map(|l| (step, l[step].clone())));
            // `None`: a slot freed up (in `granted`), launch again. A cancelled request (its client
            // is gone) stops here, dropping its running steps' receivers, which their backends can
            // see.
            let closed = |_| InferError::internal("limit closed");
            let waited = async {
                match waiting_for {
                    Some((step, semaphore)) if running.is_empty() => {
                        granted = Some((step, semaphore.acquire_owned().await.map_err(closed)?));
                        Ok(None)
                    }
                    Some((step, semaphore)) => tokio::select! {
                        event = next_event(&mut running) => Ok(Some(event)),
                        permit = semaphore.acquire_owned() => {
                            granted = Some((step, permit.map_err(closed)?));
                            Ok(None)
                        }
                    },
                    None => Ok(Some(next_event(&mut running).await)),
                }
            };
            let turn = async {
                match ticket.as_mut() {
                    Some(t) if out_of_turn => t.changed().await,
                    _ => std::future::pending().await,
                }
            };
            let waited = tokio::select! {
                biased;
                // First: a step streaming responses faster than they are handled would otherwise
                // keep a cancelled request running until the step ran dry.
                () = sender.cancelled() => return Err(InferError::unavailable("the request was cancelled")),
                waited = waited => waited?,
                // An earlier request of the sequence launched a step or ended: look again.
                () = turn => None,
            };
            let Some((index, event)) = waited else { continue };
            let (step, context, batching) = (running[index].step, running[index].context, running[index].batching);
            let finished = !matches!(event, StepEvent::Response(_, false));
            let streamed = running[index].streams();
            if finished {
                running.swap_remove(index);
                idle.extend(contexts.finished(context, !streamed));
            }
            match event {
                StepEvent::Failed(e) => return Err(self.step_error(e)),
                StepEvent::Done => {}
                StepEvent::Response(response, _) => {
                    let mut produced = HashMap::with_capacity(self.steps[step].outputs.len());
                    for (output, tensor) in &self.steps[step].outputs {
                        let t = response.outputs.iter().find(|o| &o.name == output);
                        let t = t.map(|t| Held::new(Tensor { name: tensor.clone(), ..t.clone() }, batching));
                        produced.insert(tensor.clone(), t);
                    }
                    if streamed {
                        // Each response of a decoupled step starts a context of its own.
                        changed.push(contexts.add_child(context, produced));
                    } else {
                        contexts.extend(context, produced);
                        contexts.with_descendants(context, &mut changed);
                    }
                }
            }
        }
        if self.decoupled {
            // What a long stream cost: its contexts in use at once, not one per response.
            tracing::debug!(
                "ensemble '{}': request '{id}' done, {} contexts in use at most",
                self.name,
                contexts.peak()
            );
            return Ok(None);
        }
        let mut outputs = Vec::with_capacity(requested_outputs.len());
        for name in &requested_outputs {
            match contexts.resolve(0, name) {
                Some((Some(held), _)) => outputs.push(self.output(name, held, request_batch)),
                Some((None, _)) => {}
                None => {
                    return Err(InferError::internal(format!(
                        "ensemble '{}' did not produce output '{name}'",
                        self.name
                    )));
                }
            }
        }
        Ok(Some(InferenceResponse {
            in_place: Vec::new(),
            spent: Default::default(),
            model_name: self.name.clone(),
            model_version: version,
            id,
            parameters: Vec::new(),
            outputs,
        }))
    }

    /// Sends one response for each context whose requested outputs have all just become available
    /// (decoupled ensembles).
    async fn answer_complete_contexts(
        &self,
        contexts: &mut Contexts,
        changed: &[usize],
        answer: &Answer<'_>,
        sender: &mut ResponseSender,
    ) {
        for &c in changed {
            if contexts[c].answered || !contexts.complete_in(c, &mut answer.requested.iter().map(String::as_str)) {
                continue;
            }
            contexts[c].answered = true;
            let outputs = answer
                .requested
                .iter()
                .filter_map(|name| {
                    let (held, _) = contexts.resolve(c, name)?;
                    held.map(|h| self.output(name, h, answer.request_batch))
                })
                .collect();
            let response = InferenceResponse {
                in_place: Vec::new(),
                spent: Default::default(),
                model_name: self.name.clone(),
                model_version: answer.version,
                id: answer.id.to_string(),
                parameters: Vec::new(),
                outputs,
            };
            // Waits while the client reads slowly; a client that went away is not the
            // ensemble's error, and its steps still finish.
            let _ = sender.send_partial(response).await;
        }
    }

    /// The ensemble output `name` as the response carries it, for a request of `request_batch`.
    fn output(&self, name: &str, held: &Held, request_batch: u64) -> Tensor {
        let mut tensor = held.meeting(name, self.output_dims.get(name).map(Vec::as_slice), request_batch != 0);
        if let Some((reshape, dims)) = self.output_reshapes.get(name) {
            // As tritonserver's `Output::Reshape`: a batching ensemble's outputs have a batch
            // dimension (a batch of zero too); only a tensor in the reshape's shape is mapped.
            let (batch, inner) = if self.batching {
                tensor.shape.split_at(1.min(tensor.shape.len()))
            } else {
                (&[][..], &tensor.shape[..])
            };
            if crate::validate::dims_match(reshape, inner)
                && let Some(shaped) = crate::validate::reshape_dims(reshape, inner, dims)
            {
                tensor.shape = [batch, shaped.as_slice()].concat();
            }
        }
        tensor
    }
}

/// One request in the ensemble's `in_flight` count, from `enqueue` until it is dropped; the last
/// one out wakes `drain`.
struct InFlight(Arc<Ensemble>);

impl InFlight {
    fn enter(ensemble: &Arc<Ensemble>) -> Self {
        ensemble.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(ensemble.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _guard = self.0.drained.0.lock();
            self.0.drained.1.notify_all();
        }
    }
}

/// What a decoupled ensemble's responses carry: the outputs requested, and the request's id,
/// version and batch size.
struct Answer<'a> {
    requested: &'a [String],
    id: &'a str,
    version: i64,
    request_batch: u64,
}

/// Waits for the next event of any running step; returns its index in `running`.
async fn next_event(running: &mut [Running]) -> (usize, StepEvent) {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    std::future::poll_fn(|cx| {
        for (k, r) in running.iter_mut().enumerate() {
            let event = match &mut r.answers {
                Answers::Unary(rx) => match Pin::new(rx).poll(cx) {
                    Poll::Ready(Ok(Ok(response))) => StepEvent::Response(response, true),
                    Poll::Ready(Ok(Err(e))) => StepEvent::Failed(e),
                    Poll::Ready(Err(_)) => StepEvent::Failed(InferError::internal("the step ended without a response")),
                    Poll::Pending => continue,
                },
                Answers::Stream(rx) => match rx.poll_recv(cx) {
                    Poll::Ready(Some(StreamItem { response: Some(Ok(response)), final_ })) => {
                        StepEvent::Response(response, final_)
                    }
                    Poll::Ready(Some(StreamItem { response: Some(Err(e)), .. })) => StepEvent::Failed(e),
                    Poll::Ready(Some(StreamItem { response: None, .. })) => StepEvent::Done,
                    Poll::Ready(None) => {
                        StepEvent::Failed(InferError::internal("the step ended without its final response"))
                    }
                    Poll::Pending => continue,
                },
            };
            return Poll::Ready((k, event));
        }
        Poll::Pending
    })
    .await
}
