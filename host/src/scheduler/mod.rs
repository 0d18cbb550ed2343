//! Schedulers: how a model's requests reach its instances. Each instance has a worker that
//! executes one batch at a time, on a thread of the shared [`worker_pool`] while it has work;
//! schedulers decide what goes into each batch.
mod default;
mod dynamic;
mod handoff;
pub mod inline;
mod lifecycle;
mod ordering;
mod queue;
mod sequence;
mod worker_pool;

use std::sync::Arc;
use std::time::Instant;

pub use default::DefaultScheduler;
pub use dynamic::{BatchRules, DynamicBatcher};
pub use sequence::{SequenceBatcher, SequenceRules};
pub use worker_pool::{WORKER_POOL, taint_this_thread};

use crate::backend::{BackendInstance, ExecutionThread};
use crate::error::{ErrorKind, InferError};
use crate::model::probe::ExecutionProbe;
use crate::request::Job;
use crate::stats::ModelStats;
use crate::test_hooks::TestHooks;
use crate::trace::Execution;

/// How a model version's requests reach whatever runs them: its instances (the default, dynamic
/// and sequence schedulers, chosen by the configuration's `scheduling_choice`), or other models
/// (an ensemble's).
pub trait Schedule: Send + Sync {
    /// Queues a validated request from `caller`. A request it refuses (the model is unloading, a
    /// full queue, a sequence it cannot belong to) is answered through its sender like any other,
    /// so that its one final response takes its place among a stream's responses.
    fn enqueue(&self, job: Job, caller: Caller);
    /// Requests waiting for an instance.
    fn queued(&self) -> usize;
    /// Requests the model has in flight, as tritonserver counts them when it waits for them at
    /// shutdown: those waiting plus the `executing` ones by default; a sequence batcher counts
    /// its sequences instead (a sequence is in flight until its END), an ensemble the requests
    /// anywhere in its pipeline.
    fn in_flight(&self, executing: usize) -> usize {
        self.queued() + executing
    }
    /// Stops taking requests, runs every queued one, then finalises the instances. Blocks.
    fn shutdown(&self);
    /// Answers at once the queued requests whose client has gone (a frontend calls it when one of
    /// its clients goes away), rather than when an instance next takes them. Only a scheduler
    /// whose queue can be searched does it (the dynamic batcher's); the others drop such requests
    /// as they take them.
    fn drop_cancelled(&self) {}
}

/// Where a request is queued from, which decides what its scheduler may do with the calling thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// One of the server's I/O threads (a frontend's, or a task on the server's runtime such as an
    /// ensemble's): it may run a short execution itself ([`inline`] execution).
    IoThread,
    /// A thread that may block and will wait for the answer itself: an instance's worker whose
    /// plugin calls another model (business logic scripting). Like an I/O thread it may run a
    /// short execution itself, which spares the call two thread handoffs (to the callee's worker
    /// and back) — what an ensemble's steps save by running inline — but it takes none of the
    /// I/O threads' slots, and the execution may block, as on a worker.
    Waiting,
    /// Any other thread: the request is only queued.
    Worker,
}

/// What every instance worker needs besides its instance and its queue.
#[derive(Clone)]
pub struct WorkerContext {
    pub probe: Arc<ExecutionProbe>,
    pub stats: Arc<ModelStats>,
    /// The version's test hooks (`--test-hooks` only): executions pass their gate.
    pub hooks: Option<Arc<TestHooks>>,
    /// Whether requests carry a batch dimension (`max_batch_size` > 0).
    pub batching: bool,
    /// How long an idle worker polls for work before it sleeps (`--instance-poll-us`).
    pub poll: std::time::Duration,
    /// Executions shorter than this may run inline (`--inline-execution-us`; zero: never).
    pub inline_under: std::time::Duration,
    /// The server's I/O threads' budget for inline executions.
    pub io_threads: Arc<inline::IoThreads>,
}

impl WorkerContext {
    /// Takes out of `batch` the requests whose client has gone (an HTTP connection closed, a gRPC
    /// call or stream cancelled) while they waited: they are answered CANCELLED — nobody reads it —
    /// and counted, instead of costing an execution. Not for a sequence's requests, whose state
    /// each one carries forward.
    fn drop_cancelled(&self, batch: &mut Vec<Job>) {
        if !batch.iter().any(|j| j.sender.is_cancelled()) {
            return;
        }
        batch.retain_mut(|job| {
            if !job.sender.is_cancelled() {
                return true;
            }
            answer_cancelled(&self.stats, job);
            false
        });
    }

    /// Executes one batch on `instance`, recording each request's queue time and the execution's
    /// statistics. Responses stay held in their senders: the caller flushes them.
    fn execute(&self, instance: &mut dyn BackendInstance, batch: &mut Vec<Job>, thread: ExecutionThread) {
        self.probe.enter();
        if let Some(hooks) = &self.hooks {
            hooks.pass_gate();
        }
        let now = Instant::now();
        let mut batch_size = 0u64;
        let mut requests = 0u64;
        let mut traced = false;
        let executed = batch.iter().map(|j| j.request.batch_size(self.batching) as u64).sum();
        for job in batch.iter().filter(|j| !j.sender.is_padding()) {
            self.stats.record_queue(now - job.enqueued);
            batch_size += job.request.batch_size(self.batching) as u64;
            requests += 1;
            traced |= job.sender.trace().is_some();
        }
        // A panic in the host's backend code is a bug, but it must cost only this batch: its
        // requests fail (those already answered keep their answers) and the worker lives on.
        let times = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| instance.execute(batch, thread))) {
            Ok(times) => times,
            Err(_) => {
                let error = crate::error::InferError::internal("the backend panicked while executing the request");
                for job in batch.iter_mut() {
                    job.fail(error.clone());
                }
                crate::stats::ExecutionTimes::default()
            }
        };
        self.stats.record_execution(requests, batch_size, executed, times);
        if traced {
            for job in batch.iter() {
                if let Some(trace) = job.sender.trace() {
                    let (input, infer, output) = (times.input, times.infer, times.output);
                    let queued = job.enqueued;
                    trace.executed(Execution { queued, start: now, input, infer, output, batch_size, requests });
                }
            }
        }
        self.probe.exit();
    }
}

/// Answers `job`, whose client has gone before it executed: CANCELLED (nobody reads it), counted.
fn answer_cancelled(stats: &ModelStats, job: &mut Job) {
    stats.record_cancelled();
    job.fail(InferError::new(ErrorKind::Cancelled, "the request was cancelled before it executed"));
    job.sender.flush();
}

/// What a request gets that is left for instances already finalised (a model unloading).
const INSTANCES_STOPPED: &str = "the model's instances have stopped";

/// Delivers every held response of `batch`, each request's inputs carried back with its response
/// ([`Job::answer`]).
fn flush(batch: &mut [Job]) {
    for job in batch {
        job.answer();
    }
}
