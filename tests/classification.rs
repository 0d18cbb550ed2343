//! Triton's classification extension over HTTP and gRPC: a requested output's top classes as
//! `value:index[:label]` strings, labels from the output's `label_filename` (an ensemble's output
//! inherits its step's), and tritonserver's errors for what it refuses.
use crate::common;

use common::*;
use nereus::proto::inference::model_infer_request::InferRequestedOutputTensor;
use nereus::proto::inference::{InferParameter, infer_parameter::ParameterChoice};
use serde_json::{Value, json};

/// `simple` with labels for OUTPUT0: ten lines for sixteen classes, the fourth one empty.
const LABELS: &str = "zero\none\ntwo\n\nfour\nfive\nsix\nseven\neight\nnine\n";

fn labelled_simple(repo: &Repo, name: &str, label_filename: &str) {
    let config = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../model_repository/simple/config.pbtxt"),
    )
    .unwrap()
    .replace("name: \"simple\"", &format!("name: \"{name}\""))
    .replace(
        "{ name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 16 ] }",
        &format!("{{ name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 16 ] label_filename: \"{label_filename}\" }}"),
    );
    assert!(config.contains("label_filename"), "{config}");
    let dir = repo.model(name, &config, &["1"]);
    std::fs::write(dir.join("labels.txt"), LABELS).unwrap();
}

fn server() -> (Repo, Server) {
    let repo = Repo::new();
    labelled_simple(&repo, "simple", "labels.txt");
    labelled_simple(&repo, "outside", "../simple/labels.txt");
    labelled_simple(&repo, "missing", "nope.txt");
    repo.example("string_upper");
    repo.model(
        "relabelled",
        r#"name: "relabelled"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "DIFF" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "simple" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" } } ] }"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &["--allow-client-shm", "true"]);
    (repo, s)
}

/// INPUT0 = 0..16 in both rows; INPUT1 lifts classes 1 and 5 in row 0, class 3 in row 1.
fn inputs() -> (Vec<i32>, Vec<i32>) {
    let a: Vec<i32> = (0..16).chain(0..16).collect();
    let mut b = vec![0; 32];
    (b[1], b[5], b[16 + 3]) = (100, 50, 70);
    (a, b)
}

fn http_request(outputs: Value) -> Value {
    let (a, b) = inputs();
    json!({
        "inputs": [
            {"name": "INPUT0", "shape": [2, 16], "datatype": "INT32", "data": a},
            {"name": "INPUT1", "shape": [2, 16], "datatype": "INT32", "data": b}
        ],
        "outputs": outputs
    })
}

#[test]
fn http_answers_the_top_classes_with_their_labels() {
    let (_repo, s) = server();
    let r = s.post_json(
        "/v2/models/simple/infer",
        &http_request(json!([
            {"name": "OUTPUT0", "parameters": {"classification": 3}},
            {"name": "OUTPUT1", "parameters": {"classification": 0}}
        ])),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let out = &r.json()["outputs"];
    assert_eq!(out[0]["datatype"], "BYTES");
    assert_eq!(out[0]["shape"], json!([2, 3]));
    // Row 0: 101 (class 1), 55 (class 5), 15 (class 15: past the label file's end, no label);
    // row 1: 73 (class 3, whose line is empty: no label), 15, 14.
    assert_eq!(out[0]["data"], json!(["101:1:one", "55:5:five", "15:15", "73:3", "15:15", "14:14"]));
    // classification 0 is no classification: the values.
    assert_eq!(out[1]["datatype"], "INT32");
    assert_eq!(out[1]["data"].as_array().map(Vec::len), Some(32));

    // More classes than the output has: all of them, the shape says how many.
    let r = s.post_json(
        "/v2/models/simple/infer",
        &http_request(json!([{"name": "OUTPUT0", "parameters": {"classification": 40}}])),
    );
    assert_eq!(r.json()["outputs"][0]["shape"], json!([2, 16]), "{}", r.text());

    // The ensemble's output takes the labels of the step output it is mapped from.
    let (a, b) = inputs();
    let body = json!({
        "inputs": [
            {"name": "A", "shape": [2, 16], "datatype": "INT32", "data": a},
            {"name": "B", "shape": [2, 16], "datatype": "INT32", "data": b}
        ],
        "outputs": [{"name": "SUM", "parameters": {"classification": 2}}]
    });
    let r = s.post_json("/v2/models/relabelled/infer", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["data"], json!(["101:1:one", "55:5:five", "73:3", "15:15"]));
}

#[test]
fn what_cannot_be_classified_is_refused_with_tritonservers_words() {
    let (_repo, s) = server();
    for (value, expected) in
        [(json!(-1), "Unable to set 'classification'"), (json!("2"), "Unable to set 'classification'")]
    {
        let r = s.post_json(
            "/v2/models/simple/infer",
            &http_request(json!([{"name": "OUTPUT0", "parameters": {"classification": value}}])),
        );
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.error().contains(expected), "{}", r.error());
    }
    let both = json!([{"name": "OUTPUT0", "parameters": {
        "classification": 2, "shared_memory_region": "r", "shared_memory_byte_size": 64}}]);
    let r = s.post_json("/v2/models/simple/infer", &http_request(both));
    assert_eq!(
        (r.status, r.error()),
        (400, "Output can't set both 'shared_memory_region' and 'classification'".to_string())
    );

    let strings = json!({
        "inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES", "data": ["abc"]}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 1}}]
    });
    let r = s.post_json("/v2/models/string_upper/infer", &strings);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error(), "class result not available for output due to unsupported type 'BYTES'");

    // Label files are read at load: one outside the model's folder, or missing, fails the load.
    let (state, reason) = s.model_state("outside");
    assert_eq!(state, "UNAVAILABLE");
    assert!(
        reason.contains("label file path '")
            && reason.ends_with(
                "/outside/../simple/labels.txt' for output 'OUTPUT0' in model 'outside' is outside model directory"
            ),
        "{reason}"
    );
    let (state, reason) = s.model_state("missing");
    assert_eq!(state, "UNAVAILABLE");
    assert!(
        reason.starts_with("failed to open text file for read ")
            && reason.ends_with("/missing/nope.txt: No such file or directory"),
        "{reason}"
    );
}

fn grpc_request(classification: ParameterChoice) -> nereus::proto::inference::ModelInferRequest {
    let (a, b) = inputs();
    let mut request = grpc_simple_request(0);
    for input in &mut request.inputs {
        input.shape = vec![2, 16];
    }
    request.raw_input_contents = vec![le_i32(&a).into(), le_i32(&b).into()];
    request.outputs = vec![InferRequestedOutputTensor {
        name: "OUTPUT0".into(),
        parameters: [("classification".to_string(), InferParameter { parameter_choice: Some(classification) })].into(),
    }];
    request
}

/// BYTES elements of a raw output: each a little-endian length, then the bytes.
fn strings(mut raw: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    while raw.len() >= 4 {
        let n = u32::from_le_bytes(raw[..4].try_into().unwrap()) as usize;
        out.push(String::from_utf8(raw[4..4 + n].to_vec()).unwrap());
        raw = &raw[4 + n..];
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_answers_the_top_classes_as_a_bytes_tensor() {
    let (_repo, s) = server();
    let mut client = grpc_client(&s).await;
    let r = client.model_infer(grpc_request(ParameterChoice::Int64Param(2))).await.unwrap().into_inner();
    assert_eq!((r.outputs[0].datatype.as_str(), r.outputs[0].shape.clone()), ("BYTES", vec![2, 2]));
    assert_eq!(strings(&r.raw_output_contents[0]), ["101:1:one", "55:5:five", "73:3", "15:15"]);

    for (choice, expected) in [
        (ParameterChoice::Int64Param(0), "invalid value for 'classification' parameter, expected >= 0"),
        (ParameterChoice::Uint64Param(2), "invalid value type for 'classification' parameter, expected int64_param"),
        (
            ParameterChoice::StringParam("2".into()),
            "invalid value type for 'classification' parameter, expected int64_param",
        ),
    ] {
        let e = client.model_infer(grpc_request(choice)).await.unwrap_err();
        assert_eq!((e.code(), e.message()), (tonic::Code::InvalidArgument, expected));
    }

    // On a stream too, each response classified.
    let stream = futures::stream::iter(vec![grpc_request(ParameterChoice::Int64Param(1))]);
    let mut replies = client.model_stream_infer(stream).await.unwrap().into_inner();
    let reply = replies.message().await.unwrap().expect("one reply");
    assert_eq!(reply.error_message, "");
    let response = reply.infer_response.unwrap();
    assert_eq!(response.outputs[0].shape, vec![2, 1]);
    assert_eq!(strings(&response.raw_output_contents[0]), ["101:1:one", "73:3"]);
}
