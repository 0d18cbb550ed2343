//! `ModelInfer` and `ModelStreamInfer` without tonic's codec, for calls neither side compresses.
//!
//! tonic reads a message into a buffer of its own and encodes the answer into another, so a
//! tensor in `raw_output_contents` is copied once more on its way out than over HTTP, where the
//! outputs go out behind the header as they are. For megabyte tensors that copy was a third of
//! the server's CPU a request. This layer takes both inference calls before tonic does (a
//! stream's messages one after the other, each as a unary call's):
//! - **In:** the message is joined once, into a buffer of the size its gRPC prefix announces,
//!   placed so that the first `raw_input_contents` lies on a 64-byte boundary (ONNX Runtime then
//!   reads it where it is). prost decodes it from that buffer, the raw contents as slices of it.
//! - **Out:** the answer's fields are encoded as prost would, except that a large raw output is
//!   not copied behind them: it is the next data frame of the body, the buffer the backend
//!   answered with.
//!
//! The bytes on the wire, the statuses and their messages are tonic's (tests in this module
//! compare the two). A call that compresses, either way, goes to tonic, which knows how.
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use hyper::http::{self, HeaderMap, HeaderValue, Request, Response};
use prost::Message;
use tonic::Status;
use tonic::body::Body;

use super::infer;
use super::verbose::CancelNotice;
use crate::frontend::restricted::{Api, Restrictions};
use crate::proto::inference as pb;
use crate::server::Server;

/// The calls this layer answers.
const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
const MODEL_STREAM_INFER: &str = "/inference.GRPCInferenceService/ModelStreamInfer";

/// gRPC's message prefix: a compressed flag and a big-endian length.
const PREFIX: usize = 5;

/// `raw_input_contents` and `raw_output_contents`' field numbers (grpc_service.proto).
const RAW_INPUT_FIELD: u64 = 7;
const RAW_OUTPUT_FIELD: u32 = 6;

/// `ModelStreamInferResponse`'s `error_message` and `infer_response` field numbers.
const STREAM_ERROR_FIELD: u32 = 1;
const STREAM_RESPONSE_FIELD: u32 = 2;

/// Raw outputs smaller than this are copied behind the fields, so that a small answer is one data
/// frame as tonic's is; larger ones are frames of their own.
const INLINE_BELOW: usize = 64 << 10;

/// What the direct path needs of the server; shared by every connection's copy of the layer.
pub struct Direct {
    pub server: Arc<Server>,
    pub restricted: Arc<Restrictions>,
    /// `--grpc-max-message-size` (tonic's decoding and encoding limits).
    pub max_message_size: usize,
    /// `--grpc-stream-stall-timeout-ms` (see [`super::stream`]).
    pub stream_stall_timeout: Option<std::time::Duration>,
    /// `--grpc-header-forward-pattern`.
    pub forward_headers: Option<crate::api::headers::HeaderForward>,
}

/// The layer's service: `ModelInfer` and `ModelStreamInfer` calls without compression go to
/// [`serve`] and [`serve_stream`], everything else to `inner` (tonic's routes). `direct` is `None`
/// when responses are to be compressed.
#[derive(Clone)]
pub struct DirectInfer<S> {
    pub direct: Option<Arc<Direct>>,
    /// tritonserver's testing hook `TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC`: every call but
    /// the inference ones is answered this much later, after its work is done (Triton's
    /// L0_client_timeout sets it to see clients' deadlines expire); `None` without it.
    pub delay: Option<std::time::Duration>,
    /// tritonserver's testing hooks `TRITONSERVER_DELAY_RESPONSE_COMPLETION` and
    /// `TRITONSERVER_DELAY_RESPONSE_COMPLETE_EXEC` (ms, added up): a `ModelInfer` call's answer is
    /// held this much longer once its request is done, so that a client's cancellation meanwhile
    /// finds the call still open (Triton's L0_request_cancellation); `None` without them.
    pub infer_delay: Option<std::time::Duration>,
    pub inner: S,
}

/// The delay of `TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC` (whole seconds, as tritonserver's
/// `atoi` reads them: a value that is no number, or zero, is no delay).
pub fn response_delay(value: Option<&str>) -> Option<std::time::Duration> {
    let seconds: u64 = value?.trim().parse().ok()?;
    (seconds > 0).then(|| std::time::Duration::from_secs(seconds))
}

/// The delay of `TRITONSERVER_DELAY_RESPONSE_COMPLETION` and `_COMPLETE_EXEC` (milliseconds each;
/// a value that is no number, or zero, is no delay).
pub fn infer_delay(completion: Option<&str>, complete_exec: Option<&str>) -> Option<std::time::Duration> {
    let ms = |v: Option<&str>| v.and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0);
    let total = ms(completion).saturating_add(ms(complete_exec));
    (total > 0).then(|| std::time::Duration::from_millis(total))
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower_service::Service<Request<Body>> for DirectInfer<S>
where
    S: tower_service::Service<Request<Body>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let path = request.uri().path();
        let delay = match path {
            MODEL_INFER => self.infer_delay,
            MODEL_STREAM_INFER => None,
            _ => self.delay,
        };
        // A unary call's answer is whole once its future is done (a stream's, in `StreamFrames`):
        // dropped before, the call was cancelled.
        let notice = (path == MODEL_INFER).then(|| CancelNotice::new("ModelInferHandler"));
        match (&self.direct, takes(&request)) {
            (Some(direct), Some(Call::Infer)) => {
                let direct = direct.clone();
                Box::pin(answered(async move { Ok(serve(&direct, request).await) }, delay, notice))
            }
            (Some(direct), Some(Call::StreamInfer)) => {
                let response = serve_stream(direct, request);
                Box::pin(async move { Ok(response) })
            }
            _ => Box::pin(answered(self.inner.call(request), delay, notice)),
        }
    }
}

/// `answer`, held `delay` longer when the testing hooks set one, and `notice` told once it is
/// out: one future (one allocation a call) for both.
async fn answered<F: Future>(answer: F, delay: Option<Duration>, notice: Option<CancelNotice>) -> F::Output {
    let response = answer.await;
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    if let Some(mut notice) = notice {
        notice.answered();
    }
    response
}

/// The calls this layer answers.
enum Call {
    Infer,
    StreamInfer,
}

/// Which call of this layer's a request is, if its messages are not compressed.
fn takes(request: &Request<Body>) -> Option<Call> {
    let call = match request.uri().path() {
        MODEL_INFER => Call::Infer,
        MODEL_STREAM_INFER => Call::StreamInfer,
        _ => return None,
    };
    request.headers().get("grpc-encoding").is_none_or(|e| e.as_bytes() == b"identity").then_some(call)
}

/// Answers one call: the answer's frames, or tonic's trailers-only error.
async fn serve(direct: &Direct, request: Request<Body>) -> Response<Body> {
    match answer(direct, request).await {
        Ok(frames) => {
            let mut response = Response::new(Body::new(frames));
            response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            response
        }
        Err(status) => status.into_http(),
    }
}

async fn answer(direct: &Direct, request: Request<Body>) -> Result<Frames, Status> {
    let (parts, body) = request.into_parts();
    let read_start = Instant::now();
    let message = read_message(body, direct.max_message_size).await?;
    let read_end = Instant::now();
    let message = pb::ModelInferRequest::decode(message).map_err(|e| Status::internal(e.to_string()))?;
    super::allow_headers(&direct.restricted, Api::Inference, &parts.headers)?;
    let forward = direct.forward_headers.as_ref();
    let response = match forward {
        // Forwarded headers are read as gRPC metadata (a `-bin` value decoded), as tonic's path
        // and tritonserver read them.
        Some(_) => {
            let metadata = tonic::metadata::MetadataMap::from_headers(parts.headers);
            infer(&direct.server, message, &metadata, forward, (read_start, read_end)).await?
        }
        None => infer(&direct.server, message, &parts.headers, None, (read_start, read_end)).await?,
    };
    encode(response, direct.max_message_size)
}

/// Answers one `ModelStreamInfer` call: its requests are read here, one message after the other,
/// and served by [`stream`](super::stream) as tonic's are; its answers are encoded as
/// [`encode`] does a unary call's, each large raw output a frame of its own.
fn serve_stream(direct: &Direct, request: Request<Body>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    if let Err(status) = super::allow_headers(&direct.restricted, Api::Inference, &parts.headers) {
        return status.into_http();
    }
    // The stream's headers are every one of its requests' trace context and forwarded headers.
    let metadata = tonic::metadata::MetadataMap::from_headers(parts.headers);
    let context = super::StreamHeaders::new(&metadata, direct.forward_headers.as_ref());
    let requests = requests(Messages::new(body, direct.max_message_size));
    let answers = super::stream::serve(direct.server.clone(), requests, context, direct.stream_stall_timeout);
    let frames = StreamFrames {
        answers,
        chunks: VecDeque::new(),
        ended: false,
        limit: direct.max_message_size,
        notice: CancelNotice::new("ModelStreamInferHandler"),
    };
    let mut response = Response::new(Body::new(frames));
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

/// A stream's requests, decoded as they are read; the stream ends after the first error, which
/// is tonic's for the same bytes.
fn requests(messages: Messages) -> impl super::stream::Incoming {
    Box::pin(futures::stream::unfold(Some(messages), |messages| async move {
        let mut messages = messages?;
        match messages.next().await {
            Ok(Some(message)) => {
                let decoded = pb::ModelInferRequest::decode(message).map_err(|e| Status::internal(e.to_string()));
                Some((decoded, Some(messages)))
            }
            Ok(None) => None,
            Err(status) => Some((Err(status), None)),
        }
    }))
}

/// Reads a call's one message (see [`Messages::next`]), then the body to its end, as tonic does
/// (its trailers would be metadata, which ModelInfer does not read).
async fn read_message(body: Body, limit: usize) -> Result<Bytes, Status> {
    let mut messages = Messages::new(body, limit);
    let message = messages.next().await?.ok_or_else(|| Status::internal("Missing request message."))?;
    while let Some(frame) = messages.body.frame().await {
        frame?;
    }
    Ok(message)
}

/// A call's messages, read one after the other from its body.
struct Messages {
    body: Body,
    /// Bytes read past the last message: the start of the next.
    pending: Vec<Bytes>,
    /// `--grpc-max-message-size`.
    limit: usize,
}

impl Messages {
    fn new(body: Body, limit: usize) -> Self {
        Messages { body, pending: Vec::new(), limit }
    }

    /// The next message, joined once into a buffer of the length its prefix announces (tonic's
    /// limit and messages when it is longer than the limit or cut short); `None` when the body
    /// ends where a message would start.
    async fn next(&mut self) -> Result<Option<Bytes>, Status> {
        // Frames are held until the first raw input's place in the message is known (they are the
        // connection's buffers: holding them copies nothing), then joined.
        let mut held = std::mem::take(&mut self.pending);
        let mut seen: usize = held.iter().map(Bytes::len).sum();
        while seen == 0 {
            let Some(data) = self.next_data().await? else { return Ok(None) };
            seen += data.len();
            held.push(data);
        }
        let mut len: Option<usize> = None;
        let (mut buffer, len) = loop {
            if len.is_none() && seen >= PREFIX {
                len = Some(message_len(&held, self.limit)?);
            }
            if let Some(n) = len {
                match scan_raw_input(&held, seen.min(PREFIX + n), n) {
                    Scan::NeedMore if seen < PREFIX + n => {}
                    Scan::Found(at) => break (join(&held, n, Some(at)), n),
                    Scan::NeedMore | Scan::Absent => break (join(&held, n, None), n),
                }
            }
            let data = self.next_data().await?.ok_or_else(unexpected_eof)?;
            seen += data.len();
            held.push(data);
        };
        if seen > PREFIX + len {
            self.pending = tail(held, PREFIX + len);
        }
        let stream = crate::bulk_copy::should_stream(len);
        while buffer.len() < len {
            let data = self.next_data().await?.ok_or_else(unexpected_eof)?;
            let take = data.len().min(len - buffer.len());
            crate::bulk_copy::extend(&mut buffer, &data[..take], stream);
            if take < data.len() {
                self.pending.push(data.slice(take..));
            }
        }
        Ok(Some(buffer.freeze()))
    }

    /// The body's next data frame; `None` when it ends.
    async fn next_data(&mut self) -> Result<Option<Bytes>, Status> {
        while let Some(frame) = self.body.frame().await {
            if let Ok(data) = frame?.into_data() {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }
}

/// tonic's status for a body that ends inside a message.
fn unexpected_eof() -> Status {
    Status::internal("Unexpected EOF decoding stream.")
}

/// The chunks' bytes from offset `from` of their concatenation on (slices, not copies).
fn tail(chunks: Vec<Bytes>, mut from: usize) -> Vec<Bytes> {
    let mut rest = Vec::new();
    for chunk in chunks {
        if from >= chunk.len() {
            from -= chunk.len();
            continue;
        }
        rest.push(chunk.slice(from..));
        from = 0;
    }
    rest
}

/// The message length its gRPC prefix (at the start of `held`) announces, with tonic's statuses
/// for a compressed or invalid flag and for a length over `limit`.
fn message_len(held: &[Bytes], limit: usize) -> Result<usize, Status> {
    let mut prefix = [0u8; PREFIX];
    copy_out(held, 0, &mut prefix);
    match prefix[0] {
        0 => {}
        1 => {
            return Err(Status::internal(
                "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            ));
        }
        f => {
            return Err(Status::internal(format!(
                "protocol error: received message with invalid compression flag: {f} (valid flags are 0 and 1), while sending request"
            )));
        }
    }
    let n = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if n > limit {
        return Err(Status::out_of_range(format!(
            "Error, decoded message length too large: found {n} bytes, the limit is: {limit} bytes"
        )));
    }
    Ok(n)
}

/// What a buffer is sized for before the message's bytes have come: a client may announce up to
/// the message size limit (2 GiB by default) and send nothing, and a buffer of that size taken on
/// its word could fail where memory is not overcommitted. A longer message grows the buffer as it
/// arrives (`large_pages` moves a megabyte block's pages, not its bytes). Not less: a buffer sized
/// exactly is one the allocator can hand the next request of the same size with its pages in,
/// where a grown one (64 MiB grown to 128 for a 64 MiB tensor and its fields) was mapped afresh
/// every time, and the 64 MiB gRPC identity slowed down (an A/B at a 64 MiB first capacity).
const FIRST_CAPACITY: usize = 256 << 20;

/// A buffer for the message's `len` bytes holding what of it `held` has, placed so that message
/// offset `align` (the first raw input) lies on a 64-byte boundary.
fn join(held: &[Bytes], len: usize, align: Option<usize>) -> BytesMut {
    let mut buffer = BytesMut::with_capacity(len.min(FIRST_CAPACITY) + 63);
    if let Some(at) = align {
        let address = buffer.as_ptr() as usize + at;
        buffer.put_bytes(0, (64 - address % 64) % 64);
    }
    let pad = buffer.len();
    let stream = crate::bulk_copy::should_stream(len);
    let mut skip = PREFIX;
    for chunk in held {
        let from = skip.min(chunk.len());
        skip -= from;
        let want = (pad + len) - buffer.len();
        let take = (chunk.len() - from).min(want);
        crate::bulk_copy::extend(&mut buffer, &chunk[from..from + take], stream);
    }
    buffer.advance(pad);
    buffer
}

/// Copies `out.len()` bytes from offset `at` of the chunks' concatenation.
fn copy_out(chunks: &[Bytes], mut at: usize, out: &mut [u8]) {
    let mut filled = 0;
    for chunk in chunks {
        if filled == out.len() {
            break;
        }
        if at >= chunk.len() {
            at -= chunk.len();
            continue;
        }
        let take = (chunk.len() - at).min(out.len() - filled);
        out[filled..filled + take].copy_from_slice(&chunk[at..at + take]);
        filled += take;
        at = 0;
    }
}

/// Where the first raw input's bytes start in a message, as far as its bytes so far tell.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    /// At this offset of the message.
    Found(usize),
    /// Not in it (or the message does not parse: prost will say how).
    Absent,
    NeedMore,
}

/// Walks the message's top-level fields in `chunks` (the prefix first; `available` bytes of them
/// are there) to the first `raw_input_contents`. Only the fields' keys and lengths are read: a
/// field's bytes are skipped without being there.
fn scan_raw_input(chunks: &[Bytes], available: usize, len: usize) -> Scan {
    let byte = |at: usize| -> Option<u8> {
        let at = PREFIX + at;
        if at >= available {
            return None;
        }
        let mut b = [0u8];
        copy_out(chunks, at, &mut b);
        Some(b[0])
    };
    let varint = |at: &mut usize| -> Result<u64, Scan> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = byte(*at).ok_or(Scan::NeedMore)?;
            *at += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Scan::Absent)
    };
    let mut at = 0usize;
    let walk = |at: &mut usize| -> Result<usize, Scan> {
        while *at < len {
            let key = varint(at)?;
            match key & 7 {
                0 => {
                    varint(at)?;
                }
                1 => *at += 8,
                5 => *at += 4,
                2 => {
                    let n = usize::try_from(varint(at)?).map_err(|_| Scan::Absent)?;
                    if key >> 3 == RAW_INPUT_FIELD {
                        return Ok(*at);
                    }
                    *at = at.checked_add(n).ok_or(Scan::Absent)?;
                }
                _ => return Err(Scan::Absent),
            }
        }
        Err(Scan::Absent)
    };
    match walk(&mut at) {
        Ok(found) => Scan::Found(found),
        Err(scan) => scan,
    }
}

/// Encodes an answer as tonic would (see [`encode_message`]), then `grpc-status: 0`.
fn encode(response: pb::ModelInferResponse, limit: usize) -> Result<Frames, Status> {
    Ok(Frames { chunks: encode_message(response, None, limit)?, trailers: Some(ok_trailers()) })
}

/// A stream's answer encoded as tonic would; one that has no `infer_response` is small.
fn encode_stream(mut answer: pb::ModelStreamInferResponse, limit: usize) -> Result<VecDeque<Bytes>, Status> {
    match answer.infer_response.take() {
        Some(response) => encode_message(response, Some(&answer.error_message), limit),
        None => {
            let mut head = BytesMut::with_capacity(PREFIX + answer.encoded_len());
            head.put_u8(0);
            head.put_u32(length(answer.encoded_len(), limit)?);
            answer.encode_raw(&mut head);
            Ok(VecDeque::from([head.freeze()]))
        }
    }
}

/// Encodes an answer with its gRPC prefix as tonic would (the same bytes: prost writes fields in
/// number order and `raw_output_contents` is the last), the prefix and fields in one chunk and
/// each large raw output in a chunk of its own. `streamed`: the answer is a stream's, the
/// `infer_response` of a `ModelStreamInferResponse` with that `error_message` (its field 1, then
/// the answer as its field 2: the answer's raw outputs are still the message's last bytes).
fn encode_message(
    mut response: pb::ModelInferResponse,
    streamed: Option<&String>,
    limit: usize,
) -> Result<VecDeque<Bytes>, Status> {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};
    let raw = std::mem::take(&mut response.raw_output_contents);
    let key = encoded_len_varint(u64::from(RAW_OUTPUT_FIELD << 3 | 2));
    let fields = response.encoded_len();
    let inner = fields + raw.iter().map(|r| key + encoded_len_varint(r.len() as u64) + r.len()).sum::<usize>();
    let wrapper = streamed.map_or(0, |error| {
        let error = if error.is_empty() { 0 } else { prost::encoding::string::encoded_len(STREAM_ERROR_FIELD, error) };
        error + encoded_len_varint(u64::from(STREAM_RESPONSE_FIELD << 3 | 2)) + encoded_len_varint(inner as u64)
    });
    let length = length(wrapper + inner, limit)?;
    let inline: usize = raw.iter().filter(|r| r.len() < INLINE_BELOW).map(Bytes::len).sum();
    let mut head = BytesMut::with_capacity(PREFIX + wrapper + inner.min(fields + inline + 16 * raw.len()));
    head.put_u8(0);
    head.put_u32(length);
    if let Some(error) = streamed {
        if !error.is_empty() {
            prost::encoding::string::encode(STREAM_ERROR_FIELD, error, &mut head);
        }
        encode_key(STREAM_RESPONSE_FIELD, WireType::LengthDelimited, &mut head);
        encode_varint(inner as u64, &mut head);
    }
    response.encode_raw(&mut head);
    let mut chunks = VecDeque::new();
    for r in raw {
        encode_key(RAW_OUTPUT_FIELD, WireType::LengthDelimited, &mut head);
        encode_varint(r.len() as u64, &mut head);
        if r.len() < INLINE_BELOW {
            head.extend_from_slice(&r);
        } else {
            chunks.push_back(std::mem::take(&mut head).freeze());
            chunks.push_back(r);
        }
    }
    if !head.is_empty() {
        chunks.push_back(head.freeze());
    }
    Ok(chunks)
}

/// A message's length for its prefix, with tonic's status when it is over `limit`.
fn length(len: usize, limit: usize) -> Result<u32, Status> {
    if len > limit {
        return Err(Status::out_of_range(format!(
            "Error, encoded message length too large: found {len} bytes, the limit is: {limit} bytes"
        )));
    }
    u32::try_from(len)
        .map_err(|_| Status::out_of_range(format!("Error, encoded message length too large: found {len} bytes")))
}

/// `grpc-status: 0`, as tonic ends a call that succeeded.
fn ok_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    trailers
}

/// An answer's body: its data frames, then the trailers.
#[derive(Debug)]
struct Frames {
    chunks: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
}

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(chunk) = self.chunks.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.chunks.iter().map(|c| c.len() as u64).sum())
    }
}

/// A stream's answers as they come ([`super::stream::serve`]), then its status: `grpc-status: 0`
/// once every request is answered, or the error that ended the stream (a message that did not
/// read, an answer over the size limit), as tonic ends a stream.
struct StreamFrames {
    answers: tokio_stream::wrappers::ReceiverStream<Result<pb::ModelStreamInferResponse, Status>>,
    /// The current answer's chunks not yet sent.
    chunks: VecDeque<Bytes>,
    /// The trailers are sent.
    ended: bool,
    limit: usize,
    /// Logs the stream's cancellation when the body is dropped before its trailers.
    notice: CancelNotice,
}

impl StreamFrames {
    fn end(&mut self, status: Option<Status>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.ended = true;
        self.notice.answered();
        let trailers = match status {
            None => ok_trailers(),
            Some(status) => {
                let mut trailers = HeaderMap::new();
                if let Err(e) = status.add_header(&mut trailers) {
                    trailers.clear();
                    let _ = Status::internal(e.message().to_string()).add_header(&mut trailers);
                }
                trailers
            }
        };
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }
}

impl hyper::body::Body for StreamFrames {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        use tokio_stream::Stream;
        loop {
            if let Some(chunk) = self.chunks.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            if self.ended {
                return Poll::Ready(None);
            }
            match std::task::ready!(Pin::new(&mut self.answers).poll_next(cx)) {
                Some(Ok(answer)) => match encode_stream(answer, self.limit) {
                    Ok(chunks) => self.chunks = chunks,
                    Err(status) => return self.end(Some(status)),
                },
                Some(Err(status)) => return self.end(Some(status)),
                None => return self.end(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.chunks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::model_infer_request::InferInputTensor;

    #[test]
    fn the_testing_delays_read_as_tritonserver_reads_them() {
        use std::time::Duration;
        assert_eq!(response_delay(Some("3")), Some(Duration::from_secs(3)));
        assert_eq!(response_delay(Some("0")), None);
        assert_eq!(response_delay(Some("soon")), None);
        assert_eq!(infer_delay(Some("5000"), None), Some(Duration::from_millis(5000)));
        assert_eq!(infer_delay(Some("5000"), Some("250")), Some(Duration::from_millis(5250)));
        assert_eq!(infer_delay(Some("x"), Some("0")), None);
        assert_eq!(infer_delay(None, None), None);
    }

    fn request(raw: Vec<Bytes>) -> pb::ModelInferRequest {
        pb::ModelInferRequest {
            model_name: "identity_fp32".into(),
            id: "r1".into(),
            inputs: vec![InferInputTensor {
                name: "INPUT0".into(),
                datatype: "FP32".into(),
                shape: vec![1, 4],
                ..Default::default()
            }],
            raw_input_contents: raw,
            ..Default::default()
        }
    }

    /// A message as a client sends it: prefix and message, cut into frames of `frame` bytes.
    fn framed(message: &impl Message, frame: usize) -> Vec<Bytes> {
        let mut wire = vec![0u8];
        wire.extend_from_slice(&(message.encoded_len() as u32).to_be_bytes());
        message.encode(&mut wire).unwrap();
        wire.chunks(frame).map(Bytes::copy_from_slice).collect()
    }

    #[test]
    fn the_scan_finds_the_first_raw_input_however_the_message_is_cut() {
        let m = request(vec![Bytes::from(vec![0xabu8; 1000]), Bytes::from(vec![9u8; 10])]);
        let mut whole = Vec::new();
        m.encode(&mut whole).unwrap();
        let at = whole.windows(1000).position(|w| w.iter().all(|b| *b == 0xab)).unwrap();
        for frame in [1, 3, 7, 64, 100_000] {
            let chunks = framed(&m, frame);
            let total: usize = chunks.iter().map(Bytes::len).sum();
            assert_eq!(scan_raw_input(&chunks, total, whole.len()), Scan::Found(at), "frames of {frame}");
        }
        // Before the key of the raw input has arrived, it needs more.
        let chunks = framed(&m, 100_000);
        assert_eq!(scan_raw_input(&chunks, PREFIX + at - 3, whole.len()), Scan::NeedMore);
        // A message without raw inputs has none.
        let plain = request(vec![]);
        let chunks = framed(&plain, 100_000);
        assert_eq!(scan_raw_input(&chunks, PREFIX + plain.encoded_len(), plain.encoded_len()), Scan::Absent);
    }

    #[test]
    fn a_joined_message_decodes_as_sent_with_its_raw_input_aligned() {
        let m = request(vec![Bytes::from((0..4096u32).map(|i| i as u8).collect::<Vec<_>>())]);
        for frame in [2, 5, 13, 1000, 1 << 20] {
            let chunks = framed(&m, frame);
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Status>>(chunks.len() + 1);
            for c in chunks {
                tx.try_send(Ok(Frame::data(c))).unwrap();
            }
            drop(tx);
            let body = Body::new(http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)));
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let joined = rt.block_on(read_message(body, usize::MAX)).unwrap();
            let decoded = pb::ModelInferRequest::decode(joined).unwrap();
            assert_eq!(decoded, m, "frames of {frame}");
            assert_eq!(decoded.raw_input_contents[0].as_ptr() as usize % 64, 0, "frames of {frame}");
        }
    }

    /// A body of these frames, ending after the last.
    fn body(chunks: Vec<Bytes>) -> Body {
        let frames: Vec<Result<Frame<Bytes>, Status>> = chunks.into_iter().map(|c| Ok(Frame::data(c))).collect();
        Body::new(http_body_util::StreamBody::new(tokio_stream::iter(frames)))
    }

    #[test]
    fn a_streams_messages_are_read_one_after_another_however_the_frames_cut_them() {
        let sent = [
            request(vec![Bytes::from((0..4096u32).map(|i| i as u8).collect::<Vec<_>>())]),
            request(vec![]),
            pb::ModelInferRequest::default(),
            request(vec![Bytes::from(vec![7u8; 100]), Bytes::from(vec![8u8; 3])]),
        ];
        let wire: Vec<u8> = sent.iter().flat_map(|m| framed(m, usize::MAX).concat()).collect();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for frame in [1, 3, 5, 13, 64, 1000, 5000, 1 << 20] {
            let mut messages =
                Messages::new(body(wire.chunks(frame).map(Bytes::copy_from_slice).collect()), usize::MAX);
            for m in &sent {
                let got = rt.block_on(messages.next()).unwrap().expect("a message");
                let decoded = pb::ModelInferRequest::decode(got).unwrap();
                assert_eq!(&decoded, m, "frames of {frame}");
                if let Some(raw) = decoded.raw_input_contents.first() {
                    assert_eq!(raw.as_ptr() as usize % 64, 0, "frames of {frame}");
                }
            }
            assert!(rt.block_on(messages.next()).unwrap().is_none(), "frames of {frame}: the body ended");
        }
        // A body that ends inside its second message: the first reads, then tonic's EOF status.
        let first = framed(&sent[0], usize::MAX).concat().len();
        let mut messages = Messages::new(body(vec![Bytes::copy_from_slice(&wire[..first + 10])]), usize::MAX);
        assert!(rt.block_on(messages.next()).unwrap().is_some());
        assert_eq!(rt.block_on(messages.next()).unwrap_err().message(), "Unexpected EOF decoding stream.");
        // Empty frames at the end (a client closing its side) are not a message.
        let mut messages = Messages::new(body(vec![framed(&sent[1], 10).concat().into(), Bytes::new()]), usize::MAX);
        assert!(rt.block_on(messages.next()).unwrap().is_some());
        assert!(rt.block_on(messages.next()).unwrap().is_none());
    }

    #[test]
    fn a_stream_answer_is_the_bytes_tonic_would_send() {
        let big = Bytes::from(vec![5u8; INLINE_BELOW * 2]);
        let response = pb::ModelInferResponse {
            model_name: "m".into(),
            id: "x".into(),
            outputs: vec![Default::default(), Default::default()],
            raw_output_contents: vec![Bytes::from_static(b"ab"), big.clone()],
            ..Default::default()
        };
        let answers = [
            pb::ModelStreamInferResponse { error_message: String::new(), infer_response: Some(response.clone()) },
            pb::ModelStreamInferResponse { error_message: "failed".into(), infer_response: Some(Default::default()) },
            pb::ModelStreamInferResponse { error_message: "no answer".into(), infer_response: None },
            pb::ModelStreamInferResponse::default(),
        ];
        for answer in answers {
            let mut want = vec![0u8];
            want.extend_from_slice(&(answer.encoded_len() as u32).to_be_bytes());
            answer.encode(&mut want).unwrap();
            let chunks = encode_stream(answer.clone(), usize::MAX).unwrap();
            assert_eq!(chunks.iter().flat_map(|c| c.iter().copied()).collect::<Vec<_>>(), want, "{answer:?}");
            if answer.infer_response.as_ref().is_some_and(|r| r.raw_output_contents.len() == 2) {
                // The large output goes out from the backend's buffer, not a copy.
                assert!(chunks.iter().any(|c| c.as_ptr() == big.as_ptr() && c.len() == big.len()));
            }
        }
        let too_large = pb::ModelStreamInferResponse { error_message: String::new(), infer_response: Some(response) };
        assert_eq!(encode_stream(too_large, 100).unwrap_err().code(), tonic::Code::OutOfRange);
    }

    fn read(chunks: Vec<Bytes>, limit: usize) -> Result<Bytes, Status> {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(read_message(body(chunks), limit))
    }

    #[test]
    fn bad_prefixes_and_short_bodies_get_tonics_statuses() {
        let m = request(vec![Bytes::from_static(&[1, 2, 3, 4])]);
        let len = m.encoded_len();
        let too_long = read(framed(&m, 1 << 20), 10).unwrap_err();
        assert_eq!(too_long.code(), tonic::Code::OutOfRange);
        assert_eq!(
            too_long.message(),
            format!("Error, decoded message length too large: found {len} bytes, the limit is: 10 bytes")
        );
        let mut cut = framed(&m, 1 << 20);
        cut[0].truncate(PREFIX + len - 1);
        assert_eq!(read(cut, usize::MAX).unwrap_err().message(), "Unexpected EOF decoding stream.");
        assert_eq!(read(vec![], usize::MAX).unwrap_err().message(), "Missing request message.");
        let mut flagged = framed(&m, 1 << 20);
        let mut first = flagged[0].to_vec();
        first[0] = 1;
        flagged[0] = Bytes::from(first);
        let e = read(flagged, usize::MAX).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal);
        assert!(e.message().contains("compressed-flag but no grpc-encoding"), "{}", e.message());
        // A message announced far longer than what comes is cut short, not a buffer of its size.
        let announced = framed(&request(vec![]), 1 << 20).concat();
        let mut huge = announced.clone();
        huge[1..PREFIX].copy_from_slice(&(1u32 << 30).to_be_bytes());
        assert_eq!(read(vec![Bytes::from(huge)], usize::MAX).unwrap_err().message(), "Unexpected EOF decoding stream.");
        // An empty message is a message (every field at its default).
        assert_eq!(read(vec![Bytes::from_static(&[0, 0, 0, 0, 0])], usize::MAX).unwrap(), Bytes::new());
    }

    #[test]
    fn an_answer_is_the_bytes_tonic_would_send_with_large_outputs_in_frames_of_their_own() {
        let big = Bytes::from(vec![3u8; INLINE_BELOW + 1]);
        let small = Bytes::from_static(b"abcd");
        let response = pb::ModelInferResponse {
            model_name: "m".into(),
            model_version: "1".into(),
            id: "x".into(),
            outputs: vec![Default::default(), Default::default(), Default::default()],
            raw_output_contents: vec![small.clone(), big.clone(), Bytes::new()],
            ..Default::default()
        };
        let mut want = vec![0u8];
        want.extend_from_slice(&(response.encoded_len() as u32).to_be_bytes());
        response.encode(&mut want).unwrap();
        let frames = encode(response.clone(), usize::MAX).unwrap();
        let got: Vec<u8> = frames.chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(got, want);
        // The large output is sent from the backend's buffer, not a copy.
        assert!(frames.chunks.iter().any(|c| c.as_ptr() == big.as_ptr() && c.len() == big.len()));
        assert_eq!(frames.trailers.as_ref().and_then(|t| t.get("grpc-status")).unwrap(), "0");
        // Small answers are one frame.
        let small_only = pb::ModelInferResponse { raw_output_contents: vec![small], ..response.clone() };
        assert_eq!(encode(small_only, usize::MAX).unwrap().chunks.len(), 1);
        let e = encode(response, 100).unwrap_err();
        assert_eq!(e.code(), tonic::Code::OutOfRange);
        assert!(e.message().starts_with("Error, encoded message length too large"), "{}", e.message());
    }
}
