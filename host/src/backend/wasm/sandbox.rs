//! One sandbox: a `Store` with its own component instance, memory cap and deadline. Each model
//! instance owns one; so do the host's copies of each backend and each model (see the lifecycle
//! interface in `wit/backend.wit`).
use std::fmt::Write;
use std::sync::Arc;

use wasmtime::{FrameInfo, Store, Trap, WasmBacktrace};
use wasmtime_wasi::WasiCtx;

use super::bindings::{Backend, OwnedInstanceInfo, OwnedModelInfo};
use super::bls::context::ModelCalls;
pub use super::budget::ModelMeter;
use super::io_guard::{Interrupted, WouldBlock};
use super::lower::{Execute, Request};
use super::policy::SandboxPolicy;
use super::runtime::{CompiledComponent, EPOCH_TICK, MAX_BACKTRACE_FRAMES, Metering};
pub use super::state::{ActiveBatch, Armed, MemoryDenied, SandboxState};
use crate::load_error::PluginError;
use crate::metrics::FaultKind;

/// One finalisation export of the component, called with its store.
type FinalizeCall = fn(&Backend, &mut Store<SandboxState>) -> wasmtime::Result<()>;

/// A failure of the sandbox itself (trap, deadline, memory cap), as opposed to an error the
/// plugin returned. The sandbox must not be used again after one.
#[derive(Debug, Clone)]
pub struct Fault {
    /// What the client and the log are told: the sandbox and the limit.
    pub message: String,
    /// Which limit, for `nereus_sandbox_faults{kind}`.
    pub kind: FaultKind,
    /// Whether a memory growth was refused by the server's Wasm memory budget (its total or the
    /// model's share), which other sandboxes hold and may give back, rather than by a limit of
    /// the sandbox's own: the same call may then succeed later.
    pub budget_refused: bool,
}

impl Fault {
    fn other(message: String) -> Fault {
        Fault { message, kind: FaultKind::Other, budget_refused: false }
    }

    /// The fault of a refused memory growth, `denied` as the limiter recorded it.
    fn memory(label: &str, denied: &MemoryDenied, policy: &SandboxPolicy) -> Fault {
        let what = match denied {
            MemoryDenied::Limit => format!("exceeded its memory limit of {} MiB", policy.memory_limit_bytes >> 20),
            MemoryDenied::Budget(why) => format!("could not grow its memory: {why}"),
        };
        let budget_refused = matches!(denied, MemoryDenied::Budget(_));
        Fault { message: format!("{label} {what}"), kind: FaultKind::Memory, budget_refused }
    }
}

/// How an `execute` call ended.
#[derive(Debug)]
pub enum Executed {
    /// The guest returned (its own `result`).
    Returned(Result<(), String>),
    /// A trap, deadline, memory cap or other limit: the store must not be used again.
    Faulted(Fault),
    /// The guest made a blocking WASI call (a wait, a print) where it may not block: an inline
    /// execution on an I/O thread (see `io_guard`). The store must not be used again; the requests
    /// it has not answered can run again where blocking is allowed.
    WouldBlock,
    /// A host function panicked while the guest ran (a bug of the host's): the store must not be
    /// used again either.
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

/// Longest function name shown in a backtrace; a longer one (only a hostile plugin's) is cut.
const MAX_FRAME_NAME_CHARS: usize = 200;

/// Logs a fault that is a trap or comes with a guest backtrace, at ERROR: its message, then one
/// line per frame, innermost first, with the function's name from the component's name section
/// (demangled) — how a plugin's author finds where it failed. Nothing of it goes to the client.
fn log_guest_backtrace(fault: &Fault, e: &wasmtime::Error) {
    let backtrace = e.downcast_ref::<WasmBacktrace>();
    if backtrace.is_none() && e.downcast_ref::<Trap>().is_none() {
        return;
    }
    let mut log = fault.message.clone();
    match backtrace.map(WasmBacktrace::frames).filter(|frames| !frames.is_empty()) {
        None => log.push_str("; no guest backtrace"),
        Some(frames) => {
            // The core module (named by the linker after the plugin's file) is said once, and
            // again only for a frame of another one (the component's adapters).
            let module = frames[0].module().name();
            log.push_str("; guest backtrace");
            if let Some(name) = module {
                let _ = write!(log, " in {}", printable(name));
            }
            log.push_str(", innermost call first:");
            for (i, frame) in frames.iter().take(MAX_BACKTRACE_FRAMES).enumerate() {
                let _ = write!(log, "\n  {i:>2}: {}", frame_line(frame, module));
            }
            if frames.len() >= MAX_BACKTRACE_FRAMES {
                let _ = write!(log, "\n  (only the innermost {MAX_BACKTRACE_FRAMES} calls are kept)");
            }
        }
    }
    tracing::error!("{log}");
}

/// A frame as `0x1a2b - name+0x1c`: the offset of the instruction in its core module, the
/// function's name (its index when the name section is gone) and the offset within it; the
/// module's name first (`module!name`) when it is not `module`.
fn frame_line(frame: &FrameInfo, module: Option<&str>) -> String {
    let mut line = match frame.module_offset() {
        Some(offset) => format!("{offset:#8x} - "),
        None => " ".repeat(11),
    };
    if let Some(name) = frame.module().name().filter(|&name| Some(name) != module) {
        line.push_str(&printable(name));
        line.push('!');
    }
    match frame.func_name() {
        Some(name) => line.push_str(&printable(&demangle(name).unwrap_or_else(|| name.into()))),
        None => {
            let _ = write!(line, "<wasm function {}>", frame.func_index());
        }
    }
    if let Some(offset) = frame.func_offset() {
        let _ = write!(line, "+{offset:#x}");
    }
    line
}

/// A name from the plugin, fit for a log line: at most [`MAX_FRAME_NAME_CHARS`] characters, and
/// nothing but ASCII punctuation, spaces and letters or digits of any script as they are (a
/// control or formatting character, which could forge or hide log lines, is escaped).
fn printable(name: &str) -> String {
    let mut out = String::new();
    for (n, c) in name.chars().enumerate() {
        if n == MAX_FRAME_NAME_CHARS {
            out.push('…');
            break;
        }
        if c.is_ascii_graphic() || c == ' ' || c.is_alphanumeric() {
            out.push(c);
        } else {
            out.extend(c.escape_unicode());
        }
    }
    out
}

/// A lifecycle call's outcome: the plugin's own error, or a fault.
#[derive(Debug, Clone)]
pub enum CallError {
    Plugin(String),
    Fault(Fault),
}

impl From<Fault> for PluginError {
    fn from(fault: Fault) -> Self {
        PluginError::Fault(fault.message)
    }
}

impl From<CallError> for PluginError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Plugin(message) => PluginError::Returned(message),
            CallError::Fault(fault) => fault.into(),
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
    /// The guest's `execute`, as the host lowers its requests.
    execute: Execute,
    policy: SandboxPolicy,
    /// Its code counts fuel ([`Metering::Fuel`]): each call gets the policy's budget.
    metered: bool,
    level: Level,
    /// A call faulted: wasmtime enters the instance no more (nor could the guest's state be trusted).
    faulted: bool,
}

impl Sandbox {
    /// Instantiates `component` in a new store with `policy`'s limits, its linear memory counted
    /// on `meter`.
    pub fn new(
        component: &CompiledComponent,
        policy: &SandboxPolicy,
        meter: ModelMeter,
        label: Arc<str>,
    ) -> Result<Self, Fault> {
        // Deny by default: no environment, arguments, network or stdio, and no directory unless
        // the policy grants the model's version folder, read-only, at `/model`.
        let mut wasi = WasiCtx::builder();
        if let Some(dir) = &policy.model_dir {
            wasi.preopened_dir(dir, "/model", wasmtime_wasi::FsPerms::ReadOnly)
                .map_err(|e| Fault::other(format!("cannot grant {} to the sandbox: {e}", dir.display())))?;
        }
        let state = SandboxState::new(wasi.build(), policy.memory_limit_bytes as usize, meter, label);
        let mut store = Store::new(component.pre.engine(), state);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(hostcall_fuel(policy.max_output_bytes));
        store.epoch_deadline_trap();
        store.set_epoch_deadline(Self::deadline_ticks(policy.load_timeout));
        store.data_mut().armed = Armed::Lifecycle(policy.load_timeout);
        let metered = component.metering == Metering::Fuel;
        if metered {
            store.set_fuel(policy.fuel.unwrap_or(u64::MAX)).map_err(|e| Fault::other(e.to_string()))?;
        }
        let bindings = component.pre.instantiate(&mut store).map_err(|e| Self::fault_of(&store, policy, e))?;
        let execute = Execute::new(*bindings.nereus_backend_lifecycle().func_execute().func(), &store)
            .map_err(|e| Fault::other(format!("the component's execute: {e}")))?;
        Ok(Sandbox { store, bindings, execute, policy: policy.clone(), metered, level: Level::Fresh, faulted: false })
    }

    /// Lets the sandbox's `execute` call other models (`nereus:backend/models`), as `calls` says.
    pub fn allow_calls(&mut self, calls: Option<Arc<ModelCalls>>) {
        self.store.data_mut().calls.allow(calls);
    }

    /// The linear memory the sandbox holds now, in bytes.
    pub fn memory_in_use(&self) -> usize {
        self.store.data().limiter.in_use
    }

    fn deadline_ticks(timeout: std::time::Duration) -> u64 {
        (timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1
    }

    /// Describes why a call failed, naming the limit when one was hit, and logs the guest
    /// backtrace (see [`log_guest_backtrace`]): the message is the client's, the log the author's.
    fn fault_of(store: &Store<SandboxState>, policy: &SandboxPolicy, e: wasmtime::Error) -> Fault {
        let data = store.data();
        let fault =
            |kind, what: String| Fault { message: format!("{} {what}", data.label), kind, budget_refused: false };
        let fault = if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt)
            || e.downcast_ref::<Interrupted>() == Some(&Interrupted::Deadline)
        {
            fault(FaultKind::Deadline, data.armed.describe())
        } else if e.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) {
            let what = format!("exceeded its fuel budget of {} (sandbox.fuel)", policy.fuel.unwrap_or(u64::MAX));
            fault(FaultKind::Fuel, what)
        } else if let Some(denied) = &data.limiter.denied {
            Fault::memory(&data.label, denied, policy)
        } else if let Some(trap) = e.downcast_ref::<Trap>() {
            fault(FaultKind::Trap, format!("trapped: {trap}"))
        } else {
            fault(FaultKind::Other, format!("failed: {}", e.root_cause()))
        };
        log_guest_backtrace(&fault, &e);
        fault
    }

    /// Sets up a call: its deadline (`armed`), fuel, and what the last call left behind.
    fn arm(&mut self, armed: Armed) {
        let ticks = Self::deadline_ticks(armed.timeout());
        self.store.set_epoch_deadline(ticks);
        // Each call gets the whole budget again (its engine counts fuel, so this cannot fail).
        if self.metered {
            let _ = self.store.set_fuel(self.policy.fuel.unwrap_or(u64::MAX));
        }
        // A refused growth explains a trap of this call, not of a later one.
        self.store.data_mut().limiter.denied = None;
        // A blocking WASI call of this call ends at its deadline too (see `io_guard`).
        let state = self.store.data_mut();
        state.deadline = Some(std::time::Instant::now() + armed.timeout());
        state.armed = armed;
        state.cancel_told = false;
    }

    fn lifecycle<T>(
        &mut self,
        call: impl FnOnce(&Backend, &mut Store<SandboxState>) -> wasmtime::Result<T>,
    ) -> Result<T, Fault> {
        self.arm(Armed::Lifecycle(self.policy.load_timeout));
        let result = call(&self.bindings, &mut self.store);
        self.faulted |= result.is_err();
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

    pub fn initialize_model(&mut self, info: &OwnedModelInfo) -> Result<(), CallError> {
        self.init(Level::Model, |b, s| b.nereus_backend_lifecycle().call_initialize_model(s, info.lend()))
    }

    pub fn initialize_instance(&mut self, info: &OwnedInstanceInfo) -> Result<(), CallError> {
        self.init(Level::Instance, |b, s| b.nereus_backend_lifecycle().call_initialize_instance(s, info.lend()))
    }

    /// Runs `execute` over `batch`, its WASI calls allowed to block or not (`may_block`: not
    /// inline on an I/O thread); the batch comes back with each request answered or not.
    pub fn execute(
        &mut self,
        requests: &[Request<'_>],
        batch: ActiveBatch,
        may_block: bool,
    ) -> (ActiveBatch, Executed) {
        let state = self.store.data_mut();
        state.batch = Some(batch);
        state.may_block = may_block;
        self.arm(Armed::Execution(self.policy.execution_timeout));
        // A host function that panics (wasmtime carries the panic out of the guest) must not lose
        // the batch, which sits in the store: catch it, take the batch back, report it.
        let call =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute.call(&mut self.store, requests)));
        let state = self.store.data_mut();
        state.may_block = true;
        // Whatever calls to other models `execute` left running are cancelled, however it ended.
        state.calls.cancel_all();
        let batch = state.batch.take().expect("the batch stays in the store during execute");
        // An interpreter (JavaScript's, Python's) turns a refused memory growth into an exception
        // and may give the batch up with an error instead of trapping: the memory cap stopped it
        // all the same, and its heap is in no state to go on, so it is the same fault as a trap on it.
        let out_of_memory = matches!(call, Ok(Ok(Err(_)))) && state.limiter.denied.is_some();
        self.faulted |= !matches!(call, Ok(Ok(_))) || out_of_memory;
        let executed = match call {
            Ok(Ok(Err(message))) if out_of_memory => {
                let data = self.store.data();
                let denied = data.limiter.denied.as_ref().expect("checked above");
                tracing::debug!("{}: execute returned an error after a refused memory growth: {message}", data.label);
                Executed::Faulted(Fault::memory(&data.label, denied, &self.policy))
            }
            Ok(Ok(returned)) => Executed::Returned(returned),
            Ok(Err(e)) if e.downcast_ref::<WouldBlock>().is_some() => Executed::WouldBlock,
            Ok(Err(e)) => Executed::Faulted(Self::fault_of(&self.store, &self.policy, e)),
            Err(panic) => Executed::HostPanicked(panic_message(&panic)),
        };
        (batch, executed)
    }

    /// Unwinds the lifecycle (instance, model, backend — as far as it got), each call under the
    /// deadline. Errors are logged: finalisation cannot fail a load that is going away. After a
    /// fault there is nothing to run (another call would only fault again, "cannot enter").
    pub fn finalize(mut self) {
        if self.faulted {
            return;
        }
        let label = self.store.data().label.clone();
        let steps: [(Level, FinalizeCall); 3] = [
            (Level::Instance, |b, s| b.nereus_backend_lifecycle().call_finalize_instance(s)),
            (Level::Model, |b, s| b.nereus_backend_lifecycle().call_finalize_model(s)),
            (Level::Backend, |b, s| b.nereus_backend_lifecycle().call_finalize_backend(s)),
        ];
        for (level, step) in steps {
            if self.level >= level
                && let Err(Fault { message: e, .. }) = self.lifecycle(step)
            {
                tracing::warn!("{label}: finalisation failed: {e}");
                return;
            }
        }
    }
}

/// Longer names are shown as they are (only a hostile plugin has them).
const MAX_SYMBOL_BYTES: usize = 1024;
/// Longest readable form a name may take: v0 back-references can blow a short symbol up to a
/// megabyte, again at every frame of every trap of a hostile plugin.
const MAX_DEMANGLED_BYTES: usize = 1024;

/// The readable name of a Rust symbol in a plugin's name section — the legacy scheme (`_ZN…E`,
/// what rustc gives a plugin's own functions) or v0 (`_R…`, the standard library's) — in
/// `rustc-demangle`'s alternate form (no hashes); `None` for any other name (C and WIT export names
/// read well as they are) and for one past the bounds, which is then shown as it is.
fn demangle(symbol: &str) -> Option<String> {
    if symbol.len() > MAX_SYMBOL_BYTES {
        return None;
    }
    let demangled = rustc_demangle::try_demangle(symbol).ok()?;
    let mut out = Bounded(String::new());
    write!(out, "{demangled:#}").ok()?;
    Some(out.0)
}

/// A string that refuses to grow past [`MAX_DEMANGLED_BYTES`], which stops the formatting there.
struct Bounded(String);

impl Write for Bounded {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.0.len() + s.len() > MAX_DEMANGLED_BYTES {
            return Err(std::fmt::Error);
        }
        self.0.push_str(s);
        Ok(())
    }
}

/// wasmtime's hostcall fuel: how many bytes of the guest's lists and strings one call into the
/// host may name. wasmtime counts them as it makes handles on them, before `send-response` counts
/// the response against `sandbox.max_output_bytes`, so its default (128 MiB) refused a response the
/// model's limit allows. It follows that limit, with room for the response's names, shapes and
/// parameters, and never goes below wasmtime's default. The fuel is the store's, for every call
/// into the host: a model whose limit is above 112 MiB also lets its other calls (a business-logic
/// call's inputs, lifted whole) hand the host that much, which its operator chose to allow.
fn hostcall_fuel(max_output_bytes: u64) -> usize {
    const WASMTIME_DEFAULT: usize = 128 << 20;
    const ROOM: u64 = 16 << 20;
    usize::try_from(max_output_bytes.saturating_add(ROOM)).unwrap_or(usize::MAX).max(WASMTIME_DEFAULT)
}

#[cfg(test)]
mod tests {
    use super::{demangle, printable};

    #[test]
    fn rust_symbols_are_demangled_like_rustc_demangle_alternate() {
        for (symbol, name) in [
            // legacy: a plugin's own functions, with escapes and a linker suffix
            ("_ZN11test_faults16panic_on_request17h62dd9e936cf007fdE", "test_faults::panic_on_request"),
            (
                "_ZN59_$LT$test_faults..Faults$u20$as$u20$nereus_sdk..Backend$GT$7execute6deeper17hb19ac7066740ba2cE",
                "<test_faults::Faults as nereus_sdk::Backend>::execute::deeper",
            ),
            ("_ZN4core3ptr13drop_in_place17h0123456789abcdefE.llvm.42", "core::ptr::drop_in_place"),
            // v0: the standard library's, with closures, impls, generics and backreferences
            ("_RNvCsfLfy6EI15iL_7___rustc12___rust_abort", "__rustc::__rust_abort"),
            (
                "_RNvNtNtNtNtCshXfaRvt2tfW_3std3sys3pal4wasi7helpers14abort_internal",
                "std::sys::pal::wasi::helpers::abort_internal",
            ),
            (
                "_RNvXsZ_NtCs8jb7XIKFSSy_5alloc6stringNtB5_6StringNtNtCs9pv848UzQwQ_4core3fmt5Write9write_str.281",
                "<alloc::string::String as core::fmt::Write>::write_str.281",
            ),
            (
                "_RNvMs3_NtCs8jb7XIKFSSy_5alloc7raw_vecINtB5_6RawVecINtNtB7_3vec3VechEE8grow_oneCskp7mYM8O6Yn_4wasi",
                "<alloc::raw_vec::RawVec<alloc::vec::Vec<u8>>>::grow_one",
            ),
            (
                "_RINvNtCs9pv848UzQwQ_4core9panicking13assert_failedllECshXfaRvt2tfW_3std",
                "core::panicking::assert_failed::<i32, i32>",
            ),
            (
                "_RNvNCNKNvNvMNtNtCsjrHSEGnQ3l9_3std4hash6randomNtBa_11RandomState3new4KEYS0s_023___RUST_STD_INTERNAL_VAL",
                "<std::hash::random::RandomState>::new::KEYS::{K#0}::{closure#1}::__RUST_STD_INTERNAL_VAL",
            ),
        ] {
            assert_eq!(demangle(symbol).as_deref(), Some(name), "{symbol}");
        }
    }

    #[test]
    fn other_names_and_names_past_the_bounds_are_left_as_they_are() {
        for symbol in ["abort", "cabi_post_nereus:backend/lifecycle@1.1.0#execute", "_ZN3foo", "_RNvC3fooX"] {
            assert_eq!(demangle(symbol), None, "{symbol}");
        }
        let long = format!("_ZN{}E", "3abc".repeat(300));
        assert_eq!(demangle(&long), None, "longer than the bound");
        // Backreferences that double the output at every step stay within the bounds: a few
        // steps are read, a symbol's worth (about a megabyte in full) is not.
        let doubling = |steps: usize| {
            // `a::f::<(i32, i32), ((i32, i32), (i32, i32)), …>`, each tuple twice the one before
            let mut symbol = String::from("_RINvC1a1fTllE");
            let mut previous = 8;
            for _ in 0..steps {
                let here = symbol.len() - 2;
                let target = format!("B{}_", base62(previous - 1));
                symbol.push_str(&format!("T{target}{target}E"));
                previous = here;
            }
            symbol + "E"
        };
        assert_eq!(
            demangle(&doubling(2)).as_deref(),
            Some("a::f::<(i32, i32), ((i32, i32), (i32, i32)), (((i32, i32), (i32, i32)), ((i32, i32), (i32, i32)))>")
        );
        let hostile = doubling(80);
        assert!(hostile.len() < 1024);
        assert_eq!(demangle(&hostile), None);
    }

    fn base62(mut n: usize) -> String {
        let digits = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let mut out = Vec::new();
        loop {
            out.push(digits[n % 62]);
            n /= 62;
            if n == 0 {
                break;
            }
        }
        out.reverse();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn names_in_the_log_are_bounded_and_cannot_forge_lines() {
        assert_eq!(printable("ok::name<T>"), "ok::name<T>");
        assert_eq!(printable("größe"), "größe");
        assert_eq!(printable("a\nERROR forged\u{202e}"), "a\\u{a}ERROR forged\\u{202e}");
        let long = printable(&"x".repeat(10_000));
        assert_eq!(long.chars().count(), super::MAX_FRAME_NAME_CHARS + 1);
        assert!(long.ends_with('…'));
    }
}
