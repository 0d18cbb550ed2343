//! Triton's gRPC protocol (`inference.GRPCInferenceService`) and `grpc.health.v1.Health`, on
//! tonic. The service only translates: every decision is the server's.
pub mod compression;
pub mod convert;
mod deadline;
mod direct;
mod listen;
mod stream;
mod verbose;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::api;
use crate::api::headers::HeaderForward;
use crate::error::InferError;
use crate::frontend::connections::Connections;
use crate::frontend::io_threads::Handed;
use crate::frontend::restricted::{Api, Restrictions};
use crate::logging::{self, SettingValue};
use crate::proto::health::health_check_response::ServingStatus;
use crate::proto::health::health_server::{Health, HealthServer};
use crate::proto::health::{HealthCheckRequest, HealthCheckResponse};
use crate::proto::inference as pb;
use crate::proto::inference::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use crate::request::InferenceRequest;
use crate::server::{EXTENSIONS, Server};
use crate::shm::ShmKind;
use crate::trace::update::SettingInput;
use crate::trace::{Carrier, FrontendEvent, Trace};
use compression::ResponseCompression;
use convert::status;

/// Transport settings (tritonserver's `--grpc-*` flags).
#[derive(Clone, Debug)]
pub struct GrpcOptions {
    /// Largest message accepted or sent (tritonserver's default: 2 GiB − 1).
    pub max_message_size: usize,
    /// `--grpc-keepalive-time` (ms): how often to ping an idle connection.
    pub keepalive_time: Option<Duration>,
    /// `--grpc-keepalive-timeout` (ms): how long to wait for the ping's answer.
    pub keepalive_timeout: Option<Duration>,
    /// `--grpc-restricted-protocol`.
    pub restricted: Arc<Restrictions>,
    /// `--grpc-use-ssl[-mutual]` (ALPN `h2`); plain HTTP/2 when `None`.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// `--grpc-infer-response-compression-level`.
    pub response_compression: ResponseCompression,
    /// `--grpc-stream-stall-timeout-ms`: how long a stream may wait for its client to take the
    /// next message (see [`stream`]); `None`: as long as the client stays connected.
    pub stream_stall_timeout: Option<Duration>,
    /// `--grpc-header-forward-pattern`: the call headers passed on as request parameters.
    pub forward_headers: Option<HeaderForward>,
}

impl Default for GrpcOptions {
    fn default() -> Self {
        GrpcOptions {
            max_message_size: i32::MAX as usize,
            keepalive_time: None,
            keepalive_timeout: None,
            restricted: Arc::default(),
            tls: None,
            response_compression: ResponseCompression::None,
            stream_stall_timeout: Some(Duration::from_secs(30)),
            forward_headers: None,
        }
    }
}

/// The gRPC face of the server.
pub struct GrpcFrontend {
    server: Arc<Server>,
    restricted: Arc<Restrictions>,
    stream_stall_timeout: Option<Duration>,
    forward_headers: Option<HeaderForward>,
}

/// Refuses a call to a restricted protocol without its header, with Triton's status and message.
fn allow<T>(restricted: &Restrictions, api: Api, request: &Request<T>) -> Result<(), Status> {
    refuse(restricted.refused(api, |name| request.metadata().get(name).and_then(|v| v.to_str().ok())))
}

/// [`allow`] for a call read from its HTTP/2 headers ([`direct`]).
fn allow_headers(restricted: &Restrictions, api: Api, headers: &hyper::http::HeaderMap) -> Result<(), Status> {
    refuse(restricted.refused(api, |name| headers.get(name).and_then(|v| v.to_str().ok())))
}

fn refuse(missing: Option<&str>) -> Result<(), Status> {
    match missing {
        None => Ok(()),
        Some(header) => {
            Err(status(InferError::restricted(format!("This protocol is restricted, expecting header '{header}'"))))
        }
    }
}

type GrpcResult<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl GrpcInferenceService for GrpcFrontend {
    async fn server_live(&self, r: Request<pb::ServerLiveRequest>) -> GrpcResult<pb::ServerLiveResponse> {
        allow(&self.restricted, Api::Health, &r)?;
        Ok(Response::new(pb::ServerLiveResponse { live: self.server.live().map_err(status)? }))
    }

    async fn server_ready(&self, r: Request<pb::ServerReadyRequest>) -> GrpcResult<pb::ServerReadyResponse> {
        allow(&self.restricted, Api::Health, &r)?;
        Ok(Response::new(pb::ServerReadyResponse { ready: self.server.ready().map_err(status)? }))
    }

    async fn model_ready(&self, r: Request<pb::ModelReadyRequest>) -> GrpcResult<pb::ModelReadyResponse> {
        allow(&self.restricted, Api::Health, &r)?;
        let r = r.into_inner();
        let version = convert::version(&r.version).map_err(status)?;
        Ok(Response::new(pb::ModelReadyResponse { ready: self.server.is_model_ready(&r.name, version) }))
    }

    async fn server_metadata(&self, r: Request<pb::ServerMetadataRequest>) -> GrpcResult<pb::ServerMetadataResponse> {
        allow(&self.restricted, Api::Metadata, &r)?;
        Ok(Response::new(pb::ServerMetadataResponse {
            name: self.server.options().id.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        }))
    }

    async fn model_metadata(&self, r: Request<pb::ModelMetadataRequest>) -> GrpcResult<pb::ModelMetadataResponse> {
        allow(&self.restricted, Api::Metadata, &r)?;
        let r = r.into_inner();
        let version = convert::version(&r.version).map_err(status)?;
        self.server.metadata(&r.name, version).map(Response::new).map_err(status)
    }

    /// Reached only by calls that compress (others are answered by [`direct`] before tonic).
    async fn model_infer(&self, r: Request<pb::ModelInferRequest>) -> GrpcResult<pb::ModelInferResponse> {
        allow(&self.restricted, Api::Inference, &r)?;
        // tonic hands the request over read: the wait for it is over when it begins.
        let now = Instant::now();
        let (metadata, _, message) = r.into_parts();
        infer(&self.server, message, &metadata, self.forward_headers.as_ref(), (now, now)).await.map(Response::new)
    }

    type ModelStreamInferStream = Pin<Box<dyn Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>>;

    /// Many requests on one stream; each response (or error, in `error_message`) is sent as soon
    /// as it completes, in completion order (see [`stream`]). Reached only by calls that compress
    /// (others are read and answered by [`direct`] before tonic).
    async fn model_stream_infer(
        &self,
        r: Request<Streaming<pb::ModelInferRequest>>,
    ) -> GrpcResult<Self::ModelStreamInferStream> {
        allow(&self.restricted, Api::Inference, &r)?;
        // The stream's metadata is every one of its requests' trace context and forwarded headers.
        let context = StreamHeaders::new(r.metadata(), self.forward_headers.as_ref());
        Ok(Response::new(Box::pin(stream::serve(
            self.server.clone(),
            r.into_inner(),
            context,
            self.stream_stall_timeout,
        ))))
    }

    async fn model_config(&self, r: Request<pb::ModelConfigRequest>) -> GrpcResult<pb::ModelConfigResponse> {
        allow(&self.restricted, Api::ModelConfig, &r)?;
        let r = r.into_inner();
        let version = convert::version(&r.version).map_err(status)?;
        let model = self.server.version(&r.name, version).map_err(status)?;
        Ok(Response::new(pb::ModelConfigResponse { config: Some((*model.config).clone()) }))
    }

    async fn model_statistics(
        &self,
        r: Request<pb::ModelStatisticsRequest>,
    ) -> GrpcResult<pb::ModelStatisticsResponse> {
        allow(&self.restricted, Api::Statistics, &r)?;
        let r = r.into_inner();
        let version = convert::version(&r.version).map_err(status)?;
        let name = (!r.name.is_empty()).then_some(r.name.as_str());
        self.server.statistics(name, version).map(Response::new).map_err(status)
    }

    async fn repository_index(
        &self,
        r: Request<pb::RepositoryIndexRequest>,
    ) -> GrpcResult<pb::RepositoryIndexResponse> {
        allow(&self.restricted, Api::ModelRepository, &r)?;
        Ok(Response::new(pb::RepositoryIndexResponse { models: self.server.index(r.into_inner().ready) }))
    }

    async fn repository_model_load(
        &self,
        r: Request<pb::RepositoryModelLoadRequest>,
    ) -> GrpcResult<pb::RepositoryModelLoadResponse> {
        allow(&self.restricted, Api::ModelRepository, &r)?;
        let r = r.into_inner();
        let overrides =
            crate::api::repository::load_overrides(convert::repository_params(r.parameters)).map_err(status)?;
        let server = self.server.clone();
        tokio::task::spawn_blocking(move || server.load_model(&r.model_name, &overrides))
            .await
            .map_err(|e| Status::internal(format!("the repository operation failed: {e}")))?
            .map_err(status)?;
        Ok(Response::new(pb::RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        r: Request<pb::RepositoryModelUnloadRequest>,
    ) -> GrpcResult<pb::RepositoryModelUnloadResponse> {
        allow(&self.restricted, Api::ModelRepository, &r)?;
        let r = r.into_inner();
        let dependents =
            crate::api::repository::unload_dependents(convert::repository_params(r.parameters)).map_err(status)?;
        let server = self.server.clone();
        tokio::task::spawn_blocking(move || server.unload_model(&r.model_name, dependents))
            .await
            .map_err(|e| Status::internal(format!("the repository operation failed: {e}")))?
            .map_err(status)?;
        Ok(Response::new(pb::RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        r: Request<pb::SystemSharedMemoryStatusRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryStatusResponse> {
        allow(&self.restricted, Api::SharedMemory, &r)?;
        let name = r.into_inner().name;
        let regions = self.server.shm().system_status(non_empty(&name)).map_err(status)?;
        let regions = regions
            .into_iter()
            .map(|r| {
                let status = pb::system_shared_memory_status_response::RegionStatus {
                    name: r.name.clone(),
                    key: r.key,
                    offset: r.offset,
                    byte_size: r.byte_size,
                };
                (r.name, status)
            })
            .collect();
        Ok(Response::new(pb::SystemSharedMemoryStatusResponse { regions }))
    }

    async fn system_shared_memory_register(
        &self,
        r: Request<pb::SystemSharedMemoryRegisterRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryRegisterResponse> {
        allow(&self.restricted, Api::SharedMemory, &r)?;
        let r = r.into_inner();
        self.server.shm().register(&r.name, &r.key, r.offset, r.byte_size).map_err(status)?;
        Ok(Response::new(pb::SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        r: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryUnregisterResponse> {
        allow(&self.restricted, Api::SharedMemory, &r)?;
        let name = r.into_inner().name;
        self.server.shm().unregister(ShmKind::System, non_empty(&name)).map_err(status)?;
        Ok(Response::new(pb::SystemSharedMemoryUnregisterResponse {}))
    }

    async fn cuda_shared_memory_status(
        &self,
        r: Request<pb::CudaSharedMemoryStatusRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryStatusResponse> {
        allow(&self.restricted, Api::SharedMemory, &r)?;
        let name = r.into_inner().name;
        let regions = self.server.shm().cuda_status(non_empty(&name)).map_err(status)?;
        let regions = regions
            .into_iter()
            .map(|r| {
                let status = pb::cuda_shared_memory_status_response::RegionStatus {
                    name: r.name.clone(),
                    device_id: r.device_id,
                    byte_size: r.byte_size,
                };
                (r.name, status)
            })
            .collect();
        Ok(Response::new(pb::CudaSharedMemoryStatusResponse { regions }))
    }

    async fn cuda_shared_memory_register(
        &self,
        r: Request<pb::CudaSharedMemoryRegisterRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryRegisterResponse> {
        allow(&self.restricted, Api::SharedMemory, &r)?;
        let r = r.into_inner();
        let device_id = u64::try_from(r.device_id)
            .map_err(|_| status(InferError::invalid("failed to register shared memory region: invalid args")))?;
        self.server.shm().cuda_register(&r.name, &r.raw_handle, device_id, r.byte_size).map_err(status)?;
        Ok(Response::new(pb::CudaSharedMemoryRegisterResponse {}))
    }

    async fn cuda_shared_memory_unregister(
        &self,
        r: Request<pb::CudaSharedMemoryUnregisterRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryUnregisterResponse> {
        allow(&self.restricted, Api::SharedMemory, &r)?;
        let name = r.into_inner().name;
        self.server.shm().unregister(ShmKind::Cuda, non_empty(&name)).map_err(status)?;
        Ok(Response::new(pb::CudaSharedMemoryUnregisterResponse {}))
    }

    async fn trace_setting(&self, r: Request<pb::TraceSettingRequest>) -> GrpcResult<pb::TraceSettingResponse> {
        allow(&self.restricted, Api::Trace, &r)?;
        use pb::trace_setting_response::SettingValue;
        let r = r.into_inner();
        // A setting without values clears it; a request without settings only reads.
        let update: Vec<(String, SettingInput)> = r
            .settings
            .into_iter()
            .map(|(k, v)| (k, if v.value.is_empty() { SettingInput::Clear } else { SettingInput::List(v.value) }))
            .collect();
        let reported = api::trace::settings(&self.server, &r.model_name, (!update.is_empty()).then_some(&update[..]))
            .map_err(status)?;
        let mut settings: std::collections::HashMap<String, SettingValue> = std::collections::HashMap::new();
        let level = reported.level.iter().map(|l| l.to_string()).collect();
        settings.insert("trace_level".into(), SettingValue { value: level });
        for (key, value) in reported.entries {
            settings.entry(key).or_default().value.push(value);
        }
        Ok(Response::new(pb::TraceSettingResponse { settings }))
    }

    async fn log_settings(&self, r: Request<pb::LogSettingsRequest>) -> GrpcResult<pb::LogSettingsResponse> {
        allow(&self.restricted, Api::Logging, &r)?;
        use pb::log_settings_request::setting_value::ParameterChoice as In;
        use pb::log_settings_response::setting_value::ParameterChoice as Out;
        let mut updates = Vec::new();
        for (key, value) in r.into_inner().settings {
            let value = match value.parameter_choice {
                Some(In::BoolParam(b)) => SettingValue::Bool(b),
                Some(In::Uint32Param(n)) => SettingValue::Uint(n),
                Some(In::StringParam(s)) => SettingValue::Text(s),
                // tritonserver refuses any log_file setting over gRPC, with a value or without.
                None if key == "log_file" => SettingValue::Text(String::new()),
                None => SettingValue::Null,
            };
            updates.push((key, value));
        }
        let s = if updates.is_empty() { logging::settings() } else { logging::update(&updates).map_err(status)? };
        let v = |c: Out| pb::log_settings_response::SettingValue { parameter_choice: Some(c) };
        let settings = [
            ("log_file", v(Out::StringParam(s.log_file))),
            ("log_info", v(Out::BoolParam(s.log_info))),
            ("log_warning", v(Out::BoolParam(s.log_warning))),
            ("log_error", v(Out::BoolParam(s.log_error))),
            ("log_verbose_level", v(Out::Uint32Param(s.log_verbose_level))),
            ("log_format", v(Out::StringParam(s.log_format))),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Ok(Response::new(pb::LogSettingsResponse { settings }))
    }
}

/// One `ModelInfer` call once its message is read, by tonic or by [`direct`]: `read` is when the
/// wait for the message began and ended, `carrier` the call's headers (the trace context, and the
/// headers `forward` passes on as parameters).
async fn infer(
    server: &Server,
    message: pb::ModelInferRequest,
    carrier: &(dyn Carrier + Sync),
    forward: Option<&HeaderForward>,
    read: (Instant, Instant),
) -> Result<pb::ModelInferResponse, Status> {
    let trace = start_trace(server, &message, carrier);
    if let Some(trace) = &trace {
        trace.capture(FrontendEvent::GrpcWaitReadStart, read.0);
        trace.capture(FrontendEvent::GrpcWaitReadEnd, read.1);
    }
    let (mut request, shm_outputs, classes) = convert::request(message, server.shm()).map_err(status)?;
    forward_headers(forward, carrier, &mut request).map_err(status)?;
    request.trace = trace.clone();
    let response = api::infer::run(server, request, &shm_outputs, &classes, "ModelInfer RPC").await.map_err(status)?;
    if let Some(trace) = &trace {
        trace.capture(FrontendEvent::GrpcSendStart, Instant::now());
    }
    let response = convert::response(response, &shm_outputs);
    if let Some(trace) = &trace {
        trace.capture(FrontendEvent::GrpcSendEnd, Instant::now());
    }
    Ok(response)
}

/// Runs one request of a stream and forwards each of its responses. For a decoupled model every
/// response carries `triton_final_response`; a completion without a response is sent as an empty
/// final response only when the request set `triton_enable_empty_final_response`, as Triton does.
/// Samples a request for tracing (only a request whose model version reads: others fail anyway).
#[inline]
fn start_trace(server: &Server, message: &pb::ModelInferRequest, carrier: &dyn Carrier) -> Option<Trace> {
    if !server.tracer().is_active() {
        return None;
    }
    let version = convert::version(&message.model_version).ok()?;
    api::trace::start(server, &message.model_name, version, carrier)
}

/// What a stream keeps of its call's headers for each of its requests (which tonic hands over
/// without them): the trace context, and the headers `--grpc-header-forward-pattern` passes on.
#[derive(Clone, Default)]
struct StreamHeaders {
    kept: Vec<(String, String)>,
    forward: Option<HeaderForward>,
}

impl StreamHeaders {
    fn new(carrier: &dyn Carrier, forward: Option<&HeaderForward>) -> Self {
        let kept = carrier
            .pairs()
            .into_iter()
            .filter(|(k, _)| k == "traceparent" || k == "tracestate" || forward.is_some_and(|f| f.matches(k)))
            .collect();
        StreamHeaders { kept, forward: forward.cloned() }
    }

    /// Where a request of the stream reads its trace context.
    fn trace(&self) -> &dyn Carrier {
        &self.kept
    }

    /// Adds the forwarded headers to a request of the stream.
    fn forward(&self, request: &mut InferenceRequest) -> Result<(), InferError> {
        forward_headers(self.forward.as_ref(), &self.kept, request)
    }
}

/// Adds the headers `forward` (`--grpc-header-forward-pattern`) matches to `request`.
fn forward_headers(
    forward: Option<&HeaderForward>,
    headers: &dyn Carrier,
    request: &mut InferenceRequest,
) -> Result<(), InferError> {
    forward.map_or(Ok(()), |f| f.apply(headers, request))
}

/// A call's metadata, where the trace extension looks for the caller's `traceparent`.
impl Carrier for tonic::metadata::MetadataMap {
    fn values(&self, key: &str) -> Vec<&str> {
        self.get_all(key).iter().filter_map(|v| v.to_str().ok()).collect()
    }

    /// The call's metadata as tritonserver's gRPC server shows it to the header forward pattern:
    /// without the headers the transport consumes (`te`, `content-type`, `grpc-*` but the
    /// tracing ones), `-bin` values decoded.
    fn pairs(&self) -> Vec<(String, String)> {
        use tonic::metadata::KeyAndValueRef;
        let transport =
            |key: &str| key == "te" || key == "content-type" || (key.starts_with("grpc-") && !key.ends_with("-bin"));
        self.iter()
            .filter_map(|entry| {
                let (key, value) = match entry {
                    KeyAndValueRef::Ascii(k, v) => {
                        (k.as_str(), String::from_utf8_lossy(v.as_encoded_bytes()).into_owned())
                    }
                    KeyAndValueRef::Binary(k, v) => {
                        (k.as_str(), v.to_bytes().map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default())
                    }
                };
                (!transport(key)).then(|| (key.to_string(), value))
            })
            .collect()
    }
}

/// `grpc.health.v1.Health/Check`: SERVING when the server is ready (the `health` group).
struct HealthService {
    server: Arc<Server>,
    restricted: Arc<Restrictions>,
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, r: Request<HealthCheckRequest>) -> GrpcResult<HealthCheckResponse> {
        allow(&self.restricted, Api::Health, &r)?;
        let status =
            if self.server.ready().unwrap_or(false) { ServingStatus::Serving } else { ServingStatus::NotServing };
        Ok(Response::new(HealthCheckResponse { status: status as i32 }))
    }
}

/// Serves gRPC on the connections handed to this thread (`incoming`) until `shutdown` resolves;
/// then, as tritonserver, stops taking connections and new calls (HTTP/2 GOAWAY) and returns when
/// the calls in flight, streams included, have finished. `connections` counts the open connections.
pub async fn serve(
    incoming: Handed,
    server: Arc<Server>,
    options: GrpcOptions,
    connections: Connections,
    shutdown: impl Future<Output = ()>,
) {
    let mut inference = GrpcInferenceServiceServer::new(GrpcFrontend {
        server: server.clone(),
        restricted: options.restricted.clone(),
        stream_stall_timeout: options.stream_stall_timeout,
        forward_headers: options.forward_headers.clone(),
    })
    .max_decoding_message_size(options.max_message_size)
    .max_encoding_message_size(options.max_message_size);
    // Compressed requests are always accepted; responses are compressed only at a
    // --grpc-infer-response-compression-level above none, only inference ones (the InferOnly
    // layer below), and only with an encoding the client accepts (tonic reads
    // grpc-accept-encoding).
    for &encoding in compression::ACCEPTED {
        inference = inference.accept_compressed(encoding);
    }
    for &encoding in options.response_compression.response_encodings() {
        inference = inference.send_compressed(encoding);
    }
    // ModelInfer calls that nothing compresses skip tonic's codec (see `direct`).
    let direct = (options.response_compression == ResponseCompression::None).then(|| {
        Arc::new(direct::Direct {
            server: server.clone(),
            restricted: options.restricted.clone(),
            max_message_size: options.max_message_size,
            stream_stall_timeout: options.stream_stall_timeout,
            forward_headers: options.forward_headers.clone(),
        })
    });
    let health = HealthServer::new(HealthService { server, restricted: options.restricted.clone() });
    let env = |key: &str| std::env::var(key).ok();
    let delay = direct::response_delay(env("TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC").as_deref());
    let infer_delay = direct::infer_delay(
        env("TRITONSERVER_DELAY_RESPONSE_COMPLETION").as_deref(),
        env("TRITONSERVER_DELAY_RESPONSE_COMPLETE_EXEC").as_deref(),
    );
    let routes = tonic::service::Routes::new(inference).add_service(health);
    let service = deadline::Deadline(verbose::LogCalls(compression::InferOnly(direct::DirectInfer {
        direct,
        delay,
        infer_delay,
        inner: routes,
    })));
    let transport = listen::Transport {
        keepalive_time: options.keepalive_time,
        keepalive_timeout: options.keepalive_timeout,
        tls: options.tls,
    };
    listen::serve(incoming, service, transport, connections, shutdown).await;
}

/// A region name from a shared-memory request: empty means "every region".
fn non_empty(name: &str) -> Option<&str> {
    (!name.is_empty()).then_some(name)
}
