//! The protocol-neutral request layer: what the HTTP and gRPC frontends do that is not wire format.
//! A frontend decodes its protocol into the types here and the server's, calls these functions (or
//! the [`crate::server::Server`] methods they sit beside), and encodes what comes back; the
//! decisions — Triton's reserved request parameters, shared-memory placement, running a request to
//! its answer, what an unimplemented extension answers — are made once, here, for both.
pub mod infer;
pub mod params;
pub mod repository;
pub mod trace;

use crate::error::InferError;

/// What an extension this server does not implement answers, on either protocol (HTTP 501, gRPC
/// UNIMPLEMENTED), naming the extension.
pub fn unimplemented(extension: &str) -> InferError {
    InferError::unsupported(format!("the {extension} extension is not implemented by this server yet"))
}
