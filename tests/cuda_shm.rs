//! CUDA shared memory (Triton's `cuda_shared_memory` extension) through the public endpoints.
//!
//! Everywhere: CUDA regions share one name space with system regions, as in tritonserver's
//! `SharedMemoryManager`, and registrations are parsed and refused with tritonserver's messages
//! (a tritonserver built with GPU support's: without a GPU, every handle is one it cannot open).
//!
//! Where a GPU is lent: this test process plays the client. It allocates device memory, exports it
//! with `cuIpcGetMemHandle` (a server in another process can open it, this process could not), and
//! `simple` reads its inputs from one region and writes its outputs into another, over HTTP and gRPC.
#![cfg(target_os = "linux")]
#![allow(unsafe_code)] // the client side's CUDA driver calls (allocation, copies, IPC export)
use crate::common;
use crate::shm::{place, shm_request};

use base64::Engine as _;
use common::*;
use cudarc::driver::{CudaContext, sys};
use nereus::proto::inference as pb;
use pb::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use serde_json::json;
use tonic::Code;

fn server() -> (Repo, Server) {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--allow-client-shm=true"]);
    (repo, s)
}

fn register_cuda_http(s: &Server, name: &str, handle: &[u8], byte_size: u64) -> Resp {
    let b64 = base64::engine::general_purpose::STANDARD.encode(handle);
    s.post_json(
        &format!("/v2/cudasharedmemory/region/{name}/register"),
        &json!({"raw_handle": {"b64": b64}, "device_id": 0, "byte_size": byte_size}),
    )
}

#[test]
fn cuda_regions_share_the_name_space_and_registrations_are_checked() {
    let (_repo, s) = server();
    let key = format!("/nereus_cuda_shm_test_{}", std::process::id());
    let path = std::path::PathBuf::from("/dev/shm").join(&key[1..]);
    std::fs::File::create(&path).unwrap().set_len(128).unwrap();
    let _cleanup = Cleanup(path);
    let r = s.post_json("/v2/systemsharedmemory/region/sys/register", &json!({"key": key, "byte_size": 128}));
    assert_eq!(r.status, 200, "{}", r.text());

    // A system region is not a CUDA one: not in the CUDA status, and its name is taken.
    assert_eq!(s.get("/v2/cudasharedmemory/status").json(), json!([]));
    let r = s.get("/v2/cudasharedmemory/region/sys/status");
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.error(), "The region named 'sys' is registered as system shared memory, not CUDA shared memory");
    let r = register_cuda_http(&s, "sys", &[0; 64], 64);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error(), "shared memory region 'sys' already in manager");
    // Unregistering it as CUDA memory leaves it alone, one by name or all of them.
    assert_eq!(s.request("POST", "/v2/cudasharedmemory/region/sys/unregister", &[], b"").status, 200);
    assert_eq!(s.request("POST", "/v2/cudasharedmemory/unregister", &[], b"").status, 200);
    assert_eq!(s.get("/v2/systemsharedmemory/region/sys/status").json()[0]["name"], "sys");

    // Malformed registrations.
    let r = s.post_json("/v2/cudasharedmemory/region/g/register", &json!({"device_id": 0, "byte_size": 64}));
    assert_eq!((r.status, r.error()), (400, "Shared memory register request has no 'raw_handle' field".into()));
    let r = s.post_json(
        "/v2/cudasharedmemory/region/g/register",
        &json!({"raw_handle": {"b64": "not base64!"}, "device_id": 0, "byte_size": 64}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("valid base64 encoded cudaIpcMemHandle_t"), "{}", r.text());

    let r = register_cuda_http(&s, "g", &[7; 10], 64);
    assert_eq!((r.status, r.error()), (400, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t".into()));
    // A handle of the right size that no driver handed out.
    let r = register_cuda_http(&s, "g", &[7; 64], 64);
    assert_eq!((r.status, r.error()), (400, "failed to register shared memory region: invalid args".into()));
    assert_eq!(s.get("/v2/cudasharedmemory/region/g/status").status, 404);

    // gRPC: the same name space.
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        let mut c = grpc_client(&s).await;
        let e =
            c.cuda_shared_memory_status(pb::CudaSharedMemoryStatusRequest { name: "sys".into() }).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e}");
        assert!(e.message().contains("registered as system shared memory"), "{e}");
        let e = c
            .cuda_shared_memory_register(pb::CudaSharedMemoryRegisterRequest {
                name: "sys".into(),
                raw_handle: vec![0; 64].into(),
                device_id: 0,
                byte_size: 64,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::AlreadyExists, "{e}");
        let system = c.system_shared_memory_status(pb::SystemSharedMemoryStatusRequest::default()).await.unwrap();
        assert_eq!(system.into_inner().regions.len(), 1);
    });
    // Still serving.
    let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!(r.status, 200, "{}", r.text());
}

struct Cleanup(std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Device memory this process allocated with `cuMemAlloc` (IPC export needs that, not a
/// stream-ordered pool), freed on drop.
struct DeviceBuffer {
    ctx: std::sync::Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    fn new(ctx: &std::sync::Arc<CudaContext>, len: usize) -> Self {
        ctx.bind_to_thread().unwrap();
        let mut ptr = 0;
        // SAFETY: an out-pointer to a local; the context is current.
        unsafe { sys::cuMemAlloc_v2(&mut ptr, len) }.result().unwrap();
        let b = DeviceBuffer { ctx: ctx.clone(), ptr, len };
        b.write(0, &vec![0; len]);
        b
    }
    fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.len);
        self.ctx.bind_to_thread().unwrap();
        // SAFETY: the range lies inside this allocation.
        unsafe { sys::cuMemcpyHtoD_v2(self.ptr + offset as u64, data.as_ptr().cast(), data.len()) }.result().unwrap();
    }
    fn read_i32(&self, offset: usize) -> Vec<i32> {
        let mut buf = [0u8; 64];
        self.ctx.bind_to_thread().unwrap();
        // SAFETY: the range lies inside this allocation (64 bytes at offset, checked below).
        assert!(offset + 64 <= self.len);
        unsafe { sys::cuMemcpyDtoH_v2(buf.as_mut_ptr().cast(), self.ptr + offset as u64, 64) }.result().unwrap();
        buf.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
    }
    fn ipc_handle(&self) -> Vec<u8> {
        self.ctx.bind_to_thread().unwrap();
        let mut handle = sys::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: an out-pointer to a local; the pointer is this process's allocation.
        unsafe { sys::cuIpcGetMemHandle(&mut handle, self.ptr) }.result().unwrap();
        handle.reserved.iter().map(|b| *b as u8).collect()
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by cuMemAlloc in `new`, not used after this.
        let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// A `simple` request over gRPC whose two [1, 16] INT32 inputs and two outputs lie in shared memory
/// regions at the offsets given (64 bytes each).
fn grpc_simple(model: &str, inputs: (&str, [i64; 2]), outputs: (&str, [i64; 2])) -> pb::ModelInferRequest {
    let tensor = |name: &str, offset| InferInputTensor {
        name: name.into(),
        datatype: "INT32".into(),
        shape: vec![1, 16],
        parameters: place(inputs.0, offset),
        contents: None,
    };
    let out =
        |name: &str, offset| InferRequestedOutputTensor { name: name.into(), parameters: place(outputs.0, offset) };
    pb::ModelInferRequest {
        model_name: model.into(),
        inputs: vec![tensor("INPUT0", inputs.1[0]), tensor("INPUT1", inputs.1[1])],
        outputs: vec![out("OUTPUT0", outputs.1[0]), out("OUTPUT1", outputs.1[1])],
        ..Default::default()
    }
}

/// With NEREUS_REQUIRE_GPU set, a machine without a GPU fails this test instead of skipping it.
#[test]
fn gpu_client_buffers_feed_inputs_and_receive_outputs() {
    if nereus::gpu::device_count() == 0 {
        assert!(
            std::env::var_os("NEREUS_REQUIRE_GPU").is_none(),
            "NEREUS_REQUIRE_GPU is set but no CUDA device was found"
        );
        eprintln!("skipping: no CUDA device");
        return;
    }
    let (_repo, s) = server();
    let ctx = CudaContext::new(0).unwrap();
    let (input, output, grpc_output) =
        (DeviceBuffer::new(&ctx, 128), DeviceBuffer::new(&ctx, 128), DeviceBuffer::new(&ctx, 256));
    input.write(0, &le_i32(&(0..16).collect::<Vec<_>>()));
    input.write(64, &le_i32(&[3; 16]));

    // HTTP: register, check the status, infer.
    for (name, buf) in [("in", &input), ("out", &output)] {
        let r = register_cuda_http(&s, name, &buf.ipc_handle(), 128);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(
        s.get("/v2/cudasharedmemory/region/in/status").json(),
        json!([{"name": "in", "device_id": 0, "byte_size": 128}])
    );
    // Bigger than the allocation: refused.
    let r = register_cuda_http(&s, "big", &input.ipc_handle(), 1 << 40);
    assert_eq!((r.status, r.error()), (400, "failed to register shared memory region 'big': invalid args".into()));
    let r = s.post_json("/v2/models/simple/infer", &shm_request("in", "out"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["parameters"]["shared_memory_region"], "out", "{}", r.text());
    assert_eq!(output.read_i32(0), (3..19).collect::<Vec<_>>());
    assert_eq!(output.read_i32(64), (-3..13).collect::<Vec<_>>());
    // Out of the region's bounds: refused, nothing else.
    let mut past = shm_request("in", "out");
    past["inputs"][1]["parameters"]["shared_memory_offset"] = json!(100);
    let r = s.post_json("/v2/models/simple/infer", &past);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("'in'"), "{}", r.text());
    // A byte size that disagrees with the input's shape is refused before anything is copied to
    // the host (the size is the client's, up to its whole GPU allocation).
    let mut wrong = shm_request("in", "out");
    wrong["inputs"][0]["parameters"]["shared_memory_byte_size"] = json!(128);
    let r = s.post_json("/v2/models/simple/infer", &wrong);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error(), "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 128");

    // gRPC: its own output region, at an offset.
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        let mut c = grpc_client(&s).await;
        c.cuda_shared_memory_register(pb::CudaSharedMemoryRegisterRequest {
            name: "gout".into(),
            raw_handle: grpc_output.ipc_handle().into(),
            device_id: 0,
            byte_size: 256,
        })
        .await
        .unwrap();
        let status = c.cuda_shared_memory_status(pb::CudaSharedMemoryStatusRequest::default()).await.unwrap();
        let regions = status.into_inner().regions;
        assert_eq!(regions.len(), 3, "{regions:?}");
        assert_eq!((regions["gout"].device_id, regions["gout"].byte_size), (0, 256));
        let request = grpc_simple("simple", ("in", [0, 64]), ("gout", [128, 192]));
        let response = c.model_infer(request.clone()).await.unwrap().into_inner();
        // Outputs in shared memory are not sent back: empty raw contents keep the others' places.
        assert!(response.raw_output_contents.iter().all(|c| c.is_empty()), "{:?}", response.raw_output_contents);
        assert_eq!(grpc_output.read_i32(128), (3..19).collect::<Vec<_>>());
        assert_eq!(grpc_output.read_i32(192), (-3..13).collect::<Vec<_>>());

        // Unregistered: the region is gone and requests naming it are refused.
        c.cuda_shared_memory_unregister(pb::CudaSharedMemoryUnregisterRequest { name: "gout".into() }).await.unwrap();
        let e = c.model_infer(request).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        assert!(e.message().contains("'gout'"), "{e}");
    });
    assert_eq!(s.request("POST", "/v2/cudasharedmemory/unregister", &[], b"").status, 200);
    assert_eq!(s.get("/v2/cudasharedmemory/status").json(), json!([]));
    let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Where a GPU and ONNX Runtime's CUDA provider are: a `KIND_GPU` ONNX instance reads inputs from
/// the client's device buffers and writes outputs into them on the GPU itself (the server logs
/// such inputs as staying on the GPU and such outputs as written in place; a Wasm model reading
/// the same region gets host bytes), over HTTP and gRPC, with host and device tensors mixed in one
/// request and in one batch of two requests, and a region too small for an output refused with
/// tritonserver's words, nothing of that request written, while the server serves on.
#[test]
fn gpu_onnx_instances_read_and_write_client_device_memory_in_place() {
    let required = std::env::var_os("NEREUS_REQUIRE_GPU").is_some();
    if nereus::gpu::device_count() == 0 {
        assert!(!required, "NEREUS_REQUIRE_GPU is set but no CUDA device was found");
        eprintln!("skipping: no CUDA device");
        return;
    }
    let Some(lib) = onnxruntime_library() else { return };
    let repo = Repo::new();
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/onnx_models/simple");
    let config =
        std::fs::read_to_string(models.join("config.pbtxt")).unwrap().replace("name: \"simple\"", "name: \"gsimple\"")
            + "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]";
    let dir = repo.model("gsimple", &config, &["1"]);
    std::fs::copy(models.join("1/model.onnx"), dir.join("1/model.onnx")).unwrap();
    let batching = config.replace("name: \"gsimple\"", "name: \"gbatch\"")
        + "\ndynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 30000000 }";
    let dir = repo.model("gbatch", &batching, &["1"]);
    std::fs::copy(models.join("1/model.onnx"), dir.join("1/model.onnx")).unwrap();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--allow-client-shm=true", "--onnxruntime-library", lib.to_str().unwrap()]);
    // Verbose lines, through the logging API (the tests' servers start with NEREUS_LOG=info,
    // which --log-verbose does not override).
    let r = s.post_json("/v2/logging", &json!({"log_verbose_level": 1}));
    assert_eq!(r.status, 200, "{}", r.text());
    if s.get("/v2/models/gsimple/ready").status != 200 || s.get("/v2/models/gbatch/ready").status != 200 {
        let index = s.post_json("/v2/repository/index", &json!({})).json();
        let reason = index.as_array().unwrap().iter().find(|m| m["name"] == "gsimple").unwrap()["reason"].clone();
        assert!(!required, "NEREUS_REQUIRE_GPU is set but the GPU model did not load: {reason}");
        eprintln!("skipping: this ONNX Runtime cannot run on the GPU ({reason})");
        return;
    }
    let ctx = CudaContext::new(0).unwrap();
    let (input, output) = (DeviceBuffer::new(&ctx, 256), DeviceBuffer::new(&ctx, 256));
    let a: Vec<i32> = (0..32).collect();
    let b: Vec<i32> = (0..32).map(|i| 100 - 3 * i).collect();
    input.write(0, &le_i32(&a));
    input.write(128, &le_i32(&b));
    let sum = |r: std::ops::Range<usize>| r.map(|i| a[i] + b[i]).collect::<Vec<_>>();
    let diff = |r: std::ops::Range<usize>| r.map(|i| a[i] - b[i]).collect::<Vec<_>>();
    for (name, buf) in [("in", &input), ("out", &output)] {
        let r = register_cuda_http(&s, name, &buf.ipc_handle(), 256);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let place = |region: &str, offset: u64, size: u64| json!({"shared_memory_region": region, "shared_memory_byte_size": size, "shared_memory_offset": offset});

    // `rows` rows of both inputs and both outputs in the regions, at the offsets given.
    let all_in_regions = |rows: u64, inputs: [u64; 2], outputs: [u64; 2]| {
        let size = rows * 64;
        let input = |name: &str, offset| json!({"name": name, "shape": [rows, 16], "datatype": "INT32", "parameters": place("in", offset, size)});
        let output = |name: &str, offset| json!({"name": name, "parameters": place("out", offset, size)});
        json!({
            "inputs": [input("INPUT0", inputs[0]), input("INPUT1", inputs[1])],
            "outputs": [output("OUTPUT0", outputs[0]), output("OUTPUT1", outputs[1])]
        })
    };

    // A batch of two rows in, both outputs out, all on the device.
    let mut request = all_in_regions(2, [0, 128], [0, 128]);
    request["id"] = json!("in-place");
    let r = s.post_json("/v2/models/gsimple/infer", &request);
    assert_eq!(r.status, 200, "{}", r.text());
    let outputs = r.json()["outputs"].clone();
    for (i, name) in ["OUTPUT0", "OUTPUT1"].iter().enumerate() {
        assert_eq!(outputs[i]["name"], *name, "{outputs}");
        assert_eq!(outputs[i]["shape"], json!([2, 16]), "{outputs}");
        assert_eq!(outputs[i]["parameters"], json!({"shared_memory_region": "out", "shared_memory_byte_size": 128}));
    }
    assert_eq!([output.read_i32(0), output.read_i32(64)].concat(), sum(0..32));
    assert_eq!([output.read_i32(128), output.read_i32(192)].concat(), diff(0..32));
    // The log reaches the test through a pipe and a thread of its own: it may lag the answer.
    let written =
        |output: &str| format!("[request id: in-place] output '{output}' (128 bytes) written in place on the GPU");
    s.wait_until("the request's verbose lines", || {
        let log = s.log();
        log.contains("[request id: in-place] prepared")
            && log.contains(&written("OUTPUT0"))
            && log.contains(&written("OUTPUT1"))
    });
    let log = s.log();
    let prepared = log.lines().find(|l| l.contains("[request id: in-place] prepared")).unwrap_or_default();
    assert!(prepared.contains("INPUT0 INT32 [2, 16] (128 bytes on GPU 0)"), "{prepared}");

    // Device inputs, outputs in the body; then host inputs, outputs into the device.
    output.write(0, &[0; 256]);
    let mut mixed = request.clone();
    mixed["id"] = json!("mixed");
    mixed["outputs"] = json!([{"name": "OUTPUT0"}, {"name": "OUTPUT1", "parameters": place("out", 0, 128)}]);
    let r = s.post_json("/v2/models/gsimple/infer", &mixed);
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    assert_eq!(body["outputs"][1]["name"], "OUTPUT1", "the model's order: {body}");
    assert_eq!(body["outputs"][1]["parameters"]["shared_memory_region"], "out", "{body}");
    let data: Vec<i32> =
        body["outputs"][0]["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i32).collect();
    assert_eq!(data, sum(0..32));
    assert_eq!([output.read_i32(0), output.read_i32(64)].concat(), diff(0..32));
    let host_in = json!({
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": &a[..16]},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": place("in", 128, 64)}
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": place("out", 192, 64)}]
    });
    let r = s.post_json("/v2/models/gsimple/infer", &host_in);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(output.read_i32(192), sum(0..16));

    // A region too small for the output: the request is refused, nothing is written.
    let mut small = request.clone();
    small["outputs"][0]["parameters"] = place("out", 0, 64);
    output.write(0, &[0; 256]);
    let r = s.post_json("/v2/models/gsimple/infer", &small);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error(), "output of 128 bytes does not fit the 64 bytes given in shared memory region 'out'");
    assert_eq!([output.read_i32(0), output.read_i32(128)], [vec![0; 16], vec![0; 16]], "nothing of it is written");

    // Two requests in one batch (the dynamic batcher waits for the second): one reads both inputs
    // from the region, the other one from its body and one from the region; each output lands at
    // its own request's place.
    let batches_before = s.get("/v2/models/gbatch/stats").json()["model_stats"][0]["batch_stats"].clone();
    assert_eq!(batches_before, json!([]), "{batches_before}");
    let first = all_in_regions(1, [0, 128], [0, 64]);
    let second = json!({
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": &a[16..]},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": place("in", 192, 64)}
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": place("out", 128, 64)}, {"name": "OUTPUT1"}]
    });
    let (r1, r2) = std::thread::scope(|scope| {
        let one = scope.spawn(|| s.post_json("/v2/models/gbatch/infer", &first));
        let two = scope.spawn(|| s.post_json("/v2/models/gbatch/infer", &second));
        (one.join().unwrap(), two.join().unwrap())
    });
    assert_eq!((r1.status, r2.status), (200, 200), "{} {}", r1.text(), r2.text());
    let batches = s.get("/v2/models/gbatch/stats").json()["model_stats"][0]["batch_stats"].clone();
    assert_eq!(batches.as_array().map(Vec::len), Some(1), "one execution: {batches}");
    assert_eq!(batches[0]["batch_size"], 2, "{batches}");
    assert_eq!(output.read_i32(0), sum(0..16));
    assert_eq!(output.read_i32(64), diff(0..16));
    assert_eq!(output.read_i32(128), sum(16..32));
    let body = r2.json();
    let data: Vec<i32> =
        body["outputs"][1]["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i32).collect();
    assert_eq!(data, diff(16..32));
    output.write(0, &[0; 256]);

    // The Wasm `simple` reads the same region through the host: INPUT0 and INPUT1 are its first
    // two 64-byte pieces (`shm_request`), a's two halves.
    let r = s.post_json("/v2/models/simple/infer", &shm_request("in", "out"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(output.read_i32(0), (0..16).map(|i| a[i] + a[16 + i]).collect::<Vec<_>>());
    assert_eq!(output.read_i32(64), (0..16).map(|i| a[i] - a[16 + i]).collect::<Vec<_>>());

    // gRPC: the same in-place run.
    output.write(0, &[0; 256]);
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        let mut c = grpc_client(&s).await;
        let request = grpc_simple("gsimple", ("in", [64, 192]), ("out", [0, 64]));
        let response = c.model_infer(request).await.unwrap().into_inner();
        assert!(
            response.raw_output_contents.iter().all(|r| r.is_empty()),
            "outputs in shared memory are not sent back"
        );
        let size = &response.outputs[0].parameters["shared_memory_byte_size"];
        assert_eq!(size.parameter_choice, Some(pb::infer_parameter::ParameterChoice::Int64Param(64)));
    });
    assert_eq!(output.read_i32(0), sum(16..32));
    assert_eq!(output.read_i32(64), diff(16..32));
    let r = s.post_json("/v2/models/gsimple/infer", &shm_request("in", "out"));
    assert_eq!(r.status, 200, "{}", r.text());
}
