//! The server core both frontends call: model lookup by name and version, readiness, metadata,
//! inference, and orderly shutdown.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::backend::registry::{BackendOptions, Backends};
use crate::backend::wasm::WasmRuntime;
use crate::error::InferError;
use crate::model::{ModelResolver, ModelVersion};
use crate::proto::inference as pb;
use crate::repository::{self, LoadContext, ModelEntry, ModelTable, VersionState};
use crate::request::{InferenceRequest, ResponseReceiver, StreamReceiver};
use crate::scheduler::Caller;
use crate::scheduler::inline::IoThreads;

/// Extensions of the KServe v2 protocol this server implements, as `GET /v2` lists them.
pub const EXTENSIONS: &[&str] = &[
    "binary_tensor_data",
    "model_configuration",
    "model_repository",
    "schedule_policy",
    "sequence(string_id)",
    "parameters",
    "statistics",
    "logging",
    "system_shared_memory",
];

/// How the server is set up (the CLI fills this).
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The server's name in its metadata (`--id`, as tritonserver's).
    pub id: String,
    pub model_repositories: Vec<PathBuf>,
    /// How many I/O threads serve requests (HTTP runtime workers plus gRPC threads): all but one
    /// of them may run short executions inline at once.
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
    /// How long an idle instance worker polls for work before it parks (`--instance-poll-us`).
    pub instance_poll: std::time::Duration,
    /// Executions shorter than this may run inline (`--inline-execution-us`; zero: never).
    pub inline_under: std::time::Duration,
    /// Enables the test-only hooks (execution gates and counters) under `/nereus/test/`.
    pub test_hooks: bool,
    /// Lets clients register system shared memory (`--allow-client-shm`).
    pub allow_client_shm: bool,
    /// How long an idle-priority thread keeps a CPU awake after each request (`--busy-poll-us`;
    /// zero: no such thread). See [`crate::busy_poll`].
    pub busy_poll: std::time::Duration,
    /// The spare CPU under which the spinner rests (`--busy-poll-min-spare-cpus`).
    pub busy_poll_min_spare_cpus: f64,
}

pub struct Server {
    models: Arc<ModelTable>,
    options: ServerOptions,
    shm: crate::shm::SystemShm,
    shutting_down: AtomicBool,
    /// Requests whose client went away before their answer (see [`Server::count_abandoned`]).
    abandoned: AtomicU64,
    busy_poll: Option<crate::busy_poll::BusyPoll>,
    _runtime: Arc<WasmRuntime>,
}

impl Server {
    /// The system shared-memory regions clients registered.
    pub fn shm(&self) -> &crate::shm::SystemShm {
        &self.shm
    }

    /// Loads every model of the repositories (control mode NONE). Models that fail to load are
    /// kept as UNAVAILABLE with their reason.
    pub fn start(options: ServerOptions) -> anyhow::Result<Arc<Server>> {
        let runtime = WasmRuntime::new(options.cache_directory.clone()).map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let models = Arc::new(ModelTable::default());
        for device in crate::gpu::describe_devices() {
            tracing::info!("{device}");
        }
        let backends = Backends::new(BackendOptions {
            runtime: runtime.clone(),
            backend_dir: options.backend_directory.clone(),
            onnxruntime_library: options.onnxruntime_library.clone(),
            autocomplete: options.autocomplete,
        });
        let ctx = LoadContext {
            backends: Arc::new(backends),
            gpu_count: crate::gpu::device_count(),
            instance_poll: options.instance_poll,
            inline_under: options.inline_under,
            io_threads: Arc::new(IoThreads::new(options.io_threads)),
            models: models.clone(),
            test_hooks: options.test_hooks,
        };
        let (found, conflicts) = repository::scan(&options.model_repositories);
        for (name, reason) in conflicts {
            tracing::error!("model '{name}' is unavailable: {reason}");
            let entry = ModelEntry {
                name: name.clone(),
                dir: PathBuf::new(),
                config: None,
                versions: BTreeMap::new(),
                reason: Some(reason),
            };
            models.write().insert(name, Arc::new(entry));
        }
        // Ensembles load after the models they compose (nested ones after their inner ensembles).
        let (mut ensembles, plain): (Vec<_>, Vec<_>) =
            found.into_iter().partition(|(name, dir)| repository::is_ensemble(name, dir));
        let load = |name: String, dir: PathBuf| {
            let entry = repository::load_model(&name, &dir, &ctx);
            match (&entry.reason, entry.is_ready()) {
                (Some(reason), _) => tracing::error!("model '{name}' is unavailable: {reason}"),
                (None, true) => {
                    tracing::info!("model '{name}' loaded: versions {:?}", entry.versions.keys().collect::<Vec<_>>())
                }
                (None, false) => tracing::warn!("model '{name}' loaded with unavailable versions"),
            }
            models.write().insert(name, Arc::new(entry));
        };
        for (name, dir) in plain {
            load(name, dir);
        }
        while !ensembles.is_empty() {
            let waiting: Vec<String> = ensembles.iter().map(|(n, _)| n.clone()).collect();
            let ready = ensembles.iter().position(|(name, dir)| {
                repository::ensemble_steps(name, dir).iter().all(|m| !waiting.contains(m) || m == name)
            });
            // A cycle between ensembles: load the first anyway; it reports the missing model.
            let (name, dir) = ensembles.remove(ready.unwrap_or(0));
            load(name, dir);
        }
        let shm = crate::shm::SystemShm::new(options.allow_client_shm);
        let busy_poll = crate::busy_poll::BusyPoll::start(options.busy_poll, options.busy_poll_min_spare_cpus);
        Ok(Arc::new(Server {
            models,
            options,
            shm,
            shutting_down: AtomicBool::new(false),
            abandoned: AtomicU64::new(0),
            busy_poll,
            _runtime: runtime,
        }))
    }

    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// Counts a request whose client went away (an HTTP connection closed, a gRPC call cancelled)
    /// before its answer: the frontend stopped waiting, and the request, cancelled, is dropped
    /// unexecuted if it still waits for an instance.
    pub fn count_abandoned(&self) {
        self.abandoned.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests whose client went away before their answer, since the server started.
    pub fn abandoned(&self) -> u64 {
        self.abandoned.load(Ordering::Relaxed)
    }

    pub fn is_live(&self) -> bool {
        true
    }

    pub fn is_ready(&self) -> bool {
        !self.shutting_down.load(Ordering::Acquire)
            && (!self.options.strict_readiness || self.models.read().values().all(|m| m.is_ready()))
    }

    fn entry(&self, name: &str) -> Result<Arc<ModelEntry>, InferError> {
        self.models.entry(name)
    }

    /// Loads (or reloads) a model: tritonserver's answer whenever the model control mode is not
    /// EXPLICIT, which is the only mode so far.
    pub fn load_model(&self, _name: &str) -> Result<(), InferError> {
        Err(InferError::unavailable("explicit model load / unload is not allowed if polling is enabled"))
    }

    /// Unloads a model; answered as [`Server::load_model`].
    pub fn unload_model(&self, _name: &str) -> Result<(), InferError> {
        Err(InferError::unavailable("explicit model load / unload is not allowed if polling is enabled"))
    }

    /// The model version a request addresses: the given one, or the highest ready one.
    pub fn version(&self, name: &str, version: Option<i64>) -> Result<Arc<ModelVersion>, InferError> {
        self.models.version(name, version)
    }

    pub fn is_model_ready(&self, name: &str, version: Option<i64>) -> bool {
        !self.shutting_down.load(Ordering::Acquire) && self.version(name, version).is_ok()
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
        Ok(self.version(name, version)?.config_json.clone())
    }

    /// The statistics extension: every ready version of `name` (or of every model), or one version.
    pub fn statistics(
        &self,
        name: Option<&str>,
        version: Option<i64>,
    ) -> Result<pb::ModelStatisticsResponse, InferError> {
        let mut out = Vec::new();
        let ready_versions = |entry: &ModelEntry, out: &mut Vec<pb::ModelStatistics>| {
            for state in entry.versions.values() {
                if let VersionState::Ready(m) = state {
                    out.push(m.stats.snapshot(&m.name, m.version));
                }
            }
        };
        match (name, version) {
            (Some(name), Some(v)) => {
                let m = self.version(name, Some(v))?;
                out.push(m.stats.snapshot(&m.name, m.version));
            }
            (Some(name), None) => {
                ready_versions(&*self.entry(name)?, &mut out);
                if out.is_empty() {
                    self.version(name, None)?;
                }
            }
            (None, _) => {
                for entry in self.models.read().values() {
                    ready_versions(entry, &mut out);
                }
            }
        }
        Ok(pb::ModelStatisticsResponse { model_stats: out })
    }

    /// The repository index: every model and version with its state and reason (an entry with an
    /// empty version stands for a model that has none, e.g. because its configuration is bad).
    pub fn index(&self, ready_only: bool) -> Vec<pb::repository_index_response::ModelIndex> {
        use pb::repository_index_response::ModelIndex;
        let mut out = Vec::new();
        for entry in self.models.read().values() {
            if entry.versions.is_empty() {
                if !ready_only {
                    out.push(ModelIndex {
                        name: entry.name.clone(),
                        version: String::new(),
                        state: "UNAVAILABLE".into(),
                        reason: entry.reason.as_ref().map(ToString::to_string).unwrap_or_default(),
                    });
                }
                continue;
            }
            for (v, state) in &entry.versions {
                let (state, reason) = match state {
                    VersionState::Ready(m) if m.health.is_ready() => ("READY", String::new()),
                    VersionState::Ready(m) => ("UNAVAILABLE", m.health.reason().unwrap_or_default()),
                    VersionState::Unavailable(r) => ("UNAVAILABLE", r.to_string()),
                };
                if !ready_only || state == "READY" {
                    out.push(ModelIndex {
                        name: entry.name.clone(),
                        version: v.to_string(),
                        state: state.into(),
                        reason,
                    });
                }
            }
        }
        out
    }

    /// Runs a unary inference from a frontend (on one of the server's I/O threads): resolve the
    /// model version, validate, queue. Await the receiver for the outcome. `endpoint` names the
    /// caller in the error a decoupled model answers with.
    pub fn infer(&self, request: InferenceRequest, endpoint: &str) -> Result<ResponseReceiver, InferError> {
        self.model_for(&request)?.infer(request, endpoint, Caller::IoThread)
    }

    /// Runs a streamed inference from a frontend: every response of the request arrives on the
    /// receiver. Also returns the model version serving it.
    pub fn infer_stream(&self, request: InferenceRequest) -> Result<(StreamReceiver, Arc<ModelVersion>), InferError> {
        let model = self.model_for(&request)?;
        Ok((model.infer_stream(request, Caller::IoThread)?, model))
    }

    fn model_for(&self, request: &InferenceRequest) -> Result<Arc<ModelVersion>, InferError> {
        if let Some(poll) = &self.busy_poll {
            poll.touch();
        }
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(InferError::unavailable("Server is shutting down"));
        }
        self.version(&request.model_name, request.model_version)
    }

    /// Marks the server as stopping: readiness turns false and new requests are refused.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    /// Unloads every model: queued requests finish, then instances, models and backends are
    /// finalised in that order. Blocks.
    pub fn unload_all(&self) {
        let models = std::mem::take(&mut *self.models.write());
        // Ensembles first: their in-flight requests still need the composing models.
        let (ensembles, plain): (Vec<_>, Vec<_>) =
            models.values().partition(|e| e.config.as_ref().is_some_and(|c| c.platform == "ensemble"));
        for entry in ensembles.into_iter().chain(plain) {
            for state in entry.versions.values() {
                if let VersionState::Ready(m) = state {
                    m.unload();
                }
            }
        }
    }
}
