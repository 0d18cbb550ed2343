//! The host side of `nereus:backend/host`: logging and the response sender. Every response is
//! checked against the model configuration here, before any client can see it.
use bytes::Bytes;

use super::bindings::nereus::backend::{host, types};
use super::bindings::{ErrorKind, Parameter, Response, backend_error};
use super::budget::LogAdmission;
use super::state::SandboxState;
use crate::error::InferError;
use crate::request::{InferenceResponse, PartialRefused, ResponseSender, Tensor};
use crate::tensor::DataType as HostDataType;
use crate::validate::check_output_of_len;
use wasmtime_wasi::runtime::in_tokio;

/// Longest log line a plugin may write; the rest is cut, so a plugin cannot flood the log.
const MAX_LOG_LINE: usize = 4096;

/// Longest error message a plugin may give a request (and less when the model's
/// `sandbox.max_output_bytes` is smaller): an error is part of what a plugin returns.
pub(super) const MAX_ERROR_MESSAGE: usize = 16 << 10;

/// `text` cut to at most `limit` bytes (on a character boundary), saying how much was cut.
pub(super) fn bounded(mut text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let over = text.len() - limit;
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!(" … ({over} more bytes cut)"));
    text
}

/// A plugin's log line as the log gets it: control characters (line breaks included) escaped, so
/// that the line cannot end early and start another that looks like the host's or another
/// model's.
fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            c if c.is_control() => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    out
}

/// An output a plugin sent, out of the sandbox's memory (`lift.rs`).
pub(super) struct Sent {
    pub name: String,
    pub datatype: HostDataType,
    pub shape: Vec<i64>,
    pub data: Lifted,
}

/// A response out of the sandbox's memory (`lift.rs`): as much of it as fits the model's output
/// limit, and why the rest was not copied.
#[derive(Default)]
pub(super) struct Lent {
    pub outputs: Vec<Sent>,
    pub parameters: Vec<Parameter>,
    /// Set when the response did not fit (or could not be right): what is wrong with it, the
    /// request's error. `outputs` and `parameters` then hold only what was copied before.
    pub refused: Option<String>,
}

/// Where a sent output's bytes went.
pub(super) enum Lifted {
    /// Into a buffer of the host's, which the response carries.
    Bytes(Bytes),
    /// Straight into the client's system shared memory, where the request placed the output: this
    /// many bytes (the response names the output in `in_place`).
    Written(usize),
    /// Writing them there failed (the client shrank its object): the request's error.
    Failed(InferError),
}

impl types::Host for SandboxState {}

impl SandboxState {
    /// Checks a response for request `index`, out of the sandbox's memory as far as it fit
    /// ([`Lent`]), then sends it (as the final one or not).
    pub(super) fn deliver(&mut self, index: u32, lent: Lent, final_: bool) -> Result<(), String> {
        if self.batch.as_ref().is_some_and(|b| b.merged) {
            return self.deliver_merged(index, lent, final_);
        }
        let Lent { outputs: sent, parameters, refused } = lent;
        let label = self.label.clone();
        let deadline = self.deadline;
        let batch = self.batch.as_mut().ok_or("send-response called outside execute")?;
        let i = index as usize;
        let job = batch.jobs.get_mut(i).ok_or_else(|| format!("request index {index} is not in the batch"))?;
        if job.sender.is_complete() {
            return Err(format!("request {index} is already complete"));
        }
        // Counted for decoupled models only (`responses` is empty otherwise).
        if let Some(sent) = batch.responses.get_mut(i) {
            *sent += 1;
            if *sent > batch.max_responses {
                let problem =
                    format!("more than {} responses for one request (sandbox.max_responses)", batch.max_responses);
                job.fail(InferError::internal(format!("{label} sent {problem}")));
                return Err(problem);
            }
        }
        // The client's object shrank while an output was written into it: the request's error, as
        // the frontend would have given it.
        if let Some(error) = sent.iter().find_map(|t| match &t.data {
            Lifted::Failed(e) => Some(e.clone()),
            _ => None,
        }) {
            let message = error.message.clone();
            job.fail(error);
            return Err(message);
        }
        if let Some(problem) = refused {
            job.fail(InferError::internal(format!("{label} sent an invalid response: {problem}")));
            return Err(problem);
        }
        // The output limit was counted as the response left the sandbox's memory (`lift.rs`).
        let io = &batch.io;
        let requested = &job.request.requested_outputs;
        let checked = checked_outputs(io, sent, batch.batch_sizes[i], |name| {
            requested.iter().any(|r| r == name) || io.is_state_output(name)
        })
        .and_then(|checked| {
            if !batch.decoupled {
                complete(io, requested, &checked.0)?;
            }
            Ok(checked)
        });
        let (outputs, in_place) = match checked {
            Ok(checked) => checked,
            Err(problem) => {
                job.fail(InferError::internal(format!("{label} sent an invalid response: {problem}")));
                return Err(problem);
            }
        };
        let response = InferenceResponse {
            in_place,
            model_name: io.model_name.clone(),
            model_version: batch.model_version,
            id: job.request.id.clone(),
            parameters: parameters.into_iter().map(|p| (p.key, p.value.into())).collect(),
            outputs,
            spent: Default::default(),
        };
        if final_ {
            job.sender.send_final(Ok(response));
            Ok(())
        } else if !batch.decoupled {
            // Held until the final flag, as Triton's frontends hold a non-decoupled request's
            // responses (`ResponseSender::send_early`).
            job.sender.send_early(response).map_err(str::to_string)
        } else {
            send_partial_within(&mut job.sender, response, deadline)
        }
    }

    /// [`Self::deliver`] for a merged batch (`merge.rs`): the one response to the one request the
    /// guest was lent, checked against the batch's total batch size, then each request's rows of the
    /// outputs it asked for sent to it, with the response's parameters. A response refused fails
    /// them all, as the guest's one request failed.
    fn deliver_merged(&mut self, index: u32, lent: Lent, final_: bool) -> Result<(), String> {
        let Lent { outputs: sent, parameters, refused } = lent;
        let label = self.label.clone();
        let batch = self.batch.as_mut().ok_or("send-response called outside execute")?;
        if index != 0 {
            return Err(format!("request index {index} is not in the batch"));
        }
        if batch.jobs.iter().all(|j| j.sender.is_complete()) {
            return Err("request 0 is already complete".into());
        }
        let io = &batch.io;
        let total: i64 = batch.batch_sizes.iter().sum();
        let wanted = |name: &str| batch.jobs.iter().any(|j| j.request.requested_outputs.iter().any(|r| r == name));
        let split = match refused {
            Some(problem) => Err(problem),
            None => checked_outputs(io, sent, total, wanted).and_then(|(outputs, _)| {
                outputs
                    .iter()
                    .map(|o| crate::backend::batch::scatter(o, &batch.batch_sizes).map_err(|e| e.message))
                    .collect::<Result<Vec<_>, _>>()
            }),
        };
        let split = match split {
            Ok(split) => split,
            Err(problem) => {
                let error = InferError::internal(format!("{label} sent an invalid response: {problem}"));
                batch.jobs.iter_mut().for_each(|j| j.fail(error.clone()));
                return Err(problem);
            }
        };
        let parameters: Vec<_> =
            parameters.into_iter().map(|p| (p.key, crate::request::ParamValue::from(p.value))).collect();
        // Each request's part of every output, in the response's order.
        let mut per_request: Vec<Vec<Tensor>> = batch.jobs.iter().map(|_| Vec::with_capacity(split.len())).collect();
        for parts in split {
            for (mine, part) in per_request.iter_mut().zip(parts) {
                mine.push(part);
            }
        }
        let mut problem = None;
        for (job, mut outputs) in batch.jobs.iter_mut().zip(per_request) {
            if job.sender.is_complete() {
                continue;
            }
            let requested = &job.request.requested_outputs;
            outputs.retain(|o| requested.contains(&o.name));
            if let Err(missing) = complete(io, requested, &outputs) {
                job.fail(InferError::internal(format!("{label} sent an invalid response: {missing}")));
                problem = Some(missing);
                continue;
            }
            let response = InferenceResponse {
                in_place: Vec::new(),
                spent: Default::default(),
                model_name: io.model_name.clone(),
                model_version: batch.model_version,
                id: job.request.id.clone(),
                parameters: parameters.clone(),
                outputs,
            };
            if final_ {
                job.sender.send_final(Ok(response));
            } else if let Err(e) = job.sender.send_early(response) {
                problem = Some(e.to_string());
            }
        }
        problem.map_or(Ok(()), Err)
    }
}

/// The outputs of a response sent for `batch_size` rows, checked against the model's configuration
/// and reshaped as it says, keeping those `wanted`; and which of them the guest wrote into the
/// client's shared memory (`lift.rs`). An error says what is wrong with the response.
fn checked_outputs(
    io: &crate::validate::IoSpec,
    sent: Vec<Sent>,
    batch_size: i64,
    wanted: impl Fn(&str) -> bool,
) -> Result<(Vec<Tensor>, Vec<String>), String> {
    let mut outputs: Vec<Tensor> = Vec::with_capacity(sent.len());
    let mut in_place = Vec::new();
    for t in sent {
        let (data, len, written) = match t.data {
            Lifted::Bytes(data) => {
                let len = data.len();
                (data, len, false)
            }
            Lifted::Written(len) => (Bytes::new(), len, true),
            Lifted::Failed(e) => return Err(e.message),
        };
        let mut tensor = Tensor { name: t.name, datatype: t.datatype, shape: t.shape, data };
        let reshaped = check_output_of_len(io, &tensor, len, batch_size)?;
        if outputs.iter().any(|o| o.name == tensor.name) {
            return Err(format!("output '{}' appears twice", tensor.name));
        }
        if wanted(&tensor.name) {
            if let Some(shape) = reshaped {
                tensor.shape = shape;
            }
            if written {
                in_place.push(tensor.name.clone());
            }
            outputs.push(tensor);
        }
    }
    Ok((outputs, in_place))
}

/// Whether `outputs` hold every output in `requested`. A model with optional inputs may leave out
/// the outputs of the inputs it did not get (an ensemble then treats them as absent); otherwise a
/// missing output is the plugin's fault.
fn complete(io: &crate::validate::IoSpec, requested: &[String], outputs: &[Tensor]) -> Result<(), String> {
    if !io.inputs.iter().any(|i| i.optional)
        && let Some(missing) = requested.iter().find(|name| !outputs.iter().any(|o| &&o.name == name))
    {
        return Err(format!("the response lacks the requested output '{missing}'"));
    }
    Ok(())
}

/// Sends a decoupled model's non-final response, waiting — on the instance's worker, decoupled
/// models never run inline — while its stream holds as much as it may for a client that reads
/// slowly, until the call's deadline. A stream nobody reads any more (the client cancelled or went
/// away) is an error the plugin sees here, on its next send, and can stop on.
fn send_partial_within(
    sender: &mut ResponseSender,
    mut response: InferenceResponse,
    deadline: Option<std::time::Instant>,
) -> Result<(), String> {
    loop {
        match sender.try_send_partial(response) {
            Ok(()) => return Ok(()),
            Err(PartialRefused::Cancelled) => {
                return Err("the request was cancelled: nobody reads its responses any more".into());
            }
            Err(PartialRefused::Refused(why)) => return Err(why.into()),
            Err(PartialRefused::Full(back)) => {
                response = *back;
                let drained = in_tokio(async {
                    match deadline {
                        Some(at) => tokio::time::timeout_at(at.into(), sender.drained(&response)).await.is_ok(),
                        None => {
                            sender.drained(&response).await;
                            true
                        }
                    }
                });
                if !drained {
                    return Err("the client reads the responses too slowly: the stream stayed full until the \
                                execution deadline"
                        .into());
                }
            }
        }
    }
}

impl host::Host for SandboxState {
    /// A plugin's log line: rate-limited per model, cut at [`MAX_LOG_LINE`], its control characters
    /// escaped, and prefixed with the sandbox's label (the model and instance) — a plugin can
    /// neither flood the log nor write a line that passes for the host's or another model's.
    fn log(&mut self, level: host::LogLevel, message: String) {
        let label = &self.label;
        match self.limiter.meter.admit_log_line() {
            LogAdmission::Drop => return,
            LogAdmission::Write { dropped: 0 } => {}
            LogAdmission::Write { dropped } => tracing::warn!(
                target: "nereus::plugin",
                "{label}: {dropped} log line(s) dropped (more than --sandbox-log-lines-per-sec)"
            ),
        }
        let message = escaped(&bounded(message, MAX_LOG_LINE));
        match level {
            host::LogLevel::Error => {
                tracing::error!(target: "nereus::plugin", "{label}: {message}")
            }
            host::LogLevel::Warn => tracing::warn!(target: "nereus::plugin", "{label}: {message}"),
            host::LogLevel::Info => tracing::info!(target: "nereus::plugin", "{label}: {message}"),
            host::LogLevel::Verbose => {
                tracing::debug!(target: "nereus::plugin", "{label}: {message}")
            }
        }
    }

    /// Not called: `lift.rs` defines `send-response` over this (it counts a response against the
    /// model's output limit before copying it out of the sandbox's memory, which the generated
    /// lift has done whole by the time this would run); kept as the generated bindings require it.
    fn send_response(&mut self, _request: u32, _response: Response, _final: bool) -> Result<(), String> {
        Err("send-response is the host's own (lift.rs); the generated one is not linked".into())
    }

    fn send_error(&mut self, request: u32, kind: ErrorKind, message: String) -> Result<(), String> {
        let batch = self.batch.as_mut().ok_or("send-error called outside execute")?;
        let limit = MAX_ERROR_MESSAGE.min(usize::try_from(batch.max_output_bytes).unwrap_or(usize::MAX));
        if batch.merged && request == 0 {
            // The merged request's error is every one of its requests' (`merge.rs`).
            let error = backend_error(kind, bounded(message, limit));
            if batch.jobs.iter().all(|j| j.sender.is_complete()) {
                return Err("request 0 is already complete".into());
            }
            batch.jobs.iter_mut().for_each(|j| j.fail(error.clone()));
            return Ok(());
        }
        let job = batch
            .jobs
            .get_mut(request as usize)
            .ok_or_else(|| format!("request index {request} is not in the batch"))?;
        if job.sender.is_complete() {
            return Err(format!("request {request} is already complete"));
        }
        job.fail(backend_error(kind, bounded(message, limit)));
        Ok(())
    }

    fn send_final_flag(&mut self, request: u32) -> Result<(), String> {
        let batch = self.batch.as_mut().ok_or("send-final-flag called outside execute")?;
        if batch.merged && request == 0 {
            // After the merged request's responses, each of its requests' flag (`merge.rs`).
            if !batch.jobs.iter().any(|j| j.sender.sent_early()) {
                return Err(
                    "send-final-flag is for decoupled models; this model sends one final response per request".into()
                );
            }
            let mut result = Ok(());
            for job in batch.jobs.iter_mut().filter(|j| !j.sender.is_complete()) {
                if let Err(e) = job.sender.send_final_flag() {
                    result = Err(e.to_string());
                }
            }
            return result;
        }
        let decoupled = batch.decoupled;
        let job = batch
            .jobs
            .get_mut(request as usize)
            .ok_or_else(|| format!("request index {request} is not in the batch"))?;
        // A model that is not decoupled completes a request with its final response, or with the
        // flag after responses it sent before (as Triton's repeat backend does, not decoupled).
        if !decoupled && !job.sender.sent_early() {
            return Err(
                "send-final-flag is for decoupled models; this model sends one final response per request".into()
            );
        }
        job.sender.send_final_flag().map_err(str::to_string)
    }

    fn is_cancelled(&mut self, request: u32) -> bool {
        match self.batch.as_ref() {
            // A merged request is cancelled once every one of its requests is (`merge.rs`).
            Some(batch) if batch.merged => {
                request == 0 && batch.jobs.iter().all(|j| j.sender.is_complete() || j.sender.is_cancelled())
            }
            Some(batch) => batch.jobs.get(request as usize).is_some_and(|job| job.sender.is_cancelled()),
            None => false,
        }
    }
}
