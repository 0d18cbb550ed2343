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
