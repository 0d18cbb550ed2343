//! `send-response` as the host defines it: nothing of a response leaves the sandbox's memory until
//! the host has counted it against the model's output limit, and each output is then copied once,
//! to where it goes.
//!
//! The generated bindings lift a response whole, every string and list into a buffer of the host's,
//! before the host function sees it. That is a copy the plugin decides the size of: a response may
//! name the same 100 MiB of the guest's memory as the data (or the name) of 100,000 outputs, and the
//! host would copy each before it could count them, whatever the plugin's memory limit — the
//! process's memory, not the plugin's. Here the response is lifted as handles on the guest's memory
//! (`WasmList`, `WasmStr`: checked ranges, nothing copied), counted against
//! `sandbox.max_output_bytes` entry by entry, and copied only while it fits: each output's data
//! straight into the client's mapping (`HostSpan`, when the request placed it there) or into a buffer
//! of the host's. For an output the client placed in system shared memory, that also saves the
//! copy into a host buffer that the frontend would then copy into the client's object. The rest of
//! `send-response` is the generated one's (`SandboxState::deliver`). Defined over the generated
//! function in the linker, under the same name and type (wasmtime checks them against each
//! component's import at instantiation).
use std::borrow::Cow;

use wasmtime::component::{ComponentType, Lift, Linker, WasmList, WasmStr};
use wasmtime::{AsContext, StoreContextMut};

use super::bindings::{DataType, Parameter, ParameterValue};
use super::host_api::{Lent, Lifted, Sent};
use super::state::SandboxState;
use crate::tensor::DataType as HostDataType;

/// The interface `send-response` belongs to, as the package (`wit/backend.wit`) versions it;
/// components built against an older 1.x import it under their version, which wasmtime matches to
/// this one.
const HOST_INTERFACE: &str = "nereus:backend/host@1.2.0";

/// What a parameter of any kind other than text counts against the output limit (its value's
/// bytes on the wire).
const SCALAR_PARAMETER_BYTES: u64 = 8;

/// WIT's `tensor`, left in the guest's memory.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(super) struct LentTensor {
    pub name: WasmStr,
    pub datatype: DataType,
    pub shape: WasmList<i64>,
    pub data: WasmList<u8>,
}

/// WIT's `parameter-value`, its text left in the guest's memory.
#[derive(ComponentType, Lift)]
#[component(variant)]
pub(super) enum LentValue {
    #[component(name = "boolean")]
    Boolean(bool),
    #[component(name = "int64")]
    Int64(i64),
    #[component(name = "uint64")]
    Uint64(u64),
    #[component(name = "double")]
    Double(f64),
    #[component(name = "text")]
    Text(WasmStr),
}

/// WIT's `parameter`, left in the guest's memory.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(super) struct LentParameter {
    pub key: WasmStr,
    pub value: LentValue,
}

impl LentTensor {
    /// What the tensor counts, its name read as `name`: the name, shape and data are all the
    /// plugin's to size.
    pub(super) fn bytes(&self, name: &str) -> u64 {
        (name.len() as u64).saturating_add(self.shape.len() as u64 * 8).saturating_add(self.data.len() as u64)
    }
}

/// A lent parameter with its key and text read in place (borrowed from the guest's memory for a
/// UTF-8 guest): counted first, copied only then.
pub(super) struct ReadParameter<'a> {
    key: Cow<'a, str>,
    value: LentValue,
    text: Option<Cow<'a, str>>,
}

impl LentParameter {
    /// Reads the key and any text in place; an error is a string the guest's memory does not hold.
    pub(super) fn read<'a>(self, store: &'a StoreContextMut<'_, SandboxState>) -> wasmtime::Result<ReadParameter<'a>> {
        let key = self.key.to_str(store)?;
        let text = match &self.value {
            LentValue::Text(text) => Some(text.to_str(store)?),
            _ => None,
        };
        Ok(ReadParameter { key, value: self.value, text })
    }
}

impl ReadParameter<'_> {
    /// What it counts: the key and the text, or [`SCALAR_PARAMETER_BYTES`] for another value.
    pub(super) fn bytes(&self) -> u64 {
        self.key.len() as u64 + self.text.as_ref().map_or(SCALAR_PARAMETER_BYTES, |t| t.len() as u64)
    }

    /// The parameter, copied.
    pub(super) fn into_owned(self) -> Parameter {
        let value = match (self.value, self.text) {
            (LentValue::Boolean(b), _) => ParameterValue::Boolean(b),
            (LentValue::Int64(v), _) => ParameterValue::Int64(v),
            (LentValue::Uint64(v), _) => ParameterValue::Uint64(v),
            (LentValue::Double(v), _) => ParameterValue::Double(v),
            (LentValue::Text(_), text) => ParameterValue::Text(text.map(Cow::into_owned).unwrap_or_default()),
        };
        Parameter { key: self.key.into_owned(), value }
    }
}

/// WIT's `response`, left in the guest's memory.
#[derive(ComponentType, Lift)]
#[component(record)]
struct LentResponse {
    outputs: WasmList<LentTensor>,
    parameters: WasmList<LentParameter>,
}

/// Defines `send-response` over the generated bindings' (added to `linker` before this).
pub(super) fn add_to_linker(linker: &mut Linker<SandboxState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let defined = linker.instance(HOST_INTERFACE)?.func_wrap(
        "send-response",
        |mut store: StoreContextMut<'_, SandboxState>, (request, response, final_): (u32, LentResponse, bool)| {
            let lent = lift(&mut store, request, final_, response)?;
            Ok((store.data_mut().deliver(request, lent, final_),))
        },
    );
    linker.allow_shadowing(false);
    defined.map(|_| ())
}

/// A response out of the guest's memory, as far as it fits the model's output limit: its
/// parameters, then its outputs, each output's bytes into the client's shared memory where request
/// `index` placed it there and may be written to now, else into a buffer of the host's. What does
/// not fit is not copied: the response is refused (`Lent::refused`). An error here is a range or
/// string the guest's memory does not hold, which traps the plugin as the generated lift would.
fn lift(
    store: &mut StoreContextMut<'_, SandboxState>,
    index: u32,
    final_: bool,
    response: LentResponse,
) -> wasmtime::Result<Lent> {
    // Outside `execute` nothing may be sent, so nothing is copied (`deliver` says why).
    let (limit, outputs_known) = store
        .data()
        .batch
        .as_ref()
        .map_or((0, 0), |b| (b.max_output_bytes, b.io.outputs.len() + b.io.state_outputs.len()));
    let mut lent = Lent::default();
    let mut total: u64 = 0;

    let count = response.parameters.len();
    for i in 0..count {
        let Some(parameter) = response.parameters.get(&mut *store, i) else { break };
        let parameter = parameter?.read(&*store)?;
        total = total.saturating_add(parameter.bytes());
        if total > limit {
            let more = if i + 1 < count { " or more" } else { "" };
            lent.refused = Some(format!(
                "response parameters of {total} bytes{more} exceed the model's output limit of {limit} bytes"
            ));
            return Ok(lent);
        }
        lent.parameters.push(parameter.into_owned());
    }

    // More outputs than the model has cannot all be right (each is named once, and only the
    // model's outputs and state may be named): refused before any is looked at, so that a list of
    // millions costs nothing.
    if response.outputs.len() > outputs_known {
        lent.refused =
            Some(format!("{} outputs in one response; the model has {outputs_known}", response.outputs.len()));
        return Ok(lent);
    }
    for i in 0..response.outputs.len() {
        let Some(tensor) = response.outputs.get(&mut *store, i) else { break };
        let tensor = tensor?;
        let name = tensor.name.to_str(&*store)?;
        total = total.saturating_add(tensor.bytes(&name));
        if total > limit {
            lent.refused = Some(format!("response exceeds the model's output limit of {limit} bytes"));
            return Ok(lent);
        }
        let name = name.into_owned();
        let shape = tensor.shape.as_le_slice(&*store).to_vec();
        let datatype = HostDataType::from(tensor.datatype);
        let bytes = tensor.data.as_le_slice(store.as_context());
        let data = match placed(store.data(), index, final_, &name, datatype, bytes.len()) {
            Some(span) => match span.write(bytes) {
                Ok(()) => Lifted::Written(bytes.len()),
                Err(e) => Lifted::Failed(e),
            },
            None => Lifted::Bytes(crate::bulk_copy::to_bytes(bytes)),
        };
        lent.outputs.push(Sent { name, datatype, shape, data });
    }
    Ok(lent)
}

/// Where output `name` of `len` bytes goes when request `index` placed it in the client's system
/// shared memory and it may be written there now; `None` sends it in the response.
fn placed<'a>(
    state: &'a SandboxState,
    index: u32,
    final_: bool,
    name: &str,
    datatype: HostDataType,
    len: usize,
) -> Option<&'a crate::shm::HostSpan> {
    // Only a final response to a request still open, of a model that sends one response a request:
    // a write for a request already answered could land on bytes its client is reading, or on
    // those of its next request in the same place; `deliver` refuses such a response anyway.
    // Nor a merged batch's response, which holds every request's rows (`merge.rs`).
    let batch = state.batch.as_ref().filter(|batch| final_ && !batch.decoupled && !batch.merged)?;
    let job = batch.jobs.get(index as usize).filter(|job| !job.sender.is_complete())?;
    let (_, span) = job.request.host_outputs.iter().find(|(output, _)| output == name)?;
    // A fixed-size datatype (the response states a written output's size by its shape), not a
    // sequence's state (which the server keeps), and room for it (else the frontend says it does
    // not fit, as ever).
    let fits = datatype.element_size().is_some() && !batch.io.is_state_output(name) && len as u64 <= span.limit();
    fits.then_some(span)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interface_is_the_package_s_current_version() {
        let wit = include_str!("../../../../wit/backend.wit");
        let package = wit.lines().find_map(|l| l.strip_prefix("package nereus:backend@")).unwrap();
        let version = package.trim_end_matches(';');
        assert_eq!(HOST_INTERFACE, format!("nereus:backend/host@{version}"));
    }
}
