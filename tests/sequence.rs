//! The sequence batcher through the public surface: slot allocation, backlog, padding, control
//! tensors of every kind and datatype, implicit state, idle release, the oldest strategy, and
//! sequences over gRPC (unary and streaming).
use crate::common;

use std::thread::JoinHandle;

use bytes::Bytes;
use common::*;
use nereus::proto::inference as pb;
use nereus::proto::inference::infer_parameter::ParameterChoice;
use serde_json::{Value, json};

const CONTROLS: &str = r#"
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }"#;

/// An `accumulate` model: INPUT → OUTPUT (running sum) and BATCH_READY; `batcher` is the body of
/// `sequence_batching { … }`.
fn accumulate(repo: &Repo, name: &str, max_batch_size: u32, batcher: &str, extra: &str) {
    repo.model(
        name,
        &format!(
            r#"name: "{name}"
backend: "accumulate"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "BATCH_READY" data_type: TYPE_INT32 dims: [ -1 ] }}
]
sequence_batching {{ {batcher} }}
{extra}"#
        ),
        &["1"],
    );
}

fn seq(id: Value, value: i32, start: bool, end: bool) -> Value {
    json!({
        "parameters": {"sequence_id": id, "sequence_start": start, "sequence_end": end},
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [value]}]
    })
}

fn send(s: &Server, model: &str, body: Value) -> JoinHandle<Resp> {
    let (port, path) = (s.port, format!("/v2/models/{model}/infer"));
    std::thread::spawn(move || http(port, "POST", &path, &[], body.to_string().as_bytes()))
}

fn output(r: &Resp, name: &str) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    let out =
        body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == name).unwrap_or_else(|| panic!("{name}"));
    out["data"].as_array().unwrap().clone()
}

/// (OUTPUT, BATCH_READY) of a response.
fn sum_and_slots(r: Resp) -> (i64, Vec<i64>) {
    let sum = output(&r, "OUTPUT")[0].as_i64().unwrap();
    (sum, output(&r, "BATCH_READY").iter().map(|v| v.as_i64().unwrap()).collect())
}

fn infer(s: &Server, model: &str, body: Value) -> (i64, Vec<i64>) {
    sum_and_slots(s.post_json(&format!("/v2/models/{model}/infer"), &body))
}

#[test]
fn direct_slots_backlog_padding_and_reuse() {
    let repo = Repo::new();
    accumulate(&repo, "acc", 2, &format!("control_input [ {CONTROLS} ]"), "");
    let s = Server::start(repo.path(), &[]);
    // Sequence 1 takes slot 0, sequence 2 slot 1: position = slot, the empty slot 0 is padding.
    assert_eq!(infer(&s, "acc", seq(json!(1), 1, true, false)), (1, vec![1]));
    assert_eq!(infer(&s, "acc", seq(json!(2), 10, true, false)), (10, vec![0, 1]));
    // No free slot: sequences 3 then 4 wait in the backlog, first come first served.
    let three = send(&s, "acc", seq(json!(3), 100, true, false));
    s.wait_until("sequence 3 backlogged", || s.queued("acc") == 1);
    let four = send(&s, "acc", seq(json!(4), 1000, true, false));
    s.wait_until("sequence 4 backlogged", || s.queued("acc") == 2);
    // Ending sequence 1 hands its slot (0) to sequence 3 at once.
    assert_eq!(infer(&s, "acc", seq(json!(1), 2, false, true)), (3, vec![1]));
    assert_eq!(sum_and_slots(three.join().unwrap()), (100, vec![1]));
    assert_eq!(s.queued("acc"), 1, "sequence 4 still waits");
    assert_eq!(infer(&s, "acc", seq(json!(2), 5, false, true)), (15, vec![0, 1]));
    assert_eq!(sum_and_slots(four.join().unwrap()), (1000, vec![0, 1]));
    assert_eq!(infer(&s, "acc", seq(json!(3), 1, false, false)), (101, vec![1]));
    // A finished sequence is gone: without START its id is refused, as Triton words it.
    let r = s.post_json("/v2/models/acc/infer", &seq(json!(1), 1, false, false));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.error(),
        "inference request for sequence 1 to model 'acc' must specify the START flag on the first request of the sequence"
    );
    // Requests that cannot belong to a sequence.
    let no_id = json!({"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}]});
    let r = s.post_json("/v2/models/acc/infer", &no_id);
    assert_eq!(r.status, 400);
    assert!(r.error().contains("must specify a non-zero or non-empty correlation ID"), "{}", r.error());
    let two_rows = json!({
        "parameters": {"sequence_id": 9, "sequence_start": true},
        "inputs": [{"name": "INPUT", "shape": [2, 1], "datatype": "INT32", "data": [1, 2]}]
    });
    let r = s.post_json("/v2/models/acc/infer", &two_rows);
    assert_eq!(r.status, 400);
    assert!(r.error().contains("must specify batch-size 1"), "{}", r.error());
    let no_rows = json!({
        "parameters": {"sequence_id": 9, "sequence_start": true},
        "inputs": [{"name": "INPUT", "shape": [0, 1], "datatype": "INT32", "data": []}]
    });
    let r = s.post_json("/v2/models/acc/infer", &no_rows);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("must specify batch-size 1"), "{}", r.error());
    // Statistics count real requests only, not padding.
    let stats = s.get("/v2/models/acc/stats").json()["model_stats"][0].clone();
    assert_eq!(stats["inference_stats"]["success"]["count"], 7);
    assert_eq!(stats["inference_count"], 7);
}

/// A sequence waiting in the backlog expires with its requests' `timeout`: each of its requests is
/// refused in tritonserver's words and the sequence is forgotten; a sequence holding a slot, and
/// one in the backlog without a timeout, are not timed out.
#[test]
fn a_backlogged_sequence_expires_with_its_requests_timeout() {
    let repo = Repo::new();
    accumulate(&repo, "acc", 1, &format!("control_input [ {CONTROLS} ]"), "");
    let s = Server::start(repo.path(), &[]);
    let with_timeout = |mut body: Value, us: u64| {
        body["parameters"]["timeout"] = json!(us);
        body
    };
    // Sequence 1 holds the one slot; its own requests' timeouts do not apply there.
    assert_eq!(infer(&s, "acc", with_timeout(seq(json!(1), 1, true, false), 1)).0, 1);
    // Sequence 3, without a timeout, waits in the backlog; sequence 2 joins it with one.
    let three = send(&s, "acc", seq(json!(3), 100, true, false));
    s.wait_until("sequence 3 backlogged", || s.queued("acc") == 1);
    let r = send(&s, "acc", with_timeout(seq(json!(2), 10, true, false), 200_000)).join().unwrap();
    assert_eq!((r.status, r.error()), (503, "timeout of the corresponding sequence has been expired".to_string()));
    // Sequence 2 is forgotten: its next request without START is refused.
    let r = s.post_json("/v2/models/acc/infer", &seq(json!(2), 1, false, true));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("must specify the START flag"), "{}", r.error());
    assert_eq!(s.queued("acc"), 1, "sequence 3 still waits");
    assert_eq!(infer(&s, "acc", with_timeout(seq(json!(1), 2, false, true), 1)).0, 3);
    assert_eq!(sum_and_slots(three.join().unwrap()).0, 100);
}

/// An `identity` model that echoes the control tensors back as outputs of the same names.
fn echo(repo: &Repo, name: &str, corrid: &str) {
    repo.model(
        name,
        &format!(
            r#"name: "{name}"
backend: "identity"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "S" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "E" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "R" data_type: TYPE_BOOL dims: [ 1 ] }},
  {{ name: "C" data_type: {corrid} dims: [ 1 ] }}
]
sequence_batching {{
  control_input [
    {{ name: "S" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 5, 7 ] }} ] }},
    {{ name: "E" control [ {{ kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0.5, 1.5 ] }} ] }},
    {{ name: "R" control [ {{ kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] }} ] }},
    {{ name: "C" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid} }} ] }}
  ]
}}"#
        ),
        &["1"],
    );
}

#[test]
fn control_tensors_of_every_kind_and_datatype() {
    let repo = Repo::new();
    let types = ["TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING"];
    for (i, t) in types.iter().enumerate() {
        echo(&repo, &format!("echo{i}"), t);
    }
    let s = Server::start(repo.path(), &[]);
    let body = |id: Value, start: bool, end: bool| {
        json!({
            "parameters": {"sequence_id": id, "sequence_start": start, "sequence_end": end},
            "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": [3]}]
        })
    };
    for (i, corrid) in types.iter().enumerate().take(4) {
        let model = format!("/v2/models/echo{i}/infer");
        let first = s.post_json(&model, &body(json!(42), true, false));
        assert_eq!(output(&first, "S"), [json!(7)], "echo{i}");
        assert_eq!(output(&first, "E"), [json!(0.5)]);
        assert_eq!(output(&first, "R"), [json!(true)]);
        assert_eq!(output(&first, "C"), [json!(42)]);
        let last = s.post_json(&model, &body(json!(42), false, true));
        assert_eq!((output(&last, "S"), output(&last, "E")), (vec![json!(5)], vec![json!(1.5)]));
        // A string id needs a TYPE_STRING CORRID, in tritonserver's words.
        let r = s.post_json(&model, &body(json!("abc"), true, true));
        assert_eq!(r.status, 400, "{}", r.text());
        let expected = corrid.trim_start_matches("TYPE_");
        assert_eq!(
            r.error(),
            format!("sequence batching control 'C' data-type is 'BYTES', but model 'echo{i}' expects '{expected}'")
        );
    }
    let r = s.post_json("/v2/models/echo4/infer", &body(json!("seq-α"), true, true));
    assert_eq!(output(&r, "C"), [json!("seq-α")]);
    // And a numeric id an integer one.
    let r = s.post_json("/v2/models/echo4/infer", &body(json!(77), true, true));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error(), "sequence batching control 'C' data-type is 'UINT64', but model 'echo4' expects 'BYTES'");
}

fn state_model(repo: &Repo, name: &str, initial: &str, extra_output: &str) {
    repo.model(
        name,
        &format!(
            r#"name: "{name}"
backend: "accumulate"
max_batch_size: 2
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} {extra_output} ]
sequence_batching {{
  max_sequence_idle_microseconds: 1000000
  state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] {initial} }} ]
}}"#
        ),
        &["1"],
    );
}

#[test]
fn implicit_state_is_kept_per_sequence_and_starts_fresh() {
    let repo = Repo::new();
    state_model(&repo, "zero", "", "");
    state_model(&repo, "filed", r#"initial_state: { data_type: TYPE_INT32 dims: [ 1 ] data_file: "init" }"#, "");
    std::fs::create_dir_all(repo.path().join("filed/initial_state")).unwrap();
    std::fs::write(repo.path().join("filed/initial_state/init"), le_i32(&[100])).unwrap();
    state_model(&repo, "shown", "", r#", { name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] }"#);
    // Variable state dims and no initial state: zeros with each variable dimension taken as 1.
    repo.model(
        "variable",
        r#"name: "variable"
backend: "accumulate"
max_batch_size: 2
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching { state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ -1 ] } ] }"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    let sum = |model: &str, id: u64, v: i32, start: bool, end: bool| {
        output(&s.post_json(&format!("/v2/models/{model}/infer"), &seq(json!(id), v, start, end)), "OUTPUT")[0]
            .as_i64()
            .unwrap()
    };
    // Two sequences interleaved in two slots: each sees only its own state.
    assert_eq!(sum("zero", 1, 1, true, false), 1);
    assert_eq!(sum("zero", 2, 10, true, false), 10);
    assert_eq!(sum("zero", 1, 2, false, false), 3);
    assert_eq!(sum("zero", 2, 20, false, false), 30);
    assert_eq!(sum("zero", 1, 3, false, true), 6);
    // A new sequence in the freed slot starts from the initial state, not the old one.
    assert_eq!(sum("zero", 3, 5, true, false), 5);
    // START on a live sequence restarts its state too.
    assert_eq!(sum("zero", 2, 1, true, false), 1);
    assert_eq!(sum("variable", 1, 9, true, false), 9);
    assert_eq!(sum("variable", 1, 1, false, true), 10);
    // Initial state from a file.
    assert_eq!(sum("filed", 1, 5, true, false), 105);
    assert_eq!(sum("filed", 1, 5, false, true), 110);
    // The state output reaches the client only where the configuration lists it as an output.
    let r = s.post_json("/v2/models/zero/infer", &seq(json!(3), 1, false, false));
    assert!(r.json()["outputs"].as_array().unwrap().iter().all(|o| o["name"] != "STATE_OUT"));
    let r = s.post_json("/v2/models/shown/infer", &seq(json!(1), 4, true, false));
    assert_eq!(output(&r, "STATE_OUT"), [json!(4)]);

    // Idle release: after a second without a request the sequence is dropped, with its state.
    s.wait_until("sequence 3 released as idle", || s.log().contains("sequence 3 idle"));
    let r = s.post_json("/v2/models/zero/infer", &seq(json!(3), 1, false, false));
    assert_eq!(r.status, 400);
    assert!(r.error().contains("must specify the START flag"), "{}", r.error());
    assert_eq!(sum("zero", 3, 2, true, false), 2);
}

#[test]
fn bad_sequence_configurations_make_the_model_unavailable() {
    let repo = Repo::new();
    accumulate(
        &repo,
        "two_values",
        2,
        r#"control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 1 ] } ] } ]"#,
        "",
    );
    accumulate(
        &repo,
        "float_corrid",
        2,
        r#"control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ]"#,
        "",
    );
    state_model(&repo, "missing_file", r#"initial_state: { data_type: TYPE_INT32 dims: [ 1 ] data_file: "nope" }"#, "");
    let s = Server::start(repo.path(), &[]);
    let index = s.post_json("/v2/repository/index", &json!({})).json();
    for (model, needle) in [
        ("two_values", "must have exactly 2 entries for CONTROL_SEQUENCE_START"),
        ("float_corrid", "TYPE_UINT64"),
        ("missing_file", "nope"),
    ] {
        let entry = index.as_array().unwrap().iter().find(|m| m["name"] == model).unwrap();
        assert_eq!(entry["state"], "UNAVAILABLE", "{model}");
        assert!(entry["reason"].as_str().unwrap().contains(needle), "{model}: {}", entry["reason"]);
    }
}

#[test]
fn oldest_batches_the_oldest_request_of_each_sequence() {
    let repo = Repo::new();
    accumulate(
        &repo,
        "oldest",
        4,
        &format!("oldest {{ max_candidate_sequences: 4 }} control_input [ {CONTROLS} ]"),
        "",
    );
    let s = Server::start(repo.path(), &[]);
    s.gate("oldest", false);
    let a1 = send(&s, "oldest", seq(json!(1), 1, true, false));
    s.wait_until("a1 executing", || s.executions("oldest").0 == 1);
    let mut waiting = Vec::new();
    for (id, v, start) in [(1, 2, false), (1, 3, false), (2, 10, true), (3, 100, true)] {
        let before = s.queued("oldest");
        waiting.push(send(&s, "oldest", seq(json!(id), v, start, false)));
        s.wait_until("queued", || s.queued("oldest") == before + 1);
    }
    s.gate("oldest", true);
    assert_eq!(sum_and_slots(a1.join().unwrap()), (1, vec![1]));
    let got: Vec<(i64, Vec<i64>)> = waiting.into_iter().map(|h| sum_and_slots(h.join().unwrap())).collect();
    // Sequence 1's second and third requests never share a batch: 2, 10 and 100 go together, 3 after.
    assert_eq!(got, [(3, vec![1, 1, 1]), (6, vec![1]), (10, vec![1, 1, 1]), (100, vec![1, 1, 1])]);
}

fn grpc_seq(model: &str, id: ParameterChoice, value: i32, start: bool, end: bool) -> pb::ModelInferRequest {
    let param = |c: ParameterChoice| pb::InferParameter { parameter_choice: Some(c) };
    pb::ModelInferRequest {
        model_name: model.into(),
        parameters: [
            ("sequence_id".to_string(), param(id)),
            ("sequence_start".to_string(), param(ParameterChoice::BoolParam(start))),
            ("sequence_end".to_string(), param(ParameterChoice::BoolParam(end))),
        ]
        .into(),
        inputs: vec![pb::model_infer_request::InferInputTensor {
            name: "INPUT".into(),
            datatype: "INT32".into(),
            shape: vec![1, 1],
            ..Default::default()
        }],
        raw_input_contents: vec![Bytes::from(le_i32(&[value]))],
        ..Default::default()
    }
}

fn first_i32(r: &pb::ModelInferResponse, name: &str) -> i32 {
    let i = r.outputs.iter().position(|o| o.name == name).unwrap();
    let b = &r.raw_output_contents[i];
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[test]
fn sequences_over_grpc_unary_and_streaming() {
    let repo = Repo::new();
    state_model(&repo, "acc", "", "");
    let s = Server::start(repo.path(), &[]);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut client = grpc_client(&s).await;
        // Unary, uint64 id.
        let id = || ParameterChoice::Uint64Param(5);
        let r = client.model_infer(grpc_seq("acc", id(), 2, true, false)).await.unwrap().into_inner();
        assert_eq!(first_i32(&r, "OUTPUT"), 2);
        let r = client.model_infer(grpc_seq("acc", id(), 3, false, true)).await.unwrap().into_inner();
        assert_eq!(first_i32(&r, "OUTPUT"), 5);
        // Streaming, string ids: two sequences interleaved on one stream.
        let sid = |s: &str| ParameterChoice::StringParam(s.into());
        let requests = vec![
            grpc_seq("acc", sid("a"), 1, true, false),
            grpc_seq("acc", sid("b"), 100, true, false),
            grpc_seq("acc", sid("a"), 2, false, false),
            grpc_seq("acc", sid("b"), 200, false, true),
            grpc_seq("acc", sid("a"), 3, false, true),
            grpc_seq("acc", sid("zzz"), 1, false, false),
        ];
        let mut stream = client.model_stream_infer(tokio_stream::iter(requests)).await.unwrap().into_inner();
        let (mut a, mut b, mut errors) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..6 {
            let item = stream.message().await.unwrap().unwrap();
            if !item.error_message.is_empty() {
                errors.push(item.error_message);
                continue;
            }
            let r = item.infer_response.unwrap();
            let v = first_i32(&r, "OUTPUT");
            if v < 100 { a.push(v) } else { b.push(v) }
        }
        // The sums prove each sequence ran in order; a sequence's replies also leave in its order.
        assert_eq!((a, b), (vec![1, 3, 6], vec![100, 300]));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("sequence zzz"), "{errors:?}");

        // Many sequences interleaved on one stream: each one's replies arrive in its requests'
        // order (each request's replies are forwarded by a task of its own; tritonserver's
        // client examples read a sequence's results in arrival order).
        const SEQUENCES: i32 = 8;
        const LENGTH: i32 = 16;
        let mut requests = Vec::new();
        for k in 0..LENGTH {
            for id in 1..=SEQUENCES {
                let mut r =
                    grpc_seq("acc", ParameterChoice::Int64Param(id as i64), id * 1000 + k, k == 0, k + 1 == LENGTH);
                r.id = format!("{id}");
                requests.push(r);
            }
        }
        let mut stream = client.model_stream_infer(tokio_stream::iter(requests)).await.unwrap().into_inner();
        let mut got: Vec<Vec<i32>> = vec![Vec::new(); SEQUENCES as usize + 1];
        for _ in 0..SEQUENCES * LENGTH {
            let item = stream.message().await.unwrap().unwrap();
            assert_eq!(item.error_message, "");
            let r = item.infer_response.unwrap();
            got[r.id.parse::<usize>().unwrap()].push(first_i32(&r, "OUTPUT"));
        }
        for id in 1..=SEQUENCES {
            let sums: Vec<i32> = (0..LENGTH)
                .scan(0, |sum, k| {
                    *sum += id * 1000 + k;
                    Some(*sum)
                })
                .collect();
            assert_eq!(got[id as usize], sums, "sequence {id}");
        }
    });
}

#[test]
fn a_thousand_concurrent_sequences_through_the_oldest_strategy() {
    let repo = Repo::new();
    repo.model(
        "acc",
        r#"name: "acc"
backend: "accumulate"
max_batch_size: 16
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: 512 preferred_batch_size: [ 16 ] }
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    const SEQUENCES: u64 = 1000;
    const LENGTH: u64 = 6;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let shared = grpc_client(&s).await;
        let mut tasks = tokio::task::JoinSet::new();
        for id in 1..=SEQUENCES {
            let mut client = shared.clone();
            tasks.spawn(async move {
                let mut expected = 0i32;
                for k in 0..LENGTH {
                    let value = (id * 10 + k) as i32;
                    expected += value;
                    let request = grpc_seq("acc", ParameterChoice::Uint64Param(id), value, k == 0, k + 1 == LENGTH);
                    let r = client.model_infer(request).await.map_err(|e| format!("sequence {id}: {e}"))?;
                    let got = first_i32(&r.into_inner(), "OUTPUT");
                    if got != expected {
                        return Err(format!("sequence {id} request {k}: got {got}, expected {expected}"));
                    }
                }
                Ok::<u64, String>(id)
            });
        }
        let mut done = 0;
        while let Some(result) = tasks.join_next().await {
            result.unwrap().unwrap();
            done += 1;
        }
        assert_eq!(done, SEQUENCES);
    });
    let stats = s.get("/v2/models/acc/stats").json()["model_stats"][0].clone();
    assert_eq!(stats["inference_count"], SEQUENCES * LENGTH);
    let executions = stats["execution_count"].as_u64().unwrap();
    assert!(executions < SEQUENCES * LENGTH, "the oldest strategy batched ({executions} executions)");
}

#[test]
fn direct_waits_for_the_minimum_slot_utilization() {
    let repo = Repo::new();
    // Half of the 4 slots must be ready before a batch goes (the delay is ten minutes).
    let batcher = format!(
        "direct {{ minimum_slot_utilization: 0.5 max_queue_delay_microseconds: 600000000 }} control_input [ {CONTROLS} ]"
    );
    accumulate(&repo, "half", 4, &batcher, "");
    let s = Server::start(repo.path(), &[]);
    let one = send(&s, "half", seq(json!(1), 1, true, false));
    s.wait_until("sequence 1 queued", || s.queued("half") == 1);
    assert_eq!(s.executions("half").2, 0, "one ready slot of four does not make a batch");
    let two = send(&s, "half", seq(json!(2), 10, true, false));
    assert_eq!(sum_and_slots(one.join().unwrap()), (1, vec![1, 1]));
    assert_eq!(sum_and_slots(two.join().unwrap()), (10, vec![1, 1]));
}

#[test]
fn oldest_preserves_response_order_across_instances_when_asked() {
    let repo = Repo::new();
    repo.model(
        "ordered",
        r#"name: "ordered"
backend: "batch_probe"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "BATCH" data_type: TYPE_INT32 dims: [ -1 ] } ]
instance_group [ { count: 2 } ]
sequence_batching { oldest { max_candidate_sequences: 1 preserve_ordering: true } }"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    let body = |id: u64, v: i32| {
        json!({
            "parameters": {"sequence_id": id, "sequence_start": true, "sequence_end": true},
            "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": [v]}]
        })
    };
    s.gate("ordered", false);
    // Sequence 1 spins (200 million iterations) on one instance; sequence 2 on the other finishes
    // first but is answered second.
    let first = send(&s, "ordered", body(1, 1_000_200));
    s.wait_until("first executing", || s.executions("ordered").0 == 1);
    let second = send(&s, "ordered", body(2, 7));
    s.wait_until("both executing", || s.executions("ordered").0 == 2);
    s.gate("ordered", true);
    assert_eq!(second.join().unwrap().status, 200);
    let (in_flight, _, executions) = s.executions("ordered");
    assert_eq!((in_flight, executions), (0, 2), "the second response overtook the first");
    assert_eq!(first.join().unwrap().status, 200);
}

/// tritonserver's test hooks, which its QA suite L0_sequence_batcher sets to make batches
/// deterministic: `TRITONSERVER_DELAY_SCHEDULER=2` holds the first batch until two requests wait in
/// slots, `TRITONSERVER_BACKLOG_DELAY_SCHEDULER=1` until one more waits in the backlog; then the two
/// in slots run as one batch. (Without the hold the first request would run alone at once and the
/// second run in a batch of its own.)
#[test]
fn the_delay_scheduler_hooks_hold_the_first_batch() {
    let repo = Repo::new();
    accumulate(&repo, "acc", 2, &format!("control_input [ {CONTROLS} ]"), "instance_group [ { count: 1 } ]");
    let env = [("TRITONSERVER_DELAY_SCHEDULER", "2"), ("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "1")];
    let s = Server::start_with_env(repo.path(), &[], &env);
    let one = send(&s, "acc", seq(json!(1), 1, true, false));
    s.wait_until("sequence 1 queued", || s.queued("acc") == 1);
    let two = send(&s, "acc", seq(json!(2), 10, true, false));
    s.wait_until("sequence 2 queued", || s.queued("acc") == 2);
    let three = send(&s, "acc", seq(json!(3), 100, true, false));
    assert_eq!(sum_and_slots(one.join().unwrap()), (1, vec![1, 1]));
    assert_eq!(sum_and_slots(two.join().unwrap()), (10, vec![1, 1]));
    // Sequence 3 takes the slot sequence 1 frees.
    assert_eq!(infer(&s, "acc", seq(json!(1), 2, false, true)), (3, vec![1]));
    assert_eq!(sum_and_slots(three.join().unwrap()).0, 100);
}

/// A cancelled request ends its whole sequence, as tritonserver's sequence batcher does: the
/// requests queued after it are answered CANCELLED, and so is a request that arrives for the
/// sequence before its slot is free again; the slot is released once the request already
/// executing has run, and a backlogged sequence with a cancelled request is answered CANCELLED
/// whole. Here a client that hangs up is seen at once: everything is answered while the
/// sequence's first request still holds the instance.
#[test]
fn a_cancelled_request_cancels_the_rest_of_its_sequence_and_frees_its_slot() {
    let repo = Repo::new();
    accumulate(&repo, "acc", 1, &format!("control_input [ {CONTROLS} ]"), "");
    let s = Server::start(repo.path(), &[]);
    let path = "/v2/models/acc/infer";
    s.gate("acc", false);
    // Sequence 1 holds the one slot, its first request waiting at the gate.
    let first = send(&s, "acc", seq(json!(1), 1, true, false));
    s.wait_until("sequence 1 to hold the instance", || s.executions("acc").0 == 1);
    // Its second request queues, its third behind it; then the second's client hangs up.
    let mut third = None;
    s.post_then_hang_up(path, &seq(json!(1), 2, false, false), || {
        if third.is_none() && s.queued("acc") == 1 {
            third = Some(send(&s, "acc", seq(json!(1), 3, false, false)));
        }
        s.queued("acc") == 2
    });
    let cancelled = |r: Resp, id: u64| {
        assert_eq!((r.status, r.error()), (400, format!("sequence {id} was cancelled")));
    };
    let third = third.expect("sent");
    s.wait_until("the third request to be answered", || third.is_finished());
    cancelled(third.join().unwrap(), 1);
    assert_eq!((s.queued("acc"), s.executions("acc").0), (0, 1), "the first request still executes");
    // A request arriving while the slot is still held is answered the same.
    cancelled(s.post_json(path, &seq(json!(1), 4, false, false)), 1);

    // Sequence 2 waits in the backlog with two requests; its first one's client hangs up.
    let mut second = None;
    s.post_then_hang_up(path, &seq(json!(2), 10, true, false), || {
        if second.is_none() && s.queued("acc") == 1 {
            second = Some(send(&s, "acc", seq(json!(2), 20, false, false)));
        }
        s.queued("acc") == 2
    });
    let second = second.expect("sent");
    s.wait_until("sequence 2's second request to be answered", || second.is_finished());
    cancelled(second.join().unwrap(), 2);
    assert_eq!((s.queued("acc"), s.executions("acc").0), (0, 1));

    // The first request runs; then the slot is free, and neither sequence goes on.
    s.gate("acc", true);
    assert_eq!(sum_and_slots(first.join().unwrap()), (1, vec![1]));
    for id in [1, 2] {
        let r = s.post_json(path, &seq(json!(id), 5, false, false));
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.error().contains("must specify the START flag"), "{}", r.error());
    }
    // A new sequence takes the slot, with fresh state.
    assert_eq!(infer(&s, "acc", seq(json!(3), 100, true, true)), (100, vec![1]));
    assert_eq!(s.executions("acc").2, 2, "only sequence 1's first request and sequence 3 executed");
    let stats = s.get("/v2/models/acc/stats").json()["model_stats"][0]["inference_stats"].clone();
    assert_eq!((stats["success"]["count"].as_u64(), stats["fail"]["count"].as_u64()), (Some(2), Some(7)), "{stats}");
    let metrics = s.metrics();
    assert!(
        metrics.contains(r#"nv_inference_request_failure{model="acc",reason="CANCELED",version="1"} 5"#),
        "the five cancelled requests: {metrics}"
    );
}

/// The requests of a gRPC stream that was cancelled are found at the head of their slot when the
/// instance next looks (as tritonserver finds them): the sequence is ended, its requests answered
/// CANCELLED unexecuted, and its slot goes to the next sequence.
#[test]
fn a_cancelled_stream_ends_its_sequences_when_the_instance_next_looks() {
    let repo = Repo::new();
    accumulate(&repo, "acc", 1, &format!("control_input [ {CONTROLS} ]"), "");
    let s = Server::start(repo.path(), &[]);
    s.gate("acc", false);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let id = || ParameterChoice::Uint64Param(9);
    rt.block_on(async {
        let mut client = grpc_client(&s).await;
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let responses =
            client.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        for (value, start) in [(1, true), (2, false), (3, false)] {
            tx.send(grpc_seq("acc", id(), value, start, false)).await.unwrap();
        }
        s.wait_until("one request to execute and two to queue", || s.executions("acc").0 == 1 && s.queued("acc") == 2);
        drop(responses); // cancels the call
        drop(tx);
    });
    // A backlogged sequence waits for the slot meanwhile.
    let next = send(&s, "acc", seq(json!(7), 70, true, true));
    s.wait_until("sequence 7 to be backlogged", || s.queued("acc") == 3);
    s.gate("acc", true);
    assert_eq!(sum_and_slots(next.join().unwrap()), (70, vec![1]));
    assert_eq!(s.executions("acc").2, 2, "the stream's queued requests did not execute");
    let stats = s.get("/v2/models/acc/stats").json()["model_stats"][0]["inference_stats"].clone();
    assert_eq!(stats["fail"]["count"], 2, "{stats}");
    let r = s.post_json("/v2/models/acc/infer", &seq(json!(9), 4, false, false));
    assert!(r.error().contains("must specify the START flag"), "{}", r.error());
}
