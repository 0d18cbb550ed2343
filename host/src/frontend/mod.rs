//! Frontends.
pub mod http;
