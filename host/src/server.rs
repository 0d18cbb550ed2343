//! The server core both frontends call: model lookup by name and version, readiness, metadata,
//! inference, and orderly shutdown.
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::backend::registry::{BackendOptions, Backends};
use crate::backend::wasm::WasmRuntime;
use crate::control::{ControlMode, ModelControl};
use crate::error::InferError;
use crate::metrics::Metrics;
use crate::model::{ModelResolver, ModelVersion};
use crate::proto::inference as pb;
use crate::repository::location::RepositoryLocation;
use crate::repository::overrides::LoadOverrides;
use crate::repository::remote::RemoteRepository;
use crate::repository::{LoadContext, ModelEntry, ModelTable, VersionState};
use crate::request::{InferenceRequest, ResponseReceiver, StreamReceiver};
use crate::scheduler::Caller;
use crate::scheduler::inline::IoThreads;
use crate::trace::Tracer;

/// Extensions of the KServe v2 protocol this server implements, as `GET /v2` lists them.
pub const EXTENSIONS: &[&str] = &[
    "classification",
    "binary_tensor_data",
    "model_configuration",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "sequence",
    "parameters",
    "statistics",
    "trace",
    "logging",
    "system_shared_memory",
    // Implemented everywhere; without a usable GPU every registration is refused as a
    // tritonserver built with GPU support refuses a handle it cannot open.
    "cuda_shared_memory",
];

/// How the server is set up (the CLI fills this).
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The server's name in its metadata (`--id`, as tritonserver's).
    pub id: String,
    /// `--model-repository`: folders, and remote repositories served from local copies.
    pub model_repositories: Vec<RepositoryLocation>,
    /// Where remote repositories' copies live (under `repositories/`).
    pub repository_cache: PathBuf,
    /// `--model-config-name`: the configuration each model prefers in its `configs/` folder.
    pub model_config_name: Option<String>,
    /// `--model-control-mode` (with `--repository-poll-secs` for POLL).
    pub control_mode: ControlMode,
    /// `--load-model`: the models EXPLICIT mode loads at start-up (`*`: all).
    pub load_models: Vec<String>,
    /// `--model-load-thread-count`: how many models load at once at start-up.
    pub model_load_threads: usize,
    /// `--exit-timeout-secs`: how long shutdown (and an unload request) waits for in-flight
    /// requests.
    pub exit_timeout: std::time::Duration,
    /// How many I/O threads serve requests (HTTP threads plus gRPC threads): all but one of them
    /// may run short executions inline at once.
    pub io_threads: usize,
    pub backend_directory: Option<PathBuf>,
    /// The ONNX Runtime library `onnxruntime` models load (none: they are UNAVAILABLE).
    pub onnxruntime_library: Option<PathBuf>,
    /// Complete ONNX models' configurations from the models (`--disable-auto-complete-config` and
    /// `--strict-model-config=true` turn it off).
    pub autocomplete: bool,
    /// Where compiled components are cached; `None` disables the disk cache.
    pub cache_directory: Option<PathBuf>,
    /// `/v2/health/ready` is ready only when every model is (tritonserver's default).
    pub strict_readiness: bool,
    /// A start-up failure (a repository that cannot be read, a model that fails to load) stops
    /// the start with an error, as tritonserver's `--exit-on-error=true`; otherwise the server
    /// runs: with unreadable repositories it loads nothing and is neither live nor ready (as
    /// tritonserver "failed to initialize"), with failed models they are UNAVAILABLE.
    pub exit_on_error: bool,
    /// How long an idle instance worker polls for work before it parks (`--instance-poll-us`).
    pub instance_poll: std::time::Duration,
    /// Executions shorter than this may run inline (`--inline-execution-us`; zero: never).
    pub inline_under: std::time::Duration,
    /// Dynamic batches wait out their delay even while an I/O thread is idle
    /// (`--strict-queue-delay`).
    pub strict_queue_delay: bool,
    /// Enables the test-only hooks (execution gates and counters) under `/nereus/test/`.
    pub test_hooks: bool,
    /// Lets clients register system shared memory (`--allow-client-shm`).
    pub allow_client_shm: bool,
    /// How long an idle-priority thread keeps a CPU awake after each request (`--busy-poll-us`;
    /// zero: no such thread). See [`crate::busy_poll`].
    pub busy_poll: std::time::Duration,
    /// The spare CPU under which the spinner rests (`--busy-poll-min-spare-cpus`).
    pub busy_poll_min_spare_cpus: f64,
    /// Prometheus metrics (`--allow-metrics`, default on); `None` turns them off.
    pub metrics: Option<crate::metrics::MetricsOptions>,
    /// The response cache (`--cache-config local,size=N`); `None`: no cache.
    pub response_cache: Option<crate::response_cache::CacheSettings>,
    /// The operator's sandbox limits (`--sandbox-*`).
    pub sandbox_limits: crate::backend::wasm::SandboxLimits,
    /// Tracing (`--trace-config`); off by default.
    pub trace: crate::trace::options::TraceOptions,
}

/// Where the server is in its life, in order. The frontends listen from the start: while the
/// start-up models load (`Starting`) the server is live and not ready, and serves the models
/// already loaded. A shutdown goes through tritonserver's two stages: first the frontends stop
/// taking connections while the open ones are still served (`Draining`), then the models stop
/// taking requests while those in flight finish (`Stopping`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    Starting = 0,
    Serving = 1,
    Draining = 2,
    Stopping = 3,
}

pub struct Server {
    models: Arc<ModelTable>,
    control: Arc<ModelControl>,
    /// Dropped at shutdown, which stops the repository poller (POLL mode).
    poller: Mutex<Option<crossbeam_channel::Sender<()>>>,
    options: ServerOptions,
    shm: crate::shm::SharedMemory,
    /// A [`Phase`], as its `u8`.
    phase: AtomicU8,
    /// False when a model repository could not be read at start-up (with `exit_on_error` off):
    /// the server answers, but is neither live nor ready.
    initialized: bool,
    /// Requests whose client went away before their answer (see [`Server::count_abandoned`]).
    abandoned: AtomicU64,
    busy_poll: Option<crate::busy_poll::BusyPoll>,
    /// What the I/O threads do for the models' schedulers besides serving (see [`Self::io_threads`]).
    io_threads: Arc<IoThreads>,
    metrics: Option<Arc<Metrics>>,
    tracer: Tracer,
    _runtime: Arc<WasmRuntime>,
}

impl Server {
    /// The system shared-memory regions clients registered.
    pub fn shm(&self) -> &crate::shm::SharedMemory {
        &self.shm
    }

    /// Sets the server up with no model loaded yet ([`Phase::Starting`]): the frontends can listen
    /// while [`Server::load_startup_models`] loads them.
    pub fn start(options: ServerOptions) -> anyhow::Result<Arc<Server>> {
        let runtime = WasmRuntime::new(options.cache_directory.clone()).map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let metrics = match &options.metrics {
            Some(o) => Some(Arc::new(Metrics::new(o).map_err(|e| anyhow::anyhow!("metrics: {e}"))?)),
            None => None,
        };
        let tracer = Tracer::new(options.trace.clone()).map_err(|e| anyhow::anyhow!("--trace-config: {e}"))?;
        let models = Arc::new(ModelTable::default());
        for device in crate::gpu::describe_devices() {
            tracing::info!("{device}");
        }
        let backends = Backends::new(BackendOptions {
            runtime: runtime.clone(),
            backend_dir: options.backend_directory.clone(),
            onnxruntime_library: options.onnxruntime_library.clone(),
            autocomplete: options.autocomplete,
            sandbox: crate::backend::wasm::SandboxBudget::new(options.sandbox_limits.clone()),
            models: {
                let resolver: Arc<dyn ModelResolver> = models.clone();
                Arc::downgrade(&resolver)
            },
        });
        let io_threads = Arc::new(IoThreads::new(options.io_threads, !options.strict_queue_delay));
        let ctx = LoadContext {
            backends: Arc::new(backends),
            gpu_count: crate::gpu::device_count(),
            config_name: options.model_config_name.clone(),
            instance_poll: options.instance_poll,
            inline_under: options.inline_under,
            io_threads: io_threads.clone(),
            models: models.clone(),
            test_hooks: options.test_hooks,
            metrics: metrics.clone(),
            response_cache: options
                .response_cache
                .as_ref()
                .map(|s| Arc::new(crate::response_cache::ResponseCache::new(s))),
        };
        let remotes = remote_repositories(&options.model_repositories, &options.repository_cache);
        let roots: Vec<PathBuf> = options
            .model_repositories
            .iter()
            .map(|location| match location {
                RepositoryLocation::Local(path) => path.clone(),
                RepositoryLocation::Remote(uri) => {
                    remotes.iter().find(|r| r.uri() == uri).map(|r| r.root().to_path_buf()).unwrap_or_default()
                }
            })
            .collect();
        let control = Arc::new(ModelControl::new(
            options.control_mode,
            roots,
            remotes,
            options.backend_directory.clone(),
            ctx,
            options.exit_timeout,
        ));
        // A remote repository is not checked here: its copy is made by the first sync, and one
        // that cannot be synced leaves the others serving (crate::control).
        let unreadable: Vec<&PathBuf> = options
            .model_repositories
            .iter()
            .filter_map(|location| match location {
                RepositoryLocation::Local(path) => Some(path),
                RepositoryLocation::Remote(_) => None,
            })
            .filter(|root| std::fs::read_dir(root).is_err())
            .collect();
        let initialized = unreadable.is_empty();
        if !initialized {
            for root in &unreadable {
                tracing::error!("model repository {} cannot be read", root.display());
            }
            if options.exit_on_error {
                anyhow::bail!("model repository {} cannot be read", unreadable[0].display());
            }
            tracing::error!("the server failed to initialize: no model is loaded, and it is neither live nor ready");
        }
        let shm = crate::shm::SharedMemory::new(options.allow_client_shm);
        let busy_poll = crate::busy_poll::BusyPoll::start(options.busy_poll, options.busy_poll_min_spare_cpus);
        Ok(Arc::new(Server {
            models,
            control,
            poller: Mutex::new(None),
            options,
            shm,
            phase: AtomicU8::new(Phase::Starting as u8),
            initialized,
            abandoned: AtomicU64::new(0),
            busy_poll,
            io_threads,
            metrics,
            tracer,
            _runtime: runtime,
        }))
    }

    /// Loads the start-up models (every model of the repositories, or `--load-model`'s in EXPLICIT
    /// mode), several at a time (`--model-load-thread-count`), each plugin's initialisation under
    /// its own deadline; a model that fails is UNAVAILABLE with its reason. Then the repository
    /// poller starts (POLL mode) and the server is [`Phase::Serving`], unless a shutdown began
    /// meanwhile. Blocks: call it off the async reactor. An error (with `--exit-on-error`) ends
    /// the process.
    pub fn load_startup_models(&self) -> anyhow::Result<()> {
        if self.initialized {
            let failed = self
                .control
                .start(&self.options.load_models, self.options.model_load_threads)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            if !failed.is_empty() && self.options.exit_on_error {
                anyhow::bail!("failed to load all models (failed: {})", failed.join(", "));
            }
            if let ControlMode::Poll { interval } = self.options.control_mode
                && !interval.is_zero()
                && self.phase() == Phase::Starting
            {
                *self.poller.lock() = Some(start_poller(self.control.clone(), interval)?);
            }
        }
        let _ = self.phase.compare_exchange(
            Phase::Starting as u8,
            Phase::Serving as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        Ok(())
    }

    /// The I/O threads' share in scheduling: the budget of inline executions, and the dynamic
    /// batches an I/O thread about to sleep runs ([`IoThreads::before_park`]).
    pub fn io_threads(&self) -> Arc<IoThreads> {
        self.io_threads.clone()
    }

    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// The server's tracing: sampling, settings, and where traces go.
    pub fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    /// Counts a request whose client went away (an HTTP connection closed, a gRPC call cancelled)
    /// before its answer: the frontend stopped waiting, and the request, cancelled, is dropped
    /// unexecuted if it still waits for an instance.
    pub fn count_abandoned(&self) {
        self.abandoned.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.metrics {
            m.abandoned();
        }
    }

    /// The metrics endpoint's text (`None` with `--allow-metrics=false`).
    pub fn metrics_text(&self) -> Option<String> {
        let metrics = self.metrics.as_ref()?;
        let mut pending = Vec::new();
        for entry in self.models.read().values() {
            for state in entry.versions.values() {
                if let Some(m) = state.ready() {
                    pending.push((m.name.to_string(), m.version, m.queued() as u64));
                }
            }
        }
        Some(metrics.render(&pending))
    }

    /// Requests whose client went away before their answer, since the server started.
    pub fn abandoned(&self) -> u64 {
        self.abandoned.load(Ordering::Relaxed)
    }

    /// Where the server is in its life (see [`Phase`]).
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Starting,
            1 => Phase::Serving,
            2 => Phase::Draining,
            _ => Phase::Stopping,
        }
    }

    /// `/v2/health/live`: live once initialized (tritonserver: not while it "failed to
    /// initialize") and until the models stop, then tritonserver's "Server exiting".
    pub fn live(&self) -> Result<bool, InferError> {
        match self.phase() {
            Phase::Stopping => Err(InferError::unavailable("Server exiting")),
            Phase::Starting | Phase::Serving | Phase::Draining => Ok(self.initialized),
        }
    }

    /// `/v2/health/ready`: never before the server initialized; not ready from the moment a
    /// shutdown begins (so that probes take the server out of rotation while it drains), "Server
    /// exiting" once the models stop; otherwise ready when every model tried is, those unloaded
    /// and those left out as duplicates aside, and every remote repository has been copied once
    /// (`--strict-readiness`, the default), or at once.
    pub fn ready(&self) -> Result<bool, InferError> {
        match self.phase() {
            Phase::Stopping => Err(InferError::unavailable("Server exiting")),
            Phase::Starting | Phase::Draining => Ok(false),
            Phase::Serving => Ok(self.initialized
                && (!self.options.strict_readiness
                    || (self.control.remotes_synced()
                        && self.models.read().values().all(|m| m.is_ready() || m.is_unloaded() || m.is_duplicate())))),
        }
    }

    fn entry(&self, name: &str) -> Result<Arc<ModelEntry>, InferError> {
        self.models.entry(name)
    }

    /// The repository extension's load: loads or reloads `name` (EXPLICIT mode; otherwise
    /// tritonserver's refusal). Blocks while the model loads: call it off the async reactor.
    pub fn load_model(&self, name: &str, overrides: &LoadOverrides) -> Result<(), InferError> {
        self.control.load(name, overrides)
    }

    /// The repository extension's unload (with `unload_dependents`, the ensembles using the model
    /// too). Blocks until in-flight requests are answered, at most `--exit-timeout-secs`.
    pub fn unload_model(&self, name: &str, dependents: bool) -> Result<(), InferError> {
        self.control.unload(name, dependents)
    }

    /// The model version a request addresses: the given one, or the highest ready one.
    pub fn version(&self, name: &str, version: Option<i64>) -> Result<Arc<ModelVersion>, InferError> {
        self.models.version(name, version)
    }

    pub fn is_model_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.phase() <= Phase::Serving && self.version(name, version).is_ok()
    }

    /// Model metadata (the KServe v2 shape; HTTP renders it as JSON).
    pub fn metadata(&self, name: &str, version: Option<i64>) -> Result<pb::ModelMetadataResponse, InferError> {
        let model = self.version(name, version)?;
        let entry = self.entry(name)?;
        let versions: Vec<String> = match version {
            Some(v) => vec![v.to_string()],
            None => entry
                .versions
                .iter()
                .filter(|(_, s)| matches!(s, VersionState::Ready(m) if m.health.is_ready()))
                .map(|(v, _)| v.to_string())
                .collect(),
        };
        let batching = model.io.max_batch_size > 0;
        let tensors = |list: &[crate::validate::IoTensor]| -> Vec<pb::model_metadata_response::TensorMetadata> {
            list.iter()
                .map(|t| {
                    let mut shape = if batching { vec![-1] } else { vec![] };
                    shape.extend_from_slice(&t.dims);
                    pb::model_metadata_response::TensorMetadata {
                        name: t.name.clone(),
                        datatype: t.datatype.wire_name().to_string(),
                        shape,
                    }
                })
                .collect()
        };
        let config = &model.config;
        let platform = if config.platform.is_empty() { &config.backend } else { &config.platform };
        Ok(pb::ModelMetadataResponse {
            name: name.to_string(),
            versions,
            platform: platform.clone(),
            inputs: tensors(&model.io.inputs),
            outputs: tensors(&model.io.outputs),
        })
    }

    /// The configuration JSON of a model version.
    pub fn config(&self, name: &str, version: Option<i64>) -> Result<serde_json::Value, InferError> {
        Ok(self.version(name, version)?.config_json().clone())
    }

    /// The statistics extension: every ready version of `name` (or of every model), or one version.
    /// A model with no ready version, unknown or not, and a version that is not ready are refused
    /// with tritonserver's `TRITONSERVER_ServerModelStatistics` words (INVALID_ARG).
    pub fn statistics(
        &self,
        name: Option<&str>,
        version: Option<i64>,
    ) -> Result<pb::ModelStatisticsResponse, InferError> {
        let ready = |entry: &ModelEntry| -> Vec<Arc<ModelVersion>> {
            entry
                .versions
                .values()
                .filter_map(|state| match state {
                    VersionState::Ready(m) => Some(m.clone()),
                    _ => None,
                })
                .collect()
        };
        let versions: Vec<Arc<ModelVersion>> = match name {
            None => self.models.read().values().flat_map(|entry| ready(entry)).collect(),
            Some(name) => {
                let entry = self.models.read().get(name).cloned();
                let versions = entry.map(|entry| ready(&entry)).unwrap_or_default();
                if versions.is_empty() {
                    return Err(InferError::invalid(format!("requested model '{name}' is not available")));
                }
                match version {
                    None => versions,
                    Some(v) => {
                        let m = versions.into_iter().find(|m| m.version == v).ok_or_else(|| {
                            InferError::invalid(format!("requested model version is not available for model '{name}'"))
                        })?;
                        vec![m]
                    }
                }
            }
        };
        let model_stats = versions.iter().map(|m| m.stats.snapshot(&m.name, m.version)).collect();
        Ok(pb::ModelStatisticsResponse { model_stats })
    }

    /// The repository index: every model folder of the repositories, with each version's state
    /// and reason once it has been loaded (or tried).
    pub fn index(&self, ready_only: bool) -> Vec<pb::repository_index_response::ModelIndex> {
        self.control.index(ready_only)
    }

    /// The backends the loaded models use (the start-up table of backends).
    pub fn backends_in_use(&self) -> std::collections::BTreeMap<String, crate::backend::BackendSummary> {
        self.control.backends_in_use()
    }

    /// Runs a unary inference from a frontend (on one of the server's I/O threads): resolve the
    /// model version, validate, queue. Await the receiver for the outcome. `endpoint` names the
    /// caller in the error a decoupled model answers with.
    pub fn infer(&self, mut request: InferenceRequest, endpoint: &str) -> Result<ResponseReceiver, InferError> {
        self.model_for(&mut request)?.infer(request, endpoint, Caller::IoThread)
    }

    /// Runs a streamed inference from a frontend: every response of the request arrives on the
    /// receiver. Also returns the model version serving it.
    pub fn infer_stream(
        &self,
        mut request: InferenceRequest,
    ) -> Result<(StreamReceiver, Arc<ModelVersion>), InferError> {
        let model = self.model_for(&mut request)?;
        Ok((model.infer_stream(request, Caller::IoThread)?, model))
    }

    /// The model version that serves `request` from a frontend: the one it names, unless the
    /// server is stopping and the request would start something new. Inputs still in a client's
    /// GPU memory are copied to the host here unless that version's instances read them there
    /// (the verbose "prepared" line says which stay on a GPU).
    pub fn model_for(&self, request: &mut InferenceRequest) -> Result<Arc<ModelVersion>, InferError> {
        if let Some(poll) = &self.busy_poll {
            poll.touch();
        }
        let model = self.version(&request.model_name, request.model_version)?;
        request.settle_device_inputs(model.device_io())?;
        if tracing::enabled!(tracing::Level::DEBUG) {
            log_prepared(request, &model);
        }
        // Once the models stop, only the rest of a sequence already started gets in (as
        // tritonserver's sequence batcher lets a sequence finish); everything else is refused.
        let continues_a_sequence = model.is_sequence_batched() && !request.sequence_start;
        if self.phase() == Phase::Stopping && !continues_a_sequence {
            return Err(InferError::unavailable(
                "Server is stopping, scheduler for model has stopped accepting new inference requests",
            ));
        }
        Ok(model)
    }

    /// A shutdown's first stage: readiness turns false and the repository poller stops; the
    /// frontends stop taking connections, and serve those open until they close.
    pub fn begin_shutdown(&self) {
        self.phase.fetch_max(Phase::Draining as u8, Ordering::AcqRel);
        self.poller.lock().take();
    }

    /// A shutdown's second stage: the models stop taking new requests (but the rest of a started
    /// sequence) and health answers "Server exiting"; what is in flight is left to finish.
    pub fn stop_models(&self) {
        self.phase.fetch_max(Phase::Stopping as u8, Ordering::AcqRel);
        self.poller.lock().take();
    }

    /// The model versions with requests in flight (see [`ModelVersion::in_flight`]):
    /// `(model, version, requests)`, what a shutdown waits for and, when its exit timeout expires,
    /// cuts off.
    pub fn in_flight(&self) -> Vec<(String, i64, u64)> {
        let table = self.models.read();
        let mut out = Vec::new();
        for entry in table.values() {
            for state in entry.versions.values() {
                if let VersionState::Ready(m) = state {
                    let busy = m.in_flight() as u64;
                    if busy > 0 {
                        out.push((m.name.to_string(), m.version, busy));
                    }
                }
            }
        }
        out
    }

    /// Unloads every model: queued requests finish, then instances, models and backends are
    /// finalised in that order. Blocks.
    pub fn unload_all(&self) {
        self.control.unload_all();
        // The requests are answered: their traces are over.
        self.tracer.shutdown();
    }
}

/// The remote repositories among `locations`, with their copies under `cache`.
fn remote_repositories(locations: &[RepositoryLocation], cache: &std::path::Path) -> Vec<Arc<RemoteRepository>> {
    locations
        .iter()
        .filter_map(|location| match location {
            RepositoryLocation::Remote(uri) => Some(Arc::new(RemoteRepository::new(uri.clone(), cache))),
            RepositoryLocation::Local(_) => None,
        })
        .collect()
}

/// Starts the repository poller (POLL mode): a look at the repositories every `interval` until
/// the returned sender is dropped.
fn start_poller(
    control: Arc<ModelControl>,
    interval: std::time::Duration,
) -> anyhow::Result<crossbeam_channel::Sender<()>> {
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    std::thread::Builder::new().name("nereus-poll".into()).spawn(move || {
        while let Err(crossbeam_channel::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
            control.poll();
        }
    })?;
    Ok(stop)
}

/// A request as it reaches its model, at `--log-verbose=1` (tritonserver's "prepared:" line). The
/// names come from the client as they are: the log line escapes them (unless the operator turned
/// that off with `TRITON_SERVER_ESCAPE_LOG_MESSAGES=0`, as in tritonserver).
fn log_prepared(request: &InferenceRequest, model: &ModelVersion) {
    let id = if request.id.is_empty() { "<id_unknown>" } else { request.id.as_str() };
    let requested = request.model_version.unwrap_or(-1);
    let inputs: Vec<String> = request
        .inputs
        .iter()
        .map(|t| match request.device_inputs.get(&t.name) {
            Some(span) => {
                format!("{} {} {:?} ({} bytes on GPU {})", t.name, t.datatype, t.shape, span.len(), span.device())
            }
            None => format!("{} {} {:?} ({} bytes)", t.name, t.datatype, t.shape, t.data.len()),
        })
        .collect();
    tracing::debug!(
        "[request id: {id}] prepared: model: {}, requested version: {requested}, actual version: {}, correlation id: {:?}, priority: {}, timeout (us): {}, inputs: [{}], requested outputs: {:?}",
        model.name,
        model.version,
        request.correlation_id,
        request.priority,
        request.timeout_us,
        inputs.join(", "),
        request.requested_outputs,
    );
}
