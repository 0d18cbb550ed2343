//! `repeat_int32`: Triton's repeat example as a decoupled Nereus backend. Inputs IN INT32 [-1],
//! DELAY UINT32 [-1], WAIT UINT32 [1]; for each element i of IN it waits DELAY[i] milliseconds and
//! sends a response with OUT = [IN[i]] and IDX = [i]; after the last it waits WAIT milliseconds and
//! completes the request with the final flag alone. Configured with
//! `model_transaction_policy { decoupled: true }` every response goes out as it is sent; without it
//! (Triton's QA runs it both ways) the host keeps them until the final flag and a gRPC stream gets
//! the first, any other request its one response or an error when IN has more than one element. When the client cancels (or goes away) it stops
//! early: it checks `is-cancelled` while it waits, and completes the request.
use std::time::Duration;

use nereus_sdk::{Backend, InstanceInfo, ModelInfo, Request, Response, Tensor};

struct Repeat;

fn repeat(request: &Request) -> Result<(), String> {
    let values = request.input("IN")?.as_slice::<i32>()?;
    let delays = request.input("DELAY")?.as_slice::<u32>()?;
    let wait_ms = request.input("WAIT")?.as_slice::<u32>()?;
    if delays.len() != values.len() {
        return Err(format!("DELAY has {} elements but IN has {}", delays.len(), values.len()));
    }
    for (i, (value, delay)) in values.iter().zip(delays.iter()).enumerate() {
        if request.wait_unless_cancelled(Duration::from_millis(u64::from(*delay))) {
            return request.complete();
        }
        let response = Response::new()
            .output(Tensor::from_slice("OUT", vec![1], &[*value]))
            .output(Tensor::from_slice("IDX", vec![1], &[i as u32]));
        request.send(response, false)?;
    }
    request.wait_unless_cancelled(Duration::from_millis(u64::from(wait_ms.first().copied().unwrap_or(0))));
    request.complete()
}

impl Backend for Repeat {
    fn new(_model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(Repeat)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            if let Err(message) = repeat(request) {
                request.fail(&message)?;
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(Repeat);
