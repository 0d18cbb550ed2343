//! Runs a `wasm32-wasip2` command component (`fn main`) under the engine settings the server gives
//! plugins (Cranelift at `speed`, Wasm SIMD, epoch interruption on), with the arguments after the
//! file and the host's files visible read-only at `/`: the same code built natively and for the
//! sandbox, timed alike, says what the sandbox costs a plugin's computation.
//!
//!   cargo build --release -p nereus --example wasm_command
//!   target/release/examples/wasm_command COMMAND.wasm [ARGS…]
//!
//! `NEREUS_WASM_PRECOMPILE=OUT.cwasm wasm_command COMMAND.wasm` writes the compiled component instead
//! of running it, and `wasm_command OUT.cwasm [ARGS…]` runs that: for tools that would otherwise count
//! or slow down the compilation too (`bench/preprocess_instructions.sh` runs it under valgrind, which
//! must also compile it, since valgrind shows the code fewer CPU features than the machine has).
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::p2::bindings::sync::Command;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};

struct State {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let file = args.first().ok_or_else(|| anyhow::anyhow!("usage: wasm_command COMMAND.wasm [ARGS…]"))?;
    let mut config = Config::new();
    config.wasm_component_model(true).epoch_interruption(true).cranelift_opt_level(wasmtime::OptLevel::Speed);
    // NEREUS_WASM_PROFILER=perfmap names the guest's functions in `perf` profiles, as for the server.
    if std::env::var_os("NEREUS_WASM_PROFILER").is_some_and(|v| v == "perfmap") {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    let engine = Engine::new(&config)?;
    if let Some(out) = std::env::var_os("NEREUS_WASM_PRECOMPILE") {
        std::fs::write(out, engine.precompile_component(&std::fs::read(file)?)?)?;
        return Ok(());
    }
    let component = if file.ends_with(".cwasm") {
        // SAFETY: a file NEREUS_WASM_PRECOMPILE wrote with this engine's settings (for tools
        // such as valgrind, which would otherwise count the compilation too).
        unsafe { Component::deserialize_file(&engine, file)? }
    } else {
        Component::from_file(&engine, file)?
    };
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    let wasi = WasiCtx::builder().inherit_stdio().args(&args).preopened_dir("/", "/", FsPerms::ReadOnly)?.build();
    let mut store = Store::new(&engine, State { wasi, table: ResourceTable::new() });
    store.set_epoch_deadline(u64::MAX);
    let command = Command::instantiate(&mut store, &component, &linker)?;
    command.wasi_cli_run().call_run(&mut store)?.map_err(|()| anyhow::anyhow!("the command failed"))
}
