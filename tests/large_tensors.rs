//! A 64 MiB FP32 tensor through every path (HTTP binary, gRPC raw contents, system shared memory)
//! into a sandboxed identity, a sandboxed reduce and, where ONNX Runtime is installed, their ONNX
//! twins: each answer checked byte for byte (the identities) or against the sum (the reduces). The
//! benchmark of the same paths is bench/tensors.sh; this says they are right.
#![cfg(target_os = "linux")]
use crate::common;

use std::collections::HashMap;
use std::path::PathBuf;

use bytes::Bytes;
use common::*;
use nereus::proto::inference as pb;
use pb::infer_parameter::ParameterChoice;
use pb::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use serde_json::json;

const BYTES: usize = 64 << 20;
const ELEMENTS: usize = BYTES / 4;

/// The identities' input: values that differ along the tensor, so that a shifted or truncated
/// answer shows.
fn input() -> Vec<u8> {
    (0..ELEMENTS).flat_map(|i| ((i % 1021) as f32 * 0.25).to_le_bytes()).collect()
}

/// The reduces' input: 0 and 2^-20 alternating. Every partial sum, in whatever order a backend adds
/// (lanes, pairs, a running sum), is a multiple of 2^-20 below 2^3, which FP32's 24-bit mantissa holds
/// exactly: the sum must be exactly 8.
fn reduce_input() -> Vec<u8> {
    (0..ELEMENTS).flat_map(|i| (if i % 2 == 1 { 2f32.powi(-20) } else { 0.0 }).to_le_bytes()).collect()
}

const REDUCE_SUM: f32 = 8.0;

/// The identity's answer must be its input; the reduce's one FP32, the sum.
fn check(model: &str, input: &[u8], out: &[u8]) {
    if model.starts_with("reduce") {
        assert_eq!(out.len(), 4, "{model}: one sum");
        assert_eq!(f32::from_le_bytes(out.try_into().unwrap()), REDUCE_SUM, "{model}: the sum");
    } else {
        assert_eq!(out.len(), input.len(), "{model}: the answer's length");
        assert!(out == input, "{model}: the answer differs from the input");
    }
}

/// A gRPC request for `model` of one FP32 [1, ELEMENTS] input with `parameters`, no contents yet.
fn grpc_request(model: &str, parameters: HashMap<String, pb::InferParameter>) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: model.into(),
        inputs: vec![InferInputTensor {
            name: "INPUT0".into(),
            datatype: "FP32".into(),
            shape: vec![1, ELEMENTS as i64],
            parameters,
            ..Default::default()
        }],
        ..Default::default()
    }
}

const IDENTITY: &str = r#"backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
parameters { key: "sandbox.max_output_bytes" value: { string_value: "134217728" } }"#;

const REDUCE: &str = r#"backend: "reduce_sum"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_mib_tensor_through_every_path_and_backend() {
    let repo = Repo::new();
    repo.model("identity_fp32", IDENTITY, &["1"]);
    repo.model("reduce_sum_fp32", REDUCE, &["1"]);
    let mut models = vec!["identity_fp32", "reduce_sum_fp32"];
    let mut args = vec!["--allow-client-shm=true", "--http-max-input-size", "134217728"];
    let lib = onnxruntime_library();
    if let Some(lib) = &lib {
        let bench = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/model_repository");
        for name in ["identity_fp32_onnx", "reduce_sum_fp32_onnx"] {
            let config = std::fs::read_to_string(bench.join(name).join("config.pbtxt")).unwrap();
            let dir = repo.model(name, &config, &["1"]);
            std::fs::copy(bench.join(name).join("1/model.onnx"), dir.join("1/model.onnx")).unwrap();
            models.push(name);
        }
        args.extend(["--onnxruntime-library", lib.to_str().unwrap()]);
    }
    let s = Server::start(repo.path(), &args);
    let (identity_data, reduce_data) = (input(), reduce_input());
    let shm_in = ShmObject::new("large_in", &identity_data, BYTES);
    let shm_out = ShmObject::new("large_out", &[], BYTES);
    for (name, shm) in [("in", &shm_in), ("out", &shm_out)] {
        let r = s.post_json(
            &format!("/v2/systemsharedmemory/region/{name}/register"),
            &json!({"key": shm.key, "offset": 0, "byte_size": BYTES}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let mut client = grpc_client(&s).await.max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX);
    let shape = [1, ELEMENTS as i64];
    for model in models {
        let reduce = model.starts_with("reduce");
        let out_bytes = if reduce { 4 } else { BYTES };
        let data = if reduce { &reduce_data } else { &identity_data };
        shm_in.write(data);

        // HTTP, the binary extension.
        let header = json!({"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "FP32",
            "parameters": {"binary_data_size": BYTES}}], "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}]})
        .to_string();
        let mut body = header.clone().into_bytes();
        body.extend_from_slice(data);
        let hlen = header.len().to_string();
        let r = s.request(
            "POST",
            &format!("/v2/models/{model}/infer"),
            &[("Inference-Header-Content-Length", &hlen)],
            &body,
        );
        assert_eq!(r.status, 200, "{model} over HTTP: {}", String::from_utf8_lossy(&r.body[..r.body.len().min(300)]));
        let answer_at: usize = r.header("Inference-Header-Content-Length").unwrap().parse().unwrap();
        check(model, data, &r.body[answer_at..]);
        drop(body);

        // gRPC, raw contents.
        let mut req = grpc_request(model, HashMap::new());
        req.raw_input_contents = vec![Bytes::from(data.clone())];
        let resp = client.model_infer(req).await.unwrap_or_else(|e| panic!("{model} over gRPC: {e}")).into_inner();
        check(model, data, &resp.raw_output_contents[0]);

        // System shared memory: the input read from one region, the output written to another
        // (cleared first, so that an answer not written shows).
        shm_out.zero(out_bytes);
        let place =
            |region: &str, size: usize| json!({"shared_memory_region": region, "shared_memory_byte_size": size});
        let r = s.post_json(
            &format!("/v2/models/{model}/infer"),
            &json!({"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "FP32", "parameters": place("in", BYTES)}],
                "outputs": [{"name": "OUTPUT0", "parameters": place("out", BYTES)}]}),
        );
        assert_eq!(r.status, 200, "{model} through shared memory: {}", r.text());
        check(model, data, &shm_out.read(out_bytes));

        // gRPC with the regions.
        let param = |s: &str| pb::InferParameter { parameter_choice: Some(ParameterChoice::StringParam(s.into())) };
        let size = |n: usize| pb::InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(n as i64)) };
        let shm_params = |region: &str| {
            [("shared_memory_region".to_string(), param(region)), ("shared_memory_byte_size".to_string(), size(BYTES))]
                .into_iter()
                .collect()
        };
        shm_out.zero(out_bytes);
        let mut req = grpc_request(model, shm_params("in"));
        req.outputs = vec![InferRequestedOutputTensor { name: "OUTPUT0".into(), parameters: shm_params("out") }];
        client.model_infer(req).await.unwrap_or_else(|e| panic!("{model} over gRPC through shared memory: {e}"));
        check(model, data, &shm_out.read(out_bytes));
    }

    // A small one as JSON, for the reduce's arithmetic on values of its own.
    let r = s.post_json(
        "/v2/models/reduce_sum_fp32/infer",
        &json!({"inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": "FP32", "data": [1.0, 2.0, 3.5, -1.0, 0.0, 0.25]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["shape"], json!([2, 1]));
    assert_eq!(r.json()["outputs"][0]["data"], json!([6.5, -0.75]));
}

/// An answer larger than wasmtime's default hostcall fuel (128 MiB of guest lists and strings a
/// call into the host may name) passes when the model's `sandbox.max_output_bytes` allows it: the
/// fuel follows the model's limit. Before, `send-response` failed with wasmtime's "fuel allocated
/// for hostcalls has been exhausted" whatever the limit said (Triton's L0_large_payload).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_past_wasmtimes_default_hostcall_fuel_passes_within_the_models_limit() {
    const BIG: usize = 130 << 20;
    let repo = Repo::new();
    let config = r#"backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
parameters { key: "sandbox.max_output_bytes" value: { string_value: "150000000" } }
parameters { key: "sandbox.memory_limit_mb" value: { string_value: "1024" } }"#;
    repo.model("identity_big", config, &["1"]);
    let s = Server::start(repo.path(), &[]);
    let mut client = grpc_client(&s).await.max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX);
    let data: Vec<u8> = (0..BIG / 4).flat_map(|i| ((i % 4093) as f32).to_le_bytes()).collect();
    let request = |data: Bytes| pb::ModelInferRequest {
        model_name: "identity_big".into(),
        inputs: vec![InferInputTensor {
            name: "INPUT0".into(),
            datatype: "FP32".into(),
            shape: vec![(data.len() / 4) as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![data],
        ..Default::default()
    };
    let resp = client.model_infer(request(Bytes::from(data.clone()))).await.expect("130 MiB answered").into_inner();
    assert!(resp.raw_output_contents[0] == data, "the answer differs from the input");
    // Past the model's own limit it is still refused, by the host's count.
    let more = Bytes::from(vec![0u8; 152_000_000]);
    let e = client.model_infer(request(more)).await.unwrap_err();
    assert!(e.message().contains("exceeds the model's output limit of 150000000 bytes"), "{e:?}");
}
