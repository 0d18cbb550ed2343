//! Routes of the KServe v2 HTTP/REST protocol (plus Triton's extensions that exist so far) onto the
//! server core. Handlers only translate: every decision is the server's.
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::body::ReplyBody;
use super::codec::{self, OutputOptions};
use super::compression::{self, Encoding};
use super::generate;
use super::request_body::{self, BodyError};
use crate::api;
use crate::error::InferError;
use crate::frontend::restricted::{Api, Restrictions};
use crate::logging::{self, SettingValue};
use crate::model::ModelVersion;
use crate::proto::to_json;
use crate::server::{EXTENSIONS, Server};
use crate::shm::ShmKind;
use crate::test_hooks::TestHooks;
use crate::trace::update::SettingInput;
use crate::trace::{Carrier, FrontendEvent, ReportedSettings};

pub type HttpResponse = Response<ReplyBody>;

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
    /// `--http-header-forward-pattern`: the request headers passed on as request parameters.
    pub forward_headers: Option<crate::api::headers::HeaderForward>,
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
            forward_headers: None,
        }
    }
}

const HEADER_LEN: &str = "inference-header-content-length";

fn reply(status: StatusCode, content_type: Option<&'static str>, body: Bytes) -> HttpResponse {
    let mut r = Response::new(ReplyBody::new(body));
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

/// A health endpoint's answer: 200 when live (ready), 400 when not, as tritonserver.
fn health(ok: bool) -> HttpResponse {
    empty(if ok { StatusCode::OK } else { StatusCode::BAD_REQUEST })
}

/// The one place an error becomes an HTTP response: Triton's status mapping, `{"error": …}` body.
pub fn error_reply(e: &InferError) -> HttpResponse {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    reply(status, Some("application/json"), Bytes::from(json!({ "error": e.message }).to_string()))
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

/// What a request body holds, for the words of the size-limit error (tritonserver names the JSON
/// of a request, or the raw input of a raw binary inference request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyKind {
    Json,
    RawInput,
}

impl BodyKind {
    /// tritonserver's refusal of a body of `size` bytes (`None`: not known, only that it passed
    /// the limit, as for a chunked body) over `limit`.
    fn too_big(self, size: Option<u64>, limit: usize) -> InferError {
        let size = size.map_or_else(|| format!("more than {limit}"), |n| n.to_string());
        InferError::invalid(match self {
            BodyKind::Json => format!(
                "request JSON size of {size} bytes exceeds the maximum allowed input size of {limit} bytes. \
                 Use --http-max-input-size to increase the limit."
            ),
            BodyKind::RawInput => format!(
                "Raw input has a byte_size ({size} bytes) that exceeds the maximum allowed value of {limit} bytes. \
                 Use --http-max-input-size to increase the limit."
            ),
        })
    }
}

/// Reads the whole body (JSON) within the size limit, undoing any `Content-Encoding`.
async fn read_body(headers: &HeaderMap, body: Incoming, options: &HttpOptions) -> Result<Bytes, InferError> {
    read_body_as(headers, body, options, BodyKind::Json, 0).await
}

/// [`read_body`] for a body of `kind`, its byte at `align_at` on a 64-byte boundary where the body
/// is joined from pieces (`request_body::collect`).
async fn read_body_as(
    headers: &HeaderMap,
    body: Incoming,
    options: &HttpOptions,
    kind: BodyKind,
    align_at: usize,
) -> Result<Bytes, InferError> {
    let limit = options.max_input_size;
    if let Some(len) =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(kind.too_big(Some(len), limit));
    }
    let chunked = headers
        .get(header::TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    // A client that stops sending its body is answered 408 instead of holding the request open.
    let collected = tokio::time::timeout(options.body_timeout, request_body::collect(body, limit, chunked, align_at))
        .await
        .map_err(|_| {
            InferError::timeout(format!(
                "the request body did not arrive within {} ms (--http-body-timeout-ms)",
                options.body_timeout.as_millis()
            ))
        })?;
    let raw = collected.map_err(|e| match e {
        BodyError::TooBig => kind.too_big(None, limit),
        BodyError::TooManyChunks => InferError::invalid(BodyError::too_many_chunks_message()),
        BodyError::Read(e) => InferError::invalid(format!("failed to read the request body: {e}")),
    })?;
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

/// Every endpoint of the HTTP surface; the [`Routes`] table maps paths to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    ServerMetadata,
    Live,
    Ready,
    Logging,
    /// Statistics of every model.
    Statistics,
    /// `/v2/models/{model}[/versions/{version}][/…]`.
    Model(ModelRoute),
    RepositoryIndex,
    RepositoryLoad,
    RepositoryUnload,
    /// `/v2/{system,cuda}sharedmemory[/region/{region}]/…`.
    SharedMemory(ShmKind, ShmAction),
    /// `/v2/trace/setting`.
    TraceSetting,
    /// `/nereus/test/models/{model}/{hook}`, only with `--test-hooks`.
    TestHook,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ModelRoute {
    Metadata,
    Ready,
    Config,
    Infer,
    Statistics,
    TraceSetting,
    Generate,
    GenerateStream,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ShmAction {
    Status,
    Register,
    Unregister,
}

impl Route {
    /// The API group of the endpoint, for `--http-restricted-api` (the test hooks belong to none).
    fn api(self) -> Option<Api> {
        Some(match self {
            Route::ServerMetadata => Api::Metadata,
            Route::Live | Route::Ready | Route::Model(ModelRoute::Ready) => Api::Health,
            Route::Logging => Api::Logging,
            Route::Statistics | Route::Model(ModelRoute::Statistics) => Api::Statistics,
            Route::Model(ModelRoute::Metadata) => Api::Metadata,
            Route::Model(ModelRoute::Config) => Api::ModelConfig,
            Route::Model(ModelRoute::Infer | ModelRoute::Generate | ModelRoute::GenerateStream) => Api::Inference,
            Route::Model(ModelRoute::TraceSetting) | Route::TraceSetting => Api::Trace,
            Route::RepositoryIndex | Route::RepositoryLoad | Route::RepositoryUnload => Api::ModelRepository,
            Route::SharedMemory(..) => Api::SharedMemory,
            Route::TestHook => return None,
        })
    }

    /// Whether `method` is the one (or one of those) the endpoint takes.
    fn allows(self, method: &Method) -> bool {
        let (get, post) = (method == Method::GET, method == Method::POST);
        match self {
            Route::Logging | Route::TraceSetting | Route::Model(ModelRoute::TraceSetting) | Route::TestHook => {
                get || post
            }
            Route::RepositoryIndex
            | Route::RepositoryLoad
            | Route::RepositoryUnload
            | Route::Model(ModelRoute::Infer | ModelRoute::Generate | ModelRoute::GenerateStream)
            | Route::SharedMemory(_, ShmAction::Register | ShmAction::Unregister) => post,
            _ => get,
        }
    }
}

/// The route table, built once per HTTP frontend.
pub struct Routes(matchit::Router<Route>);

impl Default for Routes {
    fn default() -> Self {
        let mut table = Vec::new();
        let fixed = [
            ("/v2", Route::ServerMetadata),
            ("/v2/health/live", Route::Live),
            ("/v2/health/ready", Route::Ready),
            ("/v2/logging", Route::Logging),
            ("/v2/models/stats", Route::Statistics),
            ("/v2/trace/setting", Route::TraceSetting),
            ("/v2/repository/index", Route::RepositoryIndex),
            ("/v2/repository/models/{model}/load", Route::RepositoryLoad),
            ("/v2/repository/models/{model}/unload", Route::RepositoryUnload),
            ("/nereus/test/models/{model}/{hook}", Route::TestHook),
        ];
        table.extend(fixed.map(|(path, route)| (path.to_string(), route)));
        let model_actions = [
            ("", ModelRoute::Metadata),
            ("/ready", ModelRoute::Ready),
            ("/config", ModelRoute::Config),
            ("/infer", ModelRoute::Infer),
            ("/stats", ModelRoute::Statistics),
            ("/trace/setting", ModelRoute::TraceSetting),
            ("/generate", ModelRoute::Generate),
            ("/generate_stream", ModelRoute::GenerateStream),
        ];
        for (action, route) in model_actions {
            for base in ["/v2/models/{model}", "/v2/models/{model}/versions/{version}"] {
                table.push((format!("{base}{action}"), Route::Model(route)));
            }
        }
        for (kind, prefix) in [(ShmKind::System, "/v2/systemsharedmemory"), (ShmKind::Cuda, "/v2/cudasharedmemory")] {
            for (action, name) in [
                (ShmAction::Status, "status"),
                (ShmAction::Register, "register"),
                (ShmAction::Unregister, "unregister"),
            ] {
                table.push((format!("{prefix}/region/{{region}}/{name}"), Route::SharedMemory(kind, action)));
                if action != ShmAction::Register {
                    table.push((format!("{prefix}/{name}"), Route::SharedMemory(kind, action)));
                }
            }
        }
        let mut router = matchit::Router::new();
        for (path, route) in table {
            router.insert(path, route).expect("the route table has no conflicting paths");
        }
        Routes(router)
    }
}

/// The path parameters of a matched route, percent-decoded.
struct PathParams {
    model: Option<String>,
    version: Option<i64>,
    region: Option<String>,
    hook: Option<String>,
}

impl PathParams {
    fn of(params: &matchit::Params<'_, '_>) -> Result<Self, InferError> {
        let version = match params.get("version") {
            None => None,
            Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => Some(
                v.parse::<i64>()
                    .map_err(|_| InferError::invalid(format!("version '{v}' in the path is out of range")))?,
            ),
            Some(v) => return Err(InferError::invalid(format!("version '{v}' in the path is not a number"))),
        };
        let text = |key: &str| params.get(key).map(percent_decode).transpose();
        Ok(PathParams { model: text("model")?, version, region: text("region")?, hook: text("hook")? })
    }

    fn model(&self) -> &str {
        self.model.as_deref().unwrap_or_default()
    }
}

/// Handles one request; never fails (errors become responses).
pub async fn handle(
    server: &Arc<Server>,
    options: &HttpOptions,
    routes: &Routes,
    req: Request<Incoming>,
) -> HttpResponse {
    match route(server, options, routes, req).await {
        Ok(r) => r,
        Err(e) => error_reply(&e),
    }
}

async fn route(
    server: &Arc<Server>,
    options: &HttpOptions,
    routes: &Routes,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    let path = req.uri().path();
    let path = if path.len() > 1 { path.trim_end_matches('/') } else { path };
    let Ok(matched) = routes.0.at(path) else { return Err(InferError::not_found("Not Found")) };
    let route = *matched.value;
    if route == Route::TestHook && !server.options().test_hooks {
        return Err(InferError::not_found("Not Found"));
    }
    if !options.restricted.is_empty()
        && let Some(api) = route.api()
        && let Some(header) =
            options.restricted.refused(api, |name| req.headers().get(name).and_then(|v| v.to_str().ok()))
    {
        return Err(InferError::restricted(format!("This API is restricted, expecting header '{header}'")));
    }
    if !route.allows(req.method()) {
        return Ok(reply(
            StatusCode::METHOD_NOT_ALLOWED,
            Some("application/json"),
            Bytes::from(json!({ "error": "Method Not Allowed" }).to_string()),
        ));
    }
    let params = PathParams::of(&matched.params)?;
    let post = req.method() == Method::POST;
    match route {
        Route::ServerMetadata => Ok(json_reply(&json!({
            "name": server.options().id,
            "version": env!("CARGO_PKG_VERSION"),
            "extensions": EXTENSIONS,
        }))),
        Route::Live => Ok(health(server.live()?)),
        Route::Ready => Ok(health(server.ready()?)),
        Route::Logging => logging_settings(options, post, req).await,
        Route::Statistics => {
            Ok(json_reply(&to_json(&server.statistics(None, None)?, "inference.ModelStatisticsResponse")))
        }
        Route::RepositoryIndex => repository_index(server, options, req).await,
        Route::RepositoryLoad | Route::RepositoryUnload => {
            repository_control(server, options, route == Route::RepositoryLoad, params.model().to_string(), req).await
        }
        Route::TraceSetting => trace_settings(server, options, "", post, req).await,
        Route::SharedMemory(kind, action) => {
            shared_memory(server, options, kind, action, params.region.as_deref(), req).await
        }
        Route::TestHook => {
            test_hook(server, params.model(), params.hook.as_deref().unwrap_or_default(), post, req).await
        }
        Route::Model(action) => {
            let (name, version) = (params.model.unwrap_or_default(), params.version);
            match action {
                ModelRoute::Metadata => {
                    Ok(json_reply(&to_json(&server.metadata(&name, version)?, "inference.ModelMetadataResponse")))
                }
                ModelRoute::Ready => Ok(empty(if server.is_model_ready(&name, version) {
                    StatusCode::OK
                } else {
                    StatusCode::BAD_REQUEST
                })),
                ModelRoute::Config => Ok(json_reply(&server.config(&name, version)?)),
                ModelRoute::Statistics => Ok(json_reply(&to_json(
                    &server.statistics(Some(&name), version)?,
                    "inference.ModelStatisticsResponse",
                ))),
                // The request takes the decoded name: no second copy of it.
                ModelRoute::Infer => infer(server, options, name, version, req).await,
                ModelRoute::Generate | ModelRoute::GenerateStream => {
                    let body = read_body(&req.headers().clone(), req.into_body(), options).await?;
                    generate::answer(server, name, version, action == ModelRoute::GenerateStream, body).await
                }
                // tritonserver has no versioned trace setting: that path is no endpoint.
                ModelRoute::TraceSetting if version.is_some() => Err(InferError::not_found("Not Found")),
                ModelRoute::TraceSetting => trace_settings(server, options, &name, post, req).await,
            }
        }
    }
}

/// `GET`/`POST /v2/logging`: the log settings, changed first by a POST's JSON object.
async fn logging_settings(
    options: &HttpOptions,
    post: bool,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
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
                serde_json::Value::Null => SettingValue::Null,
                _ => return Err(InferError::invalid(format!("log setting '{k}' has the wrong type"))),
            };
            updates.push((k.clone(), value));
        }
        logging::update(&updates)?
    } else {
        logging::settings()
    };
    Ok(json_reply(&json!({
        "log_file": settings.log_file,
        "log_info": settings.log_info,
        "log_warning": settings.log_warning,
        "log_error": settings.log_error,
        "log_verbose_level": settings.log_verbose_level,
        "log_format": settings.log_format,
    })))
}

/// `GET`/`POST /v2/trace/setting` and `/v2/models/{model}/trace/setting`: the trace setting,
/// changed first by a POST's JSON object (`null` clears a field).
async fn trace_settings(
    server: &Arc<Server>,
    options: &HttpOptions,
    model: &str,
    post: bool,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    let update = if post {
        let (parts, body) = req.into_parts();
        let body = read_body(&parts.headers, body, options).await?;
        let mut settings = Vec::new();
        if !body.is_empty() {
            let v: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| InferError::invalid(format!("failed to parse the request JSON: {e}")))?;
            for (key, value) in v.as_object().into_iter().flatten() {
                let input = match value {
                    serde_json::Value::Null => SettingInput::Clear,
                    serde_json::Value::String(s) => SettingInput::Text(s.clone()),
                    serde_json::Value::Array(items) => items
                        .iter()
                        .map(|i| i.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .map_or(SettingInput::Malformed, SettingInput::List),
                    _ => SettingInput::Malformed,
                };
                settings.push((key.clone(), input));
            }
        }
        Some(settings)
    } else {
        None
    };
    let reported = api::trace::settings(server, model, update.as_deref())?;
    Ok(reply(StatusCode::OK, Some("application/json"), Bytes::from(settings_json(&reported))))
}

/// The trace setting's JSON as tritonserver writes it: `trace_level` a list, every other value a
/// string, a key given twice (`resource`) written twice.
fn settings_json(settings: &ReportedSettings) -> String {
    let mut out = format!("{{\"trace_level\":{}", json!(settings.level));
    for (key, value) in &settings.entries {
        out.push_str(&format!(",{}:{}", json!(key), json!(value)));
    }
    out.push('}');
    out
}

/// A request's headers, where the trace extension looks for the caller's `traceparent`.
impl Carrier for HeaderMap {
    fn values(&self, key: &str) -> Vec<&str> {
        self.get_all(key).iter().filter_map(|v| v.to_str().ok()).collect()
    }

    fn pairs(&self) -> Vec<(String, String)> {
        self.iter().map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned())).collect()
    }
}

/// `POST /v2/repository/index` (`{"ready": true}` lists only ready models).
/// The body of a repository index request: only `ready` matters.
#[derive(serde::Deserialize)]
struct IndexRequest<'a> {
    /// Raw, so that serde_json skips the value without recursing: tritonserver parses any depth
    /// and refuses a `ready` that is not a boolean, where a typed parse would stop at serde_json's
    /// recursion limit (128) with another message.
    #[serde(borrow, default, deserialize_with = "present")]
    ready: Option<&'a serde_json::value::RawValue>,
}

/// A field that is present, `null` included (a plain `Option` reads `null` as absent, where
/// tritonserver refuses `"ready": null` as not a boolean).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de serde_json::value::RawValue>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}

/// The index request's `ready` flag (absent: false); anything but a boolean is refused in
/// tritonserver's words.
fn index_ready(body: &[u8]) -> Result<bool, InferError> {
    let request: IndexRequest = serde_json::from_slice(body)
        .map_err(|e| InferError::invalid(format!("failed to parse the request JSON: {e}")))?;
    match request.ready.map(|r| r.get()) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(InferError::invalid("Invalid value for 'ready': expected a boolean")),
    }
}

async fn repository_index(
    server: &Arc<Server>,
    options: &HttpOptions,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    let (parts, body) = req.into_parts();
    let body = read_body(&parts.headers, body, options).await?;
    let ready = if body.is_empty() { false } else { index_ready(&body)? };
    let index: Vec<serde_json::Value> = server
        .index(ready)
        .into_iter()
        .map(|m| {
            // As tritonserver: the name alone for a model never loaded; no empty reason.
            let mut v = json!({"name": m.name});
            if !m.version.is_empty() {
                v["version"] = json!(m.version);
            }
            if !m.state.is_empty() {
                v["state"] = json!(m.state);
            }
            if !m.reason.is_empty() {
                v["reason"] = json!(m.reason);
            }
            v
        })
        .collect();
    Ok(json_reply(&serde_json::Value::Array(index)))
}

/// `POST /v2/repository/models/{model}/load` and `…/unload`: the body, if any, is
/// `{"parameters": {…}}`; a `file:<path>` parameter's value is the file in base64.
async fn repository_control(
    server: &Arc<Server>,
    options: &HttpOptions,
    load: bool,
    name: String,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    use crate::api::repository::{self as repo, RepoParam};
    use base64::Engine as _;
    let (parts, body) = req.into_parts();
    let body = read_body(&parts.headers, body, options).await?;
    let mut params = Vec::new();
    if !body.is_empty() {
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| InferError::invalid(format!("failed to parse the request JSON: {e}")))?;
        if let Some(map) = v.get("parameters").and_then(|p| p.as_object()) {
            for (key, value) in map {
                let value = match value {
                    serde_json::Value::String(s) if key.starts_with("file:") => RepoParam::Bytes(
                        base64::engine::general_purpose::STANDARD
                            .decode(s)
                            .map_err(|e| InferError::invalid(format!("parameter '{key}' is not base64: {e}")))?,
                    ),
                    serde_json::Value::String(s) => RepoParam::Text(s.clone()),
                    serde_json::Value::Bool(b) => RepoParam::Bool(*b),
                    serde_json::Value::Number(n) if n.is_i64() => RepoParam::Int(n.as_i64().unwrap_or_default()),
                    _ => return Err(InferError::invalid(format!("parameter '{key}' has an unsupported type"))),
                };
                params.push((key.clone(), value));
            }
        }
    }
    let server = server.clone();
    let outcome = if load {
        let overrides = repo::load_overrides(params)?;
        tokio::task::spawn_blocking(move || server.load_model(&name, &overrides)).await
    } else {
        let dependents = repo::unload_dependents(params)?;
        tokio::task::spawn_blocking(move || server.unload_model(&name, dependents)).await
    };
    outcome.map_err(|e| InferError::internal(format!("the repository operation failed: {e}")))??;
    Ok(empty(StatusCode::OK))
}

/// `POST /v2/models/{model}[/versions/{version}]/infer`.
async fn infer(
    server: &Arc<Server>,
    options: &HttpOptions,
    name: String,
    version: Option<i64>,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    let trace = api::trace::start(server, &name, version, req.headers());
    if let Some(trace) = &trace {
        trace.capture(FrontendEvent::HttpRecvStart, Instant::now());
    }
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
    let kind = if header_len == Some(0) { BodyKind::RawInput } else { BodyKind::Json };
    // Binary tensors start after the JSON header: aligned there, ONNX Runtime reads them in place.
    let body = read_body_as(&parts.headers, body, options, kind, header_len.unwrap_or(0)).await?;
    if let Some(trace) = &trace {
        trace.capture(FrontendEvent::HttpRecvEnd, Instant::now());
    }
    let (mut request, output_options): (_, OutputOptions) = codec::decode_request(
        body,
        header_len,
        || {
            let model = server.version(&name, version)?;
            match model.io.inputs.as_slice() {
                [only] => Ok((only.name.clone(), only.datatype, only.dims.clone(), model.io.max_batch_size > 0)),
                _ => Err(InferError::invalid(format!(
                    "Raw request must only have 1 input (found 1) to be deduced but got {} inputs in '{}' model configuration",
                    model.io.inputs.len(),
                    name
                ))),
            }
        },
        server.shm(),
        &name,
    )?;
    if let Some(forward) = &options.forward_headers {
        forward.apply(&parts.headers, &mut request)?;
    }
    // The head's header values and URI are slices of hyper's read buffer: let go of them before
    // the request waits for its answer (see `request_body::collect`).
    drop(parts);
    request.model_name = name;
    request.model_version = version;
    request.trace = trace.clone();
    let response =
        api::infer::run(server, request, &output_options.shm, &output_options.classes, "HTTP end point").await?;
    let encoded = codec::encode_response(&response, &output_options)?;
    // tritonserver compresses inference responses and nothing else: clients such as aiohttp
    // (tritonclient's asyncio HTTP client) read every other answer as plain JSON whatever they
    // advertised in Accept-Encoding.
    let header_len = encoded.header_len;
    let (chunks, encoding) = match accept {
        Some(enc) if !encoded.is_empty() => (vec![compression::compress(enc, &encoded.joined())], Some(enc)),
        _ => (encoded.into_chunks(), None),
    };
    let content_type = if header_len.is_some() { "application/octet-stream" } else { "application/json" };
    let mut r = Response::new(ReplyBody::chunks(chunks));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(n) = header_len {
        r.headers_mut().insert(HEADER_LEN, HeaderValue::from(n));
    }
    if let Some(enc) = encoding {
        r.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static(enc.name()));
    }
    if let Some(trace) = trace {
        r.body_mut().trace(trace);
    }
    Ok(r)
}

/// `v2/{system,cuda}sharedmemory[/region/{region}]/{status,register,unregister}`.
async fn shared_memory(
    server: &Arc<Server>,
    options: &HttpOptions,
    kind: ShmKind,
    action: ShmAction,
    region: Option<&str>,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    let shm = server.shm();
    match (action, kind) {
        (ShmAction::Status, ShmKind::System) => {
            let regions: Vec<serde_json::Value> = shm
                .system_status(region)?
                .into_iter()
                .map(|r| json!({"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}))
                .collect();
            Ok(json_reply(&serde_json::Value::Array(regions)))
        }
        (ShmAction::Status, ShmKind::Cuda) => {
            let regions: Vec<serde_json::Value> = shm
                .cuda_status(region)?
                .into_iter()
                .map(|r| json!({"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}))
                .collect();
            Ok(json_reply(&serde_json::Value::Array(regions)))
        }
        (ShmAction::Register, _) => {
            shm.check_enabled()?;
            let name = region.unwrap_or_default();
            let (parts, body) = req.into_parts();
            let body = read_body(&parts.headers, body, options).await?;
            let v: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| InferError::invalid(format!("failed to parse the request JSON: {e}")))?;
            let number = |k: &str| {
                v.get(k).map_or(Ok(0), |n| {
                    n.as_u64().ok_or_else(|| InferError::invalid(format!("'{k}' must be an unsigned integer")))
                })
            };
            match kind {
                ShmKind::System => {
                    let key = v
                        .get("key")
                        .and_then(|k| k.as_str())
                        .ok_or_else(|| InferError::invalid("'key' must be a string"))?;
                    shm.register(name, key, number("offset")?, number("byte_size")?)?;
                }
                ShmKind::Cuda => {
                    let handle = cuda_raw_handle(&v)?;
                    shm.cuda_register(name, &handle, number("device_id")?, number("byte_size")?)?;
                }
            }
            Ok(empty(StatusCode::OK))
        }
        (ShmAction::Unregister, _) => {
            shm.unregister(kind, region)?;
            Ok(empty(StatusCode::OK))
        }
    }
}

/// The CUDA IPC handle of a `cudasharedmemory` registration: `"raw_handle": {"b64": "<base64>"}`.
fn cuda_raw_handle(v: &serde_json::Value) -> Result<Vec<u8>, InferError> {
    use base64::Engine as _;
    let raw = v
        .get("raw_handle")
        .ok_or_else(|| InferError::invalid("Shared memory register request has no 'raw_handle' field"))?;
    let b64 = raw
        .get("b64")
        .and_then(|b| b.as_str())
        .ok_or_else(|| InferError::invalid("'raw_handle' must be an object with a base64 string 'b64'"))?;
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .ok()
        .filter(|h| h.len() == crate::shm::CUDA_HANDLE_SIZE)
        .ok_or_else(|| InferError::invalid("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"))
}

/// A version's test hooks (with `--test-hooks`, every version has them).
fn hooks(model: &ModelVersion) -> Result<&TestHooks, InferError> {
    model.hooks.as_deref().ok_or_else(|| InferError::not_found("Not Found"))
}

/// Test-only hooks (enabled by `--test-hooks`, see [`crate::test_hooks`]): hold a model's instances
/// at a gate before they execute, read how many executions were in flight at once, and make
/// instance rebuilds fail or find the server's Wasm memory budget held.
async fn test_hook(
    server: &Arc<Server>,
    name: &str,
    action: &str,
    post: bool,
    req: Request<Incoming>,
) -> Result<HttpResponse, InferError> {
    let model = server.version(name, None)?;
    match (action, post) {
        ("gate", true) => {
            let body = req.into_body().collect().await.map_err(|e| InferError::invalid(e.to_string()))?.to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| InferError::invalid(e.to_string()))?;
            let open =
                v.get("open").and_then(|o| o.as_bool()).ok_or_else(|| InferError::invalid("need {\"open\": bool}"))?;
            hooks(&model)?.set_gate(open);
            Ok(empty(StatusCode::OK))
        }
        ("refuse_rebuilds", true) => {
            hooks(&model)?.refuse_rebuilds();
            Ok(empty(StatusCode::OK))
        }
        ("hold_budget_at_rebuilds", true) => {
            hooks(&model)?.hold_budget_at_rebuilds();
            Ok(empty(StatusCode::OK))
        }
        ("executions", false) => {
            let (in_flight, max_in_flight, executions) = model.probe.snapshot();
            let queued = model.queued();
            Ok(json_reply(&json!({
                "in_flight": in_flight, "max_in_flight": max_in_flight, "executions": executions, "queued": queued,
                "inline": model.probe.inline_executions(), "on_caller": model.probe.on_caller_executions(),
                "cancelled": model.stats.cancelled(),
                "abandoned": server.abandoned()
            })))
        }
        _ => Err(InferError::not_found("Not Found")),
    }
}
