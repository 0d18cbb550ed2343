//! Triton's classification extension, the same on both protocols: a requested output with the
//! parameter `classification: N` is answered, instead of its values, as a BYTES tensor of its N
//! highest classes per batch item, each `value:index` or `value:index:label` (the label from the
//! output's `label_filename`). Done by the frontend layer after the model answers, as tritonserver's
//! frontends do: models, ensembles' steps and plugins' calls see the plain output.
use std::cmp::Ordering;

use bytes::Bytes;

use crate::error::InferError;
use crate::request::{InferenceResponse, ParamValue, Tensor};
use crate::tensor::DataType;
use crate::validate::IoSpec;

/// The outputs a client asked classes of: (output name, how many classes).
pub type ClassOutputs = Vec<(String, u32)>;

/// The most elements a classified output may have (tritonserver's limit against pathological
/// memory and CPU use).
const MAX_ELEMENTS: usize = 1_000_000;

/// The protocol a `classification` parameter came over: each checks its value in its own way.
#[derive(Clone, Copy, Debug)]
pub enum Wire {
    /// A JSON unsigned integer; 0 asks for no classes (the output's values are sent).
    Http,
    /// An `int64_param` greater than 0.
    Grpc,
}

/// How many classes a requested output's `classification` parameter asks for (`None`: none, send
/// the values), with tritonserver's messages for a value it refuses. `in_shared_memory`: the output
/// is also placed in shared memory, which cannot hold classes.
pub fn requested(wire: Wire, value: &ParamValue, in_shared_memory: bool) -> Result<Option<u32>, InferError> {
    let count = match (wire, value) {
        (Wire::Http, ParamValue::Uint64(n)) => *n,
        (Wire::Http, ParamValue::Int64(n)) if *n >= 0 => *n as u64,
        (Wire::Http, _) => {
            return Err(InferError::invalid(
                "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer",
            ));
        }
        (Wire::Grpc, ParamValue::Int64(n)) if *n > 0 => *n as u64,
        (Wire::Grpc, ParamValue::Int64(_)) => {
            return Err(InferError::invalid("invalid value for 'classification' parameter, expected >= 0"));
        }
        (Wire::Grpc, _) => {
            return Err(InferError::invalid("invalid value type for 'classification' parameter, expected int64_param"));
        }
    };
    if in_shared_memory {
        return Err(InferError::invalid("Output can't set both 'shared_memory_region' and 'classification'"));
    }
    // tritonserver keeps the count in 32 bits; more classes than that cannot exist anyway.
    Ok((count > 0).then(|| count.min(u32::MAX as u64) as u32))
}

/// Replaces each output of `response` that `classes` names with its classes. `io` is the model's
/// (whether it batches, and the labels).
pub fn apply(response: &mut InferenceResponse, classes: &ClassOutputs, io: &IoSpec) -> Result<(), InferError> {
    for output in response.outputs.iter_mut() {
        if let Some((_, count)) = classes.iter().find(|(name, _)| *name == output.name) {
            *output = classify(output, *count, io)?;
        }
    }
    Ok(())
}

/// One output's classes: per batch item (the first dimension, when the model batches) the `count`
/// highest values, highest first (equal values in index order), shape `[batch, k]` or `[k]`.
fn classify(output: &Tensor, count: u32, io: &IoSpec) -> Result<Tensor, InferError> {
    let unsupported = || {
        InferError::invalid(format!(
            "class result not available for output due to unsupported type '{}'",
            output.datatype.wire_name()
        ))
    };
    let size = match output.datatype {
        DataType::Bool | DataType::Fp16 | DataType::Bf16 | DataType::Bytes => return Err(unsupported()),
        dt => dt.element_size().ok_or_else(unsupported)?,
    };
    let batch = match output.shape.first() {
        Some(&b) if io.max_batch_size > 0 => Some(b.max(0) as usize),
        _ => None,
    };
    let skip = usize::from(batch.is_some());
    let per_item: usize = output.shape.iter().skip(skip).map(|d| (*d).max(0) as usize).product();
    if per_item > MAX_ELEMENTS {
        return Err(InferError::invalid("classification output tensor too large"));
    }
    let k = per_item.min(count as usize);
    let mut data = Vec::new();
    for item in 0..batch.unwrap_or(1).max(1) {
        // A tensor shorter than its shape says (which validation does not let through) has no
        // classes for the items it lacks, as tritonserver treats it.
        let bytes = output.data.get(item * per_item * size..(item + 1) * per_item * size).unwrap_or(&[]);
        for (value, index) in top(output.datatype, bytes, k) {
            let class = match io.labels.get(&output.name, index) {
                Some(label) => format!("{value}:{index}:{label}"),
                None => format!("{value}:{index}"),
            };
            data.extend_from_slice(&(class.len() as u32).to_le_bytes());
            data.extend_from_slice(class.as_bytes());
        }
    }
    let mut shape: Vec<i64> = batch.map(|b| b as i64).into_iter().collect();
    shape.push(k as i64);
    Ok(Tensor { name: output.name.clone(), datatype: DataType::Bytes, shape, data: Bytes::from(data) })
}

/// The `k` highest of `bytes` (elements of `datatype`), highest first: each value as tritonserver
/// writes it, and its index.
fn top(datatype: DataType, bytes: &[u8], k: usize) -> Vec<(String, usize)> {
    macro_rules! ranked {
        ($t:ty, $cmp:expr, $fmt:expr) => {{
            let values: Vec<$t> = bytes
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunks of the element size")))
                .collect();
            let mut order: Vec<usize> = (0..values.len()).collect();
            let cmp: fn(&$t, &$t) -> Ordering = $cmp;
            // Stable: equal values keep their index order, so the answer does not vary.
            order.sort_by(|a, b| cmp(&values[*b], &values[*a]));
            order.into_iter().take(k).map(|i| ($fmt(values[i]), i)).collect()
        }};
    }
    match datatype {
        DataType::Uint8 => ranked!(u8, u8::cmp, |v: u8| v.to_string()),
        DataType::Uint16 => ranked!(u16, u16::cmp, |v: u16| v.to_string()),
        DataType::Uint32 => ranked!(u32, u32::cmp, |v: u32| v.to_string()),
        DataType::Uint64 => ranked!(u64, u64::cmp, |v: u64| v.to_string()),
        DataType::Int8 => ranked!(i8, i8::cmp, |v: i8| v.to_string()),
        DataType::Int16 => ranked!(i16, i16::cmp, |v: i16| v.to_string()),
        DataType::Int32 => ranked!(i32, i32::cmp, |v: i32| v.to_string()),
        DataType::Int64 => ranked!(i64, i64::cmp, |v: i64| v.to_string()),
        DataType::Fp32 => ranked!(f32, f32::total_cmp, |v: f32| fixed(v as f64)),
        DataType::Fp64 => ranked!(f64, f64::total_cmp, fixed),
        _ => Vec::new(),
    }
}

/// A floating-point value as C's `%f` (`std::to_string`) writes it: six decimals, `nan`, `inf`.
fn fixed(v: f64) -> String {
    match v {
        v if v.is_nan() => if v.is_sign_negative() { "-nan" } else { "nan" }.to_string(),
        v if v.is_infinite() => if v < 0.0 { "-inf" } else { "inf" }.to_string(),
        v => format!("{v:.6}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;

    fn io(max_batch_size: i32) -> IoSpec {
        IoSpec::new(&ModelConfig { name: "m".into(), max_batch_size, ..Default::default() })
    }

    fn strings(t: &Tensor) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = &t.data[..];
        while rest.len() >= 4 {
            let n = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
            out.push(String::from_utf8(rest[4..4 + n].to_vec()).unwrap());
            rest = &rest[4 + n..];
        }
        out
    }

    fn tensor(datatype: DataType, shape: Vec<i64>, data: Vec<u8>) -> Tensor {
        Tensor { name: "OUT".into(), datatype, shape, data: data.into() }
    }

    #[test]
    fn each_batch_item_gets_its_highest_classes_highest_first() {
        let values: Vec<u8> = [3i32, 9, 1, 9, 7, -2, 0, 5].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = classify(&tensor(DataType::Int32, vec![2, 4], values.clone()), 3, &io(8)).unwrap();
        assert_eq!((t.datatype, t.shape.clone()), (DataType::Bytes, vec![2, 3]));
        // Equal values keep their index order.
        assert_eq!(strings(&t), ["9:1", "9:3", "3:0", "7:0", "5:3", "0:2"]);
        // A model that does not batch ranks the whole tensor; more classes than elements gives all.
        let t = classify(&tensor(DataType::Int32, vec![2, 4], values), 20, &io(0)).unwrap();
        assert_eq!(t.shape, vec![8]);
        assert_eq!(strings(&t)[..3], ["9:1", "9:3", "7:4"]);
    }

    #[test]
    fn values_are_written_as_tritonserver_writes_them() {
        let values: Vec<u8> = [0.25f32, f32::NAN, -1.5, f32::INFINITY].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = classify(&tensor(DataType::Fp32, vec![4], values), 4, &io(0)).unwrap();
        assert_eq!(strings(&t), ["nan:1", "inf:3", "0.250000:0", "-1.500000:2"]);
        let t = classify(&tensor(DataType::Uint8, vec![1, 3], vec![200, 7, 255]), 2, &io(4)).unwrap();
        assert_eq!(strings(&t), ["255:2", "200:0"]);
    }

    #[test]
    fn unsupported_types_and_huge_outputs_are_refused() {
        for dt in [DataType::Bool, DataType::Fp16, DataType::Bytes] {
            let e = classify(&tensor(dt, vec![1], vec![0; 4]), 1, &io(0)).unwrap_err();
            assert_eq!(
                e.message,
                format!("class result not available for output due to unsupported type '{}'", dt.wire_name())
            );
        }
        let e = classify(&tensor(DataType::Uint8, vec![1_000_001], vec![0; 1_000_001]), 1, &io(0)).unwrap_err();
        assert_eq!(e.message, "classification output tensor too large");
    }

    #[test]
    fn each_protocol_checks_the_count_its_own_way() {
        assert_eq!(requested(Wire::Http, &ParamValue::Int64(3), false).unwrap(), Some(3));
        assert_eq!(requested(Wire::Http, &ParamValue::Int64(0), false).unwrap(), None);
        assert!(requested(Wire::Http, &ParamValue::Int64(-1), false).unwrap_err().message.starts_with("Unable to set"));
        assert!(requested(Wire::Http, &ParamValue::String("3".into()), false).is_err());
        assert_eq!(requested(Wire::Grpc, &ParamValue::Int64(2), false).unwrap(), Some(2));
        assert!(requested(Wire::Grpc, &ParamValue::Int64(0), false).unwrap_err().message.contains("expected >= 0"));
        assert!(requested(Wire::Grpc, &ParamValue::Uint64(2), false).unwrap_err().message.contains("int64_param"));
        let e = requested(Wire::Grpc, &ParamValue::Int64(2), true).unwrap_err();
        assert_eq!(e.message, "Output can't set both 'shared_memory_region' and 'classification'");
    }
}
