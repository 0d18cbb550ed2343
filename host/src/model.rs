//! A loaded model version: its configuration, I/O spec, health, scheduler and instances.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex};

use crate::backend::wasm::WasmModelTeardown;
use crate::config::ModelConfig;
use crate::error::InferError;
use crate::request::{InferenceRequest, Job, ResponseReceiver, ResponseSender, StreamReceiver};
use crate::scheduler::{
    BatchRules, DefaultScheduler, DynamicBatcher, EnsembleScheduler, Scheduler, SequenceBatcher, SequenceRules,
    WorkerContext,
};
use crate::stats::ModelStats;
use crate::validate::{IoSpec, validate_request};

/// Whether a loaded version can serve; an instance that cannot be rebuilt after a fault makes it
/// UNAVAILABLE with the reason.
#[derive(Default)]
pub struct Health {
    unavailable: AtomicBool,
    reason: Mutex<Option<String>>,
    /// Test hook (`--test-hooks` only): make instance rebuilds fail, to test what follows.
    refuse_rebuilds: AtomicBool,
}

impl Health {
    pub fn is_ready(&self) -> bool {
        !self.unavailable.load(Ordering::Acquire)
    }
    pub fn set_unavailable(&self, reason: String) {
        *self.reason.lock() = Some(reason);
        self.unavailable.store(true, Ordering::Release);
    }
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().clone()
    }
    pub fn set_refuse_rebuilds(&self, refuse: bool) {
        self.refuse_rebuilds.store(refuse, Ordering::Release);
    }
    pub fn rebuilds_refused(&self) -> bool {
        self.refuse_rebuilds.load(Ordering::Acquire)
    }
}

/// Counts executions in flight (the host's proof that instances run concurrently) and, when test
/// hooks are on, holds instances at a gate before they execute, so tests can queue work
/// deterministically instead of racing the clock.
#[derive(Default)]
pub struct ExecutionProbe {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    executions: AtomicU64,
    /// Executions that ran inline, on an I/O thread.
    inline: AtomicU64,
    /// Fast path: executions only take the gate's lock while a test has closed it.
    gate_engaged: AtomicBool,
    gate_closed: Mutex<bool>,
    gate: Condvar,
}

impl ExecutionProbe {
    pub fn enter(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.max_in_flight.fetch_max(now, Ordering::AcqRel);
        if !self.gate_engaged.load(Ordering::Acquire) {
            return;
        }
        let mut closed = self.gate_closed.lock();
        while *closed {
            self.gate.wait(&mut closed);
        }
    }

    pub fn exit(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.executions.fetch_add(1, Ordering::AcqRel);
    }

    pub fn set_gate(&self, open: bool) {
        let mut closed = self.gate_closed.lock();
        *closed = !open;
        if !open {
            self.gate_engaged.store(true, Ordering::Release);
        }
        drop(closed);
        if open {
            self.gate.notify_all();
        }
    }

    /// Counts an execution that runs inline, on an I/O thread.
    pub fn count_inline(&self) {
        self.inline.fetch_add(1, Ordering::Relaxed);
    }

    /// Executions that ran inline so far.
    pub fn inline_executions(&self) -> u64 {
        self.inline.load(Ordering::Relaxed)
    }

    /// Whether a test has ever closed the gate: executions may then block in [`enter`](Self::enter),
    /// which must never happen on an I/O thread.
    pub fn gate_engaged(&self) -> bool {
        self.gate_engaged.load(Ordering::Acquire)
    }

    /// (executions in flight now, the most ever in flight at once, executions completed)
    pub fn snapshot(&self) -> (usize, usize, u64) {
        (
            self.in_flight.load(Ordering::Acquire),
            self.max_in_flight.load(Ordering::Acquire),
            self.executions.load(Ordering::Acquire),
        )
    }
}

/// What a version's scheduler needs beyond its configuration.
pub struct SchedulerSetup {
    /// How long an idle default-scheduler worker polls before it parks.
    pub instance_poll: std::time::Duration,
    /// Executions shorter than this may run inline (`--inline-execution-us`; zero: never).
    pub inline_under: std::time::Duration,
    /// The sequence batcher's rules, read at load (they need the model's folder).
    pub sequence: Option<SequenceRules>,
}

pub struct ModelVersion {
    pub name: Arc<str>,
    pub version: i64,
    pub config: Arc<ModelConfig>,
    /// The configuration as `GET …/config` renders it (computed once).
    pub config_json: serde_json::Value,
    pub io: Arc<IoSpec>,
    pub health: Arc<Health>,
    pub probe: Arc<ExecutionProbe>,
    pub stats: Arc<ModelStats>,
    scheduler: Scheduler,
    teardown: Mutex<Option<WasmModelTeardown>>,
}

impl ModelVersion {
    pub fn new(
        config: Arc<ModelConfig>,
        version: i64,
        io: Arc<IoSpec>,
        health: Arc<Health>,
        instances: Vec<Box<dyn crate::backend::BackendInstance>>,
        teardown: Option<WasmModelTeardown>,
        setup: SchedulerSetup,
    ) -> Self {
        let probe = Arc::new(ExecutionProbe::default());
        let stats = Arc::new(ModelStats::default());
        use crate::config::schema::model_config::SchedulingChoice;
        let SchedulerSetup { instance_poll, inline_under, sequence } = setup;
        let ctx = WorkerContext {
            probe: probe.clone(),
            stats: stats.clone(),
            batching: config.max_batch_size > 0,
            poll: instance_poll,
            inline_under,
        };
        let scheduler = match (&config.scheduling_choice, sequence) {
            (_, Some(rules)) => Scheduler::Sequence(SequenceBatcher::start(&config.name, instances, ctx, rules)),
            (Some(SchedulingChoice::DynamicBatching(batching)), None) => {
                let ragged: Vec<String> =
                    config.input.iter().filter(|i| i.allow_ragged_batch).map(|i| i.name.clone()).collect();
                let rules = BatchRules::new(batching, &io, &ragged);
                Scheduler::Dynamic(DynamicBatcher::start(&config.name, instances, ctx, rules, batching))
            }
            _ => Scheduler::Default(DefaultScheduler::start(&config.name, instances, ctx)),
        };
        ModelVersion {
            name: config.name.as_str().into(),
            version,
            config_json: crate::config::to_json(&config),
            config,
            io,
            health,
            probe,
            stats,
            scheduler,
            teardown: Mutex::new(teardown),
        }
    }

    /// A version of an ensemble: no instances; requests run `ensemble`'s steps on the models of
    /// `models`.
    pub fn ensemble(
        config: Arc<ModelConfig>,
        version: i64,
        io: Arc<IoSpec>,
        ensemble: Arc<crate::ensemble::Ensemble>,
        models: Arc<crate::repository::ModelTable>,
    ) -> Self {
        let stats = Arc::new(ModelStats::default());
        let scheduler = Scheduler::Ensemble(EnsembleScheduler { ensemble, version, models, stats: stats.clone() });
        ModelVersion {
            name: config.name.as_str().into(),
            version,
            config_json: crate::config::to_json(&config),
            config,
            io,
            health: Arc::new(Health::default()),
            probe: Arc::new(ExecutionProbe::default()),
            stats,
            scheduler,
            teardown: Mutex::new(None),
        }
    }

    /// Whether the model may send several responses per request
    /// (`model_transaction_policy { decoupled: true }`).
    pub fn is_decoupled(&self) -> bool {
        self.config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled)
    }

    /// Validates `request` and queues it; the receiver yields its one final outcome. `endpoint`
    /// names the caller in the error a decoupled model answers with, as Triton words it.
    pub fn infer(&self, mut request: InferenceRequest, endpoint: &str) -> Result<ResponseReceiver, InferError> {
        if self.is_decoupled() {
            return Err(InferError::unsupported(format!(
                "{endpoint} doesn't support models with decoupled transaction policy"
            )));
        }
        self.check_ready()?;
        validate_request(&self.io, &mut request)?;
        let (sender, receiver) = ResponseSender::unary(self.stats.clone());
        let enqueued = sender.arrived();
        self.scheduler.enqueue(Job { request, sender, enqueued })?;
        Ok(receiver)
    }

    /// Validates `request` and queues it for a stream: the receiver yields each response, the
    /// last one marked final (one response for models that are not decoupled).
    pub fn infer_stream(&self, mut request: InferenceRequest) -> Result<StreamReceiver, InferError> {
        self.check_ready()?;
        validate_request(&self.io, &mut request)?;
        let (sender, receiver) = ResponseSender::stream(self.stats.clone(), self.is_decoupled());
        let enqueued = sender.arrived();
        self.scheduler.enqueue(Job { request, sender, enqueued })?;
        Ok(receiver)
    }

    /// Requests waiting for an instance (a test hook reads it to queue work deterministically).
    pub fn queued(&self) -> usize {
        self.scheduler.queued()
    }

    fn check_ready(&self) -> Result<(), InferError> {
        if !self.health.is_ready() {
            return Err(InferError::unavailable(format!(
                "model '{}' version {} is not ready: {}",
                self.name,
                self.version,
                self.health.reason().unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// Unloads: drains queued requests, finalises instances, then the model and its backend.
    /// Blocks; call it off the async reactor.
    pub fn unload(&self) {
        self.scheduler.shutdown();
        if let Some(t) = self.teardown.lock().take() {
            t.finalize();
        }
    }
}
