//! System shared memory that its owner changes under the server: a client registers a region and
//! then truncates, unlinks or replaces the object, alone or while a stream of requests reads and
//! writes it. Each affected request gets a client error naming the region; no signal, and the
//! server keeps serving everyone else (tritonserver, which maps the object, dies of SIGBUS here).
#![cfg(target_os = "linux")]
use crate::common;

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use common::*;
use nereus::proto::inference as pb;
use pb::infer_parameter::ParameterChoice;
use pb::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use serde_json::{Value, json};
use tonic::Code;

/// A POSIX shared-memory object made the way `shm_open` makes them (a file in /dev/shm), removed on
/// drop.
struct Object {
    key: String,
    path: PathBuf,
}

impl Object {
    fn new(tag: &str, size: u64) -> Object {
        let key = format!("/nereus_shm_test_{tag}_{}", std::process::id());
        let path = PathBuf::from("/dev/shm").join(&key[1..]);
        let o = Object { key, path };
        o.recreate(size);
        o
    }
    /// Unlinks the object and makes a new one of `size` bytes under the same key.
    fn recreate(&self, size: u64) {
        let _ = std::fs::remove_file(&self.path);
        std::fs::File::create(&self.path).unwrap().set_len(size).unwrap();
    }
    fn file(&self) -> std::fs::File {
        std::fs::OpenOptions::new().read(true).write(true).open(&self.path).unwrap()
    }
    fn truncate(&self, size: u64) {
        self.file().set_len(size).unwrap();
    }
    fn unlink(&self) {
        std::fs::remove_file(&self.path).unwrap();
    }
    /// The `simple` inputs: INPUT0 = 0..16 at 0, INPUT1 = 3s at 64.
    fn write_inputs(&self) {
        let f = self.file();
        f.write_all_at(&le_i32(&(0..16).collect::<Vec<_>>()), 0).unwrap();
        f.write_all_at(&le_i32(&[3; 16]), 64).unwrap();
    }
    fn read_i32(&self, offset: u64) -> Vec<i32> {
        let mut buf = [0u8; 64];
        self.file().read_exact_at(&mut buf, offset).unwrap();
        buf.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn server() -> (Repo, Server) {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--allow-client-shm=true"]);
    (repo, s)
}

/// A `simple` request over HTTP with both inputs in region `input` and both outputs in `output`.
pub(crate) fn shm_request(input: &str, output: &str) -> Value {
    let place = |region: &str, offset: u64| json!({"shared_memory_region": region, "shared_memory_byte_size": 64, "shared_memory_offset": offset});
    json!({
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": place(input, 0)},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": place(input, 64)}
        ],
        "outputs": [
            {"name": "OUTPUT0", "parameters": place(output, 0)},
            {"name": "OUTPUT1", "parameters": place(output, 64)}
        ]
    })
}

fn register_http(s: &Server, name: &str, o: &Object) {
    let r = s.post_json(
        &format!("/v2/systemsharedmemory/region/{name}/register"),
        &json!({"key": o.key, "offset": 0, "byte_size": 128}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// The server still answers a plain request correctly.
fn still_serving(s: &Server) {
    let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["data"][15], 16);
}

/// Asserts a client error that names the region and says what happened to it.
fn refused(r: &Resp, region: &str, what: &str) {
    assert_eq!(r.status, 400, "{}", r.text());
    let e = r.error();
    assert!(e.contains(&format!("'{region}'")) && e.contains(what), "expected '{region}' and '{what}' in: {e}");
}

#[test]
fn http_regions_that_shrink_vanish_or_are_replaced_fail_only_their_requests() {
    let (_repo, s) = server();
    let (input, output) = (Object::new("in", 128), Object::new("out", 128));
    input.write_inputs();
    register_http(&s, "in", &input);
    register_http(&s, "out", &output);
    // No CUDA region (tests/cuda_shm.rs tests them)
    assert_eq!(s.get("/v2/cudasharedmemory/status").json(), json!([]));
    assert_eq!(s.get("/v2/cudasharedmemory/region/g/status").status, 404);
    assert_eq!(s.request("POST", "/v2/cudasharedmemory/unregister", &[], b"").status, 200);
    let r = s.post_json(
        "/v2/cudasharedmemory/region/g/register",
        &json!({"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 8}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("cudaIpcMemHandle_t"), "{}", r.text());

    let ok = |s: &Server| {
        let r = s.post_json("/v2/models/simple/infer", &shm_request("in", "out"));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(output.read_i32(0), (3..19).collect::<Vec<_>>());
        assert_eq!(output.read_i32(64), (-3..13).collect::<Vec<_>>());
    };
    ok(&s);

    // The input object shrinks: the request that reads past its end is refused, nothing else.
    input.truncate(32);
    refused(&s.post_json("/v2/models/simple/infer", &shm_request("in", "out")), "in", "shrank to 32 bytes");
    still_serving(&s);
    // It grows back (the same object): the region works again.
    input.truncate(128);
    input.write_inputs();
    ok(&s);

    // The output object shrinks: the answer cannot be written, and says so.
    output.truncate(16);
    refused(&s.post_json("/v2/models/simple/infer", &shm_request("in", "out")), "out", "shrank to 16 bytes");
    output.truncate(128);
    ok(&s);

    // Unlinked, then replaced by a new (smaller) object under the same key.
    input.unlink();
    refused(&s.post_json("/v2/models/simple/infer", &shm_request("in", "out")), "in", "no longer exists");
    input.recreate(8);
    refused(&s.post_json("/v2/models/simple/infer", &shm_request("in", "out")), "in", "was replaced");
    still_serving(&s);
    // Registering the new object again is the way back; it must fit.
    assert_eq!(s.request("POST", "/v2/systemsharedmemory/region/in/unregister", &[], b"").status, 200);
    let r = s.post_json("/v2/systemsharedmemory/region/in/register", &json!({"key": input.key, "byte_size": 128}));
    assert_eq!(r.status, 400, "{}", r.text());
    input.recreate(128);
    input.write_inputs();
    register_http(&s, "in", &input);
    ok(&s);
}

/// A sandboxed model writes an output the client placed in a system region straight from its memory
/// (`backend/wasm/lift.rs`): exactly the output's bytes land there, nothing around them; an output
/// left in the body is still answered there; a place too small is refused as before, with nothing
/// written; and the same over gRPC.
/// Registers `name` over a sparse object of 300 TiB: more than the address space, so the server
/// cannot map it and reads its inputs by copying them out.
fn unmappable_region(s: &Server, name: &str) -> Object {
    let huge = Object::new(&format!("sparse_{name}"), 300 << 40);
    let r = s.post_json(
        &format!("/v2/systemsharedmemory/region/{name}/register"),
        &json!({"key": huge.key, "offset": 0, "byte_size": 300u64 << 40}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    huge
}

/// A fixed-size input copied out of a region the server cannot map is refused, before any copy,
/// when the size the client gave is not its shape's: 1 TiB for sixteen INT32s costs the server
/// nothing (allocating it first would take a terabyte or fail on the allocation).
#[test]
fn an_input_sized_past_its_shape_is_refused_before_a_copy_out_of_an_unmapped_region() {
    let (_repo, s) = server();
    let _huge = unmappable_region(&s, "huge");
    let mut request = shm_request("huge", "huge");
    request["inputs"][0]["parameters"]["shared_memory_byte_size"] = json!(1u64 << 40);
    let r = s.post_json("/v2/models/simple/infer", &request);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.error(),
        format!("input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got {}", 1u64 << 40)
    );
    let mut grpc = grpc_shm_request("huge", "huge");
    grpc.inputs[1].parameters.insert("shared_memory_byte_size".into(), int64(1 << 40));
    let e = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { grpc_client(&s).await.model_infer(grpc).await.unwrap_err() });
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert_eq!(
        e.message(),
        format!("input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got {}", 1u64 << 40)
    );
    still_serving(&s);
}

/// A BYTES input has no size its shape fixes: one the client sizes past what the server can
/// allocate fails that request, it does not abort the server.
#[test]
fn an_input_too_large_to_copy_out_of_an_unmapped_region_fails_only_its_request() {
    let overcommit = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    assert_eq!(overcommit.trim(), "0", "the test needs the kernel's heuristic overcommit, which refuses 1 TiB");
    let (_repo, s) = server();
    let _huge = unmappable_region(&s, "huge");
    let mut request = shm_request("huge", "huge");
    request["inputs"][0]["datatype"] = json!("BYTES");
    request["inputs"][0]["parameters"]["shared_memory_byte_size"] = json!(1u64 << 40);
    let r = s.post_json("/v2/models/simple/infer", &request);
    refused(&r, "huge", &format!("cannot allocate {} bytes", 1u64 << 40));
    still_serving(&s);
}

#[test]
fn outputs_placed_in_a_region_are_written_exactly_where_asked() {
    let (_repo, s) = server();
    let (input, output) = (Object::new("in_x", 128), Object::new("out_x", 256));
    input.write_inputs();
    register_http(&s, "in", &input);
    let r = s.post_json(
        "/v2/systemsharedmemory/region/out/register",
        &json!({"key": output.key, "offset": 0, "byte_size": 256}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let filled = || output.file().write_all_at(&[0xA5; 256], 0).unwrap();
    let untouched = |offset: u64| assert_eq!(output.read_i32(offset), vec![i32::from_le_bytes([0xA5; 4]); 16]);
    let place = |offset: u64, size: u64| json!({"shared_memory_region": "out", "shared_memory_byte_size": size, "shared_memory_offset": offset});

    // OUTPUT0 at 64, OUTPUT1 in the body.
    filled();
    let mut request = shm_request("in", "out");
    request["outputs"] = json!([{"name": "OUTPUT0", "parameters": place(64, 100)}, {"name": "OUTPUT1"}]);
    let r = s.post_json("/v2/models/simple/infer", &request);
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    let out0 = body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == "OUTPUT0").unwrap().clone();
    assert_eq!(out0["parameters"]["shared_memory_byte_size"], 64, "{body}");
    assert!(out0.get("data").is_none(), "{body}");
    let out1 = body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == "OUTPUT1").unwrap().clone();
    assert_eq!(out1["data"], json!((-3..13).collect::<Vec<i32>>()), "{body}");
    assert_eq!(output.read_i32(64), (3..19).collect::<Vec<_>>());
    untouched(0);
    untouched(128);
    untouched(192);

    // A place too small: refused as the frontend refuses it, nothing written.
    filled();
    request["outputs"] = json!([{"name": "OUTPUT0", "parameters": place(0, 60)}]);
    let r = s.post_json("/v2/models/simple/infer", &request);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error(), "output of 64 bytes does not fit the 60 bytes given in shared memory region 'out'");
    (0..4).for_each(|i| untouched(i * 64));

    // Over gRPC: both outputs in the region, at 128 and 192.
    filled();
    let mut grpc = grpc_shm_request("in", "out");
    for (o, at) in grpc.outputs.iter_mut().zip([128, 192]) {
        o.parameters.insert("shared_memory_offset".into(), int64(at));
    }
    let answer = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { grpc_client(&s).await.model_infer(grpc).await })
        .expect("answered")
        .into_inner();
    assert!(answer.raw_output_contents.iter().all(|c| c.is_empty()), "{answer:?}");
    assert_eq!(output.read_i32(128), (3..19).collect::<Vec<_>>());
    assert_eq!(output.read_i32(192), (-3..13).collect::<Vec<_>>());
    untouched(0);
    untouched(64);
    still_serving(&s);
}

/// Requests keep arriving on several connections while the client shrinks the objects to nothing
/// and back: every request gets a whole answer (200, or a 400 naming the region) and the server
/// outlives it all.
#[test]
fn http_stream_of_requests_while_the_owner_truncates() {
    let (_repo, s) = server();
    let (input, output) = (Object::new("sin", 128), Object::new("sout", 128));
    input.write_inputs();
    register_http(&s, "sin", &input);
    register_http(&s, "sout", &output);
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let port = s.port;
    let senders: Vec<_> = (0..3)
        .map(|_| {
            let (stop, answered) = (stop.clone(), answered.clone());
            std::thread::spawn(move || {
                let body = shm_request("sin", "sout").to_string();
                let mut counts: HashMap<u16, usize> = HashMap::new();
                while !stop.load(Ordering::Relaxed) {
                    let r = http(port, "POST", "/v2/models/simple/infer", &[], body.as_bytes());
                    if r.status != 200 {
                        let e = r.error();
                        assert!(r.status == 400 && (e.contains("'sin'") || e.contains("'sout'")), "{}: {e}", r.status);
                    }
                    *counts.entry(r.status).or_default() += 1;
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                counts
            })
        })
        .collect();
    // Until the senders have had 1500 answers: the objects shrink (to 0-48 bytes) and grow back,
    // the input or the output in turn, as fast as this thread can.
    let deadline = std::time::Instant::now() + WAIT;
    let mut round = 0u64;
    while answered.load(Ordering::Relaxed) < 1500
        && std::time::Instant::now() < deadline
        && !senders.iter().any(|t| t.is_finished())
    {
        let which = if round.is_multiple_of(2) { &input } else { &output };
        which.truncate(round % 7 * 8);
        std::thread::yield_now();
        which.truncate(128);
        input.write_inputs();
        round += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let mut total: HashMap<u16, usize> = HashMap::new();
    for t in senders {
        for (status, n) in t.join().expect("a sender saw a broken answer") {
            *total.entry(status).or_default() += n;
        }
    }
    // Both outcomes happened (a shrunk object was met, and a whole one), and nothing else did.
    assert!(total.values().sum::<usize>() >= 1500, "{total:?}");
    assert!(total.contains_key(&200) && total.contains_key(&400), "{total:?} in {round} rounds");
    still_serving(&s);
    let r = s.post_json("/v2/models/simple/infer", &shm_request("sin", "sout"));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Inputs are read in place from the server's mapping of the object, when the backend runs. Here the
/// object shrinks after the request passed the frontend's checks and before the backend read it (the
/// execution held by the test gate): where tritonserver dies of SIGBUS, the request gets a client
/// error naming the region, and once the object is whole again the region serves (mapped afresh).
#[test]
fn an_input_object_that_shrinks_while_its_request_waits_fails_only_that_request() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--allow-client-shm=true"]);
    let (input, output) = (Object::new("win", 128), Object::new("wout", 128));
    input.write_inputs();
    register_http(&s, "win", &input);
    register_http(&s, "wout", &output);
    for round in 0..2 {
        s.gate("simple", false);
        let port = s.port;
        let waiting = std::thread::spawn(move || {
            http(port, "POST", "/v2/models/simple/infer", &[], shm_request("win", "wout").to_string().as_bytes())
        });
        s.wait_until("the execution to reach the gate", || s.executions("simple").0 == 1);
        input.truncate(32 * round);
        s.gate("simple", true);
        let r = waiting.join().unwrap();
        refused(&r, "win", &format!("shrank to {} bytes", 32 * round));
        still_serving(&s);
        input.truncate(128);
        input.write_inputs();
        let r = s.post_json("/v2/models/simple/infer", &shm_request("win", "wout"));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(output.read_i32(0), (3..19).collect::<Vec<_>>());
        assert_eq!(output.read_i32(64), (-3..13).collect::<Vec<_>>());
    }
}

fn int64(v: i64) -> pb::InferParameter {
    pb::InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(v)) }
}

/// gRPC parameters placing a 64-byte tensor at `offset` of `region`.
pub(crate) fn place(region: &str, offset: i64) -> HashMap<String, pb::InferParameter> {
    HashMap::from([
        (
            "shared_memory_region".to_string(),
            pb::InferParameter { parameter_choice: Some(ParameterChoice::StringParam(region.into())) },
        ),
        ("shared_memory_byte_size".to_string(), int64(64)),
        ("shared_memory_offset".to_string(), int64(offset)),
    ])
}

/// The gRPC form of [`shm_request`].
fn grpc_shm_request(input: &str, output: &str) -> pb::ModelInferRequest {
    let tensor = |name: &str, offset| InferInputTensor {
        name: name.into(),
        datatype: "INT32".into(),
        shape: vec![1, 16],
        parameters: place(input, offset),
        contents: None,
    };
    let out = |name: &str, offset| InferRequestedOutputTensor { name: name.into(), parameters: place(output, offset) };
    pb::ModelInferRequest {
        model_name: "simple".into(),
        inputs: vec![tensor("INPUT0", 0), tensor("INPUT1", 64)],
        outputs: vec![out("OUTPUT0", 0), out("OUTPUT1", 64)],
        ..Default::default()
    }
}

#[test]
fn grpc_regions_that_shrink_vanish_or_are_replaced_fail_only_their_requests() {
    let (_repo, s) = server();
    let (input, output) = (Object::new("gin", 128), Object::new("gout", 128));
    input.write_inputs();
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(async {
        let mut c = grpc_client(&s).await;
        let register = |name: &str, key: &str, byte_size: u64| pb::SystemSharedMemoryRegisterRequest {
            name: name.into(),
            key: key.into(),
            offset: 0,
            byte_size,
        };
        // An object that cannot be opened: INTERNAL, as tritonserver answers a failed shm_open
        // (Triton's python_grpc_aio_test.py checks the code and the message).
        let e = c.system_shared_memory_register(register("x", "/nereus_no_such_object", 8)).await.unwrap_err();
        assert_eq!(e.code(), Code::Internal, "{e}");
        assert_eq!(e.message(), "Unable to open shared memory region: '/nereus_no_such_object'", "{e}");
        // No CUDA region, nothing to unregister, and an empty handle refused as the client's error,
        // with the message of a tritonserver built with GPU support (L0_grpc's aio test).
        let status = c.cuda_shared_memory_status(pb::CudaSharedMemoryStatusRequest::default()).await.unwrap();
        assert!(status.into_inner().regions.is_empty());
        c.cuda_shared_memory_unregister(pb::CudaSharedMemoryUnregisterRequest::default()).await.unwrap();
        let e = c
            .cuda_shared_memory_register(pb::CudaSharedMemoryRegisterRequest {
                name: "g".into(),
                byte_size: 8,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        assert_eq!(e.message(), "failed to register shared memory region: invalid args", "{e}");
        c.system_shared_memory_register(register("gin", &input.key, 128)).await.unwrap();
        c.system_shared_memory_register(register("gout", &output.key, 128)).await.unwrap();
        let e = c.system_shared_memory_register(register("gin", &input.key, 128)).await.unwrap_err();
        assert_eq!(e.code(), Code::AlreadyExists, "{e}");

        c.model_infer(grpc_shm_request("gin", "gout")).await.unwrap();
        assert_eq!(output.read_i32(0), (3..19).collect::<Vec<_>>());

        let refused = |e: tonic::Status, region: &str, what: &str| {
            assert_eq!(e.code(), Code::InvalidArgument, "{e}");
            assert!(e.message().contains(&format!("'{region}'")) && e.message().contains(what), "{e}");
        };
        input.truncate(40);
        refused(c.model_infer(grpc_shm_request("gin", "gout")).await.unwrap_err(), "gin", "shrank to 40 bytes");
        input.truncate(128);
        input.write_inputs();
        output.truncate(0);
        refused(c.model_infer(grpc_shm_request("gin", "gout")).await.unwrap_err(), "gout", "shrank to 0 bytes");
        output.truncate(128);
        c.model_infer(grpc_shm_request("gin", "gout")).await.unwrap();
        input.unlink();
        refused(c.model_infer(grpc_shm_request("gin", "gout")).await.unwrap_err(), "gin", "no longer exists");
        input.recreate(128);
        refused(c.model_infer(grpc_shm_request("gin", "gout")).await.unwrap_err(), "gin", "was replaced");

        // The same on a stream, mixed with plain requests that must all succeed.
        let requests = (0..40).map(|i| {
            if i % 2 == 0 {
                grpc_shm_request("gin", "gout")
            } else {
                pb::ModelInferRequest {
                    model_name: "simple".into(),
                    inputs: vec![
                        InferInputTensor {
                            name: "INPUT0".into(),
                            datatype: "INT32".into(),
                            shape: vec![1, 16],
                            ..Default::default()
                        },
                        InferInputTensor {
                            name: "INPUT1".into(),
                            datatype: "INT32".into(),
                            shape: vec![1, 16],
                            ..Default::default()
                        },
                    ],
                    raw_input_contents: vec![Bytes::from(le_i32(&[1; 16])), Bytes::from(le_i32(&[2; 16]))],
                    ..Default::default()
                }
            }
        });
        let mut stream = c.model_stream_infer(tokio_stream::iter(requests)).await.unwrap().into_inner();
        let (mut ok, mut errors) = (0, 0);
        while let Some(message) = stream.message().await.unwrap() {
            if message.error_message.is_empty() {
                ok += 1;
            } else {
                assert!(message.error_message.contains("'gin'"), "{}", message.error_message);
                errors += 1;
            }
        }
        assert_eq!((ok, errors), (20, 20));
    });
    still_serving(&s);
}

/// An output's place is its region as it was when the request arrived: unregistering the region
/// while the request runs and registering another object under its name do not redirect the output
/// into the new object (tritonserver refuses the name while a request uses it). An ensemble's
/// outputs are written by the frontend once it answers, so it shows the frontend's write.
#[test]
fn an_output_goes_to_the_region_its_request_named_when_it_arrived() {
    let repo = Repo::new();
    repo.example("simple");
    repo.model("add_sub_twice", ADD_SUB_TWICE, &["1"]);
    let s = Server::start(repo.path(), &["--allow-client-shm=true"]);
    let input = Object::new("redirect_in", 128);
    input.write_inputs();
    let (first, second) = (Object::new("redirect_out1", 128), Object::new("redirect_out2", 128));
    register_http(&s, "in", &input);
    register_http(&s, "out", &first);
    let mut body = shm_request("in", "out");
    body["inputs"][0]["name"] = json!("A");
    body["inputs"][1]["name"] = json!("B");
    body["outputs"][0]["name"] = json!("SUM2");
    body["outputs"][1]["name"] = json!("DIFF2");
    s.gate("simple", false);
    let (port, text) = (s.port, body.to_string());
    let pending =
        std::thread::spawn(move || http(port, "POST", "/v2/models/add_sub_twice/infer", &[], text.as_bytes()));
    s.wait_until("the ensemble's first step executing", || s.executions("simple").0 == 1);
    assert_eq!(s.request("POST", "/v2/systemsharedmemory/region/out/unregister", &[], b"").status, 200);
    register_http(&s, "out", &second);
    s.gate("simple", true);
    let r = pending.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // SUM2 = (a + b) + (a - b) = 2a, DIFF2 = 2b.
    assert_eq!(first.read_i32(0), (0..16).map(|i| 2 * i).collect::<Vec<_>>());
    assert_eq!(first.read_i32(64), vec![6; 16]);
    assert_eq!(second.read_i32(0), vec![0; 16], "nothing went to the object registered since");
}

/// A model answering from the response cache reads its inputs from shared memory and writes its
/// outputs there, for a hit as for a miss; other bytes in the region are another key.
#[test]
fn a_cached_answer_goes_into_shared_memory_too() {
    let repo = Repo::new();
    repo.example("simple");
    let config = repo.path().join("simple/config.pbtxt");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}\nresponse_cache {{ enable: true }}\n")).unwrap();
    let s = Server::start(repo.path(), &["--allow-client-shm=true", "--cache-config", "local,size=1048576"]);
    let (input, output) = (Object::new("in_cache", 128), Object::new("out_cache", 128));
    input.write_inputs();
    register_http(&s, "in", &input);
    register_http(&s, "out", &output);
    let hits = || {
        let stats = s.get("/v2/models/simple/stats").json();
        let m = &stats["model_stats"][0];
        (m["inference_stats"]["cache_hit"]["count"].as_u64().unwrap(), m["execution_count"].as_u64().unwrap())
    };
    for (round, b) in [(0, 3), (1, 3), (2, 5)] {
        if b == 5 {
            input.file().write_all_at(&le_i32(&[5; 16]), 64).unwrap();
        }
        output.file().write_all_at(&[0xA5; 128], 0).unwrap();
        let r = s.post_json("/v2/models/simple/infer", &shm_request("in", "out"));
        assert_eq!(r.status, 200, "round {round}: {}", r.text());
        assert_eq!(output.read_i32(0), (b..b + 16).collect::<Vec<_>>(), "round {round}");
        assert_eq!(output.read_i32(64), (-b..16 - b).collect::<Vec<_>>(), "round {round}");
    }
    assert_eq!(hits(), (1, 2), "the second round was a hit; the third, with other bytes, executed");
}
