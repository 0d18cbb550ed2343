//! Triton's generate extension: `POST /v2/models/{m}[/versions/{v}]/generate` and
//! `…/generate_stream`. The body is a flat JSON object: a key that names an input of the model is
//! that input (a value or a 1-D array, shaped from the model's metadata), `parameters` is an object
//! whose keys are read the same way, `id` is the request's id, and any other key is a request
//! parameter. Each response is a flat JSON object too: `id`, `model_name`, `model_version`, the
//! response's parameters and its outputs (an output of one element as a value, else an array).
//! `generate` answers a model's one response; `generate_stream` sends every response as a
//! server-sent event (`data: {…}\n\n`), errors as `data: {"error": …}\n\n`, its status taken from
//! the first response, as tritonserver's.
use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::body::ReplyBody;
use super::codec::{JsonData, ParamOut, json_to_bytes};
use super::non_finite;
use crate::error::InferError;
use crate::model::ModelVersion;
use crate::request::{InferenceRequest, InferenceResponse, ParamValue, StreamItem, StreamReceiver, Tensor};
use crate::server::Server;
use crate::tensor::{DataType, count_bytes_elements};
use crate::validate::IoTensor;

/// How many events a stream holds for a client that reads slowly; past them the forwarding task
/// waits (and the model's stream buffer then holds the model back).
const EVENTS_AHEAD: usize = 16;

/// Runs a generate request (`stream`: generate_stream) whose body has been read.
pub async fn answer(
    server: &Arc<Server>,
    name: String,
    version: Option<i64>,
    stream: bool,
    body: Bytes,
) -> Result<Response<ReplyBody>, InferError> {
    let model = server.version(&name, version)?;
    let mut request = decode(&body, &model)?;
    request.model_name = name;
    request.model_version = version;
    let (mut items, _) = server.infer_stream(request)?;
    if !stream {
        let (status, body) = one_response(&mut items).await;
        return Ok(reply(status, "application/json", ReplyBody::new(body)));
    }
    // The first response decides the status; it waits for the model, as tritonserver's does.
    let mut first = Vec::new();
    let mut status = StatusCode::OK;
    let mut done = true;
    if let Some(item) = items.recv().await {
        if let Some(Err(e)) = &item.response {
            status = error_status(e);
        }
        first = event(&item).unwrap_or_default();
        done = item.final_;
    }
    let (tx, rx) = tokio::sync::mpsc::channel(EVENTS_AHEAD);
    if !done {
        tokio::spawn(forward(items, tx));
    }
    Ok(reply(status, "text/event-stream; charset=utf-8", ReplyBody::streamed(first.into(), rx)))
}

/// Sends the stream's events until its final one, or until the client is gone (the body, and
/// with it the receiver, dropped): then `items` is dropped, which cancels the request.
async fn forward(mut items: StreamReceiver, tx: tokio::sync::mpsc::Sender<Bytes>) {
    loop {
        let item = tokio::select! {
            item = items.recv() => item,
            () = tx.closed() => return,
        };
        let Some(item) = item else { return };
        if let Some(event) = event(&item)
            && tx.send(event.into()).await.is_err()
        {
            return;
        }
        if item.final_ {
            return;
        }
    }
}

/// The one response `generate` answers with; a model that answers other than once is an error.
async fn one_response(items: &mut StreamReceiver) -> (StatusCode, Bytes) {
    let mut answers = Vec::new();
    while let Some(item) = items.recv().await {
        answers.extend(item.response);
        if item.final_ {
            break;
        }
    }
    let outcome = match answers.len() {
        1 => answers.pop().unwrap_or_else(|| Err(InferError::internal("no response"))).and_then(|r| encode(&r)),
        _ => Err(InferError::internal(
            "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses",
        )),
    };
    match outcome {
        Ok(json) => (StatusCode::OK, Bytes::from(json)),
        Err(e) => (error_status(&e), Bytes::from(json!({ "error": e.message }).to_string())),
    }
}

/// A stream item as a server-sent event; `None` for an item that only ends the stream.
fn event(item: &StreamItem) -> Option<Vec<u8>> {
    let json = match item.response.as_ref()? {
        Ok(r) => encode(r).unwrap_or_else(|e| json!({ "error": e.message }).to_string().into_bytes()),
        Err(e) => json!({ "error": e.message }).to_string().into_bytes(),
    };
    let mut event = b"data: ".to_vec();
    event.extend_from_slice(&json);
    event.extend_from_slice(b"\n\n");
    Some(event)
}

fn reply(status: StatusCode, content_type: &'static str, body: ReplyBody) -> Response<ReplyBody> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn error_status(e: &InferError) -> StatusCode {
    StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The request a generate body describes for `model`.
fn decode(body: &[u8], model: &ModelVersion) -> Result<InferenceRequest, InferError> {
    let unparsable = |e: serde_json::Error| InferError::invalid(format!("failed to parse the request JSON: {e}"));
    // `tokens`: the body had NaN or infinities as rapidjson's tokens, now marked strings (see
    // `non_finite`), read as numbers only where a number may go.
    let (Members(fields), tokens) = if body.is_empty() {
        (Members(Vec::new()), false)
    } else {
        match serde_json::from_slice(body) {
            Ok(members) => (members, false),
            Err(e) => {
                let rewritten =
                    std::str::from_utf8(body).ok().and_then(non_finite::rewrite).ok_or_else(|| unparsable(e))?;
                (serde_json::from_str(&rewritten).map_err(unparsable)?, true)
            }
        }
    };
    let mut request = InferenceRequest::default();
    if let Some((_, id)) = fields.iter().find(|(key, _)| key == "id") {
        request.id = id
            .as_str()
            .filter(|id| !non_finite::is_marked(id))
            .ok_or_else(|| InferError::invalid("Unable to get request ID as string"))?
            .to_string();
    }
    let inputs = &model.io.inputs;
    for (key, value) in &fields {
        if key == "parameters" {
            if inputs.iter().any(|i| i.name == "parameters") {
                return Err(InferError::invalid(
                    "Keyword 'parameters' for nested schema also given as input tensor name",
                ));
            }
            let Value::Object(nested) = value else {
                return Err(InferError::invalid(
                    "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object",
                ));
            };
            for (key, value) in nested {
                field(&mut request, model, key, value, tokens).map_err(|e| InferError {
                    message: format!("Converting keyword: 'parameters': {}", e.message),
                    ..e
                })?;
            }
        } else if key != "id" {
            field(&mut request, model, key, value, tokens)?;
        }
    }
    Ok(request)
}

/// A JSON object's members in the body's order, a repeated key kept: tritonserver reads a
/// generate body member by member, so a repeated input is refused and the first faulty member in
/// the body is the one its error names (a map would keep one value per key, in key order).
struct Members(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Value>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// One key of the body: an input of the model, or a request parameter.
fn field(
    request: &mut InferenceRequest,
    model: &ModelVersion,
    key: &str,
    value: &Value,
    tokens: bool,
) -> Result<(), InferError> {
    match model.io.inputs.iter().find(|i| i.name == key) {
        Some(input) => {
            if request.inputs.iter().any(|i| i.name == key) {
                return Err(InferError::invalid(format!("input '{key}' already exists in request")));
            }
            request.inputs.push(input_tensor(input, model.io.max_batch_size > 0, value, tokens)?);
            Ok(())
        }
        None => {
            let value = match value {
                Value::String(_) if let Some(number) = non_finite::token(value).filter(|_| tokens) => {
                    ParamValue::Double(number)
                }
                Value::String(s) => ParamValue::String(s.clone()),
                Value::Bool(b) => ParamValue::Bool(*b),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => ParamValue::Int64(i),
                    None => ParamValue::Double(n.as_f64().unwrap_or(f64::NAN)),
                },
                _ => {
                    return Err(InferError::invalid(format!(
                        "parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
                    )));
                }
            };
            crate::api::params::apply(request, key, value)
        }
    }
}

/// An input from a value or a 1-D array, shaped as tritonserver shapes it from the model's
/// metadata (the batch dimension, when the model batches, is -1 there): the fixed dimensions take
/// their share of the elements, the innermost variable one the rest, other variable ones 1.
fn input_tensor(input: &IoTensor, batching: bool, value: &Value, tokens: bool) -> Result<Tensor, InferError> {
    let name = &input.name;
    let count = match value {
        Value::Array(items) => items.len() as i64,
        _ => 1,
    };
    let unshapeable =
        || InferError::invalid(format!("The schema can not convert input '{name}' to tensor with proper shape"));
    let mut shape: Vec<i64> = batching.then_some(-1).into_iter().chain(input.dims.iter().copied()).collect();
    if count == 0 {
        shape.clear();
    } else {
        let mut left = count;
        for d in shape.iter().rev().filter(|d| **d != -1) {
            if *d <= 0 || left % d != 0 {
                return Err(unshapeable());
            }
            left /= d;
        }
        for d in shape.iter_mut().rev().filter(|d| **d == -1) {
            *d = left;
            left = 1;
        }
        if left != 1 {
            return Err(unshapeable());
        }
    }
    let data = json_to_bytes(name, input.datatype, count as u64, value, tokens)?;
    Ok(Tensor { name: name.clone(), datatype: input.datatype, shape, data })
}

/// One field of generate's flat object.
enum Field<'a> {
    Value(Value),
    Param(&'a ParamValue),
    /// An output: its elements, or its one element alone.
    Output(&'a Tensor),
}

/// A response as generate's flat JSON object. Keys are unique: the response's own fields first,
/// then its parameters, then its outputs, the first of a name kept (as tritonserver's map does).
/// Non-finite floats are rapidjson's tokens (`NaN`, `Infinity`), as in inference responses.
fn encode(r: &InferenceResponse) -> Result<Vec<u8>, InferError> {
    let mut fields: BTreeMap<&str, Field<'_>> = BTreeMap::new();
    if !r.id.is_empty() {
        fields.insert("id", Field::Value(Value::String(r.id.clone())));
    }
    fields.insert("model_name", Field::Value(Value::String(r.model_name.to_string())));
    fields.insert("model_version", Field::Value(Value::String(r.model_version.to_string())));
    for (key, value) in &r.parameters {
        fields.entry(key).or_insert(Field::Param(value));
    }
    for t in &r.outputs {
        if matches!(t.datatype, DataType::Fp16 | DataType::Bf16) {
            return Err(InferError::unsupported(format!(
                "output '{}' has datatype {}, which has no JSON form",
                t.name, t.datatype
            )));
        }
        fields.entry(&t.name).or_insert(Field::Output(t));
    }
    let unwritable = |e: serde_json::Error| InferError::internal(format!("the response could not be written: {e}"));
    let mut out = vec![b'{'];
    for (i, (key, field)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_tokens(&mut out, key).map_err(unwritable)?;
        out.push(b':');
        match field {
            Field::Value(v) => write_tokens(&mut out, v).map_err(unwritable)?,
            Field::Param(p) => write_tokens(&mut out, &ParamOut(p)).map_err(unwritable)?,
            Field::Output(t) => {
                let start = out.len();
                write_tokens(&mut out, &JsonData { tensor: t, tokens: true }).map_err(|e| {
                    InferError::internal(format!("output '{}' could not be written as JSON: {e}", t.name))
                })?;
                // A single element stands for itself, without its array's brackets.
                let single = match t.datatype.element_size() {
                    Some(size) => t.data.len() == size,
                    None => count_bytes_elements(&t.data) == Ok(1),
                };
                if single && out.len() >= start + 2 {
                    out.pop();
                    out.remove(start);
                }
            }
        }
    }
    out.push(b'}');
    Ok(out)
}

/// Appends `value` to `out` as JSON, non-finite floats as their tokens.
fn write_tokens(out: &mut Vec<u8>, value: &impl serde::Serialize) -> Result<(), serde_json::Error> {
    value.serialize(&mut serde_json::Serializer::with_formatter(out, non_finite::Tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(dims: &[i64], datatype: DataType) -> IoTensor {
        IoTensor { name: "X".into(), datatype, dims: dims.to_vec(), reshape: None, optional: false }
    }

    #[test]
    fn inputs_are_shaped_from_the_metadata() {
        let t = input_tensor(&input(&[-1], DataType::Int32), true, &json!([1, 2, 3]), false).unwrap();
        assert_eq!(t.shape, vec![1, 3]);
        let t = input_tensor(&input(&[2, -1], DataType::Int32), false, &json!([1, 2, 3, 4]), false).unwrap();
        assert_eq!(t.shape, vec![2, 2]);
        let t = input_tensor(&input(&[1], DataType::Bytes), true, &json!("hello"), false).unwrap();
        assert_eq!((t.shape.clone(), &t.data[4..]), (vec![1, 1], &b"hello"[..]));
        let e = input_tensor(&input(&[4], DataType::Int32), false, &json!([1, 2, 3]), false).unwrap_err();
        assert_eq!(e.message, "The schema can not convert input 'X' to tensor with proper shape");
        let e = input_tensor(&input(&[-1], DataType::Int32), false, &json!(["a"]), false).unwrap_err();
        assert!(e.message.contains("non-signed-integer as signed-integer"), "{}", e.message);
    }

    #[test]
    fn responses_are_flat_objects_with_single_elements_unwrapped() {
        let r = InferenceResponse {
            in_place: Vec::new(),
            spent: Default::default(),
            model_name: "m".into(),
            model_version: 3,
            id: String::new(),
            parameters: vec![("score".into(), ParamValue::Double(0.5)), ("model_name".into(), ParamValue::Bool(true))],
            outputs: vec![
                Tensor {
                    name: "ONE".into(),
                    datatype: DataType::Int32,
                    shape: vec![1, 1],
                    data: 7i32.to_le_bytes().to_vec().into(),
                },
                Tensor {
                    name: "TEXT".into(),
                    datatype: DataType::Bytes,
                    shape: vec![2],
                    data: [&2u32.to_le_bytes()[..], b"hi", &1u32.to_le_bytes(), b"!"].concat().into(),
                },
            ],
        };
        let written: Value = serde_json::from_slice(&encode(&r).unwrap()).unwrap();
        assert_eq!(
            written,
            json!({"model_name": "m", "model_version": "3", "score": 0.5, "ONE": 7, "TEXT": ["hi", "!"]})
        );
    }

    /// NaN and infinities are written as rapidjson's tokens, as inference responses write them.
    #[test]
    fn non_finite_floats_are_written_as_tokens() {
        let floats = |name: &str, values: &[f32]| Tensor {
            name: name.into(),
            datatype: DataType::Fp32,
            shape: vec![values.len() as i64],
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into(),
        };
        let r = InferenceResponse {
            in_place: Vec::new(),
            spent: Default::default(),
            model_name: "m".into(),
            model_version: 1,
            id: "x".into(),
            parameters: vec![("p".into(), ParamValue::Double(f64::NAN))],
            outputs: vec![floats("A", &[f32::NAN, f32::INFINITY, 1.5]), floats("B", &[f32::NEG_INFINITY])],
        };
        assert_eq!(
            String::from_utf8(encode(&r).unwrap()).unwrap(),
            r#"{"A":[NaN,Infinity,1.5],"B":-Infinity,"id":"x","model_name":"m","model_version":"1","p":NaN}"#
        );
    }
}
