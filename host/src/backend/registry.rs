//! Which backend loads a model: the native ones by name, every other name a sandboxed WebAssembly
//! component. A new native backend is one line here.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use super::BackendFactory;
use super::onnx::OnnxBackend;
use super::wasm::{SandboxBudget, WasmBackends, WasmRuntime};
use crate::model::ModelResolver;

/// What the backends need from the server's options.
pub struct BackendOptions {
    pub runtime: Arc<WasmRuntime>,
    /// `--backend-directory`: where Wasm components live as `<dir>/<backend>/<backend>.wasm`.
    pub backend_dir: Option<PathBuf>,
    /// The ONNX Runtime library `onnxruntime` models load.
    pub onnxruntime_library: Option<PathBuf>,
    /// Auto-complete configurations from the models.
    pub autocomplete: bool,
    /// The operator's sandbox limits and the server-wide totals.
    pub sandbox: Arc<SandboxBudget>,
    /// How a plugin finds the models it calls (the server's model table; weak, as the table
    /// holds the models whose instances hold this).
    pub models: Weak<dyn ModelResolver>,
}

/// Every backend the server can load models with.
pub struct Backends {
    native: HashMap<&'static str, Arc<dyn BackendFactory>>,
    sandboxed: Arc<dyn BackendFactory>,
    /// Configurations are completed from the models (`--disable-auto-complete-config` and
    /// `--strict-model-config=true` turn it off).
    autocomplete: bool,
}

impl Backends {
    pub fn new(options: BackendOptions) -> Self {
        let mut native: HashMap<&'static str, Arc<dyn BackendFactory>> = HashMap::new();
        native.insert("onnxruntime", Arc::new(OnnxBackend::new(options.onnxruntime_library, options.autocomplete)));
        Backends {
            native,
            autocomplete: options.autocomplete,
            sandboxed: Arc::new(WasmBackends::new(
                options.runtime,
                options.backend_dir,
                options.sandbox,
                options.models,
            )),
        }
    }

    /// The factory of backend `name` (as [`super::backend_name`] reads it from a configuration).
    pub fn factory(&self, name: &str) -> Arc<dyn BackendFactory> {
        self.native.get(name).cloned().unwrap_or_else(|| self.sandboxed.clone())
    }

    /// Whether configurations are completed from the models (tritonserver's auto-complete), which
    /// also decides when their inputs and outputs are checked.
    pub fn autocomplete(&self) -> bool {
        self.autocomplete
    }
}
