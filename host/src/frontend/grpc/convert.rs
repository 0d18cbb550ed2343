//! Translation between Triton's gRPC messages and the server's request/response types, and the one
//! mapping of errors to gRPC status codes.
use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use tonic::{Code, Status};

use crate::api;
use crate::api::classification::{self, ClassOutputs, Wire};
use crate::api::infer::ShmOutputs;
use crate::error::{ErrorKind, InferError};
use crate::proto::inference as pb;
use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::request::{InferenceRequest, InferenceResponse, ParamValue, Tensor};
use crate::shm::{SharedMemory, ShmPlace};
use crate::tensor::DataType;

/// The gRPC status for an error, as Triton maps TRITONSERVER_Error codes.
pub fn status(e: InferError) -> Status {
    let code = match e.kind {
        ErrorKind::InvalidArg => Code::InvalidArgument,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Unsupported => Code::Unimplemented,
        ErrorKind::Internal => Code::Internal,
        ErrorKind::Unknown => Code::Unknown,
        ErrorKind::Restricted => Code::Unavailable,
        ErrorKind::Timeout => Code::DeadlineExceeded,
        ErrorKind::UnsupportedEncoding => Code::InvalidArgument,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::Cancelled => Code::Cancelled,
    };
    Status::new(code, e.message)
}

/// A version string from a request: empty means "let the server pick".
pub fn version(v: &str) -> Result<Option<i64>, InferError> {
    if v.is_empty() {
        return Ok(None);
    }
    // tritonserver's wording (GetModelVersionFromString).
    let n = v.trim().parse::<i64>().map_err(|e| {
        InferError::invalid(format!(
            "failed to get model version from specified version string '{v}' (details: {e}), version should be an integral value > 0"
        ))
    })?;
    if n < 0 {
        return Err(InferError::invalid(format!(
            "invalid model version specified '{v}' , version should be an integral value > 0"
        )));
    }
    Ok(Some(n))
}

fn param_value(p: &pb::InferParameter) -> Option<ParamValue> {
    Some(match p.parameter_choice.as_ref()? {
        ParameterChoice::BoolParam(b) => ParamValue::Bool(*b),
        ParameterChoice::Int64Param(i) => ParamValue::Int64(*i),
        ParameterChoice::StringParam(s) => ParamValue::String(s.clone()),
        ParameterChoice::DoubleParam(d) => ParamValue::Double(*d),
        ParameterChoice::Uint64Param(u) => ParamValue::Uint64(*u),
    })
}

/// A repository load or unload request's parameters, as the protocol-neutral layer takes them.
pub fn repository_params(
    params: HashMap<String, pb::ModelRepositoryParameter>,
) -> Vec<(String, api::repository::RepoParam)> {
    use api::repository::RepoParam;
    use pb::model_repository_parameter::ParameterChoice as P;
    params
        .into_iter()
        .filter_map(|(key, p)| {
            let value = match p.parameter_choice? {
                P::BoolParam(b) => RepoParam::Bool(b),
                P::Int64Param(n) => RepoParam::Int(n),
                P::StringParam(s) => RepoParam::Text(s),
                P::BytesParam(b) => RepoParam::Bytes(b.to_vec()),
            };
            Some((key, value))
        })
        .collect()
}

pub fn param_proto(v: &ParamValue) -> pb::InferParameter {
    pb::InferParameter {
        parameter_choice: Some(match v {
            ParamValue::Bool(b) => ParameterChoice::BoolParam(*b),
            ParamValue::Int64(i) => ParameterChoice::Int64Param(*i),
            ParamValue::Uint64(u) => ParameterChoice::Uint64Param(*u),
            ParamValue::Double(d) => ParameterChoice::DoubleParam(*d),
            ParamValue::String(s) => ParameterChoice::StringParam(s.clone()),
        }),
    }
}

/// The `triton_` request parameters a gRPC client may send (tritonserver's
/// `TRITON_RESERVED_REQUEST_PARAMS`): a stream's request asks for an empty final response.
const TRITON_REQUEST_PARAMETERS: &[&str] = &["triton_enable_empty_final_response"];

/// Decodes a ModelInferRequest. Tensors in `raw_input_contents` stay slices of the message.
/// A request, the outputs it wants written into system shared memory, and those it wants as
/// classes.
pub fn request(
    mut m: pb::ModelInferRequest,
    shm: &SharedMemory,
) -> Result<(InferenceRequest, ShmOutputs, ClassOutputs), InferError> {
    let mut request = InferenceRequest {
        model_name: std::mem::take(&mut m.model_name),
        model_version: version(&m.model_version)?,
        id: std::mem::take(&mut m.id),
        ..Default::default()
    };
    for (key, p) in std::mem::take(&mut m.parameters) {
        // Of the `triton_` keys, tritonserver's gRPC frontend takes only the ones it knows.
        if key.starts_with("triton_") && !TRITON_REQUEST_PARAMETERS.contains(&key.as_str()) {
            return Err(InferError::invalid(format!(
                "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys \
                 starting with 'triton_' are allowed: {}",
                TRITON_REQUEST_PARAMETERS.join(" ")
            )));
        }
        let value = param_value(&p).ok_or_else(|| InferError::invalid(format!("parameter '{key}' has no value")))?;
        api::params::apply(&mut request, &key, value)?;
    }
    // As tritonserver reads them: raw_input_contents go, in order, to the inputs that take their
    // data neither from shared memory nor from `contents`; and `contents` may not be used at all
    // once raw_input_contents are.
    let any_raw = !m.raw_input_contents.is_empty();
    let mut raw = std::mem::take(&mut m.raw_input_contents).into_iter();
    let mut shm_outputs = Vec::new();
    for input in m.inputs {
        let (datatype, elements) = Tensor::parse_header(&input.name, &input.datatype, &input.shape)?;
        if let Some(place) = shm_place(&input.name, &input.parameters)? {
            if input.contents.is_some() {
                return Err(InferError::invalid(format!(
                    "input '{}' takes its data from shared memory but also carries contents",
                    input.name
                )));
            }
            let header = (input.name.as_str(), datatype, elements);
            let data = api::infer::read_input(shm, &mut request.shm_inputs, &request.model_name, header, &place)?;
            let data = request.device_inputs.keep(&input.name, data);
            request.inputs.push(Tensor { name: input.name, datatype, shape: input.shape, data });
            continue;
        }
        let data = match (input.contents, raw.next()) {
            (Some(_), _) if any_raw => {
                return Err(InferError::invalid(format!(
                    "contents field must not be specified when using raw_input_contents for '{}' for model '{}'",
                    input.name, request.model_name
                )));
            }
            (Some(contents), _) => contents_to_bytes(&input.name, datatype, elements, contents)?,
            (None, Some(bytes)) => bytes,
            (None, None) => {
                return Err(InferError::invalid(format!(
                    "unable to find data for input tensor '{}' for model '{}' in request.",
                    input.name, request.model_name
                )));
            }
        };
        request.inputs.push(Tensor { name: input.name, datatype, shape: input.shape, data });
    }
    if raw.len() > 0 {
        return Err(InferError::invalid(format!(
            "{} of the request's raw_input_contents belong to no input of model '{}'",
            raw.len(),
            request.model_name
        )));
    }
    let mut classes = Vec::new();
    for output in m.outputs {
        let place = shm_place(&output.name, &output.parameters)?;
        if let Some(p) = output.parameters.get("classification") {
            let value = param_value(p).ok_or_else(|| {
                InferError::invalid("invalid value type for 'classification' parameter, expected int64_param")
            })?;
            if let Some(count) = classification::requested(Wire::Grpc, &value, place.is_some())? {
                classes.push((output.name.clone(), count));
            }
        }
        if let Some(place) = place {
            shm_outputs.push(api::infer::place_output(shm, &mut request, &output.name, place)?);
        }
        request.requested_outputs.push(output.name);
    }
    Ok((request, shm_outputs, classes))
}

/// The shared-memory place a tensor's parameters name, if any.
fn shm_place(tensor: &str, params: &HashMap<String, pb::InferParameter>) -> Result<Option<ShmPlace>, InferError> {
    let get = |key: &str| params.get(key).and_then(param_value);
    api::params::shm_place(
        tensor,
        get("shared_memory_region"),
        get("shared_memory_byte_size"),
        get("shared_memory_offset"),
    )
}

/// Encodes typed `contents` as little-endian bytes, checking the count against the shape.
fn contents_to_bytes(
    name: &str,
    datatype: DataType,
    expected: u64,
    c: pb::InferTensorContents,
) -> Result<Bytes, InferError> {
    let count_error = |n: usize| {
        InferError::invalid(format!("input '{name}' has {n} elements in 'contents' but its shape needs {expected}"))
    };
    macro_rules! encode {
        ($list:expr, $size:expr, |$buf:ident, $v:ident| $put:expr) => {{
            let list = $list;
            if list.len() as u64 != expected {
                return Err(count_error(list.len()));
            }
            let mut $buf = BytesMut::with_capacity(list.len() * $size);
            for $v in list {
                $put;
            }
            $buf.freeze()
        }};
    }
    let range = |v: i64| InferError::invalid(format!("value {v} of input '{name}' is out of range for {datatype}"));
    Ok(match datatype {
        DataType::Bool => encode!(c.bool_contents, 1, |b, v| b.put_u8(v as u8)),
        DataType::Int8 => encode!(c.int_contents, 1, |b, v| b.put_i8(i8::try_from(v).map_err(|_| range(v as i64))?)),
        DataType::Int16 => {
            encode!(c.int_contents, 2, |b, v| b.put_i16_le(i16::try_from(v).map_err(|_| range(v as i64))?))
        }
        DataType::Int32 => encode!(c.int_contents, 4, |b, v| b.put_i32_le(v)),
        DataType::Int64 => encode!(c.int64_contents, 8, |b, v| b.put_i64_le(v)),
        DataType::Uint8 => encode!(c.uint_contents, 1, |b, v| b.put_u8(u8::try_from(v).map_err(|_| range(v as i64))?)),
        DataType::Uint16 => {
            encode!(c.uint_contents, 2, |b, v| b.put_u16_le(u16::try_from(v).map_err(|_| range(v as i64))?))
        }
        DataType::Uint32 => encode!(c.uint_contents, 4, |b, v| b.put_u32_le(v)),
        DataType::Uint64 => encode!(c.uint64_contents, 8, |b, v| b.put_u64_le(v)),
        DataType::Fp32 => encode!(c.fp32_contents, 4, |b, v| b.put_f32_le(v)),
        DataType::Fp64 => encode!(c.fp64_contents, 8, |b, v| b.put_f64_le(v)),
        DataType::Bytes => {
            let total: usize = c.bytes_contents.iter().map(|e| e.len() + 4).sum();
            encode!(c.bytes_contents, 0, |b, v| {
                if b.capacity() == 0 {
                    b.reserve(total);
                }
                b.put_u32_le(v.len() as u32);
                b.put_slice(&v);
            })
        }
        DataType::Fp16 | DataType::Bf16 => {
            return Err(InferError::invalid(format!(
                "input '{name}': {datatype} can only be sent in raw_input_contents"
            )));
        }
    })
}

/// Encodes a response: every output's bytes in `raw_output_contents` (no copy). Outputs placed in
/// shared memory (written there already, see [`api::infer`]) travel as an empty raw content, keeping
/// the positions of the others, with their region and byte size as parameters.
pub fn response(r: InferenceResponse, shm_outputs: &ShmOutputs) -> pb::ModelInferResponse {
    let mut raw = Vec::with_capacity(r.outputs.len());
    let mut outputs = Vec::with_capacity(r.outputs.len());
    let lens: Vec<usize> = r.outputs.iter().map(|t| r.output_len(t)).collect();
    for (t, len) in r.outputs.into_iter().zip(lens) {
        let mut parameters = HashMap::new();
        match shm_outputs.iter().find(|o| o.name == t.name).map(|o| &o.place) {
            Some(place) => {
                parameters
                    .insert("shared_memory_region".to_string(), param_proto(&ParamValue::String(place.region.clone())));
                parameters.insert("shared_memory_byte_size".to_string(), param_proto(&ParamValue::Int64(len as i64)));
                raw.push(bytes::Bytes::new());
            }
            None => raw.push(t.data),
        }
        outputs.push(pb::model_infer_response::InferOutputTensor {
            name: t.name,
            datatype: t.datatype.wire_name().to_string(),
            shape: t.shape,
            parameters,
            contents: None,
        });
    }
    pb::ModelInferResponse {
        model_name: r.model_name.to_string(),
        model_version: r.model_version.to_string(),
        id: r.id,
        parameters: r.parameters.iter().map(|(k, v)| (k.clone(), param_proto(v))).collect(),
        outputs,
        raw_output_contents: raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(
        name: &str,
        datatype: &str,
        shape: Vec<i64>,
        contents: pb::InferTensorContents,
    ) -> pb::model_infer_request::InferInputTensor {
        pb::model_infer_request::InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape,
            parameters: Default::default(),
            contents: Some(contents),
        }
    }

    #[test]
    fn typed_contents_become_little_endian_bytes() {
        let m = pb::ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![
                input(
                    "A",
                    "INT16",
                    vec![2],
                    pb::InferTensorContents { int_contents: vec![1, -2], ..Default::default() },
                ),
                input(
                    "B",
                    "BYTES",
                    vec![1],
                    pb::InferTensorContents { bytes_contents: vec![Bytes::from_static(b"hi")], ..Default::default() },
                ),
            ],
            ..Default::default()
        };
        let (r, _, _) = request(m, &SharedMemory::new(false)).unwrap();
        assert_eq!(&r.inputs[0].data[..], &[1, 0, 0xfe, 0xff]);
        assert_eq!(&r.inputs[1].data[..], &[2, 0, 0, 0, b'h', b'i']);
    }

    #[test]
    fn faults_are_invalid_arguments() {
        let bad_count = pb::ModelInferRequest {
            inputs: vec![input(
                "A",
                "INT32",
                vec![3],
                pb::InferTensorContents { int_contents: vec![1], ..Default::default() },
            )],
            ..Default::default()
        };
        assert_eq!(status(request(bad_count, &SharedMemory::new(false)).unwrap_err()).code(), Code::InvalidArgument);
        let range = pb::ModelInferRequest {
            inputs: vec![input(
                "A",
                "INT8",
                vec![1],
                pb::InferTensorContents { int_contents: vec![300], ..Default::default() },
            )],
            ..Default::default()
        };
        assert!(request(range, &SharedMemory::new(false)).unwrap_err().message.contains("out of range"));
        let fp16 = pb::ModelInferRequest {
            inputs: vec![input("A", "FP16", vec![1], pb::InferTensorContents::default())],
            ..Default::default()
        };
        assert!(request(fp16, &SharedMemory::new(false)).unwrap_err().message.contains("raw_input_contents"));
        let raw_count = pb::ModelInferRequest {
            inputs: vec![input("A", "INT32", vec![1], Default::default())],
            raw_input_contents: vec![Bytes::new(), Bytes::new()],
            ..Default::default()
        };
        assert!(request(raw_count, &SharedMemory::new(false)).is_err());
    }
}
