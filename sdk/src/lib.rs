//! # nereus-sdk: write Nereus backends in Rust
//!
//! A Nereus backend is a WebAssembly component that implements the `nereus:backend` WIT world
//! (`wit/backend.wit` in the Nereus repository, the reference for every language). This crate wraps
//! the generated bindings so that a backend is a page of code:
//!
//! * [`Backend`]: the trait you implement — build per-instance state, execute a batch;
//! * [`Request`] and [`Tensor`] views: typed element slices ([`Tensor::as_slice`]), BYTES
//!   elements ([`Tensor::bytes_elements`]), batch gathering ([`gather_batch`]);
//! * [`TensorBuilder`]/[`BytesBuilder`] and [`Response`] to answer;
//! * [`Request::call`] to run inference on other models from `execute` ([`models`]: business
//!   logic scripting, with fan-out and decoupled callees);
//! * [`export!`] to turn your type into the component's exports.
//!
//! Build with `cargo build --target wasm32-wasip2 --release`; the `.wasm` that comes out is the
//! component Nereus loads (no extra tooling).
//!
//! ```no_run
//! use nereus_sdk::{Backend, InstanceInfo, ModelInfo, Request, Response, TensorBuilder};
//!
//! /// OUTPUT0 = INPUT0 + INPUT1 for INT32 tensors.
//! struct Add;
//!
//! impl Backend for Add {
//!     fn new(_model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
//!         Ok(Add)
//!     }
//!
//!     fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
//!         for request in requests {
//!             let a = request.input("INPUT0")?.as_slice::<i32>()?;
//!             let b = request.input("INPUT1")?.as_slice::<i32>()?;
//!             let sum: Vec<i32> = a.iter().zip(b.iter()).map(|(x, y)| x.wrapping_add(*y)).collect();
//!             let shape = request.input("INPUT0")?.shape().to_vec();
//!             request.respond(Response::new().output(TensorBuilder::from_slice("OUTPUT0", shape, &sum)))?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! nereus_sdk::export!(Add);
//! ```
#![deny(unsafe_code)]

pub mod models;
mod request;
#[cfg(any(test, all(target_family = "wasm", not(target_feature = "atomics"))))]
#[allow(unsafe_code)] // an allocator; each block says why it is sound
pub mod small_blocks;
mod tensor;

/// Small blocks freed by the plugin are reused without a trip through wasi-libc's allocator
/// ([`small_blocks`]). On by default; a plugin with an allocator of its own turns off the
/// `small-block-cache` feature.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics"), feature = "small-block-cache"))]
#[global_allocator]
static SMALL_BLOCKS: small_blocks::SmallBlocks = small_blocks::SmallBlocks::new();

pub use models::{CallError, CallErrorKind, ModelRequest, ModelResponse, PendingCall};
pub use request::{Request, Response, gather_batch};
pub use tensor::{BytesBuilder, Element, Tensor, TensorBuilder, bytes_elements};

/// The raw bindings generated from `wit/backend.wit`, for what the wrappers do not cover.
#[allow(missing_docs, unsafe_code)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "backend",
        pub_export_macro: true,
        export_macro_name: "__export_backend_world",
        default_bindings_module: "nereus_sdk::bindings",
    });
}

pub use bindings::nereus::backend::host::LogLevel;
pub use bindings::nereus::backend::types::{
    CorrelationId, DataType, ErrorKind, InstanceInfo, InstanceKind, ModelInfo, Parameter, ParameterValue, SequenceFlags,
};

/// Writes a line to the server's log, tagged by the host with the model and instance.
pub fn log(level: LogLevel, message: &str) {
    bindings::nereus::backend::host::log(level, message);
}

/// A backend: per-instance state plus how to execute a batch of requests.
///
/// The host creates one value of your type in each instance's sandbox (`new`), then calls
/// `execute` with each batch the scheduler forms. Every request must be answered: call
/// [`Request::respond`] (or [`Request::fail`]) once per request — or, for a decoupled model, any
/// number of [`Request::send`] followed by [`Request::complete`].
pub trait Backend: Sized + 'static {
    /// Called once per sandbox when the backend is first needed (TRITONBACKEND_Initialize).
    fn initialize_backend(_backend_name: &str) -> Result<(), String> {
        Ok(())
    }

    /// Checks the model (TRITONBACKEND_ModelInitialize): return an error to make it fail to load,
    /// e.g. when the configuration lacks an input this backend needs.
    fn initialize_model(_model: &ModelInfo) -> Result<(), String> {
        Ok(())
    }

    /// Builds the state of one instance (TRITONBACKEND_ModelInstanceInitialize).
    fn new(model: &ModelInfo, instance: &InstanceInfo) -> Result<Self, String>;

    /// Executes a batch (TRITONBACKEND_ModelInstanceExecute). An `Err` fails every request of the
    /// batch that has not been answered yet.
    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String>;
}

/// Glue between the generated `Guest` trait and a [`Backend`]; used by [`export!`].
#[doc(hidden)]
pub mod __private {
    use super::*;
    use std::cell::RefCell;

    pub use bindings::exports::nereus::backend::lifecycle::Guest;

    thread_local! {
        static MODEL: RefCell<Option<ModelInfo>> = const { RefCell::new(None) };
        static STATE: RefCell<Option<Box<dyn std::any::Any>>> = const { RefCell::new(None) };
    }

    pub fn initialize_backend<B: Backend>(name: String) -> Result<(), String> {
        B::initialize_backend(&name)
    }

    pub fn initialize_model<B: Backend>(model: ModelInfo) -> Result<(), String> {
        B::initialize_model(&model)?;
        MODEL.with(|m| *m.borrow_mut() = Some(model));
        Ok(())
    }

    pub fn finalize_model() {
        MODEL.with(|m| m.borrow_mut().take());
    }

    pub fn initialize_instance<B: Backend>(instance: InstanceInfo) -> Result<(), String> {
        let state = MODEL.with(|m| match m.borrow().as_ref() {
            Some(model) => B::new(model, &instance),
            None => Err("initialize-instance called before initialize-model".to_string()),
        })?;
        STATE.with(|s| *s.borrow_mut() = Some(Box::new(state)));
        Ok(())
    }

    pub fn finalize_instance() {
        STATE.with(|s| s.borrow_mut().take());
    }

    pub fn execute<B: Backend>(requests: Vec<bindings::nereus::backend::types::Request>) -> Result<(), String> {
        STATE.with(|s| {
            let mut slot = s.borrow_mut();
            let state = slot
                .as_mut()
                .and_then(|b| b.downcast_mut::<B>())
                .ok_or_else(|| "execute called before initialize-instance".to_string())?;
            let requests = requests.into_iter().enumerate().map(|(i, raw)| Request::new(i as u32, raw)).collect();
            state.execute(requests)
        })
    }
}

/// Exports a [`Backend`] implementation as the component's `nereus:backend/lifecycle`.
///
/// Use it once, at the crate root of a `cdylib` crate: `nereus_sdk::export!(MyBackend);`
#[macro_export]
macro_rules! export {
    ($backend:ty) => {
        #[doc(hidden)]
        pub struct __NereusExport;

        impl $crate::__private::Guest for __NereusExport {
            fn initialize_backend(name: String) -> Result<(), String> {
                $crate::__private::initialize_backend::<$backend>(name)
            }
            fn finalize_backend() {}
            fn initialize_model(model: $crate::ModelInfo) -> Result<(), String> {
                $crate::__private::initialize_model::<$backend>(model)
            }
            fn finalize_model() {
                $crate::__private::finalize_model()
            }
            fn initialize_instance(instance: $crate::InstanceInfo) -> Result<(), String> {
                $crate::__private::initialize_instance::<$backend>(instance)
            }
            fn finalize_instance() {
                $crate::__private::finalize_instance()
            }
            fn execute(
                requests: Vec<$crate::bindings::nereus::backend::types::Request>,
            ) -> Result<(), String> {
                $crate::__private::execute::<$backend>(requests)
            }
        }

        $crate::bindings::__export_backend_world!(__NereusExport with_types_in $crate::bindings);
    };
}

/// A `parameters` entry of the model's `config.pbtxt`
/// (`parameters { key: "k" value: { string_value: "v" } }`), or `None` when absent.
pub fn config_parameter(model: &ModelInfo, key: &str) -> Result<Option<String>, String> {
    let config: serde_json::Value =
        serde_json::from_str(&model.config_json).map_err(|e| format!("model config is not JSON: {e}"))?;
    Ok(config
        .get("parameters")
        .and_then(|p| p.get(key))
        .and_then(|v| v.get("string_value"))
        .and_then(|s| s.as_str())
        .map(str::to_string))
}
