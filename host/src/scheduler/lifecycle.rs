//! The lifecycle every scheduler of instances shares, whatever way it forms batches: one worker
//! thread per instance, each waiting for its next batch, executing it and delivering the answers,
//! until the scheduler closes and nothing is left for it; then it finalises its instance. Shutting
//! down closes the scheduler (no new request is admitted), wakes the workers so that they drain
//! what is queued, and joins them. The schedulers differ only in their [`Worker`]: how a worker
//! waits for and forms its batch, and what it does around an execution.
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::error::InferError;

/// One instance's worker, as a scheduler specialises it.
pub(super) trait Worker: Send + 'static {
    type Batch;
    /// Waits for the next batch to execute; `None` once the scheduler is closed and nothing is
    /// left for this worker.
    fn next(&mut self) -> Option<Self::Batch>;
    /// Executes `batch` and delivers its answers.
    fn run(&mut self, batch: Self::Batch);
    /// Finalises the instance (TRITONBACKEND_ModelInstanceFinalize), after the last batch.
    fn finish(self);
}

/// A scheduler's workers and whether it still admits requests.
#[derive(Default)]
pub(super) struct Lifecycle {
    closed: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Lifecycle {
    /// Starts one thread per worker, named `<model>#<index>`.
    pub fn start<W: Worker>(&self, model: &str, workers: Vec<W>) {
        let mut threads = self.threads.lock();
        for (i, mut worker) in workers.into_iter().enumerate() {
            let thread = std::thread::Builder::new()
                .name(format!("{model}#{i}"))
                .spawn(move || {
                    while let Some(batch) = worker.next() {
                        worker.run(batch);
                    }
                    worker.finish();
                })
                .expect("spawning an instance worker thread");
            threads.push(thread);
        }
    }

    /// Runs `f` on a thread of its own (named `<model>#<role>`), joined at shutdown with the
    /// workers: a scheduler's helper, such as the sequence batcher's idle-sequence reaper.
    pub fn spawn_helper(&self, model: &str, role: &str, f: impl FnOnce() + Send + 'static) {
        let thread =
            std::thread::Builder::new().name(format!("{model}#{role}")).spawn(f).expect("spawning a scheduler thread");
        self.threads.lock().push(thread);
    }

    /// Admits a request, or refuses it once the scheduler is closed. Call it under the lock the
    /// scheduler queues requests under.
    pub fn admit(&self) -> Result<(), InferError> {
        if self.is_closed() { Err(InferError::unavailable("the model is being unloaded")) } else { Ok(()) }
    }

    /// Whether the scheduler is closed: its workers drain what is queued and stop.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Stops admitting requests. Call it under the lock requests are queued under, so that none is
    /// queued after a worker has seen the queue empty and closed; then wake the workers and
    /// [`join`](Self::join) them.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Waits for every thread to end: the workers once they drained the queue and finalised their
    /// instances.
    pub fn join(&self) {
        let threads: Vec<JoinHandle<()>> = self.threads.lock().drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// What a worker does next, as its scheduler decides from its queue (under the queue's lock).
pub(super) enum Next<B> {
    /// Execute this batch.
    Run(B),
    /// Nothing to execute yet: look again at this time (or without one, when woken).
    Wait(Option<Instant>),
    /// Closed, and nothing left for this worker.
    Exit,
}

/// The one idle loop of the schedulers whose queue is a `Mutex` with a `Condvar`: asks `decide`
/// (which may unlock the guard for a while, e.g. to answer expired requests) what to do, and while
/// there is nothing, keeps polling — yielding the CPU — for `poll` before it parks. Waking a parked
/// thread costs tens of microseconds on a loaded VM, as much as a whole small execution, and under
/// load the next request usually arrives within the window (bench/README.md). Before it first
/// parks it calls `on_park` (unlocked): the worker's instance may give back what it held.
pub(super) fn wait_for_batch<S, B>(
    state: &Mutex<S>,
    work: &Condvar,
    poll: Duration,
    mut on_park: impl FnMut(),
    mut decide: impl FnMut(&mut MutexGuard<'_, S>, Instant) -> Next<B>,
) -> Option<B> {
    let idle_since = Instant::now();
    let mut parked = false;
    let mut guard = state.lock();
    loop {
        let now = Instant::now();
        match decide(&mut guard, now) {
            Next::Run(batch) => return Some(batch),
            Next::Exit => return None,
            Next::Wait(_) if now < idle_since + poll => MutexGuard::unlocked(&mut guard, std::thread::yield_now),
            // Then decide again: work may have come meanwhile.
            Next::Wait(None) if !parked => {
                parked = true;
                MutexGuard::unlocked(&mut guard, &mut on_park);
            }
            Next::Wait(Some(at)) => {
                work.wait_until(&mut guard, at);
            }
            Next::Wait(None) => work.wait(&mut guard),
        }
    }
}
