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
//! Spinning only pays while the machine has a CPU to spare: under a load that keeps every CPU busy
//! (concurrency 4 against two vCPUs) the spinner still runs in each short gap, and every thread the
//! kernel wakes there must first preempt it — measured at 12–29% of a CPU and 6–11% of HTTP
//! throughput at concurrency 4 (bench/README.md, session 8). So every [`HEADROOM_SAMPLE`] of
//! spinning it measures the machine's spare CPU (idle time from `/proc/stat` plus its own spinning)
//! and, when that is under [`MIN_SPARE_CPUS`], rests until a sample finds enough idle time again
//! (when the load drops, or requests stop and it goes on to park).
//!
//! Under sparse traffic (requests further apart than a window: 200 a second against a 1 ms window)
//! the spinner parks between requests anyway, so spinning a whole window or two after each one
//! catches no next request and only burns CPU (measured: 45.6% of a core at 200 requests a second
//! where bare hyper takes 1.9%). So a request does not wake a parked spinner unless it comes within
//! a window of the request before it: the first request after a quiet spell leaves it parked, a
//! second close behind wakes it, and it spins whole windows while the gaps stay shorter than a
//! window. (Waking it for every sparse request only to park it again still cost about 2 points of a
//! core at 200 requests a second: a futex wake and a context switch each; and a tail of an eighth of
//! a window after each about 5.)
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
    /// Whether a request is close enough behind the one before it to wake a parked spinner.
    gaps: Gaps,
    /// How many times the spinner has parked (for tests).
    parks: AtomicU64,
    /// How many times it rested because the CPUs were busy (for tests).
    rests: AtomicU64,
    stop: AtomicBool,
}

/// The thread's name, which tests and operators can find it by (Linux keeps 15 bytes of it).
pub const THREAD_NAME: &str = "nereus-busypoll";

/// How many spin-loop hints between two yields.
const SPINS_PER_POLL: u32 = 64;

/// How often a spinning thread measures the machine's spare CPU, and how long it rests when there
/// is too little. `/proc/stat` counts in ticks of 10 ms, so a sample needs to span several.
pub const HEADROOM_SAMPLE: Duration = Duration::from_millis(100);

/// The default spare CPU (in CPUs: idle time plus the spinner's own) below which spinning stops
/// paying (`--busy-poll-min-spare-cpus`).
pub const MIN_SPARE_CPUS: f64 = 0.5;

impl BusyPoll {
    /// Starts the spinner, which spins for one to two `window`s after each request. `None` when
    /// the window is zero or the thread cannot run at idle priority.
    pub fn start(window: Duration, min_spare_cpus: f64) -> Option<BusyPoll> {
        if window.is_zero() {
            return None;
        }
        let shared = Arc::new(Shared {
            activity: Activity::default(),
            gaps: Gaps::new(window),
            parks: AtomicU64::new(0),
            rests: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let spinner = shared.clone();
        let handle = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                let idle = set_idle_priority();
                let _ = ready_tx.send(idle.clone());
                if idle.is_ok() {
                    spin(&spinner, window, min_spare_cpus);
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

    /// Notes a request: the spinner keeps spinning for at least a window, or starts again if this
    /// request comes within a window of the one before it.
    pub fn touch(&self) {
        if self.shared.touch()
            && let Some(t) = &self.thread
        {
            t.thread().unpark();
        }
    }
}

impl Shared {
    /// Notes a request; true when the spinner is parked and must be unparked. While the spinner
    /// spins, the request path only reads the activity mark (see [`Activity`]); otherwise it also
    /// reads the clock, and leaves a parked spinner parked for a request a window or more behind
    /// the one before it (sparse traffic).
    fn touch(&self) -> bool {
        if self.activity.is_active() {
            return false;
        }
        if self.gaps.sparse() && self.activity.parked() {
            return false;
        }
        self.activity.touch()
    }
}

/// The gap between a request and the last one seen here, which are the requests that find the
/// window unmarked (the others take the request path's fast way out).
///
/// While the spinner is parked every request is seen, so a request's gap is the time since the
/// request before it. The first request after a park may measure from an earlier request than the
/// last one (those that came while a window was already marked were not seen): a gap never shorter
/// than the true one, and a park follows a whole window without requests anyway.
struct Gaps {
    clock: Instant,
    /// Nanoseconds since `clock` at the last request seen.
    last: AtomicU64,
    window: u64,
}

impl Gaps {
    fn new(window: Duration) -> Gaps {
        Gaps {
            clock: Instant::now(),
            last: AtomicU64::new(0),
            window: window.as_nanos().try_into().unwrap_or(u64::MAX),
        }
    }

    /// Notes a request now; true when the one before it was a window or more ago.
    fn sparse(&self) -> bool {
        self.sparse_at(self.clock.elapsed().as_nanos().try_into().unwrap_or(u64::MAX))
    }

    fn sparse_at(&self, now: u64) -> bool {
        now.saturating_sub(self.last.swap(now, Ordering::Relaxed)) >= self.window
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
    /// Whether a request has already marked the current window.
    fn is_active(&self) -> bool {
        self.0.load(Ordering::Relaxed) == ACTIVE
    }

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

fn spin(shared: &Shared, window: Duration, min_spare_cpus: f64) {
    // Zero: spin whatever the load, and never read /proc for it.
    let mut headroom = if min_spare_cpus > 0.0 { Headroom::start() } else { None };
    let mut window_start = Instant::now();
    while !shared.stop.load(Ordering::Acquire) {
        for _ in 0..SPINS_PER_POLL {
            std::hint::spin_loop();
        }
        // Hands the CPU to anything runnable on it (a woken task can otherwise wait for the tick).
        std::thread::yield_now();
        if let Some(h) = headroom.as_mut()
            && h.due()
            && h.spare_cpus() < min_spare_cpus
        {
            // The CPUs are busy with work: spinning would only stand in its way. Rest while they
            // stay busy; each rest is itself the next sample (of idle time alone, as nothing spins).
            loop {
                shared.rests.fetch_add(1, Ordering::Relaxed);
                std::thread::park_timeout(HEADROOM_SAMPLE);
                if shared.stop.load(Ordering::Acquire) || h.spare_cpus() >= min_spare_cpus {
                    break;
                }
            }
        }
        if window_start.elapsed() < window {
            continue;
        }
        if shared.activity.end_of_window() == Step::Park {
            shared.parks.fetch_add(1, Ordering::Relaxed);
            while shared.activity.parked() && !shared.stop.load(Ordering::Acquire) {
                std::thread::park();
            }
            // Woken by a request close behind another after a quiet spell: measure afresh from now.
            if let Some(h) = headroom.as_mut() {
                h.restart();
            }
        }
        window_start = Instant::now();
    }
}

/// The machine's spare CPU over the last sample: the idle time of all CPUs (`/proc/stat`) plus
/// the spinner's own CPU time (which would be idle without it).
struct Headroom {
    since: Instant,
    idle_ticks: u64,
    own_cpu: Duration,
    ticks_per_second: f64,
}

impl Headroom {
    /// `None` where `/proc/stat` or the thread's CPU clock cannot be read: the spinner then spins
    /// as it always did.
    fn start() -> Option<Headroom> {
        #[cfg(target_os = "linux")]
        #[allow(unsafe_code)]
        {
            // SAFETY: sysconf has no preconditions.
            let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
            if ticks <= 0 {
                return None;
            }
            let mut h = Headroom {
                since: Instant::now(),
                idle_ticks: 0,
                own_cpu: Duration::ZERO,
                ticks_per_second: ticks as f64,
            };
            h.sample()?;
            Some(h)
        }
        #[cfg(not(target_os = "linux"))]
        None
    }

    fn due(&self) -> bool {
        self.since.elapsed() >= HEADROOM_SAMPLE
    }

    /// Starts a new sample now.
    fn restart(&mut self) {
        let _ = self.sample();
    }

    /// Spare CPUs since the sample started; starts the next one.
    fn spare_cpus(&mut self) -> f64 {
        self.sample().map_or(f64::INFINITY, |(idle, own, wall)| spare_cpus(idle, self.ticks_per_second, own, wall))
    }

    /// Ends the current sample and starts the next: the idle ticks, own CPU time and wall time
    /// since the last one (`None`, and nothing restarted, where a reading fails).
    fn sample(&mut self) -> Option<(u64, Duration, Duration)> {
        let (idle, own, now) = (idle_ticks()?, thread_cpu_time()?, Instant::now());
        let spent = (idle.saturating_sub(self.idle_ticks), own.saturating_sub(self.own_cpu), now - self.since);
        (self.since, self.idle_ticks, self.own_cpu) = (now, idle, own);
        Some(spent)
    }
}

/// Spare CPUs over `wall`: idle ticks (all CPUs) plus `own` spinning time, per second of wall time.
fn spare_cpus(idle_ticks: u64, ticks_per_second: f64, own: Duration, wall: Duration) -> f64 {
    if wall.is_zero() {
        return f64::INFINITY;
    }
    (idle_ticks as f64 / ticks_per_second + own.as_secs_f64()) / wall.as_secs_f64()
}

/// Idle plus I/O-wait ticks of all CPUs together: the `cpu` line of `/proc/stat`.
fn idle_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_idle_ticks(stat.lines().next()?)
}

fn parse_idle_ticks(cpu_line: &str) -> Option<u64> {
    let mut fields = cpu_line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    // user nice system idle iowait ...
    let values: Vec<u64> = fields.take(5).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    Some(values.get(3)? + values.get(4)?)
}

/// The calling thread's CPU time.
fn thread_cpu_time() -> Option<Duration> {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid clock id and a pointer to a live timespec.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
    #[cfg(not(target_os = "linux"))]
    None
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
    fn a_request_a_window_or_more_behind_the_last_is_sparse() {
        let ms = 1_000_000;
        let gaps = Gaps::new(Duration::from_millis(1));
        // 200 requests a second against a 1 ms window: 5 ms apart, each one sparse.
        assert!(gaps.sparse_at(5 * ms));
        assert!(gaps.sparse_at(10 * ms));
        // One close behind: not sparse; exactly a window behind: sparse.
        assert!(!gaps.sparse_at(10 * ms + 150_000));
        assert!(gaps.sparse_at(11 * ms + 150_000));
        // A clock read out of order (another thread's earlier reading) is a gap of zero.
        assert!(!gaps.sparse_at(11 * ms));
    }

    #[test]
    fn a_parked_spinner_is_woken_only_by_a_request_close_behind_another() {
        let shared = Shared {
            activity: Activity::default(),
            gaps: Gaps::new(Duration::from_secs(3600)),
            parks: AtomicU64::new(0),
            rests: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        };
        // An hour's window: every request here is close behind the last one seen.
        assert_eq!(shared.activity.end_of_window(), Step::Park);
        assert!(shared.touch(), "a request within a window of the last one seen wakes it");
        assert!(!shared.touch(), "later requests of the window ask for nothing");
        assert_eq!(shared.activity.end_of_window(), Step::Spin);
        assert_eq!(shared.activity.end_of_window(), Step::Park);
        // A zero window: every request is sparse, and leaves the parked spinner parked.
        let sparse = Shared { gaps: Gaps::new(Duration::ZERO), ..shared };
        assert!(!sparse.touch(), "a request a window behind the last leaves the spinner parked");
        assert!(sparse.activity.parked());
    }

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
    fn spare_cpu_counts_idle_ticks_of_all_cpus_and_the_spinners_own_time() {
        let line = "cpu  4705 356 584 3699 23 0 8 0 0 0";
        assert_eq!(parse_idle_ticks(line), Some(3699 + 23));
        assert_eq!(parse_idle_ticks("cpu0 1 2 3 4 5"), None, "a single CPU's line is not the total");
        assert_eq!(parse_idle_ticks("cpu 1 2 x 4 5"), None);
        assert_eq!(parse_idle_ticks("cpu 1 2 3"), None);
        // Over 100 ms: one idle tick (10 ms) and 40 ms of spinning = half a CPU to spare.
        let (tick, wall) = (100.0, Duration::from_millis(100));
        let spare = spare_cpus(1, tick, Duration::from_millis(40), wall);
        assert!((spare - 0.5).abs() < 1e-9, "{spare}");
        // Two idle CPUs: 2.0; a saturated machine on which the spinner got 10 ms: 0.1.
        assert!((spare_cpus(20, tick, Duration::ZERO, wall) - 2.0).abs() < 1e-9);
        assert!(spare_cpus(0, tick, Duration::from_millis(10), wall) < MIN_SPARE_CPUS);
        assert_eq!(spare_cpus(5, tick, Duration::ZERO, Duration::ZERO), f64::INFINITY);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn headroom_reads_this_machine() {
        let mut h = Headroom::start().expect("/proc/stat and the thread clock are readable on Linux");
        std::thread::sleep(HEADROOM_SAMPLE);
        assert!(h.due());
        let spare = h.spare_cpus();
        assert!(spare.is_finite() && spare >= 0.0, "{spare}");
        assert!(!h.due(), "a sample starts the next one");
    }

    #[test]
    fn a_zero_window_starts_no_thread() {
        assert!(BusyPoll::start(Duration::ZERO, MIN_SPARE_CPUS).is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn touch_wakes_a_parked_spinner_and_drop_stops_it() {
        let Some(poll) = BusyPoll::start(Duration::from_millis(200), 0.0) else {
            return; // SCHED_IDLE refused here: nothing spins, which is what start promises.
        };
        // Parks after its first quiet window; only a request close behind another makes it spin
        // (and park again after a window).
        let parks = |n| {
            let deadline = Instant::now() + Duration::from_secs(30);
            while poll.shared.parks.load(Ordering::Relaxed) < n {
                assert!(Instant::now() < deadline, "the spinner did not park");
                std::thread::yield_now();
            }
        };
        parks(1);
        poll.touch();
        poll.touch();
        parks(2);
        // Dropping the handle stops and joins the thread.
        drop(poll);
    }

    /// No machine has a thousand spare CPUs: the spinner rests after its first sample, and keeps
    /// resting (sample after sample) while requests go on arriving, instead of spinning.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_spinner_short_of_spare_cpu_rests_while_requests_arrive() {
        let Some(poll) = BusyPoll::start(Duration::from_secs(60), 1000.0) else {
            return; // SCHED_IDLE refused here: nothing spins.
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while poll.shared.rests.load(Ordering::Relaxed) < 3 {
            poll.touch();
            assert!(Instant::now() < deadline, "the spinner did not rest");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(poll.shared.parks.load(Ordering::Relaxed), 0, "it rested, it did not park");
        drop(poll);
    }
}
