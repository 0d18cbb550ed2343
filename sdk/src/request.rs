//! Requests of a batch and the responses a backend sends for them.
use crate::Tensor;
use crate::bindings::nereus::backend::host;
use crate::bindings::nereus::backend::types::{
    CorrelationId, ErrorKind, Parameter, ParameterValue, Request as RawRequest, Response as RawResponse, SequenceFlags,
};

/// One request of the batch passed to [`Backend::execute`](crate::Backend::execute).
pub struct Request {
    index: u32,
    id: String,
    correlation_id: CorrelationId,
    flags: SequenceFlags,
    parameters: Vec<Parameter>,
    inputs: Vec<Tensor>,
    requested_outputs: Vec<String>,
}

impl Request {
    pub(crate) fn new(index: u32, raw: RawRequest) -> Self {
        Request {
            index,
            id: raw.id,
            correlation_id: raw.correlation_id,
            flags: raw.flags,
            parameters: raw.parameters,
            inputs: raw.inputs.into_iter().map(Tensor).collect(),
            requested_outputs: raw.requested_outputs,
        }
    }

    /// Position of the request in its batch.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The client's request id ("" when none).
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn correlation_id(&self) -> &CorrelationId {
        &self.correlation_id
    }

    pub fn flags(&self) -> SequenceFlags {
        self.flags
    }

    /// Custom request parameters.
    pub fn parameters(&self) -> &[Parameter] {
        &self.parameters
    }

    /// A custom request parameter by key.
    pub fn parameter(&self, key: &str) -> Option<&ParameterValue> {
        self.parameters.iter().find(|p| p.key == key).map(|p| &p.value)
    }

    pub fn inputs(&self) -> &[Tensor] {
        &self.inputs
    }

    /// An input by name; a missing optional input is an error naming it.
    pub fn input(&self, name: &str) -> Result<&Tensor, String> {
        self.inputs.iter().find(|t| t.name() == name).ok_or_else(|| format!("request has no input '{name}'"))
    }

    /// Takes an input out of the request without copying it (e.g. to echo it as an output).
    pub fn take_input(&mut self, name: &str) -> Result<Tensor, String> {
        let pos = self
            .inputs
            .iter()
            .position(|t| t.name() == name)
            .ok_or_else(|| format!("request has no input '{name}'"))?;
        Ok(self.inputs.swap_remove(pos))
    }

    /// The outputs the client asked for.
    pub fn requested_outputs(&self) -> &[String] {
        &self.requested_outputs
    }

    /// Whether the client asked for `name` (computing the others is wasted work).
    pub fn wants(&self, name: &str) -> bool {
        self.requested_outputs.iter().any(|o| o == name)
    }

    /// Sends this request's one and only response.
    pub fn respond(&self, response: Response) -> Result<(), String> {
        host::send_response(self.index, &response.into_raw(), true)
    }

    /// Fails this request because of what the client sent (HTTP 400); its final response.
    pub fn fail(&self, message: &str) -> Result<(), String> {
        host::send_error(self.index, ErrorKind::InvalidArgument, message)
    }

    /// Fails this request with an explicit error kind; its final response.
    pub fn fail_with(&self, kind: ErrorKind, message: &str) -> Result<(), String> {
        host::send_error(self.index, kind, message)
    }

    /// Decoupled models: sends one of several responses; `final_` marks the last. A model that is
    /// not decoupled may send some with `final_` false and then [`complete`](Self::complete) the
    /// request, as Triton allows: the host keeps them until then, and a gRPC stream gets the
    /// first, any other request its one response (more than one fails it, as in Triton).
    pub fn send(&self, response: Response, final_: bool) -> Result<(), String> {
        host::send_response(self.index, &response.into_raw(), final_)
    }

    /// Decoupled models: marks the request complete without a response. A model that is not
    /// decoupled may do so only after a response sent with `final_` false (see [`send`](Self::send)).
    pub fn complete(&self) -> Result<(), String> {
        host::send_final_flag(self.index)
    }

    /// Whether nobody waits for this request's responses any more (the client disconnected or
    /// cancelled, or its ensemble failed): long or streaming work may stop early. Needs a host
    /// with `nereus:backend@1.1.0`.
    pub fn is_cancelled(&self) -> bool {
        host::is_cancelled(self.index)
    }

    /// Sleeps `delay`, or less when the request is cancelled meanwhile (looked at every 10 ms);
    /// returns whether it was. The wait counts against the sandbox's execution deadline.
    pub fn wait_unless_cancelled(&self, delay: std::time::Duration) -> bool {
        const SLICE: std::time::Duration = std::time::Duration::from_millis(10);
        let until = std::time::Instant::now() + delay;
        loop {
            if self.is_cancelled() {
                return true;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(left.min(SLICE));
        }
    }
}

/// A response under construction: outputs and response parameters.
#[derive(Default)]
pub struct Response {
    outputs: Vec<Tensor>,
    parameters: Vec<Parameter>,
}

impl Response {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an output tensor.
    pub fn output(mut self, tensor: Tensor) -> Self {
        self.outputs.push(tensor);
        self
    }

    /// Adds a response parameter.
    pub fn parameter(mut self, key: impl Into<String>, value: ParameterValue) -> Self {
        self.parameters.push(Parameter { key: key.into(), value });
        self
    }

    fn into_raw(self) -> RawResponse {
        RawResponse { outputs: self.outputs.into_iter().map(Tensor::into_raw).collect(), parameters: self.parameters }
    }
}

/// Gathers input `name` of every request along the batch dimension into one tensor, for a backend
/// that wants to compute a batch at once. Every request must have the input with the same
/// datatype and the same non-batch dimensions; the result's first dimension is the sum of theirs.
pub fn gather_batch(requests: &[Request], name: &str) -> Result<Tensor, String> {
    let first = requests.first().ok_or("empty batch")?.input(name)?;
    let (datatype, inner) = (first.datatype(), first.shape().get(1..).unwrap_or(&[]).to_vec());
    let mut data = Vec::with_capacity(first.data().len() * requests.len());
    let mut batch = 0i64;
    for request in requests {
        let t = request.input(name)?;
        if t.datatype() != datatype || t.shape().get(1..).unwrap_or(&[]) != inner.as_slice() {
            return Err(format!("input '{name}' differs in datatype or shape across the batch"));
        }
        batch += t.shape().first().copied().unwrap_or(1);
        data.extend_from_slice(t.data());
    }
    let mut shape = vec![batch];
    shape.extend(inner);
    Ok(Tensor::from_raw(name, datatype, shape, data))
}
