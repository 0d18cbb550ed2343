//! The body of every HTTP answer: the bytes, in one frame, or in a few (an inference answer's JSON
//! header, then each binary output's own buffer, which hyper writes without copying them into one);
//! or, for a streamed answer (generate's server-sent events), a first frame and then the frames a
//! task sends as they come — a client
//! that goes away drops the body and with it the receiver, which the sending task sees. A traced
//! inference answer also records when hyper starts taking it (HTTP_SEND_START) and when it is done
//! with it (HTTP_SEND_END, when the body is dropped), then lets the trace go, which ends it.
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use super::watchdog::Activity;
use crate::trace::{FrontendEvent, Trace};

pub struct ReplyBody {
    /// What is known when the answer starts, in order.
    data: VecDeque<Bytes>,
    /// The frames after `data`, for a streamed answer.
    frames: Option<tokio::sync::mpsc::Receiver<Bytes>>,
    trace: Option<Trace>,
    sending: bool,
    /// A streamed answer's connection, told of its progress (see `watchdog`).
    watched: Option<Watched>,
}

/// A streamed answer's connection, and whether the answer is waiting for the model now.
struct Watched {
    activity: Arc<Activity>,
    waiting: bool,
}

impl Watched {
    fn wait(&mut self, waiting: bool) {
        if self.waiting != waiting {
            self.waiting = waiting;
            self.activity.waiting_for_model(waiting);
        }
    }
}

impl ReplyBody {
    pub fn new(data: Bytes) -> Self {
        Self::chunks(vec![data])
    }

    /// `chunks`, one after the other.
    pub fn chunks(chunks: Vec<Bytes>) -> Self {
        // In the vector's own allocation (`VecDeque::from` keeps it): this is every answer.
        let mut data = VecDeque::from(chunks);
        data.retain(|c| !c.is_empty());
        ReplyBody { data, frames: None, trace: None, sending: false, watched: None }
    }

    /// `first`, then every frame `frames` receives until its senders are gone.
    pub fn streamed(first: Bytes, frames: tokio::sync::mpsc::Receiver<Bytes>) -> Self {
        let mut body = Self::new(first);
        body.frames = Some(frames);
        body
    }

    /// Tells the connection's watchdog of this answer's progress, when it is streamed: a stream
    /// that sends, or waits for the model, keeps its connection open.
    pub fn watch(&mut self, activity: &Arc<Activity>) {
        if self.frames.is_some() {
            self.watched = Some(Watched { activity: activity.clone(), waiting: false });
        }
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

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        this.start_sending();
        let polled = match this.data.pop_front() {
            Some(chunk) => Poll::Ready(Some(chunk)),
            None => match &mut this.frames {
                None => Poll::Ready(None),
                Some(frames) => {
                    let polled = frames.poll_recv(cx);
                    if let Poll::Ready(None) = polled {
                        this.frames = None;
                    }
                    polled
                }
            },
        };
        if let Some(watched) = &mut this.watched {
            watched.wait(polled.is_pending());
            if let Poll::Ready(Some(_)) = polled {
                watched.activity.frame_sent();
            }
        }
        polled.map(|frame| frame.map(|f| Ok(Frame::data(f))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_empty() && self.frames.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.frames {
            None => SizeHint::with_exact(self.data.iter().map(|c| c.len() as u64).sum()),
            Some(_) => SizeHint::default(),
        }
    }
}

impl Drop for ReplyBody {
    fn drop(&mut self) {
        if let Some(watched) = &mut self.watched {
            watched.wait(false);
        }
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
    async fn chunks_go_out_in_order_as_frames_of_their_own() {
        let body = ReplyBody::chunks(vec![Bytes::from_static(b"{}"), Bytes::new(), Bytes::from_static(b"tensor")]);
        assert_eq!(body.size_hint().exact(), Some(8));
        let mut body = body;
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(
            frames,
            vec![Bytes::from_static(b"{}"), Bytes::from_static(b"tensor")],
            "the empty chunk is no frame"
        );
    }

    #[tokio::test]
    async fn the_body_is_its_bytes_in_one_frame() {
        let body = ReplyBody::new(Bytes::from_static(b"hello"));
        assert_eq!(body.size_hint().exact(), Some(5));
        assert_eq!(body.collect().await.unwrap().to_bytes(), Bytes::from_static(b"hello"));
        let empty = ReplyBody::new(Bytes::new());
        assert!(empty.is_end_stream());
        assert!(empty.collect().await.unwrap().to_bytes().is_empty());
    }

    #[tokio::test]
    async fn a_streamed_body_ends_when_its_senders_are_gone() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let body = ReplyBody::streamed(Bytes::from_static(b"a"), rx);
        assert!(!body.is_end_stream() && body.size_hint().exact().is_none());
        tokio::spawn(async move {
            for frame in [&b"b"[..], b"c"] {
                tx.send(Bytes::from_static(frame)).await.unwrap();
            }
        });
        assert_eq!(body.collect().await.unwrap().to_bytes(), Bytes::from_static(b"abc"));
    }
}
