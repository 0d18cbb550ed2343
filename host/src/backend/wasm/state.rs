//! What a sandbox's store carries: WASI with no capabilities granted, the memory limiter, and the
//! batch being executed (which the host functions read and answer). Kept apart from the sandbox
//! itself so that the runtime, which links the host functions against this type, and the sandbox,
//! which drives a store of it, depend on it rather than on each other.
use std::sync::Arc;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::io_guard::IoGuard;
use crate::request::Job;
use crate::validate::IoSpec;

/// Caps a sandbox's linear memory and tables, remembering whether it refused a growth so that a
/// resulting trap can be reported as the memory limit it is.
pub struct Limiter {
    memory_limit: usize,
    pub(super) denied_memory: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            self.denied_memory = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// The batch being executed, visible to the host functions while `execute` runs.
pub struct ActiveBatch {
    pub jobs: Vec<Job>,
    /// Batch size of each request (first dimension, or 1), for output checks.
    pub batch_sizes: Vec<i64>,
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
}

impl WasiView for SandboxState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl SandboxState {
    /// A fresh store's state: `wasi` as the policy built it, memory capped at `memory_limit` bytes.
    pub fn new(wasi: WasiCtx, memory_limit: usize, label: Arc<str>) -> Self {
        SandboxState {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter { memory_limit, denied_memory: false },
            label,
            batch: None,
            may_block: true,
        }
    }

    /// The resource table as the guarded WASI I/O interfaces see it ([`IoGuard`]).
    pub fn io_guard(&mut self) -> IoGuard<'_> {
        IoGuard { table: &mut self.table, may_block: self.may_block }
    }
}
