//! tensor-ceiling [HTTP_PORT] — the large-tensor benchmark's ceiling: `identity_fp32` and
//! `reduce_sum_fp32` (any model name: `reduce_sum*` sums the last axis, anything else echoes) over bare
//! hyper (KServe v2 HTTP, binary extension; gRPC on HTTP_PORT+1 with bare tonic), inputs and outputs
//! inline or in registered system shared memory. No scheduler, no repository, no validation beyond
//! what a wrong answer needs; binds 127.0.0.1. What a server must pay at least, and nothing more:
//! - HTTP identity copies the input once, into the response body (as `../shared/anchors/limit.sh`'s
//!   probe: a server that owns its response buffer pays that copy);
//! - gRPC identity hands the request's buffer to the response, and prost copies it once while encoding;
//! - shared memory copies from the input region into the output region (identity) or reads it (sum).
//!
//! PROBE_THREADS=N sets the tokio workers (default: one per CPU).
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tensor_bench::pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use tensor_bench::pb::infer_parameter::ParameterChoice;
use tensor_bench::pb::*;
use tensor_bench::{Kind, Region};
use tonic::Status;

/// The server's allocator: megabyte buffers on huge pages and reused, as Nereus's are (the ceiling must
/// not be slower than the server at what they both do).
#[global_allocator]
static ALLOCATOR: nereus::large_pages::LargePages = nereus::large_pages::LargePages;

/// Requests answered, for the statistics perf_analyzer reads (it wants counts that move).
static ANSWERED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn answered() -> u64 {
    ANSWERED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The model's metadata and configuration as KServe v2 JSON (what perf_analyzer asks first).
fn metadata_json(model: &str) -> Value {
    let out = if Kind::of(model) == Kind::ReduceSum { json!([-1, 1]) } else { json!([-1, -1]) };
    json!({"name": model, "versions": ["1"], "platform": "custom",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": out}]})
}

fn config_json(model: &str) -> Value {
    let out = if Kind::of(model) == Kind::ReduceSum { json!([1]) } else { json!([-1]) };
    json!({"name": model, "platform": "", "backend": "custom", "max_batch_size": 8,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": out}]})
}

fn stats_json(model: &str) -> Value {
    let n = answered();
    let d = json!({"count": n, "ns": 0});
    let z = json!({"count": 0, "ns": 0});
    json!({"model_stats": [{"name": model, "version": "1", "last_inference": 0, "inference_count": n, "execution_count": n,
        "inference_stats": {"success": d, "fail": z, "queue": d, "compute_input": d, "compute_infer": d,
            "compute_output": d, "cache_hit": z, "cache_miss": z}, "batch_stats": []}]})
}

/// Registered shared memory regions by name.
#[derive(Default)]
struct Regions(Mutex<HashMap<String, Arc<Region>>>);

impl Regions {
    fn register(&self, name: &str, key: &str, offset: usize, size: usize) -> Result<(), String> {
        let region = Region::attach(key, offset, size).map_err(|e| format!("cannot map '{key}': {e}"))?;
        self.0.lock().unwrap().insert(name.to_string(), Arc::new(region));
        Ok(())
    }

    fn unregister(&self, name: Option<&str>) {
        let mut map = self.0.lock().unwrap();
        match name {
            Some(n) => {
                map.remove(n);
            }
            None => map.clear(),
        }
    }

    /// `size` bytes at `offset` of region `name`.
    fn get(&self, name: &str) -> Result<Arc<Region>, String> {
        self.0.lock().unwrap().get(name).cloned().ok_or_else(|| format!("unknown shared memory region '{name}'"))
    }
}

fn shm_slice(region: &Region, offset: usize, size: usize) -> Result<&mut [u8], String> {
    region.bytes_mut().get_mut(offset..offset + size).ok_or_else(|| "shared memory range out of bounds".to_string())
}

fn elements(shape: &[i64]) -> usize {
    shape.iter().product::<i64>().max(0) as usize
}

// ---- HTTP ----

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

fn error(message: impl std::fmt::Display) -> Response<Full<Bytes>> {
    reply(StatusCode::BAD_REQUEST, json!({ "error": message.to_string() }).to_string())
}

fn http_infer(regions: &Regions, model: &str, headers: &hyper::HeaderMap, body: Bytes) -> Response<Full<Bytes>> {
    let r = http_answer(regions, model, headers, body);
    if r.status() == StatusCode::OK {
        ANSWERED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    r
}

fn http_answer(regions: &Regions, model: &str, headers: &hyper::HeaderMap, body: Bytes) -> Response<Full<Bytes>> {
    let hlen = headers
        .get("inference-header-content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(body.len());
    let Some(header) = body.get(..hlen).and_then(|h| serde_json::from_slice::<Value>(h).ok()) else {
        return error("bad inference header");
    };
    let input = &header["inputs"][0];
    let shape: Vec<i64> = input["shape"].as_array().into_iter().flatten().filter_map(Value::as_i64).collect();
    let kind = Kind::of(model);
    let in_bytes = elements(&shape) * 4;
    let p = &input["parameters"];
    let held;
    let data: &[u8] = if let Some(name) = p["shared_memory_region"].as_str() {
        held = match regions.get(name) {
            Ok(r) => r,
            Err(e) => return error(e),
        };
        let offset = p["shared_memory_offset"].as_u64().unwrap_or(0) as usize;
        match shm_slice(&held, offset, in_bytes) {
            Ok(s) => s,
            Err(e) => return error(e),
        }
    } else {
        match body.get(hlen..) {
            Some(d) if p["binary_data_size"].as_u64() == Some(d.len() as u64) && d.len() == in_bytes => d,
            _ => return error("need one binary FP32 INPUT0 matching its shape"),
        }
    };
    let out_shape = kind.output_shape(&shape);
    let out_bytes = kind.output_bytes(&shape);
    let op = &header["outputs"][0]["parameters"];
    if let Some(name) = op["shared_memory_region"].as_str() {
        let region = match regions.get(name) {
            Ok(r) => r,
            Err(e) => return error(e),
        };
        let offset = op["shared_memory_offset"].as_u64().unwrap_or(0) as usize;
        match shm_slice(&region, offset, out_bytes) {
            Ok(out) => kind.compute(&shape, data, out),
            Err(e) => return error(e),
        }
        let h = json!({"model_name": model, "model_version": "1", "outputs": [{"name": "OUTPUT0", "datatype": "FP32",
            "shape": out_shape, "parameters": {"shared_memory_region": name, "shared_memory_byte_size": out_bytes}}]});
        return reply(StatusCode::OK, h.to_string());
    }
    let h = json!({"model_name": model, "model_version": "1", "outputs": [{"name": "OUTPUT0", "datatype": "FP32",
        "shape": out_shape, "parameters": {"binary_data_size": out_bytes}}]})
    .to_string();
    // One pass over the tensor: copied behind the header (an identity), or summed.
    let mut out = Vec::with_capacity(h.len() + out_bytes);
    out.extend_from_slice(h.as_bytes());
    match kind {
        Kind::Identity => out.extend_from_slice(data),
        Kind::ReduceSum => {
            out.resize(h.len() + out_bytes, 0);
            kind.compute(&shape, data, &mut out[h.len()..]);
        }
    }
    let mut r = Response::new(Full::new(Bytes::from(out)));
    let hv = |v: String| hyper::header::HeaderValue::try_from(v).expect("a number is a header value");
    r.headers_mut().insert("inference-header-content-length", hv(h.len().to_string()));
    r.headers_mut().insert("content-type", hv("application/octet-stream".into()));
    r
}

fn http_shm(regions: &Regions, rest: &str, body: &[u8]) -> Response<Full<Bytes>> {
    if rest == "unregister" {
        regions.unregister(None);
        return reply(StatusCode::OK, String::new());
    }
    let Some((name, action)) = rest.strip_prefix("region/").and_then(|r| r.rsplit_once('/')) else {
        return reply(StatusCode::NOT_FOUND, String::new());
    };
    match action {
        "register" => {
            let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let key = v["key"].as_str().unwrap_or_default();
            let offset = v["offset"].as_u64().unwrap_or(0) as usize;
            let size = v["byte_size"].as_u64().unwrap_or(0) as usize;
            match regions.register(name, key, offset, size) {
                Ok(()) => reply(StatusCode::OK, String::new()),
                Err(e) => error(e),
            }
        }
        "unregister" => {
            regions.unregister(Some(name));
            reply(StatusCode::OK, String::new())
        }
        _ => reply(StatusCode::NOT_FOUND, String::new()),
    }
}

async fn http(regions: Arc<Regions>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(error(e)),
    };
    if path == "/v2" {
        return Ok(reply(
            StatusCode::OK,
            json!({"name": "tensor-ceiling", "version": "0", "extensions": []}).to_string(),
        ));
    }
    if path.starts_with("/v2/health/") {
        return Ok(reply(StatusCode::OK, String::new()));
    }
    if let Some(rest) = path.strip_prefix("/v2/systemsharedmemory/") {
        return Ok(http_shm(&regions, rest, &body));
    }
    if let Some(rest) = path.strip_prefix("/v2/models/") {
        let model = rest.split('/').next().unwrap_or_default();
        if rest.ends_with("/infer") {
            return Ok(http_infer(&regions, model, &parts.headers, body));
        }
        if rest.ends_with("/ready") {
            return Ok(reply(StatusCode::OK, String::new()));
        }
        let json = if rest.ends_with("/config") {
            config_json(model)
        } else if rest.ends_with("/stats") {
            stats_json(model)
        } else {
            metadata_json(model)
        };
        return Ok(reply(StatusCode::OK, json.to_string()));
    }
    Ok(reply(StatusCode::NOT_FOUND, String::new()))
}

// ---- gRPC ----

fn param_str<'a>(p: &'a std::collections::HashMap<String, InferParameter>, key: &str) -> Option<&'a str> {
    match p.get(key)?.parameter_choice.as_ref()? {
        ParameterChoice::StringParam(s) => Some(s),
        _ => None,
    }
}

fn param_int(p: &std::collections::HashMap<String, InferParameter>, key: &str) -> Option<u64> {
    match p.get(key)?.parameter_choice.as_ref()? {
        ParameterChoice::Int64Param(i) => Some(*i as u64),
        ParameterChoice::Uint64Param(u) => Some(*u),
        _ => None,
    }
}

fn grpc_infer(regions: &Regions, req: ModelInferRequest) -> Result<ModelInferResponse, Status> {
    let bad = |m: String| Status::invalid_argument(m);
    let input = req.inputs.first().ok_or_else(|| Status::invalid_argument("no input"))?;
    let kind = Kind::of(&req.model_name);
    let shape = input.shape.clone();
    let in_bytes = elements(&shape) * 4;
    let out_shape = kind.output_shape(&shape);
    let out_bytes = kind.output_bytes(&shape);
    let held;
    let inline;
    let data: &[u8] = if let Some(name) = param_str(&input.parameters, "shared_memory_region") {
        held = regions.get(name).map_err(bad)?;
        let offset = param_int(&input.parameters, "shared_memory_offset").unwrap_or(0) as usize;
        shm_slice(&held, offset, in_bytes).map_err(bad)?
    } else {
        inline = req
            .raw_input_contents
            .first()
            .cloned()
            .ok_or_else(|| Status::invalid_argument("need raw_input_contents"))?;
        if inline.len() != in_bytes {
            return Err(Status::invalid_argument("INPUT0's bytes do not match its shape"));
        }
        &inline[..]
    };
    let mut output = model_infer_response::InferOutputTensor {
        name: "OUTPUT0".into(),
        datatype: "FP32".into(),
        shape: out_shape,
        ..Default::default()
    };
    let mut raw = Vec::new();
    let requested = req.outputs.first().map(|o| &o.parameters);
    if let Some(name) = requested.and_then(|p| param_str(p, "shared_memory_region")) {
        let region = regions.get(name).map_err(bad)?;
        let offset = requested.and_then(|p| param_int(p, "shared_memory_offset")).unwrap_or(0) as usize;
        kind.compute(&shape, data, shm_slice(&region, offset, out_bytes).map_err(bad)?);
        output.parameters = requested.cloned().unwrap_or_default();
    } else if kind == Kind::Identity && !req.raw_input_contents.is_empty() {
        // The request's own buffer goes back: prost copies it once while encoding.
        raw.push(req.raw_input_contents[0].clone());
    } else {
        let mut out = vec![0u8; out_bytes];
        kind.compute(&shape, data, &mut out);
        raw.push(Bytes::from(out));
    }
    Ok(ModelInferResponse {
        model_name: req.model_name,
        model_version: "1".into(),
        id: req.id,
        outputs: vec![output],
        raw_output_contents: raw,
        ..Default::default()
    })
}

struct Grpc(Arc<Regions>);

#[tonic::async_trait]
impl GrpcInferenceService for Grpc {
    async fn server_live(
        &self,
        _: tonic::Request<ServerLiveRequest>,
    ) -> Result<tonic::Response<ServerLiveResponse>, Status> {
        Ok(tonic::Response::new(ServerLiveResponse { live: true }))
    }
    async fn server_ready(
        &self,
        _: tonic::Request<ServerReadyRequest>,
    ) -> Result<tonic::Response<ServerReadyResponse>, Status> {
        Ok(tonic::Response::new(ServerReadyResponse { ready: true }))
    }
    async fn model_ready(
        &self,
        _: tonic::Request<ModelReadyRequest>,
    ) -> Result<tonic::Response<ModelReadyResponse>, Status> {
        Ok(tonic::Response::new(ModelReadyResponse { ready: true }))
    }
    async fn model_infer(
        &self,
        r: tonic::Request<ModelInferRequest>,
    ) -> Result<tonic::Response<ModelInferResponse>, Status> {
        let r = grpc_infer(&self.0, r.into_inner())?;
        ANSWERED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(tonic::Response::new(r))
    }
    async fn server_metadata(
        &self,
        _: tonic::Request<ServerMetadataRequest>,
    ) -> Result<tonic::Response<ServerMetadataResponse>, Status> {
        Ok(tonic::Response::new(ServerMetadataResponse {
            name: "tensor-ceiling".into(),
            version: "0".into(),
            extensions: vec![],
        }))
    }
    async fn model_metadata(
        &self,
        r: tonic::Request<ModelMetadataRequest>,
    ) -> Result<tonic::Response<ModelMetadataResponse>, Status> {
        let name = r.into_inner().name;
        let t = |name: &str, shape: Vec<i64>| model_metadata_response::TensorMetadata {
            name: name.into(),
            datatype: "FP32".into(),
            shape,
        };
        let out = if Kind::of(&name) == Kind::ReduceSum { vec![-1, 1] } else { vec![-1, -1] };
        Ok(tonic::Response::new(ModelMetadataResponse {
            name,
            versions: vec!["1".into()],
            platform: "custom".into(),
            inputs: vec![t("INPUT0", vec![-1, -1])],
            outputs: vec![t("OUTPUT0", out)],
        }))
    }
    async fn model_config(
        &self,
        r: tonic::Request<ModelConfigRequest>,
    ) -> Result<tonic::Response<ModelConfigResponse>, Status> {
        let name = r.into_inner().name;
        let dims = if Kind::of(&name) == Kind::ReduceSum { vec![1] } else { vec![-1] };
        let mut config = ModelConfig { name, backend: "custom".into(), max_batch_size: 8, ..Default::default() };
        config.input.push(ModelInput {
            name: "INPUT0".into(),
            data_type: DataType::TypeFp32 as i32,
            dims: vec![-1],
            ..Default::default()
        });
        config.output.push(ModelOutput {
            name: "OUTPUT0".into(),
            data_type: DataType::TypeFp32 as i32,
            dims,
            ..Default::default()
        });
        Ok(tonic::Response::new(ModelConfigResponse { config: Some(config) }))
    }
    async fn model_statistics(
        &self,
        r: tonic::Request<ModelStatisticsRequest>,
    ) -> Result<tonic::Response<ModelStatisticsResponse>, Status> {
        let name = r.into_inner().name;
        let n = answered();
        let d = Some(StatisticDuration { count: n, ns: 0 });
        Ok(tonic::Response::new(ModelStatisticsResponse {
            model_stats: vec![ModelStatistics {
                name,
                version: "1".into(),
                inference_count: n,
                execution_count: n,
                inference_stats: Some(InferStatistics {
                    success: d,
                    queue: d,
                    compute_input: d,
                    compute_infer: d,
                    compute_output: d,
                    ..Default::default()
                }),
                ..Default::default()
            }],
        }))
    }
    async fn system_shared_memory_register(
        &self,
        r: tonic::Request<SystemSharedMemoryRegisterRequest>,
    ) -> Result<tonic::Response<SystemSharedMemoryRegisterResponse>, Status> {
        let r = r.into_inner();
        self.0.register(&r.name, &r.key, r.offset as usize, r.byte_size as usize).map_err(Status::invalid_argument)?;
        Ok(tonic::Response::new(SystemSharedMemoryRegisterResponse {}))
    }
    async fn system_shared_memory_unregister(
        &self,
        r: tonic::Request<SystemSharedMemoryUnregisterRequest>,
    ) -> Result<tonic::Response<SystemSharedMemoryUnregisterResponse>, Status> {
        let name = r.into_inner().name;
        self.0.unregister(Some(&name).filter(|n| !n.is_empty()).map(|n| n.as_str()));
        Ok(tonic::Response::new(SystemSharedMemoryUnregisterResponse {}))
    }
}

fn main() -> anyhow::Result<()> {
    let port: u16 = std::env::args().nth(1).map(|p| p.parse()).transpose()?.unwrap_or(18400);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = std::env::var("PROBE_THREADS").ok().and_then(|t| t.parse().ok()) {
        rt.worker_threads(n);
    }
    let rt = rt.enable_all().build()?;
    let regions = Arc::new(Regions::default());
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let grpc = GrpcInferenceServiceServer::new(Grpc(regions.clone()))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let grpc_addr = std::net::SocketAddr::from(([127, 0, 0, 1], port + 1));
        // The anchors' tonic ceiling's settings (../shared/anchors/grpc_limit_probe).
        let grpc = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .initial_stream_window_size(8 << 20)
            .initial_connection_window_size(32 << 20)
            .max_frame_size(1 << 20)
            .add_service(grpc)
            .serve(grpc_addr);
        tokio::spawn(async move {
            if let Err(e) = grpc.await {
                eprintln!("gRPC: {e}");
            }
        });
        eprintln!("tensor-ceiling: HTTP on {port}, gRPC on {}", port + 1);
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let regions = regions.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| http(regions.clone(), req));
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    })
}
