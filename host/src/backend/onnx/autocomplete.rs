//! Auto-completing an ONNX model's configuration from the model, as Triton's ONNX Runtime backend
//! does when auto-complete is on (tritonserver's default; `--disable-auto-complete-config` or
//! `--strict-model-config=true` turn it off):
//!
//! - no `input` / `output` given: the model's own, with their datatypes and dims (sequence control
//!   and implicit-state tensors excepted);
//! - `max_batch_size` 0 and every input and output has a variable first dimension: the model batches,
//!   so `max_batch_size` becomes the default (4) and that first dimension is the batch dimension;
//! - `max_batch_size` > 1 and no scheduler: dynamic batching is switched on.
use std::path::Path;

use ort::value::{TensorElementType, ValueType};

use crate::config::ModelConfig;
use crate::config::schema::model_config::SchedulingChoice;
use crate::config::schema::{DataType as ConfigType, ModelDynamicBatching, ModelInput, ModelOutput};
use crate::load_error::OnnxError;

/// tritonserver's `--backend-config=default-max-batch-size` default.
const DEFAULT_MAX_BATCH_SIZE: i32 = 4;

fn config_type(ty: TensorElementType) -> Option<ConfigType> {
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
type Outlets = Vec<(String, ConfigType, Vec<i64>)>;

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

/// Fills in what the configuration leaves out from `model_file`'s inputs and outputs.
pub fn complete(config: &mut ModelConfig, model_file: &Path, library: Option<&Path>) -> Result<(), OnnxError> {
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

    if config.max_batch_size == 0 {
        let batchable = |list: &Outlets| list.iter().all(|(_, _, dims)| dims.first() == Some(&-1));
        let listed_without_batch = config.input.iter().any(|i| !i.dims.is_empty());
        if !inputs.is_empty() && batchable(&inputs) && batchable(&outputs) && !listed_without_batch {
            config.max_batch_size = DEFAULT_MAX_BATCH_SIZE;
        }
    }
    let strip = |dims: &[i64]| -> Vec<i64> {
        let inner = if config.max_batch_size > 0 { dims.get(1..).unwrap_or(&[]) } else { dims };
        inner.to_vec()
    };
    if config.input.is_empty() {
        config.input = inputs
            .iter()
            .map(|(name, dt, dims)| ModelInput {
                name: name.clone(),
                data_type: *dt as i32,
                dims: strip(dims),
                ..Default::default()
            })
            .collect();
    }
    if config.output.is_empty() {
        config.output = outputs
            .iter()
            .map(|(name, dt, dims)| ModelOutput {
                name: name.clone(),
                data_type: *dt as i32,
                dims: strip(dims),
                ..Default::default()
            })
            .collect();
    }
    if config.max_batch_size > 1 && config.scheduling_choice.is_none() {
        config.scheduling_choice = Some(SchedulingChoice::DynamicBatching(ModelDynamicBatching::default()));
    }
    if config.backend.is_empty() && config.platform.is_empty() {
        config.platform = "onnxruntime_onnx".into();
    }
    Ok(())
}
