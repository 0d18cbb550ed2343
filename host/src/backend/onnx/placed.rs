//! Outputs ONNX Runtime writes straight into the client's system shared memory.
//!
//! A CPU session computes each output into a buffer of its own, which the frontend then copies into
//! the region the client named: for an identity, the input read in place is copied twice (by the
//! model, then into the region), where the mapped ceiling copies it once. ONNX Runtime can be handed
//! an output's buffer before the run (`OutputSelector::preallocate`), and the client's mapping is
//! such a buffer ([`HostSpan::lend`]): the model's own write is then the only copy.
//!
//! ONNX Runtime accepts a buffer only of exactly the shape it computes (else the run fails), so an
//! output is placed only where its shape follows from the model and the request: each dimension is
//! the model's fixed size, or a symbol (an ONNX `dim_param`, which names the same size wherever it
//! appears) that one of the inputs also has, read from that input in this request. A model whose
//! output then comes out otherwise (its declared shapes are wrong) is run again without placed
//! outputs ([`super::infer_on_cpu`]), so it costs time, never a wrong answer. Also required: one
//! request in the execution (a batch's output is split between requests), a fixed-size number type
//! (ORT's bool and string tensors are not the wire's bytes), not a sequence's state (the server keeps
//! it) nor an output scattered by an input's shape, the buffer aligned for the element type, and no
//! overlap with an input (the model would read what it had just written).
#![allow(unsafe_code)] // `value`: an ORT tensor over the lent place; it says why it is sound.

use std::collections::HashMap;
use std::ptr::NonNull;

use ort::AsPointer;
use ort::memory::{Allocator, MemoryInfo};
use ort::session::Session;
use ort::value::{DynValue, TensorElementType, ValueType};

use super::values::host_datatype;
use crate::backend::batch::Gathered;
use crate::request::Job;
use crate::shm::OutputPlace;
use crate::tensor::{DataType, element_count};

/// The smallest output placed. Placing costs run options and a tensor of ORT's per execution, and a
/// run that cannot take the place runs twice; below this a copy into the region is cheaper (64 KiB
/// is a few microseconds of `memcpy`).
const MIN_PLACED_BYTES: usize = 64 << 10;

/// An output whose buffer is the client's place for it.
pub(super) struct Placed {
    pub name: String,
    pub datatype: DataType,
    /// ORT's element type of the output, for the tensor over the place.
    ty: TensorElementType,
    pub shape: Vec<i64>,
    pub place: OutputPlace,
}

/// The outputs of `job` (the execution's only request) that ONNX Runtime can write in place:
/// wanted, placed by the client in a system region, and passing the checks of the module
/// documentation. `skip` names the outputs the server handles itself (states, scattered outputs).
pub(super) fn plan(
    session: &Session,
    inputs: &[Gathered],
    job: &Job,
    wanted: &dyn Fn(&str) -> bool,
    skip: &dyn Fn(&str) -> bool,
) -> Vec<Placed> {
    if !cfg!(target_endian = "little") || job.request.host_outputs.is_empty() || job.sender.is_complete() {
        return Vec::new();
    }
    let sizes = symbol_sizes(session, inputs);
    let mut placed = Vec::new();
    for (name, span) in &job.request.host_outputs {
        if !wanted(name) || skip(name) {
            continue;
        }
        let Some(outlet) = session.outputs().iter().find(|o| o.name() == name) else { continue };
        let ValueType::Tensor { ty, shape, dimension_symbols } = outlet.dtype() else { continue };
        let Some((datatype, element)) = placeable(*ty) else { continue };
        let Some(shape) = resolve(shape, dimension_symbols, &sizes) else { continue };
        let Some(len) = byte_len(&shape, element).filter(|&len| len >= MIN_PLACED_BYTES) else { continue };
        let Some(place) = span.lend(len) else { continue };
        let start = place.as_mut_ptr() as usize;
        let overlaps = inputs.iter().flat_map(|g| &g.parts).any(|p| {
            let at = p.as_ptr() as usize;
            at < start + len && start < at + p.len()
        });
        if start.is_multiple_of(element) && !overlaps {
            placed.push(Placed { name: name.clone(), datatype, ty: *ty, shape, place });
        }
    }
    placed
}

/// The size each input symbol has in this execution, from the inputs' shapes (a symbol that two
/// inputs give different sizes is left out: ORT refuses such inputs anyway).
fn symbol_sizes(session: &Session, inputs: &[Gathered]) -> HashMap<String, i64> {
    let mut sizes: HashMap<String, i64> = HashMap::new();
    let mut conflicting = Vec::new();
    for outlet in session.inputs() {
        let ValueType::Tensor { dimension_symbols, .. } = outlet.dtype() else { continue };
        let Some(given) = inputs.iter().find(|g| g.name == outlet.name()) else { continue };
        for (symbol, size) in dimension_symbols.iter().zip(&given.shape) {
            if symbol.is_empty() {
                continue;
            }
            if *sizes.entry(symbol.clone()).or_insert(*size) != *size {
                conflicting.push(symbol.clone());
            }
        }
    }
    for symbol in conflicting {
        sizes.remove(&symbol);
    }
    sizes
}

/// An output's shape from its declared dimensions: fixed sizes as they are, symbols by `sizes`;
/// `None` when a dimension is neither.
fn resolve(shape: &[i64], symbols: &[String], sizes: &HashMap<String, i64>) -> Option<Vec<i64>> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &dim)| match dim {
            d if d >= 0 => Some(d),
            _ => symbols.get(i).filter(|s| !s.is_empty()).and_then(|s| sizes.get(s)).copied(),
        })
        .collect()
}

fn byte_len(shape: &[i64], element: usize) -> Option<usize> {
    usize::try_from(element_count(shape)?).ok()?.checked_mul(element)
}

/// The host datatype and element size of an ORT element type that is placed: a fixed-size number
/// (not a bool, whose ORT bytes the server converts, nor a string).
fn placeable(ty: TensorElementType) -> Option<(DataType, usize)> {
    let datatype = host_datatype(ty).filter(|d| *d != DataType::Bool)?;
    Some((datatype, datatype.element_size()?))
}

/// An ORT tensor of `p`'s type and shape whose buffer is `p`'s place, to preallocate the output
/// with. The tensor does not own the buffer (ORT frees only its handle) and must not outlive the
/// place: the caller drops it, and the run's outputs, before it drops the place.
pub(super) fn value(p: &Placed) -> Result<DynValue, String> {
    let info = MemoryInfo::default();
    let mut value: *mut ort::sys::OrtValue = std::ptr::null_mut();
    // SAFETY: the place is `p.place.len()` writable bytes, exactly the shape's (`plan` sized it so),
    // aligned for the element type, and alive for as long as the caller keeps the tensor; ORT only
    // records the pointer. The shape slice outlives the call.
    let status = unsafe {
        (ort::api().CreateTensorWithDataAsOrtValue)(
            info.ptr(),
            p.place.as_mut_ptr().cast(),
            p.place.len(),
            p.shape.as_ptr(),
            p.shape.len(),
            p.ty.into(),
            &mut value,
        )
    };
    // SAFETY: the status is the one the call above returned.
    unsafe { ort::Error::result_from_status(status) }.map_err(|e| format!("output '{}': {e}", p.name))?;
    let value = NonNull::new(value).ok_or_else(|| format!("output '{}': ONNX Runtime made no tensor", p.name))?;
    // SAFETY: a tensor value just created, which the returned value now owns (and releases); the
    // allocator is only kept alive beside it, never asked to free the buffer (ORT does not own it).
    Ok(unsafe { DynValue::from_ptr(value, Some(&Allocator::default())) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(pairs: &[(&str, i64)]) -> HashMap<String, i64> {
        pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect()
    }

    #[test]
    fn an_output_s_shape_follows_from_fixed_sizes_and_the_inputs_symbols() {
        let symbols = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let known = sizes(&[("batch", 2), ("n", 1000)]);
        assert_eq!(resolve(&[-1, -1], &symbols(&["batch", "n"]), &known), Some(vec![2, 1000]));
        assert_eq!(resolve(&[-1, 1], &symbols(&["batch", ""]), &known), Some(vec![2, 1]));
        assert_eq!(resolve(&[3, 224, 224], &symbols(&["", "", ""]), &known), Some(vec![3, 224, 224]));
        // A symbol no input has, and a dynamic dimension without a symbol, are unknown.
        assert_eq!(resolve(&[-1, -1], &symbols(&["batch", "m"]), &known), None);
        assert_eq!(resolve(&[-1], &symbols(&[""]), &known), None);
        assert_eq!(resolve(&[-1], &[], &known), None);
    }

    #[test]
    fn byte_lengths_refuse_negative_and_overflowing_shapes() {
        assert_eq!(byte_len(&[2, 1000], 4), Some(8000));
        assert_eq!(byte_len(&[], 4), Some(4));
        assert_eq!(byte_len(&[0, 5], 8), Some(0));
        assert_eq!(byte_len(&[-1, 5], 4), None);
        assert_eq!(byte_len(&[i64::MAX, i64::MAX], 4), None);
    }

    #[test]
    fn only_fixed_size_numbers_are_placed() {
        let size = |ty| placeable(ty).map(|(_, size)| size);
        assert_eq!(size(TensorElementType::Float32), Some(4));
        assert_eq!(size(TensorElementType::Bfloat16), Some(2));
        assert_eq!(size(TensorElementType::Int64), Some(8));
        assert_eq!(size(TensorElementType::Bool), None);
        assert_eq!(size(TensorElementType::String), None);
    }
}
