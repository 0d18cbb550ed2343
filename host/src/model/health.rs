//! Whether a loaded model version can serve. Shared by the version and its backend's instances: an
//! instance that cannot be rebuilt after a fault marks the version UNAVAILABLE with the reason.
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// Whether a loaded version can serve; an instance that cannot be rebuilt after a fault makes it
/// UNAVAILABLE with the reason.
#[derive(Default)]
pub struct Health {
    unavailable: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl Health {
    pub fn is_ready(&self) -> bool {
        !self.unavailable.load(Ordering::Acquire)
    }
    pub fn set_unavailable(&self, reason: String) {
        *self.reason.lock() = Some(reason);
        self.unavailable.store(true, Ordering::Release);
    }
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().clone()
    }
}
