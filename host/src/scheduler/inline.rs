//! Inline execution: running a request on the I/O thread that received it, instead of handing it to
//! an instance's worker thread and waiting to be woken with the answer. For a small model that
//! round trip (two thread wake-ups and the context switches around them) costs more CPU than the
//! execution itself, and on a loaded machine CPU is what throughput is made of.
//!
//! An inline execution blocks its I/O thread, so it is only allowed where that is known to be
//! short and safe:
//!
//! * per model ([`InlineGate`]): after [`WARMUP`] consecutive executions, on any thread, each
//!   taking less than `--inline-execution-us` of CPU time; one costlier execution or one that fails
//!   with an internal error (a trap, a deadline, a memory cap, an invalid response) afterwards ends
//!   it for good, so a plugin that turns hostile costs at most one blocked I/O thread for one
//!   execution. CPU time of the executing thread, not wall time: on a loaded machine a short
//!   execution can be preempted for milliseconds, which says nothing about the model;
//! * per server ([`IoSlot`]): at most one I/O thread fewer than the server has (the HTTP runtime's
//!   workers and the gRPC threads, [`set_io_threads`]) runs inline at any moment, so one is always
//!   free to accept connections and answer other models; a server with a single I/O thread, and
//!   threads outside a runtime, never run inline;
//! * only for Wasm backends (the repository passes a zero limit for the others): a sandbox cannot
//!   wait inline, so CPU time is all an execution costs, while ONNX Runtime may wait on its own
//!   threads or a GPU stream;
//! * only where nothing is queued, so inline requests never overtake waiting ones;
//! * a backend that turns out to block (a Wasm plugin making a blocking WASI call — a sleep, a
//!   print — which wasmtime-wasi cannot do on an I/O thread) gives the request back unfinished; it
//!   runs again on the instance's worker, and the model runs inline no more.
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

/// Consecutive fast executions before a model may run inline.
pub const WARMUP: u32 = 64;

/// Whether a model's executions may run inline, learned from the executions it has run.
#[derive(Debug)]
pub struct InlineGate {
    /// Executions must be shorter than this; zero disables inline execution.
    limit: Duration,
    /// Consecutive executions under `limit` (saturating at [`WARMUP`]).
    streak: AtomicU32,
    /// Set for good by a slow or faulting execution after the warm-up.
    barred: AtomicBool,
}

impl InlineGate {
    pub fn new(limit: Duration) -> Self {
        InlineGate { limit, streak: AtomicU32::new(0), barred: AtomicBool::new(limit.is_zero()) }
    }

    /// Whether the model has earned inline execution and not lost it.
    pub fn open(&self) -> bool {
        !self.barred.load(Ordering::Relaxed) && self.streak.load(Ordering::Relaxed) >= WARMUP
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

    /// Records an execution: the CPU time it took and whether it faulted.
    pub fn record(&self, took: Duration, faulted: bool) {
        if self.barred.load(Ordering::Relaxed) {
            return;
        }
        let fast = !faulted && took < self.limit;
        if fast {
            let _ = self.streak.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| (s < WARMUP).then_some(s + 1));
        } else if self.open() {
            self.barred.store(true, Ordering::Relaxed);
            tracing::info!("an execution took {took:?} (or faulted): this model no longer runs on I/O threads");
        } else {
            // Still warming up: start over.
            self.streak.store(0, Ordering::Relaxed);
        }
    }
}

/// The CPU time the calling thread has used (wall time where the platform has no thread clock).
#[derive(Clone, Copy, Debug)]
pub struct ThreadClock(Duration);

impl ThreadClock {
    pub fn now() -> Self {
        #[cfg(target_os = "linux")]
        #[allow(unsafe_code)]
        {
            let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime writes only the timespec it is given.
            if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0 {
                return ThreadClock(Duration::new(t.tv_sec as u64, t.tv_nsec as u32));
            }
        }
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        ThreadClock(START.get_or_init(std::time::Instant::now).elapsed())
    }

    /// The time used since `self`.
    pub fn elapsed(self) -> Duration {
        Self::now().0.saturating_sub(self.0)
    }
}

/// Inline executions running now, across the server.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// The server's I/O threads; 0 (never inline) until the server says.
static IO_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Tells how many I/O threads the server runs (HTTP runtime workers plus gRPC threads).
pub fn set_io_threads(n: usize) {
    IO_THREADS.store(n, Ordering::Relaxed);
}

/// Permission for one inline execution on the current I/O thread; released on drop.
#[derive(Debug)]
pub struct IoSlot(());

impl IoSlot {
    /// A slot, if the calling thread runs an async runtime (an I/O thread) and fewer than all but
    /// one of the server's I/O threads are running inline now.
    pub fn take() -> Option<IoSlot> {
        tokio::runtime::Handle::try_current().ok()?;
        let allowed = IO_THREADS.load(Ordering::Relaxed).checked_sub(1).filter(|&n| n > 0)?;
        RUNNING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < allowed).then_some(n + 1))
            .ok()
            .map(|_| IoSlot(()))
    }
}

impl Drop for IoSlot {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
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
    fn a_slow_or_faulting_execution_after_the_warm_up_closes_it_for_good() {
        for (took, faulted) in [(SLOW, false), (FAST, true)] {
            let gate = warmed();
            gate.record(took, faulted);
            for _ in 0..10 * WARMUP {
                gate.record(FAST, false);
            }
            assert!(!gate.open());
        }
    }

    #[test]
    fn the_thread_clock_counts_cpu_not_sleep() {
        let start = ThreadClock::now();
        std::thread::sleep(Duration::from_millis(50));
        assert!(start.elapsed() < Duration::from_millis(25), "{:?}", start.elapsed());
        // and it advances while the thread computes (bounded, should the clock be stuck)
        let start = ThreadClock::now();
        let bound = std::time::Instant::now() + Duration::from_secs(10);
        while start.elapsed() < Duration::from_millis(5) {
            assert!(std::time::Instant::now() < bound, "the thread clock does not advance");
            std::hint::spin_loop();
        }
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
    fn slots_leave_one_io_thread_free_and_none_outside_a_runtime() {
        set_io_threads(3);
        assert!(IoSlot::take().is_none());
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        set_io_threads(1);
        assert!(runtime.block_on(async { IoSlot::take() }).is_none());
        set_io_threads(3);
        runtime.block_on(async {
            let a = IoSlot::take().expect("a first slot");
            let b = IoSlot::take().expect("a second slot");
            assert!(IoSlot::take().is_none());
            drop(a);
            let _c = IoSlot::take().expect("a freed slot");
            drop(b);
        });
    }
}
