//! Frontends.
pub mod grpc;
pub mod http;
pub mod restricted;
pub mod tls;
