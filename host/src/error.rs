//! Errors that reach clients, as one typed enum mapped once to HTTP (here) and gRPC (in its
//! frontend). Internal details stay in the logs; the message is what the client sees.
//!
//! A model that fails to load is not a request's error: `load_error::LoadError` says why, and a
//! request that reaches the model later gets an `InferError` (UNAVAILABLE) quoting it.

/// The class of a failure, Triton's TRITONSERVER_Error_Code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The client sent something wrong (400).
    InvalidArg,
    /// Unknown model or version (404).
    NotFound,
    /// The model exists but cannot serve now (503).
    Unavailable,
    /// The server does not implement this (501).
    Unsupported,
    /// A backend failed while executing a request (500, as Triton's backends report INTERNAL).
    Internal,
    /// The request was rejected before execution, e.g. by a queue limit or timeout (400, as Triton).
    Unknown,
    /// A restricted API without its header (HTTP 403; gRPC UNAVAILABLE, as Triton answers).
    Restricted,
    /// The client took too long to send its request (HTTP 408; gRPC DEADLINE_EXCEEDED).
    Timeout,
    /// The request body's encoding is not one the server reads (HTTP 415).
    UnsupportedEncoding,
    /// The request was cancelled: its client went away or cancelled it (HTTP 400 as tritonserver
    /// maps it; gRPC CANCELLED).
    Cancelled,
    /// Something of that name exists already, e.g. a shared-memory region (HTTP 400, as Triton has
    /// no closer code; gRPC ALREADY_EXISTS).
    AlreadyExists,
}

/// A client-facing error. `Clone` so one failed batch fails every request in it. Its `Display` is
/// the message alone.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InferError {
    pub kind: ErrorKind,
    pub message: String,
}

impl InferError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        InferError { kind, message: message.into() }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArg, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn restricted(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Restricted, message)
    }
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Timeout, message)
    }

    /// The HTTP status Triton uses for this kind (docs/protocol/README.md): the one mapping of an
    /// error to HTTP (gRPC's is `frontend::grpc::convert::status`).
    pub fn http_status(&self) -> u16 {
        match self.kind {
            ErrorKind::InvalidArg | ErrorKind::Unknown | ErrorKind::AlreadyExists | ErrorKind::Cancelled => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::Unavailable => 503,
            ErrorKind::Unsupported => 501,
            ErrorKind::Internal => 500,
            ErrorKind::Restricted => 403,
            ErrorKind::Timeout => 408,
            ErrorKind::UnsupportedEncoding => 415,
        }
    }
}
