//! Ensembles through the public surface: chained and fan-out/fan-in DAGs, steps running in
//! parallel, batching across ensemble requests inside a step, a stateful step, nested ensembles,
//! a failing step, load-time validation and statistics.
use crate::common;

use std::thread::JoinHandle;

use common::*;
use serde_json::{Value, json};

fn ab(a: i32, b: i32) -> Value {
    json!({"inputs": [
        {"name": "A", "shape": [1, 16], "datatype": "INT32", "data": vec![a; 16]},
        {"name": "B", "shape": [1, 16], "datatype": "INT32", "data": vec![b; 16]}
    ]})
}

fn out(r: &Resp, name: &str) -> Vec<i64> {
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    let o = body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == name).unwrap_or_else(|| panic!("{name}"));
    o["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
}

fn post(s: &Server, model: &str, body: Value) -> JoinHandle<Resp> {
    let (port, path) = (s.port, format!("/v2/models/{model}/infer"));
    std::thread::spawn(move || http(port, "POST", &path, &[], body.to_string().as_bytes()))
}

fn stats(s: &Server, model: &str) -> Value {
    s.get(&format!("/v2/models/{model}/stats")).json()["model_stats"][0].clone()
}

/// An `identity` model on INT32 tensors of `dims`, two instances.
fn int32_identity(repo: &Repo, name: &str, max_batch_size: u32, dims: &str) {
    let config = format!(
        r#"name: "{name}" backend: "identity" max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: {dims} }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: {dims} }} ]
instance_group [ {{ count: 2 }} ]"#
    );
    repo.model(name, &config, &["1"]);
}

#[test]
fn chained_and_nested_ensembles_with_statistics() {
    let repo = Repo::new();
    repo.example("simple");
    repo.model("add_sub_twice", ADD_SUB_TWICE, &["1"]);
    // Nested: the outer ensemble runs the inner one, then `simple` once more.
    repo.model(
        "outer",
        r#"name: "outer"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "Y" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "Z" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    { model_name: "add_sub_twice" model_version: -1
      input_map { key: "A" value: "X" } input_map { key: "B" value: "Y" }
      output_map { key: "SUM2" value: "two_x" } output_map { key: "DIFF2" value: "two_y" } },
    { model_name: "simple" model_version: -1
      input_map { key: "INPUT0" value: "two_x" } input_map { key: "INPUT1" value: "two_y" }
      output_map { key: "OUTPUT0" value: "Z" } }
  ]
}"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    let r = s.post_json("/v2/models/add_sub_twice/infer", &ab(5, 3));
    assert_eq!(out(&r, "SUM2"), vec![10; 16]);
    assert_eq!(out(&r, "DIFF2"), vec![6; 16]);
    // Only the outputs asked for.
    let mut only = ab(1, 2);
    only["outputs"] = json!([{"name": "DIFF2"}]);
    let r = s.post_json("/v2/models/add_sub_twice/infer", &only);
    assert_eq!(r.json()["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(out(&r, "DIFF2"), vec![4; 16]);
    let body = json!({"inputs": [
        {"name": "X", "shape": [1, 16], "datatype": "INT32", "data": vec![5; 16]},
        {"name": "Y", "shape": [1, 16], "datatype": "INT32", "data": vec![3; 16]}
    ]});
    let r = s.post_json("/v2/models/outer/infer", &body);
    assert_eq!(out(&r, "Z"), vec![16; 16], "2x + 2y");

    // One model to clients: metadata, config, readiness, statistics.
    let meta = s.get("/v2/models/add_sub_twice").json();
    assert_eq!(meta["platform"], "ensemble");
    assert_eq!(s.get("/v2/models/add_sub_twice/ready").status, 200);
    let config = s.get("/v2/models/add_sub_twice/config").json();
    assert_eq!(config["ensemble_scheduling"]["step"].as_array().unwrap().len(), 2);
    let e = stats(&s, "add_sub_twice");
    assert_eq!(e["inference_stats"]["success"]["count"], 3, "two direct requests and one from `outer`");
    // Triton's shape for an ensemble, which perf_analyzer relies on: it finds the version it
    // measured by the queue count, and requires equal compute counts.
    for stat in ["queue", "compute_input", "compute_infer", "compute_output"] {
        assert_eq!(e["inference_stats"][stat]["count"], 3, "{stat}");
    }
    assert_eq!((e["inference_count"].as_u64(), e["execution_count"].as_u64()), (Some(3), Some(3)));
    let simple = stats(&s, "simple");
    assert_eq!(simple["inference_stats"]["success"]["count"], 7, "two steps per add_sub_twice, one more per outer");
    assert_eq!(stats(&s, "outer")["inference_stats"]["success"]["count"], 1);
}

#[test]
fn independent_steps_run_in_parallel_and_fan_in() {
    let repo = Repo::new();
    repo.example("simple");
    int32_identity(&repo, "ident", 8, "[ 16 ]");
    repo.model(
        "fan",
        r#"name: "fan"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "DIFF" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    { model_name: "simple" input_map { key: "INPUT0" value: "left" } input_map { key: "INPUT1" value: "right" }
      output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" } },
    { model_name: "ident" model_version: 1 input_map { key: "INPUT0" value: "A" } output_map { key: "OUTPUT0" value: "left" } },
    { model_name: "ident" input_map { key: "INPUT0" value: "A" } output_map { key: "OUTPUT0" value: "right" } }
  ]
}"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    s.gate("ident", false);
    let h =
        post(&s, "fan", json!({"inputs": [{"name": "A", "shape": [1, 16], "datatype": "INT32", "data": vec![7; 16]}]}));
    // Both identity steps are inside the model at once: they were sent in parallel.
    s.wait_until("both branches executing", || s.executions("ident").0 == 2);
    s.gate("ident", true);
    let r = h.join().unwrap();
    assert_eq!(out(&r, "SUM"), vec![14; 16]);
    assert_eq!(out(&r, "DIFF"), vec![0; 16]);
}

#[test]
fn requests_of_several_ensemble_requests_batch_inside_a_step() {
    let repo = Repo::new();
    repo.model(
        "probe",
        r#"name: "probe"
backend: "batch_probe"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "BATCH" data_type: TYPE_INT32 dims: [ -1 ] } ]
dynamic_batching { }"#,
        &["1"],
    );
    repo.model(
        "pipe",
        r#"name: "pipe"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "COMPOSITION" data_type: TYPE_INT32 dims: [ -1 ] } ]
ensemble_scheduling {
  step [ { model_name: "probe" input_map { key: "INPUT0" value: "IN" } output_map { key: "BATCH" value: "COMPOSITION" } } ]
}"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    let body = |v: i32| json!({"inputs": [{"name": "IN", "shape": [1, 1], "datatype": "INT32", "data": [v]}]});
    s.gate("probe", false);
    let first = post(&s, "pipe", body(1));
    s.wait_until("the first executing", || s.executions("probe").0 == 1);
    let second = post(&s, "pipe", body(2));
    s.wait_until("second queued", || s.queued("probe") == 1);
    let third = post(&s, "pipe", body(3));
    s.wait_until("third queued", || s.queued("probe") == 2);
    s.gate("probe", true);
    assert_eq!(out(&first.join().unwrap(), "COMPOSITION"), [1]);
    assert_eq!(out(&second.join().unwrap(), "COMPOSITION"), [2, 3]);
    assert_eq!(out(&third.join().unwrap(), "COMPOSITION"), [2, 3]);
}

/// An ensemble `name` of one step, `model` (a `test_faults` model): I → INPUT0, OUTPUT0 → O.
fn wrap_in_ensemble(repo: &Repo, name: &str, model: &str) {
    repo.model(
        name,
        &format!(
            r#"name: "{name}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "I" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "O" data_type: TYPE_INT32 dims: [ -1 ] }} ]
ensemble_scheduling {{
  step [ {{ model_name: "{model}" input_map {{ key: "INPUT0" value: "I" }} output_map {{ key: "OUTPUT0" value: "O" }} }} ]
}}"#
        ),
        &["1"],
    );
}

/// `running`: an ensemble over the `accumulate_state` example (a sequence model's running sum),
/// input `V`, output `TOTAL`.
fn running_sum(repo: &Repo) {
    repo.example("accumulate_state");
    repo.model(
        "running",
        r#"name: "running"
platform: "ensemble"
max_batch_size: 8
input [ { name: "V" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "TOTAL" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [ { model_name: "accumulate_state" input_map { key: "INPUT" value: "V" } output_map { key: "OUTPUT" value: "TOTAL" } } ]
}"#,
        &["1"],
    );
}

#[test]
fn a_stateful_step_gets_the_sequence_and_a_failing_step_is_named() {
    let repo = Repo::new();
    running_sum(&repo);
    let dir = repo.model("faulty", &faults_config("faulty", ""), &["1"]);
    install_faults_component(&dir);
    wrap_in_ensemble(&repo, "wrapped", "faulty");
    let s = Server::start(repo.path(), &[]);
    let mut total = 0;
    for (k, v) in [4, 5, 6].into_iter().enumerate() {
        let body = json!({
            "parameters": {"sequence_id": 31, "sequence_start": k == 0, "sequence_end": k == 2},
            "inputs": [{"name": "V", "shape": [1, 1], "datatype": "INT32", "data": [v]}]
        });
        total += v;
        assert_eq!(out(&s.post_json("/v2/models/running/infer", &body), "TOTAL"), [total as i64]);
    }
    let mut bad = faults_request("trap");
    bad["inputs"][0]["name"] = json!("I");
    let r = s.post_json("/v2/models/wrapped/infer", &bad);
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.error().starts_with("in ensemble 'wrapped', ") && r.error().contains("'faulty'"), "{}", r.error());
    assert_eq!(stats(&s, "wrapped")["inference_stats"]["fail"]["count"], 1);
    // The model behind the failed step keeps serving.
    let mut fine = faults_request("none");
    fine["inputs"][0]["name"] = json!("I");
    assert_eq!(out(&s.post_json("/v2/models/wrapped/infer", &fine), "O"), [1, 2, 3]);
}

/// Requests of one sequence sent back to back on a gRPC stream reach the sequence model behind an
/// ensemble in the order they were sent: the ensemble launches a request's first steps before it
/// takes the next request (as tritonserver), where a task per request could start them in either
/// order ("must specify the START flag", or a running sum in the wrong order).
#[test]
fn requests_of_a_sequence_reach_the_step_in_the_order_sent() {
    let repo = Repo::new();
    running_sum(&repo);
    let s = Server::start(repo.path(), &[]);
    stream_sequences_through(&s, "running", 8, 4);
}

/// The same where the sequence model is a later step: requests answered together by a batching,
/// two-instance step before it each launch the next step from their own task, woken in any order;
/// a request waits for the earlier requests of its sequence to launch a step before it does.
#[test]
fn requests_of_a_sequence_reach_a_later_step_in_the_order_sent() {
    let repo = Repo::new();
    repo.example("accumulate_state");
    int32_identity(&repo, "nop", 8, "[ 1 ]");
    repo.model(
        "nop_then_running",
        r#"name: "nop_then_running"
platform: "ensemble"
max_batch_size: 8
input [ { name: "V" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "TOTAL" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "nop" input_map { key: "INPUT0" value: "V" } output_map { key: "OUTPUT0" value: "W" } },
    { model_name: "accumulate_state" input_map { key: "INPUT" value: "W" } output_map { key: "OUTPUT" value: "TOTAL" } }
  ]
}"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    for _ in 0..4 {
        stream_sequences_through(&s, "nop_then_running", 16, 8);
    }
}

/// Sends `steps` requests of each of `sequences` sequences to the running-sum ensemble `model`,
/// interleaved, on one gRPC stream, and checks each response's sum, and that each sequence's
/// responses come back in the order of its requests (a stream client takes the last one it reads
/// as the sequence's result).
fn stream_sequences_through(s: &Server, model: &str, sequences: u64, steps: u64) {
    use nereus::proto::inference as pb;
    let value = |seq: u64, k: u64| (seq * 100 + k * 7) as i32;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let mut client = grpc_client(s).await;
        // Interleaved: each sequence's k-th request after every sequence's (k-1)-th, all sent at
        // once (the server reads them from one buffer, one after the other).
        let mut requests = Vec::new();
        for k in 0..steps {
            for seq in 1..=sequences {
                let flag = |b: bool| pb::InferParameter {
                    parameter_choice: Some(pb::infer_parameter::ParameterChoice::BoolParam(b)),
                };
                let request = pb::ModelInferRequest {
                    model_name: model.into(),
                    id: format!("{seq}-{k}"),
                    parameters: [
                        (
                            "sequence_id".to_string(),
                            pb::InferParameter {
                                parameter_choice: Some(pb::infer_parameter::ParameterChoice::Int64Param(seq as i64)),
                            },
                        ),
                        ("sequence_start".to_string(), flag(k == 0)),
                        ("sequence_end".to_string(), flag(k == steps - 1)),
                    ]
                    .into(),
                    inputs: vec![pb::model_infer_request::InferInputTensor {
                        name: "V".into(),
                        datatype: "INT32".into(),
                        shape: vec![1, 1],
                        ..Default::default()
                    }],
                    raw_input_contents: vec![le_i32(&[value(seq, k)]).into()],
                    ..Default::default()
                };
                requests.push(request);
            }
        }
        let mut replies = client.model_stream_infer(tokio_stream::iter(requests)).await.unwrap().into_inner();
        let mut answered = std::collections::HashMap::new();
        for _ in 0..sequences * steps {
            let reply = replies.message().await.unwrap().unwrap();
            assert_eq!(reply.error_message, "");
            let response = reply.infer_response.unwrap();
            let (seq, k) = response.id.split_once('-').unwrap();
            let (seq, k): (u64, u64) = (seq.parse().unwrap(), k.parse().unwrap());
            let total = i32::from_le_bytes(response.raw_output_contents[0][..4].try_into().unwrap());
            let expected: i32 = (0..=k).map(|j| value(seq, j)).sum();
            assert_eq!(total, expected, "request {k} of sequence {seq}");
            let before = answered.insert(seq, k);
            assert_eq!(before.map_or(0, |b| b + 1), k, "the responses of sequence {seq} out of order");
        }
    });
}

#[test]
fn invalid_ensembles_are_unavailable_with_tritonservers_reasons() {
    let repo = Repo::new();
    repo.example("simple");
    let ensemble = |name: &str, outputs: &str, steps: &str| {
        // An ensemble input no step uses is refused too: only wrong_type has F.
        let f = if name == "wrong_type" { r#", { name: "F" data_type: TYPE_FP32 dims: [ 16 ] }"# } else { "" };
        repo.model(
            name,
            &format!(
                r#"name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "A" data_type: TYPE_INT32 dims: [ 16 ] }}{f} ]
output [ {outputs} ]
ensemble_scheduling {{ step [ {steps} ] }}"#
            ),
            &["1"],
        );
    };
    let out0 = r#"{ name: "S" data_type: TYPE_INT32 dims: [ 16 ] }"#;
    let good_map = r#"output_map { key: "OUTPUT0" value: "S" }"#;
    ensemble(
        "unknown_model",
        out0,
        &format!(r#"{{ model_name: "nope" input_map {{ key: "INPUT0" value: "A" }} {good_map} }}"#),
    );
    ensemble(
        "unknown_tensor",
        out0,
        &format!(
            r#"{{ model_name: "simple" input_map {{ key: "INPUT0" value: "A" }} input_map {{ key: "INPUT1" value: "ghost" }} {good_map} }}"#
        ),
    );
    ensemble(
        "cycle",
        out0,
        r#"{ model_name: "simple" input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "t2" } output_map { key: "OUTPUT0" value: "S" } output_map { key: "OUTPUT1" value: "t1" } },
           { model_name: "simple" input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "t1" } output_map { key: "OUTPUT1" value: "t2" } }"#,
    );
    ensemble(
        "wrong_type",
        out0,
        &format!(
            r#"{{ model_name: "simple" input_map {{ key: "INPUT0" value: "A" }} input_map {{ key: "INPUT1" value: "F" }} {good_map} }}"#
        ),
    );
    ensemble(
        "unproduced",
        r#"{ name: "S" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "MISSING" data_type: TYPE_INT32 dims: [ 16 ] }"#,
        &format!(
            r#"{{ model_name: "simple" input_map {{ key: "INPUT0" value: "A" }} input_map {{ key: "INPUT1" value: "A" }} {good_map} }}"#
        ),
    );
    let s = Server::start(repo.path(), &[]);
    let index = s.post_json("/v2/repository/index", &json!({})).json();
    for (model, needle) in [
        ("unknown_model", "ensemble unknown_model contains models that are not available or ambiguous: nope"),
        (
            "unknown_tensor",
            "output 'S' for ensemble 'unknown_tensor' is not written: at least one of its depending tensors, 'ghost', \
             is not connected",
        ),
        (
            "cycle",
            "output 'S' for ensemble 'cycle' is not written: at least one of its depending tensors, 't1', is not \
             connected",
        ),
        (
            "wrong_type",
            "in ensemble wrong_type, ensemble tensor F: inconsistent data type: TYPE_FP32 is inferred from model \
             wrong_type while TYPE_INT32 is inferred from model simple",
        ),
        ("unproduced", "ensemble output 'MISSING' for ensemble unproduced' is not used"),
    ] {
        let entry = index.as_array().unwrap().iter().find(|m| m["name"] == model).unwrap();
        assert_eq!(entry["state"], "UNAVAILABLE", "{model}");
        assert!(entry["reason"].as_str().unwrap().contains(needle), "{model}: {}", entry["reason"]);
    }
    // The composing model still serves.
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
}

/// Triton's repeat example, then an identity (`ident1`, [`int32_identity`]) on each of its responses.
const REPEAT_THEN_COPY: &str = r#"name: "repeat_then_copy" platform: "ensemble" max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
        { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "COPY" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "repeat_int32" input_map { key: "IN" value: "IN" } input_map { key: "DELAY" value: "DELAY" }
      input_map { key: "WAIT" value: "WAIT" } output_map { key: "OUT" value: "out" } output_map { key: "IDX" value: "IDX" } },
    { model_name: "ident1" input_map { key: "INPUT0" value: "out" } output_map { key: "OUTPUT0" value: "COPY" } }
  ]
}"#;

/// A `repeat_then_copy` request over gRPC: IN = `values`, no delays, no wait at the end.
fn repeat_request(values: &[i32]) -> nereus::proto::inference::ModelInferRequest {
    use bytes::Bytes;
    use nereus::proto::inference as pb;
    let input = |name: &str, datatype: &str, n: usize| pb::model_infer_request::InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: vec![n as i64],
        parameters: Default::default(),
        contents: None,
    };
    let n = values.len();
    pb::ModelInferRequest {
        model_name: "repeat_then_copy".into(),
        id: "r".into(),
        inputs: vec![input("IN", "INT32", n), input("DELAY", "UINT32", n), input("WAIT", "UINT32", 1)],
        raw_input_contents: vec![Bytes::from(le_i32(values)), Bytes::from(vec![0u8; 4 * n]), Bytes::from(vec![0u8; 4])],
        ..Default::default()
    }
}

/// Triton's repeat example as the first step of a pipeline: every response it streams drives the
/// identity step after it once, and the ensemble (decoupled because a step is) answers once per
/// response, then sends the final flag.
#[test]
fn a_decoupled_step_drives_the_next_step_once_per_response() {
    use bytes::Bytes;
    use nereus::proto::inference as pb;
    use pb::infer_parameter::ParameterChoice;
    let repo = Repo::new();
    repo.example("repeat_int32");
    int32_identity(&repo, "ident1", 0, "[ 1 ]");
    repo.model("repeat_then_copy", REPEAT_THEN_COPY, &["1"]);
    let s = Server::start(repo.path(), &[]);
    let config = s.get("/v2/models/repeat_then_copy/config").json();
    assert_eq!(config["model_transaction_policy"]["decoupled"], true, "{config}");
    // Like any decoupled model, it needs a stream.
    let body = json!({"inputs": [
        {"name": "IN", "shape": [1], "datatype": "INT32", "data": [1]},
        {"name": "DELAY", "shape": [1], "datatype": "UINT32", "data": [0]},
        {"name": "WAIT", "shape": [1], "datatype": "UINT32", "data": [0]}]});
    let r = s.post_json("/v2/models/repeat_then_copy/infer", &body);
    assert!(r.error().contains("decoupled transaction policy"), "{}", r.text());

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut c = grpc_client(&s).await;
        let input = |name: &str, datatype: &str, n: i64| pb::model_infer_request::InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape: vec![n],
            parameters: Default::default(),
            contents: None,
        };
        let bytes = |v: &[u32]| Bytes::from(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        let mut request = pb::ModelInferRequest {
            model_name: "repeat_then_copy".into(),
            id: "r".into(),
            inputs: vec![input("IN", "INT32", 3), input("DELAY", "UINT32", 3), input("WAIT", "UINT32", 1)],
            raw_input_contents: vec![Bytes::from(le_i32(&[50, 60, 70])), bytes(&[0, 0, 0]), bytes(&[0])],
            ..Default::default()
        };
        request.parameters.insert(
            "triton_enable_empty_final_response".into(),
            pb::InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(true)) },
        );
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(request).await.unwrap();
        let mut stream =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        let mut seen = Vec::new();
        loop {
            let m = tokio::time::timeout(WAIT, stream.message()).await.unwrap().unwrap().unwrap();
            assert!(m.error_message.is_empty(), "{}", m.error_message);
            let r = m.infer_response.unwrap();
            let last = matches!(
                r.parameters.get("triton_final_response").and_then(|p| p.parameter_choice.clone()),
                Some(ParameterChoice::BoolParam(true))
            );
            if last {
                assert!(r.outputs.is_empty(), "the final flag travels alone");
                break;
            }
            let value = |name: &str| {
                let k = r.outputs.iter().position(|o| o.name == name).unwrap();
                let b = &r.raw_output_contents[k];
                u32::from_le_bytes([b[0], b[1], b[2], b[3]])
            };
            seen.push((value("IDX"), value("COPY") as i32));
        }
        seen.sort();
        assert_eq!(seen, [(0, 50), (1, 60), (2, 70)], "one ensemble response per repeat response");
    });
    let ident =
        s.get("/v2/models/ident1/stats").json()["model_stats"][0]["inference_stats"]["success"]["count"].clone();
    assert_eq!(ident, 3, "the step after the decoupled one ran once per response");
}

/// A decoupled step's responses each start a context (their tensors and what the steps after
/// compute from them); one whose steps are done and whose answer went out is released, so a long
/// stream holds the contexts in use, not one per response. The repeat step paces its 60 responses
/// 5 ms apart, far longer than the identity after it takes: without the release the request holds
/// 61 contexts at the end, with it a few (the server's verbose log says how many).
#[test]
fn a_long_decoupled_stream_holds_only_the_contexts_in_use() {
    use nereus::proto::inference as pb;
    let repo = Repo::new();
    repo.example("repeat_int32");
    int32_identity(&repo, "ident1", 0, "[ 1 ]");
    repo.model("repeat_then_copy", REPEAT_THEN_COPY, &["1"]);
    let s = Server::start(repo.path(), &[]);
    // Through the logging API: the tests' NEREUS_LOG would override --log-verbose.
    let r = s.post_json("/v2/logging", &json!({"log_verbose_level": 1}));
    assert_eq!(r.status, 200, "{}", r.text());
    let n = 60;
    let mut request = repeat_request(&(0..n).collect::<Vec<i32>>());
    let delay = request.inputs.iter().position(|i| i.name == "DELAY").unwrap();
    request.raw_input_contents[delay] = (0..n).flat_map(|_| 5u32.to_le_bytes()).collect::<Vec<u8>>().into();
    // Read up to the final flag: a client that hung up after the last copy would cancel the
    // request before the ensemble saw its repeat step end, and the line below says nothing then.
    request.parameters.insert(
        "triton_enable_empty_final_response".into(),
        pb::InferParameter { parameter_choice: Some(pb::infer_parameter::ParameterChoice::BoolParam(true)) },
    );
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let copies = rt.block_on(async {
        let mut c = grpc_client(&s).await;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(request).await.unwrap();
        let mut stream =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        let mut copies = Vec::new();
        loop {
            let m: pb::ModelStreamInferResponse =
                tokio::time::timeout(WAIT, stream.message()).await.unwrap().unwrap().unwrap();
            assert!(m.error_message.is_empty(), "{}", m.error_message);
            let r = m.infer_response.unwrap();
            if r.outputs.is_empty() {
                let last = r.parameters.get("triton_final_response").and_then(|p| p.parameter_choice.clone());
                assert!(matches!(last, Some(pb::infer_parameter::ParameterChoice::BoolParam(true))));
                break;
            }
            let k = r.outputs.iter().position(|o| o.name == "COPY").unwrap();
            let b = &r.raw_output_contents[k];
            copies.push(i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        }
        copies
    });
    // The identity step has two instances: its answers, and so the ensemble's, may pass each other.
    let mut copies = copies;
    copies.sort_unstable();
    assert_eq!(copies, (0..n).collect::<Vec<_>>(), "every response, once");
    let line = "ensemble 'repeat_then_copy': request 'r' done, ";
    s.wait_until("the request to end", || s.log().contains(line));
    let log = s.log();
    let rest = &log[log.find(line).unwrap() + line.len()..];
    let peak: usize = rest.split_whitespace().next().unwrap().parse().unwrap();
    assert!((2..=n as usize / 2).contains(&peak), "{peak} contexts in use at most for {n} responses");
}

/// `max_inflight_requests: 1`: the step's model has two idle instances, yet only one step request
/// is in flight; the others wait in the ensemble, not in the model's queue, and all complete.
#[test]
fn max_inflight_requests_holds_step_requests_back() {
    let repo = Repo::new();
    int32_identity(&repo, "ident", 8, "[ 16 ]");
    repo.model(
        "limited",
        r#"name: "limited" platform: "ensemble" max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  max_inflight_requests: 1
  step [ { model_name: "ident" input_map { key: "INPUT0" value: "A" } output_map { key: "OUTPUT0" value: "B" } } ]
}"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    s.gate("ident", false);
    let a = |k: i32| json!({"inputs": [{"name": "A", "shape": [1, 16], "datatype": "INT32", "data": vec![k; 16]}]});
    let first = post(&s, "limited", a(1));
    s.wait_until("the first step executing", || s.executions("ident").0 == 1);
    let others: Vec<_> = (2..=3).map(|k| post(&s, "limited", a(k))).collect();
    s.wait_until("two step requests held back", || s.queued("limited") == 2);
    assert_eq!((s.executions("ident").0, s.queued("ident")), (1, 0), "held in the ensemble, not sent");
    s.gate("ident", true);
    assert_eq!(out(&first.join().unwrap(), "B"), vec![1; 16]);
    for (k, h) in (2..=3).zip(others) {
        assert_eq!(out(&h.join().unwrap(), "B"), vec![k as i64; 16]);
    }
    assert_eq!(s.queued("limited"), 0);
}

/// A client that hangs up on an ensemble cancels it: the ensemble stops waiting and drops its
/// running steps, whose backend sees `is-cancelled` and ends (the step has no deadline of its own
/// and a ten-minute sandbox deadline, so only the cancellation ends it within the test's bound).
#[test]
fn a_cancelled_ensemble_request_cancels_its_running_steps() {
    let repo = Repo::new();
    waiting_faults_model(&repo, "waits");
    wrap_in_ensemble(&repo, "wrapped", "waits");
    let s = Server::start(repo.path(), &[]);
    let mut body = faults_request("until_cancelled");
    body["inputs"][0]["name"] = json!("I");
    s.post_then_hang_up("/v2/models/wrapped/infer", &body, || s.executions("waits").0 == 1);
    s.wait_until("the step to end", || stats(&s, "waits")["inference_stats"]["fail"]["count"] == 1);
    s.wait_until("the ensemble request to end", || stats(&s, "wrapped")["inference_stats"]["fail"]["count"] == 1);
    let mut fine = faults_request("none");
    fine["inputs"][0]["name"] = json!("I");
    assert_eq!(out(&s.post_json("/v2/models/wrapped/infer", &fine), "O"), [1, 2, 3]);
}

/// Ensembles mixing batching and non-batching: an ensemble that does not batch over a step that
/// does (the ensemble's tensors carry the batch dimension in their dims), and a batching ensemble
/// whose second step does not batch (it sees the whole batch as one tensor), as tritonserver serves
/// them.
#[test]
fn batching_and_non_batching_steps_mix() {
    let repo = Repo::new();
    repo.example("simple");
    int32_identity(&repo, "whole", 0, "[ -1, 16 ]");
    repo.model(
        "unbatched",
        r#"name: "unbatched"
platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_INT32 dims: [ -1, 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]
ensemble_scheduling { step [ { model_name: "simple" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" } } ] }"#,
        &["1"],
    );
    repo.model(
        "mixed",
        r#"name: "mixed"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "simple" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "sum" } },
  { model_name: "whole" model_version: -1
    input_map { key: "INPUT0" value: "sum" } output_map { key: "OUTPUT0" value: "SUM" } } ] }"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    for model in ["unbatched", "mixed"] {
        assert_eq!(s.model_state(model).0, "READY", "{model}: {:?}", s.model_state(model));
        let body = json!({"inputs": [
            {"name": "A", "shape": [2, 16], "datatype": "INT32", "data": [vec![1; 16], vec![2; 16]]},
            {"name": "B", "shape": [2, 16], "datatype": "INT32", "data": vec![10; 32]}
        ]});
        let r = s.post_json(&format!("/v2/models/{model}/infer"), &body);
        assert_eq!(r.json()["outputs"][0]["shape"], json!([2, 16]), "{model}: {}", r.text());
        assert_eq!(out(&r, "SUM"), [vec![11; 16], vec![12; 16]].concat(), "{model}");
    }
}

/// Where a tensor crosses between an ensemble that does not batch and a step that does, the batch
/// dimension is added and taken away again as tritonserver does (`ReshapeTensorDims`): a non-batching
/// ensemble's `[n]` tensor, exactly the step's dims without a batch, reaches the step as a batch of
/// one, `[1, n]`, and its output comes back as `[n]` — also when `n` is zero (L0_infer_zero's
/// ensembles). A request with a batch of zero is served, with empty outputs.
#[test]
fn batch_dimensions_are_added_and_removed_between_batching_and_non_batching_models() {
    let repo = Repo::new();
    int32_identity(&repo, "batched", 8, "[ -1 ]");
    repo.model(
        "flat",
        r#"name: "flat"
platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "B" data_type: TYPE_INT32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "batched" model_version: -1 input_map { key: "INPUT0" value: "A" } output_map { key: "OUTPUT0" value: "mid" } },
  { model_name: "batched" model_version: -1 input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "B" } } ] }"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    for data in [vec![4, 5, 6], vec![]] {
        let n = data.len();
        let r = s.post_json(
            "/v2/models/flat/infer",
            &json!({"inputs": [{"name": "A", "shape": [n], "datatype": "INT32", "data": data}]}),
        );
        assert_eq!(r.json()["outputs"][0]["shape"], json!([n]), "{}", r.text());
        assert_eq!(out(&r, "B"), data.iter().map(|&v| v as i64).collect::<Vec<_>>());
    }
    // Each step saw a batch of one.
    let stats = s.get("/v2/models/batched/stats").json();
    assert_eq!(stats["model_stats"][0]["inference_count"], json!(4), "{stats}");
    // A batch of zero, straight to the batching model.
    let r = s.post_json(
        "/v2/models/batched/infer",
        &json!({"inputs": [{"name": "INPUT0", "shape": [0, 3], "datatype": "INT32", "data": []}]}),
    );
    assert_eq!(r.json()["outputs"][0]["shape"], json!([0, 3]), "{}", r.text());
}

/// Optional inputs, as tritonserver's QA suite L0_optional_input uses them: a model may be sent
/// any subset of its optional inputs (the `identity` backend answers an output whose input was
/// left out with zeros, as Triton's), an ensemble passes on only what the request provided, and a
/// step whose other inputs are optional runs with the one its ensemble connects.
#[test]
fn optional_inputs_reach_models_and_ensemble_steps() {
    let repo = Repo::new();
    let io = r#"input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
                { name: "INPUT1" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 1 ] } ]"#;
    repo.model("pair", &format!("name: \"pair\" backend: \"identity\" max_batch_size: 4\n{io}"), &["1"]);
    repo.model(
        "pipeline",
        &format!(
            r#"name: "pipeline" platform: "ensemble" max_batch_size: 4
{io}
ensemble_scheduling {{ step [
  {{ model_name: "pair" model_version: -1 input_map {{ key: "INPUT0" value: "INPUT0" }} input_map {{ key: "INPUT1" value: "INPUT1" }}
    output_map {{ key: "OUTPUT0" value: "internal" }} }},
  {{ model_name: "pair" model_version: -1 input_map {{ key: "INPUT1" value: "internal" }}
    output_map {{ key: "OUTPUT0" value: "OUTPUT0" }} output_map {{ key: "OUTPUT1" value: "OUTPUT1" }} }} ] }}"#
        ),
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    let one = |name: &str, v: f64| json!({"name": name, "shape": [1, 1], "datatype": "FP32", "data": [v]});
    let value = |r: &Resp, name: &str| -> Value {
        assert_eq!(r.status, 200, "{}", r.text());
        let body = r.json();
        body["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == name)
            .map(|o| o["data"].clone())
            .unwrap_or(Value::Null)
    };
    // Only INPUT1: OUTPUT1 is it, OUTPUT0 zeros.
    let r = s.post_json("/v2/models/pair/infer", &json!({"inputs": [one("INPUT1", 7.0)]}));
    assert_eq!((value(&r, "OUTPUT0"), value(&r, "OUTPUT1")), (json!([0.0]), json!([7.0])));
    // The pipeline: step 2 gets only INPUT1 (step 1's OUTPUT0 = INPUT0), so OUTPUT1 = INPUT0 and
    // OUTPUT0 is zeros.
    let r = s.post_json("/v2/models/pipeline/infer", &json!({"inputs": [one("INPUT0", 3.0), one("INPUT1", 9.0)]}));
    assert_eq!((value(&r, "OUTPUT0"), value(&r, "OUTPUT1")), (json!([0.0]), json!([3.0])));
    // The ensemble's own optional input left out: step 1 runs without it.
    let r = s.post_json("/v2/models/pipeline/infer", &json!({"inputs": [one("INPUT0", 5.0)]}));
    assert_eq!(value(&r, "OUTPUT1"), json!([5.0]));
}

/// A gRPC client that keeps its stream open but stops reading it. Once HTTP/2's flow control and
/// the server's buffers are full, a decoupled ensemble's request on that stream waited for the
/// client for good: it held the ensemble, so that an unload of the ensemble never finished (the
/// model stayed UNLOADING and could not be loaded again). With `--grpc-stream-stall-timeout-ms`
/// the server gives the stream up: its requests are cancelled, the ensemble unloads and loads
/// again, and the client, when it reads on, finds the responses sent before, then ABORTED.
#[test]
fn a_stream_whose_client_stopped_reading_is_given_up_and_releases_its_ensemble() {
    use nereus::proto::inference as pb;
    let repo = Repo::new();
    repo.example("repeat_int32");
    int32_identity(&repo, "ident1", 0, "[ 1 ]");
    repo.model("repeat_then_copy", REPEAT_THEN_COPY, &["1"]);
    let s = Server::start(
        repo.path(),
        &["--model-control-mode=explicit", "--load-model=repeat_then_copy", "--grpc-stream-stall-timeout-ms=300"],
    );
    assert_eq!(s.model_state("repeat_then_copy").0, "READY");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        // The stream's HTTP/2 window is 1 KiB: past that (and the server's own buffers, a few
        // thousand of these ~100-byte responses) nothing moves while the client does not read.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", s.grpc_port))
            .unwrap()
            .initial_stream_window_size(1024)
            .connect()
            .await
            .unwrap();
        let mut c = pb::grpc_inference_service_client::GrpcInferenceServiceClient::new(channel);
        let n = 20_000;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(repeat_request(&(0..n).collect::<Vec<i32>>())).await.unwrap();
        let mut stalled =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        s.wait_until("the server to give the stream up", || s.log().contains("the client took no message for 300 ms"));

        // The ensemble's request was cancelled with the stream: the ensemble unloads.
        let r = s.post_json("/v2/repository/models/repeat_then_copy/unload", &json!({}));
        assert_eq!(r.status, 200, "{}", r.text());
        s.wait_until("the ensemble to unload", || {
            s.model_state("repeat_then_copy") == ("UNAVAILABLE".into(), "unloaded".into())
        });
        let r = s.post_json("/v2/repository/models/repeat_then_copy/load", &json!({}));
        assert_eq!(r.status, 200, "{}", r.text());

        // A client that reads is served as before, on the same connection.
        let (tx2, rx2) = tokio::sync::mpsc::channel(1);
        tx2.send(repeat_request(&[7, 8, 9])).await.unwrap();
        let mut stream =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx2)).await.unwrap().into_inner();
        let mut copies = Vec::new();
        while copies.len() < 3 {
            let m = tokio::time::timeout(WAIT, stream.message()).await.unwrap().unwrap().unwrap();
            assert!(m.error_message.is_empty(), "{}", m.error_message);
            let r = m.infer_response.unwrap();
            let k = r.outputs.iter().position(|o| o.name == "COPY").unwrap();
            let b = &r.raw_output_contents[k];
            copies.push(i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        }
        copies.sort();
        assert_eq!(copies, [7, 8, 9]);
        drop(tx2);

        // The stalled client reads on: the responses sent before it stalled, then ABORTED.
        let mut received = 0;
        let status = loop {
            match tokio::time::timeout(WAIT, stalled.message()).await.unwrap() {
                Ok(Some(m)) => {
                    assert!(m.error_message.is_empty(), "{}", m.error_message);
                    received += 1;
                }
                Ok(None) => panic!("the stream ended without an error after {received} responses"),
                Err(status) => break status,
            }
        };
        assert_eq!(status.code(), tonic::Code::Aborted, "{status:?}");
        assert!(status.message().contains("--grpc-stream-stall-timeout-ms"), "{status:?}");
        assert!(received > 0 && received < n, "{received} of {n} responses before the stream was given up");
        drop(tx);
    });
}
