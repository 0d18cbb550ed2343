//! `sequence`: a stand-in for Triton's C++ `sequence` test backend (server repository,
//! `src/test/sequence`), which Triton's QA suite L0_sequence_batcher serves as
//! `custom_sequence_int32` (conformance/, docs/conformance.md). As that backend: each instance keeps
//! one INT32 accumulator per batch position (as many as `max_batch_size`, at least one), and for
//! the request at position `r` of an execution, with controls `START` and `READY` (INT32 [1]) and
//! `INPUT` (INT32 [-1]):
//!
//! - READY = 0: the input is ignored and the accumulator left as it is (a padding request);
//! - READY = 1, START = 1: the accumulator becomes the sum of the input's elements;
//! - READY = 1, START = 0: the input's elements are added to it;
//!
//! and when READY = 1, `OUTPUT` has the input's shape with the accumulator in every element. The
//! parameter `execute_delay_ms` makes each execution wait that long first (the whole batch once).
//! A batch larger than the accumulators fails, with the backend's words.
use std::time::Duration;

use nereus_sdk::{Backend, InstanceInfo, ModelInfo, Request, Response, Tensor, config_parameter};

struct Sequence {
    accumulators: Vec<i32>,
    execute_delay: Duration,
}

/// The first INT32 of a control input.
fn control(request: &Request, name: &str) -> Result<i32, String> {
    let t = request.input(name).map_err(|_| format!("failed to read input '{name}'"))?;
    t.as_slice::<i32>()?.first().copied().ok_or_else(|| format!("input '{name}' is empty"))
}

impl Sequence {
    /// One request at batch position `r`: its response, or `None` for a padding request.
    fn step(&mut self, r: usize, request: &Request) -> Result<Option<Response>, String> {
        let (start, ready) = (control(request, "START")?, control(request, "READY")?);
        let input = request.input("INPUT").map_err(|_| "failed to read input 'INPUT'".to_string())?;
        let values = input.as_slice::<i32>()?;
        if ready == 0 {
            return Ok(None);
        }
        let acc = &mut self.accumulators[r];
        if start != 0 {
            *acc = 0;
        }
        *acc = values.iter().fold(*acc, |sum, v| sum.wrapping_add(*v));
        let output = vec![*acc; values.len()];
        let mut response = Response::new();
        if request.wants("OUTPUT") {
            response = response.output(Tensor::from_slice("OUTPUT", input.shape().to_vec(), &output));
        }
        Ok(Some(response))
    }
}

impl Backend for Sequence {
    fn new(model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        let config: serde_json::Value =
            serde_json::from_str(&model.config_json).map_err(|e| format!("model config is not JSON: {e}"))?;
        let max_batch_size = config.get("max_batch_size").and_then(|v| v.as_i64()).unwrap_or(0);
        let delay = match config_parameter(model, "execute_delay_ms")? {
            None => 0,
            Some(v) => {
                v.trim().parse().map_err(|_| format!("parameter 'execute_delay_ms' must be an integer, got '{v}'"))?
            }
        };
        Ok(Sequence {
            accumulators: vec![0; max_batch_size.max(1) as usize],
            execute_delay: Duration::from_millis(delay),
        })
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        if requests.len() > self.accumulators.len() {
            return Err("unable to execute batch larger than max-batch-size".into());
        }
        if !self.execute_delay.is_zero() {
            std::thread::sleep(self.execute_delay);
        }
        for (r, request) in requests.iter().enumerate() {
            match self.step(r, request) {
                Ok(Some(response)) => request.respond(response)?,
                // Padding: answered empty, which nobody reads.
                Ok(None) => request.respond(Response::new())?,
                Err(message) => request.fail(&message)?,
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(Sequence);
