//! Model control: which models load when, and how a loaded model is replaced or removed while
//! requests keep flowing — tritonserver's model control modes NONE, POLL and EXPLICIT, and its
//! repository extension's load and unload.
//!
//! A load builds the new model beside the serving one and then swaps it into the model table in
//! one step: requests that had found the old version finish on it, new ones go to the new. A load
//! that fails leaves what served serving, and is all or nothing across versions (as Triton: the
//! versions that did load are let go). A replaced or unloaded version is *retired*: once nothing
//! can reach it any more — the table no longer names it and the last request that had resolved it
//! is queued — its scheduler drains what is queued and finalises its instances. Retiring runs on a
//! thread of its own; an unload request waits for it up to the unload timeout.
//!
//! One load, unload or poll runs at a time (`ops`); inference never waits for them, it reads the
//! table for a moment. At start-up the models load on `--model-load-thread-count` threads.
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::{ModelConfig, is_plain_name};
use crate::error::InferError;
use crate::load_error::LoadError;
use crate::model::ModelVersion;
use crate::proto::inference::repository_index_response::ModelIndex;
use crate::repository::fingerprint::Fingerprint;
use crate::repository::overrides::{LoadOverrides, OverrideDir};
use crate::repository::remote::{RemoteRepository, RemoteSet};
use crate::repository::{self, LoadContext, ModelEntry, VersionState};

/// tritonserver's `--model-control-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlMode {
    /// Load every model at start-up; the repository API's load and unload are refused.
    None,
    /// As `None`, and look at the repositories every `interval` for added, changed and removed
    /// models.
    Poll { interval: Duration },
    /// Load the `--load-model` models at start-up; then load and unload on request.
    Explicit,
}

/// What a model is doing now, as the repository index shows it beside its versions' states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Busy {
    Loading,
    Unloading,
}

/// Why a load failed: before the model's own load (its configuration, its folder) or during it.
enum Failed {
    /// Triton's "poll" stage: the configuration or folder could not be read.
    Config(String),
    /// A version failed to load.
    Load(String),
}

/// The repository's models and the operations that change which are loaded.
pub struct ModelControl {
    mode: ControlMode,
    /// The folders scanned: local repositories, and remote repositories' copies.
    repositories: Vec<PathBuf>,
    /// The remote repositories, synced into their copies before each scan.
    remote: RemoteSet,
    backend_dir: Option<PathBuf>,
    ctx: LoadContext,
    /// Held through every load, unload and poll: one at a time.
    ops: Mutex<()>,
    /// Shared with the threads that retire versions, which clear an UNLOADING mark when done.
    busy: Arc<Mutex<BTreeMap<String, Busy>>>,
    /// The folder fingerprint each model's last load attempt read; none after a file override (the
    /// next plain load reloads, undoing it) or an unload. A configuration override records the
    /// folder as it was then, so a plain load keeps the override until the folder changes:
    /// tritonserver dates the override at its load and reloads only files modified after it.
    attempted: Mutex<HashMap<String, Fingerprint>>,
    /// How long an unload request waits for the model's in-flight requests.
    unload_timeout: Duration,
    /// Ensembles unloaded because a model they use was unloaded (not on request themselves), by
    /// folder: as tritonserver, they load again when that model does.
    orphans: Mutex<BTreeMap<String, PathBuf>>,
    /// Models loaded on their own account (a load request, or start-up), as against the steps an
    /// ensemble's load brought along: unloading that ensemble with `unload_dependents` unloads
    /// those steps too when nothing else uses them, as tritonserver's cascading removal does.
    explicit: Mutex<HashSet<String>>,
}

/// The message tritonserver answers load and unload requests with outside EXPLICIT mode.
const NOT_EXPLICIT: &str = "explicit model load / unload is not allowed if polling is enabled";

impl ModelControl {
    pub fn new(
        mode: ControlMode,
        repositories: Vec<PathBuf>,
        remotes: Vec<Arc<RemoteRepository>>,
        backend_dir: Option<PathBuf>,
        ctx: LoadContext,
        unload_timeout: Duration,
    ) -> Self {
        ModelControl {
            mode,
            repositories,
            remote: RemoteSet::new(remotes),
            backend_dir,
            ctx,
            ops: Mutex::new(()),
            busy: Arc::default(),
            attempted: Mutex::new(HashMap::new()),
            unload_timeout,
            orphans: Mutex::default(),
            explicit: Mutex::default(),
        }
    }

    pub fn mode(&self) -> ControlMode {
        self.mode
    }

    /// Whether every remote repository has been copied at least once (readiness waits for it).
    pub fn remotes_synced(&self) -> bool {
        self.remote.all_synced_once()
    }

    /// Loads what the mode loads at start-up: every model, or in EXPLICIT mode the
    /// `--load-model` ones (`*` alone: every model). Models that fail are UNAVAILABLE with the
    /// reason, and their names returned (`--exit-on-error` decides what becomes of the server);
    /// only a wrong `--load-model` list is an error.
    pub fn start(&self, load_models: &[String], threads: usize) -> Result<Vec<String>, String> {
        if self.mode != ControlMode::Explicit || load_models.iter().any(|m| m == "*") {
            if self.mode == ControlMode::Explicit && load_models.len() > 1 {
                return Err("Wildcard model name '*' must be the ONLY startup model if specified at all.".into());
            }
            return Ok(self.load_all(threads));
        }
        // LOADING in the index from the start, so that nobody takes the models for settled before
        // their turn (the endpoints listen meanwhile).
        self.mark_loading(load_models.iter().filter(|n| is_plain_name(n)));
        let mut failed = Vec::new();
        for name in load_models {
            if let Err(e) = self.load(name, &LoadOverrides::default()) {
                tracing::error!("{e}");
                failed.push(name.clone());
            }
            self.busy.lock().remove(name);
        }
        Ok(failed)
    }

    /// Shows `names` LOADING in the repository index until their load (which clears the mark) or
    /// the start-up's end.
    fn mark_loading<'a>(&self, names: impl Iterator<Item = &'a String>) {
        let mut busy = self.busy.lock();
        for name in names {
            busy.insert(name.clone(), Busy::Loading);
        }
    }

    /// Loads every model of the repositories: the others on `threads` threads at once, then the
    /// ensembles after the models they compose. Returns the names that failed.
    fn load_all(&self, threads: usize) -> Vec<String> {
        let _ops = self.ops.lock();
        self.remote.sync();
        let (found, conflicts) = repository::scan(&self.repositories);
        self.mark_loading(found.iter().map(|(name, _)| name));
        let failed = Mutex::new(self.remote.failed_repositories().into_keys().collect::<Vec<_>>());
        for name in self.mark_remote_failures(&found) {
            failed.lock().push(name);
        }
        for (name, reason) in conflicts {
            tracing::error!("model '{name}' is unavailable: {reason}{}", reason.folders());
            self.replace(&name, ModelEntry::unavailable(&name, Path::new(""), reason));
            failed.lock().push(name);
        }
        let (mut ensembles, plain): (Vec<_>, Vec<_>) = found
            .into_iter()
            .partition(|(name, dir)| repository::is_ensemble(name, dir, self.ctx.config_name.as_deref()));
        let queue = Mutex::new(plain);
        let load = |name: &str, dir: &Path| {
            self.explicit.lock().insert(name.to_string());
            if self.load_from(name, dir, None, None).is_err() {
                failed.lock().push(name.to_string());
            }
        };
        std::thread::scope(|scope| {
            for i in 0..threads.max(1) {
                let (queue, load) = (&queue, &load);
                let worker = std::thread::Builder::new().name(format!("nereus-load-{i}"));
                let spawned = worker.spawn_scoped(scope, move || {
                    while let Some((name, dir)) = queue.lock().pop() {
                        load(&name, &dir);
                    }
                });
                if let Err(e) = spawned {
                    tracing::warn!("cannot start a model load thread ({e}); loading on fewer");
                }
            }
        });
        // Whatever no thread took (none could start): load here.
        for (name, dir) in queue.into_inner() {
            load(&name, &dir);
        }
        while !ensembles.is_empty() {
            let waiting: Vec<String> = ensembles.iter().map(|(n, _)| n.clone()).collect();
            let ready = ensembles.iter().position(|(name, dir)| {
                repository::ensemble_steps(name, dir, self.ctx.config_name.as_deref())
                    .iter()
                    .all(|m| !waiting.contains(m) || m == name)
            });
            // A cycle between ensembles: load the first anyway; it reports the missing model.
            let (name, dir) = ensembles.remove(ready.unwrap_or(0));
            load(&name, &dir);
        }
        failed.into_inner()
    }

    /// The repository extension's load: loads `name` (and, for an ensemble, the models it
    /// composes), or reloads it when its folder changed or `overrides` are given. EXPLICIT mode
    /// only. Blocks while the model loads.
    pub fn load(&self, name: &str, overrides: &LoadOverrides) -> Result<(), InferError> {
        if self.mode != ControlMode::Explicit {
            return Err(InferError::unavailable(NOT_EXPLICIT));
        }
        check_load_name(name)?;
        let _ops = self.ops.lock();
        self.remote.sync();
        self.explicit.lock().insert(name.to_string());
        let loaded = self.load_locked(name, overrides, &mut HashSet::from([name.to_string()]));
        // A failed load of the model itself is logged where it fails; one that never reached it
        // (its folder or configuration) is logged here.
        if let Err(e) = &loaded
            && e.kind == crate::error::ErrorKind::Internal
        {
            tracing::error!("{e}");
        }
        loaded
    }

    fn load_locked(
        &self,
        name: &str,
        overrides: &LoadOverrides,
        visited: &mut HashSet<String>,
    ) -> Result<(), InferError> {
        let poll_failed = |why: &dyn std::fmt::Display| {
            InferError::internal(format!("failed to load '{name}', failed to poll from model repository: {why}"))
        };
        let given = overrides.parsed_config().map_err(|e| poll_failed(&e))?;
        let files = overrides.materialize(name).map_err(|e| poll_failed(&e))?;
        let dir = match &files {
            Some(files) => files.path().to_path_buf(),
            None => self.find(name).map_err(|e| poll_failed(&e))?,
        };
        // An ensemble's steps first, as Triton polls and loads them with it.
        let ensemble = match &given {
            Some(config) => config.platform == "ensemble",
            None => repository::is_ensemble(name, &dir, self.ctx.config_name.as_deref()),
        };
        if ensemble {
            let steps = match &given {
                Some(config) => repository::steps_of(config),
                None => repository::ensemble_steps(name, &dir, self.ctx.config_name.as_deref()),
            };
            for step in steps {
                if visited.insert(step.clone())
                    && let Err(e) = self.load_locked(&step, &LoadOverrides::default(), visited)
                {
                    // The ensemble's own load names the step that is missing.
                    tracing::error!("{e}");
                }
            }
        }
        let unchanged = overrides.is_empty()
            && self.ctx.models.read().get(name).is_some_and(|e| e.has_ready() && e.dir == dir)
            && self.attempted.lock().get(name) == Some(&self.fingerprint(&dir));
        if unchanged {
            return Ok(());
        }
        match self.load_from(name, &dir, given, files) {
            Ok(()) => Ok(()),
            Err(Failed::Config(why)) => Err(poll_failed(&why)),
            Err(Failed::Load(why)) => Err(InferError::invalid(format!("load failed for model '{name}': {why}"))),
        }
    }

    /// Loads `name` from `dir` beside what serves now, and swaps it in if every version loaded;
    /// otherwise what served keeps serving (or, if nothing did, the model is UNAVAILABLE with the
    /// reasons). The caller holds `ops`, or is one of start-up's load threads.
    fn load_from(
        &self,
        name: &str,
        dir: &Path,
        given: Option<ModelConfig>,
        files: Option<OverrideDir>,
    ) -> Result<(), Failed> {
        let files_given = files.is_some();
        let fingerprint = self.fingerprint(dir);
        self.busy.lock().insert(name.to_string(), Busy::Loading);
        let started = Instant::now();
        let mut entry = repository::load_model(name, dir, &self.ctx, given);
        self.busy.lock().remove(name);
        entry.override_files = files.map(Arc::new);
        if files_given {
            self.attempted.lock().remove(name);
        } else {
            self.attempted.lock().insert(name.to_string(), fingerprint);
        }
        let Some(failure) = entry.failure() else {
            let versions: Vec<&i64> = entry.versions.keys().collect();
            let took = started.elapsed();
            tracing::info!("successfully loaded '{name}' version(s) {versions:?} in {took:.0?}");
            if let Some(metrics) = &self.ctx.metrics {
                for version in entry.versions.keys() {
                    metrics.loaded(name, *version, took);
                }
            }
            // Versions the reload no longer loads stay known as unloaded, as tritonserver's: a
            // request for one is for a version "not at ready state", not an unknown one.
            let before = self.ctx.models.read().get(name).cloned();
            if let Some(before) = before {
                for v in before.versions.keys() {
                    entry.versions.entry(*v).or_insert(VersionState::Unavailable(LoadError::Unloaded));
                }
            }
            self.replace(name, entry);
            self.revive_dependents(name);
            return Ok(());
        };
        let stage_config = entry.config.is_none();
        if let Some(LoadError::Unreadable { path, source }) = &entry.reason
            && source.kind() == std::io::ErrorKind::NotFound
            && path.extension().is_some_and(|e| e == "pbtxt")
            && !self.ctx.models.read().get(name).is_some_and(|e| e.has_ready())
        {
            // tritonserver's poll failure: a folder with no configuration (and none its files
            // give) is not a model. It is left out, unknown to requests and to readiness.
            tracing::error!("failed to open text file for read {}: No such file or directory", path.display());
            tracing::error!("failed to poll model '{name}': left out of the models served");
            self.ctx.models.write().remove(name);
            return Err(Failed::Config(failure));
        }
        tracing::error!("failed to load '{name}': {failure}");
        // All or nothing: the versions that did load go again.
        let loaded: Vec<Arc<ModelVersion>> = entry.versions.values().filter_map(|v| v.ready().cloned()).collect();
        let serving = self.ctx.models.read().get(name).is_some_and(|e| e.has_ready());
        if serving {
            tracing::warn!("'{name}' keeps serving its previous version(s)");
        } else {
            for state in entry.versions.values_mut() {
                if state.ready().is_some() {
                    *state = VersionState::Unavailable(LoadError::Unloaded);
                }
            }
            self.replace(name, entry);
        }
        self.retire(loaded, None);
        Err(if stage_config { Failed::Config(failure) } else { Failed::Load(failure) })
    }

    /// The repository extension's unload: the model's versions stop taking requests at once, and
    /// the call returns once their in-flight requests are answered (at most the unload timeout;
    /// the rest then finish in the background). With `dependents`, the ensembles that use the
    /// model, directly or through other ensembles, are unloaded too, and so are the steps an
    /// ensemble's load brought along that nothing else uses (tritonserver's cascading removal).
    /// EXPLICIT mode only.
    pub fn unload(&self, name: &str, dependents: bool) -> Result<(), InferError> {
        if self.mode != ControlMode::Explicit {
            return Err(InferError::unavailable(NOT_EXPLICIT));
        }
        let _ops = self.ops.lock();
        let mut names = vec![name.to_string()];
        let others = self.dependents_of(name);
        if dependents {
            names.extend(others.iter().cloned());
        }
        let mut done: Vec<_> = names.iter().filter_map(|n| self.unload_locked(n)).collect();
        if dependents {
            done.extend(self.cascade(names));
        }
        if !dependents {
            // The ensembles using it cannot serve without it: as tritonserver, they are unloaded
            // too, and load again when it does (unless unloaded on request meanwhile).
            done.extend(self.orphan(&others));
        }
        let deadline = Instant::now() + self.unload_timeout;
        for finished in done {
            if finished.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_err() {
                tracing::warn!("unloading '{name}': in-flight requests still running after {:?}", self.unload_timeout);
            }
        }
        Ok(())
    }

    /// tritonserver's cascading removal: after `removed` were unloaded with `unload_dependents`,
    /// the steps of those that are ensembles are unloaded too when an ensemble's load brought them
    /// (not a load of their own) and no loaded ensemble still uses them; and so on down.
    fn cascade(&self, mut removed: Vec<String>) -> Vec<crossbeam_channel::Receiver<()>> {
        let mut done = Vec::new();
        let mut frontier = removed.clone();
        while let Some(model) = frontier.pop() {
            for step in self.steps_of(&model) {
                let still_used = self.dependents_of(&step).iter().any(|user| {
                    !removed.contains(user) && self.ctx.models.read().get(user).is_some_and(|e| e.has_ready())
                });
                if removed.contains(&step) || self.explicit.lock().contains(&step) || still_used {
                    continue;
                }
                if let Some(finished) = self.unload_locked(&step) {
                    tracing::info!("unloading '{step}': loaded with '{model}', which was unloaded with its dependents");
                    done.push(finished);
                    removed.push(step.clone());
                    frontier.push(step);
                }
            }
        }
        done
    }

    /// The models an ensemble's steps name (none for other models).
    fn steps_of(&self, name: &str) -> Vec<String> {
        let table = self.ctx.models.read();
        table.get(name).and_then(|e| e.config.as_deref()).map(repository::steps_of).unwrap_or_default()
    }

    /// Marks `name`'s versions unloaded in the table and retires what was serving; the receiver
    /// hears when that is finalised. `None` when the model is not in the table.
    fn unload_locked(&self, name: &str) -> Option<crossbeam_channel::Receiver<()>> {
        self.orphans.lock().remove(name);
        self.explicit.lock().remove(name);
        let old = self.ctx.models.read().get(name).cloned()?;
        let unloaded = old.unloaded();
        self.attempted.lock().remove(name);
        self.busy.lock().insert(name.to_string(), Busy::Unloading);
        let serving: Vec<Arc<ModelVersion>> = old.versions.values().filter_map(|v| v.ready().cloned()).collect();
        drop(old);
        self.ctx.models.write().insert(name.to_string(), Arc::new(unloaded));
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.retire(serving, Some((name.to_string(), tx)));
        Some(rx)
    }

    /// Unloads the loaded ones of `ensembles` (the dependents of a model that went) and remembers
    /// them, to load them again when it is back.
    fn orphan(&self, ensembles: &[String]) -> Vec<crossbeam_channel::Receiver<()>> {
        let mut done = Vec::new();
        for name in ensembles {
            let Some(dir) = self.ctx.models.read().get(name).filter(|e| e.has_ready()).map(|e| e.dir.clone()) else {
                continue;
            };
            tracing::info!("unloading '{name}': a model it uses was unloaded");
            let explicit = self.explicit.lock().contains(name);
            done.extend(self.unload_locked(name));
            if explicit {
                // It comes back as it was loaded.
                self.explicit.lock().insert(name.clone());
            }
            self.orphans.lock().insert(name.clone(), dir);
        }
        done
    }

    /// Loads again the orphaned ensembles that use `name`, now that it loaded.
    fn revive_dependents(&self, name: &str) {
        let waiting: Vec<(String, PathBuf)> = self
            .orphans
            .lock()
            .iter()
            .filter(|(ensemble, dir)| {
                repository::ensemble_steps(ensemble, dir, self.ctx.config_name.as_deref()).iter().any(|s| s == name)
            })
            .map(|(e, d)| (e.clone(), d.clone()))
            .collect();
        for (ensemble, dir) in waiting {
            self.orphans.lock().remove(&ensemble);
            tracing::info!("loading '{ensemble}' again: '{name}', which it uses, loaded");
            let _ = self.load_from(&ensemble, &dir, None, None);
        }
    }

    /// The loaded ensembles whose steps use `name`, directly or through other ensembles.
    fn dependents_of(&self, name: &str) -> Vec<String> {
        let table = self.ctx.models.read();
        let steps_of = |entry: &ModelEntry| entry.config.as_deref().map(repository::steps_of).unwrap_or_default();
        let mut found: Vec<String> = Vec::new();
        let mut frontier = vec![name.to_string()];
        while let Some(model) = frontier.pop() {
            for (other, entry) in table.iter() {
                if !found.contains(other) && other != name && steps_of(entry).contains(&model) {
                    found.push(other.clone());
                    frontier.push(other.clone());
                }
            }
        }
        found
    }

    /// One look at the repositories (POLL mode): loads added models, reloads changed ones (a
    /// failed reload keeps the old serving), and unloads those whose folder is gone.
    pub fn poll(&self) {
        let _ops = self.ops.lock();
        self.remote.sync();
        let (found, conflicts) = repository::scan(&self.repositories);
        self.mark_remote_failures(&found);
        let remote_failures = self.remote.failed_models();
        let present: BTreeSet<&String> = found
            .iter()
            .map(|(n, _)| n)
            .chain(conflicts.iter().map(|(n, _)| n))
            .chain(remote_failures.keys())
            .collect();
        let gone: Vec<String> = self
            .ctx
            .models
            .read()
            .iter()
            .filter(|(n, e)| !present.contains(n) && !e.is_unloaded())
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            tracing::info!("model '{name}' is no longer in the repository: unloading it");
            // As tritonserver, the model stays known with its versions unloaded: a request for it
            // "has no available versions" rather than being for an unknown model.
            let old = self.ctx.models.read().get(&name).cloned();
            self.attempted.lock().remove(&name);
            if let Some(old) = old {
                let unloaded = old.unloaded();
                drop(old);
                self.replace(&name, unloaded);
            }
            let dependents = self.dependents_of(&name);
            self.orphan(&dependents);
        }
        for (name, reason) in conflicts {
            if self.ctx.models.read().get(&name).is_some_and(|e| matches!(e.reason, Some(LoadError::Duplicate { .. })))
            {
                continue;
            }
            tracing::error!("model '{name}' is unavailable: {reason}{}", reason.folders());
            self.attempted.lock().remove(&name);
            self.replace(&name, ModelEntry::unavailable(&name, Path::new(""), reason));
        }
        let (ensembles, plain): (Vec<_>, Vec<_>) = found
            .into_iter()
            .partition(|(name, dir)| repository::is_ensemble(name, dir, self.ctx.config_name.as_deref()));
        for (name, dir) in plain.into_iter().chain(ensembles) {
            // An orphaned ensemble loads again with the model it waits for, not on its own.
            let changed = !self.orphans.lock().contains_key(&name)
                && (self.attempted.lock().get(&name) != Some(&self.fingerprint(&dir))
                    || self.ctx.models.read().get(&name).is_none_or(|e| e.dir != dir));
            if changed {
                let _ = self.load_from(&name, &dir, None, None);
            }
        }
    }

    /// Unloads every model (shutdown): ensembles first, as their requests still need the models
    /// they compose. Blocks until each version's in-flight requests are answered.
    pub fn unload_all(&self) {
        let _ops = self.ops.lock();
        // The table keeps its entries until every version is unloaded, so that a shutdown whose
        // exit timeout expires can still say what was in flight.
        let models: Vec<Arc<ModelEntry>> = self.ctx.models.read().values().cloned().collect();
        let (ensembles, plain): (Vec<_>, Vec<_>) =
            models.iter().partition(|e| e.config.as_ref().is_some_and(|c| c.platform == "ensemble"));
        for entry in ensembles.into_iter().chain(plain) {
            for state in entry.versions.values() {
                if let VersionState::Ready(m) = state {
                    m.unload();
                    tracing::info!("successfully unloaded '{}' version {}", m.name, m.version);
                }
            }
        }
        drop(models);
        self.ctx.models.write().clear();
    }

    /// The backends the loaded models use, by name, with where each comes from and its settings
    /// (the start-up table of backends).
    pub fn backends_in_use(&self) -> BTreeMap<String, crate::backend::BackendSummary> {
        let mut out = BTreeMap::new();
        for entry in self.ctx.models.read().values() {
            let Some(config) = &entry.config else { continue };
            let Some(version) = entry.versions.iter().find_map(|(v, s)| s.ready().map(|_| *v)) else { continue };
            if config.platform == "ensemble" {
                continue;
            }
            let Ok(backend) = crate::backend::backend_name(config) else { continue };
            if let std::collections::btree_map::Entry::Vacant(slot) = out.entry(backend) {
                let summary = self.ctx.backends.factory(slot.key()).describe(slot.key(), &entry.dir, version);
                slot.insert(summary);
            }
        }
        out
    }

    /// The repository index: every model folder of the repositories, with its versions' states
    /// and reasons where it has been loaded (or tried), and its name alone where it has not.
    pub fn index(&self, ready_only: bool) -> Vec<ModelIndex> {
        let mut names = repository::folder_names(&self.repositories);
        // Remote models whose copy could not be made have no folder, but a reason to show.
        names.extend(self.remote.failed_models().into_keys());
        let duplicates = repository::duplicate_names(&self.repositories);
        let table = self.ctx.models.read();
        let busy = self.busy.lock();
        let mut out = Vec::new();
        let row = |name: &str, version: String, state: &str, reason: String| ModelIndex {
            name: name.to_string(),
            version,
            state: state.to_string(),
            reason,
        };
        for name in names {
            // As tritonserver, a name in several repositories is one UNAVAILABLE row, whether a
            // load was tried or not.
            if duplicates.contains(&name) {
                if !ready_only {
                    let reason = LoadError::Duplicate { dirs: Vec::new() }.to_string();
                    out.push(row(&name, String::new(), "UNAVAILABLE", reason));
                }
                continue;
            }
            let busy = busy.get(&name).copied();
            let Some(entry) = table.get(&name) else {
                if !ready_only {
                    let state = if busy == Some(Busy::Loading) { "LOADING" } else { "" };
                    out.push(row(&name, String::new(), state, String::new()));
                }
                continue;
            };
            if busy == Some(Busy::Loading) && !entry.has_ready() {
                if !ready_only {
                    out.push(row(&name, String::new(), "LOADING", String::new()));
                }
                continue;
            }
            if entry.versions.is_empty() {
                if !ready_only {
                    let reason = entry.reason.as_ref().map(ToString::to_string).unwrap_or_default();
                    out.push(row(&name, String::new(), "UNAVAILABLE", reason));
                }
                continue;
            }
            for (v, state) in &entry.versions {
                let (state, reason) = match state {
                    VersionState::Ready(m) if m.health.is_ready() => ("READY", String::new()),
                    VersionState::Ready(m) => ("UNAVAILABLE", m.health.reason().unwrap_or_default()),
                    VersionState::Unavailable(LoadError::Unloaded) if busy == Some(Busy::Unloading) => {
                        ("UNLOADING", String::new())
                    }
                    VersionState::Unavailable(r) => ("UNAVAILABLE", r.to_string()),
                };
                if !ready_only || state == "READY" {
                    out.push(row(&name, v.to_string(), state, reason));
                }
            }
        }
        out
    }

    /// Puts `entry` in the table and retires the versions it replaces.
    fn replace(&self, name: &str, entry: ModelEntry) {
        let old = self.ctx.models.write().insert(name.to_string(), Arc::new(entry));
        if let Some(old) = old {
            let serving = old.versions.values().filter_map(|v| v.ready().cloned()).collect();
            drop(old);
            self.retire(serving, None);
        }
    }

    /// Unloads `versions` on a thread of its own once nothing else holds them (or after the
    /// unload timeout), then clears `name`'s UNLOADING mark and says so on `done`, if given.
    fn retire(&self, versions: Vec<Arc<ModelVersion>>, done: Option<(String, crossbeam_channel::Sender<()>)>) {
        if versions.is_empty() && done.is_none() {
            return;
        }
        let timeout = self.unload_timeout;
        let busy = self.busy.clone();
        let retired = move || {
            let deadline = Instant::now() + timeout;
            for version in versions {
                // Only this handle left: the table no longer names the version and no request is
                // between resolving it and queueing on it.
                while Arc::strong_count(&version) > 1 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                version.unload();
                tracing::info!("successfully unloaded '{}' version {}", version.name, version.version);
            }
            if let Some((name, tx)) = done {
                let mut busy = busy.lock();
                if busy.get(&name) == Some(&Busy::Unloading) {
                    busy.remove(&name);
                }
                drop(busy);
                let _ = tx.send(());
            }
        };
        if let Err(e) = std::thread::Builder::new().name("nereus-unload".into()).spawn(retired) {
            tracing::error!("cannot start a thread to unload retired model versions: {e}");
        }
    }

    /// Makes the models of remote repositories whose copy could not be made, and that have no
    /// earlier copy in `found`, UNAVAILABLE with why. Returns their names.
    fn mark_remote_failures(&self, found: &[(String, PathBuf)]) -> Vec<String> {
        let mut marked = Vec::new();
        for (name, why) in self.remote.failed_models() {
            if found.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let known = self.ctx.models.read().get(&name).is_some_and(|e| e.failure().as_deref() == Some(why.as_str()));
            if !known {
                self.attempted.lock().remove(&name);
                self.replace(&name, ModelEntry::unavailable(&name, Path::new(""), LoadError::Remote(why)));
            }
            marked.push(name);
        }
        marked
    }

    /// `name`'s folder in the repositories: exactly one must have it.
    fn find(&self, name: &str) -> Result<PathBuf, String> {
        // A name from a request or an ensemble's steps (which a load request may send): joined to
        // a repository, `../x` or `/x` would be a folder outside it.
        if !is_plain_name(name) {
            return Err(format!("'{name}' is not a model name: it must be one folder name"));
        }
        let dirs: Vec<PathBuf> = self.repositories.iter().map(|r| r.join(name)).filter(|d| d.is_dir()).collect();
        match dirs.as_slice() {
            [] => Err(self
                .remote
                .explain_missing(name)
                .unwrap_or_else(|| "model not found in any model repository".into())),
            [dir] => Ok(dir.clone()),
            _ => Err("not unique across all model repositories".into()),
        }
    }

    /// The fingerprint of a model folder, with the backend directory's folder of the backend its
    /// configuration names (a component replaced there reloads the model too).
    fn fingerprint(&self, dir: &Path) -> Fingerprint {
        let backend = std::fs::read_to_string(repository::config_file(dir, self.ctx.config_name.as_deref()))
            .ok()
            .and_then(|text| crate::config::parse_pbtxt(&text).ok())
            .map(|c| c.backend)
            .filter(|b| is_plain_name(b));
        match (&self.backend_dir, backend) {
            (Some(backends), Some(backend)) => Fingerprint::of(dir, &[&backends.join(backend)]),
            _ => Fingerprint::of(dir, &[]),
        }
    }
}

/// A load's model name, checked as tritonserver's `ValidateModelName` checks it (with its
/// messages): not empty or only whitespace, not `..` and no `/` once trimmed; then it must be one
/// plain folder name (not `.`, no backslash), which tritonserver does not check but a folder lookup
/// needs.
fn check_load_name(name: &str) -> Result<(), InferError> {
    // boost::trim's whitespace: C's isspace.
    let trimmed = name.trim_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    if trimmed.is_empty() {
        return Err(InferError::invalid("Model name cannot be empty. Please enter a valid name to deploy."));
    }
    if trimmed == ".." || trimmed.contains('/') {
        return Err(InferError::invalid(format!(
            "invalid model name '{name}', model name must not contain path traversal characters"
        )));
    }
    if !is_plain_name(name) {
        return Err(InferError::invalid(format!("failed to load '{name}': invalid model name")));
    }
    Ok(())
}
