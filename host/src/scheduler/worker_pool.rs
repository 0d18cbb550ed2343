//! The threads instance workers run on, shared by every model: a worker holds one only while it
//! has work (or polls for more, see [`super::lifecycle`]), so a server with thousands of idle
//! models holds no thread for them. Threads are reused while there is work and end after
//! [`KEEP_ALIVE`] without any, as tokio's blocking pool does; there are never more than the
//! workers running at once (bounded by the instances the server may hold) plus those resting.
//!
//! There is no queueing limit and no fixed thread count on purpose: a worker may block (a plugin
//! calling another model waits for its answer), and a bounded pool could then deadlock a model
//! calling itself through its own instances.
use std::collections::VecDeque;
use std::sync::LazyLock;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// How long a thread with nothing to run waits for work before it ends.
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// A unit of work: resuming a worker until it rests again.
pub type Task = Box<dyn FnOnce() + Send>;

/// The process's worker threads. Process-wide as tokio's blocking pool is per runtime: it holds
/// threads, never requests.
pub static WORKER_POOL: LazyLock<WorkerPool> = LazyLock::new(WorkerPool::default);

#[derive(Default)]
pub struct WorkerPool {
    state: Mutex<PoolState>,
    work: Condvar,
}

#[derive(Default)]
struct PoolState {
    tasks: VecDeque<Task>,
    /// Threads waiting for a task.
    idle: usize,
    /// Threads alive.
    threads: usize,
}

impl WorkerPool {
    /// Runs `task` on a resting thread, or on a new one when none rests.
    pub fn submit(&'static self, task: Task) {
        let mut state = self.state.lock();
        state.tasks.push_back(task);
        if state.tasks.len() <= state.idle {
            self.work.notify_one();
            return;
        }
        state.threads += 1;
        drop(state);
        let spawned = std::thread::Builder::new().name(IDLE_NAME.into()).spawn(move || self.serve());
        if let Err(e) = spawned {
            // The task stays queued for the next thread that frees up.
            self.state.lock().threads -= 1;
            tracing::error!("could not start a worker thread ({e}); the task waits for a busy one");
        }
    }

    /// Threads alive (running or resting).
    pub fn threads(&self) -> usize {
        self.state.lock().threads
    }

    /// Threads waiting for a task.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.state.lock().idle
    }

    fn serve(&'static self) {
        precise_timers();
        let mut state = self.state.lock();
        loop {
            if let Some(task) = state.tasks.pop_front() {
                drop(state);
                // A panicking plugin host call loses its worker, as a thread of its own did, but
                // not this thread's later tasks.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
                // Straight back under the lock: a task submitted meanwhile finds no idle thread
                // and starts one, so the gap is kept short (a worker that rests is often woken
                // again within microseconds).
                state = self.state.lock();
                if leave_after_task() {
                    state.threads -= 1;
                    return;
                }
                continue;
            }
            state.idle += 1;
            let timed_out = self.work.wait_for(&mut state, KEEP_ALIVE).timed_out();
            state.idle -= 1;
            if timed_out && state.tasks.is_empty() {
                state.threads -= 1;
                return;
            }
        }
    }
}

/// Makes the calling thread's timed waits end within a microsecond of their deadline rather than
/// up to the kernel's default slack of 50 µs later: a worker sleeping until a batch's
/// `max_queue_delay_microseconds` runs out (see `scheduler::lifecycle::Next::Doze`) would otherwise
/// hold the batch half that long again at the default 100 µs.
fn precise_timers() {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    // SAFETY: PR_SET_TIMERSLACK takes a number of nanoseconds and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

/// What a pool thread is called until it first runs a worker (`top -H`, `/proc/<pid>/task/*/comm`);
/// then it keeps the name of the last instance it ran.
const IDLE_NAME: &str = "nereus-worker";

thread_local! {
    /// Set when the running task changed something of this thread's that cannot be undone (its
    /// CPU priority lowered after a plugin fault): the thread ends after the task instead of
    /// carrying that into other models' work.
    static TAINTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The name last given with [`name_this_thread`]: renaming costs a system call, and a thread
    /// usually runs the same worker again.
    static NAME: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Marks the calling thread as changed for good; a pool thread ends after its task.
pub fn taint_this_thread() {
    TAINTED.with(|t| t.set(true));
}

fn leave_after_task() -> bool {
    TAINTED.with(|t| t.get())
}

/// Names the calling thread (Linux keeps 15 bytes), so that profiles and `/proc` show which
/// model's worker runs on it.
pub fn name_this_thread(name: &str) {
    let unchanged = NAME.with_borrow_mut(|current| {
        if current == name {
            return true;
        }
        current.clear();
        current.push_str(name);
        false
    });
    if unchanged {
        return;
    }
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    {
        let mut bytes: Vec<u8> = name.bytes().filter(|b| *b != 0).take(15).collect();
        bytes.push(0);
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from a live buffer.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, bytes.as_ptr() as libc::c_ulong, 0, 0, 0);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = name;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn every_task_runs_once_and_threads_are_reused() {
        let pool: &'static WorkerPool = Box::leak(Box::default());
        let ran = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        for _ in 0..200 {
            let (ran, tx) = (ran.clone(), tx.clone());
            pool.submit(Box::new(move || {
                ran.fetch_add(1, Ordering::SeqCst);
                tx.send(()).unwrap();
            }));
            // One at a time: each task ends, and its thread waits for the next, before the next is
            // submitted (a state, not a time: the thread gets there however slow the machine).
            rx.recv().unwrap();
            while pool.idle() < pool.threads() {
                std::thread::yield_now();
            }
        }
        assert_eq!(ran.load(Ordering::SeqCst), 200);
        assert_eq!(pool.threads(), 1, "one thread for tasks that never overlapped");
    }

    #[test]
    fn blocked_tasks_do_not_hold_up_others() {
        let pool: &'static WorkerPool = Box::leak(Box::default());
        // Eight tasks that each wait for all eight to run: a fixed-size pool smaller than eight
        // would never finish them.
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let (done_tx, done_rx) = mpsc::channel();
        for _ in 0..8 {
            let (barrier, done) = (barrier.clone(), done_tx.clone());
            pool.submit(Box::new(move || {
                barrier.wait();
                done.send(()).unwrap();
            }));
        }
        for _ in 0..8 {
            done_rx.recv_timeout(Duration::from_secs(60)).expect("every task finishes");
        }
    }
}
