//! The process-wide Wasm runtime: one `Engine` (pooling allocator, epoch interruption), one
//! `Linker` with the host functions and deny-by-default WASI, an epoch ticker, and the component
//! cache (in memory by content hash, and on disk as precompiled artifacts).
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, WasmBacktraceDetails};

use super::bindings::{Backend, BackendPre};
use super::inspect::{ComponentReport, HOST_WORLD_VERSION};
use super::io_guard::GuardedIo;
use super::policy::MAX_MEMORY_BYTES;
use super::state::SandboxState;
use crate::metrics::ComponentSource;
use wasmtime_wasi::p2::bindings::sync::io::{poll, streams};

/// How often the epoch advances; execution deadlines are counted in these ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The most guest frames a trap's backtrace keeps (the innermost, where the fault is), and logs.
/// Enough for a plugin's own calls under the panic machinery; it bounds the cost of a trap deep in
/// a recursion (a stack overflow has thousands of frames).
pub const MAX_BACKTRACE_FRAMES: usize = 32;

/// A compiled backend component, ready to instantiate.
pub struct CompiledComponent {
    /// SHA-256 of the component bytes: the identity of a backend ("one component, many models").
    pub digest: String,
    pub pre: BackendPre<SandboxState>,
    /// What its type says: the `nereus:backend` version and the capabilities it asks for.
    pub report: ComponentReport,
}

pub struct WasmRuntime {
    pub engine: Engine,
    linker: Linker<SandboxState>,
    cache_dir: Option<PathBuf>,
    compiled: Mutex<HashMap<String, Arc<CompiledComponent>>>,
    stop_ticker: Arc<AtomicBool>,
}

impl WasmRuntime {
    /// Builds the engine. `cache_dir` holds precompiled components (`None` disables the disk cache).
    pub fn new(cache_dir: Option<PathBuf>) -> wasmtime::Result<Arc<Self>> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(1000)
            .total_core_instances(4000)
            .total_memories(1000)
            .total_tables(2000)
            .max_memory_size(MAX_MEMORY_BYTES as usize)
            .max_component_instance_size(1 << 20)
            .max_core_instances_per_component(32)
            .max_memories_per_component(4)
            .max_tables_per_component(8)
            .table_elements(100_000)
            .linear_memory_keep_resident(1 << 20)
            .max_unused_warm_slots(100);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            // Fuel counts executed instructions, for the optional deterministic budget
            // (`sandbox.fuel`); stores without a budget get all the fuel there is.
            .consume_fuel(true)
            // A trap carries the guest's backtrace (`WasmBacktrace`), which the sandbox logs with
            // the function names of the component's name section (see `sandbox::fault_of`). On by
            // default; said here (`wasm_backtrace(true)` is deprecated for this) with the bound.
            .wasm_backtrace_max_frames(NonZeroUsize::new(MAX_BACKTRACE_FRAMES))
            // No file and line numbers from DWARF: plugins are built without debug info
            // (`[profile.plugin]`), and parsing it would cost every component's compilation time
            // and memory in proportion to what a plugin chose to ship. The names suffice. Explicit,
            // so that WASMTIME_BACKTRACE_DETAILS in the environment changes nothing.
            .wasm_backtrace_details(WasmBacktraceDetails::Disable)
            .cranelift_opt_level(wasmtime::OptLevel::Speed)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = match Engine::new(&config) {
            Ok(engine) => engine,
            Err(e) => {
                // Pooling needs a large virtual address space; fall back where it is not available.
                tracing::warn!("pooling allocator unavailable ({e}); using on-demand allocation");
                config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
                Engine::new(&config)?
            }
        };

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        // wasi:io's poll and streams again, over wasmtime-wasi's, guarded: a call that would block
        // traps with `WouldBlock` in a sandbox that may not block (see `io_guard`).
        linker.allow_shadowing(true);
        poll::add_to_linker::<SandboxState, GuardedIo>(&mut linker, SandboxState::io_guard)?;
        streams::add_to_linker::<SandboxState, GuardedIo>(&mut linker, SandboxState::io_guard)?;
        linker.allow_shadowing(false);
        Backend::add_to_linker::<SandboxState, HasSelf<SandboxState>>(&mut linker, |s| s)?;

        let stop_ticker = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.clone();
            let stop = stop_ticker.clone();
            std::thread::Builder::new().name("nereus-epoch".into()).spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })?;
        }
        if let Some(dir) = &cache_dir
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            tracing::warn!("component cache {} unusable: {e}", dir.display());
        }
        Ok(Arc::new(WasmRuntime { engine, linker, cache_dir, compiled: Mutex::new(HashMap::new()), stop_ticker }))
    }

    /// Compiles (or fetches from the caches) the component in `bytes` and type-checks it against the
    /// `nereus:backend` world. A component that is not a valid backend is an error naming why.
    /// Also says where the compiled code came from.
    pub fn load(&self, bytes: &[u8]) -> wasmtime::Result<(Arc<CompiledComponent>, ComponentSource)> {
        precheck(bytes)?;
        let digest = hex(&Sha256::digest(bytes));
        if let Some(hit) = self.compiled.lock().get(&digest) {
            return Ok((hit.clone(), ComponentSource::Memory));
        }
        let (component, source) = self.compile_cached(&digest, bytes)?;
        let report = ComponentReport::of(&self.engine, &component);
        if let Some(reason) = report.unusable() {
            wasmtime::bail!("{reason}");
        }
        let instance_pre = match (self.linker.instantiate_pre(&component), report.newer()) {
            (Ok(pre), _) => pre,
            (Err(e), Some(newer)) => wasmtime::bail!(
                "it was built against nereus:backend@{newer}, newer than this server's {HOST_WORLD_VERSION}, and uses what this server lacks: {e:#}"
            ),
            (Err(e), None) => return Err(e),
        };
        let pre = BackendPre::new(instance_pre)?;
        let compiled = Arc::new(CompiledComponent { digest: digest.clone(), pre, report });
        self.compiled.lock().insert(digest, compiled.clone());
        Ok((compiled, source))
    }

    /// Compiles `bytes` (no cache) and reads what its type says, for `nereus plugin check`: unlike
    /// [`WasmRuntime::load`] it reports a component that would be refused too.
    pub fn inspect(&self, bytes: &[u8]) -> wasmtime::Result<ComponentReport> {
        precheck(bytes)?;
        let component = Component::new(&self.engine, bytes)?;
        Ok(ComponentReport::of(&self.engine, &component))
    }

    fn compile_cached(&self, digest: &str, bytes: &[u8]) -> wasmtime::Result<(Component, ComponentSource)> {
        let Some(dir) = &self.cache_dir else {
            return Ok((Component::new(&self.engine, bytes)?, ComponentSource::Compiled));
        };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        let path = dir.join(format!("{digest}-{:016x}.cwasm", h.finish()));
        if path.exists() {
            // SAFETY: the file is one this process family wrote from `Engine::precompile_component`
            // into Nereus' own cache directory, keyed by the content hash and the engine's
            // compatibility hash; wasmtime additionally checks the artifact's header.
            #[allow(unsafe_code)]
            match unsafe { Component::deserialize_file(&self.engine, &path) } {
                Ok(component) => return Ok((component, ComponentSource::Disk)),
                Err(e) => {
                    tracing::warn!("ignoring unusable cached component {}: {e}", path.display())
                }
            }
        }
        let serialized = self.engine.precompile_component(bytes)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &serialized).and_then(|_| std::fs::rename(&tmp, &path)).is_err() {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!("could not write the component cache at {}", path.display());
        }
        #[allow(unsafe_code)]
        // SAFETY: `serialized` was produced just above by this engine.
        let component = unsafe { Component::deserialize(&self.engine, &serialized)? };
        Ok((component, ComponentSource::Compiled))
    }
}

impl Drop for WasmRuntime {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

/// The two commonest mistakes, said plainly before the parser's own words.
fn precheck(bytes: &[u8]) -> wasmtime::Result<()> {
    if !bytes.starts_with(b"\0asm") {
        wasmtime::bail!("not a WebAssembly binary (it does not start with the \\0asm header)");
    }
    if bytes.get(4..8) == Some(&[1, 0, 0, 0]) {
        wasmtime::bail!("a core WebAssembly module, not a component: build the plugin for wasm32-wasip2");
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
