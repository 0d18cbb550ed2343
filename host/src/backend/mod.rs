//! Backends: what executes a model's batches. The scheduler hands batches to instances through
//! [`BackendInstance`] and never knows which backend runs them.
pub mod batch;
pub mod onnx;
pub mod onnx_autocomplete;
mod onnx_gpu;
pub mod wasm;

use std::path::{Path, PathBuf};

use crate::config::ModelConfig;
use crate::request::Job;
use crate::stats::ExecutionTimes;

/// One execution instance of a model (TRITONBACKEND_ModelInstance): executes one batch at a time.
pub trait BackendInstance: Send + 'static {
    /// Executes `jobs`. When it returns, every job has its final response or error (held in its
    /// sender until the caller flushes it). Returns how long the phases took, for statistics.
    fn execute(&mut self, jobs: &mut Vec<Job>) -> ExecutionTimes;
    /// Finalises the instance (TRITONBACKEND_ModelInstanceFinalize).
    fn finalize(self: Box<Self>);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceKind {
    Cpu,
    Gpu,
    Model,
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

/// Framework backends Triton runs natively that Nereus does not (yet): models naming them load as
/// UNAVAILABLE with this reason rather than being mistaken for a missing Wasm component.
const UNSUPPORTED_FRAMEWORKS: &[&str] =
    &["onnxruntime", "tensorrt", "pytorch", "tensorflow", "python", "openvino", "fil", "dali", "custom"];

/// Which backend a model names: `backend`, or the one Triton maps its `platform` to.
pub fn backend_name(config: &ModelConfig) -> Result<String, String> {
    if !config.backend.is_empty() {
        return Ok(config.backend.clone());
    }
    let mapped = match config.platform.as_str() {
        "" => return Err("the configuration names no 'backend' (or 'platform')".into()),
        "onnxruntime_onnx" => "onnxruntime",
        "tensorrt_plan" => "tensorrt",
        "pytorch_libtorch" => "pytorch",
        "tensorflow_graphdef" | "tensorflow_savedmodel" => "tensorflow",
        "custom" => "custom",
        "ensemble" => return Err("an ensemble has no backend".into()),
        other => return Err(format!("unknown platform '{other}'")),
    };
    Ok(mapped.to_string())
}

/// Where a model's backend component was found.
pub enum ComponentSource {
    File(PathBuf),
    /// Bundled into the `nereus` binary.
    Bundled(&'static [u8]),
}

/// Finds backend `name`'s component for a model version, in the order Triton searches for backend
/// shared libraries: `<model dir>/<version>/`, `<model dir>/`, `<backend dir>/<name>/`; then the
/// backends bundled into the binary.
pub fn find_component(
    name: &str,
    model_dir: &Path,
    version: i64,
    backend_dir: Option<&Path>,
) -> Result<ComponentSource, String> {
    let file = format!("{name}.wasm");
    let mut candidates = vec![model_dir.join(version.to_string()).join(&file), model_dir.join(&file)];
    if let Some(dir) = backend_dir {
        candidates.push(dir.join(name).join(&file));
    }
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(ComponentSource::File(found.clone()));
    }
    #[cfg(feature = "bundled-backends")]
    if let Some((_, bytes)) = nereus_plugins::BUNDLED.iter().find(|(n, _)| *n == name) {
        return Ok(ComponentSource::Bundled(bytes));
    }
    if UNSUPPORTED_FRAMEWORKS.contains(&name) {
        return Err(format!("backend '{name}' is not supported by Nereus (no '{file}' component was found either)"));
    }
    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    Err(format!("unable to find backend '{name}': looked for {}", looked.join(", ")))
}
