//! Ragged batching's extra tensors, for native framework backends: the batch inputs the server makes
//! from the batch it formed (`batch_input` in the configuration: element counts, offsets, item
//! shapes of a source input), and batch outputs scattered back to each request in the shape of its
//! source input (`batch_output` `BATCH_SCATTER_WITH_INPUT_SHAPE`). The values and shapes are those
//! of Triton's backend library (`BackendInputCollector::ProcessBatchInput`, `BatchInputShape`).
use bytes::Bytes;

use super::batch::Gathered;
use crate::config::ModelConfig;
use crate::error::InferError;
use crate::proto::inference::batch_input::Kind;
use crate::request::{Job, Tensor};
use crate::tensor::DataType;

/// A model's batch inputs and batch outputs, from its (validated) configuration.
#[derive(Clone, Debug, Default)]
pub struct BatchIo {
    inputs: Vec<BatchInput>,
    /// (output, the input whose shape each request's part takes)
    outputs: Vec<(String, String)>,
}

#[derive(Clone, Debug)]
struct BatchInput {
    kind: Kind,
    targets: Vec<String>,
    datatype: DataType,
    source: String,
}

impl BatchIo {
    /// Validation has checked the kinds, datatypes (INT32 or FP32) and one source each.
    pub fn new(config: &ModelConfig) -> Self {
        let inputs = config
            .batch_input
            .iter()
            .filter_map(|b| {
                Some(BatchInput {
                    kind: Kind::try_from(b.kind).ok()?,
                    targets: b.target_name.clone(),
                    datatype: DataType::from_config(b.data_type)?,
                    source: b.source_input.first()?.clone(),
                })
            })
            .collect();
        let outputs = config
            .batch_output
            .iter()
            .filter_map(|b| Some((b.target_name.clone(), b.source_input.first()?.clone())))
            .flat_map(|(targets, source)| targets.into_iter().map(move |t| (t, source.clone())))
            .collect();
        BatchIo { inputs, outputs }
    }

    /// The batch inputs of `jobs`, one tensor per target name.
    pub fn inputs(&self, jobs: &[Job]) -> Result<Vec<Gathered>, InferError> {
        let mut out = Vec::new();
        for b in &self.inputs {
            let shapes = jobs
                .iter()
                .map(|j| {
                    j.request.inputs.iter().find(|t| t.name == b.source).map(|t| t.shape.as_slice()).ok_or_else(|| {
                        InferError::invalid(format!(
                            "batch input '{}' needs input '{}', which a request of the batch lacks",
                            b.targets.join(", "),
                            b.source
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let (shape, values) = batch_input(b.kind, &shapes);
            let data = encode(b.datatype, &values);
            for target in &b.targets {
                out.push(Gathered {
                    name: target.clone(),
                    datatype: b.datatype,
                    shape: shape.clone(),
                    parts: vec![data.clone()],
                });
            }
        }
        Ok(out)
    }

    /// The input `output` is scattered by, when it is a batch output.
    pub fn scatter_source(&self, output: &str) -> Option<&str> {
        self.outputs.iter().find(|(o, _)| o == output).map(|(_, s)| s.as_str())
    }
}

/// Element count of a shape.
fn elements(shape: &[i64]) -> i64 {
    shape.iter().product()
}

/// One batch input's shape and values for requests whose source input has `shapes` (each with its
/// batch dimension first).
fn batch_input(kind: Kind, shapes: &[&[i64]]) -> (Vec<i64>, Vec<i64>) {
    let counts = shapes.iter().map(|s| elements(s));
    let accumulated: Vec<i64> = counts
        .clone()
        .scan(0, |sum, n| {
            *sum += n;
            Some(*sum)
        })
        .collect();
    let batch = |s: &[i64]| s.first().copied().unwrap_or(1).max(0);
    match kind {
        Kind::BatchElementCount => (vec![shapes.len() as i64], counts.collect()),
        Kind::BatchAccumulatedElementCount => (vec![shapes.len() as i64], accumulated),
        Kind::BatchAccumulatedElementCountWithZero => {
            (vec![shapes.len() as i64 + 1], std::iter::once(0).chain(accumulated).collect())
        }
        // Only the shape carries information: the largest element count of one request.
        Kind::BatchMaxElementCountAsShape => {
            let max = counts.max().unwrap_or(0);
            (vec![max], vec![0; max as usize])
        }
        // Each batch item's shape without the batch dimension, one row per item.
        Kind::BatchItemShape | Kind::BatchItemShapeFlatten => {
            let rank = shapes.first().map_or(0, |s| s.len().saturating_sub(1)) as i64;
            let mut values = Vec::new();
            let mut items = 0;
            for s in shapes {
                for _ in 0..batch(s) {
                    values.extend_from_slice(s.get(1..).unwrap_or(&[]));
                    items += 1;
                }
            }
            match kind {
                Kind::BatchItemShape => (vec![items, rank], values),
                _ => (vec![values.len() as i64], values),
            }
        }
    }
}

fn encode(datatype: DataType, values: &[i64]) -> Bytes {
    let bytes: Vec<u8> = match datatype {
        DataType::Fp32 => values.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect(),
        _ => values.iter().flat_map(|v| (*v as i32).to_le_bytes()).collect(),
    };
    Bytes::from(bytes)
}

/// Splits a batch output into one part per request, each as many elements as the request's
/// `source` input and in its shape; the parts share the output's buffer.
pub fn scatter_with_input_shape(output: &Tensor, source: &str, jobs: &[Job]) -> Result<Vec<Tensor>, InferError> {
    let size = output.datatype.element_size().ok_or_else(|| {
        InferError::internal(format!(
            "batch output '{}' cannot be {}: its elements have no fixed size",
            output.name, output.datatype
        ))
    })?;
    let mut parts = Vec::with_capacity(jobs.len());
    let mut at = 0usize;
    for job in jobs {
        let shape = job.request.inputs.iter().find(|t| t.name == source).map(|t| t.shape.clone()).ok_or_else(|| {
            InferError::internal(format!("batch output '{}' has no source input '{source}'", output.name))
        })?;
        let len = elements(&shape).max(0) as usize * size;
        let data = output.data.get(at..at + len).ok_or_else(|| {
            InferError::internal(format!(
                "batch output '{}' holds {} bytes, fewer than its source input '{source}' needs",
                output.name,
                output.data.len()
            ))
        })?;
        parts.push(Tensor {
            name: output.name.clone(),
            datatype: output.datatype,
            shape,
            data: output.data.slice_ref(data),
        });
        at += len;
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_inputs_describe_the_batch_as_tritons_backends_see_it() {
        let ragged: [&[i64]; 4] = [&[1, 2], &[1, 4], &[1, 1], &[1, 3]];
        assert_eq!(batch_input(Kind::BatchElementCount, &ragged), (vec![4], vec![2, 4, 1, 3]));
        assert_eq!(batch_input(Kind::BatchAccumulatedElementCount, &ragged), (vec![4], vec![2, 6, 7, 10]));
        assert_eq!(batch_input(Kind::BatchAccumulatedElementCountWithZero, &ragged), (vec![5], vec![0, 2, 6, 7, 10]));
        assert_eq!(batch_input(Kind::BatchMaxElementCountAsShape, &ragged).0, vec![4]);
        let items: [&[i64]; 4] = [&[1, 4, 1], &[1, 1, 2], &[1, 1, 2], &[1, 2, 2]];
        assert_eq!(batch_input(Kind::BatchItemShapeFlatten, &items), (vec![8], vec![4, 1, 1, 2, 1, 2, 2, 2]));
        let items: [&[i64]; 3] = [&[2, 1, 2], &[1, 1, 2], &[1, 2, 2]];
        assert_eq!(batch_input(Kind::BatchItemShape, &items), (vec![4, 2], vec![1, 2, 1, 2, 1, 2, 2, 2]));
        assert_eq!(encode(DataType::Fp32, &[2]), Bytes::from(2f32.to_le_bytes().to_vec()));
    }
}
