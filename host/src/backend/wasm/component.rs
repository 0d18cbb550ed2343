//! Where a backend's component is found: the places Triton searches for a backend's shared library,
//! then the backends bundled into the binary.
use std::path::{Path, PathBuf};

use crate::load_error::LoadError;

/// Framework backends Triton runs natively that Nereus does not (yet): models naming them load as
/// UNAVAILABLE with this reason rather than being mistaken for a missing Wasm component.
const UNSUPPORTED_FRAMEWORKS: &[&str] =
    &["onnxruntime", "tensorrt", "pytorch", "tensorflow", "python", "openvino", "fil", "dali", "custom"];

/// Where a model's backend component was found.
pub enum Source {
    File(PathBuf),
    /// Bundled into the `nereus` binary (never, in a build without `bundled-backends`).
    #[cfg_attr(not(feature = "bundled-backends"), allow(dead_code))]
    Bundled(&'static [u8]),
}

/// Finds backend `name`'s component for a model version, in the order Triton searches for backend
/// shared libraries: `<model dir>/<version>/`, `<model dir>/`, `<backend dir>/<name>/`; then the
/// backends bundled into the binary. The file is `<name>.wasm`, or the configuration's `runtime`
/// where it names one (a file name that must stay inside those folders, as tritonserver requires of
/// a backend library's name); a named runtime is never a bundled backend.
pub fn find(
    name: &str,
    runtime: &str,
    model: &str,
    model_dir: &Path,
    version: i64,
    backend_dir: Option<&Path>,
) -> Result<Source, LoadError> {
    let escapes = Path::new(runtime).components().any(|c| !matches!(c, std::path::Component::Normal(_)));
    if !runtime.is_empty() && escapes {
        return Err(LoadError::RuntimeEscapes { runtime: runtime.into() });
    }
    let file = if runtime.is_empty() { format!("{name}.wasm") } else { runtime.to_string() };
    let mut candidates = vec![model_dir.join(version.to_string()).join(&file), model_dir.join(&file)];
    if let Some(dir) = backend_dir {
        candidates.push(dir.join(name).join(&file));
    }
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(Source::File(found.clone()));
    }
    if !runtime.is_empty() {
        return Err(LoadError::RuntimeNotFound { runtime: runtime.into(), model: model.into(), looked: candidates });
    }
    #[cfg(feature = "bundled-backends")]
    if let Some((_, bytes)) = nereus_plugins::BUNDLED.iter().find(|(n, _)| *n == name) {
        return Ok(Source::Bundled(bytes));
    }
    if UNSUPPORTED_FRAMEWORKS.contains(&name) {
        return Err(LoadError::BackendUnsupported { backend: name.into() });
    }
    Err(LoadError::BackendNotFound { backend: name.into(), looked: candidates })
}
