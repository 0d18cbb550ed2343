//! KServe v2 inference bodies over HTTP: the JSON form and Triton's binary tensor extension, both
//! ways. Decoding checks every size against the declared shape before allocating; binary tensors
//! stay slices of the request body.
use std::borrow::Cow;
use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;
use serde::ser::{SerializeSeq, Serializer};
use serde_json::Value;

use super::non_finite;
use crate::api;
use crate::api::classification::{self, ClassOutputs, Wire};
use crate::api::infer::ShmOutputs;
use crate::error::InferError;
use crate::request::{InferenceRequest, InferenceResponse, ParamValue, Tensor};
use crate::shm::{SharedMemory, ShmPlace};
use crate::tensor::{DataType, bytes_elements, shape_string};

#[derive(Deserialize)]
struct RequestBody<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default, borrow)]
    parameters: Option<Params<'a>>,
    #[serde(borrow)]
    inputs: Vec<InputBody<'a>>,
    #[serde(default, borrow)]
    outputs: Option<Vec<OutputBody<'a>>>,
}

#[derive(Deserialize)]
struct InputBody<'a> {
    name: String,
    shape: Vec<i64>,
    #[serde(borrow)]
    datatype: Cow<'a, str>,
    #[serde(default, borrow)]
    parameters: Option<Params<'a>>,
    #[serde(default)]
    data: Option<Value>,
}

#[derive(Deserialize)]
struct OutputBody<'a> {
    name: String,
    #[serde(default, borrow)]
    parameters: Option<Params<'a>>,
}

/// A JSON `parameters` object as decoded: its entries in the order sent (a repeated key keeps its
/// last value, as a JSON map would), keys borrowed from the body where they need no unescaping. A
/// `serde_json::Map` costs a tree node and a string per key for the one or two entries a tensor
/// carries, on every request.
#[derive(Default)]
struct Params<'a>(Vec<(Cow<'a, str>, Value)>);

impl Params<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Params<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Entries<'a> {
            type Value = Params<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Params<'a>, M::Error> {
                let mut entries: Vec<(Cow<'a, str>, Value)> = Vec::new();
                while let Some(Key(key)) = map.next_key::<Key<'a>>()? {
                    let value: Value = map.next_value()?;
                    match entries.iter_mut().find(|(k, _)| *k == key) {
                        Some(entry) => entry.1 = value,
                        None => entries.push((key, value)),
                    }
                }
                Ok(Params(entries))
            }
        }
        deserializer.deserialize_map(Entries(std::marker::PhantomData))
    }
}

/// A map key, borrowed from the body unless it had escapes.
#[derive(Deserialize)]
#[serde(transparent)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

/// How the client wants each output encoded.
#[derive(Debug, Default)]
pub struct OutputOptions {
    /// Request-level default (`binary_data_output`), and per-output overrides.
    pub binary_default: bool,
    pub binary: Vec<(String, bool)>,
    /// Outputs to be written into system shared memory instead of the body.
    pub shm: ShmOutputs,
    /// Outputs to be answered as their top classes.
    pub classes: ClassOutputs,
}

impl OutputOptions {
    fn is_binary(&self, name: &str, datatype: DataType) -> bool {
        // FP16 and BF16 have no JSON form: they always travel as binary.
        if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
            return true;
        }
        self.binary.iter().find(|(n, _)| n == name).map(|(_, b)| *b).unwrap_or(self.binary_default)
    }
}

/// A request parameter's value; `tokens`: the header's NaN and infinities were rewritten (see
/// [`non_finite`]).
pub(super) fn param_value(key: &str, v: &Value, tokens: bool) -> Result<ParamValue, InferError> {
    Ok(match v {
        Value::Bool(b) => ParamValue::Bool(*b),
        Value::String(s) => match non_finite::token(v).filter(|_| tokens) {
            Some(number) => ParamValue::Double(number),
            None => ParamValue::String(s.clone()),
        },
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                ParamValue::Int64(i)
            } else if let Some(u) = n.as_u64() {
                ParamValue::Uint64(u)
            } else {
                ParamValue::Double(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        _ => {
            return Err(InferError::invalid(format!("parameter '{key}' must be a string, number or boolean")));
        }
    })
}

fn bool_param(map: Option<&Params>, key: &str) -> Result<Option<bool>, InferError> {
    match map.and_then(|m| m.get(key)) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(InferError::invalid(format!("parameter '{key}' must be a boolean"))),
    }
}

/// Decodes an infer request body. `header_len` is `Inference-Header-Content-Length` when present:
/// the JSON is `body[..header_len]` and binary tensors follow. `header_len == Some(0)` is the raw
/// binary request, valid only for a model with exactly one input (`raw_input`: its name, datatype
/// and dims, and whether the model batches).
pub fn decode_request(
    body: Bytes,
    header_len: Option<usize>,
    raw_input: impl FnOnce() -> Result<(String, DataType, Vec<i64>, bool), InferError>,
    shm: &SharedMemory,
    model: &str,
) -> Result<(InferenceRequest, OutputOptions), InferError> {
    let header_len = header_len.unwrap_or(body.len());
    if header_len > body.len() {
        return Err(InferError::invalid(format!(
            "Inference-Header-Content-Length {header_len} exceeds the body size {}",
            body.len()
        )));
    }
    if header_len == 0 {
        return decode_raw_binary(body, raw_input);
    }
    // UTF-8 checked once for the whole header: parsed from a `str`, serde_json then takes each
    // string as it is instead of checking it again (3.3 → 2.9 µs for perf_analyzer's header).
    let header = std::str::from_utf8(&body[..header_len])
        .map_err(|e| InferError::invalid(format!("failed to parse the request JSON: {e}")))?;
    let unparsable = |e: serde_json::Error| InferError::invalid(format!("failed to parse the request JSON: {e}"));
    // NaN and infinities, which strict JSON refuses, are looked for only once it has refused.
    let rewritten: String;
    let (parsed, tokens): (RequestBody, bool) = match serde_json::from_str(header) {
        Ok(parsed) => (parsed, false),
        Err(e) => {
            rewritten = non_finite::rewrite(header).ok_or_else(|| unparsable(e))?;
            (serde_json::from_str(&rewritten).map_err(unparsable)?, true)
        }
    };
    let mut binary = body.slice(header_len..);

    let id = parsed.id.unwrap_or_default();
    if tokens && non_finite::is_marked(&id) {
        // A rewritten NaN or infinity where the id's string goes.
        return Err(InferError::invalid("Unable to parse 'id': attempt to access JSON non-string as string"));
    }
    let mut request = InferenceRequest { id, ..Default::default() };
    let params = parsed.parameters.as_ref();
    if let Some(map) = params {
        for (key, value) in map.iter() {
            // tritonserver's HTTP frontend takes none of them from a client (`triton_` keys steer
            // the server's own behaviour).
            if key.starts_with("triton_") {
                return Err(InferError::invalid(
                    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
                ));
            }
            api::params::apply(&mut request, key, param_value(key, value, tokens)?)?;
        }
    }
    let mut options = OutputOptions {
        binary_default: bool_param(params, "binary_data_output")?.unwrap_or(false),
        binary: Vec::new(),
        shm: Vec::new(),
        classes: Vec::new(),
    };

    for input in parsed.inputs {
        check_json_shape(&input.shape)?;
        let (datatype, elements) = Tensor::parse_header(&input.name, &input.datatype, &input.shape)?;
        let ip = input.parameters.as_ref();
        let data = match (shm_place(&input.name, ip, tokens)?, ip.and_then(|m| m.get("binary_data_size"))) {
            (Some(place), _) => {
                if input.data.is_some() || ip.is_some_and(|m| m.contains_key("binary_data_size")) {
                    return Err(InferError::invalid(format!(
                        "input '{}' takes its data from shared memory but also carries data",
                        input.name
                    )));
                }
                let header = (input.name.as_str(), datatype, elements);
                let data = api::infer::read_input(shm, &mut request.shm_inputs, model, header, &place)?;
                request.device_inputs.keep(&input.name, data)
            }
            (None, size) => match size {
                Some(size) => {
                    let size = size.as_u64().ok_or_else(|| {
                        InferError::invalid(format!(
                            "'binary_data_size' of input '{}' must be an unsigned integer",
                            input.name
                        ))
                    })?;
                    if input.data.is_some() {
                        return Err(InferError::invalid(format!(
                            "input '{}' has both 'data' and 'binary_data_size'",
                            input.name
                        )));
                    }
                    if size > binary.len() as u64 {
                        return Err(InferError::invalid(format!(
                            "unexpected size for input '{}': 'binary_data_size' is {size} but only {} bytes of binary data remain",
                            input.name,
                            binary.len()
                        )));
                    }
                    binary.split_to(size as usize)
                }
                None => {
                    let data = input.data.ok_or_else(|| {
                        InferError::invalid(format!("input '{}' has neither 'data' nor 'binary_data_size'", input.name))
                    })?;
                    json_to_bytes(&input.name, datatype, elements, &data, tokens)?
                }
            },
        };
        request.inputs.push(Tensor { name: input.name, datatype, shape: input.shape, data });
    }
    if !binary.is_empty() {
        return Err(InferError::invalid(format!(
            "{} bytes of binary data follow the inputs but no input claims them",
            binary.len()
        )));
    }
    for output in parsed.outputs.unwrap_or_default() {
        let op = output.parameters.as_ref();
        let place = shm_place(&output.name, op, tokens)?;
        if let Some(value) = op.and_then(|m| m.get("classification")) {
            let value = param_value("classification", value, tokens)?;
            if let Some(count) = classification::requested(Wire::Http, &value, place.is_some())? {
                options.classes.push((output.name.clone(), count));
            }
        }
        if let Some(place) = place {
            options.shm.push(api::infer::place_output(shm, &mut request, &output.name, place)?);
        }
        // A listed output is JSON unless its own `binary_data` says otherwise: as tritonserver,
        // the request's `binary_data_output` is the default only of outputs not listed.
        let binary = bool_param(op, "binary_data")?.unwrap_or(false);
        options.binary.push((output.name.clone(), binary));
        request.requested_outputs.push(output.name);
    }
    Ok((request, options))
}

/// tritonserver reads a JSON shape's dimensions as unsigned integers: a negative one fails the
/// parse, an internal error (500) in its words, where the gRPC frontend's int64 dims reach the
/// shape check instead.
fn check_json_shape(shape: &[i64]) -> Result<(), InferError> {
    if shape.iter().any(|d| *d < 0) {
        return Err(InferError::internal(
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ));
    }
    Ok(())
}

/// The shared-memory place a tensor's JSON parameters name, if any.
fn shm_place(tensor: &str, params: Option<&Params>, tokens: bool) -> Result<Option<ShmPlace>, InferError> {
    let Some(m) = params else { return Ok(None) };
    let get = |key: &str| m.get(key).map(|v| param_value(key, v, tokens)).transpose();
    api::params::shm_place(
        tensor,
        get("shared_memory_region")?,
        get("shared_memory_byte_size")?,
        get("shared_memory_offset")?,
    )
}

fn decode_raw_binary(
    body: Bytes,
    raw_input: impl FnOnce() -> Result<(String, DataType, Vec<i64>, bool), InferError>,
) -> Result<(InferenceRequest, OutputOptions), InferError> {
    let (name, datatype, dims, batching) = raw_input()?;
    // The shape, as tritonserver deduces it: the model's dims (after a batch of 1), the one
    // variable-sized dimension (if any) filled from the body's size.
    let mut shape = if batching { vec![1] } else { Vec::new() };
    if dims.iter().filter(|d| **d < 0).count() > 1 {
        return Err(InferError::invalid(format!(
            "The shape of the raw input '{name}' can not be deduced because there are more than one variable-sized dimension"
        )));
    }
    let data = match datatype.element_size() {
        Some(size) => {
            let known: i64 = dims.iter().filter(|d| **d >= 0).product();
            let unit = known as usize * size;
            if dims.iter().any(|d| *d < 0) {
                if unit == 0 || !body.len().is_multiple_of(unit) {
                    return Err(InferError::invalid(format!(
                        "raw binary request of {} bytes does not fit input '{name}' with dims {}",
                        body.len(),
                        shape_string(&dims)
                    )));
                }
                let fill = (body.len() / unit) as i64;
                shape.extend(dims.iter().map(|d| if *d < 0 { fill } else { *d }));
            } else {
                shape.extend_from_slice(&dims);
            }
            body
        }
        // BYTES: the whole body is the one element of a [1]-shaped input (its 4-byte length is
        // added here, as the tensor's serialisation has it), e.g. an image posted as it is.
        None => {
            if dims.iter().any(|d| *d != 1) {
                return Err(InferError::invalid(format!(
                    "For BYTE datatype raw input '{name}', the model must have input shape [1]"
                )));
            }
            shape.extend_from_slice(&dims);
            let len = u32::try_from(body.len())
                .map_err(|_| InferError::invalid(format!("raw input '{name}' is larger than 4 GiB")))?;
            let mut element = Vec::with_capacity(body.len() + 4);
            element.extend_from_slice(&len.to_le_bytes());
            element.extend_from_slice(&body);
            Bytes::from(element)
        }
    };
    let request = InferenceRequest { inputs: vec![Tensor { name, datatype, shape, data }], ..Default::default() };
    Ok((request, OutputOptions { binary_default: true, binary: Vec::new(), shm: Vec::new(), classes: Vec::new() }))
}

/// How deeply a tensor's JSON `data` may nest, as tritonserver's HTTP_MAX_JSON_NESTING_DEPTH.
const MAX_JSON_DEPTH: usize = 100;

/// Converts JSON `data` (nested or flat, row-major) to little-endian bytes. The element count is
/// checked against `expected` as leaves are visited, so a lying shape cannot cause a huge allocation.
/// `tokens`: the header's NaN and infinities were rewritten (see [`non_finite`]).
pub(super) fn json_to_bytes(
    name: &str,
    datatype: DataType,
    expected: u64,
    data: &Value,
    tokens: bool,
) -> Result<Bytes, InferError> {
    let bad = |why: String| InferError::invalid(format!("unable to parse 'data' of input '{name}': {why}"));
    if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
        return Err(bad(format!("datatype {datatype} has no JSON form; send it as binary data")));
    }
    let mut leaves: Vec<&Value> = Vec::new();
    let mut stack = vec![(data, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        if depth >= MAX_JSON_DEPTH {
            return Err(bad(format!("JSON nesting depth exceeds maximum allowed limit ({MAX_JSON_DEPTH})")));
        }
        match v {
            Value::Array(items) => stack.extend(items.iter().rev().map(|i| (i, depth + 1))),
            leaf => {
                if leaves.len() as u64 >= expected {
                    // tritonserver's words, for more elements than the shape has and for fewer.
                    return Err(InferError::invalid(
                        "Unable to parse 'data': Shape does not match true shape of 'data' field",
                    ));
                }
                leaves.push(leaf);
            }
        }
    }
    if leaves.len() as u64 != expected {
        return Err(InferError::invalid("Failed to parse 'data' field: shape does not match true shape"));
    }
    let size = datatype.element_size().unwrap_or(4);
    let mut out = BytesMut::with_capacity(leaves.len() * size);
    // tritonserver's words (its JSON library's, under "Unable to parse 'data'").
    let wrong = |what: &str| InferError::invalid(format!("Unable to parse 'data': attempt to access JSON {what}"));
    for leaf in leaves {
        let int = || leaf.as_i64().ok_or_else(|| wrong("non-signed-integer as signed-integer"));
        let uint = || leaf.as_u64().ok_or_else(|| wrong("non-unsigned-integer as unsigned-integer"));
        let number = || non_finite::value(leaf, tokens).ok_or_else(|| wrong("non-number as double"));
        macro_rules! narrow {
            ($get:expr, $t:ty) => {{
                let v = $get()?;
                <$t>::try_from(v).map_err(|_| bad(format!("{v} is out of range for {datatype}")))?
            }};
        }
        match datatype {
            DataType::Bool => out.put_u8(leaf.as_bool().ok_or_else(|| wrong("non-boolean as boolean"))? as u8),
            DataType::Int8 => out.put_i8(narrow!(int, i8)),
            DataType::Int16 => out.put_i16_le(narrow!(int, i16)),
            DataType::Int32 => out.put_i32_le(narrow!(int, i32)),
            DataType::Int64 => out.put_i64_le(int()?),
            DataType::Uint8 => out.put_u8(narrow!(uint, u8)),
            DataType::Uint16 => out.put_u16_le(narrow!(uint, u16)),
            DataType::Uint32 => out.put_u32_le(narrow!(uint, u32)),
            DataType::Uint64 => out.put_u64_le(uint()?),
            DataType::Fp32 => out.put_f32_le(number()? as f32),
            DataType::Fp64 => out.put_f64_le(number()?),
            DataType::Bytes => {
                let token = tokens && non_finite::token(leaf).is_some();
                let s = leaf.as_str().filter(|_| !token).ok_or_else(|| wrong("non-string as string"))?;
                out.put_u32_le(s.len() as u32);
                out.put_slice(s.as_bytes());
            }
            DataType::Fp16 | DataType::Bf16 => unreachable!("rejected above"),
        }
    }
    Ok(out.freeze())
}

/// Serialises a tensor's elements as a flat JSON array without an intermediate `Value` tree.
/// `tokens`: a non-finite float is written as its [`non_finite::NonFinite`] marker (for a writer
/// with [`non_finite::Tokens`]); otherwise serde_json writes it as `null`.
pub(super) struct JsonData<'a> {
    pub tensor: &'a Tensor,
    pub tokens: bool,
}

impl serde::Serialize for JsonData<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.tensor;
        let d = &t.data[..];
        let mut seq = s.serialize_seq(None)?;
        macro_rules! each {
            ($n:expr, $f:expr) => {
                for c in d.chunks_exact($n) {
                    seq.serialize_element(&$f(c))?;
                }
            };
        }
        macro_rules! floats {
            ($n:expr, $f:expr) => {
                for c in d.chunks_exact($n) {
                    let v = $f(c);
                    if self.tokens && !v.is_finite() {
                        seq.serialize_element(&non_finite::NonFinite(f64::from(v)))?;
                    } else {
                        seq.serialize_element(&v)?;
                    }
                }
            };
        }
        match t.datatype {
            DataType::Bool => each!(1, |c: &[u8]| c[0] != 0),
            DataType::Uint8 => each!(1, |c: &[u8]| c[0]),
            DataType::Int8 => each!(1, |c: &[u8]| c[0] as i8),
            DataType::Uint16 => each!(2, |c: &[u8]| u16::from_le_bytes([c[0], c[1]])),
            DataType::Int16 => each!(2, |c: &[u8]| i16::from_le_bytes([c[0], c[1]])),
            DataType::Uint32 => each!(4, |c: &[u8]| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            DataType::Int32 => each!(4, |c: &[u8]| i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            DataType::Fp32 => floats!(4, |c: &[u8]| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            DataType::Uint64 => each!(8, |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))),
            DataType::Int64 => each!(8, |c: &[u8]| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))),
            DataType::Fp64 => floats!(8, |c: &[u8]| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))),
            DataType::Bytes => {
                for element in bytes_elements(d).flatten() {
                    // JSON strings carry text only: bytes that are not UTF-8 are refused, never
                    // altered (tritonserver writes them as they are, which is no JSON).
                    let text = std::str::from_utf8(element).map_err(|_| {
                        serde::ser::Error::custom(format!(
                            "output '{}' holds an element that is not UTF-8 text, which a JSON string cannot carry: ask for it as binary data",
                            t.name
                        ))
                    })?;
                    seq.serialize_element(text)?;
                }
            }
            DataType::Fp16 | DataType::Bf16 => {}
        }
        seq.end()
    }
}

/// An encoded response: the JSON, then the binary tensors' own buffers (shared, not copied: a
/// 64 MiB output is not copied again behind its header), and, when binary tensors follow the JSON,
/// the JSON's length.
pub struct EncodedResponse {
    /// The JSON header, followed by the binary outputs when all together are small
    /// ([`COPY_BINARY_UNDER`]).
    pub header: Bytes,
    /// The binary outputs not in `header`, each its own buffer, sent without copying.
    pub binary: Vec<Bytes>,
    /// The JSON header's length when binary outputs follow it (`Inference-Header-Content-Length`).
    pub header_len: Option<usize>,
}

/// Binary outputs that add up to less than this are copied behind the JSON header: one buffer and
/// one body frame, where a frame and an I/O vector each cost more than copying a few kilobytes.
/// Larger outputs go as buffers of their own, never copied.
const COPY_BINARY_UNDER: usize = 4096;

impl EncodedResponse {
    /// Whether the body has no byte.
    pub fn is_empty(&self) -> bool {
        self.header.is_empty() && self.binary.iter().all(Bytes::is_empty)
    }

    /// The body in one buffer (to compress it).
    pub fn joined(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.header.len() + self.binary.iter().map(Bytes::len).sum::<usize>());
        out.extend_from_slice(&self.header);
        for b in &self.binary {
            out.extend_from_slice(b);
        }
        out
    }

    /// The body's parts, in order (in the binary outputs' vector when it has room).
    pub fn into_chunks(self) -> Vec<Bytes> {
        let mut chunks = self.binary;
        chunks.insert(0, self.header);
        chunks
    }
}

pub(super) fn param_json(v: &ParamValue) -> Value {
    match v {
        ParamValue::Bool(b) => Value::Bool(*b),
        ParamValue::Int64(i) => Value::from(*i),
        ParamValue::Uint64(u) => Value::from(*u),
        ParamValue::Double(d) => Value::from(*d),
        ParamValue::String(s) => Value::String(s.clone()),
    }
}

/// A response parameter as the response's JSON writes it: a non-finite double as its token (see
/// [`non_finite`]), the rest as [`param_json`] has them.
pub(super) struct ParamOut<'a>(pub &'a ParamValue);

impl serde::Serialize for ParamOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ParamValue::Double(d) if !d.is_finite() => serde::Serialize::serialize(&non_finite::NonFinite(*d), s),
            other => serde::Serialize::serialize(&param_json(other), s),
        }
    }
}

/// Encodes a response as JSON, with binary outputs appended per `options`. Fails only for a BYTES
/// output asked for as JSON that holds bytes no JSON string can carry.
pub fn encode_response(response: &InferenceResponse, options: &OutputOptions) -> Result<EncodedResponse, InferError> {
    #[derive(serde::Serialize)]
    struct Out<'a> {
        name: &'a str,
        datatype: &'static str,
        shape: &'a [i64],
        #[serde(skip_serializing_if = "Option::is_none")]
        parameters: Option<OutParams<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<JsonData<'a>>,
    }
    /// An output's parameters, written as they are (a JSON map built per output cost an allocation
    /// per key on every answer); keys in the order a sorted map had them.
    #[derive(serde::Serialize)]
    #[serde(untagged)]
    enum OutParams<'a> {
        Binary { binary_data_size: usize },
        Shm { shared_memory_byte_size: usize, shared_memory_region: &'a str },
    }
    /// The version number, written as the JSON string the protocol has without a `String` made for it.
    struct VersionString(i64);
    impl serde::Serialize for VersionString {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_str(&self.0)
        }
    }
    #[derive(serde::Serialize)]
    struct Body<'a> {
        model_name: &'a str,
        model_version: VersionString,
        #[serde(skip_serializing_if = "str::is_empty")]
        id: &'a str,
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        parameters: BTreeMap<&'a str, ParamOut<'a>>,
        outputs: Vec<Out<'a>>,
    }
    let mut binary: Vec<Bytes> = Vec::new();
    let outputs = response
        .outputs
        .iter()
        .map(|t| {
            if let Some(place) = options.shm.iter().find(|o| o.name == t.name).map(|o| &o.place) {
                // Written into the region by the frontend; the body only says where and how much.
                Out {
                    name: &t.name,
                    datatype: t.datatype.wire_name(),
                    shape: &t.shape,
                    parameters: Some(OutParams::Shm {
                        shared_memory_byte_size: response.output_len(t),
                        shared_memory_region: &place.region,
                    }),
                    data: None,
                }
            } else if options.is_binary(&t.name, t.datatype) {
                binary.push(t.data.clone());
                Out {
                    name: &t.name,
                    datatype: t.datatype.wire_name(),
                    shape: &t.shape,
                    parameters: Some(OutParams::Binary { binary_data_size: t.data.len() }),
                    data: None,
                }
            } else {
                Out {
                    name: &t.name,
                    datatype: t.datatype.wire_name(),
                    shape: &t.shape,
                    parameters: None,
                    data: Some(JsonData { tensor: t, tokens: true }),
                }
            }
        })
        .collect();
    let body = Body {
        model_name: &response.model_name,
        model_version: VersionString(response.model_version),
        id: &response.id,
        // In key order, the last of a repeated key, as a JSON object built from them had them.
        parameters: response.parameters.iter().map(|(k, v)| (k.as_str(), ParamOut(v))).collect(),
        outputs,
    };
    let binary_len: usize = binary.iter().map(Bytes::len).sum();
    let copied = binary_len < COPY_BINARY_UNDER;
    let mut out = Vec::with_capacity(256 + if copied { binary_len } else { 0 });
    // NaN and infinities as tritonserver writes them (see `non_finite`).
    let mut writer = serde_json::Serializer::with_formatter(&mut out, non_finite::Tokens);
    // Writing to a `Vec` cannot fail: only a BYTES element that is not text can.
    serde::Serialize::serialize(&body, &mut writer).map_err(|e| InferError::invalid(e.to_string()))?;
    let header_len = (!binary.is_empty()).then_some(out.len());
    if copied {
        for b in binary.drain(..) {
            out.extend_from_slice(&b);
        }
    }
    Ok(EncodedResponse { header: out.into(), binary, header_len })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::CorrelationId;

    fn no_raw() -> Result<(String, DataType, Vec<i64>, bool), InferError> {
        Err(InferError::invalid("no raw"))
    }

    /// Response parameters: in key order, the last of a repeated key, a non-finite double as its
    /// token (tritonserver's writer), the other kinds as they are.
    #[test]
    fn response_parameters_in_key_order_with_nan_and_infinities_as_tokens() {
        let response = InferenceResponse {
            in_place: Vec::new(),
            spent: Default::default(),
            model_name: "m".into(),
            model_version: 1,
            id: String::new(),
            parameters: vec![
                ("z".into(), ParamValue::Double(f64::NEG_INFINITY)),
                ("a".into(), ParamValue::Double(f64::NAN)),
                ("b".into(), ParamValue::Int64(1)),
                ("b".into(), ParamValue::String("last".into())),
                ("c".into(), ParamValue::Double(0.5)),
                ("d".into(), ParamValue::Bool(true)),
            ],
            outputs: Vec::new(),
        };
        let encoded = encode_response(&response, &OutputOptions::default()).unwrap();
        let text = String::from_utf8(encoded.header.to_vec()).unwrap();
        assert!(text.contains(r#""parameters":{"a":NaN,"b":"last","c":0.5,"d":true,"z":-Infinity}"#), "{text}");
    }

    /// Small binary outputs travel in the header's buffer, large ones as buffers of their own,
    /// and the header length counts the JSON alone either way.
    #[test]
    fn small_binary_outputs_are_copied_behind_the_header_and_large_ones_are_not() {
        let output = |name: &str, bytes: usize| Tensor {
            name: name.into(),
            datatype: DataType::Uint8,
            shape: vec![bytes as i64],
            data: Bytes::from(vec![name.as_bytes()[0]; bytes]),
        };
        let response = |outputs| InferenceResponse {
            in_place: Vec::new(),
            spent: Default::default(),
            model_name: "m".into(),
            model_version: 1,
            id: String::new(),
            parameters: Vec::new(),
            outputs,
        };
        let binary = OutputOptions { binary_default: true, ..Default::default() };

        let small = response(vec![output("A", 3), output("B", 2)]);
        let encoded = encode_response(&small, &binary).unwrap();
        let json_len = encoded.header_len.unwrap();
        assert!(encoded.binary.is_empty());
        assert_eq!(&encoded.header[json_len..], b"AAABB");
        let json: Value = serde_json::from_slice(&encoded.header[..json_len]).unwrap();
        assert_eq!(json["outputs"][1]["parameters"]["binary_data_size"], 2);
        assert_eq!(encoded.into_chunks().len(), 1);

        let large = response(vec![output("A", 3), output("B", COPY_BINARY_UNDER)]);
        let encoded = encode_response(&large, &binary).unwrap();
        let json_len = encoded.header_len.unwrap();
        assert_eq!(encoded.header.len(), json_len, "nothing copied behind the JSON");
        assert_eq!(encoded.binary.len(), 2);
        assert_eq!(encoded.binary[1].as_ptr(), large.outputs[1].data.as_ptr(), "the large output is not copied");
        assert_eq!(encoded.joined().len(), json_len + 3 + COPY_BINARY_UNDER);

        let json_only = encode_response(&small, &OutputOptions::default()).unwrap();
        assert_eq!(json_only.header_len, None);
        assert!(json_only.binary.is_empty());
    }

    #[test]
    fn json_and_binary_inputs() {
        let json = br#"{"id":"7","inputs":[{"name":"A","shape":[1,2],"datatype":"INT32","data":[[1,2]]},
            {"name":"B","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}],
            "outputs":[{"name":"X","parameters":{"binary_data":true}}],"parameters":{"p":3,"sequence_id":5}}"#;
        let mut body = json.to_vec();
        body.extend_from_slice(&1f32.to_le_bytes());
        body.extend_from_slice(&2f32.to_le_bytes());
        let (r, o) =
            decode_request(Bytes::from(body), Some(json.len()), no_raw, &SharedMemory::new(false), "m").unwrap();
        assert_eq!(r.id, "7");
        assert_eq!(&r.inputs[0].data[..], &[1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(r.inputs[1].data.len(), 8);
        assert_eq!(r.parameters, vec![("p".to_string(), ParamValue::Int64(3))]);
        assert_eq!(r.correlation_id, CorrelationId::Numeric(5));
        assert!(o.is_binary("X", DataType::Int32));
    }

    #[test]
    fn lying_shapes_are_rejected_without_allocating() {
        let json = br#"{"inputs":[{"name":"A","shape":[1,2147483648],"datatype":"INT32","data":[1]}]}"#;
        let err = decode_request(Bytes::from_static(json), None, no_raw, &SharedMemory::new(false), "m").unwrap_err();
        assert!(
            err.message.contains("Failed to parse 'data' field: shape does not match true shape"),
            "{}",
            err.message
        );
        let json =
            br#"{"inputs":[{"name":"A","shape":[4294967296,4294967296,4294967296],"datatype":"INT32","data":[1]}]}"#;
        assert!(decode_request(Bytes::from_static(json), None, no_raw, &SharedMemory::new(false), "m").is_err());
        let json = br#"{"inputs":[{"name":"A","shape":[2],"datatype":"INT8","data":[1,300]}]}"#;
        assert!(
            decode_request(Bytes::from_static(json), None, no_raw, &SharedMemory::new(false), "m")
                .unwrap_err()
                .message
                .contains("out of range")
        );
    }

    #[test]
    fn parameters_keep_the_last_of_a_repeated_key_and_read_escaped_keys() {
        // The datatype and the first key are escaped ("INT\u0033\u0032", "binary\u005fdata_size"):
        // they cannot be borrowed from the body and are decoded all the same.
        let json = br#"{"inputs":[{"name":"A","shape":[2],"datatype":"INT\u0033\u0032",
            "parameters":{"binary\u005fdata_size":4,"binary_data_size":8}}],
            "parameters":{"q":"a","r":true,"q":"b"}}"#;
        let mut body = json.to_vec();
        body.extend_from_slice(&[7; 8]);
        let (r, _) =
            decode_request(Bytes::from(body), Some(json.len()), no_raw, &SharedMemory::new(false), "m").unwrap();
        assert_eq!(r.inputs[0].datatype, DataType::Int32);
        assert_eq!(&r.inputs[0].data[..], &[7; 8]);
        assert_eq!(
            r.parameters,
            vec![("q".to_string(), ParamValue::String("b".into())), ("r".to_string(), ParamValue::Bool(true))]
        );
        let not_an_object = br#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":[1],"parameters":[1]}]}"#;
        let err = decode_request(Bytes::from_static(not_an_object), None, no_raw, &SharedMemory::new(false), "m")
            .unwrap_err();
        assert!(err.message.contains("a JSON object"), "{}", err.message);
    }

    #[test]
    fn binary_framing_faults() {
        let json = br#"{"inputs":[{"name":"A","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}]}"#;
        let mut body = json.to_vec();
        body.extend_from_slice(&[0; 4]);
        assert!(decode_request(Bytes::from(body), Some(json.len()), no_raw, &SharedMemory::new(false), "m").is_err());
        assert!(decode_request(Bytes::from_static(b"{}"), Some(10), no_raw, &SharedMemory::new(false), "m").is_err());
        assert!(
            decode_request(Bytes::from_static(b"{not json"), None, no_raw, &SharedMemory::new(false), "m").is_err()
        );
    }
}
