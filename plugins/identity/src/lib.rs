//! `identity`: returns each input unchanged, any datatype (BYTES included) and any shape. Input
//! `INPUT<k>` comes back as `OUTPUT<k>`; an input with another name comes back under its own name.
//! As Triton's identity backend: when an optional `INPUT<k>` is left out but `OUTPUT<k>` is asked
//! for, `OUTPUT<k>` is zeros of the input's datatype and dims (-1 read as 1, after the request's
//! batch size when the model batches).
//!
//! It also stands in for Triton's C++ `identity` test backend in Triton's QA suites
//! (conformance/, docs/conformance.md), so it honours that backend's two test parameters:
//! `execute_delay_ms` (each execution waits that long before answering, the whole batch once) and
//! `creation_delay_sec` (creating an instance waits that long). Both wait inside the sandbox, so
//! they count against `sandbox.execution_timeout_ms`.
use std::time::Duration;

use nereus_sdk::{Backend, DataType, InstanceInfo, ModelInfo, Request, Response, Tensor, config_parameter};

struct Identity {
    execute_delay: Duration,
    /// Whether the model batches (its requests' first dimension is the batch).
    batching: bool,
    /// The optional inputs: (name, datatype, dims with -1 as 1).
    optional: Vec<(String, DataType, Vec<i64>)>,
}

/// The configuration's datatype names (`TYPE_FP32`), as the host's JSON shows them.
fn datatype(name: &str) -> Option<DataType> {
    Some(match name.strip_prefix("TYPE_")? {
        "BOOL" => DataType::Bool,
        "UINT8" => DataType::Uint8,
        "UINT16" => DataType::Uint16,
        "UINT32" => DataType::Uint32,
        "UINT64" => DataType::Uint64,
        "INT8" => DataType::Int8,
        "INT16" => DataType::Int16,
        "INT32" => DataType::Int32,
        "INT64" => DataType::Int64,
        "FP16" => DataType::Fp16,
        "FP32" => DataType::Fp32,
        "FP64" => DataType::Fp64,
        "STRING" => DataType::Bytes,
        "BF16" => DataType::Bf16,
        _ => return None,
    })
}

/// Bytes of one zero element (an empty string for BYTES: its 4-byte length).
fn zero_size(datatype: DataType) -> usize {
    match datatype {
        DataType::Bool | DataType::Uint8 | DataType::Int8 => 1,
        DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => 2,
        DataType::Uint32 | DataType::Int32 | DataType::Fp32 | DataType::Bytes => 4,
        DataType::Uint64 | DataType::Int64 | DataType::Fp64 => 8,
    }
}

/// The model's batching and optional inputs, from its configuration.
fn optional_inputs(model: &ModelInfo) -> Result<(bool, Vec<(String, DataType, Vec<i64>)>), String> {
    let config: serde_json::Value =
        serde_json::from_str(&model.config_json).map_err(|e| format!("model config is not JSON: {e}"))?;
    let batching = config.get("max_batch_size").and_then(|v| v.as_i64()).unwrap_or(0) > 0;
    let mut optional = Vec::new();
    for input in config.get("input").and_then(|v| v.as_array()).into_iter().flatten() {
        if input.get("optional").and_then(|v| v.as_bool()) != Some(true) {
            continue;
        }
        let name = input.get("name").and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let dt = input.get("data_type").and_then(|v| v.as_str()).and_then(datatype);
        let dt = dt.ok_or_else(|| format!("optional input '{name}' has no datatype identity can produce"))?;
        let dims = input
            .get("reshape")
            .and_then(|r| r.get("shape"))
            .or_else(|| input.get("dims"))
            .and_then(|v| v.as_array())
            .map(|dims| dims.iter().map(|d| d.as_i64().unwrap_or(1)).map(|d| if d == -1 { 1 } else { d }).collect())
            .unwrap_or_default();
        optional.push((name, dt, dims));
    }
    Ok((batching, optional))
}

fn output_name(input: &str) -> String {
    match input.strip_prefix("INPUT") {
        Some(suffix) => format!("OUTPUT{suffix}"),
        None => input.to_string(),
    }
}

/// A non-negative integer parameter of the model's configuration, 0 when absent.
fn number(model: &ModelInfo, key: &str) -> Result<u64, String> {
    match config_parameter(model, key)? {
        None => Ok(0),
        Some(v) => v.trim().parse().map_err(|_| format!("parameter '{key}' must be a non-negative integer, got '{v}'")),
    }
}

impl Backend for Identity {
    fn new(model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        let creation_delay = number(model, "creation_delay_sec")?;
        if creation_delay > 0 {
            std::thread::sleep(Duration::from_secs(creation_delay));
        }
        let (batching, optional) = optional_inputs(model)?;
        Ok(Identity { execute_delay: Duration::from_millis(number(model, "execute_delay_ms")?), batching, optional })
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        if !self.execute_delay.is_zero() {
            std::thread::sleep(self.execute_delay);
        }
        for mut request in requests {
            let names: Vec<String> = request.inputs().iter().map(|t| t.name().to_string()).collect();
            let batch = match request.inputs().first().and_then(|t| t.shape().first()) {
                Some(&b) if self.batching => Some(b),
                _ => None,
            };
            let mut response = Response::new();
            for (name, dt, dims) in self.optional.iter().filter(|(n, ..)| !names.contains(n)) {
                let out = output_name(name);
                if request.wants(&out) {
                    let shape: Vec<i64> = batch.into_iter().chain(dims.iter().copied()).collect();
                    let elements = shape.iter().product::<i64>().max(0) as usize;
                    response = response.output(Tensor::from_raw(out, *dt, shape, vec![0; elements * zero_size(*dt)]));
                }
            }
            for name in names {
                let out = output_name(&name);
                if request.wants(&out) {
                    let tensor = request.take_input(&name)?.renamed(out);
                    response = response.output(tensor);
                }
            }
            request.respond(response)?;
        }
        Ok(())
    }
}

nereus_sdk::export!(Identity);
