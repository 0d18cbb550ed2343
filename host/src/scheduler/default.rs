//! The default scheduler (a model with no `dynamic_batching` or `sequence_batching`): every
//! request is its own batch, taken by the first idle instance.
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use crate::backend::BackendInstance;
use crate::error::InferError;
use crate::model::ExecutionProbe;
use crate::request::Job;
use crate::stats::ModelStats;

pub struct DefaultScheduler {
    /// `None` once the model is unloading: new requests are refused, queued ones still run.
    queue: RwLock<Option<Sender<Vec<Job>>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl DefaultScheduler {
    /// Starts one worker thread per instance, all taking from one queue.
    pub fn start(
        model: &str,
        instances: Vec<Box<dyn BackendInstance>>,
        probe: Arc<ExecutionProbe>,
        stats: Arc<ModelStats>,
        batching: bool,
        poll: Duration,
    ) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded::<Vec<Job>>();
        let workers = instances
            .into_iter()
            .enumerate()
            .map(|(i, instance)| {
                let (rx, probe, stats) = (rx.clone(), probe.clone(), stats.clone());
                std::thread::Builder::new()
                    .name(format!("{model}#{i}"))
                    .spawn(move || run_instance(rx, instance, probe, stats, batching, poll))
                    .expect("spawning an instance worker thread")
            })
            .collect();
        DefaultScheduler { queue: RwLock::new(Some(tx)), workers: Mutex::new(workers) }
    }

    pub fn enqueue(&self, mut job: Job) -> Result<(), InferError> {
        job.enqueued = Instant::now();
        match &*self.queue.read() {
            Some(tx) => tx.send(vec![job]).map_err(|_| InferError::unavailable("the model's instances have stopped")),
            None => Err(InferError::unavailable("the model is being unloaded")),
        }
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

/// An instance's worker: executes one batch at a time, recording queue and compute statistics.
/// `batching` says whether requests carry a batch dimension (`max_batch_size` > 0).
fn run_instance(
    queue: Receiver<Vec<Job>>,
    mut instance: Box<dyn BackendInstance>,
    probe: Arc<ExecutionProbe>,
    stats: Arc<ModelStats>,
    batching: bool,
    poll: Duration,
) {
    while let Some(mut batch) = next_batch(&queue, poll) {
        probe.enter();
        let now = Instant::now();
        let mut batch_size = 0u64;
        for job in &batch {
            stats.record_queue(now - job.enqueued);
            batch_size += job.request.batch_size(batching) as u64;
        }
        let requests = batch.len() as u64;
        let times = instance.execute(&mut batch);
        stats.record_execution(requests, batch_size, times);
        probe.exit();
        for job in &mut batch {
            job.sender.flush();
        }
    }
    instance.finalize();
}
