//! The integration tests: one test binary, each file of tests/ a module of it (one link of the
//! server's library instead of one per file). They drive the real `nereus` binary over HTTP, gRPC
//! and the command line (`common` starts servers and builds repositories). Run one file's tests
//! with `cargo test --release --test integration FILE::`.
mod common;

mod agreement;
mod batching;
mod bls;
mod busy_poll;
mod classification;
mod cli;
mod cuda_shm;
mod density;
mod ensemble;
mod fuzz_replay;
mod generate;
mod grpc;
mod http;
mod image_demo;
mod large_tensors;
mod metrics;
mod model_config;
mod model_control;
mod object_store;
mod onnx;
mod plugin;
mod repository;
mod response_cache;
mod sandbox;
mod sandbox_budgets;
mod sequence;
mod shm;
mod shutdown;
mod soak;
mod tls;
mod tracing;
