//! What a `sequence_batching { … }` configuration asks for, read and checked once at load: the
//! strategy, the control tensors and the implicit state, with the tensors the scheduler adds to
//! every request it hands to a backend.
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;

use crate::config::ModelConfig;
use crate::config::schema::model_config::SchedulingChoice;
use crate::config::schema::model_sequence_batching::{StrategyChoice, control::Kind, initial_state::StateData};
use crate::error::InferError;
use crate::load_error::SequenceError;
use crate::request::{CorrelationId, Tensor};
use crate::tensor::DataType;

/// The most bytes one sequence state may hold (1 GiB; tritonserver sets no bound, and a
/// configuration naming more would only fail, or abort the process, allocating it).
pub const MAX_STATE_BYTES: u64 = 1 << 30;

/// Triton's default `max_sequence_idle_microseconds`.
const DEFAULT_IDLE: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub enum Strategy {
    /// One batch slot per sequence; batch position = slot.
    Direct { min_utilization: f32, max_queue_delay: Duration },
    /// Dynamic batches from the oldest requests of each instance's candidate sequences.
    Oldest { preferred: Vec<usize>, max_queue_delay: Duration, preserve_ordering: bool },
}

/// A boolean control tensor (START, END, READY) and the bytes of its false and true values
/// (shared by every request's tensor, not allocated per request).
#[derive(Clone, Debug)]
pub struct BoolControl {
    pub name: String,
    pub datatype: DataType,
    pub values: [Bytes; 2],
}

#[derive(Clone, Debug, Default)]
pub struct Controls {
    pub start: Option<BoolControl>,
    pub end: Option<BoolControl>,
    pub ready: Option<BoolControl>,
    pub corrid: Option<(String, DataType)>,
}

/// One implicit state: fed to the backend as input `input`, read back from its output `output`.
#[derive(Clone, Debug)]
pub struct StateSpec {
    pub input: String,
    pub output: String,
    pub datatype: DataType,
    /// The value a sequence starts with (without the batch dimension).
    pub initial: Tensor,
}

#[derive(Clone, Debug)]
pub struct SequenceRules {
    pub strategy: Strategy,
    /// Sequences each instance holds at once: `max_batch_size` slots (direct) or
    /// `max_candidate_sequences` (oldest).
    pub slots_per_instance: usize,
    pub max_batch_size: usize,
    pub idle: Duration,
    pub controls: Controls,
    pub states: Vec<StateSpec>,
    /// Whether tensors carry a batch dimension (`max_batch_size` > 0).
    pub batching: bool,
    /// Inputs with variable dims that are not `allow_ragged_batch`: requests batched together
    /// must give them equal shapes (tritonserver's `enforce_equal_shape_tensors`).
    pub equal_shape_inputs: Vec<String>,
    /// Whether the model has optional inputs: requests batched together must give the same ones
    /// (a batch's input covers every row or none), as the dynamic batcher's rule.
    pub optional_inputs: bool,
}

impl SequenceRules {
    /// Reads the rules of a model with `sequence_batching`; `None` for any other model. An error
    /// is the reason the model is unavailable.
    pub fn from_config(config: &ModelConfig, model_dir: &Path) -> Result<Option<Self>, SequenceError> {
        let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice else { return Ok(None) };
        let max_batch_size = config.max_batch_size.max(1) as usize;
        let (strategy, slots_per_instance) = match &sb.strategy_choice {
            Some(StrategyChoice::Oldest(o)) => {
                if o.max_candidate_sequences < 0 {
                    return Err(SequenceError::CandidateSequences);
                }
                let mut preferred: Vec<usize> = o.preferred_batch_size.iter().map(|p| *p as usize).collect();
                if let Some(p) = preferred.iter().find(|p| **p == 0 || **p > max_batch_size) {
                    return Err(SequenceError::PreferredBatchSize(*p));
                }
                if preferred.is_empty() {
                    preferred.push(max_batch_size);
                }
                preferred.sort_unstable();
                let strategy = Strategy::Oldest {
                    preferred,
                    max_queue_delay: Duration::from_micros(o.max_queue_delay_microseconds),
                    preserve_ordering: o.preserve_ordering,
                };
                (strategy, o.max_candidate_sequences.max(1) as usize)
            }
            Some(StrategyChoice::Direct(d)) => (
                Strategy::Direct {
                    min_utilization: d.minimum_slot_utilization,
                    max_queue_delay: Duration::from_micros(d.max_queue_delay_microseconds),
                },
                max_batch_size,
            ),
            // Neither given: direct, as Triton.
            None => (Strategy::Direct { min_utilization: 0.0, max_queue_delay: Duration::ZERO }, max_batch_size),
        };
        let idle = match sb.max_sequence_idle_microseconds {
            0 => DEFAULT_IDLE,
            us => Duration::from_micros(us),
        };

        let taken = |name: &str| config.input.iter().any(|i| i.name == name);
        let mut controls = Controls::default();
        for input in &sb.control_input {
            if taken(&input.name) {
                return Err(SequenceError::ControlNameTaken(input.name.clone()));
            }
            let [control] = input.control.as_slice() else {
                return Err(SequenceError::ControlCount(input.name.clone()));
            };
            let kind = Kind::try_from(control.kind).map_err(|_| SequenceError::ControlKind(input.name.clone()))?;
            let slot = match kind {
                Kind::ControlSequenceStart => &mut controls.start,
                Kind::ControlSequenceEnd => &mut controls.end,
                Kind::ControlSequenceReady => &mut controls.ready,
                Kind::ControlSequenceCorrid => {
                    let dt = DataType::from_config(control.data_type)
                        .filter(|d| {
                            matches!(
                                d,
                                DataType::Uint64
                                    | DataType::Int64
                                    | DataType::Uint32
                                    | DataType::Int32
                                    | DataType::Bytes
                            )
                        })
                        .ok_or_else(|| SequenceError::CorridDatatype(input.name.clone()))?;
                    if controls.corrid.replace((input.name.clone(), dt)).is_some() {
                        return Err(SequenceError::CorridTwice);
                    }
                    continue;
                }
            };
            let (datatype, values) = match (
                control.int32_false_true.as_slice(),
                control.fp32_false_true.as_slice(),
                control.bool_false_true.as_slice(),
            ) {
                ([f, t], [], []) => (DataType::Int32, [f.to_le_bytes().to_vec(), t.to_le_bytes().to_vec()]),
                ([], [f, t], []) => (DataType::Fp32, [f.to_le_bytes().to_vec(), t.to_le_bytes().to_vec()]),
                ([], [], [f, t]) => (DataType::Bool, [vec![u8::from(*f)], vec![u8::from(*t)]]),
                _ => return Err(SequenceError::ControlValues(input.name.clone())),
            };
            let values = values.map(Bytes::from);
            if slot.replace(BoolControl { name: input.name.clone(), datatype, values }).is_some() {
                return Err(SequenceError::ControlTwice(kind.as_str_name()));
            }
        }

        let mut states = Vec::new();
        for st in &sb.state {
            let datatype = DataType::from_config(st.data_type)
                .ok_or_else(|| SequenceError::StateDatatype(st.input_name.clone()))?;
            if st.input_name.is_empty() || st.output_name.is_empty() {
                return Err(SequenceError::StateNames);
            }
            if taken(&st.input_name) {
                return Err(SequenceError::StateNameTaken(st.input_name.clone()));
            }
            let initial = initial_state(st, datatype, model_dir)?;
            states.push(StateSpec { input: st.input_name.clone(), output: st.output_name.clone(), datatype, initial });
        }
        Ok(Some(SequenceRules {
            strategy,
            slots_per_instance,
            max_batch_size,
            idle,
            controls,
            states,
            batching: config.max_batch_size > 0,
            equal_shape_inputs: config
                .input
                .iter()
                .filter(|i| i.dims.contains(&-1) && !i.allow_ragged_batch)
                .map(|i| i.name.clone())
                .collect(),
            optional_inputs: config.input.iter().any(|i| i.optional),
        }))
    }

    /// Whether any two requests may not run in one batch (see [`batch_together`](Self::batch_together)).
    pub fn constrains_batches(&self) -> bool {
        !self.equal_shape_inputs.is_empty() || self.optional_inputs
    }

    /// Whether the requests `a` and `b` may run in one batch: their inputs that must match in
    /// shape do, and they give the same optional inputs.
    pub fn batch_together(&self, a: &crate::request::InferenceRequest, b: &crate::request::InferenceRequest) -> bool {
        let shape = |r: &crate::request::InferenceRequest, name: &str| {
            r.inputs.iter().find(|t| t.name == name).map(|t| t.shape.clone())
        };
        if !self.equal_shape_inputs.iter().all(|name| shape(a, name) == shape(b, name)) {
            return false;
        }
        !self.optional_inputs || a.gives_the_same_inputs_as(b)
    }

    /// The shape of a per-request control tensor: one value per batch slot.
    fn control_shape(&self) -> Vec<i64> {
        if self.batching { vec![1, 1] } else { vec![1] }
    }

    /// The control tensors for one request: `ready` false for padding. `start`/`end` are its flags.
    pub fn control_tensors(&self, id: &CorrelationId, start: bool, end: bool, ready: bool) -> Vec<Tensor> {
        let mut out = Vec::with_capacity(4);
        let shape = self.control_shape();
        for (control, on) in [(&self.controls.start, start), (&self.controls.end, end), (&self.controls.ready, ready)] {
            if let Some(c) = control {
                let data = c.values[usize::from(on)].clone();
                out.push(Tensor { name: c.name.clone(), datatype: c.datatype, shape: shape.clone(), data });
            }
        }
        if let Some((name, datatype)) = &self.controls.corrid {
            let data = corrid_bytes(id, *datatype);
            out.push(Tensor { name: name.clone(), datatype: *datatype, shape, data });
        }
        out
    }

    /// Checks that a request's sequence id can be given to `model`'s CORRID control: a string id
    /// needs a TYPE_STRING control, a numeric one an integer control, with tritonserver's words
    /// (`InferenceRequest::ValidateCorrelationId`).
    pub fn check_id(&self, model: &str, id: &CorrelationId) -> Result<(), InferError> {
        let Some((name, expected)) = &self.controls.corrid else { return Ok(()) };
        let given = match id {
            CorrelationId::Text(_) if *expected != DataType::Bytes => DataType::Bytes,
            CorrelationId::Numeric(_) if *expected == DataType::Bytes => DataType::Uint64,
            _ => return Ok(()),
        };
        Err(InferError::invalid(format!(
            "sequence batching control '{name}' data-type is '{}', but model '{model}' expects '{}'",
            given.wire_name(),
            expected.wire_name()
        )))
    }

    /// A state's input tensor for one request: `value` (kept without a batch dimension) with the
    /// batch dimension added when the model batches.
    pub fn state_input(&self, spec: &StateSpec, value: &Tensor) -> Tensor {
        let mut shape = if self.batching { vec![1] } else { Vec::new() };
        shape.extend_from_slice(&value.shape);
        Tensor { name: spec.input.clone(), datatype: spec.datatype, shape, data: value.data.clone() }
    }

    /// Turns a state output a backend produced for one request into the value kept for the next
    /// request (the batch dimension dropped).
    pub fn state_value(&self, mut output: Tensor) -> Tensor {
        if self.batching && !output.shape.is_empty() {
            output.shape.remove(0);
        }
        output
    }
}

/// The CORRID control's value: the id in the configured type (a string id as a BYTES element;
/// [`SequenceRules::check_id`] lets no numeric id reach a TYPE_STRING control).
fn corrid_bytes(id: &CorrelationId, datatype: DataType) -> Bytes {
    let n = match id {
        CorrelationId::Numeric(n) => *n,
        _ => 0,
    };
    let bytes = match datatype {
        DataType::Uint64 => n.to_le_bytes().to_vec(),
        DataType::Int64 => (n as i64).to_le_bytes().to_vec(),
        DataType::Uint32 => (n as u32).to_le_bytes().to_vec(),
        DataType::Int32 => (n as i32).to_le_bytes().to_vec(),
        _ => {
            let text = match id {
                CorrelationId::Text(s) => s.clone(),
                CorrelationId::Numeric(n) => n.to_string(),
                CorrelationId::None => String::new(),
            };
            let mut b = (text.len() as u32).to_le_bytes().to_vec();
            b.extend_from_slice(text.as_bytes());
            b
        }
    };
    Bytes::from(bytes)
}

/// A state's initial value: `initial_state` from `zero_data` or a `data_file` under the model's
/// `initial_state/` folder, else zeros with every variable dimension taken as 1.
fn initial_state(
    st: &crate::config::schema::model_sequence_batching::State,
    datatype: DataType,
    model_dir: &Path,
) -> Result<Tensor, SequenceError> {
    let (dims, data_file) = match st.initial_state.as_slice() {
        [] => (st.dims.iter().map(|d| if *d < 0 { 1 } else { *d }).collect::<Vec<i64>>(), None),
        [init] => {
            if init.dims.iter().any(|d| *d < 0) {
                return Err(SequenceError::InitialDims(st.input_name.clone()));
            }
            match &init.state_data {
                Some(StateData::DataFile(f)) => (init.dims.clone(), Some(f.clone())),
                Some(StateData::ZeroData(_)) => (init.dims.clone(), None),
                None => return Err(SequenceError::InitialData(st.input_name.clone())),
            }
        }
        _ => return Err(SequenceError::InitialStates(st.input_name.clone())),
    };
    // Checked before anything is allocated: the dims are the configuration's, which a load
    // request may supply, and their product can overflow or name more memory than there is.
    let element_size = datatype.element_size().unwrap_or(4) as u64;
    let count = dims
        .iter()
        .try_fold(1u64, |n, d| n.checked_mul(u64::try_from(*d).ok()?))
        .filter(|n| n.checked_mul(element_size).is_some_and(|bytes| bytes <= MAX_STATE_BYTES))
        .ok_or_else(|| SequenceError::StateTooLarge {
            name: st.input_name.clone(),
            dims: dims.clone(),
            limit: MAX_STATE_BYTES,
        })? as usize;
    let data = match data_file {
        Some(file) => {
            if file.contains("..") || Path::new(&file).is_absolute() {
                return Err(SequenceError::DataFilePath(file));
            }
            let path = model_dir.join("initial_state").join(&file);
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                Err(source) => return Err(SequenceError::DataFileUnreadable { path, source }),
            };
            let expected = datatype.element_size().map(|s| s * count);
            if let Some(expected) = expected
                && bytes.len() != expected
            {
                return Err(SequenceError::DataFileSize { path, size: bytes.len(), dims, datatype, expected });
            }
            bytes
        }
        // Zeros; a BYTES element of zeros is an empty string (its 4-byte length prefix).
        None => vec![0u8; datatype.element_size().unwrap_or(4) * count],
    };
    Ok(Tensor { name: st.input_name.clone(), datatype, shape: dims, data: Bytes::from(data) })
}
