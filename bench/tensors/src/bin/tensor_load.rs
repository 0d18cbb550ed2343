//! tensor-load — a closed-loop load generator for one large FP32 tensor per request, over KServe v2
//! HTTP (binary extension) or Triton's gRPC, inline or through system shared memory. Leaner than
//! perf_analyzer where the payload dominates: the request body is one shared buffer written with
//! vectored writes and responses are checked as they stream in rather than gathered. Over gRPC the
//! default client (`--grpc-client lean`) is hyper's HTTP/2 client with the message's fields encoded
//! once and the tensor sent from the shared buffer behind them; tonic's generated client
//! (`--grpc-client tonic`), which encodes every request into a buffer of its own and decodes every
//! answer out of one, spent 2–3× the HTTP client's CPU a request and was the limit on 2 cores.
//!
//! Prints one line: throughput, p50/p99 latency, payload MB/s one way, and the CPU time per request of
//! this client and (with --server-pid) of the server, so that a result can say which side limits it.
//! Every answer is checked: the first of each connection in full, the others by length and samples.
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::{Buf, Bytes};
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tensor_bench::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensor_bench::pb::infer_parameter::ParameterChoice;
use tensor_bench::pb::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use tensor_bench::pb::*;
use tensor_bench::{Kind, Region, cpu_over_window, exit_with, percentile, sum_le_f32};
use tonic::transport::{Channel, Endpoint};

/// The server's allocator: megabyte buffers on huge pages and reused, as Nereus's are (the client must
/// not be slower than the server at what they both do).
#[global_allocator]
static ALLOCATOR: nereus::large_pages::LargePages = nereus::large_pages::LargePages;

#[derive(Parser, Debug, Clone)]
struct Args {
    /// host:port of the HTTP or gRPC endpoint.
    #[arg(long)]
    url: String,
    /// `http`, `grpc` (`ModelInfer`) or `grpc-stream` (`ModelStreamInfer`: a stream per
    /// connection, one request in flight on each; the lean client's framing).
    #[arg(long, default_value = "http")]
    protocol: String,
    #[arg(long, default_value = "identity_fp32")]
    model: String,
    /// Input bytes per request (a multiple of 4: FP32 [1, bytes/4]).
    #[arg(long)]
    bytes: usize,
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Measurement window, seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Unmeasured warm-up before the window, seconds.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Inputs and outputs through system shared memory regions registered per connection.
    #[arg(long)]
    shm: bool,
    /// The server's pids (comma-separated: Triton's python backend runs a process per instance), to
    /// report its CPU time per request over the window.
    #[arg(long, value_delimiter = ',')]
    server_pid: Vec<u32>,
    /// Client runtime threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The gRPC client: `lean` (hyper's HTTP/2 client; the request's fields encoded once, its tensor
    /// sent from the shared buffer, answers checked frame by frame) or `tonic` (a generated client,
    /// which encodes every request into a buffer and decodes every answer out of one).
    #[arg(long, default_value = "lean")]
    grpc_client: String,
}

/// What every request sends and what its answer must be.
struct Work {
    args: Args,
    kind: Kind,
    shape: Vec<i64>,
    input: Bytes,
    expected: Bytes,
    /// When the window closes: no request starts after it.
    end: Instant,
}

/// One connection's shared memory: the input region (filled once) and the output region.
struct Shm {
    input_name: String,
    output_name: String,
    input: Region,
    output: Region,
}

impl Shm {
    fn new(w: usize, work: &Work) -> anyhow::Result<Shm> {
        let pid = std::process::id();
        let input_name = format!("bench_in_{pid}_{w}");
        let output_name = format!("bench_out_{pid}_{w}");
        let input = Region::create(&format!("/{input_name}"), work.input.len())?;
        input.bytes_mut().copy_from_slice(&work.input);
        let output = Region::create(&format!("/{output_name}"), work.expected.len())?;
        Ok(Shm { input_name, output_name, input, output })
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        Region::unlink(&format!("/{}", self.input_name));
        Region::unlink(&format!("/{}", self.output_name));
    }
}

/// Checks an answer: in full, or its length and its first and last 64 bytes.
fn check(work: &Work, got: &[u8], full: bool) -> anyhow::Result<()> {
    let want = &work.expected[..];
    if got.len() != want.len() {
        bail!("answer of {} bytes, expected {}", got.len(), want.len());
    }
    if work.kind == Kind::ReduceSum {
        for (g, w) in got.chunks_exact(4).zip(want.chunks_exact(4)) {
            let (g, w) = (f32::from_le_bytes(g.try_into()?), f32::from_le_bytes(w.try_into()?));
            // Servers sum in different orders (lanes, pairwise): rounding differs, not the value.
            if (g - w).abs() > 1e-3 * w.abs().max(1.0) {
                bail!("sum {g}, expected {w}");
            }
        }
        return Ok(());
    }
    let n = want.len().min(64);
    let ok = if full { got == want } else { got[..n] == want[..n] && got[got.len() - n..] == want[want.len() - n..] };
    if !ok {
        bail!("answer differs from the input");
    }
    Ok(())
}

// ---- HTTP ----

async fn http_connect(url: &str) -> anyhow::Result<http1::SendRequest<Full<bytes::buf::Chain<Bytes, Bytes>>>> {
    let tcp = tokio::net::TcpStream::connect(url).await.with_context(|| format!("connecting to {url}"))?;
    tcp.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// POSTs `body` (JSON) to `path` on a connection of its own.
async fn http_post_json(url: &str, path: &str, body: String) -> anyhow::Result<()> {
    let mut s = http_connect(url).await?;
    let req = hyper::Request::post(path)
        .header("host", url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body).chain(Bytes::new())))?;
    let resp = s.send_request(req).await?;
    let status = resp.status();
    let text = resp.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        bail!("{path}: {status} {}", String::from_utf8_lossy(&text));
    }
    Ok(())
}

async fn http_worker(w: usize, work: Arc<Work>) -> anyhow::Result<Vec<(Instant, Duration)>> {
    let a = &work.args;
    let mut sender = http_connect(&a.url).await?;
    let shm = if a.shm { Some(Shm::new(w, &work)?) } else { None };
    let (header, payload) = if let Some(shm) = &shm {
        for (name, r) in [(&shm.input_name, &shm.input), (&shm.output_name, &shm.output)] {
            let body = json!({"key": format!("/{name}"), "offset": 0, "byte_size": r.len()}).to_string();
            http_post_json(&a.url, &format!("/v2/systemsharedmemory/region/{name}/register"), body).await?;
        }
        let h = json!({
            "inputs": [{"name": "INPUT0", "shape": work.shape, "datatype": "FP32", "parameters":
                {"shared_memory_region": shm.input_name, "shared_memory_byte_size": work.input.len()}}],
            "outputs": [{"name": "OUTPUT0", "parameters":
                {"shared_memory_region": shm.output_name, "shared_memory_byte_size": work.expected.len()}}]});
        (h.to_string(), Bytes::new())
    } else {
        let h = json!({
            "inputs": [{"name": "INPUT0", "shape": work.shape, "datatype": "FP32", "parameters":
                {"binary_data_size": work.input.len()}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}]});
        (h.to_string(), work.input.clone())
    };
    let header = Bytes::from(header);
    let path = format!("/v2/models/{}/infer", a.model);
    let mut done = Vec::new();
    let mut first = true;
    while Instant::now() < work.end {
        let t0 = Instant::now();
        let mut req = hyper::Request::post(&path)
            .header("host", &a.url)
            .header("inference-header-content-length", header.len())
            .body(Full::new(header.clone().chain(payload.clone())))?;
        if shm.is_some() {
            req.headers_mut().remove("inference-header-content-length");
            req.headers_mut().insert("content-type", "application/json".parse()?);
        }
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let hlen: Option<usize> = resp
            .headers()
            .get("inference-header-content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let mut body = resp.into_body();
        if !status.is_success() || shm.is_some() || first || work.kind == Kind::ReduceSum {
            let all = body.collect().await?.to_bytes();
            if !status.is_success() {
                bail!("{status}: {}", String::from_utf8_lossy(&all[..all.len().min(500)]));
            }
            match &shm {
                Some(shm) => check(&work, shm.output.bytes(), first)?,
                None => check(&work, all.get(hlen.unwrap_or(all.len())..).unwrap_or_default(), true)?,
            }
        } else {
            // Streamed: the header, then the payload's length and its first and last bytes.
            let hlen = hlen.context("no inference-header-content-length")?;
            let want = &work.expected;
            let n = want.len().min(64);
            let (mut seen, mut head, mut tail) = (0usize, vec![0u8; n], vec![0u8; n]);
            while let Some(frame) = body.frame().await {
                let Ok(data) = frame?.into_data() else { continue };
                // This frame's bytes at payload offsets [from, to), where the payload starts after the header.
                let (from, to) = (seen as i64 - hlen as i64, (seen + data.len()) as i64 - hlen as i64);
                for (dst, at) in [(&mut head, 0i64), (&mut tail, (want.len() - n) as i64)] {
                    let (lo, hi) = (from.max(at), to.min(at + n as i64));
                    if lo < hi {
                        let src = &data[(lo - from) as usize..(hi - from) as usize];
                        dst[(lo - at) as usize..(hi - at) as usize].copy_from_slice(src);
                    }
                }
                seen += data.len();
            }
            if seen.saturating_sub(hlen) != want.len() || head[..] != want[..n] || tail[..] != want[want.len() - n..] {
                bail!("answer differs from the input ({} bytes)", seen.saturating_sub(hlen));
            }
        }
        first = false;
        let t1 = Instant::now();
        done.push((t1, t1 - t0));
    }
    Ok(done)
}

// ---- gRPC ----

fn shm_params(region: &str, size: usize) -> std::collections::HashMap<String, InferParameter> {
    let p = |c| InferParameter { parameter_choice: Some(c) };
    [
        ("shared_memory_region".to_string(), p(ParameterChoice::StringParam(region.into()))),
        ("shared_memory_byte_size".to_string(), p(ParameterChoice::Int64Param(size as i64))),
    ]
    .into_iter()
    .collect()
}

/// The request's input and output as they are sent inline.
fn grpc_tensors_inline(work: &Work) -> (InferInputTensor, InferRequestedOutputTensor) {
    let input = InferInputTensor {
        name: "INPUT0".into(),
        datatype: "FP32".into(),
        shape: work.shape.clone(),
        ..Default::default()
    };
    (input, InferRequestedOutputTensor { name: "OUTPUT0".into(), ..Default::default() })
}

/// The request's input and output: inline, or in the connection's shared memory regions, which it
/// registers first.
async fn grpc_tensors(
    client: &mut GrpcInferenceServiceClient<Channel>,
    shm: Option<&Shm>,
    work: &Work,
) -> anyhow::Result<(InferInputTensor, InferRequestedOutputTensor)> {
    let (mut input, mut output) = grpc_tensors_inline(work);
    if let Some(shm) = shm {
        for (name, r) in [(&shm.input_name, &shm.input), (&shm.output_name, &shm.output)] {
            let req = SystemSharedMemoryRegisterRequest {
                name: name.clone(),
                key: format!("/{name}"),
                offset: 0,
                byte_size: r.len() as u64,
            };
            client.system_shared_memory_register(req).await?;
        }
        input.parameters = shm_params(&shm.input_name, work.input.len());
        output.parameters = shm_params(&shm.output_name, work.expected.len());
    }
    Ok((input, output))
}

async fn grpc_worker(w: usize, work: Arc<Work>) -> anyhow::Result<Vec<(Instant, Duration)>> {
    let a = &work.args;
    let channel: Channel = Endpoint::from_shared(format!("http://{}", a.url))?
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(32 << 20))
        .connect()
        .await
        .with_context(|| format!("connecting to {}", a.url))?;
    let mut client = GrpcInferenceServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    let shm = if a.shm { Some(Shm::new(w, &work)?) } else { None };
    let (input, output) = grpc_tensors(&mut client, shm.as_ref(), &work).await?;
    let mut done = Vec::new();
    let mut first = true;
    while Instant::now() < work.end {
        let t0 = Instant::now();
        let req = ModelInferRequest {
            model_name: a.model.clone(),
            inputs: vec![input.clone()],
            outputs: vec![output.clone()],
            raw_input_contents: if shm.is_some() { vec![] } else { vec![work.input.clone()] },
            ..Default::default()
        };
        let resp = client.model_infer(req).await?.into_inner();
        match &shm {
            Some(shm) => check(&work, shm.output.bytes(), first)?,
            None => check(&work, resp.raw_output_contents.first().map(|b| &b[..]).unwrap_or_default(), first)?,
        }
        first = false;
        let t1 = Instant::now();
        done.push((t1, t1 - t0));
    }
    Ok(done)
}

// ---- gRPC, lean ----

/// The ModelInfer and ModelStreamInfer paths.
const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
const MODEL_STREAM_INFER: &str = "/inference.GRPCInferenceService/ModelStreamInfer";

/// `raw_input_contents` and `raw_output_contents`' field numbers (grpc_service.proto).
const RAW_INPUT_FIELD: u64 = 7;
const RAW_OUTPUT_FIELD: u64 = 6;

/// `ModelStreamInferResponse`'s `error_message` and `infer_response` field numbers.
const STREAM_ERROR_FIELD: u64 = 1;
const STREAM_RESPONSE_FIELD: u64 = 2;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A request's gRPC prefix and fields, up to and including the key and length of the raw input that
/// follows them (`payload` bytes; none through shared memory): the same bytes as prost's encoding of
/// the whole message, whose last field `raw_input_contents` is.
fn grpc_head(message: &ModelInferRequest, payload: usize) -> Bytes {
    use prost::Message;
    let mut fields = message.encode_to_vec();
    if payload > 0 {
        put_varint(&mut fields, RAW_INPUT_FIELD << 3 | 2);
        put_varint(&mut fields, payload as u64);
    }
    let mut head = vec![0u8];
    head.extend_from_slice(&((fields.len() + payload) as u32).to_be_bytes());
    head.extend_from_slice(&fields);
    Bytes::from(head)
}

/// Bytes `[at, at + out.len())` of the chunks' concatenation; false when they end first.
fn copy_out(chunks: &[Bytes], mut at: usize, out: &mut [u8]) -> bool {
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
    filled == out.len()
}

/// Where the first `raw_output_contents` lies in an answer's body (gRPC prefix included): offset
/// and length, read from the fields' keys and lengths only; `None` until `chunks` reach it. A
/// stream's answer (`streamed`) is a `ModelStreamInferResponse`: its `infer_response` (field 2) is
/// walked into, and an `error_message` (field 1) is the error it says.
fn raw_output(chunks: &[Bytes], streamed: bool) -> anyhow::Result<Option<(usize, usize)>> {
    let mut prefix = [0u8; 5];
    if !copy_out(chunks, 0, &mut prefix) {
        return Ok(None);
    }
    if prefix[0] != 0 {
        bail!("not an uncompressed gRPC message");
    }
    let mut end = 5 + u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    let mut at = 5;
    let mut outer = streamed;
    // Ok(None): the bytes so far end inside a key or length.
    let varint = |at: &mut usize| -> anyhow::Result<Option<u64>> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let mut b = [0u8];
            if !copy_out(chunks, *at, &mut b) {
                return Ok(None);
            }
            *at += 1;
            v |= u64::from(b[0] & 0x7f) << shift;
            if b[0] & 0x80 == 0 {
                return Ok(Some(v));
            }
        }
        bail!("a varint of more than 10 bytes")
    };
    while at < end {
        let Some(key) = varint(&mut at)? else { return Ok(None) };
        match key & 7 {
            0 => {
                if varint(&mut at)?.is_none() {
                    return Ok(None);
                }
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let Some(n) = varint(&mut at)? else { return Ok(None) };
                if outer && key >> 3 == STREAM_ERROR_FIELD && n > 0 {
                    let mut text = vec![0u8; n as usize];
                    if !copy_out(chunks, at, &mut text) {
                        return Ok(None);
                    }
                    bail!("the stream answered with an error: {}", String::from_utf8_lossy(&text));
                }
                if outer && key >> 3 == STREAM_RESPONSE_FIELD {
                    (outer, end) = (false, at + n as usize);
                    continue;
                }
                if !outer && key >> 3 == RAW_OUTPUT_FIELD {
                    return Ok(Some((at, n as usize)));
                }
                at += n as usize;
            }
            t => bail!("wire type {t}"),
        }
    }
    bail!("no raw_output_contents in the answer")
}

/// Checks an answer's tensor as its frames arrive, keeping of them only what it must: the frames
/// before the tensor's place is known, then its first and last bytes (all of it when `full`).
struct GrpcCheck {
    full: bool,
    /// A `ModelStreamInfer` answer (the tensor one message deeper).
    streamed: bool,
    held: Vec<Bytes>,
    /// Body offset of the next frame's first byte.
    pos: usize,
    /// The tensor's place in the body: offset and length.
    place: Option<(usize, usize)>,
    head: Vec<u8>,
    tail: Vec<u8>,
    all: Vec<u8>,
    total: usize,
}

impl GrpcCheck {
    fn new(full: bool, streamed: bool) -> Self {
        GrpcCheck {
            full,
            streamed,
            held: Vec::new(),
            pos: 0,
            place: None,
            head: vec![],
            tail: vec![],
            all: vec![],
            total: 0,
        }
    }

    fn frame(&mut self, data: Bytes, work: &Work) -> anyhow::Result<()> {
        self.total += data.len();
        if self.place.is_some() {
            self.sample(&data);
            self.pos += data.len();
            return Ok(());
        }
        self.held.push(data);
        if let Some((at, n)) = raw_output(&self.held, self.streamed)? {
            let k = work.expected.len().min(64).min(n);
            self.place = Some((at, n));
            (self.head, self.tail) = (vec![0; k], vec![0; k]);
            if self.full || work.kind == Kind::ReduceSum || n != work.expected.len() {
                self.full = true;
                self.all = vec![0; n];
            }
            for chunk in std::mem::take(&mut self.held) {
                self.sample(&chunk);
                self.pos += chunk.len();
            }
        }
        Ok(())
    }

    /// Copies what of `data` (at body offset `self.pos`) falls in the head, tail or whole tensor.
    fn sample(&mut self, data: &[u8]) {
        let Some((at, n)) = self.place else { return };
        let k = self.head.len();
        let (from, to) = (self.pos, self.pos + data.len());
        let put = |dst: &mut Vec<u8>, start: usize| {
            let (lo, hi) = (from.max(start), to.min(start + dst.len()));
            if lo < hi {
                dst[lo - start..hi - start].copy_from_slice(&data[lo - from..hi - from]);
            }
        };
        put(&mut self.head, at);
        put(&mut self.tail, at + n - k);
        if self.full {
            put(&mut self.all, at);
        }
    }

    fn finish(self, work: &Work) -> anyhow::Result<()> {
        let Some((at, n)) = self.place else { bail!("no raw_output_contents in the answer") };
        if self.total != at + n {
            bail!("an answer of {} bytes, its tensor ending at {}", self.total, at + n);
        }
        if self.full {
            return check(work, &self.all, true);
        }
        let (want, k) = (&work.expected, self.head.len());
        if self.head[..] != want[..k] || self.tail[..] != want[want.len() - k..] {
            bail!("answer differs from the input");
        }
        Ok(())
    }
}

/// Checks a lean gRPC client's answer: in the output region, or as its frames were checked.
fn answered(work: &Work, shm: Option<&Shm>, answer: GrpcCheck, full: bool) -> anyhow::Result<()> {
    match shm {
        Some(shm) => check(work, shm.output.bytes(), full),
        None => answer.finish(work),
    }
}

/// An HTTP/2 connection to the server for requests with bodies of type `B`.
async fn h2_connect<B>(url: &str) -> anyhow::Result<hyper::client::conn::http2::SendRequest<B>>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use hyper_util::rt::TokioExecutor;
    let tcp = tokio::net::TcpStream::connect(url).await.with_context(|| format!("connecting to {url}"))?;
    tcp.set_nodelay(true)?;
    // The windows of tonic's client above; frames of up to 1 MiB from the server (the server's own
    // setting for the other way).
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(8 << 20)
        .initial_connection_window_size(32 << 20)
        .max_frame_size(1 << 20)
        .handshake(TokioIo::new(tcp))
        .await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// The shared memory regions and the request's message for a lean client (registration is not
/// measured: tonic's client does it, on a connection of its own).
async fn lean_request(w: usize, work: &Work) -> anyhow::Result<(Option<Shm>, ModelInferRequest)> {
    let a = &work.args;
    let shm = if a.shm { Some(Shm::new(w, work)?) } else { None };
    let (input, output) = match &shm {
        Some(shm) => {
            let channel = Endpoint::from_shared(format!("http://{}", a.url))?.connect().await?;
            grpc_tensors(&mut GrpcInferenceServiceClient::new(channel), Some(shm), work).await?
        }
        None => grpc_tensors_inline(work),
    };
    let message = ModelInferRequest {
        model_name: a.model.clone(),
        inputs: vec![input],
        outputs: vec![output],
        ..Default::default()
    };
    Ok((shm, message))
}

/// A request body fed message by message: a `ModelStreamInfer` call's.
struct Sent(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for Sent {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

/// `ModelStreamInfer`, one call per connection, one request in flight on it at a time: each
/// answer is checked as its frames arrive, as the lean unary client does.
async fn grpc_stream_worker(w: usize, work: Arc<Work>) -> anyhow::Result<Vec<(Instant, Duration)>> {
    let a = &work.args;
    let mut sender = h2_connect::<Sent>(&a.url).await?;
    let (shm, message) = lean_request(w, &work).await?;
    let payload = if shm.is_some() { Bytes::new() } else { work.input.clone() };
    let head = grpc_head(&message, payload.len());
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let send = async |tx: &tokio::sync::mpsc::Sender<Bytes>| -> anyhow::Result<Instant> {
        let t0 = Instant::now();
        tx.send(head.clone()).await?;
        if !payload.is_empty() {
            tx.send(payload.clone()).await?;
        }
        Ok(t0)
    };
    let req = hyper::Request::post(format!("http://{}{MODEL_STREAM_INFER}", a.url))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Sent(rx))?;
    sender.ready().await?;
    // The first request goes out with the call: a server may send the response's headers only with
    // its first answer (tritonserver does).
    let mut queued = Some(send(&tx).await?);
    let resp = sender.send_request(req).await?;
    let (parts, mut body) = resp.into_parts();
    if !parts.status.is_success() || parts.headers.contains_key("grpc-status") {
        bail!(
            "{} grpc-status {:?}: {:?}",
            parts.status,
            parts.headers.get("grpc-status"),
            parts.headers.get("grpc-message")
        );
    }
    let mut done = Vec::new();
    let mut first = true;
    while Instant::now() < work.end {
        let t0 = match queued.take() {
            Some(t0) => t0,
            None => send(&tx).await?,
        };
        let mut answer = GrpcCheck::new(first, true);
        // The answer's prefix (its first 5 bytes), then its length with the prefix.
        let (mut prefix, mut seen, mut total) = (Vec::with_capacity(5), 0usize, None);
        while total != Some(seen) {
            let Some(frame) = body.frame().await else { bail!("the stream ended before its answer") };
            let data = match frame?.into_data() {
                Ok(data) => data,
                Err(frame) => {
                    let t = frame.into_trailers().unwrap_or_default();
                    bail!("the stream ended: grpc-status {:?}: {:?}", t.get("grpc-status"), t.get("grpc-message"));
                }
            };
            seen += data.len();
            if prefix.len() < 5 {
                prefix.extend_from_slice(&data[..data.len().min(5 - prefix.len())]);
                if prefix.len() == 5 {
                    total = Some(5 + u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize);
                }
            }
            if total.is_some_and(|t| seen > t) {
                bail!("frames past the answer's end (one request in flight)");
            }
            answer.frame(data, &work)?;
        }
        answered(&work, shm.as_ref(), answer, first)?;
        first = false;
        let t1 = Instant::now();
        done.push((t1, t1 - t0));
    }
    drop(tx);
    while let Some(frame) = body.frame().await {
        if let Ok(t) = frame?.into_trailers()
            && t.get("grpc-status").is_none_or(|s| s != "0")
        {
            bail!("the stream ended: grpc-status {:?}: {:?}", t.get("grpc-status"), t.get("grpc-message"));
        }
    }
    Ok(done)
}

async fn grpc_lean_worker(w: usize, work: Arc<Work>) -> anyhow::Result<Vec<(Instant, Duration)>> {
    let a = &work.args;
    let mut sender = h2_connect(&a.url).await?;
    let (shm, message) = lean_request(w, &work).await?;
    let payload = if shm.is_some() { Bytes::new() } else { work.input.clone() };
    let head = grpc_head(&message, payload.len());
    let uri: hyper::Uri = format!("http://{}{MODEL_INFER}", a.url).parse()?;
    let mut done = Vec::new();
    let mut first = true;
    while Instant::now() < work.end {
        let t0 = Instant::now();
        let req = hyper::Request::post(uri.clone())
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(head.clone().chain(payload.clone())))?;
        sender.ready().await?;
        let resp = sender.send_request(req).await?;
        let (parts, mut body) = resp.into_parts();
        let mut answer = GrpcCheck::new(first, false);
        let mut status = parts.headers.get("grpc-status").cloned();
        let mut message = parts.headers.get("grpc-message").cloned();
        while let Some(frame) = body.frame().await {
            match frame?.into_data() {
                Ok(data) if shm.is_none() => answer.frame(data, &work)?,
                Ok(_) => {}
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        status = trailers.get("grpc-status").cloned();
                        message = trailers.get("grpc-message").cloned();
                    }
                }
            }
        }
        if !parts.status.is_success() || status.as_ref().is_none_or(|s| s != "0") {
            bail!("{} grpc-status {status:?}: {message:?}", parts.status);
        }
        answered(&work, shm.as_ref(), answer, first)?;
        first = false;
        let t1 = Instant::now();
        done.push((t1, t1 - t0));
    }
    Ok(done)
}

fn main() -> std::process::ExitCode {
    exit_with("tensor-load", run(Args::parse()))
}

fn run(args: Args) -> anyhow::Result<()> {
    if !["lean", "tonic"].contains(&args.grpc_client.as_str()) {
        bail!("--grpc-client is lean or tonic");
    }
    if args.bytes == 0 || !args.bytes.is_multiple_of(4) {
        bail!("--bytes must be a positive multiple of 4");
    }
    let kind = Kind::of(&args.model);
    let shape = vec![1, (args.bytes / 4) as i64];
    // Values that differ along the tensor (a wrong offset shows) and sum without overflow.
    let input: Vec<u8> = (0..args.bytes / 4).flat_map(|i| ((i % 1024) as f32 * 0.25).to_le_bytes()).collect();
    let input = Bytes::from(input);
    // An identity answers with its input: the same buffer is what it must match.
    let expected = match kind {
        Kind::Identity => input.clone(),
        Kind::ReduceSum => Bytes::copy_from_slice(&sum_le_f32(&input).to_le_bytes()),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads.max(1)).enable_all().build()?;
    let start = Instant::now() + Duration::from_secs_f64(args.warmup);
    let end = start + Duration::from_secs_f64(args.seconds);
    let work = Arc::new(Work { args: args.clone(), kind, shape, input, expected, end });
    let (done, cpu) = rt.block_on(async {
        let mut tasks = Vec::new();
        for w in 0..args.concurrency {
            let work = work.clone();
            tasks.push(tokio::spawn(async move {
                match (work.args.protocol.as_str(), work.args.grpc_client.as_str()) {
                    ("grpc", "tonic") => grpc_worker(w, work).await,
                    ("grpc", _) => grpc_lean_worker(w, work).await,
                    ("grpc-stream", _) => grpc_stream_worker(w, work).await,
                    _ => http_worker(w, work).await,
                }
            }));
        }
        // CPU time of both sides over the window.
        let cpu = tokio::spawn(cpu_over_window(args.server_pid.clone(), start, end));
        let mut done = Vec::new();
        for t in tasks {
            done.extend(t.await??);
        }
        anyhow::Ok((done, cpu.await?))
    })?;
    let mut lat: Vec<Duration> = done.iter().filter(|(t, _)| *t >= start && *t <= end).map(|(_, l)| *l).collect();
    lat.sort();
    let n = lat.len();
    let secs = args.seconds;
    let per_req = |d: Duration| if n == 0 { 0.0 } else { d.as_secs_f64() * 1e3 / n as f64 };
    println!(
        "model={} protocol={} shm={} bytes={} c={} requests={} throughput={:.2} p50_us={} p99_us={} mb_per_sec={:.1} \
         client_cpu_ms_per_req={:.3} server_cpu_ms_per_req={}",
        args.model,
        args.protocol,
        args.shm,
        args.bytes,
        args.concurrency,
        n,
        n as f64 / secs,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        n as f64 * args.bytes as f64 / secs / 1e6,
        per_req(cpu.0),
        cpu.1.map_or("-".to_string(), |s| format!("{:.3}", per_req(s))),
    );
    if n == 0 {
        bail!("no request completed within the window");
    }
    Ok(())
}
