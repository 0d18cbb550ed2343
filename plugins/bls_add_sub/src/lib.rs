//! `bls_add_sub`: what the `ensemble_add_sub` ensemble computes, as business logic in a plugin: it
//! calls the model `simple` (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 − INPUT1) twice, A, B →
//! (sum, diff) → (SUM2, DIFF2) = (2A, 2B). The first calls of every request of the batch are
//! started before any is waited for, so a batch's requests run at once on `simple`'s instances.
//!
//! Its configuration must allow the calls (`sandbox.callable_models: "simple"`); the model
//! parameter `bls.model` names another model of `simple`'s interface to call instead.
use nereus_sdk::{
    Backend, CallError, InstanceInfo, ModelInfo, ModelResponse, PendingCall, Request, Response, Tensor,
    config_parameter,
};

struct BlsAddSub {
    model: String,
}

/// Starts `simple` on `(x, y)` as INPUT0 and INPUT1, on behalf of `request`.
fn start(model: &str, request: &Request, x: Tensor, y: Tensor) -> Result<PendingCall, CallError> {
    request.call(model).input(x.renamed("INPUT0")).input(y.renamed("INPUT1")).start()
}

/// The second step's outputs, renamed to what the model answers.
fn answer(mut second: ModelResponse) -> Result<Response, String> {
    Ok(Response::new()
        .output(second.take_output("OUTPUT0")?.renamed("SUM2"))
        .output(second.take_output("OUTPUT1")?.renamed("DIFF2")))
}

impl Backend for BlsAddSub {
    fn new(model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(BlsAddSub { model: config_parameter(model, "bls.model")?.unwrap_or_else(|| "simple".into()) })
    }

    fn execute(&mut self, mut requests: Vec<Request>) -> Result<(), String> {
        // Step 1 for every request at once.
        let mut first = Vec::with_capacity(requests.len());
        for request in requests.iter_mut() {
            let (a, b) = (request.take_input("A")?, request.take_input("B")?);
            first.push(start(&self.model, request, a, b));
        }
        // Step 2 as each step 1 answers, all started before any is waited for.
        let mut second = Vec::with_capacity(requests.len());
        for (request, call) in requests.iter().zip(first) {
            second.push(call.and_then(|c| c.wait()).and_then(|mut sum_diff| {
                let sum = sum_diff.take_output("OUTPUT0").map_err(internal)?;
                let diff = sum_diff.take_output("OUTPUT1").map_err(internal)?;
                start(&self.model, request, sum, diff)
            }));
        }
        for (request, call) in requests.iter().zip(second) {
            match call.and_then(PendingCall::wait) {
                Ok(response) => request.respond(answer(response)?)?,
                Err(e) => request.fail_call(&e)?,
            }
        }
        Ok(())
    }
}

fn internal(message: String) -> CallError {
    CallError { kind: nereus_sdk::CallErrorKind::Internal, message }
}

nereus_sdk::export!(BlsAddSub);
