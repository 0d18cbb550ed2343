//! Batch assembly for native framework backends, which run one tensor per input for a whole batch:
//! the inputs of the batch's requests gathered along the batch dimension (the backend copies them
//! once, into its own tensor), and a batched output split back into per-request tensors without
//! copying. (Wasm backends receive the requests of a batch instead, as Triton's backend API hands
//! them over.)
use bytes::Bytes;

use crate::error::InferError;
use crate::request::{Job, Tensor};
use crate::tensor::{DataType, bytes_elements};

/// One input of a batch: the batched shape, and each request's bytes in batch order — not yet
/// copied, so that a backend converting them into its own tensor copies them exactly once.
#[derive(Debug)]
pub struct Gathered {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub parts: Vec<Bytes>,
}

/// Gathers input `name` of every job along the batch dimension. Every request must have it with
/// the same datatype; its non-batch dimensions must match unless `ragged` (`allow_ragged_batch`),
/// in which case the elements are concatenated into a 1-D tensor, as Triton hands ragged inputs to
/// a backend.
pub fn gather(jobs: &[Job], name: &str, ragged: bool) -> Result<Gathered, InferError> {
    fn input<'j>(job: &'j Job, name: &str) -> Result<&'j Tensor, InferError> {
        job.request
            .inputs
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| InferError::invalid(format!("input '{name}' is missing from a request of the batch")))
    }
    let first = input(jobs.first().ok_or_else(|| InferError::internal("gathering an empty batch"))?, name)?;
    let inner = first.shape.get(1..).unwrap_or(&[]);
    let mut parts = Vec::with_capacity(jobs.len());
    let (mut rows, mut elements) = (0i64, 0i64);
    for job in jobs {
        let t = input(job, name)?;
        if t.datatype != first.datatype {
            return Err(InferError::invalid(format!("input '{name}' has different datatypes across the batch")));
        }
        if !ragged && t.shape.get(1..).unwrap_or(&[]) != inner {
            return Err(InferError::invalid(format!("input '{name}' has different shapes across the batch")));
        }
        rows += t.shape.first().copied().unwrap_or(1);
        elements += t.shape.iter().product::<i64>();
        parts.push(t.data.clone());
    }
    let shape = match (ragged, jobs.len()) {
        (true, _) => vec![elements],
        (false, 1) => first.shape.clone(),
        (false, _) => std::iter::once(rows).chain(inner.iter().copied()).collect(),
    };
    Ok(Gathered { name: name.to_string(), datatype: first.datatype, shape, parts })
}

/// Splits a batched `output` (first dimension = the batch's total batch size) into one tensor per
/// request, each `batch_sizes[i]` rows; the parts share the output's buffer.
pub fn scatter(output: &Tensor, batch_sizes: &[i64]) -> Result<Vec<Tensor>, InferError> {
    let total: i64 = batch_sizes.iter().sum();
    let rows = output.shape.first().copied().unwrap_or(0);
    if rows != total {
        return Err(InferError::internal(format!("output '{}' has {rows} rows for a batch of {total}", output.name)));
    }
    let per_row: i64 = output.shape.get(1..).unwrap_or(&[]).iter().product();
    let offsets = row_offsets(output, per_row as usize, total as usize)?;
    let mut parts = Vec::with_capacity(batch_sizes.len());
    let mut row = 0usize;
    for &b in batch_sizes {
        let (start, end) = (offsets[row], offsets[row + b as usize]);
        let mut shape = output.shape.clone();
        shape[0] = b;
        parts.push(Tensor {
            name: output.name.clone(),
            datatype: output.datatype,
            shape,
            data: output.data.slice(start..end),
        });
        row += b as usize;
    }
    Ok(parts)
}

/// The byte offset where each row starts, plus the end: fixed strides for numeric types, the
/// length prefixes walked for BYTES.
fn row_offsets(output: &Tensor, per_row: usize, rows: usize) -> Result<Vec<usize>, InferError> {
    let malformed =
        || InferError::internal(format!("output '{}' does not hold as many elements as its shape", output.name));
    match output.datatype.element_size() {
        Some(size) => {
            let stride = per_row * size;
            if output.data.len() != stride * rows {
                return Err(malformed());
            }
            Ok((0..=rows).map(|r| r * stride).collect())
        }
        None => {
            let mut offsets = vec![0];
            let mut at = 0usize;
            let mut elements = bytes_elements(&output.data);
            for _ in 0..rows {
                for _ in 0..per_row {
                    let e = elements.next().ok_or_else(malformed)?.map_err(|_| malformed())?;
                    at += 4 + e.len();
                }
                offsets.push(at);
            }
            if at != output.data.len() {
                return Err(malformed());
            }
            Ok(offsets)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{InferenceRequest, ResponseSender};
    use crate::stats::ModelStats;
    use bytes::BytesMut;
    use std::sync::Arc;
    use std::time::Instant;

    fn job(shape: Vec<i64>, values: &[i32]) -> Job {
        let (sender, _rx) = ResponseSender::unary(Arc::new(ModelStats::default()));
        let data = Bytes::from(values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        let input = Tensor { name: "X".into(), datatype: DataType::Int32, shape, data };
        Job {
            request: InferenceRequest { inputs: vec![input], ..Default::default() },
            sender,
            enqueued: Instant::now(),
        }
    }

    /// The gathered parts as one tensor, to look at.
    fn concat(g: Gathered) -> Tensor {
        let mut data = BytesMut::new();
        g.parts.iter().for_each(|p| data.extend_from_slice(p));
        let data = if g.parts.len() == 1 { g.parts[0].clone() } else { data.freeze() };
        Tensor { name: g.name, datatype: g.datatype, shape: g.shape, data }
    }

    fn i32s(b: &[u8]) -> Vec<i32> {
        b.chunks(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    #[test]
    fn gathers_along_the_batch_dimension_and_scatters_back() {
        let jobs = [job(vec![1, 2], &[1, 2]), job(vec![2, 2], &[3, 4, 5, 6])];
        let g = gather(&jobs, "X", false).map(concat).unwrap();
        assert_eq!(g.shape, [3, 2]);
        assert_eq!(i32s(&g.data), [1, 2, 3, 4, 5, 6]);
        let parts = scatter(&g, &[1, 2]).unwrap();
        assert_eq!(parts[0].shape, [1, 2]);
        assert_eq!(i32s(&parts[1].data), [3, 4, 5, 6]);
        assert_eq!(parts[1].shape, [2, 2]);
        assert!(scatter(&g, &[1, 1]).is_err());
    }

    #[test]
    fn different_shapes_need_ragged_batching() {
        let jobs = [job(vec![1, 2], &[1, 2]), job(vec![1, 3], &[3, 4, 5])];
        assert!(gather(&jobs, "X", false).unwrap_err().message.contains("different shapes"));
        let g = gather(&jobs, "X", true).map(concat).unwrap();
        assert_eq!(g.shape, [5]);
        assert_eq!(i32s(&g.data), [1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_single_request_is_not_copied_and_bytes_outputs_split_by_element() {
        let jobs = [job(vec![1, 2], &[7, 8])];
        let g = gather(&jobs, "X", false).map(concat).unwrap();
        assert_eq!(g.data.as_ptr(), jobs[0].request.inputs[0].data.as_ptr());

        let mut data = Vec::new();
        for s in ["a", "bcd", "", "ef"] {
            data.extend_from_slice(&(s.len() as u32).to_le_bytes());
            data.extend_from_slice(s.as_bytes());
        }
        let out = Tensor { name: "S".into(), datatype: DataType::Bytes, shape: vec![2, 2], data: Bytes::from(data) };
        let parts = scatter(&out, &[1, 1]).unwrap();
        assert_eq!(&parts[0].data[..], b"\x01\0\0\0a\x03\0\0\0bcd");
        assert_eq!(&parts[1].data[..], b"\0\0\0\0\x02\0\0\0ef");
    }
}
