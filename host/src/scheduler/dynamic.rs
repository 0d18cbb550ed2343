//! The dynamic batcher (`dynamic_batching { … }`): combines queued requests into batches, by
//! Triton's rules (its `DynamicBatchScheduler::GetDynamicBatch`):
//!
//! - requests are taken in queue order (priority levels first, see [`super::queue`]);
//! - a batch never exceeds `max_batch_size`, counting each request by its own batch size;
//! - if a `preferred_batch_size` is reachable from the queued requests, the largest reachable one
//!   goes at once; when the next request would overshoot every preferred size, what is pending
//!   goes at once too (waiting could not produce a preferred size);
//! - otherwise the batch waits until its oldest request has been queued
//!   `max_queue_delay_microseconds`, then goes as large as `max_batch_size` allows;
//! - requests whose variable-size inputs (not `allow_ragged_batch`) differ in shape, or that provide
//!   different optional inputs, are never in one batch.
//!
//! There is no batcher thread: an idle instance's worker forms its own next batch under the queue's
//! lock, so the batch goes to the first idle instance and grows for as long as every instance is
//! busy. With `preserve_ordering`, responses are delivered in the order the batches were formed,
//! whichever instance finishes first.
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::lifecycle::{Lifecycle, Next, Rest, Step, Worker, wait_for_batch};
use super::ordering::OrderedDelivery;
use super::queue::{PriorityQueues, QUEUE_FULL, Queued, TIMEOUT_EXPIRED};
use super::{Caller, Schedule, WorkerContext, flush};
use crate::backend::{BackendInstance, ExecutionThread};
use crate::config::schema::ModelDynamicBatching;
use crate::error::InferError;
use crate::request::Job;
use crate::validate::IoSpec;

/// How batches are formed, read once from the configuration.
#[derive(Clone, Debug)]
pub struct BatchRules {
    pub max_batch_size: usize,
    /// Sorted ascending; Triton fills in `[max_batch_size]` when none is given.
    pub preferred: Vec<usize>,
    /// Zero: never wait for a batch to grow.
    pub max_queue_delay: Duration,
    pub preserve_ordering: bool,
    /// Inputs with variable dims that are not `allow_ragged_batch`: their shapes must be equal
    /// within a batch.
    pub equal_shape_inputs: Vec<String>,
    /// Whether the model has optional inputs (requests in a batch must then provide the same ones).
    pub has_optional_inputs: bool,
    pub batching: bool,
}

impl BatchRules {
    pub fn new(config: &ModelDynamicBatching, io: &IoSpec, ragged: &[String]) -> Self {
        let max_batch_size = io.max_batch_size.max(1) as usize;
        let mut preferred: Vec<usize> = config.preferred_batch_size.iter().map(|s| *s as usize).collect();
        if preferred.is_empty() {
            preferred.push(max_batch_size);
        }
        preferred.sort_unstable();
        preferred.dedup();
        BatchRules {
            max_batch_size,
            preferred,
            max_queue_delay: Duration::from_micros(config.max_queue_delay_microseconds),
            preserve_ordering: config.preserve_ordering,
            equal_shape_inputs: io
                .inputs
                .iter()
                .filter(|i| i.dims.contains(&-1) && !ragged.contains(&i.name))
                .map(|i| i.name.clone())
                .collect(),
            has_optional_inputs: io.inputs.iter().any(|i| i.optional),
            batching: io.max_batch_size > 0,
        }
    }

    fn max_preferred(&self) -> usize {
        self.preferred.last().copied().unwrap_or(self.max_batch_size)
    }

    /// Whether `b` may join a batch that `a` started.
    fn compatible(&self, a: &Job, b: &Job) -> bool {
        let skip = usize::from(self.batching);
        let shape = |job: &Job, name: &str| {
            job.request.inputs.iter().find(|t| t.name == name).map(|t| t.shape.get(skip..).unwrap_or(&[]).to_vec())
        };
        if self.equal_shape_inputs.iter().any(|name| shape(a, name) != shape(b, name)) {
            return false;
        }
        !self.has_optional_inputs || a.request.gives_the_same_inputs_as(&b.request)
    }

    /// Decides, from the queue as it stands at `now`, whether to execute its first requests (and
    /// how many) or when to look again. `draining`: the model is unloading, nothing waits.
    fn decide(&self, queue: &PriorityQueues, now: Instant, draining: bool) -> Decision {
        let mut items = queue.iter();
        let Some(first) = items.next() else {
            return Decision::Wait(None);
        };
        let (mut pending, mut count, mut oldest) = (first.batch_size, 1, first.job.enqueued);
        let mut best = self.preferred.contains(&pending).then_some(count);
        let mut full = false;
        for q in items {
            if pending + q.batch_size > self.max_preferred() && best.is_none() {
                best = Some(count);
            }
            if pending + q.batch_size > self.max_batch_size || !self.compatible(&first.job, &q.job) {
                full = true;
                break;
            }
            pending += q.batch_size;
            count += 1;
            oldest = oldest.min(q.job.enqueued);
            if self.preferred.contains(&pending) {
                best = Some(count);
            }
        }
        let no_delay = self.max_queue_delay.is_zero();
        let delay_exceeded = draining || (!no_delay && now.saturating_duration_since(oldest) >= self.max_queue_delay);
        match best {
            Some(n) if !delay_exceeded => Decision::Take(n),
            _ if full || delay_exceeded || no_delay || pending >= self.max_preferred() => Decision::Take(count),
            _ => {
                let at = oldest + self.max_queue_delay;
                Decision::Wait(Some(queue.next_deadline().map_or(at, |d| d.min(at))))
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Execute the first `n` queued requests now.
    Take(usize),
    /// Nothing to execute yet; look again at this time, or when a request arrives.
    Wait(Option<Instant>),
}

struct State {
    queues: PriorityQueues,
    /// The number the next formed batch gets (for `preserve_ordering`).
    next_ticket: u64,
}

struct Shared {
    rules: BatchRules,
    state: Mutex<State>,
    /// Signalled when a request arrives, when a batch leaves requests behind, and on shutdown.
    work: Condvar,
    ordering: OrderedDelivery,
    lifecycle: Lifecycle,
    /// The version's statistics, for the requests answered from the queue (`drop_cancelled`).
    stats: Arc<crate::stats::ModelStats>,
}

pub struct DynamicBatcher {
    shared: Arc<Shared>,
}

impl DynamicBatcher {
    /// Takes one worker per instance, all forming batches from one queue.
    pub fn start(
        model: &str,
        instances: Vec<Box<dyn BackendInstance>>,
        ctx: WorkerContext,
        rules: BatchRules,
        config: &ModelDynamicBatching,
    ) -> Self {
        let shared = Arc::new(Shared {
            rules,
            state: Mutex::new(State { queues: PriorityQueues::new(config), next_ticket: 0 }),
            work: Condvar::new(),
            ordering: OrderedDelivery::default(),
            lifecycle: Lifecycle::default(),
            stats: ctx.stats.clone(),
        });
        let workers: Vec<BatchWorker> = instances
            .into_iter()
            .map(|instance| BatchWorker { shared: shared.clone(), instance, ctx: ctx.clone() })
            .collect();
        shared.lifecycle.start(model, workers);
        DynamicBatcher { shared }
    }
}

impl Schedule for DynamicBatcher {
    /// Queues a request. A full queue answers it at once with Triton's error, an unloading model
    /// with its own.
    fn enqueue(&self, mut job: Job, _caller: Caller) {
        let now = Instant::now();
        job.enqueued = now;
        let batch_size = job.request.batch_size(self.shared.rules.batching).max(1) as usize;
        let mut state = self.shared.state.lock();
        if let Err(e) = self.shared.lifecycle.admit() {
            drop(state);
            return job.fail(e);
        }
        let was_empty = state.queues.is_empty();
        let deadline_before = state.queues.next_deadline();
        if let Err(mut job) = state.queues.push(job, batch_size, now) {
            drop(state);
            job.reject(InferError::unavailable(QUEUE_FULL));
            return;
        }
        // Wake an idle worker only when the arrival changes what it would do: the queue was empty
        // (it waits without a deadline), a batch is now ready, or a timeout now expires sooner.
        // Every other arrival would wake a worker only for it to go back to sleep.
        let wake = was_empty
            || state.queues.next_deadline() != deadline_before
            || matches!(self.shared.rules.decide(&state.queues, now, false), Decision::Take(_));
        drop(state);
        if wake {
            self.shared.work.notify_one();
            self.shared.lifecycle.wake_one();
        }
    }

    fn queued(&self) -> usize {
        self.shared.state.lock().queues.len()
    }

    /// Answers the queued requests whose client has gone, as tritonserver's batcher does while
    /// every instance is busy (it looks at its queue within its wait interval): their memory, their
    /// queue places and their traces end now, not when an instance frees.
    fn drop_cancelled(&self) {
        let (gone, left) = {
            let mut state = self.shared.state.lock();
            let gone = state.queues.remove_cancelled();
            (gone, !state.queues.is_empty())
        };
        if gone.is_empty() {
            return;
        }
        // What is left may now make a batch that waited for more (a preferred size).
        if left {
            self.shared.work.notify_one();
            self.shared.lifecycle.wake_one();
        }
        for mut q in gone {
            super::answer_cancelled(&self.shared.stats, &mut q.job);
        }
    }

    /// Stops taking requests, lets the instances run every queued one, then finalises them.
    fn shutdown(&self) {
        {
            let _state = self.shared.state.lock();
            self.shared.lifecycle.close();
        }
        self.shared.work.notify_all();
        self.shared.lifecycle.join();
    }
}

impl Shared {
    /// Waits for and takes the next batch; `None` once the model is unloading and its queue is
    /// empty. Requests whose queue timeout expired under a REJECT policy are answered on the way.
    fn next_batch(&self, poll: Duration, rest: &Rest<'_>, on_rest: impl FnMut()) -> Step<(Vec<Job>, u64)> {
        wait_for_batch(&self.state, &self.work, poll, rest, on_rest, |state, now| {
            let mut rejected = Vec::new();
            state.queues.expire(now, &mut rejected);
            if !rejected.is_empty() {
                MutexGuard::unlocked(state, || reject(rejected));
            }
            let closed = self.lifecycle.is_closed();
            match self.rules.decide(&state.queues, now, closed) {
                Decision::Take(n) => {
                    let batch: Vec<Job> = state.queues.take(n).into_iter().map(|q| q.job).collect();
                    let ticket = state.next_ticket;
                    state.next_ticket += 1;
                    if !state.queues.is_empty() {
                        // Another idle instance may take what is left.
                        self.work.notify_one();
                        self.lifecycle.wake_one();
                    }
                    Next::Run((batch, ticket))
                }
                Decision::Wait(_) if closed => Next::Exit,
                Decision::Wait(at) => Next::Wait(at),
            }
        })
    }

    /// Delivers a finished batch's responses: at once, or — with `preserve_ordering` — after those
    /// of every batch formed before it.
    fn deliver(&self, ticket: u64, mut batch: Vec<Job>) {
        if self.rules.preserve_ordering {
            self.ordering.deliver(ticket, batch);
        } else {
            flush(&mut batch);
        }
    }
}

fn reject(rejected: Vec<Queued>) {
    for mut q in rejected {
        q.job.reject(InferError::unavailable(TIMEOUT_EXPIRED));
    }
}

/// An instance's worker: forms its own next batch from the shared queue.
struct BatchWorker {
    shared: Arc<Shared>,
    instance: Box<dyn BackendInstance>,
    ctx: WorkerContext,
}

impl Worker for BatchWorker {
    type Batch = (Vec<Job>, u64);

    fn next(&mut self, rest: &Rest<'_>) -> Step<Self::Batch> {
        let instance = &mut self.instance;
        self.shared.next_batch(self.ctx.poll, rest, || instance.idle())
    }

    fn run(&mut self, (mut batch, ticket): Self::Batch) {
        self.ctx.drop_cancelled(&mut batch);
        if !batch.is_empty() {
            self.ctx.execute(self.instance.as_mut(), &mut batch, ExecutionThread::Worker);
        }
        self.shared.deliver(ticket, batch);
    }

    fn finish(self) {
        self.instance.finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{InferenceRequest, ResponseSender, Tensor};
    use crate::stats::ModelStats;
    use crate::tensor::DataType;

    fn rules(max: usize, preferred: &[usize], delay_us: u64) -> BatchRules {
        BatchRules {
            max_batch_size: max,
            preferred: preferred.to_vec(),
            max_queue_delay: Duration::from_micros(delay_us),
            preserve_ordering: false,
            equal_shape_inputs: vec!["X".into()],
            has_optional_inputs: false,
            batching: true,
        }
    }

    fn queue_of(items: &[(i64, i64)], at: Instant) -> PriorityQueues {
        let mut q = PriorityQueues::new(&ModelDynamicBatching::default());
        for (batch, width) in items {
            let (sender, _rx) = ResponseSender::unary(Arc::new(ModelStats::default()));
            let input = Tensor {
                name: "X".into(),
                datatype: DataType::Int32,
                shape: vec![*batch, *width],
                data: Default::default(),
            };
            let request = InferenceRequest { inputs: vec![input], ..Default::default() };
            q.push(Job { request, sender, enqueued: at }, *batch as usize, at).unwrap();
        }
        q
    }

    #[test]
    fn preferred_size_goes_at_once_else_waits_for_the_delay() {
        let t0 = Instant::now();
        let r = rules(8, &[2, 4], 1000);
        assert_eq!(r.decide(&queue_of(&[(1, 1); 6], t0), t0, false), Decision::Take(4));
        assert_eq!(r.decide(&queue_of(&[(1, 1); 3], t0), t0, false), Decision::Take(2));
        let one = queue_of(&[(1, 1)], t0);
        assert_eq!(r.decide(&one, t0, false), Decision::Wait(Some(t0 + Duration::from_micros(1000))));
        // Past the delay: everything up to max_batch_size, preferred or not.
        let late = t0 + Duration::from_millis(2);
        assert_eq!(r.decide(&one, late, false), Decision::Take(1));
        assert_eq!(r.decide(&queue_of(&[(1, 1); 11], t0), late, false), Decision::Take(8));
        // Unloading: nothing waits.
        assert_eq!(r.decide(&one, t0, true), Decision::Take(1));
    }

    #[test]
    fn requests_count_by_their_batch_size() {
        let t0 = Instant::now();
        let r = rules(8, &[4], 1000);
        // 3 then 2 would overshoot preferred 4: the 3 goes alone; then 2+1+1 = 4.
        assert_eq!(r.decide(&queue_of(&[(3, 1), (2, 1), (1, 1), (1, 1)], t0), t0, false), Decision::Take(1));
        assert_eq!(r.decide(&queue_of(&[(2, 1), (1, 1), (1, 1)], t0), t0, false), Decision::Take(3));
        // Past the delay the batch stops before max_batch_size would be exceeded.
        let late = t0 + Duration::from_millis(2);
        assert_eq!(r.decide(&queue_of(&[(3, 1), (4, 1), (2, 1)], t0), late, false), Decision::Take(2));
    }

    #[test]
    fn different_variable_shapes_are_not_batched_together() {
        let t0 = Instant::now();
        let r = rules(8, &[8], 0);
        assert_eq!(r.decide(&queue_of(&[(1, 2), (1, 2), (1, 3), (1, 2)], t0), t0, false), Decision::Take(2));
        let ragged = BatchRules { equal_shape_inputs: vec![], ..r };
        assert_eq!(ragged.decide(&queue_of(&[(1, 2), (1, 2), (1, 3), (1, 2)], t0), t0, false), Decision::Take(4));
    }
}
