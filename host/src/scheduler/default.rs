//! The default scheduler (a model with no `dynamic_batching` or `sequence_batching`): every
//! request is its own batch, taken by the first idle instance — or, for a model that has shown its
//! executions are short, run at once on the I/O thread that received it when an instance is idle
//! and nothing is queued (see [`super::inline`]).
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use super::inline::{InlineGate, IoSlot};
use super::{WorkerContext, flush, spawn_workers};
use crate::backend::BackendInstance;
use crate::error::InferError;
use crate::request::Job;

/// How long an I/O thread waits for a busy instance of an inline model before it hands the
/// request to the instance's worker instead.
const INSTANCE_WAIT: Duration = Duration::from_micros(50);

/// An instance, shared by its worker thread and inline executions (whoever holds the lock runs
/// it); `None` once finalised.
type SharedInstance = Arc<Mutex<Option<Box<dyn BackendInstance>>>>;

pub struct DefaultScheduler {
    /// `None` once the model is unloading: new requests are refused, queued ones still run.
    queue: RwLock<Option<Sender<Vec<Job>>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    instances: Vec<SharedInstance>,
    inline: Arc<InlineGate>,
    ctx: WorkerContext,
}

impl DefaultScheduler {
    /// Starts one worker thread per instance, all taking from one queue.
    pub fn start(model: &str, instances: Vec<Box<dyn BackendInstance>>, ctx: WorkerContext) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded::<Vec<Job>>();
        let instances: Vec<SharedInstance> = instances.into_iter().map(|i| Arc::new(Mutex::new(Some(i)))).collect();
        let inline = Arc::new(InlineGate::new(ctx.inline_under));
        let worker = Worker { ctx: ctx.clone(), inline: inline.clone() };
        let workers = spawn_workers(model, instances.clone(), move |_, instance| worker.run(rx.clone(), instance));
        DefaultScheduler { queue: RwLock::new(Some(tx)), workers: Mutex::new(workers), instances, inline, ctx }
    }

    pub fn enqueue(&self, mut job: Job) -> Result<(), InferError> {
        job.enqueued = Instant::now();
        let queue = self.queue.read();
        let Some(tx) = &*queue else { return Err(InferError::unavailable("the model is being unloaded")) };
        let Some(job) = self.try_inline(job, tx) else { return Ok(()) };
        tx.send(vec![job]).map_err(|_| InferError::unavailable("the model's instances have stopped"))
    }

    /// Runs `job` here and now if the model may run inline, an I/O slot is free, nothing is
    /// queued and an instance is idle or soon will be; hands it back otherwise.
    fn try_inline(&self, job: Job, queue: &Sender<Vec<Job>>) -> Option<Job> {
        if !self.inline.open() || !queue.is_empty() || self.ctx.probe.gate_engaged() {
            return Some(job);
        }
        let Some(_slot) = IoSlot::take() else { return Some(job) };
        // An idle instance, or else the first one once its current execution ends, if that is soon:
        // the model's executions are short (the gate says so), and waiting here for one costs less
        // than handing the request to the worker and being woken with the answer.
        let free = self.instances.iter().find_map(|i| i.try_lock());
        let free = free.or_else(|| self.instances.first().and_then(|i| i.try_lock_for(INSTANCE_WAIT)));
        if let Some(mut guard) = free
            && let Some(instance) = guard.as_mut()
        {
            let mut batch = vec![job];
            self.ctx.probe.count_inline();
            run_batch(&self.ctx, &self.inline, instance.as_mut(), &mut batch);
            drop(guard);
            flush(&mut batch);
            // A request the backend could not run here (a blocking WASI call on an I/O thread)
            // is still open: it goes to the instance's worker, as it would have without inlining.
            batch.retain(|j| !j.sender.is_complete());
            if !batch.is_empty() {
                self.inline.bar();
                if let Err(e) = queue.send(batch) {
                    for mut job in e.into_inner() {
                        job.fail(InferError::unavailable("the model's instances have stopped"));
                    }
                }
            }
            return None;
        }
        Some(job)
    }

    pub fn queued(&self) -> usize {
        self.queue.read().as_ref().map_or(0, |tx| tx.len())
    }

    /// Stops taking requests, lets the instances finish every queued one, then finalises them.
    /// Blocks until done.
    pub fn shutdown(&self) {
        self.queue.write().take();
        for worker in self.workers.lock().drain(..) {
            let _ = worker.join();
        }
    }
}

/// Executes one batch and tells the inline gate how it went.
fn run_batch(ctx: &WorkerContext, inline: &InlineGate, instance: &mut dyn BackendInstance, batch: &mut Vec<Job>) {
    let timer = inline.timer();
    ctx.execute(instance, batch);
    if let Some(timer) = timer {
        inline.finish(timer, batch.iter().any(|j| j.sender.failed_internally()));
    }
}

/// Takes the next batch. An idle worker keeps polling (yielding the CPU to runnable threads) for
/// `poll` before it parks: waking a parked thread costs tens of microseconds on a loaded VM, as much
/// as a whole small execution, and under load the next batch usually arrives within the window.
/// Measured on 2 cores (bench/README.md): parking at once costs more CPU per request than polling.
fn next_batch(queue: &Receiver<Vec<Job>>, poll: Duration) -> Option<Vec<Job>> {
    let start = Instant::now();
    loop {
        match queue.try_recv() {
            Ok(batch) => return Some(batch),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
            Err(crossbeam_channel::TryRecvError::Empty) if start.elapsed() < poll => std::thread::yield_now(),
            Err(crossbeam_channel::TryRecvError::Empty) => return queue.recv().ok(),
        }
    }
}

/// What an instance's worker thread needs.
#[derive(Clone)]
struct Worker {
    ctx: WorkerContext,
    inline: Arc<InlineGate>,
}

impl Worker {
    /// Executes one batch at a time from the queue until the scheduler stops, then finalises the
    /// instance.
    fn run(&self, queue: Receiver<Vec<Job>>, instance: SharedInstance) {
        while let Some(mut batch) = next_batch(&queue, self.ctx.poll) {
            let mut guard = instance.lock();
            if let Some(instance) = guard.as_mut() {
                run_batch(&self.ctx, &self.inline, instance.as_mut(), &mut batch);
            }
            drop(guard);
            flush(&mut batch);
        }
        if let Some(instance) = instance.lock().take() {
            instance.finalize();
        }
    }
}
