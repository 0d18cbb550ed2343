//! The OTLP/HTTP span exporter behind a batch span processor, off the request path: finished spans
//! go into a bounded queue (a full queue drops the span, never blocks its request — the
//! OpenTelemetry SDK's `BatchSpanProcessor` semantics and log line), and a thread of its own sends
//! them in batches of at most `bsp_max_export_batch_size` as `ExportTraceServiceRequest`s
//! (`application/x-protobuf`) to the collector's `/v1/traces` URL: every `bsp_schedule_delay` ms,
//! or as soon as a batch is full. A collector that is unreachable or busy is tried again a few
//! times (meanwhile spans queue, and beyond the queue's bound are dropped); one that stays down
//! costs the spans of that batch and a log line now and then, nothing else.
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Uri;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use parking_lot::{Condvar, Mutex};
use prost::Message;

use super::otel;
use crate::proto::otlp::collector::trace::v1::ExportTraceServiceRequest;
use crate::proto::otlp::common::v1::InstrumentationScope;
use crate::proto::otlp::resource::v1::Resource;
use crate::proto::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};

/// How spans are batched and where they go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportOptions {
    /// The collector's OTLP/HTTP traces URL (`http://…`).
    pub url: String,
    /// Resource attributes, in order (a later one replaces an earlier one of the same key).
    pub resource: Vec<(String, String)>,
    /// Extra HTTP headers of every export request (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`).
    pub headers: Vec<(String, String)>,
    pub max_queue_size: usize,
    pub schedule_delay: Duration,
    pub max_export_batch_size: usize,
    /// How long one export request may take.
    pub timeout: Duration,
}

/// The queue finished spans go into; cheap to clone.
#[derive(Clone, Debug)]
pub struct SpanQueue {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    spans: Mutex<Pending>,
    wake: Condvar,
    max_queue: usize,
    max_batch: usize,
    delay: Duration,
    /// Spans dropped because the queue was full, not yet logged.
    dropped: AtomicU64,
}

#[derive(Debug, Default)]
struct Pending {
    spans: VecDeque<Span>,
    closed: bool,
}

impl SpanQueue {
    /// Queues a finished span, or drops it when the queue is full.
    pub fn push(&self, span: Span) {
        let s = &*self.shared;
        let mut pending = s.spans.lock();
        if pending.closed || pending.spans.len() >= s.max_queue {
            drop(pending);
            s.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.spans.push_back(span);
        // As the SDK's processor: a batch's worth, or a half-full queue, goes without waiting.
        let wake = s.delay.is_zero() || pending.spans.len() >= s.max_batch || pending.spans.len() >= s.max_queue / 2;
        drop(pending);
        if wake {
            s.wake.notify_one();
        }
    }
}

/// The exporter thread and its queue.
pub struct Exporter {
    queue: SpanQueue,
    done: crossbeam_channel::Receiver<()>,
}

impl Exporter {
    /// Starts the exporter thread. The URL must be `http://host[:port]/path`.
    pub fn start(options: ExportOptions) -> Result<Exporter, String> {
        let uri: Uri = options.url.parse().map_err(|e| format!("'{}' is not a URL: {e}", options.url))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(format!("'{}': only http:// collectors are supported (no TLS)", options.url));
            }
            _ => return Err(format!("'{}' is not an http:// URL", options.url)),
        }
        if uri.host().is_none() {
            return Err(format!("'{}' names no host", options.url));
        }
        let queue = SpanQueue {
            shared: Arc::new(Shared {
                spans: Mutex::new(Pending::default()),
                wake: Condvar::new(),
                max_queue: options.max_queue_size.max(1),
                max_batch: options.max_export_batch_size.max(1),
                delay: options.schedule_delay,
                dropped: AtomicU64::new(0),
            }),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("the exporter's runtime: {e}"))?;
        let (finished, done) = crossbeam_channel::bounded(1);
        let shared = queue.shared.clone();
        let client = Client { uri, sender: None, options };
        std::thread::Builder::new()
            .name("nereus-otlp".into())
            .spawn(move || {
                export_loop(&shared, client, &runtime);
                let _ = finished.send(());
            })
            .map_err(|e| format!("the exporter's thread: {e}"))?;
        Ok(Exporter { queue, done })
    }

    pub fn queue(&self) -> SpanQueue {
        self.queue.clone()
    }

    /// Exports what is queued and stops, waiting at most `wait`; spans finishing later are dropped.
    pub fn shutdown(&self, wait: Duration) {
        self.queue.shared.spans.lock().closed = true;
        self.queue.shared.wake.notify_all();
        if self.done.recv_timeout(wait).is_err() {
            tracing::warn!(
                "the trace exporter did not finish within {} ms; its queued spans are lost",
                wait.as_millis()
            );
        }
    }
}

/// Waits for a batch (a full one, the schedule delay, or shutdown) and exports it, until shut down.
fn export_loop(shared: &Shared, mut client: Client, runtime: &tokio::runtime::Runtime) {
    let mut failures = Throttle::default();
    loop {
        let (batches, closed) = {
            let mut pending = shared.spans.lock();
            let deadline = Instant::now() + shared.delay;
            while !pending.closed && pending.spans.len() < shared.max_batch.min(shared.max_queue / 2).max(1) {
                if shared.delay.is_zero() {
                    if !pending.spans.is_empty() {
                        break;
                    }
                    shared.wake.wait(&mut pending);
                } else if shared.wake.wait_until(&mut pending, deadline).timed_out() {
                    break;
                }
            }
            let mut batches = Vec::new();
            while !pending.spans.is_empty() {
                let n = pending.spans.len().min(shared.max_batch);
                batches.push(pending.spans.drain(..n).collect::<Vec<Span>>());
            }
            (batches, pending.closed)
        };
        let dropped = shared.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(
                "BatchSpanProcessor queue is full - dropping span. ({dropped} dropped; bsp_max_queue_size is {})",
                shared.max_queue
            );
        }
        for batch in batches {
            let count = batch.len();
            if let Err(e) = runtime.block_on(client.export(batch, &|| shared.spans.lock().closed)) {
                failures.report(&client.options.url, count, &e);
            }
        }
        if closed {
            return;
        }
    }
}

/// Logs export failures at most every few seconds, with how many spans were lost meanwhile.
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
    lost: usize,
}

impl Throttle {
    fn report(&mut self, url: &str, spans: usize, error: &str) {
        self.lost += spans;
        if self.last.is_some_and(|t| t.elapsed() < Duration::from_secs(10)) {
            return;
        }
        tracing::warn!("OTLP trace export to {url} failed: {error} ({} span(s) lost)", self.lost);
        self.last = Some(Instant::now());
        self.lost = 0;
    }
}

/// An HTTP/1.1 connection to the collector, made again when it breaks.
struct Client {
    uri: Uri,
    sender: Option<SendRequest<Full<Bytes>>>,
    options: ExportOptions,
}

/// Export attempts of a batch: a transient failure (the collector unreachable, HTTP 429, 502, 503
/// or 504, no answer in time) is tried again after 1 s, then 1.5 times longer each time up to 5 s,
/// five attempts in all, as the OpenTelemetry C++ SDK's OTLP/HTTP exporter does; not once shutdown
/// has begun.
const ATTEMPTS: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A failed export attempt.
struct Failure {
    message: String,
    /// Worth trying again.
    transient: bool,
    /// The connection failed (rather than the collector answering).
    connection: bool,
}

impl Failure {
    fn connection(message: impl Into<String>) -> Self {
        Failure { message: message.into(), transient: true, connection: true }
    }
}

impl Client {
    /// Sends one batch, trying again after transient failures unless `closing` says shutdown has
    /// begun.
    async fn export(&mut self, spans: Vec<Span>, closing: &dyn Fn() -> bool) -> Result<(), String> {
        let body = Bytes::from(self.request(spans).encode_to_vec());
        let (mut attempt, mut backoff) = (1, FIRST_BACKOFF);
        loop {
            match self.attempt(body.clone()).await {
                Ok(()) => return Ok(()),
                Err(f) if f.transient && attempt < ATTEMPTS && !closing() => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 3 / 2).min(MAX_BACKOFF);
                    attempt += 1;
                }
                Err(f) => return Err(f.message),
            }
        }
    }

    /// One attempt, within the export timeout.
    async fn attempt(&mut self, body: Bytes) -> Result<(), Failure> {
        let timeout = self.options.timeout;
        match tokio::time::timeout(timeout, self.post(body)).await {
            Ok(result) => result,
            Err(_) => {
                self.sender = None;
                Err(Failure::connection(format!("no answer within {} ms", timeout.as_millis())))
            }
        }
    }

    /// The export request: one resource, one scope, the spans.
    fn request(&self, spans: Vec<Span>) -> ExportTraceServiceRequest {
        let mut attributes: Vec<(&str, &str)> = Vec::new();
        for (k, v) in &self.options.resource {
            match attributes.iter_mut().find(|(key, _)| key == k) {
                Some(existing) => existing.1 = v,
                None => attributes.push((k, v)),
            }
        }
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: attributes.into_iter().map(|(k, v)| otel::text(k, v)).collect(),
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope { name: otel::SCOPE.into(), ..Default::default() }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// POSTs the body; a kept-alive connection the collector closed meanwhile is made again and
    /// the request sent once more.
    async fn post(&mut self, body: Bytes) -> Result<(), Failure> {
        let reused = self.sender.as_ref().is_some_and(|s| !s.is_closed());
        match self.send(body.clone()).await {
            Err(f) if f.connection && reused => self.send(body).await,
            result => result,
        }
    }

    async fn send(&mut self, body: Bytes) -> Result<(), Failure> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            self.sender = Some(self.connect().await.map_err(Failure::connection)?);
        }
        let Some(sender) = self.sender.as_mut() else { return Err(Failure::connection("not connected")) };
        let authority = self.uri.authority().map(|a| a.as_str()).unwrap_or_default();
        let path = self.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut request = hyper::Request::post(path)
            .header(hyper::header::HOST, authority)
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
            .header(hyper::header::USER_AGENT, concat!("nereus/", env!("CARGO_PKG_VERSION")));
        for (k, v) in &self.options.headers {
            request = request.header(k.as_str(), v.as_str());
        }
        let request = request.body(Full::new(body)).map_err(|e| Failure {
            message: e.to_string(),
            transient: false,
            connection: false,
        })?;
        let sent = async {
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, body))
        };
        match sent.await {
            Ok((status, _)) if status.is_success() => Ok(()),
            Ok((status, body)) => Err(Failure {
                message: format!("HTTP {status}: {}", String::from_utf8_lossy(&body[..body.len().min(200)])),
                transient: matches!(status.as_u16(), 429 | 502 | 503 | 504),
                connection: false,
            }),
            Err(e) => {
                self.sender = None;
                Err(Failure::connection(e.to_string()))
            }
        }
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let host = self.uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
        let port = self.uri.port_u16().unwrap_or(80);
        let stream = tokio::net::TcpStream::connect((host, port)).await.map_err(|e| format!("connecting: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}
