//! Host tensors as ONNX Runtime values and back, shared by the CPU and GPU paths.
#![allow(unsafe_code)] // `view`: a request's bytes read as the elements they hold, checked first; it says why it is sound.
use bytes::Bytes;
use ort::session::SessionInputValue;
use ort::value::{DynTensor, DynTensorValueType, DynValue, TensorElementType, TensorRef, ValueType};

use crate::backend::batch::Gathered;
use crate::request::Tensor;
use crate::tensor::{DataType, bytes_elements, element_count};

/// Little-endian element bytes, in parts, as one typed vector. Sized up front and filled part by
/// part with `chunks_exact`, which the compiler turns into plain copies: an iterator that hides its
/// length (`flat_map`) grew the vector by doubling and converted element by element, 91 ms for a
/// 64 MiB FP32 input where this takes a few (bench/tensors.sh). `from` is a type parameter, not a
/// `fn` pointer: an indirect call per element cannot be inlined into a copy.
fn numbers<T, const N: usize>(parts: &[Bytes], from: impl Fn([u8; N]) -> T) -> Vec<T> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() / N).sum());
    for part in parts {
        out.extend(part.chunks_exact(N).map(|c| from(c.try_into().expect("chunks_exact yields N bytes"))));
    }
    out
}

/// Typed elements as little-endian bytes, the output's buffer allocated once at its size and not
/// zeroed first: every byte is written here (zeroing was a whole pass more over a megabyte output,
/// whose buffer is a kept huge-page block that a zeroed allocation must clear: `large_pages.rs`).
fn le_bytes<T: Copy, const N: usize>(data: &[T], to: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let len = data.len() * N;
    let mut out: Vec<u8> = Vec::with_capacity(len);
    for (o, v) in out.spare_capacity_mut()[..len].chunks_exact_mut(N).zip(data) {
        for (byte, b) in o.iter_mut().zip(to(*v)) {
            byte.write(b);
        }
    }
    // SAFETY: the loop wrote all `len` bytes: `data.len()` chunks of `N`, one per element.
    unsafe { out.set_len(len) };
    out
}

/// A gathered input for a CPU session: a view of the request's own bytes when one request holds
/// them all and they are aligned for the element type (no copy: the HTTP frontend aligns binary
/// tensors in the body it joins, and a shared-memory read gets a buffer of its own); else an ORT
/// value of their copy ([`to_value`]).
pub(crate) fn to_input(t: &Gathered) -> Result<SessionInputValue<'_>, String> {
    if let [part] = &t.parts[..]
        && let Some(view) = view(t, part)?
    {
        return Ok(view);
    }
    to_value(t).map(SessionInputValue::Owned)
}

/// `part` as a tensor of `t`'s element type, where it can be read in place: a numeric type whose
/// every bit pattern is a value, on a little-endian machine (the wire's byte order), the bytes
/// aligned for it and a whole number of elements.
fn view<'a>(t: &'a Gathered, part: &'a Bytes) -> Result<Option<SessionInputValue<'a>>, String> {
    fn cast<T>(part: &[u8]) -> Option<&[T]> {
        let size = std::mem::size_of::<T>();
        let fits = cfg!(target_endian = "little")
            && (part.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
            && part.len().is_multiple_of(size);
        // SAFETY: aligned for T, a whole number of Ts, and T (a number below) is valid for any bits;
        // the slice borrows `part`, which outlives the session run that reads it.
        fits.then(|| unsafe { std::slice::from_raw_parts(part.as_ptr().cast::<T>(), part.len() / size) })
    }
    macro_rules! view_as {
        ($ty:ty) => {
            match cast::<$ty>(part) {
                Some(values) => TensorRef::from_array_view((t.shape.clone(), values))
                    .map(|v| Some(SessionInputValue::View(v.into_dyn())))
                    .map_err(|e| format!("input '{}': {e}", t.name)),
                None => Ok(None),
            }
        };
    }
    match t.datatype {
        DataType::Uint8 => view_as!(u8),
        DataType::Int8 => view_as!(i8),
        DataType::Uint16 => view_as!(u16),
        DataType::Int16 => view_as!(i16),
        DataType::Uint32 => view_as!(u32),
        DataType::Int32 => view_as!(i32),
        DataType::Uint64 => view_as!(u64),
        DataType::Int64 => view_as!(i64),
        DataType::Fp32 => view_as!(f32),
        DataType::Fp64 => view_as!(f64),
        DataType::Fp16 => view_as!(half::f16),
        DataType::Bf16 => view_as!(half::bf16),
        DataType::Bool | DataType::Bytes => Ok(None),
    }
}

/// A gathered input as an ORT value: the requests' bytes copied once, into ORT-owned memory.
pub(crate) fn to_value(t: &Gathered) -> Result<DynValue, String> {
    use ort::value::Tensor as OrtTensor;
    let shape = t.shape.clone();
    let d = &t.parts[..];
    let value = match t.datatype {
        DataType::Bool => {
            let flags: Vec<bool> = d.iter().flat_map(|p| p.iter().map(|b| *b != 0)).collect();
            OrtTensor::from_array((shape, flags)).map(|v| v.into_dyn())
        }
        DataType::Uint8 => OrtTensor::from_array((shape, numbers(d, u8::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Int8 => OrtTensor::from_array((shape, numbers(d, i8::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Uint16 => OrtTensor::from_array((shape, numbers(d, u16::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Int16 => OrtTensor::from_array((shape, numbers(d, i16::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Uint32 => OrtTensor::from_array((shape, numbers(d, u32::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Int32 => OrtTensor::from_array((shape, numbers(d, i32::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Uint64 => OrtTensor::from_array((shape, numbers(d, u64::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Int64 => OrtTensor::from_array((shape, numbers(d, i64::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Fp32 => OrtTensor::from_array((shape, numbers(d, f32::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Fp64 => OrtTensor::from_array((shape, numbers(d, f64::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Fp16 => OrtTensor::from_array((shape, numbers(d, half::f16::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Bf16 => OrtTensor::from_array((shape, numbers(d, half::bf16::from_le_bytes))).map(|v| v.into_dyn()),
        DataType::Bytes => {
            let strings = d
                .iter()
                .flat_map(|p| bytes_elements(p))
                .map(|e| {
                    let e = e.map_err(str::to_string)?;
                    String::from_utf8(e.to_vec()).map_err(|_| format!("input '{}' holds a non-UTF-8 string", t.name))
                })
                .collect::<Result<Vec<String>, String>>()?;
            OrtTensor::from_string_array((shape, strings.as_slice())).map(|v| v.into_dyn())
        }
    };
    value.map_err(|e| format!("input '{}': {e}", t.name))
}

/// An output a session handed over, as a host tensor: numeric elements are not copied, the tensor's
/// bytes are ORT's buffer, kept alive by the value until the last slice of them is dropped (after the
/// frontend has sent them or written them into a shared-memory region). A copy into a buffer of the
/// server's was a whole pass over every output, a third of what an identity's megabyte request cost
/// in memory traffic (docs/architecture.md, tensor bytes copy by copy). Fixed-size elements only
/// ([`host_datatype`]; ORT's booleans are bytes of 0 or 1, as on the wire); strings (re-encoded with
/// length prefixes) are converted as [`from_value`] does.
pub(crate) fn from_output(name: &str, value: DynValue) -> Result<Tensor, String> {
    let ValueType::Tensor { ty, shape, .. } = value.dtype() else {
        return Err(format!("output '{name}' is not a tensor"));
    };
    let Some((datatype, size)) =
        host_datatype(*ty).filter(|_| cfg!(target_endian = "little")).and_then(|d| Some((d, d.element_size()?)))
    else {
        return from_value(name, &value.view());
    };
    let shape: Vec<i64> = shape.iter().copied().collect();
    let len = element_count(&shape)
        .and_then(|n| usize::try_from(n).ok()?.checked_mul(size))
        .ok_or_else(|| format!("output '{name}' has shape {shape:?}"))?;
    let tensor = value.downcast::<DynTensorValueType>().map_err(|e| format!("output '{name}': {e}"))?;
    let data = if len == 0 {
        Bytes::new()
    } else {
        Bytes::from_owner(OrtBytes { start: tensor.data_ptr().cast(), len, _value: tensor })
    };
    Ok(Tensor { name: name.to_string(), datatype, shape, data })
}

/// The element bytes of an ORT output on the host, owned by the value that holds them.
struct OrtBytes {
    start: *const u8,
    len: usize,
    /// Owns the buffer `start` points into (with the allocator that frees it, which outlives the session).
    _value: DynTensor,
}

// SAFETY: `start` points into the buffer `_value` owns, which nothing writes once the run that made
// it has returned (the session hands the value over and keeps no reference to it); ORT values are
// themselves Send and Sync, and freeing the buffer from another thread goes through ORT's
// thread-safe allocator.
unsafe impl Send for OrtBytes {}
// SAFETY: as above; the bytes are only ever read.
unsafe impl Sync for OrtBytes {}

impl AsRef<[u8]> for OrtBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes from `start` are the tensor's elements, alive as long as `_value`.
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }
}

/// The host datatype of an ORT output that is copied back as raw bytes (fixed-size elements).
pub(crate) fn host_datatype(ty: TensorElementType) -> Option<DataType> {
    Some(match ty {
        TensorElementType::Bool => DataType::Bool,
        TensorElementType::Uint8 => DataType::Uint8,
        TensorElementType::Int8 => DataType::Int8,
        TensorElementType::Uint16 => DataType::Uint16,
        TensorElementType::Int16 => DataType::Int16,
        TensorElementType::Float16 => DataType::Fp16,
        TensorElementType::Bfloat16 => DataType::Bf16,
        TensorElementType::Uint32 => DataType::Uint32,
        TensorElementType::Int32 => DataType::Int32,
        TensorElementType::Float32 => DataType::Fp32,
        TensorElementType::Uint64 => DataType::Uint64,
        TensorElementType::Int64 => DataType::Int64,
        TensorElementType::Float64 => DataType::Fp64,
        _ => return None,
    })
}

/// An ORT output as a host tensor.
pub(crate) fn from_value(name: &str, value: &ort::value::DynValueRef<'_>) -> Result<Tensor, String> {
    let ValueType::Tensor { ty, .. } = value.dtype() else {
        return Err(format!("output '{name}' is not a tensor"));
    };
    let err = |e: ort::Error| format!("output '{name}': {e}");
    macro_rules! num {
        ($t:ty, $dt:expr) => {{
            let (shape, data) = value.try_extract_tensor::<$t>().map_err(err)?;
            let bytes = le_bytes(data, <$t>::to_le_bytes);
            (shape.iter().copied().collect::<Vec<i64>>(), $dt, bytes)
        }};
    }
    let (shape, datatype, bytes) = match ty {
        TensorElementType::Bool => {
            let (shape, data) = value.try_extract_tensor::<bool>().map_err(err)?;
            (shape.iter().copied().collect(), DataType::Bool, data.iter().map(|b| u8::from(*b)).collect())
        }
        TensorElementType::Uint8 => num!(u8, DataType::Uint8),
        TensorElementType::Int8 => num!(i8, DataType::Int8),
        TensorElementType::Uint16 => num!(u16, DataType::Uint16),
        TensorElementType::Int16 => num!(i16, DataType::Int16),
        TensorElementType::Uint32 => num!(u32, DataType::Uint32),
        TensorElementType::Int32 => num!(i32, DataType::Int32),
        TensorElementType::Uint64 => num!(u64, DataType::Uint64),
        TensorElementType::Int64 => num!(i64, DataType::Int64),
        TensorElementType::Float32 => num!(f32, DataType::Fp32),
        TensorElementType::Float64 => num!(f64, DataType::Fp64),
        TensorElementType::Float16 => num!(half::f16, DataType::Fp16),
        TensorElementType::Bfloat16 => num!(half::bf16, DataType::Bf16),
        TensorElementType::String => {
            let (shape, strings) = value.try_extract_strings().map_err(err)?;
            let mut bytes = Vec::new();
            for s in strings {
                bytes.extend_from_slice(&(s.len() as u32).to_le_bytes());
                bytes.extend_from_slice(s.as_bytes());
            }
            (shape.iter().copied().collect(), DataType::Bytes, bytes)
        }
        other => return Err(format!("output '{name}': element type {other:?} is not supported by this backend yet")),
    };
    Ok(Tensor { name: name.to_string(), datatype, shape, data: Bytes::from(bytes) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::onnx::{default_library, runtime};

    /// The library the test script installs, if present (required when NEREUS_REQUIRE_ONNXRUNTIME is set).
    fn environment() -> Option<&'static ort::environment::Environment> {
        let lib = std::env::var_os("NEREUS_ONNXRUNTIME_LIB").map(std::path::PathBuf::from).or_else(default_library)?;
        match runtime(Some(&lib)) {
            Ok(env) => Some(env),
            Err(e) => {
                assert!(std::env::var_os("NEREUS_REQUIRE_ONNXRUNTIME").is_none(), "{e}");
                None
            }
        }
    }

    #[test]
    fn one_aligned_request_is_read_in_place_and_anything_else_copied() {
        if environment().is_none() {
            eprintln!("skipping: no ONNX Runtime library");
            return;
        }
        let data: Vec<u8> = [1.5f32, -2.0, 3.25, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        // The same bytes at an aligned and at a misaligned address (one byte in).
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&data);
        let shifted = Bytes::from(shifted).slice(1..);
        let aligned = Bytes::from(data.clone());
        assert!((aligned.as_ptr() as usize).is_multiple_of(4) && !(shifted.as_ptr() as usize).is_multiple_of(4));
        let gathered =
            |parts: Vec<Bytes>, shape: Vec<i64>| Gathered { name: "T".into(), datatype: DataType::Fp32, shape, parts };
        let values = |input: &SessionInputValue<'_>| -> (bool, Vec<f32>) {
            let (_, v) = input.try_extract_tensor::<f32>().unwrap();
            (matches!(input, SessionInputValue::View(_)), v.to_vec())
        };
        let want = vec![1.5f32, -2.0, 3.25, 4.0];
        let g = gathered(vec![aligned.clone()], vec![1, 4]);
        let input = to_input(&g).unwrap();
        assert_eq!(values(&input), (true, want.clone()), "one aligned part: a view");
        assert_eq!(input.try_extract_tensor::<f32>().unwrap().1.as_ptr() as usize, aligned.as_ptr() as usize);
        let g = gathered(vec![shifted], vec![1, 4]);
        assert_eq!(values(&to_input(&g).unwrap()), (false, want.clone()), "misaligned: a copy");
        let g = gathered(vec![aligned.slice(..8), aligned.slice(8..)], vec![2, 2]);
        assert_eq!(values(&to_input(&g).unwrap()), (false, want), "two requests: gathered into a copy");
    }

    #[test]
    fn every_datatype_round_trips_through_ort_values() {
        if environment().is_none() {
            eprintln!("skipping: no ONNX Runtime library");
            return;
        }
        let mut strings = Vec::new();
        for s in ["", "héllo", "42"] {
            strings.extend_from_slice(&(s.len() as u32).to_le_bytes());
            strings.extend_from_slice(s.as_bytes());
        }
        let cases: Vec<(DataType, Vec<u8>)> = vec![
            (DataType::Bool, vec![0, 1, 1]),
            (DataType::Uint8, vec![0, 7, 255]),
            (DataType::Int8, vec![0x80, 0, 0x7f]),
            (DataType::Int16, [-2i16, 0, 9].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Uint16, [2u16, 0, 9].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Int32, [-5i32, 0, 1 << 30].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Uint32, [5u32, 0, u32::MAX].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Int64, [-5i64, 0, i64::MAX].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Uint64, [5u64, 0, u64::MAX].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (
                DataType::Fp16,
                [0.5f32, -2.0, 65504.0].iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect(),
            ),
            (
                DataType::Bf16,
                [0.5f32, -2.0, 1e30].iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect(),
            ),
            (DataType::Fp32, [0.5f32, -2.0, f32::MAX].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Fp64, [0.5f64, -2.0, f64::MIN].iter().flat_map(|v| v.to_le_bytes()).collect()),
            (DataType::Bytes, strings),
        ];
        for (datatype, data) in cases {
            let t = Tensor { name: "T".into(), datatype, shape: vec![1, 3], data: Bytes::from(data) };
            let gathered =
                Gathered { name: t.name.clone(), datatype, shape: t.shape.clone(), parts: vec![t.data.clone()] };
            let value = to_value(&gathered).unwrap();
            let back = from_value("T", &value.view()).unwrap();
            assert_eq!(back, t, "{datatype}");
            let lent = from_output("T", value).unwrap();
            assert_eq!(lent, t, "{datatype}, lent");
        }
    }

    #[test]
    fn a_numeric_output_is_lent_not_copied_and_outlives_its_value_s_handle() {
        if environment().is_none() {
            eprintln!("skipping: no ONNX Runtime library");
            return;
        }
        let data: Vec<u8> = (0..64u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
        let g = Gathered {
            name: "T".into(),
            datatype: DataType::Fp32,
            shape: vec![4, 16],
            parts: vec![data.clone().into()],
        };
        let value = to_value(&g).unwrap();
        let at = value.try_extract_tensor::<f32>().unwrap().1.as_ptr() as usize;
        let t = from_output("T", value).unwrap();
        assert_eq!(t.data.as_ptr() as usize, at, "the tensor's bytes are the value's buffer");
        let slice = t.data.slice(64..128);
        drop(t);
        assert_eq!(&slice[..], &data[64..128], "a slice keeps the buffer alive");
        let empty = Gathered { name: "E".into(), datatype: DataType::Fp32, shape: vec![0, 16], parts: vec![] };
        let t = from_output("E", to_value(&empty).unwrap()).unwrap();
        assert_eq!((t.shape, t.data.len()), (vec![0, 16], 0));
    }
}
