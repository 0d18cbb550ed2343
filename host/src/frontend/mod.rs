//! Frontends.
pub mod accept;
pub mod connections;
pub mod grpc;
pub mod http;
pub mod io_threads;
pub mod metrics;
pub mod restricted;
pub mod tls;
