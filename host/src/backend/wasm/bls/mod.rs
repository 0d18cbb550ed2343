//! The host side of `nereus:backend/models` (business logic scripting): a plugin running inference
//! on other models from inside `execute`. This module is the WIT surface — it checks what a call
//! may do (the caller's policy, the chain, the parent request) and keeps the sandbox's calls in
//! flight; [`call`] starts and waits for one call through the core's narrow interface
//! ([`crate::model::ModelResolver`] and the model version's `infer`), never the frontends.
//!
//! Why the calls live in the sandbox's state and not in the guest's resource table alone: when
//! `execute` ends — returned, trapped or past its deadline — every call it left running is dropped
//! by [`calls::Calls::cancel_all`], which cancels it, whatever handles the guest kept.
mod call;
pub mod calls;
pub mod context;
pub mod lent;

use wasmtime::component::Resource;

use super::bindings::nereus::backend::models::{
    self, CallError, CallErrorKind, InferenceRequest, InferenceResponse, PendingCall as PendingCallHandle,
};
use super::state::SandboxState;
use call::{Next, error};

impl SandboxState {
    /// Checks and starts a call on behalf of request `parent` of the batch; `bytes` is what its
    /// request counted as it was copied out of the guest (`lent.rs`).
    fn start_call(&mut self, parent: u32, request: InferenceRequest, bytes: u64) -> Result<u32, CallError> {
        let Some(context) = self.calls.context.clone() else {
            return Err(error(
                CallErrorKind::NotAllowed,
                format!(
                    "{} may not call other models: its configuration lists none in sandbox.callable_models",
                    self.label
                ),
            ));
        };
        if !context.callable.allows(&request.model) {
            return Err(error(
                CallErrorKind::NotAllowed,
                format!(
                    "model '{}' may not call model '{}': sandbox.callable_models does not list it",
                    context.model, request.model
                ),
            ));
        }
        if !self.may_block {
            // Not reached: a model that may call others never runs inline (see `may_run_inline`).
            return Err(error(CallErrorKind::Unavailable, "a call cannot wait on an I/O thread"));
        }
        let batch = self.batch.as_ref().ok_or_else(|| error(CallErrorKind::Unsupported, "called outside execute"))?;
        let job = batch.jobs.get(parent as usize).ok_or_else(|| {
            error(CallErrorKind::InvalidArgument, format!("request index {parent} is not in the batch"))
        })?;
        if job.sender.is_complete() {
            return Err(error(
                CallErrorKind::InvalidArgument,
                format!("request {parent} is already complete: calls are made on behalf of a request in progress"),
            ));
        }
        self.calls.admit(bytes, self.limiter.memory_limit() as u64, &request.model)?;
        let started = call::start(&context, job, parent, request, self.deadline)?;
        Ok(self.calls.insert(started, bytes))
    }

    /// `pending-call.start`, its request counted at `bytes`.
    pub(super) fn start_counted(
        &mut self,
        parent: u32,
        request: InferenceRequest,
        bytes: u64,
    ) -> Result<Resource<PendingCallHandle>, CallError> {
        self.start_call(parent, request, bytes).map(Resource::new_own)
    }

    /// `models.infer`, its request counted at `bytes`: a call started and waited for.
    pub(super) fn infer_counted(
        &mut self,
        parent: u32,
        request: InferenceRequest,
        bytes: u64,
    ) -> Result<InferenceResponse, CallError> {
        let handle = self.start_call(parent, request, bytes)?;
        let answer = self.next_answer(handle, true);
        self.calls.remove(handle);
        match answer? {
            Next::Response(response) => Ok(response),
            Next::Done => Err(error(CallErrorKind::Internal, "the call completed without a response")),
        }
    }

    /// Waits on call `handle` for its next answer, ending early when its parent is cancelled.
    fn next_answer(&mut self, handle: u32, unary_only: bool) -> Result<Next, CallError> {
        let SandboxState { calls, batch, .. } = self;
        let pending = &mut calls
            .pending
            .get_mut(&handle)
            .ok_or_else(|| error(CallErrorKind::Unsupported, "the call has ended: its execute returned"))?
            .call;
        if unary_only && pending.is_stream() {
            return Err(error(
                CallErrorKind::Unsupported,
                format!("model '{}' is decoupled: read its responses with `next`", pending.model()),
            ));
        }
        let parent = pending.parent() as usize;
        let cancelled = || batch.as_ref().and_then(|b| b.jobs.get(parent)).is_some_and(|j| j.sender.is_cancelled());
        let answer = pending.next(&cancelled);
        calls.settle(handle);
        answer
    }
}

/// What the generated `start` and `infer` would answer, were they linked.
fn not_linked() -> CallError {
    error(CallErrorKind::Internal, "calls are the host's own (lent.rs); the generated functions are not linked")
}

impl models::HostPendingCall for SandboxState {
    /// Not called: `lent.rs` defines `start` over this, counting the request before it is copied
    /// out of the sandbox's memory (see there); kept as the generated bindings require it.
    fn start(&mut self, _parent: u32, _request: InferenceRequest) -> Result<Resource<PendingCallHandle>, CallError> {
        Err(not_linked())
    }

    fn wait(&mut self, call: Resource<PendingCallHandle>) -> Result<InferenceResponse, CallError> {
        match self.next_answer(call.rep(), true)? {
            Next::Response(response) => Ok(response),
            Next::Done => Err(error(CallErrorKind::Unsupported, "the call's response was already taken")),
        }
    }

    fn next(&mut self, call: Resource<PendingCallHandle>) -> Option<Result<InferenceResponse, CallError>> {
        match self.next_answer(call.rep(), false) {
            Ok(Next::Response(response)) => Some(Ok(response)),
            Ok(Next::Done) => None,
            Err(e) => Some(Err(e)),
        }
    }

    fn is_ready(&mut self, call: Resource<PendingCallHandle>) -> bool {
        self.calls.pending.get_mut(&call.rep()).is_some_and(|held| held.call.is_ready())
    }

    /// The guest let go of the call: cancel it if it is still running.
    fn drop(&mut self, call: Resource<PendingCallHandle>) -> wasmtime::Result<()> {
        self.calls.remove(call.rep());
        Ok(())
    }
}

impl models::Host for SandboxState {
    /// Not called: `lent.rs` defines `infer` over this (see `start`).
    fn infer(&mut self, _parent: u32, _request: InferenceRequest) -> Result<InferenceResponse, CallError> {
        Err(not_linked())
    }
}
