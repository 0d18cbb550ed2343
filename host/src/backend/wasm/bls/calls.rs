//! A sandbox's calls in flight, by the handle its guest holds. Kept in the sandbox's state rather
//! than in the guest's resource table alone so that the host can cancel, when `execute` ends,
//! every call it left running, whatever handles the guest kept or leaked.
use std::collections::HashMap;
use std::sync::Arc;

use super::call::PendingCall;
use super::context::ModelCalls;

/// A sandbox's calls in flight, by the handle the guest holds.
#[derive(Default)]
pub struct Calls {
    /// `None`: the model may call nothing (or this is not an instance's sandbox).
    pub(super) context: Option<Arc<ModelCalls>>,
    pub(super) pending: HashMap<u32, PendingCall>,
    pub(super) next_handle: u32,
}

impl Calls {
    pub fn allow(&mut self, context: Option<Arc<ModelCalls>>) {
        self.context = context;
    }

    /// Cancels every call still in flight (dropping its receiver is what a callee sees as
    /// cancellation): at the end of each `execute`, however it ended.
    pub fn cancel_all(&mut self) {
        self.pending.clear();
    }
}
