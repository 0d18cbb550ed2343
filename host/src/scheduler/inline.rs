//! Inline execution: running a request on the I/O thread that received it, instead of handing it to
//! an instance's worker thread and waiting to be woken with the answer. For a small model that
//! round trip (two thread wake-ups and the context switches around them) costs more CPU than the
//! execution itself, and on a loaded machine CPU is what throughput is made of.
//!
//! An inline execution blocks its I/O thread, so it is only allowed where that is known to be
//! short and safe:
//!
//! * per model ([`InlineGate`]): after [`WARMUP`] consecutive executions, on any thread, each
//!   taking less than `--inline-execution-us` of CPU time. One that fails with an internal error
//!   (a trap, a deadline, a memory cap, an invalid response) afterwards ends it for good, so a
//!   plugin that turns hostile costs at most one blocked I/O thread for one execution; a costlier
//!   one sends the model back to its workers for a warm-up twice as long as the last (up to
//!   [`MAX_WARMUP`]), so a fast model survives the odd hiccup of a busy machine and a slow one
//!   runs inline ever more rarely. CPU time of the executing thread, not wall time: on a loaded
//!   machine a short execution can be preempted for milliseconds, which says nothing about the
//!   model; but never more than the wall time, as the thread clock of a VM jumps ([`ThreadClock`]).
//!   The CPU clock is a system call, so it is read only after an execution over the limit in wall
//!   time, for the next one: that first execution is not counted, the next one is;
//! * per server ([`IoThreads`]): at most one I/O thread fewer than the server has (its HTTP and
//!   gRPC I/O threads, `frontend::io_threads`) runs inline at any moment, so one is always free to
//!   serve its connections and answer other models; a server with a single I/O thread never runs
//!   inline. Of the other threads only one that waits for the answer anyway — a worker whose
//!   plugin calls the model ([`super::Caller::Waiting`]) — runs it itself, under the same gate
//!   but taking no I/O slot (and on it the execution may block); the rest only queue;
//! * only for Wasm backends (the repository passes a zero limit for the others): a sandbox cannot
//!   wait inline, so CPU time is all an execution costs, while ONNX Runtime may wait on its own
//!   threads or a GPU stream;
//! * only where nothing is queued, so inline requests never overtake waiting ones;
//! * a backend that turns out to block (a Wasm plugin making a blocking WASI call — a sleep, a
//!   print — which wasmtime-wasi cannot do on an I/O thread, so the sandbox traps it with a typed
//!   `WouldBlock`, see `backend::wasm::io_guard`) gives the request back unfinished; it runs again
//!   on the instance's worker, and the model runs inline no more. A Wasm model granted its folder
//!   (`sandbox.model_dir`) never runs inline: file operations block and are not guarded.
use std::sync::Weak;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Consecutive fast executions before a model may run inline.
pub const WARMUP: u32 = 64;

/// The longest warm-up a model can be sent back to: after repeated slow executions it may run two
/// slow executions inline (the first only makes the gate read the CPU clock) per this many at most.
pub const MAX_WARMUP: u32 = 1 << 16;

/// Fast executions, as a multiple of the current warm-up, after which the warm-up halves again.
const FORGIVE_AFTER: u32 = 16;

/// Whether a model's executions may run inline, learned from the executions it has run.
///
/// A slow execution once the gate is open closes it and doubles the warm-up the model must run
/// again (on its workers) before it reopens, up to [`MAX_WARMUP`]; a long run of fast executions
/// halves it back. Not barred for good on one slow execution: on a busy VM an execution of a few
/// microseconds is now and then charged hundreds (interrupts handled on its thread, the host
/// stealing the vCPU), which measured about once per 100 000 executions here — that barred fast
/// models within seconds. A plugin slow on purpose still gets at most two slow executions inline
/// per warm-up (see [`Self::finish`]), and the warm-up grows exponentially with each.
#[derive(Debug)]
pub struct InlineGate {
    /// Executions must be shorter than this; zero disables inline execution.
    limit: Duration,
    /// Consecutive executions under `limit` since the gate last closed (saturating).
    streak: AtomicU32,
    /// Fast executions needed before the gate opens: [`WARMUP`] doubled per slow execution.
    warmup: AtomicU32,
    /// Set for good by a faulting execution after the warm-up, or a backend that blocks.
    barred: AtomicBool,
    /// Time the next execution with the thread's CPU clock too: the last one took longer than the
    /// limit in wall time, which only the CPU clock can tell from a preemption.
    verify: AtomicBool,
    /// What an execution typically costs, in nanoseconds: a moving average (weight 1/8) of those
    /// under `limit` that did not fault; 0 before the first.
    typical: AtomicU64,
}

impl InlineGate {
    pub fn new(limit: Duration) -> Self {
        InlineGate {
            limit,
            streak: AtomicU32::new(0),
            warmup: AtomicU32::new(WARMUP),
            barred: AtomicBool::new(limit.is_zero()),
            verify: AtomicBool::new(false),
            typical: AtomicU64::new(0),
        }
    }

    /// What one of the model's executions typically costs (the moving average of its recent fast
    /// ones); `None` until one was timed, or once the model was barred.
    pub fn typical(&self) -> Option<Duration> {
        let nanos = self.typical.load(Ordering::Relaxed);
        (nanos > 0 && self.watching()).then(|| Duration::from_nanos(nanos))
    }

    /// A clock for the next execution, when executions still tell the gate anything (not barred).
    pub fn timer(&self) -> Option<ThreadClock> {
        self.watching().then(|| ThreadClock::start(self.verify.load(Ordering::Relaxed)))
    }

    /// Records an execution timed by [`Self::timer`]. One longer than the limit in wall time whose
    /// CPU time was not read is not counted either way (most are preemptions on a busy machine);
    /// the next execution is timed on the CPU clock too, and counts. So a plugin slow on purpose
    /// runs at most two slow executions inline before the gate closes.
    pub fn finish(&self, timer: ThreadClock, faulted: bool) {
        match timer.cost(self.limit) {
            Some(took) => {
                if took < self.limit && self.verify.load(Ordering::Relaxed) {
                    self.verify.store(false, Ordering::Relaxed);
                }
                self.record(took, faulted);
            }
            // A fault counts whatever the execution cost.
            None if faulted => self.record(self.limit, true),
            None => self.verify.store(true, Ordering::Relaxed),
        }
    }

    /// Whether the model has earned inline execution and not lost it.
    pub fn open(&self) -> bool {
        !self.barred.load(Ordering::Relaxed)
            && self.streak.load(Ordering::Relaxed) >= self.warmup.load(Ordering::Relaxed)
    }

    /// Whether executions still tell the gate anything (not barred); when not, nobody needs to
    /// time them.
    pub fn watching(&self) -> bool {
        !self.barred.load(Ordering::Relaxed)
    }

    /// Ends inline execution for the model, for good: its backend cannot run on an I/O thread.
    pub fn bar(&self) {
        if !self.barred.swap(true, Ordering::Relaxed) {
            tracing::info!("this model's backend blocks: it no longer runs on I/O threads");
        }
    }

    /// Records an execution: what it cost (see [`ThreadClock`]) and whether it faulted.
    fn record(&self, took: Duration, faulted: bool) {
        if self.barred.load(Ordering::Relaxed) {
            return;
        }
        let was_open = self.open();
        if faulted && was_open {
            self.barred.store(true, Ordering::Relaxed);
            tracing::info!("an execution faulted: this model no longer runs on I/O threads");
        } else if faulted || took >= self.limit {
            self.streak.store(0, Ordering::Relaxed);
            if was_open {
                let warmup = self.warmup.load(Ordering::Relaxed).saturating_mul(2).min(MAX_WARMUP);
                self.warmup.store(warmup, Ordering::Relaxed);
                tracing::debug!("an execution took {took:?}: runs on the workers for the next {warmup} executions");
            }
        } else {
            // Racing updates may lose one sample: an estimate, not an account.
            let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
            let typical = self.typical.load(Ordering::Relaxed);
            // Never 0 again once set: `typical - typical / 8` stays at least 1.
            let typical = if typical == 0 { took } else { typical - typical / 8 + took / 8 };
            self.typical.store(typical, Ordering::Relaxed);
            let streak = self
                .streak
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| s.checked_add(1))
                .map_or(u32::MAX, |s| s + 1);
            let warmup = self.warmup.load(Ordering::Relaxed);
            if warmup > WARMUP && streak >= warmup.saturating_mul(FORGIVE_AFTER) {
                // Halved, and the run counted afresh: the next halving takes another long run.
                self.warmup.store(warmup / 2, Ordering::Relaxed);
                self.streak.store(warmup / 2, Ordering::Relaxed);
            }
        }
    }
}

/// What an execution cost its thread: the CPU time the thread used, but never more than the wall
/// time that passed. CPU time because a preempted execution's wall time says nothing about the
/// model; capped by wall time because the thread clock is not exact on a VM: it jumps (measured
/// here: 72 µs of CPU time charged within 9 µs of wall time), and a jump past the limit would send
/// a fast model back to its workers. A truly costly execution is long on both clocks.
///
/// The thread's CPU clock is a system call (no vDSO): read twice per execution, it cost ~4% of a
/// busy I/O thread's CPU. So it is read only when asked for ([`InlineGate::timer`]); wall time
/// under the limit proves an execution fast without it.
#[derive(Clone, Copy, Debug)]
pub struct ThreadClock {
    cpu: Option<Duration>,
    wall: Instant,
}

impl ThreadClock {
    /// Starts timing; `cpu` also reads the thread's CPU clock, so a long wall time can be told
    /// from a preemption.
    pub fn start(cpu: bool) -> Self {
        ThreadClock { cpu: cpu.then(thread_cpu_time), wall: Instant::now() }
    }

    /// The cost since `self` — the smaller of the thread's CPU time and the wall time — when it can
    /// be told against `limit`: a wall time under it is the cost; above it only the CPU clock
    /// can tell, so `None` if it was not read.
    pub fn cost(self, limit: Duration) -> Option<Duration> {
        let wall = self.wall.elapsed();
        if wall < limit {
            return Some(wall);
        }
        Some(thread_cpu_time().saturating_sub(self.cpu?).min(wall))
    }
}

/// The CPU time the calling thread has used (wall time since the first call where the platform
/// has no thread clock).
fn thread_cpu_time() -> Duration {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes only the timespec it is given.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0 {
            return Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
        }
    }
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

/// The server's I/O threads, as far as inline execution is concerned: at most all but one of them
/// run an execution inline at any moment, so one is always free to serve its connections and
/// answer other models; and an I/O thread about to sleep runs the batches waiting for requests
/// that may not come ([`Self::before_park`]). Owned by the server and handed to every model's
/// scheduler.
pub struct IoThreads {
    /// Inline executions running now, across the server.
    running: AtomicUsize,
    /// How many may run at once: the I/O threads less one (0: never inline).
    allowed: usize,
    /// The batchers with requests waiting for their batch to grow, each listed once (it keeps
    /// its own flag, see [`WaitingBatches`]); `waiting` tells without the lock whether any is.
    batchers: parking_lot::Mutex<Vec<Weak<dyn WaitingBatches>>>,
    waiting: AtomicBool,
    /// Whether batches that wait run on an I/O thread about to sleep (not `--strict-queue-delay`).
    run_when_idle: bool,
}

/// A dynamic batcher whose queued requests wait for more to join them (`max_queue_delay`).
pub trait WaitingBatches: Send + Sync {
    /// Runs what is queued now, here on an I/O thread about to sleep, if the model may run inline
    /// and an instance is free; otherwise it waits on as before.
    fn run_waiting(&self);
}

impl IoThreads {
    /// The budget of a server with `io_threads` I/O threads (HTTP runtime workers plus gRPC
    /// threads); with one or none, nothing runs inline.
    pub fn new(io_threads: usize, run_when_idle: bool) -> Self {
        IoThreads {
            run_when_idle,
            running: AtomicUsize::new(0),
            allowed: io_threads.saturating_sub(1),
            batchers: parking_lot::Mutex::new(Vec::new()),
            waiting: AtomicBool::new(false),
        }
    }

    /// Whether a batcher should list itself when its requests wait ([`Self::batch_waits`]).
    pub fn run_when_idle(&self) -> bool {
        self.run_when_idle
    }

    /// Lists a batcher whose requests now wait for their batch to grow (it lists itself once
    /// until [`Self::before_park`] takes it).
    pub fn batch_waits(&self, batcher: Weak<dyn WaitingBatches>) {
        self.batchers.lock().push(batcher);
        self.waiting.store(true, Ordering::Release);
    }

    /// Called by an I/O thread about to sleep, which would leave the CPU idle: the batches waiting
    /// for their delay run now instead, on this thread, as large as they have grown. A batch waits
    /// for more requests so as to spend less CPU a request; with a thread idle that CPU is free,
    /// and the wait only adds latency — which for closed-loop clients is throughput too
    /// (docs/scheduling.md, *Dynamic batching*). Cheap when nothing waits: one atomic load.
    pub fn before_park(&self) {
        if !self.waiting.load(Ordering::Acquire) || !self.waiting.swap(false, Ordering::AcqRel) {
            return;
        }
        let batchers = std::mem::take(&mut *self.batchers.lock());
        for batcher in batchers.iter().filter_map(Weak::upgrade) {
            batcher.run_waiting();
        }
    }

    /// A slot for one inline execution on the calling I/O thread, if fewer than the allowed
    /// number run now.
    pub fn take(&self) -> Option<IoSlot<'_>> {
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.allowed).then_some(n + 1))
            .ok()
            .map(|_| IoSlot(self))
    }
}

/// Permission for one inline execution on the current I/O thread; released on drop.
pub struct IoSlot<'a>(&'a IoThreads);

impl Drop for IoSlot<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_micros(250);
    const FAST: Duration = Duration::from_micros(10);
    const SLOW: Duration = Duration::from_millis(1);

    fn warmed() -> InlineGate {
        let gate = InlineGate::new(LIMIT);
        for _ in 0..WARMUP {
            assert!(!gate.open());
            gate.record(FAST, false);
        }
        assert!(gate.open());
        gate
    }

    #[test]
    fn opens_after_the_warm_up_and_a_slow_execution_restarts_it() {
        let gate = InlineGate::new(LIMIT);
        for _ in 0..WARMUP - 1 {
            gate.record(FAST, false);
        }
        gate.record(SLOW, false);
        assert!(!gate.open());
        for _ in 0..WARMUP {
            gate.record(FAST, false);
        }
        assert!(gate.open());
    }

    #[test]
    fn the_typical_execution_follows_the_fast_ones_and_ends_with_a_bar() {
        let gate = InlineGate::new(LIMIT);
        assert_eq!(gate.typical(), None);
        gate.record(FAST, false);
        assert_eq!(gate.typical(), Some(FAST));
        // Slow and faulting executions say nothing about a typical one.
        gate.record(SLOW, false);
        gate.record(FAST / 2, true);
        assert_eq!(gate.typical(), Some(FAST));
        for _ in 0..100 {
            gate.record(FAST * 2, false);
        }
        let typical = gate.typical().unwrap();
        assert!(typical > FAST * 19 / 10 && typical <= FAST * 2, "{typical:?}");
        gate.bar();
        assert_eq!(gate.typical(), None);
    }

    #[test]
    fn a_fault_after_the_warm_up_closes_it_for_good() {
        let gate = warmed();
        gate.record(FAST, true);
        for _ in 0..10 * WARMUP {
            gate.record(FAST, false);
        }
        assert!(!gate.open());
    }

    /// Fast executions until the gate opens (bounded).
    fn reopen(gate: &InlineGate) -> u32 {
        let mut n = 0;
        while !gate.open() {
            gate.record(FAST, false);
            n += 1;
            assert!(n <= 2 * MAX_WARMUP, "the gate never reopens");
        }
        n
    }

    #[test]
    fn each_slow_execution_after_the_warm_up_doubles_the_next_warm_up_and_good_runs_halve_it() {
        let gate = warmed();
        gate.record(SLOW, false);
        assert!(!gate.open());
        assert_eq!(reopen(&gate), 2 * WARMUP);
        gate.record(SLOW, false);
        assert_eq!(reopen(&gate), 4 * WARMUP);
        // Slow again and again: at most one slow execution inline per MAX_WARMUP executions.
        for _ in 0..20 {
            gate.record(SLOW, false);
            reopen(&gate);
        }
        gate.record(SLOW, false);
        assert_eq!(reopen(&gate), MAX_WARMUP);
        // A long good run halves the warm-up again, step by step.
        for _ in 0..MAX_WARMUP * FORGIVE_AFTER {
            gate.record(FAST, false);
        }
        gate.record(SLOW, false);
        assert_eq!(reopen(&gate), MAX_WARMUP, "halved once, then doubled by the slow execution");
    }

    #[test]
    fn the_thread_clock_counts_cpu_not_sleep() {
        let limit = Duration::from_millis(25);
        let start = ThreadClock::start(true);
        std::thread::sleep(Duration::from_millis(50));
        let cost = start.cost(limit).expect("the CPU clock was read");
        assert!(cost < limit, "{cost:?}");
        // and it advances while the thread computes (bounded, should the clock be stuck)
        let start = ThreadClock::start(true);
        let bound = std::time::Instant::now() + Duration::from_secs(10);
        while start.cost(Duration::ZERO).expect("the CPU clock was read") < Duration::from_millis(5) {
            assert!(std::time::Instant::now() < bound, "the thread clock does not advance");
            std::hint::spin_loop();
        }
        // Without the CPU clock a cost over the limit cannot be told; under it, wall time tells.
        let start = ThreadClock::start(false);
        assert!(start.cost(Duration::from_secs(3600)).is_some());
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(start.cost(Duration::from_millis(1)), None);
    }

    /// A clock started `ago`, as if an execution had been running that long (mostly preempted:
    /// its CPU time is what the test thread used since).
    fn started_ago(ago: Duration, cpu: bool) -> ThreadClock {
        ThreadClock { wall: std::time::Instant::now() - ago, ..ThreadClock::start(cpu) }
    }

    #[test]
    fn a_long_wall_time_is_verified_on_the_cpu_clock_before_it_counts() {
        let gate = warmed();
        // Long in wall time, CPU clock not read: not counted, the next one reads it.
        let timer = gate.timer().expect("watching");
        assert!(timer.cpu.is_none(), "the CPU clock is only read when asked for");
        gate.finish(started_ago(SLOW, false), false);
        assert!(gate.open());
        let timer = gate.timer().expect("watching");
        assert!(timer.cpu.is_some());
        // A preemption (long wall time, little CPU time) counts as fast, and ends the verifying.
        gate.finish(started_ago(SLOW, true), false);
        assert!(gate.open());
        assert!(gate.timer().expect("watching").cpu.is_none());
        // Two slow executions in a row: the second, timed on the CPU clock, closes the gate.
        gate.finish(started_ago(SLOW, false), false);
        let timer = gate.timer().expect("watching");
        let bound = std::time::Instant::now() + Duration::from_secs(10);
        while timer.cost(Duration::ZERO).expect("the CPU clock was read") < SLOW {
            assert!(std::time::Instant::now() < bound, "the thread clock does not advance");
            std::hint::spin_loop();
        }
        gate.finish(timer, false);
        assert!(!gate.open());
        // A fault counts even when its cost cannot be told.
        let gate = warmed();
        gate.finish(started_ago(SLOW, false), true);
        for _ in 0..10 * WARMUP {
            gate.record(FAST, false);
        }
        assert!(!gate.open());
    }

    #[test]
    fn zero_disables_it() {
        let gate = InlineGate::new(Duration::ZERO);
        for _ in 0..2 * WARMUP {
            gate.record(Duration::ZERO, false);
        }
        assert!(!gate.open());
    }

    #[test]
    fn slots_leave_one_io_thread_free() {
        assert!(IoThreads::new(1, true).take().is_none());
        assert!(IoThreads::new(0, true).take().is_none());
        let threads = IoThreads::new(3, true);
        let a = threads.take().expect("a first slot");
        let b = threads.take().expect("a second slot");
        assert!(threads.take().is_none());
        drop(a);
        let _c = threads.take().expect("a freed slot");
        drop(b);
    }

    struct Counted(AtomicUsize);

    impl WaitingBatches for Counted {
        fn run_waiting(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_thread_about_to_park_runs_each_listed_batcher_once() {
        let threads = IoThreads::new(2, true);
        let batcher = std::sync::Arc::new(Counted(AtomicUsize::new(0)));
        let gone = std::sync::Arc::new(Counted(AtomicUsize::new(0)));
        let weak: Weak<dyn WaitingBatches> = std::sync::Arc::downgrade(&batcher) as Weak<Counted>;
        threads.batch_waits(weak);
        threads.batch_waits(std::sync::Arc::downgrade(&gone) as Weak<Counted>);
        drop(gone); // an unloaded model's batcher is skipped
        threads.before_park();
        assert_eq!(batcher.0.load(Ordering::Relaxed), 1);
        // Taken off the list: the next park runs nothing until the batcher lists itself again.
        threads.before_park();
        assert_eq!(batcher.0.load(Ordering::Relaxed), 1);
        threads.batch_waits(std::sync::Arc::downgrade(&batcher) as Weak<Counted>);
        threads.before_park();
        assert_eq!(batcher.0.load(Ordering::Relaxed), 2);
    }
}
