//! Counters of a model version's executions, read by the test hooks (and the gate they close).
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex};

/// Counts executions in flight (the host's proof that instances run concurrently) and, when test
/// hooks are on, holds instances at a gate before they execute, so tests can queue work
/// deterministically instead of racing the clock.
#[derive(Default)]
pub struct ExecutionProbe {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    executions: AtomicU64,
    /// Executions that ran inline, on an I/O thread.
    inline: AtomicU64,
    /// Fast path: executions only take the gate's lock while a test has closed it.
    gate_engaged: AtomicBool,
    gate_closed: Mutex<bool>,
    gate: Condvar,
}

impl ExecutionProbe {
    pub fn enter(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.max_in_flight.fetch_max(now, Ordering::AcqRel);
        if !self.gate_engaged.load(Ordering::Acquire) {
            return;
        }
        let mut closed = self.gate_closed.lock();
        while *closed {
            self.gate.wait(&mut closed);
        }
    }

    pub fn exit(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.executions.fetch_add(1, Ordering::AcqRel);
    }

    pub fn set_gate(&self, open: bool) {
        let mut closed = self.gate_closed.lock();
        *closed = !open;
        if !open {
            self.gate_engaged.store(true, Ordering::Release);
        }
        drop(closed);
        if open {
            self.gate.notify_all();
        }
    }

    /// Counts an execution that runs inline, on an I/O thread.
    pub fn count_inline(&self) {
        self.inline.fetch_add(1, Ordering::Relaxed);
    }

    /// Executions that ran inline so far.
    pub fn inline_executions(&self) -> u64 {
        self.inline.load(Ordering::Relaxed)
    }

    /// Whether a test has ever closed the gate: executions may then block in [`enter`](Self::enter),
    /// which must never happen on an I/O thread.
    pub fn gate_engaged(&self) -> bool {
        self.gate_engaged.load(Ordering::Acquire)
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
