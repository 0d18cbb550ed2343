//! One sandbox: a `Store` with its own component instance, memory cap and deadline. Each model
//! instance owns one; so do the host's copies of each backend and each model (see the lifecycle
//! interface in `wit/backend.wit`).
use std::sync::Arc;

use wasmtime::{Store, Trap};
use wasmtime_wasi::WasiCtx;

use super::bindings::{Backend, InstanceInfo, ModelInfo, Request};
use super::policy::SandboxPolicy;
use super::runtime::{CompiledComponent, EPOCH_TICK, WasmRuntime};
pub use super::state::{ActiveBatch, SandboxState};

/// One finalisation export of the component, called with its store.
type FinalizeCall = fn(&Backend, &mut Store<SandboxState>) -> wasmtime::Result<()>;

/// A failure of the sandbox itself (trap, deadline, memory cap), as opposed to an error the
/// plugin returned. The sandbox must not be used again after one.
#[derive(Debug, Clone)]
pub struct Fault(pub String);

/// How an `execute` call ended.
#[derive(Debug)]
pub enum Executed {
    /// The guest returned (its own `result`).
    Returned(Result<(), String>),
    /// A trap, deadline, memory cap or other limit: the store must not be used again.
    Faulted(Fault),
    /// A host function panicked while the guest ran; the store must not be used again either.
    /// Expected in one case: a blocking WASI call (a sleep, a print) made during an inline
    /// execution, on an I/O thread, where wasmtime-wasi cannot block (see `scheduler::inline`).
    HostPanicked(String),
}

/// The message of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a host function panicked".into())
}

/// A lifecycle call's outcome: the plugin's own error, or a fault.
#[derive(Debug, Clone)]
pub enum CallError {
    Plugin(String),
    Fault(Fault),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Plugin(m) => f.write_str(m),
            CallError::Fault(Fault(m)) => f.write_str(m),
        }
    }
}

/// How far a sandbox's lifecycle has been initialised; finalisation unwinds exactly that far.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Fresh,
    Backend,
    Model,
    Instance,
}

pub struct Sandbox {
    store: Store<SandboxState>,
    bindings: Backend,
    policy: SandboxPolicy,
    level: Level,
}

impl Sandbox {
    /// Instantiates `component` in a new store with `policy`'s limits.
    pub fn new(
        runtime: &WasmRuntime,
        component: &CompiledComponent,
        policy: &SandboxPolicy,
        label: Arc<str>,
    ) -> Result<Self, Fault> {
        // Deny by default: no environment, arguments, network or stdio, and no directory unless
        // the policy grants the model's version folder, read-only, at `/model`.
        let mut wasi = WasiCtx::builder();
        if let Some(dir) = &policy.model_dir {
            wasi.preopened_dir(dir, "/model", wasmtime_wasi::FsPerms::ReadOnly)
                .map_err(|e| Fault(format!("cannot grant {} to the sandbox: {e}", dir.display())))?;
        }
        let state = SandboxState::new(wasi.build(), policy.memory_limit_bytes as usize, label);
        let mut store = Store::new(&runtime.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_trap();
        store.set_epoch_deadline(Self::deadline_ticks(policy));
        store.set_fuel(policy.fuel.unwrap_or(u64::MAX)).map_err(|e| Fault(e.to_string()))?;
        let bindings = component.pre.instantiate(&mut store).map_err(|e| Self::fault_of(&store, policy, e))?;
        Ok(Sandbox { store, bindings, policy: policy.clone(), level: Level::Fresh })
    }

    fn deadline_ticks(policy: &SandboxPolicy) -> u64 {
        (policy.execution_timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1
    }

    /// Describes why a call failed, naming the limit when one was hit.
    fn fault_of(store: &Store<SandboxState>, policy: &SandboxPolicy, e: wasmtime::Error) -> Fault {
        let data = store.data();
        let what = if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            format!("exceeded its execution deadline of {} ms", policy.execution_timeout.as_millis())
        } else if e.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) {
            format!("exceeded its fuel budget of {} (sandbox.fuel)", policy.fuel.unwrap_or(u64::MAX))
        } else if data.limiter.denied_memory {
            format!("exceeded its memory limit of {} MiB", policy.memory_limit_bytes >> 20)
        } else if let Some(trap) = e.downcast_ref::<Trap>() {
            format!("trapped: {trap}")
        } else {
            format!("failed: {}", e.root_cause())
        };
        Fault(format!("{} {what}", data.label))
    }

    fn arm(&mut self) {
        let ticks = Self::deadline_ticks(&self.policy);
        self.store.set_epoch_deadline(ticks);
        // Each call gets the whole budget again (fuel is enabled on the engine, so this cannot fail).
        let _ = self.store.set_fuel(self.policy.fuel.unwrap_or(u64::MAX));
    }

    fn lifecycle<T>(
        &mut self,
        call: impl FnOnce(&Backend, &mut Store<SandboxState>) -> wasmtime::Result<T>,
    ) -> Result<T, Fault> {
        self.arm();
        let result = call(&self.bindings, &mut self.store);
        result.map_err(|e| Self::fault_of(&self.store, &self.policy, e))
    }

    fn init(
        &mut self,
        level: Level,
        call: impl FnOnce(&Backend, &mut Store<SandboxState>) -> wasmtime::Result<Result<(), String>>,
    ) -> Result<(), CallError> {
        match self.lifecycle(call) {
            Ok(Ok(())) => {
                self.level = level;
                Ok(())
            }
            Ok(Err(message)) => Err(CallError::Plugin(message)),
            Err(fault) => Err(CallError::Fault(fault)),
        }
    }

    pub fn initialize_backend(&mut self, backend_name: &str) -> Result<(), CallError> {
        self.init(Level::Backend, |b, s| b.nereus_backend_lifecycle().call_initialize_backend(s, backend_name))
    }

    pub fn initialize_model(&mut self, info: &ModelInfo) -> Result<(), CallError> {
        self.init(Level::Model, |b, s| b.nereus_backend_lifecycle().call_initialize_model(s, info))
    }

    pub fn initialize_instance(&mut self, info: &InstanceInfo) -> Result<(), CallError> {
        self.init(Level::Instance, |b, s| b.nereus_backend_lifecycle().call_initialize_instance(s, info))
    }

    /// Runs `execute` over `batch`; the batch comes back with each request answered or not.
    pub fn execute(&mut self, requests: &[Request], batch: ActiveBatch) -> (ActiveBatch, Executed) {
        self.store.data_mut().batch = Some(batch);
        // A host function that panics (wasmtime carries the panic out of the guest) must not lose
        // the batch, which sits in the store: catch it, take the batch back, report it.
        let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.lifecycle(|b, s| b.nereus_backend_lifecycle().call_execute(s, requests))
        }));
        let batch = self.store.data_mut().batch.take().expect("the batch stays in the store during execute");
        let executed = match call {
            Ok(Ok(returned)) => Executed::Returned(returned),
            Ok(Err(fault)) => Executed::Faulted(fault),
            Err(panic) => Executed::HostPanicked(panic_message(&panic)),
        };
        (batch, executed)
    }

    /// Unwinds the lifecycle (instance, model, backend — as far as it got), each call under the
    /// deadline. Errors are logged: finalisation cannot fail a load that is going away.
    pub fn finalize(mut self) {
        let label = self.store.data().label.clone();
        let steps: [(Level, FinalizeCall); 3] = [
            (Level::Instance, |b, s| b.nereus_backend_lifecycle().call_finalize_instance(s)),
            (Level::Model, |b, s| b.nereus_backend_lifecycle().call_finalize_model(s)),
            (Level::Backend, |b, s| b.nereus_backend_lifecycle().call_finalize_backend(s)),
        ];
        for (level, step) in steps {
            if self.level >= level
                && let Err(Fault(e)) = self.lifecycle(step)
            {
                tracing::warn!("{label}: finalisation failed: {e}");
                return;
            }
        }
    }
}
