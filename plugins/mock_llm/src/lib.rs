//! `mock_llm`: a stand-in for the Python model of that name in Triton's QA
//! (`qa/python_models/generate_models/mock_llm`), which its tests of the generate extension
//! (`qa/L0_http/generate_endpoint_test.py`) serve; not bundled into `nereus`.
//!
//! As the Python model does in decoupled mode: input PROMPT (BYTES) comes back as output TEXT.
//! With STREAM true it sends that response REPETITION times (request parameter, default 1), each
//! after DELAY seconds when given, stopping early when the request is cancelled, then completes
//! the request: with the final flag alone, or with the error "An Error Occurred" when FAIL_LAST is
//! true. With STREAM false it sends one response, final. OUTPUT_0_DIM true makes TEXT empty: shape
//! [1, 0] (the Python model's is [0]; Nereus checks a plugin's outputs against the config's dims,
//! [1, -1]).
use std::time::Duration;

use nereus_sdk::{Backend, ErrorKind, InstanceInfo, ModelInfo, ParameterValue, Request, Response, Tensor};

struct MockLlm;

fn int(request: &Request, key: &str) -> Option<i64> {
    match request.parameter(key)? {
        ParameterValue::Int64(v) => Some(*v),
        ParameterValue::Uint64(v) => i64::try_from(*v).ok(),
        _ => None,
    }
}

fn flag(request: &Request, key: &str) -> bool {
    matches!(request.parameter(key), Some(ParameterValue::Boolean(true)))
}

fn seconds(request: &Request, key: &str) -> Option<Duration> {
    let s = match request.parameter(key)? {
        ParameterValue::Double(v) => *v,
        ParameterValue::Int64(v) => *v as f64,
        ParameterValue::Uint64(v) => *v as f64,
        _ => return None,
    };
    Duration::try_from_secs_f64(s).ok()
}

fn generate(request: &Request) -> Result<(), String> {
    let prompt = request.input("PROMPT")?;
    let stream = request.input("STREAM")?.as_bools()?.first().copied().unwrap_or(false);
    let text = if flag(request, "OUTPUT_0_DIM") {
        Tensor::from_raw("TEXT", prompt.datatype(), vec![1, 0], Vec::new())
    } else {
        prompt.clone().renamed("TEXT")
    };
    if !stream {
        return request.send(Response::new().output(text), true);
    }
    let repetitions = int(request, "REPETITION").unwrap_or(1);
    for _ in 0..repetitions {
        if let Some(delay) = seconds(request, "DELAY")
            && request.wait_unless_cancelled(delay)
        {
            break;
        }
        if request.is_cancelled() {
            break;
        }
        request.send(Response::new().output(text.clone()), false)?;
    }
    if flag(request, "FAIL_LAST") {
        request.fail_with(ErrorKind::Internal, "An Error Occurred")
    } else {
        request.complete()
    }
}

impl Backend for MockLlm {
    fn new(_model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(MockLlm)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            if let Err(message) = generate(request) {
                request.fail_with(ErrorKind::Internal, &message)?;
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(MockLlm);
