//! `accumulate`: a stateful running sum, for models with `sequence_batching`. For each request
//! (INT32 input `INPUT`, INT32 output `OUTPUT`, same shape), `OUTPUT` = the sum of `INPUT` over the
//! sequence so far. It works in either of the two ways Triton offers stateful backends:
//!
//! - **implicit state**: with a state input `STATE_IN` (and state output `STATE_OUT`) configured,
//!   `OUTPUT` = `STATE_OUT` = `STATE_IN` + `INPUT`; the host keeps the state between requests and
//!   resets it at START, so the plugin holds nothing.
//! - **control inputs**: otherwise the plugin keeps one sum per `CORRID` (any datatype), restarted by
//!   `START` and dropped at `END`, as Triton's `simple_sequence` does.
//!
//! A request whose `READY` control is false is padding for an empty batch slot: it is answered with
//! zeros and changes nothing. If the model lists an INT32 output `BATCH_READY`, every response
//! carries the READY value of each request of the execution, in batch order (batch position =
//! sequence slot for the direct strategy).
use std::collections::HashMap;

use nereus_sdk::{Backend, DataType, InstanceInfo, ModelInfo, Request, Response, Tensor};

#[derive(Default)]
struct Accumulate {
    sums: HashMap<Vec<u8>, Vec<i32>>,
}

/// Whether an optional control is on (absent: `default`). Any datatype: on means a non-zero byte.
fn flag(request: &Request, name: &str, default: bool) -> bool {
    request.input(name).map_or(default, |t| t.data().iter().any(|b| *b != 0))
}

fn add(a: &[i32], b: &[i32]) -> Result<Vec<i32>, String> {
    if a.len() != b.len() {
        return Err(format!("state has {} elements, INPUT {}", a.len(), b.len()));
    }
    Ok(a.iter().zip(b).map(|(x, y)| x.wrapping_add(*y)).collect())
}

impl Accumulate {
    fn total(&mut self, request: &Request, value: &[i32]) -> Result<(Vec<i32>, Option<Vec<i32>>), String> {
        if let Ok(state) = request.input("STATE_IN") {
            if state.datatype() != DataType::Int32 {
                return Err("STATE_IN must be INT32".into());
            }
            let total = add(&state.as_slice::<i32>()?, value)?;
            return Ok((total.clone(), Some(total)));
        }
        let key = request.input("CORRID").map(|t| t.data().to_vec()).unwrap_or_default();
        let total = match self.sums.get(&key) {
            Some(sum) if !flag(request, "START", false) => add(sum, value)?,
            _ => value.to_vec(),
        };
        if flag(request, "END", false) {
            self.sums.remove(&key);
        } else {
            self.sums.insert(key, total.clone());
        }
        Ok((total, None))
    }
}

impl Backend for Accumulate {
    fn new(_model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(Accumulate::default())
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        let ready: Vec<i32> = requests.iter().map(|r| i32::from(flag(r, "READY", true))).collect();
        for (request, is_ready) in requests.iter().zip(&ready) {
            let input = request.input("INPUT")?;
            let shape = input.shape().to_vec();
            let value = input.as_slice::<i32>()?.into_owned();
            let outcome = if *is_ready == 1 { self.total(request, &value) } else { Ok((vec![0; value.len()], None)) };
            let (total, state) = match outcome {
                Ok(t) => t,
                Err(message) => {
                    request.fail(&message)?;
                    continue;
                }
            };
            let mut response = Response::new();
            if request.wants("OUTPUT") {
                response = response.output(Tensor::from_slice("OUTPUT", shape.clone(), &total));
            }
            if let Some(state) = state {
                response = response.output(Tensor::from_slice("STATE_OUT", shape.clone(), &state));
            }
            if request.wants("BATCH_READY") {
                response = response.output(Tensor::from_slice("BATCH_READY", vec![1, ready.len() as i64], &ready));
            }
            request.respond(response)?;
        }
        Ok(())
    }
}

nereus_sdk::export!(Accumulate);
