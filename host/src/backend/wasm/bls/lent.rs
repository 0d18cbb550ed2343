//! `models.infer` and `pending-call.start` as the host defines them: a call's request is counted
//! before it is copied out of the guest's memory.
//!
//! The generated bindings lift a request whole, every string and list into a buffer of the host's,
//! before any check of the host's runs, the caller's permission to call included. The plugin
//! decides what that costs: the same 100 MiB of its memory named as the data of 1,000 inputs is
//! 100 GB of the host's memory. Here the request is lifted as handles on the guest's memory
//! (`WasmStr`, `WasmList`), and each string and list is counted before it is copied; a request
//! that comes to more than the sandbox's memory limit fails with `invalid-argument`, copying no
//! more. A plugin cannot hold more than its memory limit without naming the same bytes again, so
//! no honest call is refused (every entry of a list counts its own size in the guest's memory too,
//! which an honest list also occupies). The checked request then goes to the sandbox's calls with
//! what it counted, which the call holds while it is in flight (`calls.rs`). Defined over the
//! generated functions in the linker, as `lift.rs` defines `send-response`.
use wasmtime::StoreContextMut;
use wasmtime::component::{ComponentType, Lift, Linker, Resource, WasmList, WasmStr};

use super::super::bindings::nereus::backend::models::{
    CallError, CallErrorKind, InferenceRequest, InferenceResponse, PendingCall as PendingCallHandle,
};
use super::super::bindings::{CorrelationId, SequenceFlags, Tensor};
use super::super::lift::{LentParameter, LentTensor};
use super::super::state::SandboxState;
use super::call::error;

/// The interface of the two functions, as the package versions it (components built against an
/// older 1.x with `models` import it under their version, which wasmtime matches to this one).
const MODELS_INTERFACE: &str = "nereus:backend/models@1.2.0";

/// What each entry of a list counts besides its strings and lists: its own place in the guest's
/// memory (a tensor's is 28 bytes, a parameter's 24, a string's 8), rounded up.
const ENTRY_BYTES: u64 = 32;

/// WIT's `correlation-id`, its text left in the guest's memory.
#[derive(ComponentType, Lift)]
#[component(variant)]
enum LentCorrelationId {
    #[component(name = "none")]
    None,
    #[component(name = "numeric")]
    Numeric(u64),
    #[component(name = "text")]
    Text(WasmStr),
}

/// WIT's `inference-request`, left in the guest's memory.
#[derive(ComponentType, Lift)]
#[component(record)]
struct LentRequest {
    model: WasmStr,
    version: i64,
    inputs: WasmList<LentTensor>,
    #[component(name = "requested-outputs")]
    requested_outputs: WasmList<WasmStr>,
    parameters: WasmList<LentParameter>,
    #[component(name = "correlation-id")]
    correlation_id: LentCorrelationId,
    flags: SequenceFlags,
    #[component(name = "timeout-ms")]
    timeout_ms: u64,
}

/// Defines `infer` and `[static]pending-call.start` over the generated bindings' (added to
/// `linker` before this).
pub fn add_to_linker(linker: &mut Linker<SandboxState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let defined = define(linker);
    linker.allow_shadowing(false);
    defined
}

fn define(linker: &mut Linker<SandboxState>) -> wasmtime::Result<()> {
    let mut instance = linker.instance(MODELS_INTERFACE)?;
    instance.func_wrap(
        "infer",
        |mut store: StoreContextMut<'_, SandboxState>, (parent, request): (u32, LentRequest)| {
            let answer: Result<InferenceResponse, CallError> = match lift(&mut store, request)? {
                Ok((request, bytes)) => store.data_mut().infer_counted(parent, request, bytes),
                Err(refused) => Err(refused),
            };
            Ok((answer,))
        },
    )?;
    instance.func_wrap(
        "[static]pending-call.start",
        |mut store: StoreContextMut<'_, SandboxState>, (parent, request): (u32, LentRequest)| {
            let started: Result<Resource<PendingCallHandle>, CallError> = match lift(&mut store, request)? {
                Ok((request, bytes)) => store.data_mut().start_counted(parent, request, bytes),
                Err(refused) => Err(refused),
            };
            Ok((started,))
        },
    )?;
    Ok(())
}

/// Counts what the plugin has said so far against what its memory could hold.
struct Budget {
    limit: u64,
    total: u64,
}

impl Budget {
    /// Adds `bytes`; an error once the total passes the limit (copy nothing more).
    fn take(&mut self, bytes: u64, model: &str) -> Result<(), CallError> {
        self.total = self.total.saturating_add(bytes);
        if self.total <= self.limit {
            return Ok(());
        }
        Err(error(
            CallErrorKind::InvalidArgument,
            format!(
                "the request to model '{model}' comes to {} bytes or more, past the calling sandbox's memory \
                 limit of {} bytes: it names the same memory more than once",
                self.total, self.limit
            ),
        ))
    }
}

/// The request out of the guest's memory as the generated bindings would have given it, with what
/// it counted, or the call's error when it does not fit; an error of wasmtime's (a range or string the guest's memory
/// does not hold) traps the plugin, as the generated lift would.
fn lift(
    store: &mut StoreContextMut<'_, SandboxState>,
    request: LentRequest,
) -> wasmtime::Result<Result<(InferenceRequest, u64), CallError>> {
    let limit = store.data().limiter.memory_limit() as u64;
    let mut budget = Budget { limit, total: 0 };
    let model = request.model.to_str(&*store)?;
    if let Err(e) = budget.take(model.len() as u64, "") {
        return Ok(Err(e));
    }
    let model = model.into_owned();

    let mut inputs = Vec::new();
    for i in 0..request.inputs.len() {
        let Some(tensor) = request.inputs.get(&mut *store, i) else { break };
        let tensor = tensor?;
        let name = tensor.name.to_str(&*store)?;
        if let Err(e) = budget.take(ENTRY_BYTES + tensor.bytes(&name), &model) {
            return Ok(Err(e));
        }
        let LentTensor { datatype, shape, data, .. } = tensor;
        let (shape, data) = (shape.as_le_slice(&*store).to_vec(), data.as_le_slice(&*store).to_vec());
        inputs.push(Tensor { name: name.into_owned(), datatype, shape, data });
    }

    let mut requested_outputs = Vec::new();
    for i in 0..request.requested_outputs.len() {
        let Some(name) = request.requested_outputs.get(&mut *store, i) else { break };
        let name = name?;
        let name = name.to_str(&*store)?;
        if let Err(e) = budget.take(ENTRY_BYTES + name.len() as u64, &model) {
            return Ok(Err(e));
        }
        requested_outputs.push(name.into_owned());
    }

    let mut parameters = Vec::new();
    for i in 0..request.parameters.len() {
        let Some(parameter) = request.parameters.get(&mut *store, i) else { break };
        let parameter = LentParameter::read(parameter?, &*store)?;
        if let Err(e) = budget.take(ENTRY_BYTES + parameter.bytes(), &model) {
            return Ok(Err(e));
        }
        parameters.push(parameter.into_owned());
    }

    let correlation_id = match request.correlation_id {
        LentCorrelationId::None => CorrelationId::None,
        LentCorrelationId::Numeric(n) => CorrelationId::Numeric(n),
        LentCorrelationId::Text(text) => {
            let text = text.to_str(&*store)?;
            if let Err(e) = budget.take(text.len() as u64, &model) {
                return Ok(Err(e));
            }
            CorrelationId::Text(text.into_owned())
        }
    };
    let request = InferenceRequest {
        model,
        version: request.version,
        inputs,
        requested_outputs,
        parameters,
        correlation_id,
        flags: request.flags,
        timeout_ms: request.timeout_ms,
    };
    Ok(Ok((request, budget.total)))
}
