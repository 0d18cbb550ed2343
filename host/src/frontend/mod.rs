//! Frontends.
pub mod grpc;
pub mod http;
