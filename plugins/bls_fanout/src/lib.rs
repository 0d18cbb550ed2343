//! `bls_fanout`: one request split into parts along its first dimension, each part sent to a model
//! at once (every call started before any is waited for, so the parts run in parallel on the
//! model's instances), and the answers merged back along that dimension in order.
//!
//! Model parameters: `fanout.model` (the model each part goes to: same inputs and outputs as this
//! one) and `fanout.parts` (how many parts at most, default 4; a request of fewer rows gets a part
//! per row). `sandbox.callable_models` must list the model. Every input must have the same first
//! dimension. A part that fails fails the request, naming the part.
use nereus_sdk::{Backend, CallError, InstanceInfo, ModelInfo, Request, Response, Tensor, config_parameter};

struct FanOut {
    model: String,
    parts: usize,
}

/// Rows `[from, to)` of `tensor` along its first dimension.
fn rows(tensor: &Tensor, from: usize, to: usize) -> Result<Tensor, String> {
    let shape = tensor.shape();
    let total = *shape.first().ok_or_else(|| format!("input '{}' has no dimension to split", tensor.name()))? as usize;
    if total == 0 || tensor.data().len() % total != 0 {
        return Err(format!("input '{}' cannot be split along its first dimension", tensor.name()));
    }
    let row = tensor.data().len() / total;
    let mut part_shape = shape.to_vec();
    part_shape[0] = (to - from) as i64;
    Ok(Tensor::from_raw(tensor.name(), tensor.datatype(), part_shape, tensor.data()[from * row..to * row].to_vec()))
}

/// The parts' tensors of one output, joined along the first dimension.
fn join(name: &str, parts: Vec<Tensor>) -> Result<Tensor, String> {
    let first = parts.first().ok_or("no parts")?;
    let (datatype, mut shape) = (first.datatype(), first.shape().to_vec());
    let mut rows = 0;
    let mut data = Vec::with_capacity(parts.iter().map(|p| p.data().len()).sum());
    for part in &parts {
        if part.datatype() != datatype || part.shape().get(1..) != shape.get(1..) {
            return Err(format!("the parts' '{name}' outputs differ in datatype or shape"));
        }
        rows += part.shape().first().copied().unwrap_or(1);
        data.extend_from_slice(part.data());
    }
    if let Some(first) = shape.first_mut() {
        *first = rows;
    }
    Ok(Tensor::from_raw(name, datatype, shape, data))
}

impl FanOut {
    fn split_and_merge(&self, request: &Request) -> Result<Response, String> {
        let total = request.inputs().first().and_then(|t| t.shape().first()).copied().unwrap_or(0).max(0) as usize;
        if total == 0 {
            return Err("bls_fanout needs inputs with a first dimension of at least 1".into());
        }
        let parts = self.parts.min(total);
        let bounds: Vec<(usize, usize)> = (0..parts).map(|k| (k * total / parts, (k + 1) * total / parts)).collect();
        // Start every part, then wait for each.
        let mut calls = Vec::with_capacity(parts);
        for &(from, to) in &bounds {
            let mut call = request.call(&self.model);
            for input in request.inputs() {
                call = call.input(rows(input, from, to)?);
            }
            for output in request.requested_outputs() {
                call = call.output(output);
            }
            calls.push(call.start());
        }
        let mut answers = Vec::with_capacity(parts);
        for (k, call) in calls.into_iter().enumerate() {
            let answer = call.and_then(|c| c.wait()).map_err(|e: CallError| format!("part {k} of {parts}: {e}"))?;
            answers.push(answer);
        }
        let mut response = Response::new();
        for name in request.requested_outputs() {
            let pieces = answers.iter_mut().map(|a| a.take_output(name)).collect::<Result<Vec<_>, _>>()?;
            response = response.output(join(name, pieces)?);
        }
        Ok(response)
    }
}

impl Backend for FanOut {
    fn new(model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        let parts = match config_parameter(model, "fanout.parts")? {
            Some(p) => p
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("fanout.parts must be at least 1, got {p:?}"))?,
            None => 4,
        };
        let model =
            config_parameter(model, "fanout.model")?.ok_or("bls_fanout needs the model parameter 'fanout.model'")?;
        Ok(FanOut { model, parts })
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            match self.split_and_merge(request) {
                Ok(response) => request.respond(response)?,
                Err(message) => request.fail_with(nereus_sdk::ErrorKind::Internal, &message)?,
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(FanOut);
