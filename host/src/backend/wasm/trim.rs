//! Gives back what an instance's sandbox grew for a load that has passed (`--sandbox-trim-above-mb`
//! after `--sandbox-trim-after-idle-ms`).
//!
//! A Wasm memory only grows, so an instance whose linear memory grew far past what it held once
//! built is finalised and built afresh, which returns the dropped store's memory to the operating
//! system. Not at its first idle moment: a model whose every request needs that memory (a 96 MiB
//! tensor through an identity grows the sandbox by 96 MiB) then paid, on every request, for the
//! rebuild and for faulting the memory in again — measured on 2 cores: the server's CPU a request
//! 1.4–2.1× and throughput 0.31–0.97× what it is without (bench/results/2026-12-02-trim-delay.md). So
//! the instance is rebuilt once it has stayed idle, with its memory grown, for the delay: a load of
//! large requests keeps its memory while it lasts and gives it back a delay after it ends.
//!
//! One thread for the server (started by the first trim it waits for) waits out the delays and
//! rebuilds the instances whose delay passed; an instance that executed meanwhile is left alone
//! until it is idle again. The delay starts when the instance's worker finds no work, or, for an
//! execution on another thread (inline on an I/O thread, a calling plugin's), when it ends: no
//! idle worker follows that one, and a burst's last request run inline kept its memory for good.
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{InstanceFactory, Resident, Sandbox, Tenancy, bindings};

/// An instance the trimmer may rebuild once its delay has passed.
pub(super) trait Trim: Send + Sync {
    /// Rebuilds the instance if it has been idle with its memory grown for `after` by `now`.
    /// Returns when to look again: `None` when it was rebuilt, or it executed since it was
    /// scheduled (its worker schedules it again once idle).
    fn trim(&self, now: Instant, after: Duration) -> Option<Instant>;
}

/// The server's trimmer: waits out each grown instance's delay on one thread.
pub struct Trimmer {
    after: Duration,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Trimmer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trimmer").field("after", &self.after).finish()
    }
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

#[derive(Default)]
struct Queue {
    /// The scheduled instances, the soonest due first.
    due: BinaryHeap<Reverse<Due>>,
    /// The next entry's sequence number.
    next: u64,
    /// The thread is running.
    started: bool,
    /// The trimmer was dropped: the thread ends.
    closed: bool,
}

impl Trimmer {
    /// A trimmer that rebuilds an instance once it has been idle with its memory grown for `after`
    /// (zero: at once, on the idle worker).
    pub fn new(after: Duration) -> Self {
        Trimmer { after, shared: Arc::new(Shared { queue: Mutex::new(Queue::default()), wake: Condvar::new() }) }
    }

    /// Looks at `target` at `at`. Starts the thread on first use; without it (it could not be
    /// spawned) nothing is trimmed, which only keeps memory longer.
    pub(super) fn schedule(&self, at: Instant, target: Weak<dyn Trim>) {
        let mut queue = self.shared.queue.lock();
        if !queue.started {
            let shared = self.shared.clone();
            let after = self.after;
            match std::thread::Builder::new().name("nereus-trim".into()).spawn(move || run(&shared, after)) {
                Ok(_) => queue.started = true,
                Err(e) => {
                    tracing::warn!("the sandbox trimmer's thread could not start: {e}; grown sandboxes stay grown");
                    return;
                }
            }
        }
        push(&mut queue, at, target);
        self.shared.wake.notify_one();
    }
}

impl Drop for Trimmer {
    fn drop(&mut self) {
        self.shared.queue.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

/// When to look at one instance. Ordered by time, then by when it was scheduled (the target itself
/// has no order).
struct Due {
    at: Instant,
    seq: u64,
    target: Weak<dyn Trim>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

fn push(queue: &mut Queue, at: Instant, target: Weak<dyn Trim>) {
    let seq = queue.next;
    queue.next += 1;
    queue.due.push(Reverse(Due { at, seq, target }));
}

/// The trimmer's thread: takes each target whose time has come and trims it (outside the lock:
/// a rebuild runs the plugin's finalisation and initialisation), until the trimmer is dropped.
fn run(shared: &Shared, after: Duration) {
    let mut queue = shared.queue.lock();
    loop {
        if queue.closed {
            return;
        }
        let Some(at) = queue.due.peek().map(|d| d.0.at) else {
            shared.wake.wait(&mut queue);
            continue;
        };
        if at > Instant::now() {
            shared.wake.wait_until(&mut queue, at);
            continue;
        }
        let Some(Reverse(Due { target, .. })) = queue.due.pop() else { continue };
        let again = parking_lot::MutexGuard::unlocked(&mut queue, || {
            target.upgrade().and_then(|t| t.trim(Instant::now(), after))
        });
        if let Some(at) = again {
            push(&mut queue, at, target);
        }
    }
}

/// What one instance's trim needs: its sandbox and how to build it again.
pub(super) struct IdleTrim {
    pub tenancy: Arc<Tenancy>,
    pub factory: Arc<InstanceFactory>,
    pub info: bindings::OwnedInstanceInfo,
    /// The most its memory may grow past what it held once built (`--sandbox-trim-above-mb`).
    pub limit: usize,
    /// The version's metrics: trims.
    pub metrics: Option<crate::metrics::ModelMetrics>,
}

impl IdleTrim {
    /// The instance's worker is idle: a sandbox grown past the limit is rebuilt now when the delay
    /// is zero, else once the delay has passed without an execution.
    pub fn idle(self: &Arc<Self>, trimmer: &Trimmer) {
        let mut resident = self.tenancy.resident.lock();
        if trimmer.after.is_zero() {
            if self.grown(&resident) {
                self.rebuild(&mut resident);
            }
            return;
        }
        self.start_delay(&mut resident, trimmer);
    }

    /// Starts the delay of a grown sandbox now, unless it was already idle, and has the trimmer
    /// look at it unless it will already. Called by the idle worker, and after an execution on
    /// another thread (inline on an I/O thread, or a calling plugin's), which no idle worker
    /// follows; with no delay the trimmer's thread then rebuilds it at once (never an I/O thread:
    /// building runs the plugin's initialisation, which may block).
    pub fn start_delay(self: &Arc<Self>, resident: &mut Resident, trimmer: &Trimmer) {
        if !self.grown(resident) {
            return;
        }
        let now = Instant::now();
        resident.grown_idle_since.get_or_insert(now);
        if !std::mem::replace(&mut resident.trim_scheduled, true) {
            trimmer.schedule(now + trimmer.after, Arc::downgrade(self) as Weak<dyn Trim>);
        }
    }

    fn grown(&self, resident: &Resident) -> bool {
        let held = resident.sandbox.as_ref().map_or(0, Sandbox::memory_in_use);
        held > resident.built_with.saturating_add(self.limit)
    }

    /// Finalises the grown sandbox and builds it afresh, so that the next request finds it ready.
    fn rebuild(&self, resident: &mut Resident) {
        resident.grown_idle_since = None;
        let Some(sandbox) = resident.sandbox.take() else { return };
        let held = sandbox.memory_in_use();
        sandbox.finalize();
        match self.factory.build(&self.info) {
            Ok(sandbox) => {
                tracing::debug!(
                    "model '{}' instance '{}': rebuilt while idle to give back {} MiB of grown memory",
                    self.factory.model_info.name,
                    self.info.name,
                    held.saturating_sub(resident.built_with) >> 20
                );
                if let Some(m) = &self.metrics {
                    m.trimmed();
                }
                resident.built_with = sandbox.memory_in_use();
                resident.sandbox = Some(sandbox);
            }
            // As after a fault: the next execution on the worker tries again.
            Err(_) => resident.rebuild_pending = true,
        }
    }
}

impl Trim for IdleTrim {
    fn trim(&self, now: Instant, after: Duration) -> Option<Instant> {
        // Running (or the lender looking at it): look again a delay later.
        let Some(mut resident) = self.tenancy.resident.try_lock() else { return Some(now + after) };
        match resident.grown_idle_since {
            // It executed since; its worker schedules it again once idle.
            None => {
                resident.trim_scheduled = false;
                None
            }
            // It executed and went idle again since it was scheduled: its delay starts then.
            Some(since) if since + after > now => Some(since + after),
            Some(_) => {
                resident.trim_scheduled = false;
                if self.grown(&resident) {
                    self.rebuild(&mut resident);
                } else {
                    resident.grown_idle_since = None;
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A target that asks to be looked at again `again` times, then reports each look.
    struct Fake {
        again: AtomicUsize,
        looks: crossbeam_channel::Sender<()>,
    }

    impl Trim for Fake {
        fn trim(&self, now: Instant, after: Duration) -> Option<Instant> {
            self.looks.send(()).ok();
            let left = self.again.load(Ordering::Acquire);
            (left > 0).then(|| {
                self.again.store(left - 1, Ordering::Release);
                now + after
            })
        }
    }

    fn fake(again: usize) -> (Arc<Fake>, crossbeam_channel::Receiver<()>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (Arc::new(Fake { again: AtomicUsize::new(again), looks: tx }), rx)
    }

    const WAIT: Duration = Duration::from_secs(30);

    #[test]
    fn a_target_is_looked_at_again_until_it_says_it_is_done() {
        let trimmer = Trimmer::new(Duration::from_millis(1));
        let (target, looks) = fake(2);
        trimmer.schedule(Instant::now(), Arc::downgrade(&target) as Weak<dyn Trim>);
        for _ in 0..3 {
            looks.recv_timeout(WAIT).expect("a look");
        }
        assert_eq!(target.again.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_dropped_target_is_forgotten_and_others_still_run() {
        let trimmer = Trimmer::new(Duration::from_millis(1));
        let (gone, gone_looks) = fake(0);
        let (kept, kept_looks) = fake(0);
        trimmer.schedule(Instant::now(), Arc::downgrade(&gone) as Weak<dyn Trim>);
        drop(gone);
        trimmer.schedule(Instant::now(), Arc::downgrade(&kept) as Weak<dyn Trim>);
        kept_looks.recv_timeout(WAIT).expect("the live target is looked at");
        // The first was due no later than the second, so its turn has passed without a look.
        assert!(gone_looks.try_recv().is_err());
    }

    #[test]
    fn targets_are_looked_at_in_the_order_they_are_due() {
        let trimmer = Trimmer::new(Duration::from_millis(1));
        let (tx, rx) = crossbeam_channel::unbounded();
        struct Named(u32, crossbeam_channel::Sender<u32>);
        impl Trim for Named {
            fn trim(&self, _: Instant, _: Duration) -> Option<Instant> {
                self.1.send(self.0).ok();
                None
            }
        }
        let now = Instant::now();
        let targets: Vec<Arc<Named>> = (0..3).map(|i| Arc::new(Named(i, tx.clone()))).collect();
        // Queued before the thread starts, latest first; the last `schedule` starts it.
        {
            let mut queue = trimmer.shared.queue.lock();
            for (i, t) in targets.iter().enumerate().rev() {
                push(&mut queue, now + Duration::from_millis(i as u64), Arc::downgrade(t) as Weak<dyn Trim>);
            }
        }
        trimmer.schedule(now + Duration::from_millis(3), Weak::<Named>::new() as Weak<dyn Trim>);
        let order: Vec<u32> = (0..3).map(|_| rx.recv_timeout(WAIT).expect("a look")).collect();
        assert_eq!(order, vec![0, 1, 2]);
    }

    #[test]
    fn dropping_the_trimmer_ends_its_thread() {
        let trimmer = Trimmer::new(Duration::from_millis(1));
        let (target, looks) = fake(0);
        trimmer.schedule(Instant::now(), Arc::downgrade(&target) as Weak<dyn Trim>);
        looks.recv_timeout(WAIT).expect("a look");
        let shared = Arc::downgrade(&trimmer.shared);
        drop(trimmer);
        // The thread holds the only other reference and lets it go as it ends.
        let deadline = Instant::now() + WAIT;
        while shared.strong_count() > 0 {
            assert!(Instant::now() < deadline, "the trimmer's thread did not end");
            std::thread::yield_now();
        }
    }
}
