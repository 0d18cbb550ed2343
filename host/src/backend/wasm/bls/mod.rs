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
use call::{Next, PendingCall, error};

impl SandboxState {
    /// Checks and starts a call on behalf of request `parent` of the batch.
    fn start_call(&mut self, parent: u32, request: InferenceRequest) -> Result<u32, CallError> {
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
        let started = call::start(&context, job, parent, request, self.deadline)?;
        let handle = self.calls.next_handle;
        self.calls.next_handle = self.calls.next_handle.wrapping_add(1);
        self.calls.pending.insert(handle, started);
        Ok(handle)
    }

    /// Waits on call `handle` for its next answer, ending early when its parent is cancelled.
    fn next_answer(&mut self, handle: u32, unary_only: bool) -> Result<Next, CallError> {
        let SandboxState { calls, batch, .. } = self;
        let pending = calls
            .pending
            .get_mut(&handle)
            .ok_or_else(|| error(CallErrorKind::Unsupported, "the call has ended: its execute returned"))?;
        if unary_only && pending.is_stream() {
            return Err(error(
                CallErrorKind::Unsupported,
                format!("model '{}' is decoupled: read its responses with `next`", pending.model()),
            ));
        }
        let parent = pending.parent() as usize;
        let cancelled = || batch.as_ref().and_then(|b| b.jobs.get(parent)).is_some_and(|j| j.sender.is_cancelled());
        pending.next(&cancelled)
    }
}

impl models::HostPendingCall for SandboxState {
    fn start(&mut self, parent: u32, request: InferenceRequest) -> Result<Resource<PendingCallHandle>, CallError> {
        self.start_call(parent, request).map(Resource::new_own)
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
        self.calls.pending.get_mut(&call.rep()).is_some_and(PendingCall::is_ready)
    }

    /// The guest let go of the call: cancel it if it is still running.
    fn drop(&mut self, call: Resource<PendingCallHandle>) -> wasmtime::Result<()> {
        self.calls.pending.remove(&call.rep());
        Ok(())
    }
}

impl models::Host for SandboxState {
    fn infer(&mut self, parent: u32, request: InferenceRequest) -> Result<InferenceResponse, CallError> {
        let handle = self.start_call(parent, request)?;
        let answer = self.next_answer(handle, true);
        self.calls.pending.remove(&handle);
        match answer? {
            Next::Response(response) => Ok(response),
            Next::Done => Err(error(CallErrorKind::Internal, "the call completed without a response")),
        }
    }
}
