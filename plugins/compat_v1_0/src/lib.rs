//! `compat_v1_0`: a backend built against `nereus:backend@1.0.0` (`wit/archive/`), the oldest
//! release of the interface, with the bindings generated straight from that file rather than
//! through the SDK (which follows the current version). The host is a later 1.x, and this plugin
//! must keep loading and serving: the test of the WIT's compatibility promise.
//!
//! It negates INT32 tensors: `OUTPUT0 = -INPUT0` (wrapping), any shape.
#![allow(unsafe_code)]

wit_bindgen::generate!({
    path: "../../wit/archive/backend@1.0.0.wit",
    world: "backend",
});

use exports::nereus::backend::lifecycle::Guest;
use nereus::backend::host;
use nereus::backend::types::{DataType, InstanceInfo, ModelInfo, Request, Response, Tensor};

struct Negate;

fn negate(request: &Request) -> Result<Response, String> {
    let input = request.inputs.iter().find(|t| t.name == "INPUT0").ok_or("INPUT0 is missing")?;
    if input.datatype != DataType::Int32 {
        return Err("INPUT0 must be INT32".into());
    }
    let data = input
        .data
        .chunks_exact(4)
        .flat_map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]).wrapping_neg().to_le_bytes())
        .collect();
    let output = Tensor { name: "OUTPUT0".into(), datatype: DataType::Int32, shape: input.shape.clone(), data };
    Ok(Response { outputs: vec![output], parameters: Vec::new() })
}

impl Guest for Negate {
    fn initialize_backend(_backend_name: String) -> Result<(), String> {
        Ok(())
    }
    fn finalize_backend() {}
    fn initialize_model(model: ModelInfo) -> Result<(), String> {
        host::log(host::LogLevel::Info, &format!("compat_v1_0 (nereus:backend@1.0.0) serves {}", model.name));
        Ok(())
    }
    fn finalize_model() {}
    fn initialize_instance(_instance: InstanceInfo) -> Result<(), String> {
        Ok(())
    }
    fn finalize_instance() {}
    fn execute(requests: Vec<Request>) -> Result<(), String> {
        for (index, request) in requests.iter().enumerate() {
            let index = index as u32;
            match negate(request) {
                Ok(response) => host::send_response(index, &response, true)?,
                Err(message) => host::send_error(index, host::ErrorKind::InvalidArgument, &message)?,
            }
        }
        Ok(())
    }
}

export!(Negate);
