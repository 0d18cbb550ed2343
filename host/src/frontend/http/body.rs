//! The body of every HTTP answer: the bytes, in one frame. A traced inference answer also records
//! when hyper starts taking it (HTTP_SEND_START) and when it is done with it (HTTP_SEND_END, when
//! the body is dropped), then lets the trace go, which ends it.
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::trace::{FrontendEvent, Trace};

pub struct ReplyBody {
    data: Bytes,
    trace: Option<Trace>,
    sending: bool,
}

impl ReplyBody {
    pub fn new(data: Bytes) -> Self {
        ReplyBody { data, trace: None, sending: false }
    }

    /// Records the sending of this body into `trace`.
    pub fn trace(&mut self, trace: Trace) {
        self.trace = Some(trace);
    }

    fn start_sending(&mut self) {
        if !self.sending {
            self.sending = true;
            if let Some(trace) = &self.trace {
                trace.capture(FrontendEvent::HttpSendStart, Instant::now());
            }
        }
    }
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        this.start_sending();
        if this.data.is_empty() {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Frame::data(std::mem::take(&mut this.data)))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.len() as u64)
    }
}

impl Drop for ReplyBody {
    fn drop(&mut self) {
        if self.trace.is_some() {
            self.start_sending();
            if let Some(trace) = self.trace.take() {
                trace.capture(FrontendEvent::HttpSendEnd, Instant::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn the_body_is_its_bytes_in_one_frame() {
        let body = ReplyBody::new(Bytes::from_static(b"hello"));
        assert_eq!(body.size_hint().exact(), Some(5));
        assert_eq!(body.collect().await.unwrap().to_bytes(), Bytes::from_static(b"hello"));
        let empty = ReplyBody::new(Bytes::new());
        assert!(empty.is_end_stream());
        assert!(empty.collect().await.unwrap().to_bytes().is_empty());
    }
}
