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
use super::codec::{JsonData, json_to_bytes, param_json};
use crate::error::InferError;
use crate::model::ModelVersion;
use crate::request::{InferenceRequest, InferenceResponse, ParamValue, StreamItem, StreamReceiver, Tensor};
use crate::server::Server;
use crate::tensor::DataType;
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
        Ok(value) => (StatusCode::OK, Bytes::from(value.to_string())),
        Err(e) => (error_status(&e), Bytes::from(json!({ "error": e.message }).to_string())),
    }
}

/// A stream item as a server-sent event; `None` for an item that only ends the stream.
fn event(item: &StreamItem) -> Option<Vec<u8>> {
    let value = match item.response.as_ref()? {
        Ok(r) => encode(r).unwrap_or_else(|e| json!({ "error": e.message })),
        Err(e) => json!({ "error": e.message }),
    };
    let mut event = b"data: ".to_vec();
    event.extend_from_slice(value.to_string().as_bytes());
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
    let Members(fields) = if body.is_empty() {
        Members(Vec::new())
    } else {
        serde_json::from_slice(body)
            .map_err(|e| InferError::invalid(format!("failed to parse the request JSON: {e}")))?
    };
    let mut request = InferenceRequest::default();
    if let Some((_, id)) = fields.iter().find(|(key, _)| key == "id") {
        request.id = id.as_str().ok_or_else(|| InferError::invalid("Unable to get request ID as string"))?.to_string();
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
                field(&mut request, model, key, value).map_err(|e| InferError {
                    message: format!("Converting keyword: 'parameters': {}", e.message),
                    ..e
                })?;
            }
        } else if key != "id" {
            field(&mut request, model, key, value)?;
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
fn field(request: &mut InferenceRequest, model: &ModelVersion, key: &str, value: &Value) -> Result<(), InferError> {
    match model.io.inputs.iter().find(|i| i.name == key) {
        Some(input) => {
            if request.inputs.iter().any(|i| i.name == key) {
                return Err(InferError::invalid(format!("input '{key}' already exists in request")));
            }
            request.inputs.push(input_tensor(input, model.io.max_batch_size > 0, value)?);
            Ok(())
        }
        None => {
            let value = match value {
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
fn input_tensor(input: &IoTensor, batching: bool, value: &Value) -> Result<Tensor, InferError> {
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
    let data = json_to_bytes(name, input.datatype, count as u64, value, false)?;
    Ok(Tensor { name: name.clone(), datatype: input.datatype, shape, data })
}

/// A response as generate's flat JSON object. Keys are unique: the response's own fields first,
/// then its parameters, then its outputs, the first of a name kept (as tritonserver's map does).
fn encode(r: &InferenceResponse) -> Result<Value, InferError> {
    let mut fields: BTreeMap<String, Value> = BTreeMap::new();
    if !r.id.is_empty() {
        fields.insert("id".into(), Value::String(r.id.clone()));
    }
    fields.insert("model_name".into(), Value::String(r.model_name.to_string()));
    fields.insert("model_version".into(), Value::String(r.model_version.to_string()));
    for (key, value) in &r.parameters {
        fields.entry(key.clone()).or_insert_with(|| param_json(value));
    }
    for t in &r.outputs {
        if matches!(t.datatype, DataType::Fp16 | DataType::Bf16) {
            return Err(InferError::unsupported(format!(
                "output '{}' has datatype {}, which has no JSON form",
                t.name, t.datatype
            )));
        }
        let data = serde_json::to_value(JsonData { tensor: t, tokens: false })
            .map_err(|e| InferError::internal(format!("output '{}' could not be written as JSON: {e}", t.name)))?;
        let value = match data {
            Value::Array(mut items) if items.len() == 1 => items.pop().unwrap_or(Value::Null),
            data => data,
        };
        fields.entry(t.name.clone()).or_insert(value);
    }
    Ok(Value::Object(fields.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(dims: &[i64], datatype: DataType) -> IoTensor {
        IoTensor { name: "X".into(), datatype, dims: dims.to_vec(), reshape: None, optional: false }
    }

    #[test]
    fn inputs_are_shaped_from_the_metadata() {
        let t = input_tensor(&input(&[-1], DataType::Int32), true, &json!([1, 2, 3])).unwrap();
        assert_eq!(t.shape, vec![1, 3]);
        let t = input_tensor(&input(&[2, -1], DataType::Int32), false, &json!([1, 2, 3, 4])).unwrap();
        assert_eq!(t.shape, vec![2, 2]);
        let t = input_tensor(&input(&[1], DataType::Bytes), true, &json!("hello")).unwrap();
        assert_eq!((t.shape.clone(), &t.data[4..]), (vec![1, 1], &b"hello"[..]));
        let e = input_tensor(&input(&[4], DataType::Int32), false, &json!([1, 2, 3])).unwrap_err();
        assert_eq!(e.message, "The schema can not convert input 'X' to tensor with proper shape");
        let e = input_tensor(&input(&[-1], DataType::Int32), false, &json!(["a"])).unwrap_err();
        assert!(e.message.contains("non-signed-integer as signed-integer"), "{}", e.message);
    }

    #[test]
    fn responses_are_flat_objects_with_single_elements_unwrapped() {
        let r = InferenceResponse {
            in_place: Vec::new(),
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
        assert_eq!(
            encode(&r).unwrap(),
            json!({"model_name": "m", "model_version": "3", "score": 0.5, "ONE": 7, "TEXT": ["hi", "!"]})
        );
    }
}
