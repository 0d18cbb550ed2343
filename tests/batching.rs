//! The dynamic batcher through the public surface. Every test holds the model's instance at the
//! test gate, queues requests one at a time (waiting until the server reports each queued, so the
//! queue order is the sending order), opens the gate, and reads back the batch each request was
//! executed in: the `batch_probe` backend returns its execution's composition as output `BATCH`.
use crate::common;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// A `batch_probe` model: INPUT0 INT32 [-1] (`ragged`: allow_ragged_batch), outputs OUTPUT0 and
/// BATCH, with the given `dynamic_batching { … }` body and extra config text.
fn probe_model(repo: &Repo, name: &str, max_batch_size: u32, batching: &str, ragged: bool, extra: &str) {
    let ragged = if ragged { "allow_ragged_batch: true" } else { "" };
    repo.model(
        name,
        &format!(
            r#"name: "{name}"
backend: "batch_probe"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] {ragged} }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }},
  {{ name: "BATCH" data_type: TYPE_INT32 dims: [ -1 ] }}
]
dynamic_batching {{ {batching} }}
{extra}"#
        ),
        &["1"],
    );
}

/// A request whose rows start with `heads` (one row per head, `width` elements each).
fn rows(heads: &[i32], width: usize) -> Value {
    let data: Vec<i32> = heads.iter().flat_map(|h| std::iter::repeat_n(*h, width)).collect();
    json!({"inputs": [{"name": "INPUT0", "shape": [heads.len(), width], "datatype": "INT32", "data": data}]})
}

fn with_params(mut body: Value, params: Value) -> Value {
    body["parameters"] = params;
    body
}

struct Probe<'a> {
    s: &'a Server,
    model: &'a str,
}

impl Probe<'_> {
    fn send(&self, body: Value) -> JoinHandle<Resp> {
        let (port, path) = (self.s.port, format!("/v2/models/{}/infer", self.model));
        std::thread::spawn(move || http(port, "POST", &path, &[], body.to_string().as_bytes()))
    }

    /// Closes the gate and sends `body`, returning once it is executing (held at the gate).
    fn block(&self, body: Value) -> JoinHandle<Resp> {
        self.s.gate(self.model, false);
        let in_flight = self.s.executions(self.model).0;
        let h = self.send(body);
        self.s.wait_until("the blocking request executing", || self.s.executions(self.model).0 == in_flight + 1);
        h
    }

    /// Sends `body` and waits until it is queued behind the others.
    fn enqueue(&self, body: Value) -> JoinHandle<Resp> {
        let before = self.s.queued(self.model);
        let h = self.send(body);
        self.s.wait_until("the request queued", || self.s.queued(self.model) == before + 1);
        h
    }

    fn open(&self) {
        self.s.gate(self.model, true);
    }
}

/// The composition of the execution a successful response came from.
fn batch(h: JoinHandle<Resp>) -> Vec<i32> {
    let r = h.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    let out = body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == "BATCH").unwrap().clone();
    let total = out["shape"][1].as_u64().unwrap() as usize;
    out["data"].as_array().unwrap()[..total].iter().map(|v| v.as_i64().unwrap() as i32).collect()
}

fn stats(s: &Server, model: &str) -> Value {
    s.get(&format!("/v2/models/{model}/stats")).json()["model_stats"][0].clone()
}

#[test]
fn the_largest_reachable_preferred_size_goes_first() {
    let repo = Repo::new();
    // A delay of ten minutes: anything that executes without reaching a preferred size would hang.
    probe_model(&repo, "m", 8, "preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 600000000", false, "");
    let s = Server::start(repo.path(), &[]);
    let p = Probe { s: &s, model: "m" };
    let blocker = p.block(rows(&[100, 101], 1)); // a preferred size by itself
    let queued: Vec<_> = (1..=6).map(|i| p.enqueue(rows(&[i], 1))).collect();
    p.open();
    assert_eq!(batch(blocker), [100, 101]);
    let got: Vec<Vec<i32>> = queued.into_iter().map(batch).collect();
    assert_eq!(got, [vec![1, 2, 3, 4], vec![1, 2, 3, 4], vec![1, 2, 3, 4], vec![1, 2, 3, 4], vec![5, 6], vec![5, 6]]);
}

#[test]
fn batches_count_requests_by_their_batch_size_and_never_exceed_the_maximum() {
    let repo = Repo::new();
    // No preferred size given: Triton's default is max_batch_size (4). No delay.
    probe_model(&repo, "m", 4, "", false, "");
    let s = Server::start(repo.path(), &[]);
    let p = Probe { s: &s, model: "m" };
    let blocker = p.block(rows(&[1], 1));
    let a = p.enqueue(rows(&[10, 11, 12], 1));
    let b = p.enqueue(rows(&[20, 21], 1));
    let c = p.enqueue(rows(&[30], 1));
    let d = p.enqueue(rows(&[40], 1));
    let e = p.enqueue(rows(&[50, 51, 52, 53], 1));
    p.open();
    assert_eq!(batch(blocker), [1]);
    // 3 + 2 would pass the preferred size 4: the 3 goes alone; then 2 + 1 + 1; then the 4.
    assert_eq!(batch(a), [10, 11, 12]);
    assert_eq!(batch(b), [20, 21, 30, 40]);
    assert_eq!(batch(c), [20, 21, 30, 40]);
    assert_eq!(batch(d), [20, 21, 30, 40]);
    assert_eq!(batch(e), [50, 51, 52, 53]);

    let m = stats(&s, "m");
    assert_eq!(m["execution_count"], 4);
    assert_eq!(m["inference_count"], 12);
    assert_eq!(m["inference_stats"]["queue"]["count"], 6);
    let batches: Vec<(u64, u64)> = m["batch_stats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["batch_size"].as_u64().unwrap(), b["compute_infer"]["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(batches, [(1, 1), (3, 1), (4, 2)]);
    let config = s.get("/v2/models/m/config").json();
    assert_eq!(config["dynamic_batching"]["preferred_batch_size"], json!([4]));
}

#[test]
fn a_batch_short_of_a_preferred_size_waits_for_the_queue_delay() {
    let repo = Repo::new();
    let delay = Duration::from_millis(300);
    let batching = format!("preferred_batch_size: [ 4 ] max_queue_delay_microseconds: {}", delay.as_micros());
    probe_model(&repo, "m", 8, &batching, false, "");
    let s = Server::start(repo.path(), &[]);
    let p = Probe { s: &s, model: "m" };
    let blocker = p.block(rows(&[1, 2, 3, 4], 1));
    let sent = Instant::now();
    let a = p.enqueue(rows(&[10], 1));
    let b = p.enqueue(rows(&[20], 1));
    p.open();
    assert_eq!(batch(blocker), [1, 2, 3, 4]);
    // Two requests cannot make the preferred 4: they wait out the delay, then go together.
    assert_eq!(batch(a), [10, 20]);
    assert!(sent.elapsed() >= delay, "executed after {:?}, before the {delay:?} queue delay", sent.elapsed());
    assert_eq!(batch(b), [10, 20]);
}

#[test]
fn higher_priority_requests_go_first() {
    let repo = Repo::new();
    probe_model(&repo, "m", 8, "priority_levels: 2 default_priority_level: 2", false, "");
    let s = Server::start(repo.path(), &[]);
    let p = Probe { s: &s, model: "m" };
    let blocker = p.block(rows(&[1], 1));
    let a = p.enqueue(rows(&[10], 1)); // default level (2)
    let b = p.enqueue(with_params(rows(&[20], 1), json!({"priority": 2})));
    let c = p.enqueue(with_params(rows(&[30], 1), json!({"priority": 1})));
    let d = p.enqueue(with_params(rows(&[40], 1), json!({"priority": 7}))); // out of range: default
    p.open();
    assert_eq!(batch(blocker), [1]);
    for h in [a, b, c, d] {
        assert_eq!(batch(h), [30, 10, 20, 40]);
    }
    let bad = s.post_json("/v2/models/m/infer", &with_params(rows(&[1], 1), json!({"priority": "high"})));
    assert_eq!(bad.status, 400);
    assert!(bad.error().contains("'priority' must be an unsigned integer"), "{}", bad.error());
}

#[test]
fn an_expired_queue_timeout_rejects_or_delays_per_policy() {
    let repo = Repo::new();
    for (name, action) in [("reject", "REJECT"), ("delay", "DELAY")] {
        let batching = format!(
            "default_queue_policy {{ timeout_action: {action} default_timeout_microseconds: 60000000 allow_timeout_override: true }}"
        );
        probe_model(&repo, name, 8, &batching, false, "");
    }
    let s = Server::start(repo.path(), &[]);
    for model in ["reject", "delay"] {
        let p = Probe { s: &s, model };
        let blocker = p.block(rows(&[1], 1));
        // A 1 µs timeout has expired by the time the instance is free; a longer one than the
        // default cannot lengthen it.
        let a = p.enqueue(with_params(rows(&[10], 1), json!({"timeout": 1})));
        let b = p.enqueue(with_params(rows(&[20], 1), json!({"timeout": 120000000})));
        let c = p.enqueue(rows(&[30], 1));
        p.open();
        assert_eq!(batch(blocker), [1]);
        if model == "reject" {
            let r = a.join().unwrap();
            assert_eq!(r.status, 503, "{}", r.text());
            assert_eq!(r.error(), "Request timeout expired");
            assert_eq!(batch(b), [20, 30]);
            assert_eq!(batch(c), [20, 30]);
            assert_eq!(stats(&s, model)["inference_stats"]["fail"]["count"], 1);
        } else {
            // Delayed: it still runs, behind the requests that have not expired.
            assert_eq!(batch(a), [20, 30, 10]);
            assert_eq!(batch(b), [20, 30, 10]);
            assert_eq!(batch(c), [20, 30, 10]);
        }
    }
}

#[test]
fn a_full_queue_rejects_at_once() {
    let repo = Repo::new();
    probe_model(&repo, "m", 8, "default_queue_policy { max_queue_size: 2 }", false, "");
    let s = Server::start(repo.path(), &[]);
    let p = Probe { s: &s, model: "m" };
    let blocker = p.block(rows(&[1], 1));
    let a = p.enqueue(rows(&[10], 1));
    let b = p.enqueue(rows(&[20], 1));
    // Answered while the instance is still held: the rejection does not wait for it.
    let full = s.post_json("/v2/models/m/infer", &rows(&[30], 1));
    assert_eq!(full.status, 503, "{}", full.text());
    assert_eq!(full.error(), "Exceeds maximum queue size");
    assert_eq!(s.executions("m").0, 1);
    p.open();
    assert_eq!(batch(blocker), [1]);
    assert_eq!(batch(a), [10, 20]);
    assert_eq!(batch(b), [10, 20]);
}

#[test]
fn requests_of_different_shapes_batch_only_when_ragged() {
    let repo = Repo::new();
    probe_model(&repo, "fixed", 8, "", false, "");
    probe_model(&repo, "ragged", 8, "", true, "");
    let s = Server::start(repo.path(), &[]);
    for (model, expect) in [
        ("fixed", [vec![10], vec![20], vec![30, 40]]),
        ("ragged", [vec![10, 20, 30, 40], vec![10, 20, 30, 40], vec![10, 20, 30, 40]]),
    ] {
        let p = Probe { s: &s, model };
        let blocker = p.block(rows(&[1], 1));
        let a = p.enqueue(rows(&[10], 2));
        let b = p.enqueue(rows(&[20], 3));
        let c = p.enqueue(rows(&[30, 40], 2));
        p.open();
        assert_eq!(batch(blocker), [1]);
        let got = [batch(a), batch(b), batch(c)];
        assert_eq!(got, expect, "{model}");
    }
}

#[test]
fn two_instances_execute_at_once_and_ordering_is_preserved_when_asked() {
    let repo = Repo::new();
    let groups = "instance_group [ { count: 1 kind: KIND_CPU }, { name: \"second\" count: 1 } ]";
    probe_model(&repo, "ordered", 8, "preserve_ordering: true", false, groups);
    let s = Server::start(repo.path(), &[]);
    let p = Probe { s: &s, model: "ordered" };
    // The first request spins (1 000 200: 200 million iterations) on one instance; the second runs
    // on the other instance and finishes first, but must be answered second.
    let first = p.block(rows(&[1_000_200], 1));
    let second = p.send(rows(&[7], 1));
    s.wait_until("both instances executing", || s.executions("ordered").0 == 2);
    p.open();
    // The second response may leave only after the first request's execution has completed.
    assert_eq!(batch(second), [7]);
    let (in_flight, _, executions) = s.executions("ordered");
    assert_eq!((in_flight, executions), (0, 2), "the second response overtook the first");
    assert_eq!(batch(first), [1_000_200]);
    assert_eq!(s.executions("ordered").1, 2, "the two instances executed at once");
    let config = s.get("/v2/models/ordered/config").json();
    let groups: Vec<&str> =
        config["instance_group"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(groups, ["ordered_0", "second"]);
}

/// A request whose client goes away while it waits for an instance is dropped before it executes
/// and counted (as a failure too, as tritonserver counts a cancelled request); the one holding the
/// instance runs. With the default scheduler and with the dynamic batcher, whose queue answers it
/// at once, while the instance is still held (the default scheduler when the instance frees).
#[test]
fn queued_requests_whose_client_has_gone_are_dropped_unexecuted() {
    let repo = Repo::new();
    probe_model(&repo, "batched", 4, "max_queue_delay_microseconds: 0", false, "instance_group [ { count: 1 } ]");
    repo.example("simple");
    let one = "instance_group [ { count: 1 kind: KIND_CPU } ]";
    std::fs::write(repo.path().join("simple/config.pbtxt"), {
        let text = std::fs::read_to_string(repo.path().join("simple/config.pbtxt")).unwrap();
        text.replace("instance_group [ { kind: KIND_CPU count: 1 } ]", one)
    })
    .unwrap();
    let s = Server::start(repo.path(), &[]);
    let cases = [("simple", simple_request(1)), ("batched", rows(&[7], 2))];
    for (i, (model, body)) in cases.into_iter().enumerate() {
        let path = format!("/v2/models/{model}/infer");
        s.gate(model, false);
        // The first request takes the instance and waits at the gate.
        let port = s.port;
        let (first_path, first_body) = (path.clone(), body.to_string());
        let first = std::thread::spawn(move || http(port, "POST", &first_path, &[], first_body.as_bytes()).status);
        s.wait_until("the first request to hold the instance", || s.executions(model).0 == 1);
        // The second waits behind it; then its client hangs up, and the server sees it go.
        s.post_then_hang_up(&path, &body, || s.queued(model) == 1);
        let hook = |key: &str| s.get(&format!("/nereus/test/models/{model}/executions")).json()[key].as_u64().unwrap();
        s.wait_until("the second request's client to be seen gone", || hook("abandoned") == i as u64 + 1);
        if model == "batched" {
            s.wait_until("the abandoned request to leave the queue", || hook("cancelled") == 1);
            assert_eq!((s.queued(model), s.executions(model).0), (0, 1), "while the first still holds the instance");
        }
        s.gate(model, true);
        assert_eq!(first.join().unwrap(), 200);
        s.wait_until("the abandoned request to be dropped", || hook("cancelled") == 1);
        assert_eq!(s.executions(model).2, 1, "{model}: only the first request executed");
        let stats = s.get(&format!("/v2/models/{model}/stats")).json();
        let inference = &stats["model_stats"][0]["inference_stats"];
        assert_eq!((inference["success"]["count"].as_u64(), inference["fail"]["count"].as_u64()), (Some(1), Some(1)));
        // The model serves on.
        assert_eq!(s.post_json(&path, &body).status, 200);
    }
}

/// A gRPC stream answers the requests one batch completes together in the batch's order, which is
/// the order they were sent in (as tritonserver writes each response when its backend completes
/// it; Triton's QA tests read a stream's replies by position).
#[test]
fn a_grpc_stream_answers_a_batch_in_its_order() {
    use nereus::proto::inference as pb;
    const N: i32 = 8;
    let repo = Repo::new();
    // A delay of ten minutes: the N requests run as one batch of the preferred size or hang.
    probe_model(&repo, "m", 8, "preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 600000000", false, "");
    let s = Server::start(repo.path(), &[]);
    let p = Probe { s: &s, model: "m" };
    let blocker = p.block(rows(&[100, 101, 102, 103, 104, 105, 106, 107], 1));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let mut client = grpc_client(&s).await;
        let requests: Vec<pb::ModelInferRequest> = (1..=N)
            .map(|i| pb::ModelInferRequest {
                model_name: "m".into(),
                id: i.to_string(),
                inputs: vec![pb::model_infer_request::InferInputTensor {
                    name: "INPUT0".into(),
                    datatype: "INT32".into(),
                    shape: vec![1, 1],
                    ..Default::default()
                }],
                raw_input_contents: vec![le_i32(&[i]).into()],
                ..Default::default()
            })
            .collect();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut replies =
            client.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        for r in requests {
            tx.send(r).await.unwrap();
        }
        let s = &s;
        tokio::task::block_in_place(|| s.wait_until("every request queued", || s.queued("m") == N as u64));
        p.open();
        let mut ids = Vec::new();
        for _ in 0..N {
            let reply = replies.message().await.unwrap().unwrap();
            assert_eq!(reply.error_message, "");
            let response = reply.infer_response.unwrap();
            let batch = response.outputs.iter().position(|o| o.name == "BATCH").unwrap();
            let composition: Vec<i32> = response.raw_output_contents[batch]
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            assert_eq!(composition, (1..=N).collect::<Vec<_>>(), "all {N} ran as one batch");
            ids.push(response.id.parse::<i32>().unwrap());
        }
        assert_eq!(ids, (1..=N).collect::<Vec<_>>());
    });
    assert_eq!(batch(blocker), [100, 101, 102, 103, 104, 105, 106, 107]);
}

/// The outputs of a successful response, by name: (shape, values).
fn outputs(h: JoinHandle<Resp>) -> std::collections::HashMap<String, (Vec<i64>, Vec<i64>)> {
    let r = h.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let ints = |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect::<Vec<_>>();
    r.json()["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["name"].as_str().unwrap().to_string(), (ints(&o["shape"]), ints(&o["data"]))))
        .collect()
}

#[test]
fn a_merged_batch_is_one_request_to_the_plugin_and_each_request_gets_its_own_rows() {
    let repo = Repo::new();
    let requests_output = r#"output [ { name: "REQUESTS" data_type: TYPE_INT32 dims: [ 1 ] } ]"#;
    let merge = r#"parameters { key: "merge_batches" value { string_value: "true" } }"#;
    probe_model(&repo, "merged", 8, "", false, &format!("{requests_output}\n{merge}"));
    probe_model(&repo, "plain", 8, "", false, requests_output);
    let s = Server::start(repo.path(), &[]);
    for (model, executed_as) in [("merged", 1), ("plain", 3)] {
        let p = Probe { s: &s, model };
        let blocker = p.block(rows(&[1], 2));
        let a = p.enqueue(rows(&[10, 11], 2));
        let b = p.enqueue(rows(&[20], 2));
        let c = p.enqueue(rows(&[30, 31, 32], 2));
        p.open();
        assert_eq!(batch(blocker), [1]);
        for (h, heads) in [(a, vec![10, 11]), (b, vec![20]), (c, vec![30, 31, 32])] {
            let got = outputs(h);
            let n = heads.len() as i64;
            let own: Vec<i64> = heads.iter().flat_map(|h| [*h as i64, *h as i64]).collect();
            assert_eq!(got["OUTPUT0"], (vec![n, 2], own), "{model}: its own rows of OUTPUT0");
            assert_eq!(got["REQUESTS"], (vec![n, 1], vec![executed_as; heads.len()]), "{model}");
            let composition = &got["BATCH"].1[..6];
            assert_eq!(composition, [10, 11, 20, 30, 31, 32], "{model}: one execution of all six rows");
        }
    }
    // Requests whose parameters differ cannot be one request: they run as a batch of requests.
    let p = Probe { s: &s, model: "merged" };
    let blocker = p.block(rows(&[1], 1));
    let a = p.enqueue(with_params(rows(&[10], 1), json!({"tenant": "a"})));
    let b = p.enqueue(with_params(rows(&[20], 1), json!({"tenant": "b"})));
    p.open();
    assert_eq!(batch(blocker), [1]);
    for h in [a, b] {
        let got = outputs(h);
        assert_eq!(got["REQUESTS"].1, [2]);
        assert_eq!(got["BATCH"].1, [10, 20]);
    }
    // The statistics count the requests, as for any batch: 3 + 2 of them, each in one execution.
    let m = stats(&s, "merged");
    assert_eq!(m["inference_count"], 1 + 6 + 1 + 2);
    assert_eq!(m["execution_count"], 4);
}

#[test]
fn merging_is_refused_where_a_batch_cannot_be_one_request() {
    let repo = Repo::new();
    let merge = |value: &str| format!(r#"parameters {{ key: "merge_batches" value {{ string_value: "{value}" }} }}"#);
    probe_model(&repo, "ragged", 8, "", true, &merge("true"));
    probe_model(&repo, "misspelt", 8, "", false, &merge("yes"));
    probe_model(&repo, "off", 8, "", false, &merge("false"));
    let s = Server::start(repo.path(), &[]);
    let (state, reason) = s.model_state("ragged");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("'merge_batches'") && reason.contains("'INPUT0' allows a ragged batch"), "{reason}");
    let (state, reason) = s.model_state("misspelt");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("must be \"true\" or \"false\", got \"yes\""), "{reason}");
    assert_eq!(s.model_state("off").0, "READY");
    let r = s.post_json("/v2/models/off/infer", &rows(&[5], 1));
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn a_merged_response_that_is_wrong_fails_every_request_of_the_batch_and_the_model_serves_on() {
    let repo = Repo::new();
    let merged = r#"dynamic_batching { }
parameters { key: "merge_batches" value { string_value: "true" } }"#;
    let config = faults_config("faults", merged).replace("max_batch_size: 0", "max_batch_size: 8");
    install_faults_component(&repo.model("faults", &config, &["1"]));
    let s = Server::start(repo.path(), &[]);
    let p = Probe { s: &s, model: "faults" };
    for (fault, words) in [
        (
            "wrong_shape",
            "sent an invalid response: output 'OUTPUT0' has shape [1,3], but the request's batch size is 3",
        ),
        ("error", "failed to execute: test_faults: execution error requested"),
    ] {
        let blocker = p.block(rows(&[1], 1));
        let a = p.enqueue(with_params(rows(&[10, 11], 1), json!({"fault": fault})));
        let b = p.enqueue(with_params(rows(&[20], 1), json!({"fault": fault})));
        p.open();
        assert_eq!(blocker.join().unwrap().status, 200);
        for h in [a, b] {
            let r = h.join().unwrap();
            assert_eq!(r.status, 500, "{fault}: {}", r.text());
            assert!(r.error().contains(words), "{fault}: {}", r.error());
        }
    }
    // The requests of a batch that is right each get their own rows.
    let blocker = p.block(rows(&[1], 1));
    let a = p.enqueue(rows(&[10, 11], 1));
    let b = p.enqueue(rows(&[20], 1));
    p.open();
    assert_eq!(blocker.join().unwrap().status, 200);
    assert_eq!(outputs(a)["OUTPUT0"], (vec![2, 1], vec![10, 11]));
    assert_eq!(outputs(b)["OUTPUT0"], (vec![1, 1], vec![20]));
}

/// A batch waiting for its delay runs when an I/O thread has nothing else to do and would sleep,
/// as large as it has grown, on that thread; with `--strict-queue-delay=true` it waits out the
/// delay, as tritonserver's does. Both once the model runs inline (after a warm-up of fast
/// executions: requests of a full batch each, which go at once).
#[test]
fn a_waiting_batch_runs_when_an_io_thread_would_sleep_unless_the_delay_is_strict() {
    const DELAY_S: u64 = 2;
    let repo = Repo::new();
    probe_model(&repo, "m", 4, &format!("max_queue_delay_microseconds: {}", DELAY_S * 1_000_000), false, "");
    for strict in [false, true] {
        let s = Server::start(repo.path(), &["--strict-queue-delay", if strict { "true" } else { "false" }]);
        let p = Probe { s: &s, model: "m" };
        let counters = || s.get("/nereus/test/models/m/executions").json();
        // Full batches until one runs inline: the model has earned it (on a busy machine a slow
        // execution or two may lengthen the warm-up).
        let mut i = 0;
        while counters()["inline"].as_u64().unwrap() == 0 {
            assert!(i < 2_000, "the model never ran inline");
            assert_eq!(batch(p.send(rows(&[i, i, i, i], 1))), [i, i, i, i], "warm-up {i}");
            i += 1;
        }
        let inline_before = counters()["inline"].as_u64().unwrap();
        let queue_before = stats(&s, "m")["inference_stats"]["queue"]["ns"].as_u64().unwrap();
        assert_eq!(batch(p.send(rows(&[7], 1))), [7], "strict: {strict}");
        let queued_ns = stats(&s, "m")["inference_stats"]["queue"]["ns"].as_u64().unwrap() - queue_before;
        let ran_inline = counters()["inline"].as_u64().unwrap() - inline_before;
        if strict {
            assert!(queued_ns >= DELAY_S * 1_000_000_000, "queued only {queued_ns} ns under a strict delay");
            assert_eq!(ran_inline, 0, "a batch that waited out its delay ran on an I/O thread");
        } else {
            assert!(queued_ns < DELAY_S * 1_000_000_000, "the lone request waited out its delay ({queued_ns} ns)");
            assert_eq!(ran_inline, 1, "the lone request's batch did not run on the I/O thread");
        }
    }
}
