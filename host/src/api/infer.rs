//! Running a decoded inference request to its answer, the same for both protocols.
use super::classification::{self, ClassOutputs};
use crate::error::InferError;
use crate::request::{InferenceRequest, InferenceResponse};
use crate::server::Server;
use crate::shm::{OutputSpan, SharedMemory, ShmData, ShmInputs, ShmPlace};
use crate::tensor::DataType;
use crate::trace::FrontendEvent;
use std::time::Instant;

/// An output the client placed in shared memory: its place as the request gave it (the response
/// names it) and where it lies, resolved when the request arrived (holding the region).
pub struct ShmOutput {
    pub name: String,
    pub place: ShmPlace,
    pub span: OutputSpan,
}

impl std::fmt::Debug for ShmOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmOutput").field("name", &self.name).field("place", &self.place).finish()
    }
}

/// Outputs the client placed in shared memory.
pub type ShmOutputs = Vec<ShmOutput>;

/// Checks where `request`'s output `name` goes in shared memory as the request arrives, lends
/// that place to the backend (a GPU instance or a sandbox writes it there itself), and returns it
/// for the frontend to write whatever the backend did not.
pub fn place_output(
    shm: &SharedMemory,
    request: &mut InferenceRequest,
    name: &str,
    place: ShmPlace,
) -> Result<ShmOutput, InferError> {
    let span = shm.check(&place)?;
    match &span {
        OutputSpan::Device(span) => request.device_outputs.push(name.to_string(), span.clone()),
        OutputSpan::Host(span) => request.host_outputs.push((name.to_string(), span.clone())),
    }
    Ok(ShmOutput { name: name.to_string(), place, span })
}

/// Reads input `name`'s bytes from the shared-memory place the client gave (`place`), for a request
/// to `model` (a lease on bytes read in place goes to `leases`). A system region the server could
/// not map is copied out of, `place.byte_size` bytes, a size the client chose: the copy is made only
/// once that size agrees with the input's shape and datatype (`elements` of them), with the message
/// validation would give (a one-element input naming a terabyte would otherwise cost the server a
/// terabyte before it was refused). Where the bytes are read in place, validation checks the size
/// later, in its own order. A BYTES input is counted once copied; the copy's allocation is fallible.
pub fn read_input(
    shm: &SharedMemory,
    leases: &mut ShmInputs,
    model: &str,
    (name, datatype, elements): (&str, DataType, u64),
    place: &ShmPlace,
) -> Result<ShmData, InferError> {
    let before_copy = || match datatype.element_size() {
        Some(size) => crate::validate::check_fixed_len(name, Some(model), elements, size, place.byte_size)
            .map_err(InferError::invalid),
        None => Ok(()),
    };
    shm.read(&place.region, place.offset, place.byte_size, leases, before_copy)
}

/// Runs a request on a model that answers once and waits for the answer; outputs placed in
/// shared memory are written there before it returns (the frontend then sends them as references),
/// and outputs asked for as classes are replaced by them.
/// `endpoint` names the caller in the error a decoupled model answers with, as Triton words it.
pub async fn run(
    server: &Server,
    mut request: crate::request::InferenceRequest,
    shm_outputs: &ShmOutputs,
    classes: &ClassOutputs,
    endpoint: &str,
) -> Result<InferenceResponse, InferError> {
    let trace = request.trace.clone();
    // Checked once the answer is in, when the backend is done with the inputs read in place.
    let shm_inputs = std::mem::take(&mut request.shm_inputs);
    let model = server.model_for(&mut request)?;
    let receiver = model.infer(request, endpoint, crate::scheduler::Caller::IoThread)?;
    // Weak: a version being unloaded waits for the strong references that are between finding it
    // and queueing on it, not for every request waiting for its answer.
    let model = std::sync::Arc::downgrade(&model);
    let mut waiting = Waiting { server, model, receiver: Some(receiver), answered: false };
    let response = waiting.answer().await?;
    if let Some(trace) = &trace {
        trace.capture(FrontendEvent::InferResponseComplete, Instant::now());
    }
    let mut response = response?;
    shm_inputs.check()?;
    write_shm_outputs(&response, shm_outputs)?;
    if !classes.is_empty() {
        let model = server.version(&response.model_name, Some(response.model_version))?;
        classification::apply(&mut response, classes, &model.io)?;
    }
    Ok(response)
}

/// A frontend waiting for a request's answer; dropped unanswered when the client goes away (the
/// frontend drops the call), which the server counts, and which answers the request at once if
/// it still waits in its model's queue.
struct Waiting<'a> {
    server: &'a Server,
    model: std::sync::Weak<crate::model::ModelVersion>,
    receiver: Option<crate::request::ResponseReceiver>,
    answered: bool,
}

impl Waiting<'_> {
    async fn answer(&mut self) -> Result<Result<InferenceResponse, InferError>, InferError> {
        let Some(receiver) = self.receiver.as_mut() else {
            return Err(InferError::internal("the request was dropped without a response"));
        };
        let outcome = receiver.await.map_err(|_| InferError::internal("the request was dropped without a response"));
        self.answered = true;
        outcome
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.server.count_abandoned();
            // The receiver goes first: the request's sender then reads as cancelled.
            drop(self.receiver.take());
            if let Some(model) = self.model.upgrade() {
                model.drop_cancelled();
            }
        }
    }
}

/// Writes the outputs of `response` that the client placed in shared memory (one response of a
/// stream, or a whole answer), but those the backend wrote there already.
pub fn write_shm_outputs(response: &InferenceResponse, shm_outputs: &ShmOutputs) -> Result<(), InferError> {
    for output in shm_outputs {
        if response.in_place.contains(&output.name) {
            continue;
        }
        if let Some(t) = response.outputs.iter().find(|t| t.name == output.name) {
            output.span.write(&t.data)?;
        }
    }
    Ok(())
}
