//! The lifecycle every scheduler of instances shares, whatever way it forms batches: one worker per
//! instance, each waiting for its next batch, executing it and delivering the answers, until the
//! scheduler closes and nothing is left for it; then it finalises its instance. Shutting down
//! closes the scheduler (no new request is admitted), wakes the workers so that they drain what is
//! queued, and waits for them. The schedulers differ only in their [`Worker`]: how a worker waits
//! for and forms its batch, and what it does around an execution.
//!
//! A worker holds a thread only while it has something to do: once it has polled for `poll` and
//! found nothing, it *rests*, giving its thread back to the [`WORKER_POOL`] shared by every model,
//! and the next arrival for it resumes it there. A server with ten thousand models, most of them
//! idle, then has threads for the few that are busy, not one per instance. Workers start resting.
//!
//! Resting races with arrivals; the handshake: a worker that finds nothing registers that it is
//! about to rest ([`Rest::begin`]) *before* it last looks (under its queue's lock, or looking again
//! after registering), and a scheduler calls [`Lifecycle::wake_one`] (or [`wake`](Lifecycle::wake)
//! for one instance) *after* it queues. Either the worker's last look sees the request, or the wake
//! sees the worker registered: it resumes the worker if it already rests, or leaves it a note not
//! to (`owed`) if it is still on its way.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::worker_pool::{Task, WORKER_POOL, name_this_thread};
use crate::error::InferError;

/// One instance's worker, as a scheduler specialises it.
pub(super) trait Worker: Send + 'static {
    type Batch;
    /// Takes the next batch; [`Step::Exit`] once the scheduler is closed and nothing is left for
    /// this worker; [`Step::Rest`] when there is nothing to do, after [`Rest::begin`].
    fn next(&mut self, rest: &Rest<'_>) -> Step<Self::Batch>;
    /// Executes `batch` and delivers its answers.
    fn run(&mut self, batch: Self::Batch);
    /// Finalises the instance (TRITONBACKEND_ModelInstanceFinalize), after the last batch.
    fn finish(self);
}

/// What a worker does after [`Worker::next`].
pub(super) enum Step<B> {
    /// Execute this batch.
    Run(B),
    /// Closed, and nothing left for this worker: finalise.
    Exit,
    /// Nothing to do: give the thread back until woken ([`Rest::begin`] was called).
    Rest,
}

/// A scheduler's workers and whether it still admits requests.
#[derive(Default)]
pub(super) struct Lifecycle {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    closed: AtomicBool,
    /// Workers resting or on their way to: while zero, an arrival has nobody to wake and takes no
    /// lock to find that out.
    resting: AtomicUsize,
    workers: Mutex<Workers>,
    /// Signalled when the last worker has finished.
    done: Condvar,
}

#[derive(Default)]
struct Workers {
    slots: Vec<Slot>,
}

impl Workers {
    fn all_finished(&self) -> bool {
        self.slots.iter().all(|s| matches!(s, Slot::Finished))
    }
}

enum Slot {
    /// On a thread (or about to be).
    Running,
    /// Registered to rest, not resting yet; `owed`: woken meanwhile, so it carries on instead.
    Resting { owed: bool },
    /// Resting: what resumes it.
    Parked(Task),
    /// Finalised.
    Finished,
}

/// A worker's means to register that it is about to rest (see the module's handshake).
pub(super) struct Rest<'a> {
    inner: &'a Inner,
    index: usize,
}

impl Rest<'_> {
    /// Registers that this worker is about to rest. Call it under the lock requests are queued
    /// under, or look for work again after it (and [`cancel`](Self::cancel) when there is some).
    pub fn begin(&self) {
        let mut workers = self.inner.workers.lock();
        workers.slots[self.index] = Slot::Resting { owed: false };
        self.inner.resting.fetch_add(1, Ordering::SeqCst);
    }

    /// Takes back [`begin`](Self::begin): the worker found work after all.
    pub fn cancel(&self) {
        let mut workers = self.inner.workers.lock();
        workers.slots[self.index] = Slot::Running;
        self.inner.resting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Lifecycle {
    /// Takes the workers (named `<model>#<index>`), resting: the first request for one puts it on a
    /// thread.
    pub fn start<W: Worker>(&self, model: &str, workers: Vec<W>) {
        let mut guard = self.inner.workers.lock();
        for worker in workers {
            let index = guard.slots.len();
            // What its thread is called while it runs it.
            let name: Arc<str> = format!("{model}#{index}").into();
            let inner = self.inner.clone();
            // Its first call of `next` happens when it is first woken.
            guard.slots.push(Slot::Parked(Box::new(move || run(inner, index, name, worker))));
            self.inner.resting.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Admits a request, or refuses it once the scheduler is closed. Call it under the lock the
    /// scheduler queues requests under.
    pub fn admit(&self) -> Result<(), InferError> {
        if self.is_closed() { Err(InferError::unavailable("the model is being unloaded")) } else { Ok(()) }
    }

    /// Whether the scheduler is closed: its workers drain what is queued and stop.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Stops admitting requests. Call it under the lock requests are queued under, so that none is
    /// queued after a worker has seen the queue empty and closed; then wake the workers and
    /// [`join`](Self::join) them.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
    }

    /// Makes sure some worker will look at the queue: call it after queueing a request that any
    /// worker may take.
    pub fn wake_one(&self) {
        // Orders the queueing before this look (the worker's side: `Rest::begin`, then its look).
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.inner.resting.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut workers = self.inner.workers.lock();
        let slots = &mut workers.slots;
        let index = slots
            .iter()
            .position(|s| matches!(s, Slot::Parked(_)))
            .or_else(|| slots.iter().position(|s| matches!(s, Slot::Resting { owed: false })));
        if let Some(index) = index {
            self.inner.wake_locked(&mut workers, index);
        }
    }

    /// Makes sure worker `index` will look at its queue: call it after queueing a request only it
    /// may take.
    pub fn wake(&self, index: usize) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.inner.resting.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut workers = self.inner.workers.lock();
        self.inner.wake_locked(&mut workers, index);
    }

    /// Waits for every worker to finish — after waking the resting ones, which find the scheduler
    /// closed.
    pub fn join(&self) {
        let mut workers = self.inner.workers.lock();
        for index in 0..workers.slots.len() {
            self.inner.wake_locked(&mut workers, index);
        }
        while !workers.all_finished() {
            self.inner.done.wait(&mut workers);
        }
    }
}

impl Inner {
    /// Resumes worker `index` if it rests, or tells it not to if it is on its way.
    fn wake_locked(&self, workers: &mut Workers, index: usize) {
        let Some(slot) = workers.slots.get_mut(index) else { return };
        match std::mem::replace(slot, Slot::Running) {
            Slot::Parked(task) => {
                self.resting.fetch_sub(1, Ordering::SeqCst);
                WORKER_POOL.submit(task);
            }
            Slot::Resting { .. } => *slot = Slot::Resting { owed: true },
            other => *slot = other,
        }
    }
}

/// A worker on a thread: runs batches until it rests (the thread goes back to the pool) or exits.
fn run<W: Worker>(inner: Arc<Inner>, index: usize, name: Arc<str>, mut worker: W) {
    name_this_thread(&name);
    loop {
        match worker.next(&Rest { inner: &inner, index }) {
            Step::Run(batch) => worker.run(batch),
            Step::Exit => {
                worker.finish();
                let mut workers = inner.workers.lock();
                workers.slots[index] = Slot::Finished;
                if workers.all_finished() {
                    inner.done.notify_all();
                }
                return;
            }
            Step::Rest => {
                let mut workers = inner.workers.lock();
                if let Slot::Resting { owed: true } = workers.slots[index] {
                    workers.slots[index] = Slot::Running;
                    inner.resting.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                let resume = inner.clone();
                workers.slots[index] = Slot::Parked(Box::new(move || run(resume, index, name, worker)));
                return;
            }
        }
    }
}

/// What a worker does next, as its scheduler decides from its queue (under the queue's lock).
pub(super) enum Next<B> {
    /// Execute this batch.
    Run(B),
    /// Nothing to execute yet: look again at this time (or without one, when woken).
    Wait(Option<Instant>),
    /// Nothing to execute until this time, and arrivals do not need this worker before then (the
    /// scheduler knows it sleeps till then, and wakes it only for what cannot wait): sleep at
    /// once, without polling first.
    Doze(Instant),
    /// Closed, and nothing left for this worker.
    Exit,
}

/// The one idle loop of the schedulers whose queue is a `Mutex` with a `Condvar`: asks `decide`
/// (which may unlock the guard for a while, e.g. to answer expired requests) what to do, and while
/// there is nothing, keeps polling — yielding the CPU — for `poll` before it rests. Resuming a
/// resting worker costs tens of microseconds on a loaded VM, as much as a whole small execution,
/// and under load the next request usually arrives within the window (bench/README.md). A timed
/// wait (a batch to complete by a deadline) keeps the thread. Before it rests it calls `on_rest`
/// (unlocked): the worker's instance may give back what it held.
pub(super) fn wait_for_batch<S, B>(
    state: &Mutex<S>,
    work: &Condvar,
    poll: Duration,
    rest: &Rest<'_>,
    mut on_rest: impl FnMut(),
    mut decide: impl FnMut(&mut MutexGuard<'_, S>, Instant) -> Next<B>,
) -> Step<B> {
    let idle_since = Instant::now();
    let mut gave_back = false;
    let mut guard = state.lock();
    loop {
        let now = Instant::now();
        match decide(&mut guard, now) {
            Next::Run(batch) => return Step::Run(batch),
            Next::Exit => return Step::Exit,
            Next::Doze(at) => {
                work.wait_until(&mut guard, at);
            }
            Next::Wait(_) if now < idle_since + poll => MutexGuard::unlocked(&mut guard, std::thread::yield_now),
            // Then decide again: work may have come meanwhile.
            Next::Wait(None) if !gave_back => {
                gave_back = true;
                MutexGuard::unlocked(&mut guard, &mut on_rest);
            }
            Next::Wait(Some(at)) => {
                work.wait_until(&mut guard, at);
            }
            Next::Wait(None) => {
                // Under the queue's lock: an arrival queued after this sees the registration.
                rest.begin();
                return Step::Rest;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicU64;

    use super::*;

    /// A queue of numbers that workers sum up; they never poll, so they rest whenever it is empty
    /// and every arrival races with a worker on its way to rest.
    #[derive(Default)]
    struct Shared {
        queue: Mutex<VecDeque<u64>>,
        work: Condvar,
        sum: AtomicU64,
        finished: AtomicUsize,
        lifecycle: Lifecycle,
    }

    struct Summer(Arc<Shared>);

    impl Worker for Summer {
        type Batch = u64;
        fn next(&mut self, rest: &Rest<'_>) -> Step<u64> {
            let s = &*self.0;
            wait_for_batch(
                &s.queue,
                &s.work,
                Duration::ZERO,
                rest,
                || {},
                |q, _| match q.pop_front() {
                    Some(n) => Next::Run(n),
                    None if s.lifecycle.is_closed() => Next::Exit,
                    None => Next::Wait(None),
                },
            )
        }
        fn run(&mut self, n: u64) {
            self.0.sum.fetch_add(n, Ordering::SeqCst);
        }
        fn finish(self) {
            self.0.finished.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn start(workers: usize) -> Arc<Shared> {
        let shared = Arc::new(Shared::default());
        shared.lifecycle.start("summer", (0..workers).map(|_| Summer(shared.clone())).collect());
        shared
    }

    fn push(s: &Shared, n: u64) {
        s.queue.lock().push_back(n);
        s.lifecycle.wake_one();
    }

    fn shut_down(s: &Shared) {
        {
            let _queue = s.queue.lock();
            s.lifecycle.close();
        }
        s.work.notify_all();
        s.lifecycle.join();
    }

    #[test]
    fn no_arrival_is_left_with_every_worker_resting() {
        for workers in [1, 3] {
            let s = start(workers);
            const PER_THREAD: u64 = 5000;
            std::thread::scope(|scope| {
                for _ in 0..4 {
                    scope.spawn(|| {
                        for n in 1..=PER_THREAD {
                            push(&s, n);
                        }
                    });
                }
            });
            let expected = 4 * PER_THREAD * (PER_THREAD + 1) / 2;
            let deadline = Instant::now() + Duration::from_secs(60);
            while s.sum.load(Ordering::SeqCst) != expected {
                assert!(Instant::now() < deadline, "requests left queued: {:?}", s.queue.lock().len());
                std::thread::yield_now();
            }
            shut_down(&s);
            assert_eq!(s.finished.load(Ordering::SeqCst), workers, "every worker finalised once");
        }
    }

    #[test]
    fn workers_never_woken_are_finalised_at_shutdown_and_queued_work_is_drained() {
        let s = start(2);
        shut_down(&s);
        assert_eq!(s.finished.load(Ordering::SeqCst), 2);
        // Queued while resting, drained at shutdown: a wake is not needed for what join finds.
        let s = start(2);
        s.queue.lock().extend([1, 2, 3]);
        shut_down(&s);
        assert_eq!(s.sum.load(Ordering::SeqCst), 6);
    }
}
