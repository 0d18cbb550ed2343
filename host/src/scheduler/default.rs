//! The default scheduler (a model with no `dynamic_batching` or `sequence_batching`): every
//! request is its own batch, taken by the first idle instance.
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use crate::backend::BackendInstance;
use crate::error::InferError;
use crate::model::ExecutionProbe;
use crate::request::Job;

pub struct DefaultScheduler {
    /// `None` once the model is unloading: new requests are refused, queued ones still run.
    queue: RwLock<Option<Sender<Vec<Job>>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl DefaultScheduler {
    /// Starts one worker thread per instance, all taking from one queue.
    pub fn start(model: &str, instances: Vec<Box<dyn BackendInstance>>, probe: Arc<ExecutionProbe>) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded::<Vec<Job>>();
        let workers = instances
            .into_iter()
            .enumerate()
            .map(|(i, instance)| {
                let (rx, probe) = (rx.clone(), probe.clone());
                std::thread::Builder::new()
                    .name(format!("{model}#{i}"))
                    .spawn(move || run_instance(rx, instance, probe))
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

fn run_instance(queue: Receiver<Vec<Job>>, mut instance: Box<dyn BackendInstance>, probe: Arc<ExecutionProbe>) {
    while let Ok(batch) = queue.recv() {
        probe.enter();
        instance.execute(batch);
        probe.exit();
    }
    instance.finalize();
}
