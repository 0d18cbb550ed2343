//! The operator's sandbox budgets, which no model's configuration can raise: ceilings on what a
//! `config.pbtxt` may ask of its sandboxes, and server-wide totals — sandboxes (lent to instances
//! on demand, see [`super::leases`]), and Wasm linear memory with each model's fair share of it.
//!
//! A model asking for more than a ceiling is refused at load (UNAVAILABLE, the reason naming the
//! parameter and the flag), not clamped: a plugin written for a larger budget would otherwise fail
//! later, at run time, in ways harder to trace to their cause. The totals are leases (sandboxes)
//! and a meter (memory, as sandboxes grow it): a load that finds no sandbox free or to be taken
//! back is refused; a growth past the server's memory, or past the model's
//! share of it, is refused to the guest as a failed `memory.grow` — the plugin faults with that
//! reason, and the other models keep theirs.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::leases::Leases;
use super::policy::{MAX_MEMORY_BYTES, SandboxPolicy};
use super::trim::Trimmer;

/// What the operator allows (the `--sandbox-*` flags).
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxLimits {
    /// `--sandbox-max-memory-mb`: the most a model may set `sandbox.memory_limit_mb` to.
    pub max_memory_bytes: u64,
    /// `--sandbox-max-execution-timeout-ms`: the most for `sandbox.execution_timeout_ms`.
    pub max_execution_timeout: Duration,
    /// `--sandbox-max-load-timeout-ms`: the most for `sandbox.load_timeout_ms`.
    pub max_load_timeout: Duration,
    /// `--sandbox-max-output-bytes`: the most for `sandbox.max_output_bytes`.
    pub max_output_bytes: u64,
    /// `--sandbox-max-instances`: the most instances one model may have (`instance_group` and
    /// `sandbox.max_instances` alike).
    pub max_instances: u64,
    /// `--sandbox-total-instances`: sandboxes held at once by all models' instances (one each
    /// while it has one; an instance at rest may be asked to give its back).
    pub total_instances: u64,
    /// `--sandbox-total-memory-mb`: Wasm linear memory of all sandboxes together.
    pub total_memory_bytes: u64,
    /// `--sandbox-model-memory-share`: the share of the total one model's sandboxes may hold.
    pub model_memory_share: f64,
    /// `--sandbox-log-lines-per-sec`: log lines one model's plugin may write a second (a burst of
    /// as many at once); the rest are dropped and counted.
    pub log_lines_per_sec: u32,
    /// `--sandbox-trim-above-mb`: an instance whose linear memory grew more than this past what it
    /// held once initialised is rebuilt when its worker goes idle, giving the memory back (Wasm
    /// memory only grows). Sequence-batched models are left alone: their plugin keeps state.
    pub trim_above_bytes: u64,
    /// `--sandbox-trim-after-idle-ms`: how long such an instance must have been idle before it is
    /// rebuilt (zero: as soon as its worker is idle). See [`super::trim`].
    pub trim_after_idle: Duration,
}

/// `--sandbox-log-lines-per-sec`'s default, also the rate of the backends' own sandboxes. A
/// constant, not `SandboxLimits::default()`: that reads /proc/meminfo, and every sandbox's meter
/// would read it again (measured: 3% of loading 5,000 models).
const DEFAULT_LOG_LINES_PER_SEC: u32 = 100;

/// The most sandbox instances the pooling allocator has room for, less a few for the backends'
/// own sandboxes (one per component in use).
pub const MAX_TOTAL_INSTANCES: u64 = 984;

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            max_memory_bytes: MAX_MEMORY_BYTES,
            max_execution_timeout: Duration::from_secs(3600),
            max_load_timeout: Duration::from_secs(600),
            max_output_bytes: 1 << 30,
            max_instances: 64,
            total_instances: 900,
            total_memory_bytes: default_total_memory(),
            model_memory_share: 0.5,
            log_lines_per_sec: DEFAULT_LOG_LINES_PER_SEC,
            trim_above_bytes: 64 << 20,
            trim_after_idle: Duration::from_secs(1),
        }
    }
}

/// Half the machine's memory (`MemTotal`), at least 1 GiB; 8 GiB where it cannot be read.
fn default_total_memory() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib * 1024)
    });
    total.map_or(8 << 30, |bytes| (bytes / 2).max(1 << 30))
}

impl SandboxLimits {
    /// Checks a model's policy and instance count against the ceilings: the first it exceeds, as
    /// the reason the model is UNAVAILABLE.
    pub fn admit(&self, policy: &SandboxPolicy, instances: usize) -> Result<(), String> {
        let mib = |bytes: u64| bytes >> 20;
        let ms = |d: Duration| d.as_millis() as u64;
        // (parameter, asked, allowed, flag), in the order they are checked.
        let checks = [
            (
                "sandbox.memory_limit_mb",
                mib(policy.memory_limit_bytes),
                mib(self.max_memory_bytes),
                "--sandbox-max-memory-mb",
            ),
            (
                "sandbox.execution_timeout_ms",
                ms(policy.execution_timeout),
                ms(self.max_execution_timeout),
                "--sandbox-max-execution-timeout-ms",
            ),
            (
                "sandbox.load_timeout_ms",
                ms(policy.load_timeout),
                ms(self.max_load_timeout),
                "--sandbox-max-load-timeout-ms",
            ),
            ("sandbox.max_output_bytes", policy.max_output_bytes, self.max_output_bytes, "--sandbox-max-output-bytes"),
            ("sandbox.max_instances", policy.max_instances, self.max_instances, "--sandbox-max-instances"),
            ("instance_group's count", instances as u64, self.max_instances, "--sandbox-max-instances"),
        ];
        match checks.iter().find(|(_, asked, allowed, _)| asked > allowed) {
            Some((parameter, asked, allowed, flag)) => Err(format!(
                "{parameter} {asked} exceeds what the operator allows: at most {allowed} ({flag}); a model cannot \
                 raise the server's sandbox limits"
            )),
            None => Ok(()),
        }
    }

    /// The policy of a model whose configuration sets none: the defaults, within the ceilings (a
    /// model that does not ask is not refused for the operator's lower limits).
    pub fn default_policy(&self) -> SandboxPolicy {
        let d = SandboxPolicy::default();
        SandboxPolicy {
            memory_limit_bytes: d.memory_limit_bytes.min(self.max_memory_bytes),
            execution_timeout: d.execution_timeout.min(self.max_execution_timeout),
            load_timeout: d.load_timeout.min(self.max_load_timeout),
            max_output_bytes: d.max_output_bytes.min(self.max_output_bytes),
            max_instances: d.max_instances.min(self.max_instances),
            ..d
        }
    }

    /// The most linear memory one model's sandboxes may hold together.
    pub fn model_memory_bytes(&self) -> u64 {
        (self.total_memory_bytes as f64 * self.model_memory_share) as u64
    }
}

/// The server-wide totals: the sandboxes lent to instances, and the Wasm memory held.
#[derive(Debug)]
pub struct SandboxBudget {
    pub limits: SandboxLimits,
    pub leases: Arc<Leases>,
    /// Rebuilds instances grown past `--sandbox-trim-above-mb` once idle for long enough.
    pub(super) trimmer: Arc<Trimmer>,
    memory: AtomicU64,
}

impl SandboxBudget {
    pub fn new(limits: SandboxLimits) -> Arc<Self> {
        let leases = Leases::new(limits.total_instances);
        let trimmer = Arc::new(Trimmer::new(limits.trim_after_idle));
        Arc::new(SandboxBudget { limits, leases, trimmer, memory: AtomicU64::new(0) })
    }

    /// Wasm linear memory held now, in bytes.
    pub fn memory(&self) -> u64 {
        self.memory.load(Ordering::Acquire)
    }

    /// Takes `bytes` of the total for a growth; refused (with the reason) past the total.
    fn take_memory(&self, bytes: u64) -> Result<(), String> {
        let total = self.limits.total_memory_bytes;
        let held = self.memory.fetch_add(bytes, Ordering::AcqRel);
        if held + bytes > total {
            self.memory.fetch_sub(bytes, Ordering::AcqRel);
            return Err(format!(
                "the server's Wasm memory budget of {} MiB is in use (--sandbox-total-memory-mb)",
                total >> 20
            ));
        }
        Ok(())
    }

    fn give_memory(&self, bytes: u64) {
        self.memory.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// What is left of the server's Wasm memory budget, held until dropped (by `--test-hooks`, to
/// stand for other sandboxes holding it).
pub struct BudgetHold {
    budget: Arc<SandboxBudget>,
    bytes: u64,
}

impl Drop for BudgetHold {
    fn drop(&mut self) {
        self.budget.give_memory(self.bytes);
    }
}

/// Where one model version's sandboxes count what they use: their linear memory (in the server's
/// total, within the model's share of it, and on the version's `nereus_wasm_memory_bytes` gauge)
/// and their log lines (against the rate limit). Clones share the counts.
#[derive(Clone, Default)]
pub struct ModelMeter {
    budget: Option<Arc<SandboxBudget>>,
    model: Arc<AtomicU64>,
    gauge: Option<prometheus::IntGauge>,
    log: Arc<LogRate>,
}

impl ModelMeter {
    /// A meter in `budget` (none: uncounted, for tests) reporting memory to
    /// `gauge` and dropped log lines to `dropped`.
    pub fn new(
        budget: Option<Arc<SandboxBudget>>,
        gauge: Option<prometheus::IntGauge>,
        dropped: Option<prometheus::IntCounter>,
    ) -> Self {
        let per_sec = budget.as_ref().map_or(DEFAULT_LOG_LINES_PER_SEC, |b| b.limits.log_lines_per_sec);
        ModelMeter { budget, model: Arc::new(AtomicU64::new(0)), gauge, log: Arc::new(LogRate::new(per_sec, dropped)) }
    }

    /// Takes `bytes` more for one of the model's sandboxes; refused, with the reason, past the
    /// model's share or the server's total.
    pub fn grow(&self, bytes: usize) -> Result<(), String> {
        let bytes = bytes as u64;
        if let Some(budget) = &self.budget {
            let share = budget.limits.model_memory_bytes();
            let held = self.model.fetch_add(bytes, Ordering::AcqRel);
            if held + bytes > share {
                self.model.fetch_sub(bytes, Ordering::AcqRel);
                return Err(format!(
                    "the model's sandboxes hold {} MiB, and their share of the server's Wasm memory is {} MiB \
                     (--sandbox-model-memory-share of --sandbox-total-memory-mb)",
                    held >> 20,
                    share >> 20
                ));
            }
            if let Err(e) = budget.take_memory(bytes) {
                self.model.fetch_sub(bytes, Ordering::AcqRel);
                return Err(e);
            }
        } else {
            self.model.fetch_add(bytes, Ordering::AcqRel);
        }
        if let Some(g) = &self.gauge {
            g.add(bytes as i64);
        }
        Ok(())
    }

    /// Gives back `bytes` a sandbox held (a failed growth, a dropped store).
    pub fn shrink(&self, bytes: usize) {
        let bytes = bytes as u64;
        self.model.fetch_sub(bytes, Ordering::AcqRel);
        if let Some(budget) = &self.budget {
            budget.give_memory(bytes);
        }
        if let Some(g) = &self.gauge {
            g.sub(bytes as i64);
        }
    }

    /// Holds what is left of the server's budget until the hold is dropped; `None` when uncounted.
    pub fn hold_rest_of_budget(&self) -> Option<BudgetHold> {
        let budget = self.budget.clone()?;
        let total = budget.limits.total_memory_bytes;
        let before = budget.memory.fetch_max(total, Ordering::AcqRel);
        Some(BudgetHold { bytes: total.saturating_sub(before), budget })
    }

    /// Whether one more log line may be written now (see [`LogRate::admit`]).
    pub fn admit_log_line(&self) -> LogAdmission {
        self.log.admit(std::time::Instant::now())
    }
}

/// What the log rate limit says of a plugin's next line.
#[derive(Debug, PartialEq, Eq)]
pub enum LogAdmission {
    /// Write it; `dropped` lines were dropped since the last one written (say so first).
    Write { dropped: u64 },
    /// Drop it (counted).
    Drop,
}

/// A token bucket of log lines, shared by a model's sandboxes: `per_sec` lines a second, as many at
/// once.
struct LogRate {
    per_sec: f64,
    /// Lines that may be written now, and when it was last refilled.
    bucket: parking_lot::Mutex<(f64, Option<std::time::Instant>)>,
    dropped_since_written: AtomicU64,
    dropped: Option<prometheus::IntCounter>,
}

impl Default for LogRate {
    fn default() -> Self {
        LogRate::new(DEFAULT_LOG_LINES_PER_SEC, None)
    }
}

impl LogRate {
    fn new(per_sec: u32, dropped: Option<prometheus::IntCounter>) -> Self {
        let per_sec = f64::from(per_sec);
        LogRate {
            per_sec,
            bucket: parking_lot::Mutex::new((per_sec, None)),
            dropped_since_written: AtomicU64::new(0),
            dropped,
        }
    }

    fn admit(&self, now: std::time::Instant) -> LogAdmission {
        let mut bucket = self.bucket.lock();
        let (tokens, last) = &mut *bucket;
        if let Some(last) = last {
            *tokens = (*tokens + now.saturating_duration_since(*last).as_secs_f64() * self.per_sec).min(self.per_sec);
        }
        *last = Some(now);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            LogAdmission::Write { dropped: self.dropped_since_written.swap(0, Ordering::AcqRel) }
        } else {
            self.dropped_since_written.fetch_add(1, Ordering::AcqRel);
            if let Some(c) = &self.dropped {
                c.inc();
            }
            LogAdmission::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SandboxLimits {
        SandboxLimits {
            total_instances: 10,
            total_memory_bytes: 100 << 20,
            model_memory_share: 0.6,
            ..SandboxLimits::default()
        }
    }

    #[test]
    fn a_policy_over_a_ceiling_is_refused_naming_the_flag() {
        let limits = SandboxLimits { max_instances: 8, max_memory_bytes: 512 << 20, ..limits() };
        let policy = SandboxPolicy { max_instances: 998, ..SandboxPolicy::default() };
        let e = limits.admit(&policy, 1).unwrap_err();
        assert!(e.starts_with("sandbox.max_instances 998 exceeds what the operator allows: at most 8"), "{e}");
        assert!(e.contains("--sandbox-max-instances"), "{e}");
        let policy = SandboxPolicy { memory_limit_bytes: 1 << 30, ..SandboxPolicy::default() };
        assert!(limits.admit(&policy, 1).unwrap_err().contains("--sandbox-max-memory-mb"));
        let e = limits.admit(&SandboxPolicy { max_instances: 8, ..SandboxPolicy::default() }, 9).unwrap_err();
        assert!(e.starts_with("instance_group's count 9 exceeds"), "{e}");
        assert_eq!(limits.admit(&SandboxPolicy { max_instances: 8, ..SandboxPolicy::default() }, 8), Ok(()));
    }

    #[test]
    fn memory_is_bounded_by_the_models_share_and_the_total() {
        let budget = SandboxBudget::new(limits());
        let (one, two) =
            (ModelMeter::new(Some(budget.clone()), None, None), ModelMeter::new(Some(budget.clone()), None, None));
        one.grow(50 << 20).unwrap();
        let e = one.grow(20 << 20).unwrap_err();
        assert!(e.contains("share of the server's Wasm memory is 60 MiB"), "{e}");
        assert_eq!(budget.memory(), 50 << 20, "a refused growth takes nothing");
        two.grow(40 << 20).unwrap();
        let e = two.grow(20 << 20).unwrap_err();
        assert!(e.contains("budget of 100 MiB is in use"), "{e}");
        one.shrink(50 << 20);
        two.grow(20 << 20).unwrap();
        assert_eq!(budget.memory(), 60 << 20);
    }

    #[test]
    fn log_lines_are_rate_limited_and_the_drops_counted() {
        let rate = LogRate::new(3, None);
        let t0 = std::time::Instant::now();
        for _ in 0..3 {
            assert_eq!(rate.admit(t0), LogAdmission::Write { dropped: 0 });
        }
        assert_eq!(rate.admit(t0), LogAdmission::Drop);
        assert_eq!(rate.admit(t0), LogAdmission::Drop);
        // A third of a second later one line's worth has come back, and the drops are told.
        let later = t0 + std::time::Duration::from_millis(334);
        assert_eq!(rate.admit(later), LogAdmission::Write { dropped: 2 });
        assert_eq!(rate.admit(later), LogAdmission::Drop);
        // Never more than a second's worth at once.
        let much_later = t0 + std::time::Duration::from_secs(60);
        for _ in 0..3 {
            assert!(matches!(rate.admit(much_later), LogAdmission::Write { .. }));
        }
        assert_eq!(rate.admit(much_later), LogAdmission::Drop);
    }
}
