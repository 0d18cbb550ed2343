//! Sandboxed WebAssembly backends: loading a model's lifecycle (backend → model → instances) and
//! executing batches in an instance's sandbox, rebuilding it after a fault.
mod bindings;
mod bls;
mod budget;
mod component;
mod host_api;
pub mod inspect;
mod io_guard;
mod leases;
mod lift;
mod lower;
mod merge;
mod policy;
mod runtime;
mod sandbox;
mod state;
mod trim;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;

pub use budget::{MAX_TOTAL_INSTANCES, SandboxBudget, SandboxLimits};
use leases::{Holder, Lease, Leases, Yielded};
pub use policy::MAX_MEMORY_BYTES;
pub use policy::SandboxPolicy;
use runtime::BytesIdentity;
pub use runtime::{CompiledComponent, Metering, WasmRuntime};
use sandbox::{ActiveBatch, Executed, ModelMeter, Sandbox};

use super::{
    BackendFactory, BackendInstance, ExecutionThread, InstanceDesc, LoadedVersion, ModelTeardown, VersionLoad,
};
use crate::config::ModelConfig;
use crate::error::InferError;
use crate::load_error::{LoadError, PluginError};
use crate::model::ModelResolver;
use crate::model::health::Health;
use crate::request::{CorrelationId, Job};
use crate::stats::ExecutionTimes;
use crate::test_hooks::TestHooks;
use crate::validate::IoSpec;

/// The factory of every sandboxed backend: a model whose backend is not a native one names a
/// WebAssembly component, found as Triton finds backend libraries (see [`component`]).
pub struct WasmBackends {
    runtime: Arc<WasmRuntime>,
    registry: Arc<BackendRegistry>,
    backend_dir: Option<PathBuf>,
    /// The operator's limits and the server-wide totals every model's sandboxes count in.
    budget: Arc<SandboxBudget>,
    /// How plugins reach the models they call (`nereus:backend/models`).
    models: Weak<dyn ModelResolver>,
    /// The server's async runtime, where a called ensemble runs its steps (`None` outside one).
    reactor: Option<tokio::runtime::Handle>,
}

impl WasmBackends {
    pub fn new(
        runtime: Arc<WasmRuntime>,
        backend_dir: Option<PathBuf>,
        budget: Arc<SandboxBudget>,
        models: Weak<dyn ModelResolver>,
    ) -> Self {
        let reactor = tokio::runtime::Handle::try_current().ok();
        WasmBackends { runtime, registry: Arc::new(BackendRegistry::default()), backend_dir, budget, models, reactor }
    }
}

impl BackendFactory for WasmBackends {
    /// The sandbox policy from the configuration's `parameters`, within its own instance limit, and
    /// written back so that the configuration shows the policy in force.
    fn prepare(&self, config: ModelConfig, instances: &[InstanceDesc]) -> Result<ModelConfig, LoadError> {
        let defaults = self.budget.limits.default_policy();
        let policy = SandboxPolicy::from_config_or(&config, defaults).map_err(LoadError::SandboxPolicy)?;
        self.budget.limits.admit(&policy, instances.len()).map_err(LoadError::OverSandboxLimit)?;
        if instances.len() as u64 > policy.max_instances {
            return Err(LoadError::TooManyInstances { requested: instances.len(), allowed: policy.max_instances });
        }
        Ok(policy.shown_in(&config))
    }

    /// A sandbox cannot wait inline (a blocking `wasi:io` call traps and hands the request back,
    /// see `io_guard`), so its CPU time is its whole cost — unless the policy grants it its model's
    /// folder (file operations block, and are not guarded) or lets it call other models (it
    /// waits for their answers).
    fn may_run_inline(&self, config: &ModelConfig) -> bool {
        SandboxPolicy::from_config(config).is_ok_and(|p| !p.grant_model_dir && !p.callable_models.any())
    }

    fn load(&self, v: &VersionLoad<'_>) -> Result<LoadedVersion, LoadError> {
        let mut policy = SandboxPolicy::from_config(v.config).map_err(LoadError::SandboxPolicy)?;
        let merge = merge::enabled(v.config).map_err(|source| LoadError::Config { line: None, source })?;
        let (bytes, identity): (std::borrow::Cow<'static, [u8]>, _) = match component::find(
            v.backend,
            &v.config.runtime,
            &v.config.name,
            v.model_dir,
            v.version,
            self.backend_dir.as_deref(),
        )? {
            component::Source::File(path) => {
                // The identity before the read: a file changed after it is another identity next time.
                let identity = std::fs::metadata(&path).ok().and_then(|m| BytesIdentity::of_file(&m));
                match std::fs::read(&path) {
                    Ok(bytes) => (bytes.into(), identity),
                    Err(source) => return Err(LoadError::Unreadable { path, source }),
                }
            }
            component::Source::Bundled(bytes) => (bytes.into(), Some(BytesIdentity::bundled(bytes))),
        };
        let (compiled, source) = self
            .runtime
            .load_identified(&bytes, identity, if policy.fuel.is_some() { Metering::Fuel } else { Metering::Off })
            .map_err(|error| LoadError::NotAComponent { backend: v.backend.to_string(), error })?;
        if let Some(m) = v.metrics {
            m.component_loaded(source);
        }
        log_withheld(&compiled.report, &v.config.name, v.version, v.backend, &policy);
        if policy.grant_model_dir {
            policy.model_dir = Some(v.model_dir.join(v.version.to_string()));
        }
        let calls = policy.callable_models.any().then(|| {
            Arc::new(bls::context::ModelCalls {
                model: v.config.name.as_str().into(),
                callable: policy.callable_models.clone(),
                models: self.models.clone(),
                reactor: self.reactor.clone(),
            })
        });
        // A sequence-batched plugin keeps its sequences' state in its instances: never trimmed,
        // never asked for its sandbox back.
        let sequence_batched = matches!(
            v.config.scheduling_choice,
            Some(crate::config::schema::model_config::SchedulingChoice::SequenceBatching(_))
        );
        let loaded = load(WasmLoad {
            calls,
            registry: &self.registry,
            budget: &self.budget,
            component: compiled,
            backend_name: v.backend,
            model_name: &v.config.name,
            version: v.version,
            config_json: crate::config::to_json(v.config).to_string(),
            policy,
            io: v.io.clone(),
            decoupled: v.config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled),
            merge,
            trim_above: (!sequence_batched).then_some(self.budget.limits.trim_above_bytes as usize),
            evictable: !sequence_batched,
            instances: v.instances,
            health: v.health.clone(),
            hooks: v.hooks.cloned(),
            metrics: v.metrics.cloned(),
        })?;
        Ok(LoadedVersion { instances: loaded.instances, teardown: Some(Box::new(loaded.teardown)) })
    }

    /// The component's file (or that it is bundled into the binary), and the operator's sandbox
    /// ceilings every model of it is held to.
    fn describe(&self, backend: &str, model_dir: &Path, version: i64) -> super::BackendSummary {
        let path = match component::find(backend, "", "", model_dir, version, self.backend_dir.as_deref()) {
            Ok(component::Source::File(path)) => path.display().to_string(),
            Ok(component::Source::Bundled(_)) => "(bundled into nereus)".into(),
            Err(e) => e.to_string(),
        };
        let l = &self.budget.limits;
        let config = serde_json::json!({"sandbox": {
            "max-memory-mb": (l.max_memory_bytes >> 20).to_string(),
            "max-execution-timeout-ms": l.max_execution_timeout.as_millis().to_string(),
            "max-output-bytes": l.max_output_bytes.to_string(),
            "max-instances": l.max_instances.to_string(),
        }});
        super::BackendSummary { path, config: config.to_string() }
    }
}

/// The host's own sandbox of each backend component in use, counted by the models using it:
/// created (initialize-backend) when the first model needs it, finalised when the last one goes.
#[derive(Default)]
struct BackendRegistry {
    live: Mutex<HashMap<String, (usize, Option<Sandbox>)>>,
}

impl BackendRegistry {
    /// The backend's sandbox, created on first use: held to the operator's ceilings (the policy a
    /// model that sets none gets) and counted in the server's Wasm memory budget as one model of
    /// its own, since what `initialize-backend` grows stays for as long as the backend is in use.
    fn acquire(
        &self,
        component: &CompiledComponent,
        backend_name: &str,
        budget: &Arc<SandboxBudget>,
    ) -> Result<(), LoadError> {
        let mut live = self.live.lock();
        if let Some((count, _)) = live.get_mut(&component.digest) {
            *count += 1;
            return Ok(());
        }
        let label: Arc<str> = format!("backend '{backend_name}'").into();
        let meter = ModelMeter::new(Some(budget.clone()), None, None);
        let mut sandbox =
            Sandbox::new(component, &budget.limits.default_policy(), meter, label).map_err(PluginError::from)?;
        if let Err(e) = sandbox.initialize_backend(backend_name) {
            sandbox.finalize();
            return Err(LoadError::BackendInit { backend: backend_name.to_string(), source: e.into() });
        }
        tracing::info!(
            "initialized backend '{backend_name}' (WebAssembly component {})",
            short_digest(&component.digest)
        );
        live.insert(component.digest.clone(), (1, Some(sandbox)));
        Ok(())
    }

    fn release(&self, digest: &str) {
        let mut live = self.live.lock();
        let last = match live.get_mut(digest) {
            Some((count, _)) => {
                *count -= 1;
                *count == 0
            }
            None => false,
        };
        if last && let Some((_, Some(sandbox))) = live.remove(digest) {
            sandbox.finalize();
        }
    }
}

/// Says, at `--log-verbose`, which capabilities the plugin asks for and does not get (the
/// interfaces are linked, so it loads; its calls fail or see nothing). The Rust standard library
/// alone imports files, environment and stdio, so this is not worth a warning.
fn log_withheld(report: &inspect::ComponentReport, model: &str, version: i64, backend: &str, policy: &SandboxPolicy) {
    let mut withheld: Vec<&str> = report
        .withheld()
        .filter(|i| {
            let granted = if i.capability == inspect::MODEL_CALLS {
                policy.callable_models.any()
            } else {
                policy.grant_model_dir
            };
            !(granted && i.grant == inspect::Grant::ByPolicy)
        })
        .map(|i| i.capability)
        .collect();
    withheld.sort_unstable();
    withheld.dedup();
    if !withheld.is_empty() {
        tracing::debug!(
            "model '{model}' version {version}: backend '{backend}' asks for {}, which the sandbox withholds (`nereus plugin check` lists its imports)",
            withheld.join(", ")
        );
    }
}

/// The first 12 hex digits of a component's digest, enough to tell builds apart in a log line.
fn short_digest(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// Everything needed to (re)build an instance's sandbox.
struct InstanceFactory {
    component: Arc<CompiledComponent>,
    policy: SandboxPolicy,
    backend_name: String,
    model_info: bindings::OwnedModelInfo,
    io: Arc<IoSpec>,
    decoupled: bool,
    /// Whether its batches run as one request (see [`merge`]).
    merge: bool,
    /// What every sandbox of the model counts its memory and log lines on.
    memory: ModelMeter,
    /// The server's trimmer, which rebuilds grown instances once idle for its delay.
    trimmer: Arc<trim::Trimmer>,
    /// The models its instances may call, and how they reach them (`None`: it may call none).
    calls: Option<Arc<bls::context::ModelCalls>>,
    /// Where its instances get their sandboxes.
    leases: Arc<Leases>,
    /// Whether an instance at rest may be asked for its sandbox back. Not a sequence-batched
    /// model's: its plugin keeps its sequences' state in the sandbox.
    evictable: bool,
}

/// Why an instance's sandbox could not be built.
#[derive(Debug)]
enum BuildError {
    /// The server's Wasm memory budget (its total, or the model's share) refused a growth: memory
    /// other sandboxes hold, which they may give back, so building again may succeed.
    BudgetInUse(PluginError),
    /// The plugin or its sandbox failed otherwise: building again would fail the same way.
    Failed(PluginError),
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::BudgetInUse(e) | BuildError::Failed(e) => e.fmt(f),
        }
    }
}

impl From<BuildError> for LoadError {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::BudgetInUse(e) | BuildError::Failed(e) => e.into(),
        }
    }
}

impl From<sandbox::Fault> for BuildError {
    fn from(fault: sandbox::Fault) -> Self {
        if fault.budget_refused { BuildError::BudgetInUse(fault.into()) } else { BuildError::Failed(fault.into()) }
    }
}

impl From<sandbox::CallError> for BuildError {
    fn from(e: sandbox::CallError) -> Self {
        match e {
            sandbox::CallError::Fault(fault) => fault.into(),
            plugin => BuildError::Failed(plugin.into()),
        }
    }
}

impl InstanceFactory {
    fn build(&self, instance: &bindings::OwnedInstanceInfo) -> Result<Sandbox, BuildError> {
        let label: Arc<str> = format!("model '{}' instance '{}'", self.model_info.name, instance.name).into();
        let mut sandbox = Sandbox::new(&self.component, &self.policy, self.memory.clone(), label)?;
        sandbox.allow_calls(self.calls.clone());
        let result = sandbox
            .initialize_backend(&self.backend_name)
            .and_then(|_| sandbox.initialize_model(&self.model_info))
            .and_then(|_| sandbox.initialize_instance(instance));
        match result {
            Ok(()) => Ok(sandbox),
            Err(e) => {
                sandbox.finalize();
                Err(e.into())
            }
        }
    }
}

/// A loaded Wasm model: its instances, plus what must be finalised after them.
struct LoadedWasmModel {
    pub instances: Vec<Box<dyn BackendInstance>>,
    pub teardown: WasmModelTeardown,
}

/// Releases the backend, after every instance is gone.
struct WasmModelTeardown {
    registry: Arc<BackendRegistry>,
    digest: String,
}

impl WasmModelTeardown {
    fn release(self) {
        self.registry.release(&self.digest);
    }
}

impl ModelTeardown for WasmModelTeardown {
    fn finalize(self: Box<Self>) {
        (*self).release();
    }
}

/// Parameters of one model version's load.
struct WasmLoad<'a> {
    pub calls: Option<Arc<bls::context::ModelCalls>>,
    pub registry: &'a Arc<BackendRegistry>,
    pub budget: &'a Arc<SandboxBudget>,
    pub component: Arc<CompiledComponent>,
    pub backend_name: &'a str,
    pub model_name: &'a str,
    pub version: i64,
    pub config_json: String,
    pub policy: SandboxPolicy,
    pub io: Arc<IoSpec>,
    pub decoupled: bool,
    pub merge: bool,
    pub trim_above: Option<usize>,
    /// Whether its instances may give their sandboxes back at rest (see [`InstanceFactory`]).
    pub evictable: bool,
    pub instances: &'a [InstanceDesc],
    pub health: Arc<Health>,
    pub hooks: Option<Arc<TestHooks>>,
    pub metrics: Option<crate::metrics::ModelMetrics>,
}

/// Runs the lifecycle of Triton's "Backends" chapter: backend (once per component), then each
/// instance's sandbox, which initialises the backend, the model and the instance in its own memory
/// (sandboxes share nothing, so a sandbox of the model's own would only hold memory and a slot of
/// the server's total for its finalisation). Any initialiser's error fails the load with the
/// plugin's message, after undoing what was done. Each instance takes one of the server's
/// sandboxes (see [`leases`]); a load that finds too few, free or to be taken back, is refused.
fn load(params: WasmLoad<'_>) -> Result<LoadedWasmModel, LoadError> {
    params.registry.acquire(&params.component, params.backend_name, params.budget)?;
    let model_info = bindings::OwnedModelInfo {
        name: params.model_name.to_string(),
        version: params.version,
        config_json: params.config_json,
    };
    let memory = ModelMeter::new(
        Some(params.budget.clone()),
        params.metrics.as_ref().map(|m| m.wasm_memory()),
        params.metrics.as_ref().map(|m| m.log_lines_dropped()),
    );
    let teardown = WasmModelTeardown { registry: params.registry.clone(), digest: params.component.digest.clone() };

    let factory = Arc::new(InstanceFactory {
        component: params.component,
        policy: params.policy,
        backend_name: params.backend_name.to_string(),
        model_info,
        io: params.io,
        decoupled: params.decoupled,
        merge: params.merge,
        memory,
        trimmer: params.budget.trimmer.clone(),
        calls: params.calls,
        leases: params.budget.leases.clone(),
        evictable: params.evictable,
    });
    let mut instances: Vec<Box<dyn BackendInstance>> = Vec::new();
    // Enrolled with the lender once all are built: a load never takes back its own sandboxes.
    let mut enrolled = Vec::new();
    for desc in params.instances {
        let info = bindings::OwnedInstanceInfo {
            name: desc.name.clone(),
            kind: match desc.kind {
                super::InstanceKind::Cpu => bindings::InstanceKind::Cpu,
                super::InstanceKind::Gpu => bindings::InstanceKind::Gpu,
                super::InstanceKind::Model => bindings::InstanceKind::Model,
            },
            device_id: desc.device_id,
        };
        let built = match factory.leases.take() {
            Some(lease) => factory.build(&info).map(|sandbox| (sandbox, lease)).map_err(LoadError::from),
            None => {
                Err(LoadError::OverSandboxLimit(over_limit(params.instances.len(), instances.len(), &factory.leases)))
            }
        };
        match built {
            Ok((sandbox, lease)) => {
                let tenancy = Arc::new(Tenancy {
                    resident: Mutex::new(Resident {
                        built_with: sandbox.memory_in_use(),
                        sandbox: Some(sandbox),
                        lease: Some(lease),
                        rebuild_pending: false,
                        grown_idle_since: None,
                        trim_scheduled: false,
                    }),
                    used: AtomicBool::new(false),
                });
                enrolled.push(Arc::downgrade(&tenancy) as Weak<dyn Holder>);
                let trim = params.trim_above.map(|limit| {
                    Arc::new(trim::IdleTrim {
                        tenancy: tenancy.clone(),
                        factory: factory.clone(),
                        info: info.clone(),
                        limit,
                        metrics: params.metrics.clone(),
                    })
                });
                instances.push(Box::new(WasmInstance {
                    tenancy,
                    trim,
                    factory: factory.clone(),
                    info,
                    version: params.version,
                    health: params.health.clone(),
                    hooks: params.hooks.clone(),
                    metrics: params.metrics.clone(),
                    penalized: false,
                }))
            }
            Err(e) => {
                for i in instances {
                    i.finalize();
                }
                teardown.release();
                return Err(e);
            }
        }
    }
    if factory.evictable {
        for tenancy in enrolled {
            factory.leases.enroll(tenancy);
        }
    }
    Ok(LoadedWasmModel { instances, teardown })
}

/// Why a model's `needed` instances cannot all have a sandbox, `got` of them having one.
fn over_limit(needed: usize, got: usize, leases: &Leases) -> String {
    format!(
        "the model needs {needed} {} (one per instance) and {got} of the server's {} are left (--sandbox-total-instances): \
         the others are in use by running instances or kept by sequence-batched models",
        if needed == 1 { "sandbox" } else { "sandboxes" },
        leases.total()
    )
}

/// What an instance holds while it has a sandbox.
struct Resident {
    /// `None` after a fault until rebuilt, or once given back.
    sandbox: Option<Sandbox>,
    /// Its share of the server's sandboxes; `None` once given back (the next execution takes one
    /// again and builds a new sandbox).
    lease: Option<Lease>,
    /// The linear memory the sandbox held once built (and initialised), in bytes.
    built_with: usize,
    /// The store was dropped during an execution on another thread than the instance's worker
    /// (inline, or a calling plugin's), or an idle rebuild failed; the worker rebuilds it
    /// (building runs the guest's initialisation, which may block, so never on an I/O thread).
    rebuild_pending: bool,
    /// Since when the instance has been idle with its memory grown past `--sandbox-trim-above-mb`
    /// (set by its idle worker, cleared by an execution): see [`trim`].
    grown_idle_since: Option<Instant>,
    /// The trimmer will look at the instance.
    trim_scheduled: bool,
}

/// An instance's sandbox, where the lender can ask for it back (see [`leases`]): behind a lock an
/// execution holds, so that a running instance is never asked.
struct Tenancy {
    resident: Mutex<Resident>,
    /// It ran since the lender last passed (the CLOCK's reference bit).
    used: AtomicBool,
}

impl Holder for Tenancy {
    /// The store is dropped without finalisation: nothing outside the sandbox could see it, and
    /// a plugin's finalisation must not keep the instance that needs the sandbox waiting.
    fn give_back(&self) -> Yielded {
        if self.used.swap(false, Ordering::AcqRel) {
            return Yielded::Kept;
        }
        let Some(mut resident) = self.resident.try_lock() else { return Yielded::Kept };
        let Some(lease) = resident.lease.take() else { return Yielded::Nothing };
        resident.sandbox = None;
        Yielded::Lease(lease)
    }
}

/// One model instance: its sandbox, rebuilt after any fault, and given back at rest when the
/// server's sandboxes run short.
struct WasmInstance {
    tenancy: Arc<Tenancy>,
    /// How it gives back grown memory once idle; `None`: never (`--sandbox-trim-above-mb` does
    /// not apply to sequence-batched models).
    trim: Option<Arc<trim::IdleTrim>>,
    factory: Arc<InstanceFactory>,
    info: bindings::OwnedInstanceInfo,
    version: i64,
    health: Arc<Health>,
    hooks: Option<Arc<TestHooks>>,
    /// The version's metrics: faults and rebuilds.
    metrics: Option<crate::metrics::ModelMetrics>,
    /// It faulted on a worker: its executions on workers run at the lowest CPU priority.
    penalized: bool,
}

/// One request's fields as lent to the guest for an execution.
struct Lent {
    id: String,
    correlation_id: CorrelationId,
    flags: bindings::SequenceFlags,
    parameters: Vec<(String, crate::request::ParamValue)>,
    inputs: Vec<crate::request::Tensor>,
    /// A merged batch's inputs, each gathered from its requests (see [`merge`]); empty otherwise.
    gathered: Vec<crate::backend::batch::Gathered>,
    requested_outputs: Vec<String>,
}

/// Runs `f` on the WIT records of `lent`. They borrow from it, so each tensor is lowered into the
/// guest's memory straight from the request's buffer: the one host → guest copy of its bytes
/// ([`lower::Data`]).
fn with_requests<R>(lent: &[Lent], f: impl FnOnce(&[lower::Request<'_>]) -> R) -> R {
    type Fields<'a> = (Vec<bindings::ParameterParam<'a>>, Vec<lower::Tensor<'a>>, Vec<&'a str>);
    let fields: Vec<Fields<'_>> = lent
        .iter()
        .map(|r| {
            (
                r.parameters.iter().map(|(k, v)| bindings::ParameterParam { key: k, value: v.into() }).collect(),
                r.inputs
                    .iter()
                    .map(|t| lower::Tensor {
                        name: &t.name,
                        datatype: t.datatype.into(),
                        shape: &t.shape,
                        data: lower::Data::One(&t.data),
                    })
                    .chain(r.gathered.iter().map(|t| lower::Tensor {
                        name: &t.name,
                        datatype: t.datatype.into(),
                        shape: &t.shape,
                        data: lower::Data::Parts(&t.parts),
                    }))
                    .collect(),
                r.requested_outputs.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    let requests: Vec<lower::Request<'_>> = lent
        .iter()
        .zip(&fields)
        .map(|(r, (parameters, inputs, requested_outputs))| lower::Request {
            id: &r.id,
            correlation_id: match &r.correlation_id {
                CorrelationId::None => bindings::CorrelationIdParam::None,
                CorrelationId::Numeric(n) => bindings::CorrelationIdParam::Numeric(*n),
                CorrelationId::Text(s) => bindings::CorrelationIdParam::Text(s),
            },
            flags: r.flags,
            parameters,
            inputs,
            requested_outputs,
        })
        .collect();
    f(&requests)
}

impl WasmInstance {
    /// What the guest is lent of each request while the jobs move into the sandbox's store for the
    /// execution: its tensors and parameters moved out of it, not copied (a copy cost an
    /// allocation per name, shape and list on every request), and the few fields the host calls of
    /// the execution read in the request itself (its id and requested outputs) copied.
    /// [`Self::give_back`] moves them back after the call.
    fn lend(jobs: &mut [Job]) -> Vec<Lent> {
        jobs.iter_mut()
            .map(|job| {
                let r = &mut job.request;
                let mut flags = bindings::SequenceFlags::empty();
                if r.sequence_start {
                    flags |= bindings::SequenceFlags::START;
                }
                if r.sequence_end {
                    flags |= bindings::SequenceFlags::END;
                }
                Lent {
                    id: r.id.clone(),
                    correlation_id: r.correlation_id.clone(),
                    flags,
                    parameters: std::mem::take(&mut r.parameters),
                    inputs: std::mem::take(&mut r.inputs),
                    gathered: Vec::new(),
                    requested_outputs: r.requested_outputs.clone(),
                }
            })
            .collect()
    }

    /// What the guest is lent of a batch merged into one request ([`merge`]): the requests keep
    /// their tensors, which the merged inputs share.
    fn lend_merged(merged: merge::Merged) -> Vec<Lent> {
        vec![Lent {
            id: String::new(),
            correlation_id: CorrelationId::None,
            flags: bindings::SequenceFlags::empty(),
            parameters: merged.parameters,
            inputs: Vec::new(),
            gathered: merged.inputs,
            requested_outputs: merged.requested_outputs,
        }]
    }

    /// Puts back what [`Self::lend`] moved out of the requests: a request the guest left open
    /// (a blocking call on an I/O thread) runs again on the instance's worker, whole.
    fn give_back(jobs: &mut [Job], lent: Vec<Lent>, merged: bool) {
        if merged {
            return;
        }
        for (job, lent) in jobs.iter_mut().zip(lent) {
            job.request.parameters = lent.parameters;
            job.request.inputs = lent.inputs;
        }
    }

    /// A sandbox again for an instance that gave its back: a lease (a free one, or one taken back
    /// from another instance at rest) and a new sandbox, initialised as at load. Failing, the
    /// requests fail (503) and the next one tries again: the instance is not broken, the server
    /// is busy.
    fn move_in(&self, resident: &mut Resident) -> Result<(), InferError> {
        let model = &self.factory.model_info.name;
        let Some(lease) = self.factory.leases.take() else {
            return Err(InferError::unavailable(format!(
                "model '{model}' has no sandbox: all {} of the server's are in use by running instances or kept by \
                 sequence-batched models (--sandbox-total-instances)",
                self.factory.leases.total()
            )));
        };
        let sandbox = self.factory.build(&self.info).map_err(|e| {
            InferError::unavailable(format!("model '{model}' instance '{}' could not be built: {e}", self.info.name))
        })?;
        tracing::debug!("model '{model}' instance '{}': built again on demand", self.info.name);
        if let Some(m) = &self.metrics {
            m.rebuilt_on_demand();
        }
        resident.built_with = sandbox.memory_in_use();
        resident.sandbox = Some(sandbox);
        resident.lease = Some(lease);
        resident.rebuild_pending = false;
        if self.factory.evictable {
            self.factory.leases.enroll(Arc::downgrade(&self.tenancy) as Weak<dyn Holder>);
        }
        Ok(())
    }

    /// Builds the instance's sandbox again after a fault. Refused by the server's memory budget,
    /// which other sandboxes hold for now, the instance gives its lease back and builds on its next
    /// request (as an instance at rest does; that request gets 503 while the memory is still held),
    /// and the model stays READY; any other failure would repeat, and makes it UNAVAILABLE.
    fn rebuild(&self, resident: &mut Resident) {
        let hooks = self.hooks.as_deref();
        // The test hook holds what is left of the server's budget, as other sandboxes could.
        let _held = hooks.filter(|h| h.budget_held_at_rebuilds()).map(|_| self.factory.memory.hold_rest_of_budget());
        let built = if hooks.is_some_and(TestHooks::rebuilds_refused) {
            Err(BuildError::Failed(PluginError::Returned(TestHooks::REBUILD_REFUSED.to_string())))
        } else {
            self.factory.build(&self.info)
        };
        match built {
            Ok(sandbox) => {
                resident.built_with = sandbox.memory_in_use();
                resident.sandbox = Some(sandbox);
                if let Some(m) = &self.metrics {
                    m.rebuilt();
                }
            }
            Err(BuildError::BudgetInUse(e)) => {
                tracing::warn!(
                    "model '{}': instance '{}' could not be rebuilt after a fault now: {e}; it builds again on its \
                     next request",
                    self.factory.model_info.name,
                    self.info.name
                );
                resident.lease = None;
            }
            Err(BuildError::Failed(e)) => {
                let reason = format!("instance '{}' could not be rebuilt after a fault: {e}", self.info.name);
                tracing::error!("model '{}': {reason}", self.factory.model_info.name);
                self.health.set_unavailable(reason);
            }
        }
    }
}

impl BackendInstance for WasmInstance {
    fn execute(&mut self, jobs: &mut Vec<Job>, thread: ExecutionThread) -> ExecutionTimes {
        let started = Instant::now();
        let inline = thread == ExecutionThread::Inline;
        // Only the instance's own worker pays for the instance's faults (a caller's thread is the
        // calling model's, an I/O thread everyone's).
        let own_thread = thread == ExecutionThread::Worker;
        if self.penalized && own_thread {
            // Worker threads are shared and a faulted one ends after its task: the penalty
            // follows the instance onto whichever thread runs it next.
            deprioritize_this_thread();
        }
        let mut resident = if inline {
            // The lender may be looking at this instance: the I/O thread never waits for it.
            match self.tenancy.resident.try_lock() {
                Some(resident) => resident,
                None => return ExecutionTimes::default(),
            }
        } else {
            self.tenancy.resident.lock()
        };
        self.tenancy.used.store(true, Ordering::Release);
        resident.grown_idle_since = None;
        if resident.sandbox.is_none() {
            if inline && (resident.rebuild_pending || resident.lease.is_none()) {
                // Left open, the requests go to the instance's worker, which builds first (building
                // runs the guest's initialisation, which may block).
                return ExecutionTimes::default();
            }
            if resident.lease.is_none() {
                if let Err(error) = self.move_in(&mut resident) {
                    for job in jobs.iter_mut() {
                        job.fail(error.clone());
                    }
                    return ExecutionTimes { output: started.elapsed(), ..Default::default() };
                }
            } else if resident.rebuild_pending {
                resident.rebuild_pending = false;
                self.rebuild(&mut resident);
            }
        }
        let Some(sandbox) = resident.sandbox.as_mut() else {
            let reason = self.health.reason().unwrap_or_else(|| "instance unavailable".into());
            for job in jobs.iter_mut() {
                job.fail(InferError::unavailable(format!(
                    "model '{}' is unavailable: {reason}",
                    self.factory.model_info.name
                )));
            }
            return ExecutionTimes { output: started.elapsed(), ..Default::default() };
        };
        let batching = self.factory.io.max_batch_size > 0;
        let batch_sizes = jobs.iter().map(|j| j.request.batch_size(batching)).collect();
        let merged = if self.factory.merge { merge::merge(jobs) } else { None };
        let is_merged = merged.is_some();
        let lent = match merged {
            Some(merged) => Self::lend_merged(merged),
            None => Self::lend(jobs),
        };
        // Only decoupled models can send more than one response per request, so only they count.
        let responses = if self.factory.decoupled { vec![0; jobs.len()] } else { Vec::new() };
        let batch = ActiveBatch {
            jobs: std::mem::take(jobs),
            batch_sizes,
            merged: is_merged,
            io: self.factory.io.clone(),
            model_version: self.version,
            max_output_bytes: self.factory.policy.max_output_bytes,
            decoupled: self.factory.decoupled,
            max_responses: self.factory.policy.max_responses,
            responses,
        };
        let called = Instant::now();
        let (mut batch, outcome) = with_requests(&lent, |requests| sandbox.execute(requests, batch, !inline));
        let returned = Instant::now();
        Self::give_back(&mut batch.jobs, lent, is_merged);
        let model = &self.factory.model_info.name;
        let (error, fault) = match outcome {
            // Inline, the guest made a blocking WASI call: the requests it has not completed stay
            // open for the scheduler to run again on the instance's own worker, where the store is
            // rebuilt (the guest's state is per instance and starts over).
            Executed::WouldBlock => {
                tracing::info!(
                    "model '{model}': {}; running the batch again on the instance's worker",
                    io_guard::WouldBlock
                );
                (None, true)
            }
            Executed::HostPanicked(message) => {
                if let Some(m) = &self.metrics {
                    m.fault(crate::metrics::FaultKind::Other);
                }
                let error = format!("model '{model}': the host failed while executing: {message}");
                (Some(InferError::internal(error)), true)
            }
            // The usual outcome: nothing to say (and no message to format per request).
            Executed::Returned(Ok(())) if batch.jobs.iter().all(|j| j.sender.is_complete()) => (None, false),
            Executed::Returned(Ok(())) if self.factory.decoupled => (
                Some(InferError::internal(format!(
                    "model '{model}' returned without sending the request's final response"
                ))),
                false,
            ),
            Executed::Returned(Ok(())) => {
                (Some(InferError::internal(format!("model '{model}' returned no response for the request"))), false)
            }
            Executed::Returned(Err(message)) => {
                let limit = host_api::MAX_ERROR_MESSAGE
                    .min(usize::try_from(self.factory.policy.max_output_bytes).unwrap_or(usize::MAX));
                let message = host_api::bounded(message, limit);
                (Some(InferError::internal(format!("model '{model}' failed to execute: {message}"))), false)
            }
            Executed::Faulted(fault) => {
                if let Some(m) = &self.metrics {
                    m.fault(fault.kind);
                }
                (Some(InferError::internal(fault.message)), true)
            }
        };
        if let Some(error) = &error {
            for job in &mut batch.jobs {
                job.fail(error.clone());
            }
        }
        *jobs = batch.jobs;
        if fault {
            if let Some(error) = &error {
                tracing::warn!("{error}; rebuilding the instance");
                // Only an instance's own worker is lowered: an I/O thread must keep its priority,
                // as must a calling plugin's thread (the instance's next execution on its worker
                // is lowered); and the model runs on neither after a fault.
                if own_thread && !self.penalized && deprioritize_this_thread() {
                    tracing::info!(
                        "model '{}': this instance now runs at the lowest CPU priority after a fault",
                        self.factory.model_info.name
                    );
                }
                self.penalized |= !inline;
            }
            // A faulted store is never reused: drop it (no finalisation can run in it) and build anew
            // on the instance's own worker (building runs the guest's initialisation, which may
            // block, and which a calling plugin's deadline does not bound); elsewhere, at its next
            // execution there.
            resident.sandbox = None;
            if own_thread {
                self.rebuild(&mut resident);
            } else {
                resident.rebuild_pending = true;
            }
        }
        // Off its worker (inline, or a calling plugin's thread) no idle worker follows the
        // execution: the trimmer is told here, or memory grown by a last request run inline stayed.
        if !own_thread && let Some(trim) = &self.trim {
            trim.start_delay(&mut resident, &self.factory.trimmer);
        }
        ExecutionTimes { input: called - started, infer: returned - called, output: returned.elapsed() }
    }

    fn finalize(self: Box<Self>) {
        let mut resident = self.tenancy.resident.lock();
        if let Some(sandbox) = resident.sandbox.take() {
            sandbox.finalize();
        }
        resident.lease = None;
    }

    /// Gives back what the sandbox grew for a load that has passed (see [`trim`]).
    fn idle(&mut self) {
        if let Some(trim) = &self.trim {
            trim.idle(&self.factory.trimmer);
        }
    }
}

/// Lowers the CPU priority of the calling worker thread for good, once its plugin has hit a limit
/// (deadline, memory, trap): a plugin that keeps misbehaving then only gets the CPU time healthy
/// models leave over, instead of half a machine. An unprivileged process cannot raise a priority
/// again, so the thread is marked to end after its task rather than carry the penalty into other
/// models' work; the instance re-applies it on the next thread (see `WasmInstance::penalized`).
/// Returns whether it lowered it now.
fn deprioritize_this_thread() -> bool {
    crate::scheduler::taint_this_thread();
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    {
        const PENALTY_NICE: i32 = 19;
        // SAFETY: plain system calls on the calling thread; failures only leave the priority as is.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::getpriority(libc::PRIO_PROCESS, tid) < PENALTY_NICE
                && libc::setpriority(libc::PRIO_PROCESS, tid, PENALTY_NICE) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    false
}
