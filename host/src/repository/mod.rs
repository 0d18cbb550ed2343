//! The model repository: finding models and their versions on disk and loading them. A model whose
//! configuration or backend is unusable becomes UNAVAILABLE with the reason; the others load.
//! Which models load when, and how a loaded one is replaced, is `crate::control`'s business.
pub mod fingerprint;
pub mod location;
pub mod overrides;
pub mod remote;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::backend::registry::Backends;
use crate::backend::{BackendFactory, ModelFolder, VersionLoad, backend_name, instances_of};
use crate::config::schema::model_version_policy::PolicyChoice;
use crate::config::{
    ConfigError, FirstVersion, ModelConfig, SourceLines, fill_backend_fields, normalize, normalize_instance_groups,
    parse_pbtxt_with_lines, validate_instance_groups, validate_io, validate_model_config,
};
use crate::ensemble::{Ensemble, EnsembleScheduler};
use crate::error::InferError;
use crate::labels::OutputLabels;
use crate::load_error::LoadError;
use crate::model::health::Health;
use crate::model::{ModelResolver, ModelVersion, SchedulerSetup};
use crate::response_cache::ResponseCache;
use crate::scheduler::SequenceRules;
use crate::scheduler::inline::IoThreads;
use crate::stats::ModelStats;
use crate::test_hooks::TestHooks;
use crate::validate::IoSpec;

/// The state of one version, as the repository index reports it.
pub enum VersionState {
    Ready(Arc<ModelVersion>),
    Unavailable(LoadError),
}

impl VersionState {
    /// The version when it is loaded and healthy.
    pub fn ready(&self) -> Option<&Arc<ModelVersion>> {
        match self {
            VersionState::Ready(m) if m.health.is_ready() => Some(m),
            _ => None,
        }
    }
}

/// One model of the repository.
pub struct ModelEntry {
    pub name: String,
    pub dir: PathBuf,
    /// `None` when the configuration itself could not be loaded.
    pub config: Option<Arc<ModelConfig>>,
    pub versions: BTreeMap<i64, VersionState>,
    /// Why the model as a whole is unavailable (bad config, no versions, …).
    pub reason: Option<LoadError>,
    /// The temporary folder of a load request's override files, when the model was loaded from
    /// them; removed when the entry goes.
    pub override_files: Option<Arc<overrides::OverrideDir>>,
}

impl ModelEntry {
    pub fn unavailable(name: &str, dir: &Path, reason: LoadError) -> Self {
        ModelEntry {
            name: name.into(),
            dir: dir.into(),
            config: None,
            versions: BTreeMap::new(),
            reason: Some(reason),
            override_files: None,
        }
    }

    /// Whether some version is loaded and healthy.
    pub fn has_ready(&self) -> bool {
        self.versions.values().any(|v| v.ready().is_some())
    }

    /// Whether the model was unloaded on request (every version "unloaded"): it no longer counts
    /// against the server's readiness, as in tritonserver.
    pub fn is_unloaded(&self) -> bool {
        let unloaded = |v: &VersionState| matches!(v, VersionState::Unavailable(LoadError::Unloaded));
        match &self.reason {
            Some(reason) => matches!(reason, LoadError::Unloaded),
            None => !self.versions.is_empty() && self.versions.values().all(unloaded),
        }
    }

    /// Why loading failed, as tritonserver's load API words it: the model's reason, or each
    /// version that is not ready (`version 1 is at UNAVAILABLE state: …;`). `None` when every
    /// version loaded.
    pub fn failure(&self) -> Option<String> {
        if let Some(reason) = &self.reason {
            return Some(reason.to_string());
        }
        let failed: String = self
            .versions
            .iter()
            .filter_map(|(v, state)| match state {
                VersionState::Ready(m) if m.health.is_ready() => None,
                VersionState::Ready(m) => {
                    Some(format!("version {v} is at UNAVAILABLE state: {};", m.health.reason().unwrap_or_default()))
                }
                VersionState::Unavailable(r) => Some(format!("version {v} is at UNAVAILABLE state: {r};")),
            })
            .collect();
        (!failed.is_empty()).then_some(failed)
    }

    /// Whether every version the policy selected is ready (and at least one exists); versions
    /// unloaded since (a reload that no longer selects them) do not count against it, as in
    /// tritonserver.
    /// Whether the model is left out because its name appears in more than one repository: never
    /// loaded, so (as in tritonserver) it does not count against readiness.
    pub fn is_duplicate(&self) -> bool {
        matches!(self.reason, Some(LoadError::Duplicate { .. }))
    }

    pub fn is_ready(&self) -> bool {
        let ready = |v: &VersionState| matches!(v, VersionState::Ready(m) if m.health.is_ready());
        self.reason.is_none()
            && self.versions.values().any(ready)
            && self.versions.values().all(|v| ready(v) || matches!(v, VersionState::Unavailable(LoadError::Unloaded)))
    }

    /// This model with every version unloaded (an unload, or its folder gone from the repository):
    /// known, but with no available version.
    pub fn unloaded(&self) -> ModelEntry {
        ModelEntry {
            versions: self.versions.keys().map(|v| (*v, VersionState::Unavailable(LoadError::Unloaded))).collect(),
            reason: self.versions.is_empty().then_some(LoadError::Unloaded),
            config: self.config.clone(),
            ..ModelEntry::unavailable(&self.name, &self.dir, LoadError::Unloaded)
        }
    }
}

/// Every model of the repository by name, shared by the server and the ensembles that call into
/// their composing models.
#[derive(Default)]
pub struct ModelTable(RwLock<BTreeMap<String, Arc<ModelEntry>>>);

impl ModelTable {
    pub fn read(&self) -> parking_lot::RwLockReadGuard<'_, BTreeMap<String, Arc<ModelEntry>>> {
        self.0.read()
    }

    pub fn write(&self) -> parking_lot::RwLockWriteGuard<'_, BTreeMap<String, Arc<ModelEntry>>> {
        self.0.write()
    }

    pub fn entry(&self, name: &str) -> Result<Arc<ModelEntry>, InferError> {
        self.0
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| InferError::not_found(format!("Request for unknown model: '{name}' is not found")))
    }
}

impl ModelResolver for ModelTable {
    fn version(&self, name: &str, version: Option<i64>) -> Result<Arc<ModelVersion>, InferError> {
        let entry = self.entry(name)?;
        match version {
            Some(v) => match entry.versions.get(&v) {
                Some(VersionState::Ready(m)) if m.health.is_ready() => Ok(m.clone()),
                Some(_) => Err(InferError::unavailable(format!(
                    "Request for unknown model: '{name}' version {v} is not at ready state"
                ))),
                None => {
                    Err(InferError::not_found(format!("Request for unknown model: '{name}' version {v} is not found")))
                }
            },
            None => entry
                .versions
                .values()
                .rev()
                .find_map(|v| match v {
                    VersionState::Ready(m) if m.health.is_ready() => Some(m.clone()),
                    _ => None,
                })
                .ok_or_else(|| {
                    let why = entry.reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default();
                    InferError::unavailable(format!(
                        "Request for unknown model: '{name}' has no available versions{why}"
                    ))
                }),
        }
    }
}

/// What loading needs besides the model's own folder.
pub struct LoadContext {
    pub backends: Arc<Backends>,
    pub gpu_count: usize,
    /// `--model-config-name`: the configuration file to prefer in each model's `configs/` folder.
    pub config_name: Option<String>,
    /// How long an idle instance worker polls for work before it rests.
    pub instance_poll: std::time::Duration,
    /// Executions shorter than this may run inline (`--inline-execution-us`; zero: never).
    pub inline_under: std::time::Duration,
    /// The server's I/O threads' budget for inline executions, shared by every model.
    pub io_threads: Arc<IoThreads>,
    /// The models loaded so far (an ensemble's composing models load before it).
    pub models: Arc<ModelTable>,
    /// Give every version test hooks (`--test-hooks`).
    pub test_hooks: bool,
    /// The server's Prometheus metrics (none with `--allow-metrics=false`).
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The server's response cache (`--cache-config`), for the models that enable it.
    pub response_cache: Option<Arc<ResponseCache>>,
}

impl LoadContext {
    /// A version's test hooks: `Some` only with `--test-hooks`.
    fn hooks(&self) -> Option<Arc<TestHooks>> {
        self.test_hooks.then(|| Arc::new(TestHooks::default()))
    }

    /// A version's metric handles: `Some` unless metrics are off. `cache`: whether the version
    /// answers from the response cache (its cache metrics are shown then only, as tritonserver's).
    fn metrics(&self, name: &str, version: i64, cache: bool) -> Option<crate::metrics::ModelMetrics> {
        self.metrics.as_ref().map(|m| m.model(name, version, cache))
    }

    /// The response cache for a model of `config`: the server's, when the model enables it.
    fn cache_for(&self, config: &ModelConfig) -> Option<Arc<ResponseCache>> {
        self.response_cache.clone().filter(|_| config.response_cache.as_ref().is_some_and(|c| c.enable))
    }
}

/// What [`scan`] finds: `(model name, folder)` pairs, and `(model name, reason)` for names that
/// cannot be served.
pub type ScanResult = (Vec<(String, PathBuf)>, Vec<(String, LoadError)>);

/// Lists `(model name, folder)` for every model folder in the repositories. A name that appears in
/// more than one repository is reported as an error for that name.
pub fn scan(roots: &[PathBuf]) -> ScanResult {
    let mut found: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(root) else {
            tracing::error!("model repository {} cannot be read", root.display());
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
                continue;
            };
            if path.is_dir() && !name.starts_with('.') {
                found.entry(name).or_default().push(path);
            }
        }
    }
    let mut models = Vec::new();
    let mut errors = Vec::new();
    for (name, dirs) in found {
        if dirs.len() > 1 {
            errors.push((name, LoadError::Duplicate { dirs }));
        } else {
            models.push((name, dirs.into_iter().next().expect("one dir")));
        }
    }
    (models, errors)
}

/// The model folder names found in more than one repository (none of them can load).
pub fn duplicate_names(roots: &[PathBuf]) -> std::collections::BTreeSet<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut twice = std::collections::BTreeSet::new();
    for root in roots {
        for name in folder_names(std::slice::from_ref(root)) {
            if !seen.insert(name.clone()) {
                twice.insert(name);
            }
        }
    }
    twice
}

/// The names of every model folder in the repositories (the repository index lists them all,
/// loaded or not).
pub fn folder_names(roots: &[PathBuf]) -> std::collections::BTreeSet<String> {
    roots
        .iter()
        .filter_map(|root| std::fs::read_dir(root).ok())
        .flat_map(|entries| entries.flatten())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|name| !name.starts_with('.'))
        .collect()
}

/// Folders of a model folder that are never versions (tritonserver's warm-up data, initial
/// states, and `--model-config-name` configurations).
const NOT_VERSIONS: [&str; 3] = ["warmup", "initial_state", "configs"];

/// The version folders of a model folder, ascending, and the folders ignored with why, as
/// tritonserver words it. A version is a number without leading zeros ("0" itself is version 0).
fn scan_versions(dir: &Path) -> (Vec<i64>, Vec<String>) {
    let mut versions = Vec::new();
    let mut ignored = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        if !entry.path().is_dir() || name.starts_with('.') || NOT_VERSIONS.contains(&name.as_str()) {
            continue;
        }
        if name.len() > 1 && name.starts_with('0') {
            ignored
                .push(format!("ignore version directory '{name}' which contains leading zeros in its directory name"));
        } else if let Some(v) = name.bytes().all(|b| b.is_ascii_digit()).then(|| name.parse::<i64>().ok()).flatten() {
            versions.push(v);
        } else {
            ignored.push(format!("ignore version directory '{name}' which fails to convert to integral number"));
        }
    }
    versions.sort_unstable();
    (versions, ignored)
}

/// The versions of `name` the version policy loads, from its folders, logging (as tritonserver
/// does at each load) the folders that are not versions and, for a `specific` policy, the versions
/// it names that have no folder: those are left out and the others load.
fn select_versions(name: &str, config: &ModelConfig, dir: &Path) -> Result<Vec<i64>, LoadError> {
    let (available, ignored) = scan_versions(dir);
    for why in ignored {
        tracing::warn!("{why}");
    }
    let policy = config.version_policy.as_ref().and_then(|p| p.policy_choice.as_ref());
    let selected: Vec<i64> = match policy {
        Some(PolicyChoice::All(_)) => available.clone(),
        Some(PolicyChoice::Specific(s)) => {
            let mut chosen = Vec::new();
            for v in &s.versions {
                if available.contains(v) {
                    chosen.push(*v);
                } else {
                    tracing::error!(
                        "version {v} is specified for model '{name}', but the version directory is not present"
                    );
                }
            }
            chosen.sort_unstable();
            chosen.dedup();
            chosen
        }
        Some(PolicyChoice::Latest(l)) => available.iter().rev().take(l.num_versions.max(1) as usize).copied().collect(),
        None => available.iter().rev().take(1).copied().collect(),
    };
    if selected.is_empty() {
        return Err(LoadError::NoVersion);
    }
    Ok(selected)
}

/// The configuration file of the model in `dir`: with `--model-config-name NAME`,
/// `<dir>/configs/NAME.pbtxt` when there is one, else `<dir>/config.pbtxt` (tritonserver's search).
pub fn config_file(dir: &Path, config_name: Option<&str>) -> PathBuf {
    if let Some(name) = config_name {
        let custom = dir.join("configs").join(format!("{name}.pbtxt"));
        if custom.is_file() {
            return custom;
        }
    }
    dir.join("config.pbtxt")
}

/// Reads the model's configuration file ([`config_file`]) and checks it as tritonserver does when
/// it reads one (no backend, no auto-complete from the model's files).
pub fn read_config(name: &str, dir: &Path, config_name: Option<&str>) -> Result<ModelConfig, LoadError> {
    read_config_with(name, dir, None, None, config_name).map(|(config, _)| config)
}

/// What is in the first sub-folder (in name order) of the model folder `dir`: where tritonserver
/// looks for the model file that says which backend a configuration naming none needs.
fn first_version(dir: &Path) -> FirstVersion {
    let mut folders: Vec<PathBuf> =
        std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    folders.sort();
    let Some(first) = folders.first() else { return FirstVersion { exists: false, entries: Vec::new() } };
    let entries = std::fs::read_dir(first)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path().is_dir())))
        .collect();
    FirstVersion { exists: true, entries }
}

/// Reads `<dir>/config.pbtxt` (or takes `given`, a load request's override) and takes it through
/// tritonserver's stages at that point, in its order, so that the first problem reported is the
/// one tritonserver reports: the backend fields, the defaults, [`validate_model_config`], the
/// inputs and outputs when auto-complete is off (with it on they are checked once the backend has
/// completed them), and the name. With auto-complete a folder without `config.pbtxt` starts from
/// an empty configuration; unless its files or its name say which backend it needs, it is not a
/// model (the file cannot be read). `backends` is `None` when only the configuration is wanted.
/// Returns where each field is in the file, for later errors.
fn read_config_with(
    name: &str,
    dir: &Path,
    backends: Option<&Backends>,
    given: Option<ModelConfig>,
    config_name: Option<&str>,
) -> Result<(ModelConfig, SourceLines), LoadError> {
    let autofill = backends.is_none_or(Backends::autocomplete);
    let path = config_file(dir, config_name);
    let first = first_version(dir);
    let (mut config, lines) = match given {
        Some(config) => (config, Default::default()),
        None => match std::fs::read_to_string(&path) {
            Ok(text) => parse_pbtxt_with_lines(&text).map_err(LoadError::Parse)?,
            Err(source) if autofill && source.kind() == std::io::ErrorKind::NotFound => {
                let mut empty = ModelConfig::default();
                if fill_backend_fields(&mut empty, name, &first).is_err() {
                    return Err(LoadError::Unreadable { path, source });
                }
                (empty, Default::default())
            }
            Err(source) => return Err(LoadError::Unreadable { path, source }),
        },
    };
    let located = |source: ConfigError| LoadError::Config { line: source.line_in(&lines), source };
    fill_backend_fields(&mut config, name, &first).map_err(located)?;
    normalize(&mut config);
    validate_model_config(&config).map_err(located)?;
    if !autofill {
        validate_io(&config).map_err(located)?;
    }
    if config.name != name {
        return Err(located(ConfigError::at(
            "name",
            format!(
                "unexpected directory name '{name}' for model '{}', directory name must equal model name",
                config.name
            ),
        )));
    }
    Ok((config, lines))
}

/// What tritonserver does to a configuration when it creates the model, after its versions are
/// known: the instance groups, filled in and checked; the backend's auto-complete from the model
/// file of the highest version in `selected` (tritonserver's backends complete it from a version
/// they load, so a folder the policy leaves out, empty or stale, has no say); the whole
/// configuration checked again, inputs and outputs included.
fn complete_config(
    mut config: ModelConfig,
    lines: &SourceLines,
    dir: &Path,
    selected: &[i64],
    factory: &dyn BackendFactory,
    gpu_count: usize,
) -> Result<ModelConfig, LoadError> {
    let located = |source: ConfigError| LoadError::Config { line: source.line_in(lines), source };
    let auto_gpu = gpu_count > 0 && factory.uses_gpus();
    normalize_instance_groups(&mut config, gpu_count, auto_gpu);
    validate_instance_groups(&config, gpu_count).map_err(located)?;
    let folder = ModelFolder { dir, version: selected.iter().max().copied() };
    factory.autocomplete(&mut config, &folder)?;
    normalize(&mut config);
    validate_model_config(&config).map_err(located)?;
    validate_io(&config).map_err(located)?;
    Ok(config)
}

/// Whether the model in `dir` is an ensemble (judged from its configuration; unreadable ones are
/// not, and report their error when loaded).
pub fn is_ensemble(name: &str, dir: &Path, config_name: Option<&str>) -> bool {
    read_config(name, dir, config_name).is_ok_and(|c| c.platform == "ensemble")
}

/// The models an ensemble's steps name, read from its folder.
pub fn ensemble_steps(name: &str, dir: &Path, config_name: Option<&str>) -> Vec<String> {
    read_config(name, dir, config_name).map(|c| steps_of(&c)).unwrap_or_default()
}

/// The models a configuration's ensemble steps name (none for a model that is not an ensemble).
pub fn steps_of(config: &ModelConfig) -> Vec<String> {
    crate::config::ensemble_scheduling(config)
        .map(|e| e.step.iter().map(|s| s.model_name.clone()).collect())
        .unwrap_or_default()
}

/// Loads one model: its configuration, then each version the policy selects, with the backend
/// the configuration names.
/// `given` is a load request's configuration, used instead of the folder's `config.pbtxt`.
pub fn load_model(name: &str, dir: &Path, ctx: &LoadContext, given: Option<ModelConfig>) -> ModelEntry {
    let (config, lines) = match read_config_with(name, dir, Some(&ctx.backends), given, ctx.config_name.as_deref()) {
        Ok(read) => read,
        Err(reason) => return ModelEntry::unavailable(name, dir, reason),
    };
    if config.platform == "ensemble" {
        return load_ensemble(name, dir, Arc::new(config), ctx);
    }
    let prepared = backend_name(&config).and_then(|backend| {
        let factory = ctx.backends.factory(&backend);
        let selected = select_versions(name, &config, dir)?;
        let config = complete_config(config.clone(), &lines, dir, &selected, factory.as_ref(), ctx.gpu_count)?;
        let sequence = SequenceRules::from_config(&config, dir).map_err(LoadError::Sequence)?;
        let instances = instances_of(&config);
        let config = factory.prepare(config, &instances)?;
        let labels = OutputLabels::load(&config, dir)?;
        Ok((backend, factory, selected, sequence, instances, Arc::new(config), labels))
    });
    let (backend, factory, selected, sequence, instances, config, labels) = match prepared {
        Ok(p) => p,
        Err(reason) => {
            return ModelEntry { config: Some(Arc::new(config)), ..ModelEntry::unavailable(name, dir, reason) };
        }
    };
    if tracing::enabled!(tracing::Level::DEBUG) {
        tracing::debug!("model '{name}' configuration: {}", crate::config::to_json(&config));
    }
    let io = Arc::new(IoSpec { labels: Arc::new(labels), ..IoSpec::new(&config) });
    // Never decoupled models inline: their responses leave during the execution, so one run again
    // elsewhere would repeat them.
    let decoupled = config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
    let inline_under =
        if factory.may_run_inline(&config) && !decoupled { ctx.inline_under } else { std::time::Duration::ZERO };
    let cache = ctx.cache_for(&config);
    let mut versions = BTreeMap::new();
    for version in selected {
        tracing::info!("loading: {name}:{version}");
        let hooks = ctx.hooks();
        let metrics = ctx.metrics(name, version, cache.is_some());
        let setup = SchedulerSetup {
            instance_poll: ctx.instance_poll,
            inline_under,
            sequence: sequence.clone(),
            io_threads: ctx.io_threads.clone(),
            hooks: hooks.clone(),
            metrics: metrics.clone(),
        };
        let load = VersionLoad {
            backend: &backend,
            model_dir: dir,
            config: &config,
            version,
            io: &io,
            instances: &instances,
            health: &Arc::new(Health::default()),
            hooks: hooks.as_ref(),
            metrics: metrics.as_ref(),
        };
        let state = match load_version(factory.as_ref(), &load, setup) {
            Ok(m) => {
                let m = m.with_response_cache(cache.clone());
                for instance in &instances {
                    tracing::info!(
                        "initialized instance {} ({} device {}) of '{name}' version {version}",
                        instance.name,
                        instance.kind.name(),
                        instance.device_id
                    );
                }
                VersionState::Ready(Arc::new(m))
            }
            Err(reason) => {
                tracing::error!("failed to load '{name}' version {version}: {}: {reason}", reason.status_name());
                VersionState::Unavailable(reason)
            }
        };
        versions.insert(version, state);
    }
    ModelEntry {
        name: name.into(),
        dir: dir.into(),
        config: Some(config),
        versions,
        reason: None,
        override_files: None,
    }
}

/// An ensemble's output labels: its own label files, and for an output without one the labels of
/// the step output mapped to it (the composing models are loaded: the checks before found them).
fn ensemble_labels(config: &ModelConfig, dir: &Path, models: &dyn ModelResolver) -> Result<OutputLabels, LoadError> {
    let mut labels = OutputLabels::load(config, dir)?;
    for step in crate::config::ensemble_scheduling(config).iter().flat_map(|s| &s.step) {
        let version = (step.model_version > 0).then_some(step.model_version);
        let Ok(model) = models.version(&step.model_name, version) else { continue };
        let renamed = step
            .output_map
            .iter()
            .filter(|(_, ours)| config.output.iter().any(|o| &o.name == *ours))
            .map(|(theirs, ours)| (theirs.as_str(), ours.as_str()));
        labels.inherit(&model.io.labels, renamed);
    }
    Ok(labels)
}

/// Loads one version with its backend and starts its scheduler.
fn load_version(
    factory: &dyn BackendFactory,
    load: &VersionLoad<'_>,
    setup: SchedulerSetup,
) -> Result<ModelVersion, LoadError> {
    let loaded = factory.load(load)?;
    Ok(ModelVersion::new(
        load.config.clone(),
        load.version,
        load.io.clone(),
        load.health.clone(),
        loaded.instances,
        loaded.teardown,
        setup,
    ))
}

/// Loads an ensemble: its steps are checked against the composing models already loaded; every
/// version the policy selects serves the same pipeline.
fn load_ensemble(name: &str, dir: &Path, config: Arc<ModelConfig>, ctx: &LoadContext) -> ModelEntry {
    let prepared = select_versions(name, &config, dir).and_then(|selected| {
        // The other models' steps, from their folders beside this one.
        let own_steps = steps_of(&config);
        let steps_of = |model: &str| match (model == name, dir.parent()) {
            (true, _) => own_steps.clone(),
            (false, Some(repository)) => ensemble_steps(model, &repository.join(model), ctx.config_name.as_deref()),
            (false, None) => Vec::new(),
        };
        crate::ensemble::composition::check_cycles(name, &steps_of)?;
        crate::ensemble::composition::check(&config, ctx.models.as_ref())?;
        let ensemble = Ensemble::build(&config, ctx.models.as_ref())?;
        Ok((selected, ensemble, ensemble_labels(&config, dir, ctx.models.as_ref())?))
    });
    let (selected, ensemble, labels) = match prepared {
        Ok(p) => p,
        Err(reason) => return ModelEntry { config: Some(config), ..ModelEntry::unavailable(name, dir, reason) },
    };
    let ensemble = Arc::new(ensemble);
    // A decoupled step makes the ensemble decoupled: its configuration says so (and, as
    // tritonserver's, states its transaction policy either way), as clients see it.
    let config = {
        let mut c = (*config).clone();
        c.model_transaction_policy.get_or_insert_default().decoupled = ensemble.is_decoupled();
        Arc::new(c)
    };
    if let Err(source) = crate::config::check_response_cache(&config) {
        let reason = LoadError::Config { line: None, source };
        return ModelEntry { config: Some(config), ..ModelEntry::unavailable(name, dir, reason) };
    }
    let cache = ctx.cache_for(&config);
    let io = Arc::new(IoSpec { labels: Arc::new(labels), ..IoSpec::new(&config) });
    let models: Arc<dyn ModelResolver> = ctx.models.clone();
    let versions = selected
        .into_iter()
        .map(|version| {
            // As tritonserver's, an ensemble shows no cache metrics (its statistics count the
            // cache's hits and misses).
            let stats = Arc::new(ModelStats::new(ctx.metrics(name, version, false)));
            let scheduler =
                EnsembleScheduler { ensemble: ensemble.clone(), version, models: models.clone(), stats: stats.clone() };
            let model = ModelVersion::with_scheduler(
                config.clone(),
                version,
                io.clone(),
                stats,
                Box::new(scheduler),
                ctx.hooks(),
            )
            .with_response_cache(cache.clone());
            (version, VersionState::Ready(Arc::new(model)))
        })
        .collect();
    ModelEntry {
        name: name.into(),
        dir: dir.into(),
        config: Some(config),
        versions,
        reason: None,
        override_files: None,
    }
}
