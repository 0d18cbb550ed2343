//! `bls_cascade`: a conditional cascade, which an ensemble's static graph cannot express. Each
//! request goes to a cheap model first; only when that model's top score is below a threshold does
//! it go to the expensive one too. The answer is the outputs of whichever model decided, and
//! `PATH` (BYTES [1]): "cheap" or "expensive".
//!
//! Model parameters: `cascade.cheap_model`, `cascade.expensive_model` (both take the request's
//! inputs as they are and answer the model's outputs but `PATH`), `cascade.score_output` (the
//! cheap model's output whose largest element is the score; default `PROBABILITIES`) and
//! `cascade.threshold` (default 0.9). The request parameter `threshold` (a double) overrides it. The
//! decision is per request: with a batch of rows in one request, the top score is over them all.
//! `sandbox.callable_models` must list both models.
use nereus_sdk::{
    Backend, BytesBuilder, CallError, InstanceInfo, ModelInfo, ModelResponse, ParameterValue, Request, Response,
    config_parameter,
};

struct Cascade {
    /// Whether the model batches (`max_batch_size` > 0): `PATH` then has a batch dimension.
    batching: bool,
    cheap: String,
    expensive: String,
    score_output: String,
    threshold: f64,
}

fn required(model: &ModelInfo, key: &str) -> Result<String, String> {
    config_parameter(model, key)?.ok_or_else(|| format!("bls_cascade needs the model parameter '{key}'"))
}

impl Cascade {
    /// Runs `model` on the request's inputs, asking for the outputs the client asked for (but
    /// `PATH`, which is the cascade's own) and `also`.
    fn run(&self, model: &str, request: &Request, also: Option<&str>) -> Result<ModelResponse, CallError> {
        let mut call = request.call(model);
        for input in request.inputs() {
            call = call.input(input.clone());
        }
        for output in request.requested_outputs().iter().filter(|o| *o != "PATH") {
            call = call.output(output);
        }
        if let Some(also) = also.filter(|a| !request.wants(a)) {
            call = call.output(also);
        }
        call.infer()
    }

    fn answer(&self, request: &Request, mut from: ModelResponse, path: &str, score: f32) -> Result<Response, String> {
        let mut response = Response::new();
        for name in request.requested_outputs().iter().filter(|o| *o != "PATH") {
            response = response.output(from.take_output(name)?);
        }
        if request.wants("PATH") {
            // One PATH per row of the request's batch: the decision is the request's.
            let rows = if self.batching {
                request.inputs().first().and_then(|t| t.shape().first()).copied().unwrap_or(1).max(1)
            } else {
                1
            };
            let mut text = BytesBuilder::new();
            for _ in 0..rows {
                text.push(path);
            }
            let shape = if self.batching { vec![rows, 1] } else { vec![1] };
            response = response.output(text.finish("PATH", shape));
        }
        Ok(response.parameter("cheap_score", ParameterValue::Double(f64::from(score))))
    }

    fn decide(&self, request: &Request) -> Result<Response, String> {
        let threshold = match request.parameter("threshold") {
            Some(ParameterValue::Double(t)) => *t,
            _ => self.threshold,
        };
        let cheap = self.run(&self.cheap, request, Some(&self.score_output))?;
        let scores = cheap.output(&self.score_output)?.as_slice::<f32>()?;
        let top = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if f64::from(top) >= threshold {
            return self.answer(request, cheap, "cheap", top);
        }
        let expensive = self.run(&self.expensive, request, None)?;
        self.answer(request, expensive, "expensive", top)
    }
}

impl Backend for Cascade {
    fn new(model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        let threshold = match config_parameter(model, "cascade.threshold")? {
            Some(t) => t.trim().parse().map_err(|_| format!("cascade.threshold must be a number, got {t:?}"))?,
            None => 0.9,
        };
        let config: serde_json::Value =
            serde_json::from_str(&model.config_json).map_err(|e| format!("model config is not JSON: {e}"))?;
        Ok(Cascade {
            batching: config["max_batch_size"].as_i64().is_some_and(|b| b > 0),
            cheap: required(model, "cascade.cheap_model")?,
            expensive: required(model, "cascade.expensive_model")?,
            score_output: config_parameter(model, "cascade.score_output")?.unwrap_or_else(|| "PROBABILITIES".into()),
            threshold,
        })
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            match self.decide(request) {
                Ok(response) => request.respond(response)?,
                Err(message) => request.fail_with(nereus_sdk::ErrorKind::Internal, &message)?,
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(Cascade);
