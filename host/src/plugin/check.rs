//! `nereus plugin check FILE.wasm [--config config.pbtxt]`: what a component is, before it is
//! deployed. Without a configuration: the `nereus:backend` version it targets, its exports, each
//! interface it imports with what the sandbox grants, and whether the server would load it — the
//! reasons are the load path's own ([`crate::backend::wasm::inspect`]). With one: the server's
//! real load of the model from a scratch repository (the same messages a deployment would show),
//! then one request of zeros, whose outputs are checked against the configuration as a client's
//! would be.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::backend::wasm::inspect::{ComponentReport, HOST_WORLD_VERSION, Import};
use crate::backend::wasm::{Metering, WasmRuntime};
use crate::cli::Cli;
use crate::config::ModelConfig;
use crate::config::schema::model_config::SchedulingChoice;
use crate::request::{CorrelationId, InferenceRequest, Tensor};
use crate::server::Server;
use crate::tensor::{DataType, shape_string};

pub fn check(file: &Path, config: Option<&Path>) -> anyhow::Result<bool> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let digest: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    println!("component  {} ({} bytes, sha256 {})", file.display(), bytes.len(), &digest[..16]);
    // The server's own component cache: the trial load below, and a `nereus serve` after, find
    // the compiled code there instead of compiling it again (a Python component takes tens of
    // seconds to compile).
    let runtime =
        WasmRuntime::new(trial_args(Path::new("."))?.cache_directory()).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    match runtime.load(&bytes, Metering::Off) {
        Ok((compiled, _)) => print_report(&compiled.report),
        // Refused: the report, from a compilation of its own, then the reason.
        Err(e) => {
            if let Ok(report) = runtime.inspect(&bytes) {
                print_report(&report);
            }
            println!("verdict    does not load: {e:#}");
            return Ok(false);
        }
    }
    println!("verdict    loads");
    match config {
        Some(config) => trial(file, config),
        None => Ok(true),
    }
}

fn print_report(report: &ComponentReport) {
    match report.world {
        Some(v) => println!("world      nereus:backend@{v} (this server implements up to {HOST_WORLD_VERSION})"),
        None => println!("world      none: it exports no nereus:backend/lifecycle"),
    }
    println!("exports    {}", if report.exports.is_empty() { "nothing".into() } else { report.exports.join(", ") });
    // One line per capability, in the order the component first asks for it, naming the
    // interfaces (without their versions) that ask for it.
    let mut wants: Vec<(&Import, Vec<&str>)> = Vec::new();
    for import in &report.imports {
        let interface = import.name.split('@').next().unwrap_or(&import.name);
        match wants.iter_mut().find(|(first, _)| first.capability == import.capability && first.grant == import.grant) {
            Some((_, names)) => names.push(interface),
            None => wants.push((import, vec![interface])),
        }
    }
    let width = wants.iter().map(|(i, _)| i.capability.len()).max().unwrap_or(0);
    for (n, (import, names)) in wants.iter().enumerate() {
        let head = if n == 0 { "wants" } else { "" };
        println!(
            "{head:<10} {:<width$}  {:<17}  {} ({})",
            import.capability,
            import.grant.to_string(),
            import.note,
            names.join(", ")
        );
    }
}

/// Loads the component as the model `config` describes, in a server of its own over a scratch
/// repository, and sends it one request of zeros.
fn trial(file: &Path, config_path: &Path) -> anyhow::Result<bool> {
    let text =
        std::fs::read_to_string(config_path).with_context(|| format!("cannot read {}", config_path.display()))?;
    let config = crate::config::parse_pbtxt(&text).map_err(|e| anyhow::anyhow!("{}: {e}", config_path.display()))?;
    let model_dir = config_path.parent().unwrap_or(Path::new("."));
    let name = match config.name.as_str() {
        "" => model_dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "model".into()),
        name => name.to_string(),
    };
    if config.backend.is_empty() {
        println!("load       the configuration names no 'backend': it must name the plugin");
        return Ok(false);
    }
    let scratch = Scratch::new()?;
    scratch.lay_out(&name, &config.backend, &text, file, model_dir)?;
    let args = trial_args(&scratch.0)?;
    let (options, _) = args.server_options(1)?;
    let server = Server::start(options)?;
    server.load_startup_models()?;
    let loaded = server.index(false).into_iter().filter(|m| m.name == name).collect::<Vec<_>>();
    let mut ok = !loaded.is_empty();
    for m in &loaded {
        let reason = if m.reason.is_empty() { String::new() } else { format!(": {}", m.reason) };
        println!("load       model '{name}' version {}: {}{reason}", m.version, m.state);
        ok &= m.state == "READY";
    }
    if loaded.is_empty() {
        println!("load       model '{name}' was not found in the scratch repository");
    }
    if ok {
        let full = server.config(&name, None).ok().and_then(|json| crate::config::from_json(&json.to_string()).ok());
        smoke(&server, &name, full.as_ref().unwrap_or(&config));
    }
    server.begin_shutdown();
    server.stop_models();
    server.unload_all();
    Ok(ok)
}

/// The trial server's settings: `nereus serve`'s defaults on `repository`, without metrics.
fn trial_args(repository: &Path) -> anyhow::Result<crate::cli::ServeArgs> {
    let cli = <Cli as clap::Parser>::try_parse_from(
        ["nereus", "serve", "--allow-metrics=false", "--model-repository"]
            .map(std::ffi::OsString::from)
            .into_iter()
            .chain([repository.as_os_str().to_owned()]),
    )?;
    match cli.command {
        Some(crate::cli::Command::Serve(args)) => Ok(*args),
        _ => anyhow::bail!("internal: the trial server's arguments did not parse as `serve`"),
    }
}

/// Sends one request of zeros (empty strings for BYTES), the smallest the configuration allows,
/// and says what came back. Informative only: zeros need not be a valid input for every model
/// (an image decoder refuses them), so a refusal here does not fail the check.
fn smoke(server: &Arc<Server>, name: &str, config: &ModelConfig) {
    let request = match zeros_for(name, config) {
        Ok(request) => request,
        Err(why) => {
            println!("request    not tried: {why}");
            return;
        }
    };
    let described: Vec<String> =
        request.inputs.iter().map(|t| format!("{} {} {}", t.name, t.datatype, shape_string(&t.shape))).collect();
    println!("request    zeros: {}", described.join(", "));
    let outcome = tokio::runtime::Builder::new_current_thread().enable_all().build().map(|rt| {
        rt.block_on(async {
            let (mut stream, _) = server.infer_stream(request)?;
            let mut responses = Vec::new();
            while let Some(item) = stream.recv().await {
                if let Some(response) = item.response {
                    responses.push(response?);
                }
                if item.final_ {
                    break;
                }
            }
            Ok::<_, crate::error::InferError>(responses)
        })
    });
    match outcome {
        Ok(Ok(responses)) if responses.is_empty() => println!("response   none (a decoupled model may answer nothing)"),
        Ok(Ok(responses)) => {
            for response in responses {
                let outputs: Vec<String> = response
                    .outputs
                    .iter()
                    .map(|t| format!("{} {} {}", t.name, t.datatype, shape_string(&t.shape)))
                    .collect();
                println!("response   {}", outputs.join(", "));
            }
        }
        Ok(Err(e)) => println!("response   error (HTTP {}): {}", e.http_status(), e.message),
        Err(e) => println!("response   not tried: {e}"),
    }
}

/// The request of zeros for `config`: each required input at its configured shape (a variable
/// dimension as 1, a batch of 1 when the model batches).
fn zeros_for(name: &str, config: &ModelConfig) -> Result<InferenceRequest, String> {
    let batching = config.max_batch_size > 0;
    let mut inputs = Vec::new();
    for input in config.input.iter().filter(|i| !i.optional) {
        let datatype = DataType::from_config(input.data_type)
            .ok_or_else(|| format!("input '{}' has no usable data type", input.name))?;
        let mut shape: Vec<i64> = if batching { vec![1] } else { Vec::new() };
        shape.extend(input.dims.iter().map(|&d| if d < 0 { 1 } else { d }));
        let count = shape.iter().product::<i64>().max(0) as usize;
        let bytes = match datatype.element_size() {
            Some(size) => count * size,
            // Each BYTES element: a 4-byte length of zero.
            None => count * 4,
        };
        inputs.push(Tensor { name: input.name.clone(), datatype, shape, data: Bytes::from(vec![0u8; bytes]) });
    }
    let sequence = matches!(config.scheduling_choice, Some(SchedulingChoice::SequenceBatching(_)));
    Ok(InferenceRequest {
        model_name: name.to_string(),
        model_version: None,
        id: "nereus-plugin-check".into(),
        correlation_id: if sequence { CorrelationId::Numeric(1) } else { CorrelationId::None },
        sequence_start: sequence,
        sequence_end: sequence,
        priority: 0,
        timeout_us: 0,
        parameters: Vec::new(),
        inputs,
        requested_outputs: Vec::new(),
        trace: None,
        calls: Default::default(),
        shm_inputs: Default::default(),
        device_inputs: Default::default(),
        device_outputs: Default::default(),
        host_outputs: Vec::new(),
    })
}

/// A scratch repository under the temporary folder, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("nereus-plugin-check-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Scratch(dir))
    }

    /// `<scratch>/<name>/config.pbtxt`, the component as `<name>/<backend>.wasm`, and the model
    /// folder's version folders (their files linked, not copied) without a component of their own,
    /// so that the one checked is the one loaded. No version folder: an empty `1/`.
    fn lay_out(&self, name: &str, backend: &str, config: &str, file: &Path, model_dir: &Path) -> anyhow::Result<()> {
        let model = self.0.join(name);
        std::fs::create_dir_all(&model)?;
        std::fs::write(model.join("config.pbtxt"), config)?;
        let component = format!("{backend}.wasm");
        std::fs::copy(file, model.join(&component)).with_context(|| format!("cannot copy {}", file.display()))?;
        let mut versions = 0;
        for entry in std::fs::read_dir(model_dir).into_iter().flatten().flatten() {
            let version_name = entry.file_name();
            let is_version = version_name.to_str().is_some_and(|v| v.parse::<u64>().is_ok());
            if !is_version || !entry.path().is_dir() {
                continue;
            }
            let version = model.join(&version_name);
            std::fs::create_dir_all(&version)?;
            versions += 1;
            for file in std::fs::read_dir(entry.path())?.flatten() {
                if file.file_name() != component.as_str() {
                    let target = std::fs::canonicalize(file.path())?;
                    std::os::unix::fs::symlink(target, version.join(file.file_name()))?;
                }
            }
        }
        if versions == 0 {
            std::fs::create_dir_all(model.join("1"))?;
        }
        Ok(())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
