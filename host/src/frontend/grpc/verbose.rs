//! The verbose log's line for each gRPC call, as tritonserver logs its calls at
//! `--log-verbose=1`: a layer in front of every service, so no handler can forget it.
use std::task::{Context, Poll};

use hyper::http::Request;

/// Wraps a service; see the module's doc.
#[derive(Clone)]
pub struct LogCalls<S>(pub S);

impl<S, B> tower_service::Service<Request<B>> for LogCalls<S>
where
    S: tower_service::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        tracing::debug!("gRPC request: {}", request.uri().path());
        self.0.call(request)
    }
}

/// tritonserver's verbose line for a call its client cancelled, "Cancellation notification
/// received for <handler>" (src/grpc/infer_handler.cc, stream_infer_handler.cc, at
/// `--log-verbose=1`), which operators and Triton's QA (L0_request_cancellation) look for: logged
/// once when dropped before [`answered`](Self::answered), i.e. when the transport gave the call up
/// before its answer was sent — the client cancelled it, its deadline passed, or it went away.
pub struct CancelNotice {
    handler: &'static str,
    answered: bool,
}

impl CancelNotice {
    /// For a call of tritonserver's handler named `handler` (`ModelInferHandler`,
    /// `ModelStreamInferHandler`).
    pub fn new(handler: &'static str) -> Self {
        CancelNotice { handler, answered: false }
    }

    /// The call's answer is out (or the stream's status): no notice.
    pub fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for CancelNotice {
    fn drop(&mut self) {
        if !self.answered {
            tracing::debug!(
                "Cancellation notification received for {}: the call ended before its answer was sent",
                self.handler
            );
        }
    }
}
