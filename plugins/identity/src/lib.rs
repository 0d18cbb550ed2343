//! `identity`: returns each input unchanged, any datatype (BYTES included) and any shape. Input
//! `INPUT<k>` comes back as `OUTPUT<k>`; an input with another name comes back under its own name.
//!
//! It also stands in for Triton's C++ `identity` test backend in Triton's QA suites
//! (conformance/, docs/conformance.md), so it honours that backend's two test parameters:
//! `execute_delay_ms` (each execution waits that long before answering, the whole batch once) and
//! `creation_delay_sec` (creating an instance waits that long). Both wait inside the sandbox, so
//! they count against `sandbox.execution_timeout_ms`.
use std::time::Duration;

use nereus_sdk::{Backend, InstanceInfo, ModelInfo, Request, Response, config_parameter};

struct Identity {
    execute_delay: Duration,
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
        Ok(Identity { execute_delay: Duration::from_millis(number(model, "execute_delay_ms")?) })
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        if !self.execute_delay.is_zero() {
            std::thread::sleep(self.execute_delay);
        }
        for mut request in requests {
            let names: Vec<String> = request.inputs().iter().map(|t| t.name().to_string()).collect();
            let mut response = Response::new();
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
