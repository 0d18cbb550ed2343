//! Routes of the KServe v2 HTTP/REST protocol (plus Triton's extensions that exist so far) onto the
//! server core. Handlers only translate: every decision is the server's.
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::codec::{self, OutputOptions};
use super::compression::{self, Encoding};
use crate::error::InferError;
use crate::frontend::restricted::{Api, Restrictions};
use crate::logging::{self, SettingValue};
use crate::proto::to_json;
use crate::server::{EXTENSIONS, Server};

pub type HttpResponse = Response<Full<Bytes>>;

/// Settings of the HTTP frontend.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Largest request body accepted, compressed or not (`--http-max-input-size`).
    pub max_input_size: usize,
    /// `--http-restricted-api`.
    pub restricted: Arc<Restrictions>,
    /// TLS (`--http-ssl-cert`/`--http-ssl-key`); plain HTTP when `None`.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// How long a connection may go without a request before it is closed (between one and two
    /// of these; a request in flight keeps it open). See `watchdog`.
    pub header_timeout: std::time::Duration,
    /// How long a client may take to send a request's body (answered 408).
    pub body_timeout: std::time::Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        // tritonserver's default --http-max-input-size: 64 MiB.
        HttpOptions {
            max_input_size: 64 << 20,
            restricted: Arc::default(),
            tls: None,
            header_timeout: std::time::Duration::from_secs(30),
            body_timeout: std::time::Duration::from_secs(60),
        }
    }
}

const HEADER_LEN: &str = "inference-header-content-length";

fn reply(status: StatusCode, content_type: Option<&'static str>, body: Bytes) -> HttpResponse {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    if let Some(ct) = content_type {
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    r
}

fn json_reply(value: &serde_json::Value) -> HttpResponse {
    reply(StatusCode::OK, Some("application/json"), Bytes::from(value.to_string()))
}

fn empty(status: StatusCode) -> HttpResponse {
    reply(status, None, Bytes::new())
}

/// The one place an error becomes an HTTP response: Triton's status mapping, `{"error": …}` body.
pub fn error_reply(e: &InferError) -> HttpResponse {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    reply(status, Some("application/json"), Bytes::from(json!({ "error": e.message }).to_string()))
}

/// A parsed `/v2/models/{name}[/versions/{v}][/{action}]` path.
struct ModelPath {
    name: String,
    version: Option<i64>,
    action: Option<String>,
}

fn percent_decode(s: &str) -> Result<String, InferError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex =
                s.get(i + 1..i + 3).ok_or_else(|| InferError::invalid("malformed percent-encoding in the path"))?;
            out.push(
                u8::from_str_radix(hex, 16)
                    .map_err(|_| InferError::invalid("malformed percent-encoding in the path"))?,
            );
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| InferError::invalid("the path is not UTF-8"))
}

fn parse_model_path(rest: &str) -> Result<ModelPath, InferError> {
    let segments: Vec<&str> = rest.split('/').collect();
    let name = percent_decode(segments.first().copied().unwrap_or_default())?;
    let (version, tail) = match segments.get(1) {
        Some(&"versions") => {
            let v = segments.get(2).copied().unwrap_or_default();
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(InferError::invalid(format!("version '{v}' in the path is not a number")));
            }
            let v: i64 =
                v.parse().map_err(|_| InferError::invalid(format!("version '{v}' in the path is out of range")))?;
            (Some(v), &segments[3.min(segments.len())..])
        }
        _ => (None, &segments[1.min(segments.len())..]),
    };
    let action = match tail {
        [] => None,
        [a] => Some(a.to_string()),
        _ => return Err(InferError::not_found("Not Found")),
    };
    if name.is_empty() {
        return Err(InferError::not_found("Not Found"));
    }
    Ok(ModelPath { name, version, action })
}

/// The API group of an endpoint, for `--http-restricted-api` (the test hooks belong to none).
fn api_of(path: &str) -> Option<Api> {
    let api = match path {
        "/v2" => Api::Metadata,
        "/v2/health/live" | "/v2/health/ready" => Api::Health,
        "/v2/logging" => Api::Logging,
        "/v2/models/stats" => Api::Statistics,
        p if p.starts_with("/v2/repository") => Api::ModelRepository,
        p if p.starts_with("/v2/systemsharedmemory") || p.starts_with("/v2/cudasharedmemory") => Api::SharedMemory,
        p if p.starts_with("/v2/trace") => Api::Trace,
        // The action is the last segment after the model name (a model may be named "ready").
        p if p.starts_with("/v2/models/") => match p["/v2/models/".len()..].split('/').skip(1).last() {
            Some("ready") => Api::Health,
            Some("config") => Api::ModelConfig,
            Some("stats") => Api::Statistics,
            Some("trace") => Api::Trace,
            Some("infer" | "generate" | "generate_stream") => Api::Inference,
            _ => Api::Metadata,
        },
        _ => return None,
    };
    Some(api)
}

/// Reads the whole body within the size limit, undoing any `Content-Encoding`.
async fn read_body(headers: &HeaderMap, body: Incoming, options: &HttpOptions) -> Result<Bytes, InferError> {
    let limit = options.max_input_size;
    let too_big =
        || InferError::invalid(format!("request body exceeds the limit of {limit} bytes (--http-max-input-size)"));
    if let Some(len) =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(too_big());
    }
    // A client that stops sending its body is answered 408 instead of holding the request open.
    let collected =
        tokio::time::timeout(options.body_timeout, Limited::new(body, limit).collect()).await.map_err(|_| {
            InferError::timeout(format!(
                "the request body did not arrive within {} ms (--http-body-timeout-ms)",
                options.body_timeout.as_millis()
            ))
        })?;
    let raw = collected
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                too_big()
            } else {
                InferError::invalid(format!("failed to read the request body: {e}"))
            }
        })?
        .to_bytes();
    let encoding = match headers.get(header::CONTENT_ENCODING) {
        Some(v) => {
            Encoding::from_content_encoding(v.to_str().map_err(|_| InferError::invalid("bad Content-Encoding"))?)?
        }
        None => None,
    };
    match encoding {
        Some(enc) => compression::decompress(enc, &raw, limit),
        None => Ok(raw),
    }
}

/// Handles one request; never fails (errors become responses).
pub async fn handle(server: &Arc<Server>, options: &HttpOptions, req: Request<Incoming>) -> HttpResponse {
    match route(server, options, req).await {
        Ok(r) => r,
        Err(e) => error_reply(&e),
    }
}

async fn route(
    server: &Arc<Server>,
    options: &HttpOptions,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    if !options.restricted.is_empty()
        && let Some(api) = api_of(&path)
        && let Some(header) =
            options.restricted.refused(api, |name| req.headers().get(name).and_then(|v| v.to_str().ok()))
    {
        return Err(InferError::restricted(format!("This API is restricted, expecting header '{header}'")));
    }
    let method = req.method().clone();
    let (get, post) = (method == Method::GET, method == Method::POST);
    match path.as_str() {
        "/v2" if get => {
            return Ok(json_reply(&json!({
                "name": server.options().id,
                "version": env!("CARGO_PKG_VERSION"),
                "extensions": EXTENSIONS,
            })));
        }
        "/v2/health/live" if get => {
            return Ok(empty(if server.is_live() { StatusCode::OK } else { StatusCode::BAD_REQUEST }));
        }
        "/v2/health/ready" if get => {
            return Ok(empty(if server.is_ready() { StatusCode::OK } else { StatusCode::BAD_REQUEST }));
        }
        "/v2/logging" if get || post => {
            let settings = if post {
                let (parts, body) = req.into_parts();
                let body = read_body(&parts.headers, body, options).await?;
                let v: serde_json::Value = serde_json::from_slice(&body)
                    .map_err(|e| InferError::invalid(format!("failed to parse the request JSON: {e}")))?;
                let map = v.as_object().ok_or_else(|| InferError::invalid("log settings must be a JSON object"))?;
                let mut updates = Vec::new();
                for (k, v) in map {
                    let value = match v {
                        serde_json::Value::Bool(b) => SettingValue::Bool(*b),
                        serde_json::Value::String(s) => SettingValue::Text(s.clone()),
                        serde_json::Value::Number(n) => {
                            SettingValue::Uint(n.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
                                InferError::invalid(format!("log setting '{k}' must be a small non-negative integer"))
                            })?)
                        }
                        _ => {
                            return Err(InferError::invalid(format!("log setting '{k}' has the wrong type")));
                        }
                    };
                    updates.push((k.clone(), value));
                }
                logging::update(&updates)?
            } else {
                logging::settings()
            };
            return Ok(json_reply(&json!({
                "log_file": settings.log_file,
                "log_info": settings.log_info,
                "log_warning": settings.log_warning,
                "log_error": settings.log_error,
                "log_verbose_level": settings.log_verbose_level,
                "log_format": settings.log_format,
            })));
        }
        "/v2/repository/index" if post => {
            let (parts, body) = req.into_parts();
            let body = read_body(&parts.headers, body, options).await?;
            let ready = if body.is_empty() {
                false
            } else {
                let v: serde_json::Value = serde_json::from_slice(&body)
                    .map_err(|e| InferError::invalid(format!("failed to parse the request JSON: {e}")))?;
                v.get("ready").and_then(|r| r.as_bool()).unwrap_or(false)
            };
            let index: Vec<serde_json::Value> = server
                .index(ready)
                .into_iter()
                .map(|m| {
                    let mut v = json!({"name": m.name, "state": m.state, "reason": m.reason});
                    if !m.version.is_empty() {
                        v["version"] = json!(m.version);
                    }
                    v
                })
                .collect();
            return Ok(json_reply(&serde_json::Value::Array(index)));
        }
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/v2/systemsharedmemory") {
        return shared_memory(server, options, ShmKind::System, rest, get, post, req).await;
    }
    if let Some(rest) = path.strip_prefix("/v2/cudasharedmemory") {
        return shared_memory(server, options, ShmKind::Cuda, rest, get, post, req).await;
    }
    if let Some(rest) = path.strip_prefix("/v2/repository/models/")
        && post
        && (rest.ends_with("/load") || rest.ends_with("/unload"))
    {
        // tritonserver answers this way whenever the model control mode is not EXPLICIT.
        return Err(InferError::unavailable("explicit model load / unload is not allowed if polling is enabled"));
    }
    if path == "/v2/models/stats" && get {
        return Ok(json_reply(&to_json(&server.statistics(None, None)?, "inference.ModelStatisticsResponse")));
    }
    if let Some(rest) = path.strip_prefix("/v2/models/") {
        let mp = parse_model_path(rest)?;
        return match (mp.action.as_deref(), get, post) {
            (None, true, _) => {
                Ok(json_reply(&to_json(&server.metadata(&mp.name, mp.version)?, "inference.ModelMetadataResponse")))
            }
            (Some("ready"), true, _) => Ok(empty(if server.is_model_ready(&mp.name, mp.version) {
                StatusCode::OK
            } else {
                StatusCode::BAD_REQUEST
            })),
            (Some("config"), true, _) => Ok(json_reply(&server.config(&mp.name, mp.version)?)),
            (Some("infer"), _, true) => infer(server, options, mp, req).await,
            (Some("stats"), true, _) => Ok(json_reply(&to_json(
                &server.statistics(Some(&mp.name), mp.version)?,
                "inference.ModelStatisticsResponse",
            ))),
            (Some("trace"), _, _) => Err(InferError::unsupported("the trace extension is not implemented")),
            (Some("generate" | "generate_stream"), _, _) => {
                Err(InferError::unsupported("the generate extension is not implemented"))
            }
            (Some(_), _, _) | (None, false, _) => Err(InferError::not_found("Not Found")),
        };
    }
    if server.options().test_hooks
        && let Some(rest) = path.strip_prefix("/nereus/test/models/")
    {
        return test_hook(server, rest, post, req).await;
    }
    Err(InferError::not_found("Not Found"))
}

async fn infer(
    server: &Arc<Server>,
    options: &HttpOptions,
    mp: ModelPath,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    let (parts, body) = req.into_parts();
    let accept = parts
        .headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .and_then(Encoding::from_accept_encoding);
    let header_len =
        match parts.headers.get(HEADER_LEN) {
            Some(v) => Some(v.to_str().ok().and_then(|s| s.trim().parse::<usize>().ok()).ok_or_else(|| {
                InferError::invalid("Inference-Header-Content-Length must be a non-negative integer")
            })?),
            None => None,
        };
    let body = read_body(&parts.headers, body, options).await?;
    let (mut request, output_options): (_, OutputOptions) = codec::decode_request(
        body,
        header_len,
        || {
            let model = server.version(&mp.name, mp.version)?;
            match model.io.inputs.as_slice() {
                [only] => Ok((only.name.clone(), only.datatype, only.dims.clone(), model.io.max_batch_size > 0)),
                _ => Err(InferError::invalid(format!(
                    "Raw request must only have 1 input (found 1) to be deduced but got {} inputs in '{}' model configuration",
                    model.io.inputs.len(),
                    mp.name
                ))),
            }
        },
        server.shm(),
    )?;
    request.model_name = mp.name;
    request.model_version = mp.version;
    let receiver = server.infer(request, "HTTP end point")?;
    let response = receiver.await.map_err(|_| InferError::internal("the request was dropped without a response"))??;
    for (name, place) in &output_options.shm {
        if let Some(t) = response.outputs.iter().find(|t| &t.name == name) {
            server.shm().write(&place.region, place.offset, place.byte_size, &t.data)?;
        }
    }
    let encoded = codec::encode_response(&response, &output_options);
    // tritonserver compresses inference responses and nothing else: clients such as aiohttp
    // (tritonclient's asyncio HTTP client) read every other answer as plain JSON whatever they
    // advertised in Accept-Encoding.
    let (body, encoding) = match accept {
        Some(enc) if !encoded.body.is_empty() => (compression::compress(enc, &encoded.body), Some(enc)),
        _ => (encoded.body, None),
    };
    let mut r = match encoded.header_len {
        Some(n) => {
            let mut r = reply(StatusCode::OK, Some("application/octet-stream"), body);
            r.headers_mut().insert(HEADER_LEN, HeaderValue::from(n));
            r
        }
        None => reply(StatusCode::OK, Some("application/json"), body),
    };
    if let Some(enc) = encoding {
        r.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static(enc.name()));
    }
    Ok(r)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ShmKind {
    System,
    Cuda,
}

/// `v2/{system,cuda}sharedmemory[/region/{r}]/{status,register,unregister}`.
async fn shared_memory(
    server: &Arc<Server>,
    options: &HttpOptions,
    kind: ShmKind,
    rest: &str,
    get: bool,
    post: bool,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    let (region, action) = match rest.strip_prefix("/region/").map(|r| r.rsplit_once('/')) {
        Some(Some((region, action))) if !region.is_empty() && !region.contains('/') => (Some(region), action),
        Some(_) => return Err(InferError::not_found("Not Found")),
        None => (None, rest.trim_start_matches('/')),
    };
    let shm = server.shm();
    match (action, get, post, kind) {
        ("status", true, _, _) => {
            let regions = match kind {
                ShmKind::System => shm.status(region)?,
                ShmKind::Cuda => shm.cuda_status(region)?,
            };
            let regions: Vec<serde_json::Value> = regions
                .into_iter()
                .map(|r| json!({"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}))
                .collect();
            Ok(json_reply(&serde_json::Value::Array(regions)))
        }
        ("register", _, true, ShmKind::Cuda) => {
            let name = region.ok_or_else(|| InferError::not_found("Not Found"))?;
            shm.cuda_register(name)?;
            Ok(empty(StatusCode::OK))
        }
        ("register", _, true, ShmKind::System) => {
            let name = region.ok_or_else(|| InferError::not_found("Not Found"))?;
            let (parts, body) = req.into_parts();
            let body = read_body(&parts.headers, body, options).await?;
            let v: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| InferError::invalid(format!("failed to parse the request JSON: {e}")))?;
            let key =
                v.get("key").and_then(|k| k.as_str()).ok_or_else(|| InferError::invalid("'key' must be a string"))?;
            let number = |k: &str| {
                v.get(k).map_or(Ok(0), |n| {
                    n.as_u64().ok_or_else(|| InferError::invalid(format!("'{k}' must be an unsigned integer")))
                })
            };
            shm.register(name, key, number("offset")?, number("byte_size")?)?;
            Ok(empty(StatusCode::OK))
        }
        ("unregister", _, true, ShmKind::System) => {
            shm.unregister(region)?;
            Ok(empty(StatusCode::OK))
        }
        ("unregister", _, true, ShmKind::Cuda) => {
            shm.cuda_unregister(region)?;
            Ok(empty(StatusCode::OK))
        }
        _ => Err(InferError::not_found("Not Found")),
    }
}

/// Test-only hooks (enabled by `--test-hooks`): hold a model's instances at a gate before they
/// execute, read how many executions were in flight at once, and make instance rebuilds fail.
async fn test_hook(
    server: &Arc<Server>,
    rest: &str,
    post: bool,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    let (name, action) = rest.split_once('/').ok_or_else(|| InferError::not_found("Not Found"))?;
    let model = server.version(name, None)?;
    match (action, post) {
        ("gate", true) => {
            let body = req.into_body().collect().await.map_err(|e| InferError::invalid(e.to_string()))?.to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| InferError::invalid(e.to_string()))?;
            let open =
                v.get("open").and_then(|o| o.as_bool()).ok_or_else(|| InferError::invalid("need {\"open\": bool}"))?;
            model.probe.set_gate(open);
            Ok(empty(StatusCode::OK))
        }
        ("refuse_rebuilds", true) => {
            model.health.set_refuse_rebuilds(true);
            Ok(empty(StatusCode::OK))
        }
        ("executions", false) => {
            let (in_flight, max_in_flight, executions) = model.probe.snapshot();
            let queued = model.queued();
            Ok(json_reply(&json!({
                "in_flight": in_flight, "max_in_flight": max_in_flight, "executions": executions, "queued": queued,
                "inline": model.probe.inline_executions()
            })))
        }
        _ => Err(InferError::not_found("Not Found")),
    }
}
