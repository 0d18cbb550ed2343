//! The sequence batcher (`sequence_batching { … }`): every request of a sequence (one correlation
//! id, from its START to its END) goes to the same instance and the same slot, in order.
//!
//! Each instance has `slots_per_instance` slots. A new sequence takes the free slot with the lowest
//! index (spreading sequences over instances), or waits in a first-come-first-served backlog with
//! every request it receives meanwhile; when a sequence's END request has executed, its slot goes at
//! once to the first backlogged sequence. A sequence idle for `max_sequence_idle_microseconds` loses
//! its slot and state, and its next request without START fails as Triton's does. A backlogged
//! sequence expires with the earliest `timeout` of the requests it holds: all of them are refused
//! and the sequence forgotten, as tritonserver's reaper does (a request's timeout does not apply
//! once its sequence holds a slot).
//!
//! Each instance's worker forms its batches from the heads of its slots:
//! - **direct**: batch position = slot index; slots with nothing to run this time (up to the last
//!   occupied slot) get a padding request with READY false, whose outputs are dropped. With a
//!   `minimum_slot_utilization`, a batch waits for that share of slots to be ready, at most
//!   `max_queue_delay_microseconds`;
//! - **oldest**: a dynamic batch of the oldest heads (preferred sizes, queue delay), never two
//!   requests of one sequence.
//!
//! Before a request reaches the backend the host adds the control tensors (START, END, READY,
//! CORRID) and each implicit state's input; after it ran, the state output is kept for the
//! sequence's next request and removed from the response unless the client asked for it.
mod backlog;
mod cancel;
mod hold;
mod reaper;
mod rules;

pub use rules::SequenceRules;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::lifecycle::{Lifecycle, Next, Rest, Step, Worker, wait_for_batch};
use super::ordering::OrderedDelivery;
use super::{Caller, Schedule, WorkerContext, flush};
use crate::backend::{BackendInstance, ExecutionThread};
use crate::device_io::DeviceTensors;
use crate::error::InferError;
use crate::request::{CorrelationId, Job, ResponseSender, Tensor};
use crate::stats::ModelStats;
use backlog::Backlog;
use hold::Hold;
use reaper::{REAPER, Reap, Registration};
use rules::Strategy;

/// Where a sequence runs: (instance, slot).
type SlotRef = (usize, usize);

#[derive(Default)]
struct Slot {
    /// The sequence holding the slot.
    sequence: Option<CorrelationId>,
    queue: VecDeque<Job>,
    /// Implicit state values, one per state spec (without the batch dimension); empty until the
    /// sequence's first request ran.
    state: Vec<Tensor>,
    last_seen: Option<Instant>,
    /// A request of this slot is executing.
    busy: bool,
    /// Its sequence was cancelled ([`cancel`]): the requests queued before the cancelled one
    /// still run, later ones are answered CANCELLED, and the slot is released once they ran.
    cancelled: bool,
}

/// What tritonserver answers to each request of a sequence whose backlog expired.
const BACKLOG_EXPIRED: &str = "timeout of the corresponding sequence has been expired";

struct State {
    slots: Vec<Vec<Slot>>,
    /// Free slots as (slot, instance): the lowest slot index first, across instances.
    free: BTreeSet<(usize, usize)>,
    /// Sequences holding a slot whose END has not arrived yet.
    active: HashMap<CorrelationId, SlotRef>,
    backlog: Backlog,
    /// The ticket of the next formed batch (for `preserve_ordering`).
    next_ticket: u64,
    /// tritonserver's test hold on the first batch, until it is released (see [`hold`]).
    hold: Option<Hold>,
    /// The reaper will look at the slots (armed, or looking now): set when a slot takes a
    /// sequence, cleared when the reaper finds none held.
    reaping: bool,
    /// Requests of cancelled sequences, to be answered CANCELLED once the lock is let go.
    cancelled: Vec<Job>,
}

struct Shared {
    model: Arc<str>,
    rules: SequenceRules,
    state: Mutex<State>,
    /// One per instance: signalled when one of its slots gets a request.
    work: Vec<Condvar>,
    /// On the process's reaper of idle sequences (see [`reaper`]).
    reaper: Registration,
    /// Statistics sink for padding requests (never reported).
    padding_stats: Arc<ModelStats>,
    /// The version's statistics, for the requests of cancelled sequences.
    stats: Arc<ModelStats>,
    ordering: OrderedDelivery,
    lifecycle: Lifecycle,
}

pub struct SequenceBatcher {
    shared: Arc<Shared>,
}

impl SequenceBatcher {
    pub fn start(
        model: &str,
        instances: Vec<Box<dyn BackendInstance>>,
        ctx: WorkerContext,
        rules: SequenceRules,
    ) -> Self {
        let count = instances.len();
        let per = rules.slots_per_instance;
        let shared = Arc::new_cyclic(|me: &Weak<Shared>| Shared {
            model: model.into(),
            state: Mutex::new(State {
                slots: (0..count).map(|_| (0..per).map(|_| Slot::default()).collect()).collect(),
                free: (0..per).flat_map(|s| (0..count).map(move |i| (s, i))).collect(),
                active: HashMap::new(),
                backlog: Backlog::default(),
                next_ticket: 0,
                hold: Hold::from_env(),
                reaping: false,
                cancelled: Vec::new(),
            }),
            rules,
            work: (0..count).map(|_| Condvar::new()).collect(),
            reaper: REAPER.register(me.clone() as Weak<dyn Reap>),
            padding_stats: Arc::new(ModelStats::default()),
            stats: ctx.stats.clone(),
            ordering: OrderedDelivery::default(),
            lifecycle: Lifecycle::default(),
        });
        let workers: Vec<SlotWorker> = instances
            .into_iter()
            .enumerate()
            .map(|(index, instance)| SlotWorker { shared: shared.clone(), index, instance, ctx: ctx.clone() })
            .collect();
        shared.lifecycle.start(model, workers);
        SequenceBatcher { shared }
    }

    /// Where [`Schedule::enqueue`] puts a request; a refused one comes back with its error.
    #[allow(clippy::result_large_err)]
    fn route(&self, mut job: Job) -> Result<(), (Job, InferError)> {
        let model = &self.shared.model;
        let id = job.request.correlation_id.clone();
        if id == CorrelationId::None {
            let message =
                format!("inference request to model '{model}' must specify a non-zero or non-empty correlation ID");
            return Err((job, InferError::invalid(message)));
        }
        // Not 0 rows either (which the server's checks let through for other schedulers): the
        // controls and states are one row per request, so a request of no rows would shift the
        // other sequences' data against their controls in the batch.
        if job.request.batch_size(self.shared.rules.batching) != 1 {
            let message = format!(
                "inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"
            );
            return Err((job, InferError::invalid(message)));
        }
        if let Err(e) = self.shared.rules.check_id(model, &id) {
            return Err((job, e));
        }
        let (start, end) = (job.request.sequence_start, job.request.sequence_end);
        let now = Instant::now();
        job.enqueued = now;
        let mut state = self.shared.state.lock();
        if let Err(e) = self.shared.lifecycle.admit() {
            drop(state);
            return Err((job, e));
        }
        if let Some(&(instance, slot)) = state.active.get(&id) {
            if start {
                tracing::warn!(
                    "sequence {} for model '{model}' has a conflict: the previous sequence did not end before this \
                     sequence start; it is ended early",
                    id_text(&id)
                );
            }
            if end {
                state.active.remove(&id);
            }
            let s = &mut state.slots[instance][slot];
            if s.cancelled {
                drop(state);
                self.shared.answer_cancelled(vec![job]);
                return Ok(());
            }
            s.queue.push_back(job);
            s.last_seen = Some(now);
            drop(state);
            self.shared.work[instance].notify_one();
            self.shared.lifecycle.wake(instance);
            return Ok(());
        }
        let job = match state.backlog.join(&id, job, end, now) {
            Ok(expires) => {
                if let Some(at) = expires {
                    self.shared.reaper.arm(at);
                }
                return Ok(());
            }
            Err(job) => job,
        };
        if !start {
            let message = format!(
                "inference request for sequence {} to model '{model}' must specify the START flag on the first request of the sequence",
                id_text(&id)
            );
            drop(state);
            return Err((job, InferError::invalid(message)));
        }
        match state.free.pop_first() {
            Some((slot, instance)) => {
                if !end {
                    state.active.insert(id.clone(), (instance, slot));
                }
                let s = &mut state.slots[instance][slot];
                s.sequence = Some(id);
                s.state.clear();
                s.queue.push_back(job);
                s.last_seen = Some(now);
                self.shared.watch_idle(&mut state, now);
                drop(state);
                self.shared.work[instance].notify_one();
                self.shared.lifecycle.wake(instance);
            }
            None => {
                if let Some(at) = state.backlog.start(id, job, end, now) {
                    self.shared.reaper.arm(at);
                }
            }
        }
        Ok(())
    }
}

impl Schedule for SequenceBatcher {
    /// Routes a validated request to its sequence's slot or backlog. Requests that cannot belong to
    /// a sequence are refused with Triton's errors.
    fn enqueue(&self, job: Job, _caller: Caller) {
        if let Err((mut job, e)) = self.route(job) {
            job.fail(e);
        }
    }

    /// Requests waiting: in slots and in the backlog.
    fn queued(&self) -> usize {
        let state = self.shared.state.lock();
        state.slots.iter().flatten().map(|s| s.queue.len()).sum::<usize>() + state.backlog.requests()
    }

    /// Sequences started and not yet ended, holding a slot or waiting in the backlog: a shutdown
    /// waits for them (tritonserver counts the slots' sequences; a backlogged one is as much in
    /// flight).
    fn in_flight(&self, _executing: usize) -> usize {
        let state = self.shared.state.lock();
        state.active.len() + state.backlog.len()
    }

    /// Ends at once the sequences with a request whose client has gone: such a request and those
    /// after it in its slot are answered CANCELLED (the slot is released once the earlier ones
    /// ran), a backlogged sequence is answered CANCELLED whole. See [`cancel`].
    fn drop_cancelled(&self) {
        let cancelled = {
            let mut state = self.shared.state.lock();
            self.shared.cancel_sequences(&mut state);
            std::mem::take(&mut state.cancelled)
        };
        self.shared.answer_cancelled(cancelled);
    }

    /// Stops taking requests; runs what is queued in slots, fails what waits in the backlog (it
    /// would wait for sequences that may never end), then finalises the instances.
    fn shutdown(&self) {
        let backlog = {
            let mut state = self.shared.state.lock();
            self.shared.lifecycle.close();
            state.backlog.drain()
        };
        for mut b in backlog {
            for job in &mut b.queue {
                job.fail(InferError::unavailable("the model is being unloaded"));
            }
        }
        for cv in &self.shared.work {
            cv.notify_all();
        }
        self.shared.lifecycle.join();
    }
}

fn id_text(id: &CorrelationId) -> String {
    match id {
        CorrelationId::Numeric(n) => n.to_string(),
        CorrelationId::Text(s) => s.clone(),
        CorrelationId::None => String::new(),
    }
}

/// A request in a formed batch: a real one (with the slot it came from) or padding.
struct Entry {
    slot: usize,
    padding: bool,
    end: bool,
}

/// A formed batch: its requests, what each of them is, and its ticket.
type Formed = (Vec<Job>, Vec<Entry>, u64);

impl Shared {
    /// Decides what instance `i` does next, from its slots as they stand at `now`.
    fn next(&self, state: &mut State, i: usize, now: Instant) -> Next<Formed> {
        if let Some(hold) = state.hold {
            let queued = state.slots.iter().flatten().map(|s| s.queue.len()).sum();
            let backlogged = state.backlog.requests();
            if !hold.released_by(queued, backlogged) && !self.lifecycle.is_closed() {
                return Next::Wait(Some(now + hold::POLL));
            }
            state.hold = None;
        }
        let slots = &state.slots[i];
        let ready: Vec<usize> = (0..slots.len()).filter(|s| !slots[*s].queue.is_empty()).collect();
        if ready.is_empty() {
            return if self.lifecycle.is_closed() { Next::Exit } else { Next::Wait(None) };
        }
        let head_age = |s: usize| slots[s].queue.front().map_or(now, |j| j.enqueued);
        let oldest = ready.iter().map(|s| head_age(*s)).min().unwrap_or(now);
        // Only requests whose shapes match the reference's run together (tritonserver's
        // `enforce_equal_shape_tensors`), with the same optional inputs; the others wait for a
        // later batch.
        let matching = |reference: usize, candidates: Vec<usize>| -> Vec<usize> {
            let Some(reference) = slots[reference].queue.front().map(|j| &j.request) else { return candidates };
            if !self.rules.constrains_batches() {
                return candidates;
            }
            candidates
                .into_iter()
                .filter(|s| slots[*s].queue.front().is_some_and(|j| self.rules.batch_together(reference, &j.request)))
                .collect()
        };
        let take: Vec<usize> = match &self.rules.strategy {
            Strategy::Direct { min_utilization, max_queue_delay } => {
                let needed = (min_utilization * slots.len() as f32).ceil() as usize;
                if *min_utilization > 0.0
                    && ready.len() < needed
                    && !self.lifecycle.is_closed()
                    && now.saturating_duration_since(oldest) < *max_queue_delay
                {
                    return Next::Wait(Some(oldest + *max_queue_delay));
                }
                // The batch still spans every ready slot: a slot whose request does not match the
                // oldest head's is padding this time, as tritonserver's null request. (Matching
                // the lowest ready slot's instead starved a slot whose requests never matched a
                // busier slot below it.)
                let span = ready.last().copied().unwrap_or(0);
                let first = ready.iter().copied().min_by_key(|s| head_age(*s)).unwrap_or(ready[0]);
                let take = matching(first, ready);
                return self.form(state, i, &take, span);
            }
            Strategy::Oldest { preferred, max_queue_delay, .. } => {
                let first = ready.iter().copied().min_by_key(|s| head_age(*s)).unwrap_or(ready[0]);
                let mut by_age = matching(first, ready);
                by_age.sort_by_key(|s| head_age(*s));
                let n = by_age.len().min(self.rules.max_batch_size);
                let waited_out = max_queue_delay.is_zero()
                    || self.lifecycle.is_closed()
                    || now.saturating_duration_since(oldest) >= *max_queue_delay;
                let size = match preferred.iter().rev().find(|p| **p <= n) {
                    Some(p) if !waited_out => *p,
                    _ if waited_out || n >= preferred.last().copied().unwrap_or(n) => n,
                    _ => return Next::Wait(Some(oldest + *max_queue_delay)),
                };
                by_age.truncate(size);
                by_age
            }
        };
        let span = take.iter().copied().max().unwrap_or(0);
        self.form(state, i, &take, span)
    }

    /// Takes the head request of each slot in `take` (direct: padding every other slot up to
    /// `span`, so that batch position = slot), adding controls and state.
    fn form(&self, state: &mut State, i: usize, take: &[usize], span: usize) -> Next<Formed> {
        let direct = matches!(self.rules.strategy, Strategy::Direct { .. });
        let positions: Vec<usize> = if direct { (0..=span).collect() } else { take.to_vec() };
        // Padding copies a real request's inputs (shared bytes, and those still in GPU memory);
        // only direct batches with gaps need it.
        let template = (positions.len() > take.len())
            .then(|| {
                take.first()
                    .and_then(|s| state.slots[i][*s].queue.front())
                    .map(|j| (j.request.inputs.clone(), j.request.device_inputs.clone()))
            })
            .flatten();
        let mut jobs = Vec::with_capacity(positions.len());
        let mut entries = Vec::with_capacity(positions.len());
        for slot in positions {
            let s = &mut state.slots[i][slot];
            let mut job = if take.contains(&slot) {
                s.busy = true;
                match s.queue.pop_front() {
                    Some(job) => job,
                    None => continue,
                }
            } else {
                self.padding(template.clone().unwrap_or_default())
            };
            let padding = job.sender.is_padding();
            let r = &job.request;
            let (start, end) = (r.sequence_start && !padding, r.sequence_end && !padding);
            let controls = self.rules.control_tensors(&r.correlation_id, start, end, !padding);
            job.request.inputs.extend(controls);
            for (k, spec) in self.rules.states.iter().enumerate() {
                let value = if start || padding { None } else { s.state.get(k) };
                job.request.inputs.push(self.rules.state_input(spec, value.unwrap_or(&spec.initial)));
            }
            if start {
                s.state.clear();
            }
            entries.push(Entry { slot, padding, end });
            jobs.push(job);
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        Next::Run((jobs, entries, ticket))
    }

    fn padding(&self, (inputs, device_inputs): (Vec<Tensor>, DeviceTensors)) -> Job {
        let request = crate::request::InferenceRequest { inputs, device_inputs, ..Default::default() };
        Job { request, sender: ResponseSender::discard(self.padding_stats.clone()), enqueued: Instant::now() }
    }

    /// After an execution: keeps each sequence's state output, drops it from responses that did not
    /// ask for it, and frees the slots whose sequence ended.
    fn finish(&self, i: usize, batch: &mut [Job], entries: &[Entry]) {
        let mut state = self.state.lock();
        self.keep_states(&mut state, i, batch, entries);
        let cancelled = std::mem::take(&mut state.cancelled);
        drop(state);
        self.answer_cancelled(cancelled);
    }

    /// [`finish`](Self::finish)'s work under the lock.
    fn keep_states(&self, state: &mut State, i: usize, batch: &mut [Job], entries: &[Entry]) {
        for (job, entry) in batch.iter_mut().zip(entries) {
            if entry.padding {
                continue;
            }
            let requested = &job.request.requested_outputs;
            let slot = &mut state.slots[i][entry.slot];
            slot.busy = false;
            slot.last_seen = Some(Instant::now());
            if let Some(outputs) = job.sender.held_outputs_mut() {
                let mut kept = Vec::with_capacity(self.rules.states.len());
                for spec in &self.rules.states {
                    if let Some(pos) = outputs.iter().position(|o| o.name == spec.output) {
                        let value =
                            if requested.contains(&spec.output) { outputs[pos].clone() } else { outputs.remove(pos) };
                        kept.push(self.rules.state_value(value));
                    }
                }
                if kept.len() == self.rules.states.len() {
                    slot.state = kept;
                }
            }
            // A cancelled sequence's slot is released once the requests queued before the
            // cancelled one have run.
            if entry.end || (slot.cancelled && slot.queue.is_empty()) {
                self.release(state, (i, entry.slot));
            }
        }
    }

    /// Frees a slot: it goes to the first backlogged sequence, or back to the free set.
    fn release(&self, state: &mut State, (i, s): SlotRef) {
        let slot = &mut state.slots[i][s];
        if let Some(id) = slot.sequence.take()
            && state.active.get(&id) == Some(&(i, s))
        {
            state.active.remove(&id);
        }
        let slot = &mut state.slots[i][s];
        slot.state.clear();
        slot.cancelled = false;
        // Requests still queued here belong to a sequence that restarted without ending; they
        // were taken over by this slot's next owner in Triton too, so keep them in order.
        match self.next_backlogged(state) {
            Some(b) => {
                let slot = &mut state.slots[i][s];
                slot.sequence = Some(b.id.clone());
                slot.queue.extend(b.queue);
                let now = Instant::now();
                slot.last_seen = Some(now);
                if !b.ended {
                    state.active.insert(b.id, (i, s));
                }
                self.watch_idle(state, now);
                self.work[i].notify_one();
                self.lifecycle.wake(i);
            }
            None if state.slots[i][s].queue.is_empty() => {
                state.free.insert((s, i));
            }
            None => {}
        }
    }

    /// Has the reaper look at the slots once the sequence a slot has just taken could be idle
    /// too long (unless it will already).
    fn watch_idle(&self, state: &mut State, now: Instant) {
        if !state.reaping {
            state.reaping = true;
            self.reaper.arm(now + self.rules.idle + Duration::from_millis(1));
        }
    }
}

impl Reap for Shared {
    /// Releases sequences idle for longer than `max_sequence_idle_microseconds`: their slot goes to
    /// the backlog or back to the free set, their state is dropped. Refuses the requests of
    /// backlogged sequences past their expiry. Looks again when the next held or backlogged
    /// sequence could expire; not at all while none is.
    fn reap(&self, now: Instant) -> Option<Instant> {
        let idle = self.rules.idle;
        let mut state = self.state.lock();
        if self.lifecycle.is_closed() {
            state.reaping = false;
            return None;
        }
        let expired_backlog = state.backlog.take_expired(now);
        let mut next: Option<Instant> = state.backlog.next_expiry();
        let mut expired = Vec::new();
        for (i, slots) in state.slots.iter().enumerate() {
            for (s, slot) in slots.iter().enumerate() {
                let (Some(_), Some(seen)) = (&slot.sequence, slot.last_seen) else { continue };
                let due = if slot.busy || !slot.queue.is_empty() {
                    // Running: it cannot be idle before a whole period from now.
                    now + idle
                } else if now.saturating_duration_since(seen) >= idle {
                    expired.push((i, s));
                    continue;
                } else {
                    seen + idle
                };
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        for r in expired {
            if let Some(id) = &state.slots[r.0][r.1].sequence {
                tracing::info!("model '{}': sequence {} idle for {idle:?}, released", self.model, id_text(id));
            }
            self.release(&mut state, r);
            // A backlogged sequence that took the slot is watched from now.
            if state.slots[r.0][r.1].sequence.is_some() {
                next = Some(next.map_or(now + idle, |n| n.min(now + idle)));
            }
        }
        state.reaping = next.is_some();
        let cancelled = std::mem::take(&mut state.cancelled);
        drop(state);
        self.answer_cancelled(cancelled);
        for mut b in expired_backlog {
            tracing::info!("model '{}': sequence {} timed out in the backlog", self.model, id_text(&b.id));
            for job in &mut b.queue {
                job.fail(InferError::unavailable(BACKLOG_EXPIRED));
            }
        }
        next.map(|n| n + Duration::from_millis(1))
    }
}

/// Instance `index`'s worker: forms its batches from the heads of its own slots.
struct SlotWorker {
    shared: Arc<Shared>,
    index: usize,
    instance: Box<dyn BackendInstance>,
    ctx: WorkerContext,
}

impl Worker for SlotWorker {
    type Batch = Formed;

    fn next(&mut self, rest: &Rest<'_>) -> Step<Formed> {
        let shared = &*self.shared;
        // Nothing to give back when idle: the plugin holds its sequences' state.
        wait_for_batch(
            &shared.state,
            &shared.work[self.index],
            self.ctx.poll,
            rest,
            || {},
            |state, now| {
                // A cancelled request at the head of a slot ends its sequence (the streams'
                // requests, whose cancellation no frontend reports).
                if shared.cancel_heads(state, self.index) {
                    let cancelled = std::mem::take(&mut state.cancelled);
                    parking_lot::MutexGuard::unlocked(state, || shared.answer_cancelled(cancelled));
                }
                shared.next(state, self.index, now)
            },
        )
    }

    /// Every request of the batch runs, its client there or not: a sequence's state depends on
    /// each of its requests.
    fn run(&mut self, (mut batch, entries, ticket): Formed) {
        self.ctx.execute(self.instance.as_mut(), &mut batch, ExecutionThread::Worker);
        self.shared.finish(self.index, &mut batch, &entries);
        if matches!(self.shared.rules.strategy, Strategy::Oldest { preserve_ordering: true, .. }) {
            self.shared.ordering.deliver(ticket, batch);
        } else {
            flush(&mut batch);
        }
    }

    fn finish(self) {
        self.instance.finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::InferenceRequest;
    use crate::tensor::DataType;
    use bytes::Bytes;

    /// A batcher's shared state with one instance of `slots` slots and no worker, for `next`.
    fn shared(strategy: Strategy, slots: usize) -> Arc<Shared> {
        Arc::new_cyclic(|me: &Weak<Shared>| Shared {
            model: "m".into(),
            rules: SequenceRules {
                strategy,
                slots_per_instance: slots,
                max_batch_size: slots,
                idle: Duration::from_secs(60),
                controls: Default::default(),
                states: Vec::new(),
                batching: true,
                equal_shape_inputs: vec!["INPUT0".into()],
                optional_inputs: true,
            },
            state: Mutex::new(State {
                slots: vec![(0..slots).map(|_| Slot::default()).collect()],
                free: BTreeSet::new(),
                active: HashMap::new(),
                backlog: Backlog::default(),
                next_ticket: 0,
                hold: None,
                reaping: false,
                cancelled: Vec::new(),
            }),
            work: vec![Condvar::new()],
            reaper: REAPER.register(me.clone() as Weak<dyn Reap>),
            padding_stats: Arc::new(ModelStats::default()),
            stats: Arc::new(ModelStats::default()),
            ordering: OrderedDelivery::default(),
            lifecycle: Lifecycle::default(),
        })
    }

    fn tensor(name: &str, width: i64) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: DataType::Int32,
            shape: vec![1, width],
            data: Bytes::from(vec![0; 4 * width as usize]),
        }
    }

    /// Queues a request of sequence `id` in `slot`, with `inputs`, that arrived at `at`.
    fn queue(state: &mut State, slot: usize, id: u64, inputs: Vec<Tensor>, at: Instant) {
        let (sender, _rx) = ResponseSender::unary(Arc::new(ModelStats::default()));
        let request = InferenceRequest { correlation_id: CorrelationId::Numeric(id), inputs, ..Default::default() };
        let s = &mut state.slots[0][slot];
        s.sequence = Some(CorrelationId::Numeric(id));
        s.queue.push_back(Job { request, sender, enqueued: at });
    }

    /// The slots whose request the next batch takes (padding left out).
    fn taken(shared: &Shared, now: Instant) -> Vec<usize> {
        let mut state = shared.state.lock();
        match shared.next(&mut state, 0, now) {
            Next::Run((_, entries, _)) => entries.iter().filter(|e| !e.padding).map(|e| e.slot).collect(),
            _ => panic!("no batch formed"),
        }
    }

    /// Direct: requests that cannot share a batch (here unequal shapes) are matched against the
    /// oldest head, not the lowest slot's, so a slot below that always has work cannot keep one
    /// above it waiting.
    #[test]
    fn direct_batches_start_from_the_oldest_head() {
        let s = shared(Strategy::Direct { min_utilization: 0.0, max_queue_delay: Duration::ZERO }, 3);
        let t = Instant::now();
        {
            let mut state = s.state.lock();
            queue(&mut state, 0, 1, vec![tensor("INPUT0", 2)], t + Duration::from_millis(2));
            queue(&mut state, 0, 1, vec![tensor("INPUT0", 2)], t + Duration::from_millis(3));
            queue(&mut state, 1, 2, vec![tensor("INPUT0", 3)], t + Duration::from_millis(1));
            queue(&mut state, 2, 3, vec![tensor("INPUT0", 3)], t + Duration::from_millis(4));
        }
        let now = t + Duration::from_millis(5);
        assert_eq!(taken(&s, now), [1, 2], "the oldest head (slot 1) and the one matching it");
        assert_eq!(taken(&s, now), [0]);
        assert_eq!(taken(&s, now), [0]);
    }

    /// Requests with different optional inputs never share a batch (an input would cover only
    /// some of its rows), with either strategy.
    #[test]
    fn requests_with_different_optional_inputs_run_apart() {
        for strategy in [
            Strategy::Direct { min_utilization: 0.0, max_queue_delay: Duration::ZERO },
            Strategy::Oldest { preferred: Vec::new(), max_queue_delay: Duration::ZERO, preserve_ordering: false },
        ] {
            let s = shared(strategy.clone(), 3);
            let t = Instant::now();
            {
                let mut state = s.state.lock();
                queue(&mut state, 0, 1, vec![tensor("INPUT0", 2)], t);
                queue(&mut state, 1, 2, vec![tensor("INPUT0", 2), tensor("OPTIONAL", 1)], t + Duration::from_millis(1));
                queue(&mut state, 2, 3, vec![tensor("INPUT0", 2)], t + Duration::from_millis(2));
            }
            let now = t + Duration::from_millis(5);
            assert_eq!(taken(&s, now), [0, 2], "{strategy:?}");
            assert_eq!(taken(&s, now), [1], "{strategy:?}");
        }
    }
}
