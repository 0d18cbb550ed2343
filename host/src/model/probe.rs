//! Counters of a model version's executions, read by the test hooks' `executions` endpoint.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Counts executions in flight (the host's proof that instances run concurrently), executions
/// completed, and those that ran inline or on a calling plugin's thread. Cheap telemetry, kept
/// with or without test hooks (the gate that holds executions is in [`crate::test_hooks`]).
#[derive(Default)]
pub struct ExecutionProbe {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    executions: AtomicU64,
    /// Executions that ran inline, on an I/O thread.
    inline: AtomicU64,
    /// Executions that ran on the thread of a caller waiting for them (a plugin's call).
    on_caller: AtomicU64,
}

impl ExecutionProbe {
    pub fn enter(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.max_in_flight.fetch_max(now, Ordering::AcqRel);
    }

    pub fn exit(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.executions.fetch_add(1, Ordering::AcqRel);
    }

    /// Counts an execution that runs inline, on an I/O thread.
    pub fn count_inline(&self) {
        self.inline.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an execution that runs on the thread of the plugin that called the model.
    pub fn count_on_caller(&self) {
        self.on_caller.fetch_add(1, Ordering::Relaxed);
    }

    /// Executions that ran on a calling plugin's thread so far.
    pub fn on_caller_executions(&self) -> u64 {
        self.on_caller.load(Ordering::Relaxed)
    }

    /// Executions that ran inline so far.
    pub fn inline_executions(&self) -> u64 {
        self.inline.load(Ordering::Relaxed)
    }

    /// (executions in flight now, the most ever in flight at once, executions completed)
    pub fn snapshot(&self) -> (usize, usize, u64) {
        (
            self.in_flight.load(Ordering::Acquire),
            self.max_in_flight.load(Ordering::Acquire),
            self.executions.load(Ordering::Acquire),
        )
    }
}
