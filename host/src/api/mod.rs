//! The protocol-neutral request layer: what the HTTP and gRPC frontends do that is not wire format.
//! A frontend decodes its protocol into the types here and the server's, calls these functions (or
//! the [`crate::server::Server`] methods they sit beside), and encodes what comes back; the
//! decisions — Triton's reserved request parameters, shared-memory placement, running a request to
//! its answer, classification — are made once, here, for both.
pub mod classification;
pub mod headers;
pub mod infer;
pub mod params;
pub mod repository;
pub mod trace;
