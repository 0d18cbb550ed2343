//! The default scheduler (a model with no `dynamic_batching` or `sequence_batching`): every
//! request is its own batch, taken by the first idle instance — or, for a model that has shown its
//! executions are short, run at once on the I/O thread that received it (see [`super::inline`]);
//! a request that finds every instance busy is left for the thread holding one
//! ([`super::handoff`]).
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use super::handoff::Handoff;
use super::inline::InlineGate;
use super::lifecycle::{Lifecycle, Rest, Step, Worker};
use super::{Caller, INSTANCES_STOPPED, Schedule, WorkerContext, flush};
use crate::backend::{BackendInstance, ExecutionThread};
use crate::error::InferError;
use crate::request::Job;

/// The most requests an I/O thread runs in one go (its own and those left for it) before it hands
/// the rest to the workers: an inline execution is short, but an I/O thread has connections of its
/// own to serve.
const INLINE_RUN: usize = 4;

/// An I/O thread that finds every instance busy waits for one (spinning, up to twice the model's
/// typical execution) when executions typically take less than this, instead of leaving its
/// request to the holder: the holder would then wake this thread for the answer, and on a VM that
/// wake-up costs more than a few microseconds of waiting (`simple` at 16 HTTP connections over two
/// I/O threads: 66k → 80k/s, server CPU 21 → 15 µs a request; bench/README.md).
const WAIT_UNDER: std::time::Duration = std::time::Duration::from_micros(20);

/// Spins while every one of `instances` is held, up to twice the model's typical execution when
/// that is under `under`; returns at once otherwise. What the caller then finds is its own business:
/// a holder may keep its instance past the wait.
pub(super) fn await_free_instance(instances: &[SharedInstance], inline: &InlineGate, under: std::time::Duration) {
    let all_held = || instances.iter().all(|i| i.is_locked());
    if !all_held() {
        return;
    }
    let bound = match inline.typical() {
        Some(typical) if typical < under => typical * 2,
        _ => return,
    };
    let start = Instant::now();
    while all_held() && start.elapsed() < bound {
        std::hint::spin_loop();
    }
}

/// An instance, shared by its worker thread and inline executions (whoever holds the lock runs
/// it); `None` once finalised.
pub(super) type SharedInstance = Arc<Mutex<Option<Box<dyn BackendInstance>>>>;

pub struct DefaultScheduler {
    /// What a worker takes next: a request (its own batch), or the signal to stop once the
    /// scheduler closed (one per worker, after every request).
    queue: Sender<Message>,
    /// Held (shared) while a request is admitted and queued; closing takes it exclusively, so that
    /// no request is queued after the stop signals.
    admission: RwLock<()>,
    pool: Arc<Pool>,
    lifecycle: Lifecycle,
    workers: usize,
}

// Not boxed: a box would be allocated by the sender's thread and freed by the worker's, what
// `One` is for; the channel keeps its messages in blocks of many.
#[allow(clippy::large_enum_variant)]
enum Message {
    /// One request: the common case, sent without a vector of its own (the worker runs it in one
    /// it keeps, so no buffer is allocated on the sender's thread and freed on the worker's).
    One(Job),
    Batch(Vec<Job>),
    Stop,
}

impl DefaultScheduler {
    /// Takes one worker per instance, all taking from one queue.
    pub fn start(model: &str, instances: Vec<Box<dyn BackendInstance>>, ctx: WorkerContext) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded::<Message>();
        let instances: Vec<SharedInstance> = instances.into_iter().map(|i| Arc::new(Mutex::new(Some(i)))).collect();
        let pool = Arc::new(Pool {
            instances: instances.clone(),
            handoff: Handoff::default(),
            inline: InlineGate::new(ctx.inline_under),
            ctx,
        });
        let workers: Vec<QueueWorker> = instances
            .into_iter()
            .map(|instance| QueueWorker { pool: pool.clone(), queue: rx.clone(), instance, spare: Vec::new() })
            .collect();
        let count = workers.len();
        let lifecycle = Lifecycle::default();
        lifecycle.start(model, workers);
        DefaultScheduler { queue: tx, admission: RwLock::new(()), pool, lifecycle, workers: count }
    }

    /// Runs `job` here and now if the model may run inline, nothing is queued for the workers and
    /// (for an I/O thread) an I/O slot is free — or, when every instance is busy, leaves it for the
    /// thread holding one; hands it back otherwise.
    fn try_inline(&self, job: Job, caller: Caller) -> Option<Job> {
        let pool = &*self.pool;
        let queue = &self.queue;
        // Not while a test gate may hold executions: the calling thread must never wait at it.
        let gate_engaged = || pool.ctx.hooks.as_ref().is_some_and(|h| h.gate_engaged());
        let may_run = || pool.inline.open() && queue.is_empty() && !gate_engaged();
        let runner = match caller {
            Caller::IoThread => Runner::IoThread,
            Caller::Waiting => Runner::Caller,
            Caller::Worker => return Some(job),
        };
        if !may_run() {
            return Some(job);
        }
        let _slot = match runner {
            Runner::IoThread => match pool.ctx.io_threads.take() {
                Some(slot) => Some(slot),
                None => return Some(job),
            },
            Runner::Caller | Runner::Worker => None,
        };
        if runner == Runner::IoThread {
            pool.await_free_instance();
        }
        pool.handoff.push(job);
        let leftover = pool.run_handoff(runner, INLINE_RUN, may_run);
        if !leftover.is_empty() {
            // The receivers live as long as the workers, which outlive every admitted request.
            let _ = queue.send(Message::Batch(leftover));
            self.lifecycle.wake_one();
        }
        None
    }
}

impl Schedule for DefaultScheduler {
    fn enqueue(&self, mut job: Job, caller: Caller) {
        let _admitted = self.admission.read();
        if let Err(e) = self.lifecycle.admit() {
            return job.fail(e);
        }
        let Some(job) = self.try_inline(job, caller) else { return };
        let _ = self.queue.send(Message::One(job));
        self.lifecycle.wake_one();
    }

    fn queued(&self) -> usize {
        self.queue.len() + self.pool.handoff.len()
    }

    /// Stops taking requests, lets the instances finish every queued one, then finalises them.
    /// Blocks until done.
    fn shutdown(&self) {
        {
            let _closing = self.admission.write();
            self.lifecycle.close();
        }
        for _ in 0..self.workers {
            let _ = self.queue.send(Message::Stop);
        }
        // Wakes the resting workers too, which find their stop message.
        self.lifecycle.join();
    }
}

/// The model's instances and the requests left for them, shared by the I/O threads and the
/// instances' workers.
struct Pool {
    instances: Vec<SharedInstance>,
    handoff: Handoff,
    inline: InlineGate,
    ctx: WorkerContext,
}

/// The kind of thread running requests left in the handoff.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Runner {
    /// An I/O thread, running them inline: may not block.
    IoThread,
    /// A thread that waits for the answer of a request it queued ([`Caller::Waiting`]): may block.
    Caller,
    /// An instance's worker thread.
    Worker,
}

impl Pool {
    /// Waits briefly for an instance to come free (see [`WAIT_UNDER`]) when every one is held and
    /// nothing is left for the holders; returns at once otherwise. The caller then leaves its
    /// request and runs what it can as before, so a holder that keeps its instance past the wait
    /// still runs the request.
    fn await_free_instance(&self) {
        if self.handoff.is_empty() {
            await_free_instance(&self.instances, &self.inline, WAIT_UNDER);
        }
    }

    /// Runs the requests left in the handoff, oldest first, on whichever instance is free, and looks
    /// again after letting go of it (the rule in [`super::handoff`]); stops when none is left, when
    /// every instance is held (its holder runs the rest), or when this thread may run no more:
    /// `budget` requests run or `may_run` false. Returns the requests the caller must give the
    /// workers: those left then, and any the backend could not run here (a blocking WASI call on an
    /// I/O thread, which bars the model from running inline).
    fn run_handoff(&self, runner: Runner, mut budget: usize, may_run: impl Fn() -> bool) -> Vec<Job> {
        let mut leftover = Vec::new();
        loop {
            if self.handoff.is_empty() {
                return leftover;
            }
            if budget == 0 || !may_run() {
                leftover.extend(self.handoff.take_all());
                return leftover;
            }
            let Some(mut guard) = self.instances.iter().find_map(|i| i.try_lock()) else { return leftover };
            let Some(instance) = guard.as_mut() else {
                leftover.extend(self.handoff.take_all());
                return leftover;
            };
            while budget > 0
                && may_run()
                && let Some(job) = self.handoff.pop()
            {
                budget -= 1;
                let mut batch = vec![job];
                let thread = match runner {
                    Runner::IoThread => {
                        self.ctx.probe.count_inline();
                        ExecutionThread::Inline
                    }
                    Runner::Caller => {
                        self.ctx.probe.count_on_caller();
                        ExecutionThread::Caller
                    }
                    Runner::Worker => ExecutionThread::Worker,
                };
                run_batch(&self.ctx, &self.inline, instance.as_mut(), &mut batch, thread);
                // Now, not after letting go: the request's connection may be another thread's.
                flush(&mut batch);
                batch.retain(|j| !j.sender.is_complete());
                if !batch.is_empty() {
                    self.inline.bar();
                    leftover.append(&mut batch);
                }
            }
            drop(guard);
        }
    }

    /// Lets an idle worker's instance give back what it holds (not while an I/O thread runs it
    /// inline), then runs what was left meanwhile: holding the instance makes this worker its
    /// holder, bound by the handoff's rule like any other ([`super::handoff`]). Without that look, a
    /// request left while `idle` ran (which may rebuild a sandbox: milliseconds) stayed in the
    /// handoff with the worker at rest, and so did every request after it that found the queue
    /// empty: a burst of 256 clients on a fresh server hung that way, now and then.
    fn idle(&self, instance: &SharedInstance) {
        let Some(mut guard) = instance.try_lock() else { return };
        if let Some(instance) = guard.as_mut() {
            instance.idle();
        }
        drop(guard);
        self.run_handoff_on_worker();
    }

    /// Runs what was left while this worker held its instance. Nothing can come back: a worker may
    /// block, and it has no budget; what does (an instance finalised under it) fails.
    fn run_handoff_on_worker(&self) {
        for mut job in self.run_handoff(Runner::Worker, usize::MAX, || true) {
            job.fail(InferError::unavailable(INSTANCES_STOPPED));
        }
    }
}

/// Executes one batch (less the requests whose client has gone) and tells the inline gate how it
/// went.
pub(super) fn run_batch(
    ctx: &WorkerContext,
    inline: &InlineGate,
    instance: &mut dyn BackendInstance,
    batch: &mut Vec<Job>,
    thread: ExecutionThread,
) {
    ctx.drop_cancelled(batch);
    if batch.is_empty() {
        return;
    }
    let timer = inline.timer();
    ctx.execute(instance, batch, thread);
    if let Some(timer) = timer {
        inline.finish(timer, batch.iter().any(|j| j.sender.failed_internally()));
    }
}

/// An instance's worker: executes one request at a time from the queue, and after each the
/// requests left for whoever holds an instance.
struct QueueWorker {
    pool: Arc<Pool>,
    queue: Receiver<Message>,
    instance: SharedInstance,
    /// The vector a single request runs in, kept from one run to the next.
    spare: Vec<Job>,
}

impl Worker for QueueWorker {
    type Batch = Vec<Job>;

    /// Takes the next batch. An idle worker keeps polling (yielding the CPU to runnable threads)
    /// for `poll` before it rests, as every scheduler's workers do (see [`super::lifecycle`]).
    fn next(&mut self, rest: &Rest<'_>) -> Step<Vec<Job>> {
        let start = Instant::now();
        let mut gave_back = false;
        let message = loop {
            match self.queue.try_recv() {
                Ok(message) => break message,
                Err(crossbeam_channel::TryRecvError::Disconnected) => return Step::Exit,
                Err(crossbeam_channel::TryRecvError::Empty) if start.elapsed() < self.pool.ctx.poll => {
                    std::thread::yield_now()
                }
                Err(crossbeam_channel::TryRecvError::Empty) if !gave_back => {
                    // Idle: the instance may give back what it held. Then look again.
                    gave_back = true;
                    self.pool.idle(&self.instance);
                }
                Err(crossbeam_channel::TryRecvError::Empty) => {
                    // Register, then look a last time: a request sent before the registration is
                    // seen here, one sent after it wakes this worker.
                    rest.begin();
                    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                    match self.queue.try_recv() {
                        Ok(message) => {
                            rest.cancel();
                            break message;
                        }
                        Err(crossbeam_channel::TryRecvError::Empty) => return Step::Rest,
                        Err(crossbeam_channel::TryRecvError::Disconnected) => {
                            rest.cancel();
                            return Step::Exit;
                        }
                    }
                }
            }
        };
        match message {
            Message::One(job) => {
                let mut batch = std::mem::take(&mut self.spare);
                batch.push(job);
                Step::Run(batch)
            }
            Message::Batch(batch) => Step::Run(batch),
            Message::Stop => Step::Exit,
        }
    }

    fn run(&mut self, mut batch: Vec<Job>) {
        let mut guard = self.instance.lock();
        if let Some(instance) = guard.as_mut() {
            run_batch(&self.pool.ctx, &self.pool.inline, instance.as_mut(), &mut batch, ExecutionThread::Worker);
        }
        drop(guard);
        flush(&mut batch);
        batch.clear();
        if self.spare.capacity() == 0 {
            self.spare = batch;
        }
        self.pool.run_handoff_on_worker();
    }

    fn finish(self) {
        self.pool.run_handoff_on_worker();
        if let Some(instance) = self.instance.lock().take() {
            instance.finalize();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::probe::ExecutionProbe;
    use crate::request::{InferenceRequest, InferenceResponse, ResponseSender};
    use crate::stats::{ExecutionTimes, ModelStats};

    /// Answers each request with its own id, after a few microseconds of work, so threads
    /// often find the instance busy.
    struct Echo;

    impl BackendInstance for Echo {
        fn execute(&mut self, jobs: &mut Vec<Job>, _thread: ExecutionThread) -> ExecutionTimes {
            let until = Instant::now() + Duration::from_micros(5);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            for job in jobs.iter_mut() {
                let response = InferenceResponse {
                    in_place: Vec::new(),
                    spent: Default::default(),
                    model_name: "echo".into(),
                    model_version: 1,
                    id: job.request.id.clone(),
                    parameters: Vec::new(),
                    outputs: Vec::new(),
                };
                job.sender.send_final(Ok(response));
            }
            ExecutionTimes::default()
        }

        fn finalize(self: Box<Self>) {}
    }

    fn pool(instances: usize) -> Pool {
        let ctx = WorkerContext {
            probe: Arc::new(ExecutionProbe::default()),
            stats: Arc::new(ModelStats::default()),
            hooks: None,
            batching: false,
            poll: Duration::ZERO,
            inline_under: Duration::from_secs(1),
            io_threads: Arc::new(super::super::inline::IoThreads::new(8, true)),
        };
        Pool {
            instances: (0..instances)
                .map(|_| Arc::new(Mutex::new(Some(Box::new(Echo) as Box<dyn BackendInstance>))))
                .collect(),
            handoff: Handoff::default(),
            inline: InlineGate::new(ctx.inline_under),
            ctx,
        }
    }

    /// Threads leave requests and run what they can, as I/O threads do; what comes back (over
    /// the budget) the test answers as the workers would. Every request must end with exactly its
    /// own answer, and nothing may stay behind in the handoff.
    fn every_request_is_run_once(instances: usize) {
        const THREADS: usize = 4;
        const REQUESTS: usize = 2000;
        let pool = Arc::new(pool(instances));
        let handed_to_workers = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let pool = pool.clone();
                let handed_to_workers = handed_to_workers.clone();
                std::thread::spawn(move || {
                    let mut receivers = Vec::new();
                    for i in 0..REQUESTS {
                        let id = format!("{t}-{i}");
                        let (sender, rx) = ResponseSender::unary(pool.ctx.stats.clone());
                        let request = InferenceRequest { id: id.clone(), ..Default::default() };
                        pool.handoff.push(Job { request, sender, enqueued: Instant::now() });
                        let leftover = pool.run_handoff(Runner::IoThread, INLINE_RUN, || true);
                        handed_to_workers.fetch_add(leftover.len(), std::sync::atomic::Ordering::Relaxed);
                        for mut job in leftover {
                            let mut batch = vec![job];
                            let mut guard = pool.instances[0].lock();
                            let instance = guard.as_mut().unwrap().as_mut();
                            run_batch(&pool.ctx, &pool.inline, instance, &mut batch, ExecutionThread::Worker);
                            drop(guard);
                            flush(&mut batch);
                            job = batch.pop().unwrap();
                            assert!(job.sender.is_complete());
                        }
                        receivers.push((id, rx));
                    }
                    receivers
                })
            })
            .collect();
        // A request may still be held by another thread until that one is done too.
        let receivers: Vec<_> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        let mut answered = 0;
        {
            for (id, mut rx) in receivers {
                let response = rx.try_recv().expect("every request is answered once all threads are done").unwrap();
                assert_eq!(response.id, id);
                answered += 1;
            }
        }
        assert_eq!(answered, THREADS * REQUESTS);
        assert!(pool.handoff.is_empty());
        let (_, _, executions) = pool.ctx.probe.snapshot();
        let inline = pool.ctx.probe.inline_executions();
        assert!(inline > 0);
        eprintln!(
            "{instances} instance(s): {executions} executions, {inline} inline, {} handed to workers",
            handed_to_workers.load(std::sync::atomic::Ordering::Relaxed)
        );
    }

    #[test]
    fn every_request_left_for_a_single_busy_instance_is_run_once() {
        every_request_is_run_once(1);
    }

    #[test]
    fn every_request_left_for_two_busy_instances_is_run_once() {
        every_request_is_run_once(2);
    }

    /// An instance whose `idle` waits until the test lets it go.
    struct SlowIdle {
        entered: std::sync::mpsc::Sender<()>,
        release: std::sync::mpsc::Receiver<()>,
    }

    impl BackendInstance for SlowIdle {
        fn execute(&mut self, jobs: &mut Vec<Job>, thread: ExecutionThread) -> ExecutionTimes {
            Echo.execute(jobs, thread)
        }

        fn finalize(self: Box<Self>) {}

        fn idle(&mut self) {
            let _ = self.entered.send(());
            let _ = self.release.recv();
        }
    }

    #[test]
    fn a_request_left_while_an_idle_worker_holds_the_instance_is_run_by_that_worker() {
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        let mut pool = pool(1);
        let instance: SharedInstance =
            Arc::new(Mutex::new(Some(Box::new(SlowIdle { entered: entered_tx, release: release_rx }))));
        pool.instances = vec![instance.clone()];
        let pool = Arc::new(pool);
        let worker = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.idle(&instance))
        };
        entered.recv().unwrap();
        // An I/O thread leaves a request: the instance is held, so it goes back to its connections.
        let (sender, mut rx) = ResponseSender::unary(pool.ctx.stats.clone());
        pool.handoff.push(Job { request: InferenceRequest::default(), sender, enqueued: Instant::now() });
        assert!(pool.run_handoff(Runner::IoThread, INLINE_RUN, || true).is_empty());
        assert!(rx.try_recv().is_err(), "not run yet: the instance is held");
        release.send(()).unwrap();
        worker.join().unwrap();
        assert!(rx.try_recv().is_ok(), "the idle worker ran what was left for it");
        assert!(pool.handoff.is_empty());
    }

    #[test]
    fn a_thread_stops_at_its_budget_and_hands_back_the_rest() {
        let pool = pool(1);
        let mut receivers = Vec::new();
        for i in 0..INLINE_RUN + 3 {
            let (sender, rx) = ResponseSender::unary(pool.ctx.stats.clone());
            let request = InferenceRequest { id: i.to_string(), ..Default::default() };
            pool.handoff.push(Job { request, sender, enqueued: Instant::now() });
            receivers.push(rx);
        }
        let leftover = pool.run_handoff(Runner::IoThread, INLINE_RUN, || true);
        let ids: Vec<_> = leftover.iter().map(|j| j.request.id.clone()).collect();
        assert_eq!(ids, (INLINE_RUN..INLINE_RUN + 3).map(|i| i.to_string()).collect::<Vec<_>>());
        for (i, rx) in receivers.iter_mut().enumerate() {
            assert_eq!(rx.try_recv().is_ok(), i < INLINE_RUN, "request {i}");
        }
        assert!(pool.handoff.is_empty());
        // A thread that may not run inline (the gate closed) runs none.
        let (sender, _rx) = ResponseSender::unary(pool.ctx.stats.clone());
        pool.handoff.push(Job { request: InferenceRequest::default(), sender, enqueued: Instant::now() });
        assert_eq!(pool.run_handoff(Runner::IoThread, INLINE_RUN, || false).len(), 1);
    }
}
