//! A call's deadline (`grpc-timeout`), kept as gRPC core's server keeps it: a call still running
//! when its deadline passes is ended with DEADLINE_EXCEEDED "Deadline Exceeded", the status and
//! message the client's own timer gives it, so a client reads the same whichever side ends the call
//! first. Ending it drops the call's future, which cancels its request as a vanished client does.
//!
//! As tonic's own deadline layer, it bounds the call until its response starts: a unary call's
//! whole answer, a stream's opening. An unreadable header is no deadline.
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::http::{HeaderMap, Request, Response};
use tonic::Status;
use tonic::body::Body;

/// Wraps the gRPC services; see the module's doc.
#[derive(Clone)]
pub struct Deadline<S>(pub S);

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower_service::Service<Request<B>> for Deadline<S>
where
    S: tower_service::Service<Request<B>, Response = Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = futures::future::Either<S::Future, BoxFuture<Result<Response<Body>, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        use futures::future::Either;
        let Some(timeout) = timeout(request.headers()) else {
            return Either::Left(self.0.call(request));
        };
        let answer = self.0.call(request);
        Either::Right(Box::pin(async move {
            match tokio::time::timeout(timeout, answer).await {
                Ok(answered) => answered,
                Err(_) => Ok(Status::deadline_exceeded("Deadline Exceeded").into_http()),
            }
        }))
    }
}

/// The `grpc-timeout` header's duration: at most 8 digits and a unit (PROTOCOL-HTTP2.md).
fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(value: &str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert("grpc-timeout", value.parse().unwrap());
        timeout(&headers)
    }

    #[test]
    fn reads_every_unit_and_refuses_what_the_protocol_does_not_allow() {
        assert_eq!(parsed("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parsed("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parsed("4S"), Some(Duration::from_secs(4)));
        assert_eq!(parsed("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parsed("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(parsed("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "m", "100", "123456789m", "1.5S", "-1S", "10x", "1 S"] {
            assert_eq!(parsed(bad), None, "{bad:?}");
        }
        assert_eq!(timeout(&HeaderMap::new()), None);
    }
}
