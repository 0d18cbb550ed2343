//! Auto-completing an ONNX model's configuration from the model, as Triton's ONNX Runtime backend
//! does when auto-complete is on (tritonserver's default; `--disable-auto-complete-config` or
//! `--strict-model-config=true` turn it off). Nothing is completed when the configuration lists
//! both inputs and outputs; otherwise:
//!
//! - the model batches when every input and output has a variable first dimension: then
//!   `max_batch_size` 0 becomes the default (4), and above 1 with no scheduler dynamic batching is
//!   switched on; a model that does not batch with a non-zero `max_batch_size` is refused;
//! - the missing list (inputs or outputs) is the model's own, with their datatypes and dims (less
//!   the batch dimension; a scalar is `dims: [ 1 ]`, with an empty reshape when batching), sequence
//!   control and implicit-state tensors excepted.
use std::path::Path;

use ort::value::{TensorElementType, ValueType};

use crate::config::ModelConfig;
use crate::config::schema::model_config::SchedulingChoice;
use crate::config::schema::{DataType as ConfigType, ModelDynamicBatching, ModelInput, ModelOutput};
use crate::load_error::OnnxError;
use crate::proto::inference::ModelTensorReshape;

/// tritonserver's `--backend-config=default-max-batch-size` default.
const DEFAULT_MAX_BATCH_SIZE: i32 = 4;

pub(super) fn config_type(ty: TensorElementType) -> Option<ConfigType> {
    Some(match ty {
        TensorElementType::Bool => ConfigType::TypeBool,
        TensorElementType::Uint8 => ConfigType::TypeUint8,
        TensorElementType::Int8 => ConfigType::TypeInt8,
        TensorElementType::Uint16 => ConfigType::TypeUint16,
        TensorElementType::Int16 => ConfigType::TypeInt16,
        TensorElementType::Uint32 => ConfigType::TypeUint32,
        TensorElementType::Int32 => ConfigType::TypeInt32,
        TensorElementType::Uint64 => ConfigType::TypeUint64,
        TensorElementType::Int64 => ConfigType::TypeInt64,
        TensorElementType::Float16 => ConfigType::TypeFp16,
        TensorElementType::Bfloat16 => ConfigType::TypeBf16,
        TensorElementType::Float32 => ConfigType::TypeFp32,
        TensorElementType::Float64 => ConfigType::TypeFp64,
        TensorElementType::String => ConfigType::TypeString,
        _ => return None,
    })
}

/// (name, datatype, dims) of a session's inputs or outputs.
pub(super) type Outlets = Vec<(String, ConfigType, Vec<i64>)>;

fn outlets(list: &[ort::value::Outlet]) -> Result<Outlets, OnnxError> {
    list.iter()
        .map(|o| match o.dtype() {
            ValueType::Tensor { ty, shape, .. } => {
                let dt = config_type(*ty)
                    .ok_or_else(|| OnnxError::UnservableElement { name: o.name().to_string(), element: *ty })?;
                Ok((o.name().to_string(), dt, shape.iter().copied().collect()))
            }
            other => Err(OnnxError::NotATensor { name: o.name().to_string(), value: Box::new(other.clone()) }),
        })
        .collect()
}

/// The tensors of a session as the load-time checks compare them: like [`outlets`], but a value
/// that is not a tensor, or of an element type Nereus cannot serve, is listed with no datatype
/// (`TYPE_INVALID`) rather than refused, so that only a configuration naming it fails.
pub(super) fn described<'a>(list: impl IntoIterator<Item = (&'a str, &'a ValueType)>) -> Outlets {
    list.into_iter()
        .map(|(name, dtype)| match dtype {
            ValueType::Tensor { ty, shape, .. } => {
                (name.to_string(), config_type(*ty).unwrap_or(ConfigType::TypeInvalid), shape.iter().copied().collect())
            }
            _ => (name.to_string(), ConfigType::TypeInvalid, Vec::new()),
        })
        .collect()
}

/// Fills in what the configuration leaves out from `model_file`'s inputs and outputs.
pub fn complete(config: &mut ModelConfig, model_file: &Path, library: Option<&Path>) -> Result<(), OnnxError> {
    if (!config.input.is_empty() || !config.batch_input.is_empty()) && !config.output.is_empty() {
        tracing::info!(
            "skipping model configuration auto-complete for '{}': inputs and outputs already specified",
            config.name
        );
        return Ok(());
    }
    let environment = super::runtime(library)?;
    let session = ort::session::Session::builder(environment)
        .and_then(|mut b| b.commit_from_file(model_file))
        .map_err(|error| OnnxError::AutocompleteUnreadable { path: model_file.to_path_buf(), error })?;
    let (inputs, outputs) = (outlets(session.inputs())?, outlets(session.outputs())?);

    // Tensors the sequence batcher provides are not model inputs or outputs to clients.
    let mut internal: Vec<String> = Vec::new();
    if let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice {
        internal.extend(sb.control_input.iter().map(|c| c.name.clone()));
        internal.extend(sb.state.iter().flat_map(|s| [s.input_name.clone(), s.output_name.clone()]));
    }
    let inputs: Outlets = inputs.into_iter().filter(|(n, ..)| !internal.contains(n)).collect();
    let outputs: Outlets = outputs.into_iter().filter(|(n, ..)| !internal.contains(n)).collect();

    let batchable = inputs.iter().chain(&outputs).all(|(_, _, dims)| dims.first() == Some(&-1));
    if batchable {
        if config.max_batch_size == 0 {
            config.max_batch_size = DEFAULT_MAX_BATCH_SIZE;
            tracing::warn!(
                "autofilled max_batch_size to {DEFAULT_MAX_BATCH_SIZE} for model '{}' since batching is supporrted \
                 but no max_batch_size is specified in model configuration. Must specify max_batch_size to utilize \
                 autofill with a larger max batch size",
                config.name
            );
        }
        if config.max_batch_size > 1 && config.scheduling_choice.is_none() {
            config.scheduling_choice = Some(SchedulingChoice::DynamicBatching(ModelDynamicBatching::default()));
        }
    } else if config.max_batch_size != 0 {
        return Err(OnnxError::AutofillBatching { model: config.name.clone() });
    }
    let batching = config.max_batch_size > 0;
    // The dims clients see: less the batch dimension; a scalar is [1], reshaped to nothing when
    // the model batches.
    let shape = |dims: &[i64]| -> (Vec<i64>, Option<ModelTensorReshape>) {
        let inner = if batching { dims.get(1..).unwrap_or(&[]) } else { dims };
        match inner {
            [] => (vec![1], batching.then(ModelTensorReshape::default)),
            inner => (inner.to_vec(), None),
        }
    };
    if config.input.is_empty() {
        config.input = inputs
            .iter()
            .map(|(name, dt, dims)| {
                let (dims, reshape) = shape(dims);
                ModelInput { name: name.clone(), data_type: *dt as i32, dims, reshape, ..Default::default() }
            })
            .collect();
    }
    if config.output.is_empty() {
        config.output = outputs
            .iter()
            .map(|(name, dt, dims)| {
                let (dims, reshape) = shape(dims);
                ModelOutput { name: name.clone(), data_type: *dt as i32, dims, reshape, ..Default::default() }
            })
            .collect();
    }
    Ok(())
}
