//! A sandbox's calls in flight, by the handle its guest holds. Kept in the sandbox's state rather
//! than in the guest's resource table alone so that the host can cancel, when `execute` ends,
//! every call it left running, whatever handles the guest kept or leaked.
//!
//! Each call also holds host memory the guest does not see: its request's copy (queued on the
//! callee until it is served) or its answers (until the guest takes them). That is counted here,
//! from the start of a call until the guest drops it or takes its last answer, and together it may come to at most the sandbox's memory
//! limit: a plugin looping on `start` without waiting would otherwise grow the host's memory by
//! one copy of its inputs per call until its deadline, whatever its own limit.
use std::collections::HashMap;
use std::sync::Arc;

use super::super::bindings::nereus::backend::models::{CallError, CallErrorKind};
use super::call::{PendingCall, error};
use super::context::ModelCalls;

/// What a call counts besides its request's bytes: the host's own records of it (the core's
/// request and its job, the answer's channel, the pending call), rounded up. It bounds how many
/// calls with tiny requests one sandbox can hold.
pub const CALL_BYTES: u64 = 1024;

/// A call in flight and what it counts.
pub(super) struct Held {
    pub(super) call: PendingCall,
    bytes: u64,
}

/// A sandbox's calls in flight, by the handle the guest holds.
#[derive(Default)]
pub struct Calls {
    /// `None`: the model may call nothing (or this is not an instance's sandbox).
    pub(super) context: Option<Arc<ModelCalls>>,
    pub(super) pending: HashMap<u32, Held>,
    next_handle: u32,
    /// What the calls in `pending` count, together.
    held: u64,
}

impl Calls {
    pub fn allow(&mut self, context: Option<Arc<ModelCalls>>) {
        self.context = context;
    }

    /// Whether a call counting `bytes` (its request's, before [`CALL_BYTES`]) fits beside those
    /// in flight within `limit` (the sandbox's memory limit); the error to give the plugin when not.
    pub(super) fn admit(&self, bytes: u64, limit: u64, model: &str) -> Result<(), CallError> {
        let wanted = bytes.saturating_add(CALL_BYTES);
        if self.held.saturating_add(wanted) <= limit {
            return Ok(());
        }
        Err(error(
            CallErrorKind::Unavailable,
            format!(
                "a call to model '{model}' counting {wanted} bytes does not fit beside the {} calls in flight, \
                 which count {} bytes of the calling sandbox's memory limit of {limit} bytes: wait for a call \
                 (or drop it) before starting another",
                self.pending.len(),
                self.held
            ),
        ))
    }

    /// Keeps `call`, counting `bytes` (as [`Calls::admit`] took them); its handle.
    pub(super) fn insert(&mut self, call: PendingCall, bytes: u64) -> u32 {
        // A handle still held after 2^32 calls of one `execute` is skipped, not replaced.
        while self.pending.contains_key(&self.next_handle) {
            self.next_handle = self.next_handle.wrapping_add(1);
        }
        let handle = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1);
        let bytes = bytes.saturating_add(CALL_BYTES);
        self.held = self.held.saturating_add(bytes);
        self.pending.insert(handle, Held { call, bytes });
        handle
    }

    /// Gives back what call `handle` counted once the guest has taken its every answer (the host
    /// then holds nothing of it, though the guest may keep the handle).
    pub(super) fn settle(&mut self, handle: u32) {
        if let Some(held) = self.pending.get_mut(&handle)
            && held.call.is_spent()
        {
            self.held -= std::mem::take(&mut held.bytes);
        }
    }

    /// Ends call `handle` (cancelling it if it is still running), giving back what it counted.
    pub(super) fn remove(&mut self, handle: u32) {
        if let Some(held) = self.pending.remove(&handle) {
            self.held -= held.bytes;
        }
    }

    /// Cancels every call still in flight (dropping its receiver is what a callee sees as
    /// cancellation): at the end of each `execute`, however it ended.
    pub fn cancel_all(&mut self) {
        self.pending.clear();
        self.held = 0;
    }
}
