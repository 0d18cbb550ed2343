//! Test-only hooks, under `/nereus/test/` when the server runs with `--test-hooks`: per model
//! version, a gate that holds its executions before they start (so tests can queue work
//! deterministically instead of racing the clock), and switches that make its instances' rebuilds
//! after a fault fail, or find the server's Wasm memory budget held (to test what follows).
//!
//! A version holds its hooks as `Option<Arc<TestHooks>>`, `Some` only with `--test-hooks`: without
//! it, the production types carry no gate and no switch, and an execution checks nothing here.
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Condvar, Mutex};

/// One model version's test hooks.
#[derive(Default)]
pub struct TestHooks {
    /// Set once a test first closes the gate, and never cleared: until then executions pass
    /// without the gate's lock; from then on the version may hold them, so it runs nothing inline.
    gate_engaged: AtomicBool,
    gate_closed: Mutex<bool>,
    gate: Condvar,
    refuse_rebuilds: AtomicBool,
    hold_budget_at_rebuilds: AtomicBool,
}

impl TestHooks {
    /// The reason an instance could not be rebuilt when a test refused it.
    pub const REBUILD_REFUSED: &str = "the rebuild was refused by a test hook";

    /// Holds the calling execution while the gate is closed.
    pub fn pass_gate(&self) {
        if !self.gate_engaged.load(Ordering::Acquire) {
            return;
        }
        let mut closed = self.gate_closed.lock();
        while *closed {
            self.gate.wait(&mut closed);
        }
    }

    /// Opens or closes the gate.
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

    /// Whether a test has ever closed the gate: executions may then block in
    /// [`pass_gate`](Self::pass_gate), which must never happen on an I/O thread.
    pub fn gate_engaged(&self) -> bool {
        self.gate_engaged.load(Ordering::Acquire)
    }

    /// Makes every later rebuild of the version's instances fail.
    pub fn refuse_rebuilds(&self) {
        self.refuse_rebuilds.store(true, Ordering::Release);
    }

    pub fn rebuilds_refused(&self) -> bool {
        self.refuse_rebuilds.load(Ordering::Acquire)
    }

    /// Makes every later rebuild of the version's instances after a fault find the rest of the
    /// server's Wasm memory budget held (for the rebuild's duration), as other sandboxes could.
    pub fn hold_budget_at_rebuilds(&self) {
        self.hold_budget_at_rebuilds.store(true, Ordering::Release);
    }

    pub fn budget_held_at_rebuilds(&self) -> bool {
        self.hold_budget_at_rebuilds.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_gate_holds_executions_until_opened() {
        let hooks = Arc::new(TestHooks::default());
        hooks.pass_gate();
        assert!(!hooks.gate_engaged());
        hooks.set_gate(false);
        assert!(hooks.gate_engaged());
        let (tx, rx) = std::sync::mpsc::channel();
        let held = {
            let hooks = hooks.clone();
            std::thread::spawn(move || {
                hooks.pass_gate();
                tx.send(()).unwrap();
            })
        };
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "held at the closed gate");
        hooks.set_gate(true);
        rx.recv_timeout(Duration::from_secs(5)).expect("let through once open");
        held.join().unwrap();
        assert!(hooks.gate_engaged(), "engaged for good");
    }
}
