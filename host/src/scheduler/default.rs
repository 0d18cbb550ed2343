//! The default scheduler (a model with no `dynamic_batching` or `sequence_batching`): every
//! request is its own batch, taken by the first idle instance.
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use super::{WorkerContext, flush, spawn_workers};
use crate::backend::BackendInstance;
use crate::error::InferError;
use crate::request::Job;

pub struct DefaultScheduler {
    /// `None` once the model is unloading: new requests are refused, queued ones still run.
    queue: RwLock<Option<Sender<Vec<Job>>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl DefaultScheduler {
    /// Starts one worker thread per instance, all taking from one queue.
    pub fn start(model: &str, instances: Vec<Box<dyn BackendInstance>>, ctx: WorkerContext) -> Self {
        let poll = ctx.poll;
        let (tx, rx) = crossbeam_channel::unbounded::<Vec<Job>>();
        let workers =
            spawn_workers(model, instances, move |_, instance| run_instance(rx.clone(), instance, ctx.clone(), poll));
        DefaultScheduler { queue: RwLock::new(Some(tx)), workers: Mutex::new(workers) }
    }

    pub fn enqueue(&self, mut job: Job) -> Result<(), InferError> {
        job.enqueued = Instant::now();
        match &*self.queue.read() {
            Some(tx) => tx.send(vec![job]).map_err(|_| InferError::unavailable("the model's instances have stopped")),
            None => Err(InferError::unavailable("the model is being unloaded")),
        }
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

/// An instance's worker: executes one batch at a time.
fn run_instance(queue: Receiver<Vec<Job>>, mut instance: Box<dyn BackendInstance>, ctx: WorkerContext, poll: Duration) {
    while let Some(mut batch) = next_batch(&queue, poll) {
        ctx.execute(instance.as_mut(), &mut batch);
        flush(&mut batch);
    }
    instance.finalize();
}
