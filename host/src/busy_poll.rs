//! Busy polling: one idle-priority thread that keeps a CPU awake while requests are arriving.
//!
//! Why: on a virtual machine an idle vCPU halts, and waking it for the next packet (an
//! inter-processor interrupt through the hypervisor) costs tens of microseconds — on this
//! project's 2-vCPU benchmark machine a third of a `simple` request's round trip at concurrency 1.
//! A spinning thread keeps its vCPU out of halt, so the threads the kernel wakes for the next
//! request (and its response) start at once; it is what busy-polling servers and the guest
//! halt-polling driver do. The spinner runs under `SCHED_IDLE`, so any other runnable thread takes
//! its CPU at once, and it yields between polls; it only spins for a window after the last request
//! (`--busy-poll-us`; between one and two windows) and then parks, so an idle server uses no CPU.
//!
//! Where `SCHED_IDLE` is not available (not Linux, or refused) there is no spinner: spinning at
//! normal priority would take CPU time from the threads doing the work.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Handle kept by the server: notes requests, wakes the spinner when it is parked, and stops it
/// when dropped.
pub struct BusyPoll {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    activity: Activity,
    /// How many times the spinner has parked (for tests).
    parks: AtomicU64,
    stop: AtomicBool,
}

/// The thread's name, which tests and operators can find it by (Linux keeps 15 bytes of it).
pub const THREAD_NAME: &str = "nereus-busypoll";

/// How many spin-loop hints between two yields.
const SPINS_PER_POLL: u32 = 64;

impl BusyPoll {
    /// Starts the spinner, which spins for one to two `window`s after each request. `None` when
    /// the window is zero or the thread cannot run at idle priority.
    pub fn start(window: Duration) -> Option<BusyPoll> {
        if window.is_zero() {
            return None;
        }
        let shared =
            Arc::new(Shared { activity: Activity::default(), parks: AtomicU64::new(0), stop: AtomicBool::new(false) });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let spinner = shared.clone();
        let handle = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                let idle = set_idle_priority();
                let _ = ready_tx.send(idle.clone());
                if idle.is_ok() {
                    spin(&spinner, window);
                }
            })
            .map_err(|e| tracing::warn!("busy polling is off: the thread could not start: {e}"))
            .ok()?;
        match ready_rx.recv() {
            Ok(Ok(())) => Some(BusyPoll { shared, thread: Some(handle) }),
            Ok(Err(e)) => {
                tracing::info!("busy polling is off: {e}");
                None
            }
            Err(_) => None,
        }
    }

    /// Notes a request: the spinner keeps spinning (or starts again) for at least a window.
    pub fn touch(&self) {
        if self.shared.activity.touch()
            && let Some(t) = &self.thread
        {
            t.thread().unpark();
        }
    }
}

impl Drop for BusyPoll {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Whether requests arrived in the current window, shared by the request path and the spinner.
///
/// The request path only reads it, except for the first request of a window, so requests do not
/// bounce its cache line between CPUs: the spinner clears it once per window.
#[derive(Default)]
struct Activity(AtomicU8);

const QUIET: u8 = 0;
const ACTIVE: u8 = 1;
const PARKED: u8 = 2;

/// The spinner's decision at the end of a window.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Spin,
    Park,
}

impl Activity {
    /// Marks the window active; true when the spinner was parked and must be unparked.
    fn touch(&self) -> bool {
        self.0.load(Ordering::Relaxed) != ACTIVE && self.0.swap(ACTIVE, Ordering::AcqRel) == PARKED
    }

    /// At the end of a window: spin on if a request came in it (and start a quiet one), else
    /// mark the spinner parked — a later `touch` sees that and unparks it.
    fn end_of_window(&self) -> Step {
        match self.0.compare_exchange(ACTIVE, QUIET, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Step::Spin,
            Err(_) => match self.0.compare_exchange(QUIET, PARKED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => Step::Park,
                // A request came in between the two: its window starts now.
                Err(_) => Step::Spin,
            },
        }
    }

    /// Still parked: no request has come since `end_of_window` said to park.
    fn parked(&self) -> bool {
        self.0.load(Ordering::Acquire) == PARKED
    }
}

fn spin(shared: &Shared, window: Duration) {
    let mut window_start = Instant::now();
    while !shared.stop.load(Ordering::Acquire) {
        for _ in 0..SPINS_PER_POLL {
            std::hint::spin_loop();
        }
        // Hands the CPU to anything runnable on it (a woken task can otherwise wait for the tick).
        std::thread::yield_now();
        if window_start.elapsed() < window {
            continue;
        }
        if shared.activity.end_of_window() == Step::Park {
            shared.parks.fetch_add(1, Ordering::Relaxed);
            while shared.activity.parked() && !shared.stop.load(Ordering::Acquire) {
                std::thread::park();
            }
        }
        window_start = Instant::now();
    }
}

/// Puts the calling thread under `SCHED_IDLE`: it then runs only when nothing else wants the CPU.
fn set_idle_priority() -> Result<(), String> {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: a plain system call on the calling thread (pid 0) with a valid parameter.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
        if rc == 0 { Ok(()) } else { Err(format!("SCHED_IDLE was refused: {}", std::io::Error::last_os_error())) }
    }
    #[cfg(not(target_os = "linux"))]
    Err("idle-priority threads need Linux".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spins_while_windows_see_requests_and_parks_after_a_quiet_one() {
        let a = Activity::default();
        // No request in the first window: park; the first request then asks for an unpark.
        assert_eq!(a.end_of_window(), Step::Park);
        assert!(a.parked());
        assert!(a.touch());
        assert!(!a.parked());
        // Further requests in the same window ask for nothing.
        assert!(!a.touch());
        assert_eq!(a.end_of_window(), Step::Spin);
        assert!(!a.touch());
        assert_eq!(a.end_of_window(), Step::Spin);
        // A whole window without requests: park.
        assert_eq!(a.end_of_window(), Step::Park);
        assert!(a.touch());
    }

    #[test]
    fn a_zero_window_starts_no_thread() {
        assert!(BusyPoll::start(Duration::ZERO).is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn touch_wakes_a_parked_spinner_and_drop_stops_it() {
        let Some(poll) = BusyPoll::start(Duration::from_micros(1)) else {
            return; // SCHED_IDLE refused here: nothing spins, which is what start promises.
        };
        // Parks after its first quiet 1 µs window; only a touch makes it spin and park again.
        let parks = |n| {
            let deadline = Instant::now() + Duration::from_secs(30);
            while poll.shared.parks.load(Ordering::Relaxed) < n {
                assert!(Instant::now() < deadline, "the spinner did not park");
                std::thread::yield_now();
            }
        };
        parks(1);
        poll.touch();
        parks(2);
        // Dropping the handle stops and joins the thread.
        drop(poll);
    }
}
