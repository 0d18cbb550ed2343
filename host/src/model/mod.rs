//! A loaded model version: its configuration, I/O spec, health, scheduler and instances; and the
//! narrow interface through which models reach other models ([`ModelResolver`]).
pub mod health;
pub mod probe;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::backend::{BackendInstance, ModelTeardown};
use crate::config::ModelConfig;
use crate::error::InferError;
use crate::request::{
    self, CorrelationId, InferenceRequest, InferenceResponse, Job, ResponseReceiver, ResponseSender, StreamReceiver,
    StreamSink,
};
use crate::response_cache::{CacheKey, CachedResponse, InsertError, Owner, ResponseCache};
use crate::scheduler::inline::IoThreads;
use crate::scheduler::{
    BatchRules, Caller, DefaultScheduler, DynamicBatcher, Schedule, SequenceBatcher, SequenceRules, WorkerContext,
};
use crate::stats::ModelStats;
use crate::test_hooks::TestHooks;
use crate::validate::{IoSpec, validate_request};
use health::Health;
use probe::ExecutionProbe;

/// How a model finds the models it calls (an ensemble its steps; later a plugin the models it may
/// call): by name and optional version, at request time. The server's model table answers it;
/// the caller never sees the repository behind it.
pub trait ModelResolver: Send + Sync {
    /// The version a request addresses: the given one, or the highest ready one.
    fn version(&self, name: &str, version: Option<i64>) -> Result<Arc<ModelVersion>, InferError>;
}

/// What a version's scheduler needs beyond its configuration.
pub struct SchedulerSetup {
    /// How long an idle instance worker polls before it rests.
    pub instance_poll: std::time::Duration,
    /// Executions shorter than this may run inline (`--inline-execution-us`; zero: never).
    pub inline_under: std::time::Duration,
    /// The sequence batcher's rules, read at load (they need the model's folder).
    pub sequence: Option<SequenceRules>,
    /// The server's I/O threads' budget for inline executions.
    pub io_threads: Arc<IoThreads>,
    /// The version's test hooks (`--test-hooks` only).
    pub hooks: Option<Arc<TestHooks>>,
    /// The version's Prometheus metrics (none with `--allow-metrics=false`).
    pub metrics: Option<crate::metrics::ModelMetrics>,
}

pub struct ModelVersion {
    pub name: Arc<str>,
    pub version: i64,
    pub config: Arc<ModelConfig>,
    /// The configuration as `GET …/config` renders it: computed on the first such request, not
    /// at load (rendering by reflection was a twentieth of loading 10,000 models).
    config_json: std::sync::OnceLock<serde_json::Value>,
    pub io: Arc<IoSpec>,
    pub health: Arc<Health>,
    pub probe: Arc<ExecutionProbe>,
    pub stats: Arc<ModelStats>,
    /// The version's test hooks: `Some` only when the server runs with `--test-hooks`.
    pub hooks: Option<Arc<TestHooks>>,
    scheduler: Box<dyn Schedule>,
    /// The GPU whose memory every instance reads inputs from and writes outputs to in place
    /// (`KIND_GPU` ONNX instances all on one device); `None` when any instance needs host bytes.
    device_io: Option<usize>,
    /// What the backend finalises once every instance is gone.
    teardown: Mutex<Option<Box<dyn ModelTeardown>>>,
    /// The server's response cache, when the model enables it (`response_cache { enable: true }`),
    /// and this load's place in it.
    cache: Option<(Arc<ResponseCache>, Owner)>,
    /// Whether the log has said once that a response did not fit the cache.
    cache_refusal_told: Arc<std::sync::atomic::AtomicBool>,
}

/// What the response cache says of a request as it reaches its model.
enum Cached {
    /// The model does not use the cache, or the request cannot be keyed (inputs on a GPU).
    Off,
    /// Found: the response, when the lookup started and how long it took.
    Hit(Arc<CachedResponse>, Instant, Duration),
    /// Not found: the key to keep its response under, and how long the lookup took.
    Miss(CacheKey, Duration),
}

impl ModelVersion {
    /// The configuration as `GET …/config` renders it.
    pub fn config_json(&self) -> &serde_json::Value {
        self.config_json.get_or_init(|| crate::config::to_json(&self.config))
    }

    pub fn new(
        config: Arc<ModelConfig>,
        version: i64,
        io: Arc<IoSpec>,
        health: Arc<Health>,
        instances: Vec<Box<dyn BackendInstance>>,
        teardown: Option<Box<dyn ModelTeardown>>,
        setup: SchedulerSetup,
    ) -> Self {
        let probe = Arc::new(ExecutionProbe::default());
        use crate::config::schema::model_config::SchedulingChoice;
        let SchedulerSetup { instance_poll, inline_under, sequence, io_threads, hooks, metrics } = setup;
        let stats = Arc::new(ModelStats::new(metrics));
        let first = instances.first().and_then(|i| i.device_io());
        let device_io = first.filter(|d| instances.iter().all(|i| i.device_io() == Some(*d)));
        let ctx = WorkerContext {
            probe: probe.clone(),
            stats: stats.clone(),
            hooks: hooks.clone(),
            batching: config.max_batch_size > 0,
            poll: instance_poll,
            inline_under,
            io_threads,
        };
        let scheduler: Box<dyn Schedule> = match (&config.scheduling_choice, sequence) {
            (_, Some(rules)) => Box::new(SequenceBatcher::start(&config.name, instances, ctx, rules)),
            (Some(SchedulingChoice::DynamicBatching(batching)), None) => {
                let ragged: Vec<String> =
                    config.input.iter().filter(|i| i.allow_ragged_batch).map(|i| i.name.clone()).collect();
                let rules = BatchRules::new(batching, &io, &ragged);
                Box::new(DynamicBatcher::start(&config.name, instances, ctx, rules, batching))
            }
            _ => Box::new(DefaultScheduler::start(&config.name, instances, ctx)),
        };
        ModelVersion {
            health,
            probe,
            device_io,
            teardown: Mutex::new(teardown),
            ..Self::with_scheduler(config, version, io, stats, scheduler, hooks)
        }
    }

    /// A version whose requests go to `scheduler` rather than to instances of a backend (an
    /// ensemble: its scheduler runs the steps on other models); `stats` are the ones it records.
    /// Its test hooks, if any, hold nothing: it has no executions of its own.
    pub fn with_scheduler(
        config: Arc<ModelConfig>,
        version: i64,
        io: Arc<IoSpec>,
        stats: Arc<ModelStats>,
        scheduler: Box<dyn Schedule>,
        hooks: Option<Arc<TestHooks>>,
    ) -> Self {
        ModelVersion {
            name: config.name.as_str().into(),
            version,
            config_json: std::sync::OnceLock::new(),
            config,
            io,
            health: Arc::new(Health::default()),
            probe: Arc::new(ExecutionProbe::default()),
            stats,
            hooks,
            scheduler,
            device_io: None,
            teardown: Mutex::new(None),
            cache: None,
            cache_refusal_told: Default::default(),
        }
    }

    /// The version answering from `cache` where a request was answered before (`None`: it does
    /// not use the response cache).
    pub fn with_response_cache(self, cache: Option<Arc<ResponseCache>>) -> Self {
        let cache = cache.map(|cache| {
            let owner = cache.owner();
            (cache, owner)
        });
        ModelVersion { cache, ..self }
    }

    /// The GPU whose memory this version's instances read inputs from and write outputs to in
    /// place (CUDA shared memory without a trip through the host), if there is one.
    pub fn device_io(&self) -> Option<usize> {
        self.device_io
    }

    /// Whether the model may send several responses per request
    /// (`model_transaction_policy { decoupled: true }`).
    pub fn is_decoupled(&self) -> bool {
        self.config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled)
    }

    /// Validates `request` and queues it; the receiver yields its one final outcome. `endpoint`
    /// names the caller in the error a decoupled model answers with, as Triton words it.
    pub fn infer(
        &self,
        mut request: InferenceRequest,
        endpoint: &str,
        caller: Caller,
    ) -> Result<ResponseReceiver, InferError> {
        if self.is_decoupled() {
            return Err(InferError::unsupported(format!(
                "{endpoint} doesn't support models with decoupled transaction policy"
            )));
        }
        self.check_ready()?;
        validate_request(&self.io, &mut request)?;
        let (mut sender, receiver) = ResponseSender::unary(self.stats.clone());
        self.trace(&mut request, &mut sender);
        if let Some(sender) = self.answer_from_cache(&mut request, sender) {
            let enqueued = sender.arrived();
            self.scheduler.enqueue(Job { request, sender, enqueued }, caller);
        }
        Ok(receiver)
    }

    /// Validates `request` and queues it for a stream of its own: the receiver yields each
    /// response, the last one marked final (one response for models that are not decoupled).
    pub fn infer_stream(&self, request: InferenceRequest, caller: Caller) -> Result<StreamReceiver, InferError> {
        let (tx, receiver) = request::stream_channel();
        self.infer_into(request, caller, tx.for_request(0))?;
        Ok(receiver)
    }

    /// Validates `request` and queues it to answer into `sink`, a place on a stream channel
    /// other requests may share (see [`request::stream_channel`]). On an error nothing was sent.
    pub fn infer_into(
        &self,
        mut request: InferenceRequest,
        caller: Caller,
        sink: StreamSink,
    ) -> Result<(), InferError> {
        self.check_ready()?;
        validate_request(&self.io, &mut request)?;
        let mut sender = ResponseSender::stream(self.stats.clone(), self.is_decoupled(), sink);
        self.trace(&mut request, &mut sender);
        if let Some(sender) = self.answer_from_cache(&mut request, sender) {
            let enqueued = sender.arrived();
            self.scheduler.enqueue(Job { request, sender, enqueued }, caller);
        }
        Ok(())
    }

    /// Answers a valid `request` from the response cache when its response is there (and returns
    /// `None`: nothing is left to execute). Otherwise returns the sender to execute it with, which
    /// keeps the response in the cache as it is given when the model uses one.
    fn answer_from_cache(&self, request: &mut InferenceRequest, mut sender: ResponseSender) -> Option<ResponseSender> {
        match self.look_up(request) {
            Cached::Off => Some(sender),
            Cached::Hit(entry, started, took) => {
                self.stats.record_cache_hit(started.saturating_duration_since(sender.arrived()), took);
                sender.send_final(Ok(InferenceResponse {
                    model_name: self.name.clone(),
                    model_version: self.version,
                    id: request.id.clone(),
                    parameters: entry.parameters.clone(),
                    outputs: entry.outputs.clone(),
                    in_place: Vec::new(),
                    spent: Default::default(),
                }));
                sender.flush();
                None
            }
            Cached::Miss(key, lookup) => {
                let (cache, stats) = (self.cache.as_ref()?.0.clone(), self.stats.clone());
                let told = self.cache_refusal_told.clone();
                sender.on_final(Box::new(move |response| {
                    // A request refused, cancelled or failed has no response to keep, and is not
                    // counted (tritonserver counts a miss as the response it executed comes back).
                    let Some(response) = response else { return };
                    let started = Instant::now();
                    match cache.insert(key, response) {
                        // Another request with the same key was answered first: not a miss of
                        // this one, as tritonserver counts.
                        Err(InsertError::AlreadyExists) => {}
                        outcome => {
                            if let Err(e) = outcome {
                                // tritonserver's line, once a load at error level: a model whose
                                // responses do not fit would otherwise log one a request.
                                if told.swap(true, std::sync::atomic::Ordering::Relaxed) {
                                    tracing::debug!("Failed to insert key [{key}] into response cache: {e}");
                                } else {
                                    tracing::error!("Failed to insert key [{key}] into response cache: {e}");
                                }
                            }
                            stats.record_cache_miss(lookup + started.elapsed());
                        }
                    }
                }));
                Some(sender)
            }
        }
    }

    /// Looks `request` up in the response cache, if the model uses it and the request is not
    /// part of a sequence (an ensemble may pass a sequence on to a step: a hit would skip the
    /// step, and the sequence's start or end with it). Outputs the client placed in shared memory
    /// are written there by the frontend, not by the backend, so that the response keeps their
    /// bytes for the cache. And the inputs are copied first: an input read in place from a
    /// client's shared memory (also as an ensemble's step gets it) could change between the key
    /// and the execution, and the entry would then answer others with the response to other
    /// bytes; the key's hash reads every byte anyway, and a copy costs a fraction of that.
    fn look_up(&self, request: &mut InferenceRequest) -> Cached {
        let Some((cache, owner)) = &self.cache else { return Cached::Off };
        if request.correlation_id != CorrelationId::None || request.sequence_start || request.sequence_end {
            return Cached::Off;
        }
        request.host_outputs.clear();
        request.device_outputs.take_all();
        for t in &mut request.inputs {
            t.data = bytes::Bytes::copy_from_slice(&t.data);
        }
        let Some(key) = CacheKey::of(*owner, &self.name, self.version, request) else { return Cached::Off };
        let started = Instant::now();
        let found = cache.lookup(key);
        let took = started.elapsed();
        match found {
            Some(entry) => Cached::Hit(entry, started, took),
            None => Cached::Miss(key, took),
        }
    }

    /// Moves a traced request's trace into its sender, which records this model's part of it.
    #[inline]
    fn trace(&self, request: &mut InferenceRequest, sender: &mut ResponseSender) {
        if let Some(trace) = request.trace.take() {
            sender.trace_into(&trace, &self.name, self.version, &request.id);
        }
    }

    /// Answers at once the queued requests whose client has gone (see [`Schedule::drop_cancelled`]).
    pub fn drop_cancelled(&self) {
        self.scheduler.drop_cancelled();
    }

    /// Requests waiting for an instance (a test hook reads it to queue work deterministically).
    pub fn queued(&self) -> usize {
        self.scheduler.queued()
    }

    /// Requests in flight as a shutdown waits for them (see [`Schedule::in_flight`]).
    pub fn in_flight(&self) -> usize {
        self.scheduler.in_flight(self.probe.snapshot().0)
    }

    /// Whether the sequence batcher schedules this version's requests.
    pub fn is_sequence_batched(&self) -> bool {
        matches!(
            self.config.scheduling_choice,
            Some(crate::config::schema::model_config::SchedulingChoice::SequenceBatching(_))
        )
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
