//! Nereus: an inference server that speaks Triton's protocols and model-repository format, runs
//! custom backends as sandboxed WebAssembly components, and does scheduling natively.
//!
//! The request path, top to bottom: [`frontend`] decodes a request into an
//! [`request::InferenceRequest`]; [`server::Server`] resolves the model version; [`model`] validates
//! it ([`validate`]) and hands it to the model's [`scheduler`]; an instance worker executes the
//! batch in its [`backend`]; the backend answers through the request's [`request::ResponseSender`];
//! the frontend encodes the response.
#![deny(unsafe_code)]

pub mod api;
pub mod backend;
pub mod bulk_copy;
pub mod busy_poll;
pub mod call_chain;
pub mod cli;
pub mod config;
pub mod control;
pub mod device_io;
pub mod ensemble;
pub mod error;
pub mod frontend;
pub mod gpu;
pub mod labels;
pub mod large_pages;
pub mod load_error;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod plugin;
pub mod proto;
pub mod repository;
pub mod request;
pub mod response_cache;
pub mod scheduler;
pub mod server;
pub mod shm;
pub mod shutdown;
pub mod startup_summary;
pub mod stats;
pub mod tensor;
pub mod test_hooks;
pub mod trace;
pub mod validate;
