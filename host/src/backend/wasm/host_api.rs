//! The host side of `nereus:backend/host`: logging and the response sender. Every response is
//! checked against the model configuration here, before any client can see it.
use bytes::Bytes;

use super::bindings::nereus::backend::{host, types};
use super::bindings::{ErrorKind, Response, backend_error};
use super::state::SandboxState;
use crate::error::InferError;
use crate::request::{InferenceResponse, Tensor};
use crate::validate::check_output;

/// Longest log line a plugin may write; the rest is cut, so a plugin cannot flood the log.
const MAX_LOG_LINE: usize = 4096;

impl types::Host for SandboxState {}

impl SandboxState {
    /// Converts and checks a response for request `index`, then sends it as the final one.
    fn deliver(&mut self, index: u32, response: Response, final_: bool) -> Result<(), String> {
        let label = self.label.clone();
        let batch = self.batch.as_mut().ok_or("send-response called outside execute")?;
        let i = index as usize;
        let job = batch.jobs.get_mut(i).ok_or_else(|| format!("request index {index} is not in the batch"))?;
        if job.sender.is_complete() {
            return Err(format!("request {index} is already complete"));
        }
        if !final_ && !batch.decoupled {
            return Err("the model is not decoupled: its one response per request must be final".into());
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
        let (io, batch_size) = (&batch.io, batch.batch_sizes[i]);
        let mut total: u64 = 0;
        let mut outputs = Vec::with_capacity(response.outputs.len());
        let mut problem = None;
        for t in response.outputs {
            total = total.saturating_add(t.data.len() as u64);
            if total > batch.max_output_bytes {
                problem =
                    Some(format!("response exceeds the model's output limit of {} bytes", batch.max_output_bytes));
                break;
            }
            let tensor =
                Tensor { name: t.name, datatype: t.datatype.into(), shape: t.shape, data: Bytes::from(t.data) };
            match check_output(io, &tensor, batch_size) {
                Ok(shape) => {
                    if outputs.iter().any(|o: &Tensor| o.name == tensor.name) {
                        problem = Some(format!("output '{}' appears twice", tensor.name));
                        break;
                    }
                    if job.request.requested_outputs.contains(&tensor.name) || io.is_state_output(&tensor.name) {
                        outputs.push(Tensor { shape, ..tensor });
                    }
                }
                Err(e) => {
                    problem = Some(e);
                    break;
                }
            }
        }
        if problem.is_none()
            && !batch.decoupled
            && let Some(missing) =
                job.request.requested_outputs.iter().find(|name| !outputs.iter().any(|o| &&o.name == name))
        {
            problem = Some(format!("the response lacks the requested output '{missing}'"));
        }
        if let Some(problem) = problem {
            job.fail(InferError::internal(format!("{label} sent an invalid response: {problem}")));
            return Err(problem);
        }
        let response = InferenceResponse {
            model_name: io.model_name.clone(),
            model_version: batch.model_version,
            id: job.request.id.clone(),
            parameters: response.parameters.into_iter().map(|p| (p.key, p.value.into())).collect(),
            outputs,
        };
        if final_ {
            job.sender.send_final(Ok(response));
            Ok(())
        } else {
            job.sender.send_partial(response).map_err(str::to_string)
        }
    }
}

impl host::Host for SandboxState {
    fn log(&mut self, level: host::LogLevel, mut message: String) {
        if message.len() > MAX_LOG_LINE {
            let mut cut = MAX_LOG_LINE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        let label = &self.label;
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

    fn send_response(&mut self, request: u32, response: Response, final_: bool) -> Result<(), String> {
        self.deliver(request, response, final_)
    }

    fn send_error(&mut self, request: u32, kind: ErrorKind, message: String) -> Result<(), String> {
        let batch = self.batch.as_mut().ok_or("send-error called outside execute")?;
        let job = batch
            .jobs
            .get_mut(request as usize)
            .ok_or_else(|| format!("request index {request} is not in the batch"))?;
        if job.sender.is_complete() {
            return Err(format!("request {request} is already complete"));
        }
        job.fail(backend_error(kind, message));
        Ok(())
    }

    fn send_final_flag(&mut self, request: u32) -> Result<(), String> {
        let batch = self.batch.as_mut().ok_or("send-final-flag called outside execute")?;
        if !batch.decoupled {
            return Err(
                "send-final-flag is for decoupled models; this model sends one final response per request".into()
            );
        }
        let job = batch
            .jobs
            .get_mut(request as usize)
            .ok_or_else(|| format!("request index {request} is not in the batch"))?;
        job.sender.send_final_flag().map_err(str::to_string)
    }

    fn is_cancelled(&mut self, request: u32) -> bool {
        self.batch
            .as_ref()
            .and_then(|batch| batch.jobs.get(request as usize))
            .is_some_and(|job| job.sender.is_cancelled())
    }
}
