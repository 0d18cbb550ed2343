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
//!
//! A batch that a request completes (a preferred size reached, or nothing left to wait for) runs
//! inline on the I/O thread that queued that request, when an instance is free and the model may
//! run inline at all (see [`super::inline`]: the same gate and I/O-thread budget as the default
//! scheduler's). Its responses then wake their connections from a thread of the server's runtime
//! instead of from the instance's worker thread: for a small model that handoff cost more CPU a
//! request than the batch saved (docs/performance.md, *Dynamic batching*). Batches that wait out
//! `max_queue_delay_microseconds` are still formed and run by the workers. While batches run
//! inline, one worker sleeps until the queue's next deadline instead of polling the queue, and
//! arrivals do not wake it for a batch that can wait until then (`State::dozing_until`): polling
//! cost a `sched_yield` loop for as long as requests waited for a batch to fill.
//!
//! A batch that waits for its delay does not wait while the server idles: the batcher lists itself
//! with the I/O threads ([`WaitingBatches`]), and one about to sleep for want of work runs the
//! queued requests as one batch first, as large as it has grown (unless `--strict-queue-delay`, and
//! only for a model that may run inline). With a thread idle, the CPU a larger batch would save is
//! free, and the wait only adds latency — for closed-loop clients, throughput too (`simple_dyna` at
//! 16 connections: 0.84× → 0.95× the unbatched plugin; docs/scheduling.md). An I/O thread that
//! completes a batch while every instance is busy spins briefly for one ([`WAIT_UNDER`]) rather
//! than leave the batch to a worker.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::default::{SharedInstance, await_free_instance, run_batch};
use super::inline::{InlineGate, WaitingBatches};
use super::lifecycle::{Lifecycle, Next, Rest, Step, Worker, wait_for_batch};
use super::ordering::OrderedDelivery;
use super::queue::{PriorityQueues, QUEUE_FULL, Queued, TIMEOUT_EXPIRED};
use super::{Caller, INSTANCES_STOPPED, Schedule, WorkerContext, flush};
use crate::backend::{BackendInstance, ExecutionThread};
use crate::config::schema::ModelDynamicBatching;
use crate::error::InferError;
use crate::request::Job;
use crate::validate::IoSpec;

/// An I/O thread that completes a batch while every instance is busy waits for one (spinning, up
/// to twice the model's typical batch execution) when batches typically take less than this.
const WAIT_UNDER: Duration = Duration::from_micros(50);

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
    /// When the worker that sleeps until the queue's next deadline wakes (at most one does): an
    /// arrival whose batch can wait until then need not wake it.
    dozing_until: Option<Instant>,
}

impl State {
    /// Whether a worker must be woken for what the queue waits for (`decision`): not when one
    /// sleeps until no later than that.
    fn needs_a_worker(&self, decision: &Decision) -> bool {
        match (self.dozing_until, decision) {
            (Some(until), Decision::Wait(Some(at))) => until > *at,
            _ => true,
        }
    }
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
    /// The instances, each run by its worker or, for a batch an arrival completes, by the I/O
    /// thread that queued the arrival; `None` once finalised.
    instances: Vec<SharedInstance>,
    /// Whether the model's batches may run on I/O threads, learned from every execution.
    inline: InlineGate,
    /// Whether the batcher is listed with the I/O threads for its waiting requests (changed under
    /// `state`'s lock).
    listed: AtomicBool,
    /// This batcher, for the I/O threads' list (which must not keep an unloaded model alive).
    me: Weak<Shared>,
    ctx: WorkerContext,
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
        let instances: Vec<SharedInstance> =
            instances.into_iter().map(|i| Arc::new(parking_lot::Mutex::new(Some(i)))).collect();
        let shared = Arc::new_cyclic(|me| Shared {
            rules,
            state: Mutex::new(State { queues: PriorityQueues::new(config), next_ticket: 0, dozing_until: None }),
            work: Condvar::new(),
            ordering: OrderedDelivery::default(),
            lifecycle: Lifecycle::default(),
            stats: ctx.stats.clone(),
            instances: instances.clone(),
            inline: InlineGate::new(ctx.inline_under),
            listed: AtomicBool::new(false),
            me: me.clone(),
            ctx: ctx.clone(),
        });
        let workers: Vec<BatchWorker> =
            instances.into_iter().map(|instance| BatchWorker { shared: shared.clone(), instance }).collect();
        shared.lifecycle.start(model, workers);
        DynamicBatcher { shared }
    }
}

impl Schedule for DynamicBatcher {
    /// Queues a request. A full queue answers it at once with Triton's error, an unloading model
    /// with its own.
    fn enqueue(&self, mut job: Job, caller: Caller) {
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
        let decision = self.shared.rules.decide(&state.queues, now, false);
        let Decision::Take(n) = decision else {
            self.shared.list_if_waiting(&state);
            // Wake an idle worker only when the arrival changes what it would do: the queue was
            // empty (it waits without a deadline) or a timeout now expires sooner. Every other
            // arrival would wake a worker only for it to go back to sleep.
            let wake =
                (was_empty || state.queues.next_deadline() != deadline_before) && state.needs_a_worker(&decision);
            drop(state);
            if wake {
                self.shared.work.notify_one();
                self.shared.lifecycle.wake_one();
            }
            return;
        };
        // A batch is ready: run here when this is an I/O thread that may, else left to a worker.
        if caller == Caller::IoThread {
            match self.shared.run_inline(state, n, false) {
                None => return,
                Some(back) => state = back,
            }
        }
        drop(state);
        self.shared.work.notify_one();
        self.shared.lifecycle.wake_one();
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

impl WaitingBatches for Shared {
    /// Runs the queued requests as one batch (as many as `max_batch_size` allows, as when their
    /// delay is out), here on an I/O thread about to sleep.
    fn run_waiting(&self) {
        let state = self.state.lock();
        self.listed.store(false, Ordering::Relaxed);
        let Decision::Take(n) = self.rules.decide(&state.queues, Instant::now(), true) else { return };
        if let Some(state) = self.run_inline(state, n, true) {
            // Not run (the model may not run inline now, or its instances are busy): the batch
            // waits on, for a worker at its deadline or the next I/O thread to sleep.
            self.list_if_waiting(&state);
        }
    }
}

impl Shared {
    /// Lists the batcher with the I/O threads, once, when requests wait in its queue (`state`,
    /// locked) and an I/O thread about to sleep may run them
    /// ([`IoThreads::before_park`](super::inline::IoThreads::before_park)).
    fn list_if_waiting(&self, state: &State) {
        if state.queues.is_empty() || !self.inline.open() || !self.ctx.io_threads.run_when_idle() {
            return;
        }
        if !self.listed.swap(true, Ordering::Relaxed) {
            let me: Weak<dyn WaitingBatches> = self.me.clone();
            self.ctx.io_threads.batch_waits(me);
        }
    }

    /// Runs the first `n` queued requests, the batch an arrival just completed (or, `eager`, what
    /// waits when an I/O thread is about to sleep), here on an I/O thread, if the model may run
    /// inline, an I/O slot is free and an instance is idle. Returns the queue's lock when the batch
    /// is left for a worker; `None` when it ran here (the lock was let go before the execution).
    fn run_inline<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        mut n: usize,
        eager: bool,
    ) -> Option<MutexGuard<'a, State>> {
        // Not while a test gate may hold executions: the calling thread must never wait at it.
        if !self.inline.open() || self.ctx.hooks.as_ref().is_some_and(|h| h.gate_engaged()) {
            return Some(state);
        }
        let Some(_slot) = self.ctx.io_threads.take() else { return Some(state) };
        if self.instances.iter().all(|i| i.is_locked()) {
            // Every instance busy: wait briefly for one rather than leave the batch to a worker,
            // which would wake every request's I/O thread for its answer. The queue is free
            // meanwhile, so what this thread runs is decided again.
            MutexGuard::unlocked(&mut state, || await_free_instance(&self.instances, &self.inline, WAIT_UNDER));
            match self.rules.decide(&state.queues, Instant::now(), eager) {
                Decision::Take(now) => n = now,
                Decision::Wait(_) => return Some(state),
            }
        }
        let Some(mut guard) = self.instances.iter().find_map(|i| i.try_lock()) else { return Some(state) };
        let Some(instance) = guard.as_mut() else { return Some(state) };
        let (mut batch, ticket) = self.take_batch(&mut state, n);
        drop(state);
        self.ctx.probe.count_inline();
        run_batch(&self.ctx, &self.inline, instance.as_mut(), &mut batch, ExecutionThread::Inline);
        drop(guard);
        if batch.iter().any(|j| !j.sender.is_complete()) {
            // The backend could not run here (a blocking call): the model runs on its workers from
            // now on, and this batch with them, first.
            self.inline.bar();
            let (done, again): (Vec<Job>, Vec<Job>) = batch.into_iter().partition(|j| j.sender.is_complete());
            self.deliver(ticket, done);
            self.requeue(again);
            return None;
        }
        self.deliver(ticket, batch);
        None
    }

    /// Gives back to the queue requests an I/O thread could not run, and wakes a worker for them.
    fn requeue(&self, jobs: Vec<Job>) {
        let mut state = self.state.lock();
        if self.lifecycle.is_closed() {
            // The workers may have drained the queue and stopped already.
            drop(state);
            for mut job in jobs {
                job.fail(InferError::unavailable(INSTANCES_STOPPED));
            }
            return;
        }
        let now = Instant::now();
        for mut job in jobs {
            let batch_size = job.request.batch_size(self.rules.batching).max(1) as usize;
            job.enqueued = now;
            if let Err(mut job) = state.queues.push(job, batch_size, now) {
                job.fail(InferError::unavailable(QUEUE_FULL));
            }
        }
        drop(state);
        self.work.notify_one();
        self.lifecycle.wake_one();
    }

    /// Takes the first `n` queued requests as the next batch, with its ticket (`preserve_ordering`),
    /// and wakes a worker for what is left: another idle instance may take it.
    fn take_batch(&self, state: &mut State, n: usize) -> (Vec<Job>, u64) {
        let batch: Vec<Job> = state.queues.take(n).into_iter().map(|q| q.job).collect();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        // What is left is decided on only when a worker dozes: otherwise one is woken anyway.
        if !state.queues.is_empty()
            && (state.dozing_until.is_none()
                || state.needs_a_worker(&self.rules.decide(&state.queues, Instant::now(), false)))
        {
            self.work.notify_one();
            self.lifecycle.wake_one();
        }
        (batch, ticket)
    }

    /// Waits for and takes the next batch; `None` once the model is unloading and its queue is
    /// empty. Requests whose queue timeout expired under a REJECT policy are answered on the way.
    fn next_batch(&self, poll: Duration, rest: &Rest<'_>, on_rest: impl FnMut()) -> Step<(Vec<Job>, u64)> {
        let mut dozed = false;
        wait_for_batch(&self.state, &self.work, poll, rest, on_rest, |state, now| {
            if std::mem::take(&mut dozed) {
                state.dozing_until = None;
            }
            let mut rejected = Vec::new();
            state.queues.expire(now, &mut rejected);
            if !rejected.is_empty() {
                MutexGuard::unlocked(state, || reject(rejected));
            }
            let closed = self.lifecycle.is_closed();
            match self.rules.decide(&state.queues, now, closed) {
                Decision::Take(n) => Next::Run(self.take_batch(state, n)),
                Decision::Wait(_) if closed => Next::Exit,
                // Batches run where their last request arrives: sleep until the deadline, which
                // only a batch that waits it out needs this worker for.
                Decision::Wait(Some(at)) if state.dozing_until.is_none() && self.inline.open() => {
                    state.dozing_until = Some(at);
                    dozed = true;
                    Next::Doze(at)
                }
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
    instance: SharedInstance,
}

impl Worker for BatchWorker {
    type Batch = (Vec<Job>, u64);

    fn next(&mut self, rest: &Rest<'_>) -> Step<Self::Batch> {
        let instance = &self.instance;
        // Idle: the instance may give back what it holds (not while an I/O thread runs it).
        let idle = || {
            if let Some(mut guard) = instance.try_lock()
                && let Some(instance) = guard.as_mut()
            {
                instance.idle();
            }
        };
        self.shared.next_batch(self.shared.ctx.poll, rest, idle)
    }

    fn run(&mut self, (mut batch, ticket): Self::Batch) {
        let mut guard = self.instance.lock();
        match guard.as_mut() {
            Some(instance) => {
                let shared = &*self.shared;
                run_batch(&shared.ctx, &shared.inline, instance.as_mut(), &mut batch, ExecutionThread::Worker);
            }
            None => {
                for job in &mut batch {
                    job.fail(InferError::unavailable(INSTANCES_STOPPED));
                }
            }
        }
        drop(guard);
        self.shared.deliver(ticket, batch);
    }

    fn finish(self) {
        if let Some(instance) = self.instance.lock().take() {
            instance.finalize();
        }
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

    #[test]
    fn a_dozing_worker_is_woken_only_for_what_cannot_wait_for_it() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_micros(100);
        let mut state = State { queues: queue_of(&[], t0), next_ticket: 0, dozing_until: None };
        // No worker sleeps until a deadline: one must be woken for anything.
        assert!(state.needs_a_worker(&Decision::Wait(Some(later))));
        // One sleeps until the batch's deadline or before: it will look in time.
        state.dozing_until = Some(later);
        assert!(!state.needs_a_worker(&Decision::Wait(Some(later))));
        assert!(!state.needs_a_worker(&Decision::Wait(Some(later + Duration::from_micros(1)))));
        // A batch due sooner than it wakes, or due now, needs a worker awake.
        assert!(state.needs_a_worker(&Decision::Wait(Some(t0))));
        assert!(state.needs_a_worker(&Decision::Take(1)));
    }
}
