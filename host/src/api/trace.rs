//! The trace extension (`/v2/trace/setting`, `/v2/models/{m}/trace/setting`, gRPC TraceSetting),
//! and starting a request's trace: what both protocols share. A frontend hands over the request's
//! headers (metadata) for the caller's `traceparent`, and the settings a request asks for; it only
//! encodes the answer.
use crate::error::InferError;
use crate::server::Server;
use crate::trace::update::{self, SettingInput};
use crate::trace::{Carrier, ReportedSettings, Trace};

/// Samples a request for `model` (see [`crate::trace::Tracer::sample`]): its trace if it is
/// traced. As tritonserver, a request for a model that is not there is refused before it is
/// sampled: it neither counts towards the rate nor leaves a trace. With tracing off this is one
/// atomic load.
#[inline]
pub fn start(server: &Server, model: &str, version: Option<i64>, carrier: &dyn Carrier) -> Option<Trace> {
    let tracer = server.tracer();
    if !tracer.is_active() || server.version(model, version).is_err() {
        return None;
    }
    tracer.sample(model, carrier)
}

/// `model`'s trace setting ("": the global one), changed first by `update` when the request is an
/// update (a POST, or a gRPC request with settings). A model must be ready, as tritonserver
/// requires, and is named in its wording.
pub fn settings(
    server: &Server,
    model: &str,
    update: Option<&[(String, SettingInput)]>,
) -> Result<ReportedSettings, InferError> {
    if !model.is_empty() && !server.is_model_ready(model, None) {
        return Err(InferError::invalid(format!("Request for unknown model : {model}")));
    }
    match update {
        Some(settings) => server.tracer().update(model, &update::parse(settings)?),
        None => Ok(server.tracer().settings(model)),
    }
}
