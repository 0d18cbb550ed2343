//! The process-wide Wasm runtime: an `Engine` (pooling allocator, epoch interruption) and a
//! `Linker` with the host functions and deny-by-default WASI — a second pair, made on first use,
//! for components whose models set a fuel budget (see [`Metering`]) — an epoch ticker for each,
//! and the component cache (in memory by content hash, and on disk as precompiled artifacts).
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
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

/// Whether a component's code counts the instructions it runs, for a model's deterministic budget
/// (`sandbox.fuel`). Counting is compiled into the code — a check at every loop and call — and
/// costs every call of every plugin (measured: 16–23% of a Python or JavaScript plugin's execute
/// time, whose interpreters loop most), so only components of models that set a budget are compiled with it,
/// by an engine of their own. The same component used both ways is compiled twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metering {
    /// No fuel counting: the deadline (epoch interruption) and memory cap still hold.
    Off,
    /// Fuel counted; each call gets the model's budget.
    Fuel,
}

/// An engine and the linker of the host functions for it.
struct Flavour {
    engine: Engine,
    linker: Linker<SandboxState>,
}

/// A compiled backend component, ready to instantiate.
pub struct CompiledComponent {
    /// SHA-256 of the component bytes: the identity of a backend ("one component, many models").
    pub digest: String,
    /// Whether its code counts fuel; its stores are made by `pre`'s engine, the one that compiled it.
    pub metering: Metering,
    pub pre: BackendPre<SandboxState>,
    /// What its type says: the `nereus:backend` version and the capabilities it asks for.
    pub report: ComponentReport,
}

/// What identifies a component's bytes without reading them again, so that loading the same
/// component for many models hashes it once: bundled bytes never change; a file holds the same
/// bytes while its device, inode, size and modification time (to the nanosecond) stay the same —
/// the rule build tools use for their fingerprints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BytesIdentity {
    /// Bytes compiled into the binary: their address and length.
    Bundled {
        address: usize,
        len: usize,
    },
    File {
        dev: u64,
        ino: u64,
        len: u64,
        modified_ns: i128,
    },
}

impl BytesIdentity {
    pub fn bundled(bytes: &'static [u8]) -> Self {
        BytesIdentity::Bundled { address: bytes.as_ptr() as usize, len: bytes.len() }
    }

    /// A file's identity from its metadata, taken before its bytes were read (a change after
    /// that gives the next load another identity). `None` where the platform cannot say, and for
    /// a file modified in the last [`SETTLED`]: the kernel stamps modification times at its
    /// clock tick (milliseconds), so a file rewritten at the same size within one tick would
    /// keep its identity — as git does for "racily clean" files, such a file is hashed each time.
    pub fn of_file(metadata: &std::fs::Metadata) -> Option<Self> {
        let settled = metadata.modified().ok()?.elapsed().is_ok_and(|age| age >= SETTLED);
        if !settled {
            return None;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            Some(BytesIdentity::File {
                dev: metadata.dev(),
                ino: metadata.ino(),
                len: metadata.len(),
                modified_ns: i128::from(metadata.mtime()) * 1_000_000_000 + i128::from(metadata.mtime_nsec()),
            })
        }
        #[cfg(not(unix))]
        {
            let _ = metadata;
            None
        }
    }
}

/// How long a file must have gone unmodified for its metadata to stand for its bytes.
const SETTLED: Duration = Duration::from_secs(2);

/// The most identities [`WasmRuntime`] remembers the digest of; past it, it forgets them all
/// (each costs one hash to learn again).
const MAX_REMEMBERED_DIGESTS: usize = 1 << 16;

pub struct WasmRuntime {
    plain: Flavour,
    /// Made on the first load of a model with `sandbox.fuel` (most servers have none).
    metered: OnceLock<Result<Flavour, String>>,
    cache_dir: Option<PathBuf>,
    compiled: Mutex<HashMap<(String, Metering), Arc<CompiledComponent>>>,
    /// The SHA-256 of bytes already hashed, by their identity: hashing a component is most of what
    /// loading one more model of a known component costs (a 500 kB component, 1,000 models).
    digests: Mutex<HashMap<BytesIdentity, String>>,
    stop_ticker: Arc<AtomicBool>,
}

impl WasmRuntime {
    /// Builds the engine. `cache_dir` holds precompiled components (`None` disables the disk cache).
    pub fn new(cache_dir: Option<PathBuf>) -> wasmtime::Result<Arc<Self>> {
        let stop_ticker = Arc::new(AtomicBool::new(false));
        let plain = Flavour::new(Metering::Off, &stop_ticker)?;
        if let Some(dir) = &cache_dir
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            tracing::warn!("component cache {} unusable: {e}", dir.display());
        }
        Ok(Arc::new(WasmRuntime {
            plain,
            metered: OnceLock::new(),
            cache_dir,
            compiled: Mutex::new(HashMap::new()),
            digests: Mutex::new(HashMap::new()),
            stop_ticker,
        }))
    }

    /// The engine of components without fuel counting (the common case).
    pub fn engine(&self) -> &Engine {
        &self.plain.engine
    }

    fn flavour(&self, metering: Metering) -> wasmtime::Result<&Flavour> {
        match metering {
            Metering::Off => Ok(&self.plain),
            Metering::Fuel => self
                .metered
                .get_or_init(|| Flavour::new(Metering::Fuel, &self.stop_ticker).map_err(|e| format!("{e:#}")))
                .as_ref()
                .map_err(|e| wasmtime::format_err!("the fuel-counting engine could not be made: {e}")),
        }
    }

    /// Compiles (or fetches from the caches) the component in `bytes` and type-checks it against the
    /// `nereus:backend` world. A component that is not a valid backend is an error naming why.
    /// Also says where the compiled code came from.
    pub fn load(
        &self,
        bytes: &[u8],
        metering: Metering,
    ) -> wasmtime::Result<(Arc<CompiledComponent>, ComponentSource)> {
        self.load_identified(bytes, None, metering)
    }

    /// [`WasmRuntime::load`] for bytes whose `identity` is known: their digest is computed once
    /// per identity.
    pub fn load_identified(
        &self,
        bytes: &[u8],
        identity: Option<BytesIdentity>,
        metering: Metering,
    ) -> wasmtime::Result<(Arc<CompiledComponent>, ComponentSource)> {
        precheck(bytes)?;
        let digest = self.digest(bytes, identity);
        if let Some(hit) = self.compiled.lock().get(&(digest.clone(), metering)) {
            return Ok((hit.clone(), ComponentSource::Memory));
        }
        let flavour = self.flavour(metering)?;
        let (component, source) = self.compile_cached(&flavour.engine, &digest, bytes)?;
        let report = ComponentReport::of(&flavour.engine, &component);
        if let Some(reason) = report.unusable() {
            wasmtime::bail!("{reason}");
        }
        let instance_pre = match (flavour.linker.instantiate_pre(&component), report.newer()) {
            (Ok(pre), _) => pre,
            (Err(e), Some(newer)) => wasmtime::bail!(
                "it was built against nereus:backend@{newer}, newer than this server's {HOST_WORLD_VERSION}, and uses what this server lacks: {e:#}"
            ),
            (Err(e), None) => return Err(e),
        };
        let pre = BackendPre::new(instance_pre)?;
        let compiled = Arc::new(CompiledComponent { digest: digest.clone(), metering, pre, report });
        self.compiled.lock().insert((digest, metering), compiled.clone());
        Ok((compiled, source))
    }

    /// The SHA-256 of `bytes` in hex, remembered by their identity.
    fn digest(&self, bytes: &[u8], identity: Option<BytesIdentity>) -> String {
        if let Some(id) = identity
            && let Some(known) = self.digests.lock().get(&id)
        {
            return known.clone();
        }
        let digest = hex(&Sha256::digest(bytes));
        if let Some(id) = identity {
            let mut digests = self.digests.lock();
            if digests.len() >= MAX_REMEMBERED_DIGESTS {
                digests.clear();
            }
            digests.insert(id, digest.clone());
        }
        digest
    }

    /// Compiles `bytes` (no cache) and reads what its type says, for `nereus plugin check`: unlike
    /// [`WasmRuntime::load`] it reports a component that would be refused too.
    pub fn inspect(&self, bytes: &[u8]) -> wasmtime::Result<ComponentReport> {
        precheck(bytes)?;
        let component = Component::new(self.engine(), bytes)?;
        Ok(ComponentReport::of(self.engine(), &component))
    }

    fn compile_cached(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, ComponentSource)> {
        let Some(dir) = &self.cache_dir else {
            return Ok((Component::new(engine, bytes)?, ComponentSource::Compiled));
        };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let path = dir.join(format!("{digest}-{:016x}.cwasm", h.finish()));
        if path.exists() {
            // SAFETY: the file is one this process family wrote from `Engine::precompile_component`
            // into Nereus' own cache directory, keyed by the content hash and the engine's
            // compatibility hash; wasmtime additionally checks the artifact's header.
            #[allow(unsafe_code)]
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, ComponentSource::Disk)),
                Err(e) => {
                    tracing::warn!("ignoring unusable cached component {}: {e}", path.display())
                }
            }
        }
        let serialized = engine.precompile_component(bytes)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &serialized).and_then(|_| std::fs::rename(&tmp, &path)).is_err() {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!("could not write the component cache at {}", path.display());
        }
        #[allow(unsafe_code)]
        // SAFETY: `serialized` was produced just above by this engine.
        let component = unsafe { Component::deserialize(engine, &serialized)? };
        Ok((component, ComponentSource::Compiled))
    }
}

impl Flavour {
    /// An engine compiled for `metering`, its linker, and its epoch ticker (stopped with
    /// `stop_ticker`).
    fn new(metering: Metering, stop_ticker: &Arc<AtomicBool>) -> wasmtime::Result<Self> {
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
            // A freed slot gives all its memory back (no `keep_resident`): sandboxes are built
            // again when instances take turns on the server's sandboxes (`leases`), and a slot
            // that kept a MiB resident each time held a MiB per sandbox for good (measured: 2,000
            // models on 900 sandboxes, 1,052 MiB RSS with 1 MiB kept).
            .max_unused_warm_slots(100);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .consume_fuel(metering == Metering::Fuel)
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
        // `NEREUS_WASM_PROFILER=perfmap`: guest code gets names in `perf` profiles (a
        // /tmp/perf-<pid>.map file), for finding where a plugin spends its time. Off by default:
        // the map grows with every component compiled.
        if std::env::var_os("NEREUS_WASM_PROFILER").is_some_and(|v| v == "perfmap") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
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
        // `send-response` again, reading outputs in place from the sandbox's memory.
        super::lift::add_to_linker(&mut linker)?;
        // `models.infer` and `pending-call.start` again, counting a call's request before copying it.
        super::bls::lent::add_to_linker(&mut linker)?;

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
        Ok(Flavour { engine, linker })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    /// A digest is learned once per identity; a file changes identity when it changes, and a file
    /// modified just now has none (it is hashed each time).
    #[test]
    fn digests_are_remembered_by_identity() {
        let runtime = WasmRuntime::new(None).unwrap();
        static BUNDLED: &[u8] = b"bundled bytes";
        let bundled = BytesIdentity::bundled(BUNDLED);
        assert_eq!(runtime.digest(BUNDLED, Some(bundled)), sha(BUNDLED));
        // Remembered: the identity answers without the bytes being hashed again.
        assert_eq!(runtime.digest(b"other bytes", Some(bundled)), sha(BUNDLED));
        assert_eq!(runtime.digest(b"other bytes", None), sha(b"other bytes"));

        let dir = std::env::temp_dir().join(format!("nereus-digests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.wasm");
        std::fs::write(&path, b"first").unwrap();
        let fresh = std::fs::metadata(&path).unwrap();
        assert_eq!(BytesIdentity::of_file(&fresh), None, "modified just now");
        let old = std::time::SystemTime::now() - Duration::from_secs(60);
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(old).unwrap();
        let first = BytesIdentity::of_file(&std::fs::metadata(&path).unwrap()).unwrap();
        assert_eq!(runtime.digest(b"first", Some(first)), sha(b"first"));
        std::fs::write(&path, b"second").unwrap();
        file.set_modified(old + Duration::from_secs(1)).unwrap();
        let second = BytesIdentity::of_file(&std::fs::metadata(&path).unwrap()).unwrap();
        assert_ne!(first, second);
        assert_eq!(runtime.digest(b"second", Some(second)), sha(b"second"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
