//! What a sandbox's store carries: WASI with no capabilities granted, the memory limiter, and the
//! batch being executed (which the host functions read and answer). Kept apart from the sandbox
//! itself so that the runtime, which links the host functions against this type, and the sandbox,
//! which drives a store of it, depend on it rather than on each other.
use std::sync::Arc;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bls::calls::Calls;
use super::budget::ModelMeter;
use super::io_guard::IoGuard;
use crate::request::Job;
use crate::validate::IoSpec;

/// Caps a sandbox's linear memory and tables, remembering why it refused a growth so that a
/// resulting trap can be reported as the limit it is, and counts the linear memory it lets the
/// sandbox have on its model version's [`ModelMeter`] (given back when the store goes).
pub struct Limiter {
    memory_limit: usize,
    /// Why the last growth was refused, if one was.
    pub(super) denied: Option<MemoryDenied>,
    pub(super) meter: ModelMeter,
    /// Linear memory this store holds, in bytes, as counted on `meter`.
    pub(super) in_use: usize,
    /// The growth just counted, taken back if wasmtime then fails it.
    last_growth: usize,
}

/// wasmtime's error for a growth past what a memory's type can represent, which it reports to
/// `memory_grow_failed` without having offered it to `memory_growing`.
const UNREPRESENTABLE_GROWTH: &str = "memory growth exceeds memory type's limits";

/// Why a sandbox's memory could not grow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryDenied {
    /// Past the model's `sandbox.memory_limit_mb`.
    Limit,
    /// Past the operator's budget (the reason says which).
    Budget(String),
}

impl Limiter {
    /// The most linear memory the sandbox may have, all its memories together, in bytes
    /// (`sandbox.memory_limit_mb`).
    pub(super) fn memory_limit(&self) -> usize {
        self.memory_limit
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        // The limit is the sandbox's, all its memories together (a component may define several;
        // the pool allows four): held per memory, four memories would have held four times it.
        // Every memory's creation is offered here first (from 0), so `in_use` is all of them.
        let growth = desired.saturating_sub(current);
        if self.in_use.saturating_add(growth) > self.memory_limit {
            self.denied = Some(MemoryDenied::Limit);
            return Ok(false);
        }
        // Counted even beyond the memory's own maximum: wasmtime then fails the growth and says so
        // (`memory_grow_failed`), which takes back exactly this count. Leaving such a growth
        // uncounted let that call take back the growth before it, which had happened: a guest
        // alternating a small growth and one past its maximum drove the count to zero while its
        // memory grew, out of the operator's budget.
        if let Err(why) = self.meter.grow(growth) {
            self.denied = Some(MemoryDenied::Budget(why));
            return Ok(false);
        }
        self.last_growth = growth;
        self.in_use += growth;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        // A growth the memory's type cannot represent (past 4 GiB for a 32-bit memory) fails
        // before the limiter is asked (wasmtime 48, `vm/memory.rs`): nothing was counted for it,
        // and `last_growth` is then the previous growth, which happened.
        if error.to_string() != UNREPRESENTABLE_GROWTH {
            self.in_use -= self.last_growth;
            self.meter.shrink(self.last_growth);
        }
        self.last_growth = 0;
        Ok(())
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

impl Drop for Limiter {
    fn drop(&mut self) {
        self.meter.shrink(self.in_use);
    }
}

/// The batch being executed, visible to the host functions while `execute` runs.
pub struct ActiveBatch {
    pub jobs: Vec<Job>,
    /// Batch size of each request (first dimension, or 1), for output checks.
    pub batch_sizes: Vec<i64>,
    /// The guest was lent the jobs as one request, index 0 (see `merge`): its response is split
    /// among them.
    pub merged: bool,
    pub io: Arc<IoSpec>,
    pub model_version: i64,
    pub max_output_bytes: u64,
    /// Whether the model may send several responses per request.
    pub decoupled: bool,
    /// Responses each request may receive, and how many each has had (decoupled models only; empty
    /// otherwise, where one final response is all a request can get).
    pub max_responses: u64,
    pub responses: Vec<u64>,
}

/// What the store carries: WASI (with no capabilities granted), the limiter, and the batch.
pub struct SandboxState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) limiter: Limiter,
    /// "model 'm' instance 'm_0'" — for logs and errors.
    pub(super) label: Arc<str>,
    pub(super) batch: Option<ActiveBatch>,
    /// Whether WASI calls may block now: not while executing inline on an I/O thread.
    pub(super) may_block: bool,
    /// The deadline of the call in progress, which a blocking WASI call observes (see `io_guard`).
    pub(super) deadline: Option<std::time::Instant>,
    /// What the deadline of the call in progress is, as a fault names it.
    pub(super) armed: Armed,
    /// Whether a wait of the call in progress has ended early because its requests were cancelled.
    pub(super) cancel_told: bool,
    /// The calls to other models `execute` has in flight, and whether it may make any.
    pub(super) calls: Calls,
}

impl WasiView for SandboxState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl SandboxState {
    /// A fresh store's state: `wasi` as the policy built it, memory capped at `memory_limit` bytes
    /// and counted on `meter`.
    pub fn new(wasi: WasiCtx, memory_limit: usize, meter: ModelMeter, label: Arc<str>) -> Self {
        SandboxState {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter { memory_limit, denied: None, meter, in_use: 0, last_growth: 0 },
            label,
            batch: None,
            may_block: true,
            deadline: None,
            armed: Armed::Lifecycle(std::time::Duration::ZERO),
            cancel_told: false,
            calls: Calls::default(),
        }
    }

    /// The resource table as the guarded WASI I/O interfaces see it ([`IoGuard`]).
    pub fn io_guard(&mut self) -> IoGuard<'_> {
        IoGuard {
            table: &mut self.table,
            may_block: self.may_block,
            deadline: self.deadline,
            jobs: self.batch.as_ref().map(|b| b.jobs.as_slice()),
            cancel_told: &mut self.cancel_told,
        }
    }
}

/// The deadline a call runs under: an execution's (`sandbox.execution_timeout_ms`) or a lifecycle
/// call's (`sandbox.load_timeout_ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Armed {
    Execution(std::time::Duration),
    Lifecycle(std::time::Duration),
}

impl Armed {
    pub fn timeout(self) -> std::time::Duration {
        match self {
            Armed::Execution(t) | Armed::Lifecycle(t) => t,
        }
    }

    /// How a fault at this deadline is described.
    pub fn describe(self) -> String {
        match self {
            Armed::Execution(t) => format!("exceeded its execution deadline of {} ms", t.as_millis()),
            Armed::Lifecycle(t) => {
                format!("exceeded its initialization deadline of {} ms (sandbox.load_timeout_ms)", t.as_millis())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 64 << 10;

    fn limiter() -> Limiter {
        Limiter { memory_limit: 64 * PAGE, denied: None, meter: ModelMeter::default(), in_use: 0, last_growth: 0 }
    }

    #[test]
    fn a_growth_past_the_memory_s_maximum_takes_back_only_itself() {
        let mut l = limiter();
        assert!(l.memory_growing(0, PAGE, Some(4 * PAGE)).unwrap());
        assert!(l.memory_growing(PAGE, 2 * PAGE, Some(4 * PAGE)).unwrap());
        for _ in 0..3 {
            // Past the maximum: counted, then failed by wasmtime, which takes the count back.
            assert!(l.memory_growing(2 * PAGE, 8 * PAGE, Some(4 * PAGE)).unwrap());
            l.memory_grow_failed(wasmtime::format_err!("Memory maximum size exceeded")).unwrap();
            assert_eq!(l.in_use, 2 * PAGE);
        }
    }

    #[test]
    fn a_growth_the_memory_type_cannot_represent_takes_back_nothing() {
        let mut l = limiter();
        assert!(l.memory_growing(0, 3 * PAGE, None).unwrap());
        // Offered to no limiter, failed at once: the growth before it still happened.
        l.memory_grow_failed(wasmtime::format_err!("{UNREPRESENTABLE_GROWTH}")).unwrap();
        assert_eq!(l.in_use, 3 * PAGE);
        assert!(!l.memory_growing(3 * PAGE, 65 * PAGE, None).unwrap(), "past the model's limit");
        assert_eq!((l.in_use, l.denied.clone()), (3 * PAGE, Some(MemoryDenied::Limit)));
    }

    #[test]
    fn the_limit_holds_for_all_the_sandbox_s_memories_together() {
        let mut l = limiter();
        assert!(l.memory_growing(0, 40 * PAGE, None).unwrap(), "the first memory");
        assert!(l.memory_growing(0, 20 * PAGE, None).unwrap(), "a second memory, within the limit");
        assert!(!l.memory_growing(0, 40 * PAGE, None).unwrap(), "a third, each within the limit, all past it");
        assert!(!l.memory_growing(20 * PAGE, 30 * PAGE, None).unwrap(), "the second, grown past it");
        assert_eq!((l.in_use, l.denied.clone()), (60 * PAGE, Some(MemoryDenied::Limit)));
        assert!(l.memory_growing(20 * PAGE, 24 * PAGE, None).unwrap(), "the second, grown to the limit");
        assert_eq!(l.in_use, 64 * PAGE);
    }
}
