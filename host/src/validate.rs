//! Validation of requests against the model configuration before any backend runs, and of backend
//! outputs before any client sees them. Messages follow Triton's wording where Triton has one.
use std::sync::Arc;

use crate::config::ModelConfig;
use crate::error::InferError;
use crate::labels::OutputLabels;
use crate::request::{InferenceRequest, Tensor};
use crate::tensor::{DataType, count_bytes_elements, element_count, shape_string};

/// One input or output of a model, as the configuration declares it.
#[derive(Clone, Debug)]
pub struct IoTensor {
    pub name: String,
    pub datatype: DataType,
    pub dims: Vec<i64>,
    /// The shape the backend sees instead of `dims` (`reshape { shape: […] }`).
    pub reshape: Option<Vec<i64>>,
    pub optional: bool,
}

/// A model's inputs and outputs, precomputed from its configuration for the request path.
#[derive(Debug)]
pub struct IoSpec {
    pub model_name: Arc<str>,
    pub max_batch_size: i64,
    pub inputs: Vec<IoTensor>,
    pub outputs: Vec<IoTensor>,
    /// Implicit-state outputs (`sequence_batching { state […] }`): a backend may produce them
    /// though the configuration does not list them as outputs; the scheduler keeps them.
    pub state_outputs: Vec<IoTensor>,
    /// The outputs' class labels (`label_filename`), for the classification extension; read at
    /// load, empty until then.
    pub labels: Arc<OutputLabels>,
}

impl IoSpec {
    /// Builds the spec from a validated configuration (datatypes are known to be valid).
    pub fn new(config: &ModelConfig) -> Self {
        let tensor = |name: &str, dt: i32, dims: &[i64], reshape: Option<&Vec<i64>>, optional: bool| IoTensor {
            name: name.to_string(),
            datatype: DataType::from_config(dt).unwrap_or(DataType::Bytes),
            dims: dims.to_vec(),
            reshape: reshape.cloned(),
            optional,
        };
        IoSpec {
            model_name: config.name.as_str().into(),
            max_batch_size: config.max_batch_size as i64,
            inputs: config
                .input
                .iter()
                .map(|i| tensor(&i.name, i.data_type, &i.dims, i.reshape.as_ref().map(|r| &r.shape), i.optional))
                .collect(),
            outputs: config
                .output
                .iter()
                .map(|o| tensor(&o.name, o.data_type, &o.dims, o.reshape.as_ref().map(|r| &r.shape), false))
                .collect(),
            state_outputs: match &config.scheduling_choice {
                Some(crate::config::schema::model_config::SchedulingChoice::SequenceBatching(sb)) => sb
                    .state
                    .iter()
                    .filter(|st| !config.output.iter().any(|o| o.name == st.output_name))
                    .map(|st| tensor(&st.output_name, st.data_type, &st.dims, None, false))
                    .collect(),
                _ => Vec::new(),
            },
            labels: Arc::default(),
        }
    }

    pub fn output(&self, name: &str) -> Option<&IoTensor> {
        self.outputs.iter().find(|o| o.name == name)
    }

    /// An output a backend may produce: a configured output or an implicit-state output.
    pub fn produced(&self, name: &str) -> Option<&IoTensor> {
        self.output(name).or_else(|| self.state_outputs.iter().find(|o| o.name == name))
    }

    pub fn is_state_output(&self, name: &str) -> bool {
        self.state_outputs.iter().any(|o| o.name == name)
    }

    fn batching(&self) -> bool {
        self.max_batch_size > 0
    }
}

/// Whether `shape` has the configured `dims` (a -1 matches any size).
pub(crate) fn dims_match(dims: &[i64], shape: &[i64]) -> bool {
    dims.len() == shape.len() && dims.iter().zip(shape).all(|(d, s)| *d == -1 || d == s)
}

/// tritonserver's message for a request without all its model's required inputs: the names in
/// its form (`['a','b']`, the request's sorted), and the count expected as a range when the model
/// has optional inputs.
fn missing_inputs(spec: &IoSpec, request: &InferenceRequest, missing: &[&str]) -> InferError {
    let list = |names: &mut dyn Iterator<Item = &str>| {
        format!("[{}]", names.map(|n| format!("'{n}'")).collect::<Vec<_>>().join(","))
    };
    let mut given: Vec<&str> = request.inputs.iter().map(|i| i.name.as_str()).collect();
    given.sort_unstable();
    let (total, required) = (spec.inputs.len(), spec.inputs.iter().filter(|s| !s.optional).count());
    let expected = if total == required {
        format!("{total} inputs")
    } else {
        format!("number of inputs between {required} and {total}")
    };
    InferError::invalid(format!(
        "expected {expected} but got {} inputs for model '{}'. Got input(s) {}, but missing required input(s) {}. \
         Please provide all required input(s).",
        request.inputs.len(),
        spec.model_name,
        list(&mut given.into_iter()),
        list(&mut missing.iter().copied()),
    ))
}

/// Checks `request` against the model and normalises it: fills in the requested outputs when the
/// client named none, and applies input `reshape`. Returns the request's batch size (1 for models
/// that do not batch).
pub fn validate_request(spec: &IoSpec, request: &mut InferenceRequest) -> Result<i64, InferError> {
    let model = &spec.model_name;
    // Inputs: known, not duplicated, all required ones present.
    for (i, input) in request.inputs.iter().enumerate() {
        if !spec.inputs.iter().any(|s| s.name == input.name) {
            return Err(InferError::invalid(format!(
                "unexpected inference input '{}' for model '{model}'",
                input.name
            )));
        }
        if request.inputs[..i].iter().any(|other| other.name == input.name) {
            return Err(InferError::invalid(format!("input '{}' already exists in request", input.name)));
        }
    }
    let missing: Vec<&str> = spec
        .inputs
        .iter()
        .filter(|s| !s.optional && !request.inputs.iter().any(|i| i.name == s.name))
        .map(|s| s.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(missing_inputs(spec, request, &missing));
    }

    let mut batch: Option<i64> = None;
    let on_device = &request.device_inputs;
    for input in request.inputs.iter() {
        let Some(s) = spec.inputs.iter().find(|s| s.name == input.name) else {
            continue;
        };
        if input.datatype != s.datatype {
            return Err(InferError::invalid(format!(
                "inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
                input.name, input.datatype, s.datatype
            )));
        }
        let inner = if spec.batching() {
            let Some((&b, rest)) = input.shape.split_first() else {
                return Err(InferError::invalid(format!(
                    "input '{}' for model '{model}' needs a batch dimension: expected shape {}, got {}",
                    input.name,
                    shape_string(&[&[-1], s.dims.as_slice()].concat()),
                    shape_string(&input.shape)
                )));
            };
            // A batch of zero is a request (tritonserver refuses only one over the maximum): its
            // tensors are empty, and the backend answers with empty outputs.
            if b < 0 || b > spec.max_batch_size {
                return Err(InferError::invalid(format!(
                    "inference request batch-size must be <= {} for '{model}', got {b}",
                    spec.max_batch_size
                )));
            }
            if *batch.get_or_insert(b) != b {
                return Err(InferError::invalid(format!(
                    "input '{}' has batch size {b}, but other inputs of the request have {}",
                    input.name,
                    batch.unwrap_or(b)
                )));
            }
            rest
        } else {
            &input.shape[..]
        };
        if !dims_match(&s.dims, inner) {
            let expected = if spec.batching() { [&[-1], s.dims.as_slice()].concat() } else { s.dims.clone() };
            return Err(InferError::invalid(format!(
                "unexpected shape for input '{}' for model '{model}'. Expected {}, got {}",
                input.name,
                shape_string(&expected),
                shape_string(&input.shape)
            )));
        }
    }
    // The bytes, once every input's datatype and shape passed, as tritonserver checks them (its
    // `ValidateRequestInputs` after `Normalize`), and last input first: where several inputs are
    // wrong, the one named is the one tritonserver names. It walks a request's inputs in the order
    // of their `std::unordered_map`, which libstdc++ gives newest first (each key in a bucket of its
    // own goes to the list's front), and Triton's QA asserts the last input's message
    // (L0_input_validation). Each input's reshape, which keeps its element count, follows its
    // byte check.
    for input in request.inputs.iter_mut().rev() {
        let Some(s) = spec.inputs.iter().find(|s| s.name == input.name) else {
            continue;
        };
        // An input left in a client's GPU memory has its bytes there.
        let len = on_device.get(&input.name).map_or(input.data.len(), |span| span.len());
        check_len(input, len, Some(&**model)).map_err(InferError::invalid)?;
        let Some(reshape) = &s.reshape else {
            continue;
        };
        let inner = if spec.batching() { &input.shape[1..] } else { &input.shape[..] };
        let mut shape = if spec.batching() { vec![input.shape[0]] } else { Vec::new() };
        // The configuration's checks (`config::io_rules`) give both as many -1 dimensions.
        shape.extend(reshape_dims(&s.dims, inner, reshape).unwrap_or_else(|| reshape.clone()));
        input.shape = shape;
    }

    if request.requested_outputs.is_empty() {
        request.requested_outputs = spec.outputs.iter().map(|o| o.name.clone()).collect();
    } else {
        for (i, name) in request.requested_outputs.iter().enumerate() {
            if spec.output(name).is_none() {
                return Err(InferError::invalid(format!("unexpected inference output '{name}' for model '{model}'")));
            }
            if request.requested_outputs[..i].contains(name) {
                // tritonserver's words (TRITONSERVER_InferenceRequestAddRequestedOutput).
                return Err(InferError::invalid(format!("output '{name}' already exists in request")));
            }
        }
    }
    Ok(batch.unwrap_or(1))
}

/// Checks that a tensor's bytes agree with its shape and datatype; a request's input names its
/// `model` in the message as tritonserver does (" for model '…'"), formatted only when the check
/// fails: this runs for every input of every request.
pub fn check_byte_size(t: &Tensor, model: Option<&str>) -> Result<(), String> {
    check_len(t, t.data.len(), model)
}

/// Checks that `len` bytes are what `elements` elements of `size` bytes take, with tritonserver's
/// message for input `name` (of `model`) otherwise.
pub(crate) fn check_fixed_len(
    name: &str,
    model: Option<&str>,
    elements: u64,
    size: usize,
    len: u64,
) -> Result<(), String> {
    let expected = elements.checked_mul(size as u64);
    if expected == Some(len) {
        return Ok(());
    }
    let whose = model.map(|m| format!(" for model '{m}'")).unwrap_or_default();
    let expected = expected.map_or_else(|| "an impossible size".to_string(), |e| e.to_string());
    Err(format!("input byte size mismatch for input '{name}'{whose}. Expected {expected}, got {len}"))
}

/// [`check_byte_size`] for a tensor of `len` bytes (its own, or the device bytes it stands for).
pub(crate) fn check_len(t: &Tensor, len: usize, model: Option<&str>) -> Result<(), String> {
    let elements =
        element_count(&t.shape).ok_or_else(|| format!("invalid shape {} for '{}'", shape_string(&t.shape), t.name))?;
    match t.datatype.element_size() {
        Some(size) => check_fixed_len(&t.name, model, elements, size, len as u64)?,
        None => {
            let count = count_bytes_elements(&t.data).map_err(|e| format!("tensor '{}': {e}", t.name))?;
            // tritonserver's `ValidateBytesInputs` words: it stops at the first element too many.
            let whose = || model.map(|m| format!(" for model '{m}'")).unwrap_or_default();
            if count > elements {
                return Err(format!(
                    "unexpected number of string elements {} for inference input '{}'{}, expecting {elements}",
                    elements + 1,
                    t.name,
                    whose()
                ));
            }
            if count < elements {
                return Err(format!(
                    "expected {elements} string elements for inference input '{}'{}, got {count}",
                    t.name,
                    whose()
                ));
            }
        }
    }
    Ok(())
}

/// Checks one output a backend produced for a request of batch size `batch`. On success returns
/// the shape the client sees when it is not the tensor's own: the configured `dims` of an output
/// with a `reshape` (`None` otherwise, so the usual answer copies no shape).
pub fn check_output(spec: &IoSpec, t: &Tensor, batch: i64) -> Result<Option<Vec<i64>>, String> {
    check_output_of_len(spec, t, t.data.len(), batch)
}

/// [`check_output`] for an output of `len` bytes: its own, or those a backend wrote into a
/// client's GPU memory in its place.
pub fn check_output_of_len(spec: &IoSpec, t: &Tensor, len: usize, batch: i64) -> Result<Option<Vec<i64>>, String> {
    let s = spec.produced(&t.name).ok_or_else(|| format!("unknown output '{}'", t.name))?;
    if t.datatype != s.datatype {
        return Err(format!("output '{}' has datatype {}, but the model declares {}", t.name, t.datatype, s.datatype));
    }
    let declared = s.reshape.as_ref().unwrap_or(&s.dims);
    let inner = if spec.batching() {
        match t.shape.split_first() {
            Some((&b, rest)) if b == batch => rest,
            _ => {
                return Err(format!(
                    "output '{}' has shape {}, but the request's batch size is {batch}",
                    t.name,
                    shape_string(&t.shape)
                ));
            }
        }
    } else {
        &t.shape[..]
    };
    if !dims_match(declared, inner) {
        return Err(format!(
            "output '{}' has shape {}, which does not match the declared dims {}",
            t.name,
            shape_string(&t.shape),
            shape_string(declared)
        ));
    }
    check_len(t, len, None).map_err(|e| {
        e.replace("input byte size", "output byte size")
            .replace("for input", "for output")
            .replace("for inference input", "for output")
    })?;
    if let Some(reshape) = &s.reshape {
        let mut shape = if spec.batching() { vec![batch] } else { Vec::new() };
        shape.extend(reshape_dims(reshape, inner, &s.dims).unwrap_or_else(|| inner.to_vec()));
        return Ok(Some(shape));
    }
    Ok(None)
}

/// A shape reshaped as tritonserver reshapes tensors (its `InferenceRequest::Normalize` for inputs,
/// `InferenceResponse::Output::Reshape` for outputs): `actual` (without a batch dimension) has the
/// shape `from` declares, its -1 dimensions of any size; the result has the shape `to` declares,
/// its -1 dimensions taking the sizes of `actual`'s, in order. `None` when `to` has more -1
/// dimensions than `from` (the configuration's checks allow no such pair).
pub fn reshape_dims(from: &[i64], actual: &[i64], to: &[i64]) -> Option<Vec<i64>> {
    let mut variable = from.iter().zip(actual).filter(|(d, _)| **d == -1).map(|(_, a)| *a);
    to.iter().map(|&d| if d == -1 { variable.next() } else { Some(d) }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn variable_dimensions_carry_across_a_reshape() {
        // Triton's L0_infer_reshape: dims [2,4,-1,6] as reshape [8,-1,1,6], and back.
        assert_eq!(reshape_dims(&[2, 4, -1, 6], &[2, 4, 3, 6], &[8, -1, 1, 6]), Some(vec![8, 3, 1, 6]));
        assert_eq!(reshape_dims(&[8, -1, 1, 6], &[8, 3, 1, 6], &[2, 4, -1, 6]), Some(vec![2, 4, 3, 6]));
        assert_eq!(reshape_dims(&[-1, 2, -1], &[5, 2, 7], &[-1, -1, 2]), Some(vec![5, 7, 2]));
        assert_eq!(reshape_dims(&[16], &[16], &[4, 4]), Some(vec![4, 4]));
        assert_eq!(reshape_dims(&[4], &[4], &[-1]), None);
    }

    fn spec() -> IoSpec {
        let cfg = crate::config::parse_pbtxt(
            r#"name: "simple" max_batch_size: 8
               input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
               output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]"#,
        )
        .unwrap();
        IoSpec::new(&cfg)
    }

    fn int32(name: &str, shape: Vec<i64>, n: usize) -> Tensor {
        Tensor { name: name.into(), datatype: DataType::Int32, shape, data: Bytes::from(vec![0u8; n * 4]) }
    }

    fn request(inputs: Vec<Tensor>) -> InferenceRequest {
        InferenceRequest { model_name: "simple".into(), inputs, ..Default::default() }
    }

    #[test]
    fn accepts_a_good_request_and_fills_outputs() {
        let mut r = request(vec![int32("INPUT0", vec![2, 16], 32), int32("INPUT1", vec![2, 16], 32)]);
        assert_eq!(validate_request(&spec(), &mut r), Ok(2));
        assert_eq!(r.requested_outputs, vec!["OUTPUT0".to_string()]);
    }

    /// tritonserver's message for missing inputs, a range when the model has optional ones.
    #[test]
    fn missing_inputs_read_as_tritonservers() {
        let cfg = crate::config::parse_pbtxt(
            r#"name: "m" max_batch_size: 0
               input [ { name: "B" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "A" data_type: TYPE_INT32 dims: [ 1 ] },
                       { name: "C" data_type: TYPE_INT32 dims: [ 1 ] optional: true } ]
               output [ { name: "O" data_type: TYPE_INT32 dims: [ 1 ] } ]"#,
        )
        .unwrap();
        let spec = IoSpec::new(&cfg);
        let err = validate_request(&spec, &mut request(vec![int32("C", vec![1], 1)])).unwrap_err();
        assert_eq!(
            err.message,
            "expected number of inputs between 2 and 3 but got 1 inputs for model 'm'. Got input(s) ['C'], but \
             missing required input(s) ['B','A']. Please provide all required input(s)."
        );
        let err = validate_request(&spec, &mut request(vec![])).unwrap_err();
        assert!(err.message.contains("but got 0 inputs for model 'm'. Got input(s) [], but"), "{}", err.message);
    }

    #[test]
    fn rejects_each_fault() {
        let cases: Vec<(Vec<Tensor>, &str)> = vec![
            (
                vec![int32("INPUT0", vec![1, 16], 16)],
                "Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']",
            ),
            (
                vec![int32("INPUT0", vec![1, 16], 16), int32("INPUT0", vec![1, 16], 16)],
                "input 'INPUT0' already exists in request",
            ),
            (
                vec![int32("INPUT0", vec![1, 16], 16), int32("INPUT1", vec![1, 16], 16), int32("X", vec![1], 1)],
                "unexpected inference input 'X'",
            ),
            (vec![int32("INPUT0", vec![1, 15], 15), int32("INPUT1", vec![1, 16], 16)], "Expected [-1,16], got [1,15]"),
            (vec![int32("INPUT0", vec![9, 16], 144), int32("INPUT1", vec![9, 16], 144)], "batch-size must be <= 8"),
            (vec![int32("INPUT0", vec![1, 16], 15), int32("INPUT1", vec![1, 16], 16)], "Expected 64, got 60"),
            (vec![int32("INPUT0", vec![2], 2), int32("INPUT1", vec![2], 2)], "unexpected shape"),
        ];
        for (inputs, needle) in cases {
            let err = validate_request(&spec(), &mut request(inputs)).unwrap_err();
            assert!(err.message.contains(needle), "{needle}: {}", err.message);
            assert_eq!(err.http_status(), 400);
        }
        let mut fp = request(vec![int32("INPUT0", vec![1, 16], 16), int32("INPUT1", vec![1, 16], 16)]);
        fp.inputs[0].datatype = DataType::Fp32;
        assert!(validate_request(&spec(), &mut fp).unwrap_err().message.contains("data-type is 'FP32'"));
        let mut unknown = request(vec![int32("INPUT0", vec![1, 16], 16), int32("INPUT1", vec![1, 16], 16)]);
        unknown.requested_outputs = vec!["NOPE".into()];
        assert!(
            validate_request(&spec(), &mut unknown).unwrap_err().message.contains("unexpected inference output 'NOPE'")
        );
    }

    #[test]
    fn output_checks() {
        let s = spec();
        assert!(check_output(&s, &int32("OUTPUT0", vec![1, 16], 16), 1).is_ok());
        assert!(check_output(&s, &int32("OUTPUT0", vec![2, 16], 32), 1).is_err());
        assert!(check_output(&s, &int32("OUTPUT9", vec![1, 16], 16), 1).is_err());
        assert!(check_output(&s, &int32("OUTPUT0", vec![1, 16], 3), 1).is_err());
    }
}
