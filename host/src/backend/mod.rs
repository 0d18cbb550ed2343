//! Backends: what executes a model's batches. The repository asks a [`BackendFactory`], chosen by
//! the configuration's `backend`/`platform` in [`registry`], to load each model version; the
//! scheduler hands batches to the instances it returns through [`BackendInstance`] and never knows
//! which backend runs them. Each backend lives in its own folder and owns its teardown; adding one
//! means its folder and a line in [`registry`].
pub mod batch;
pub mod onnx;
pub mod ragged;
pub mod registry;
pub mod wasm;

use std::path::Path;
use std::sync::Arc;

use crate::config::ModelConfig;
use crate::load_error::LoadError;
use crate::model::health::Health;
use crate::request::Job;
use crate::stats::ExecutionTimes;
use crate::test_hooks::TestHooks;
use crate::validate::IoSpec;

/// Loads the versions of the models that name one backend (TRITONBACKEND_Backend, with the model
/// lifecycle calls of Triton's backend API).
pub trait BackendFactory: Send + Sync {
    /// Fills in what `config` leaves out, from the model itself (auto-complete), before it is
    /// validated. Default: nothing.
    fn autocomplete(&self, _config: &mut ModelConfig, _folder: &ModelFolder<'_>) -> Result<(), LoadError> {
        Ok(())
    }

    /// Whether instances of `KIND_AUTO` go to the GPUs (when there are any). Default: no.
    fn uses_gpus(&self) -> bool {
        false
    }

    /// Checks a validated configuration against what this backend allows and returns it as
    /// clients are to see it (a sandboxed backend shows its policy there). Default: unchanged.
    fn prepare(&self, config: ModelConfig, _instances: &[InstanceDesc]) -> Result<ModelConfig, LoadError> {
        Ok(config)
    }

    /// Whether the short executions of a model with this (prepared) configuration may run on the
    /// I/O thread that received the request. Only a backend that cannot wait inline qualifies: the
    /// inline gate measures CPU time, and time spent waiting on other threads or a device would
    /// escape it. Default: no.
    fn may_run_inline(&self, _config: &ModelConfig) -> bool {
        false
    }

    /// Loads one version: creates its instances (each initialised), and what is to be finalised
    /// after them. On error nothing is left behind.
    fn load(&self, version: &VersionLoad<'_>) -> Result<LoadedVersion, LoadError>;

    /// Where backend `backend` comes from for a version of the model in `model_dir`, and its
    /// settings, as tritonserver's start-up table of backends shows them. Default: built in.
    fn describe(&self, _backend: &str, _model_dir: &Path, _version: i64) -> BackendSummary {
        BackendSummary { path: "(built in)".into(), config: "{}".into() }
    }
}

/// One row of the start-up table of backends: where the backend comes from, and its settings as
/// JSON (tritonserver shows a backend's `--backend-config` there).
pub struct BackendSummary {
    pub path: String,
    pub config: String,
}

/// A model's folder, as auto-complete looks at it.
pub struct ModelFolder<'a> {
    pub dir: &'a Path,
    /// The highest version the policy loads (where the model file is read from).
    pub version: Option<i64>,
}

/// One model version to load.
pub struct VersionLoad<'a> {
    /// The backend's name as the configuration gives it (a Wasm component's file name).
    pub backend: &'a str,
    pub model_dir: &'a Path,
    pub config: &'a Arc<ModelConfig>,
    pub version: i64,
    pub io: &'a Arc<IoSpec>,
    pub instances: &'a [InstanceDesc],
    /// The version's health, which instances mark UNAVAILABLE when they cannot be rebuilt.
    pub health: &'a Arc<Health>,
    /// The version's test hooks (`--test-hooks` only), e.g. to refuse instance rebuilds.
    pub hooks: Option<&'a Arc<TestHooks>>,
    /// The version's Prometheus metrics, where a backend counts what only it sees (faults,
    /// rebuilds).
    pub metrics: Option<&'a crate::metrics::ModelMetrics>,
}

/// A loaded version's instances, and what to finalise after them.
pub struct LoadedVersion {
    pub instances: Vec<Box<dyn BackendInstance>>,
    pub teardown: Option<Box<dyn ModelTeardown>>,
}

/// Finalises what a backend keeps for a model version beyond its instances
/// (TRITONBACKEND_ModelFinalize, and the backend's own finalisation when it was the last model).
pub trait ModelTeardown: Send {
    fn finalize(self: Box<Self>);
}

/// One execution instance of a model (TRITONBACKEND_ModelInstance): executes one batch at a time.
pub trait BackendInstance: Send + 'static {
    /// Executes `jobs` on `thread`. When it returns, every job has its final response or error
    /// (held in its sender until the caller flushes it) — except, inline, those a backend that
    /// would have to block leaves open to run again on its worker. Returns how long the phases
    /// took, for statistics.
    fn execute(&mut self, jobs: &mut Vec<Job>, thread: ExecutionThread) -> ExecutionTimes;
    /// Finalises the instance (TRITONBACKEND_ModelInstanceFinalize).
    fn finalize(self: Box<Self>);
    /// The GPU whose memory the instance reads inputs from and writes outputs to itself
    /// ([`crate::device_io`]); `None` (the default) for instances that need host bytes.
    fn device_io(&self) -> Option<usize> {
        None
    }
    /// The instance's worker found nothing to do and is about to sleep: the moment for a backend
    /// to give back what it held for the load that has passed (a sandbox's grown memory).
    fn idle(&mut self) {}
}

/// The thread an execution runs on, which decides what a backend may do when it would block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutionThread {
    /// The instance's own worker thread: it may block.
    Worker,
    /// An I/O thread running the execution inline (see `scheduler::inline`): it must not block.
    Inline,
    /// The thread of a plugin that called the model and waits for this very answer
    /// (`scheduler::Caller::Waiting`): it may block, but it is the calling model's, so what the
    /// execution's faults cost the instance (a lowered priority, a rebuild running the plugin's
    /// initialisation) is not charged to it.
    Caller,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceKind {
    Cpu,
    Gpu,
    Model,
}

impl InstanceKind {
    /// As tritonserver's log lines name the kind ("CPU device 0").
    pub fn name(self) -> &'static str {
        match self {
            InstanceKind::Cpu => "CPU",
            InstanceKind::Gpu => "GPU",
            InstanceKind::Model => "MODEL",
        }
    }
}

/// An instance to create, from the normalised `instance_group`s.
#[derive(Clone, Debug)]
pub struct InstanceDesc {
    /// `<group name>_<index within the group>`, as Triton names instances.
    pub name: String,
    pub kind: InstanceKind,
    pub device_id: i32,
}

/// The instances a normalised configuration asks for.
pub fn instances_of(config: &ModelConfig) -> Vec<InstanceDesc> {
    use crate::config::schema::model_instance_group::Kind;
    let mut out = Vec::new();
    for group in &config.instance_group {
        let kind = match Kind::try_from(group.kind) {
            Ok(Kind::Gpu) => InstanceKind::Gpu,
            Ok(Kind::Model) => InstanceKind::Model,
            _ => InstanceKind::Cpu,
        };
        let gpus: Vec<i32> =
            if kind == InstanceKind::Gpu && !group.gpus.is_empty() { group.gpus.clone() } else { vec![0] };
        let mut index = 0;
        for device_id in gpus {
            for _ in 0..group.count.max(1) {
                out.push(InstanceDesc { name: format!("{}_{index}", group.name), kind, device_id });
                index += 1;
            }
        }
    }
    out
}

/// Which backend a model names: `backend`, or the one Triton maps its `platform` to.
pub fn backend_name(config: &ModelConfig) -> Result<String, LoadError> {
    if !config.backend.is_empty() {
        return Ok(config.backend.clone());
    }
    let mapped = match config.platform.as_str() {
        "" => return Err(LoadError::NoBackend),
        "onnxruntime_onnx" => "onnxruntime",
        "tensorrt_plan" => "tensorrt",
        "pytorch_libtorch" => "pytorch",
        "tensorflow_graphdef" | "tensorflow_savedmodel" => "tensorflow",
        "custom" => "custom",
        "ensemble" => return Err(LoadError::EnsembleBackend),
        other => return Err(LoadError::UnknownPlatform(other.into())),
    };
    Ok(mapped.to_string())
}
