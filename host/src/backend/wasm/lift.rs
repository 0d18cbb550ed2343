//! `send-response` as the host defines it: each output read in place from the sandbox's memory and
//! copied once, to where it goes.
//!
//! The generated bindings lift a response whole, each tensor's `data` into a `Vec` of the host's,
//! before the host function sees it. For an output the client placed in system shared memory that
//! buffer was only a stop on the way: the frontend then copied it into the client's object, a second
//! pass over every byte. Here the response's tensors are lifted with their `data` as a `WasmList` (a
//! checked range of the guest's memory), and each is copied either straight into the client's
//! mapping (`HostSpan`, when the request placed it there) or into a buffer of the host's; the rest
//! of `send-response` is the generated one's (`SandboxState::deliver`). Defined over the generated
//! function in the linker, under the same name and type (wasmtime checks them against each
//! component's import at instantiation).
use wasmtime::component::{ComponentType, Lift, Linker, WasmList};
use wasmtime::{AsContext, StoreContextMut};

use super::bindings::{DataType, Parameter};
use super::host_api::{Lifted, Sent};
use super::state::SandboxState;
use crate::tensor::DataType as HostDataType;

/// The interface `send-response` belongs to, as the package (`wit/backend.wit`) versions it;
/// components built against an older 1.x import it under their version, which wasmtime matches to
/// this one.
const HOST_INTERFACE: &str = "nereus:backend/host@1.2.0";

/// WIT's `tensor` with its `data` left in the guest's memory.
#[derive(ComponentType, Lift)]
#[component(record)]
struct LentTensor {
    name: String,
    datatype: DataType,
    shape: Vec<i64>,
    data: WasmList<u8>,
}

/// WIT's `response`, its tensors' data left in the guest's memory.
#[derive(ComponentType, Lift)]
#[component(record)]
struct LentResponse {
    outputs: Vec<LentTensor>,
    parameters: Vec<Parameter>,
}

/// Defines `send-response` over the generated bindings' (added to `linker` before this).
pub(super) fn add_to_linker(linker: &mut Linker<SandboxState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let defined = linker.instance(HOST_INTERFACE)?.func_wrap(
        "send-response",
        |mut store: StoreContextMut<'_, SandboxState>, (request, response, final_): (u32, LentResponse, bool)| {
            let LentResponse { outputs, parameters } = response;
            let sent = lift(&store, request, final_, outputs);
            Ok((store.data_mut().deliver(request, sent, parameters, final_),))
        },
    );
    linker.allow_shadowing(false);
    defined.map(|_| ())
}

/// Each output's bytes out of the guest's memory: into the client's shared memory where request
/// `index` placed it there and may be written to now, else into a buffer of the host's.
fn lift(store: &StoreContextMut<'_, SandboxState>, index: u32, final_: bool, outputs: Vec<LentTensor>) -> Vec<Sent> {
    let state = store.data();
    // Only a final response to a request still open, of a model that sends one response a request:
    // a write for a request already answered could land on bytes its client is reading, or on
    // those of its next request in the same place; `deliver` refuses such a response anyway.
    let places = state
        .batch
        .as_ref()
        .filter(|batch| final_ && !batch.decoupled)
        .and_then(|batch| batch.jobs.get(index as usize).map(|job| (batch, job)))
        .filter(|(_, job)| !job.sender.is_complete() && !job.request.host_outputs.is_empty());
    outputs
        .into_iter()
        .map(|t| {
            let datatype = HostDataType::from(t.datatype);
            let bytes = t.data.as_le_slice(store.as_context());
            let place = places.and_then(|(batch, job)| {
                let (_, span) = job.request.host_outputs.iter().find(|(name, _)| *name == t.name)?;
                // A fixed-size datatype (the response states a written output's size by its
                // shape), not a sequence's state (which the server keeps), and room for it (else
                // the frontend says it does not fit, as ever).
                let fits = datatype.element_size().is_some()
                    && !batch.io.is_state_output(&t.name)
                    && bytes.len() as u64 <= span.limit();
                fits.then_some(span)
            });
            let data = match place {
                Some(span) => match span.write(bytes) {
                    Ok(()) => Lifted::Written(bytes.len()),
                    Err(e) => Lifted::Failed(e),
                },
                None => Lifted::Bytes(bytes::Bytes::copy_from_slice(bytes)),
            };
            Sent { name: t.name, datatype, shape: t.shape, data }
        })
        .collect()
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
