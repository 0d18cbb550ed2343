//! Ensembles (`platform: "ensemble"`): one model to clients, a DAG of steps inside. A step is sent
//! to its composing model — through that model's own scheduler, so requests from several ensemble
//! requests are batched there — as soon as every tensor it consumes exists; independent steps run
//! at once and may finish in any order. Tensors pass between steps by reference (the bytes are
//! shared, never copied). The ensemble answers once no further step can run, with the outputs the
//! client asked for; a failing step fails the request with an error naming the step.
mod graph;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::config::ModelConfig;
use crate::error::InferError;
use crate::repository::ModelTable;
use crate::request::{InferenceRequest, InferenceResponse, Job, Tensor};
use crate::stats::{ExecutionTimes, ModelStats};

/// One step: which model it calls and how its inputs and outputs map to the ensemble's tensors.
#[derive(Debug)]
pub struct Step {
    pub model: String,
    /// `None`: the version the model's policy makes current (`model_version: -1`).
    pub version: Option<i64>,
    /// (the model's input, the ensemble tensor it reads)
    pub inputs: Vec<(String, String)>,
    /// (the model's output, the ensemble tensor it writes)
    pub outputs: Vec<(String, String)>,
    /// Steps producing what this one consumes.
    pub depends_on: Vec<usize>,
}

pub struct Ensemble {
    name: Arc<str>,
    steps: Vec<Step>,
    batching: bool,
    /// Requests in flight, so an unload can wait for them.
    in_flight: AtomicUsize,
    drained: (Mutex<()>, Condvar),
}

impl Ensemble {
    fn new(config: &ModelConfig, steps: Vec<Step>) -> Self {
        Ensemble {
            name: config.name.as_str().into(),
            steps,
            batching: config.max_batch_size > 0,
            in_flight: AtomicUsize::new(0),
            drained: (Mutex::new(()), Condvar::new()),
        }
    }

    /// Starts a validated request; its outcome goes to the job's sender. `models` resolves the
    /// composing models at request time (a composing model that became unavailable fails the step).
    pub fn enqueue(
        self: &Arc<Self>,
        job: Job,
        version: i64,
        models: Arc<ModelTable>,
        stats: Arc<ModelStats>,
    ) -> Result<(), InferError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| InferError::internal("ensembles run on the server's async runtime"))?;
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let this = self.clone();
        runtime.spawn(async move {
            let mut job = job;
            let started = Instant::now();
            let batch_size = job.request.batch_size(this.batching) as u64;
            let request = std::mem::take(&mut job.request);
            let outcome = this.run(request, version, &models).await;
            if outcome.is_ok() {
                let times = ExecutionTimes { infer: started.elapsed(), ..Default::default() };
                stats.record_execution(1, batch_size, times);
            }
            job.sender.send_final(outcome);
            job.sender.flush();
            drop(job);
            if this.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
                let _guard = this.drained.0.lock();
                this.drained.1.notify_all();
            }
        });
        Ok(())
    }

    /// Blocks until no request of this ensemble is in flight.
    pub fn drain(&self) {
        let mut guard = self.drained.0.lock();
        while self.in_flight.load(Ordering::Acquire) > 0 {
            self.drained.1.wait_for(&mut guard, std::time::Duration::from_millis(50));
        }
    }

    /// `error`, as the ensemble's error: naming the step it came from, keeping its kind.
    fn step_error(&self, i: usize, error: InferError) -> InferError {
        let model = &self.steps[i].model;
        InferError::new(
            error.kind,
            format!("in ensemble '{}', step {i} (model '{model}'): {}", self.name, error.message),
        )
    }

    /// Runs the steps as their inputs become available; returns the ensemble's response.
    async fn run(
        &self,
        request: InferenceRequest,
        version: i64,
        models: &ModelTable,
    ) -> Result<InferenceResponse, InferError> {
        let InferenceRequest {
            id,
            correlation_id,
            sequence_start,
            sequence_end,
            priority,
            timeout_us,
            parameters,
            inputs,
            requested_outputs,
            ..
        } = request;
        let mut tensors: HashMap<String, Tensor> = inputs.into_iter().map(|t| (t.name.clone(), t)).collect();
        let mut launched = vec![false; self.steps.len()];
        // Steps in flight: (step, the receiver of its outcome), awaited together in place.
        let mut running: Vec<(usize, crate::request::ResponseReceiver)> = Vec::new();
        loop {
            for (i, step) in self.steps.iter().enumerate() {
                if launched[i] || !step.inputs.iter().all(|(_, t)| tensors.contains_key(t)) {
                    continue;
                }
                launched[i] = true;
                let step_request = InferenceRequest {
                    model_name: step.model.clone(),
                    model_version: step.version,
                    id: id.clone(),
                    correlation_id: correlation_id.clone(),
                    sequence_start,
                    sequence_end,
                    priority,
                    timeout_us,
                    parameters: parameters.clone(),
                    inputs: step
                        .inputs
                        .iter()
                        .filter_map(|(input, tensor)| {
                            tensors.get(tensor).map(|t| Tensor { name: input.clone(), ..t.clone() })
                        })
                        .collect(),
                    requested_outputs: step.outputs.iter().map(|(o, _)| o.clone()).collect(),
                };
                let receiver = models
                    .version(&step.model, step.version)
                    .and_then(|model| model.infer(step_request, "ensemble"))
                    .map_err(|e| self.step_error(i, e))?;
                running.push((i, receiver));
            }
            if running.is_empty() {
                break;
            }
            let (i, outcome) = next_finished(&mut running).await;
            let step = &self.steps[i];
            let response = outcome.map_err(|e| self.step_error(i, e))?;
            for (output, tensor) in &step.outputs {
                let t = response.outputs.iter().find(|o| &o.name == output).ok_or_else(|| {
                    self.step_error(i, InferError::internal(format!("the response lacks output '{output}'")))
                })?;
                tensors.insert(tensor.clone(), Tensor { name: tensor.clone(), ..t.clone() });
            }
        }
        let outputs = requested_outputs
            .iter()
            .map(|name| {
                tensors.get(name).cloned().ok_or_else(|| {
                    InferError::internal(format!("ensemble '{}' did not produce output '{name}'", self.name))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(InferenceResponse {
            model_name: self.name.clone(),
            model_version: version,
            id,
            parameters: Vec::new(),
            outputs,
        })
    }
}

/// Waits for whichever running step finishes first and removes it from `running`.
async fn next_finished(
    running: &mut Vec<(usize, crate::request::ResponseReceiver)>,
) -> (usize, Result<InferenceResponse, InferError>) {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    std::future::poll_fn(|cx| {
        for k in 0..running.len() {
            if let Poll::Ready(outcome) = Pin::new(&mut running[k].1).poll(cx) {
                let (i, _) = running.swap_remove(k);
                let outcome =
                    outcome.unwrap_or_else(|_| Err(InferError::internal("the step ended without a response")));
                return Poll::Ready((i, outcome));
            }
        }
        Poll::Pending
    })
    .await
}
