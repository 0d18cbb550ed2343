//! The ONNX Runtime backend on Triton's own example models (../shared/triton_example_models, copied
//! into `tests/onnx_models`), served unchanged: plain, INT8, the dynamic batcher gathering a batch,
//! and the sequence batcher feeding control tensors. `scripts/test.sh` installs ONNX Runtime and sets
//! NEREUS_ONNXRUNTIME_LIB; without it these tests say so and skip, unless NEREUS_REQUIRE_ONNXRUNTIME
//! is set (as the test script does), when they fail.
use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{Value, json};

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/onnx_models")
}

/// Copies an example model, optionally appending to its configuration.
fn example(repo: &Repo, name: &str, extra: &str) {
    let src = models().join(name);
    let config = std::fs::read_to_string(src.join("config.pbtxt")).unwrap() + extra;
    let dir = repo.model(name, &config, &["1"]);
    std::fs::copy(src.join("1/model.onnx"), dir.join("1/model.onnx")).unwrap();
}

fn data(r: &Resp, name: &str) -> Vec<i64> {
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    let o = body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == name).unwrap().clone();
    o["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
}

/// The batch sizes `model` has executed, from its statistics.
fn batch_sizes(s: &Server, model: &str) -> Vec<u64> {
    let stats = s.get(&format!("/v2/models/{model}/stats")).json()["model_stats"][0].clone();
    stats["batch_stats"].as_array().unwrap().iter().map(|b| b["batch_size"].as_u64().unwrap()).collect()
}

fn pair(datatype: &str, a: &[i64], b: &[i64]) -> Value {
    json!({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": datatype, "data": a},
        {"name": "INPUT1", "shape": [1, 16], "datatype": datatype, "data": b}
    ]})
}

#[test]
fn tritons_example_models_run_unchanged() {
    let Some(lib) = onnxruntime_library() else { return };
    let repo = Repo::new();
    example(&repo, "simple", "");
    example(&repo, "simple_int8", "");
    example(&repo, "simple_string", "");
    example(&repo, "simple_sequence", "");
    example(&repo, "simple_dyna_sequence", "");
    let s = Server::start(repo.path(), &["--onnxruntime-library", lib.to_str().unwrap()]);
    let a: Vec<i64> = (0..16).collect();
    let b = vec![3; 16];
    for (model, dt) in [("simple", "INT32"), ("simple_int8", "INT8")] {
        let r = s.post_json(&format!("/v2/models/{model}/infer"), &pair(dt, &a, &b));
        assert_eq!(data(&r, "OUTPUT0"), a.iter().map(|x| x + 3).collect::<Vec<_>>(), "{model}");
        assert_eq!(data(&r, "OUTPUT1"), a.iter().map(|x| x - 3).collect::<Vec<_>>(), "{model}");
    }
    // BYTES (TYPE_STRING) tensors: decimal integers as strings.
    let text = |v: &[i64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let body = json!({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "BYTES", "data": text(&a)},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "BYTES", "data": text(&b)}
    ]});
    let r = s.post_json("/v2/models/simple_string/infer", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let sums: Vec<String> =
        r.json()["outputs"][0]["data"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    assert_eq!(sums, text(&a.iter().map(|x| x + 3).collect::<Vec<_>>()));
    // Only the outputs asked for.
    let mut one = pair("INT32", &a, &b);
    one["outputs"] = json!([{"name": "OUTPUT1"}]);
    let r = s.post_json("/v2/models/simple/infer", &one);
    assert_eq!(r.json()["outputs"].as_array().unwrap().len(), 1);
    // A wrong datatype is the client's error, before ONNX Runtime sees it.
    assert_eq!(s.post_json("/v2/models/simple/infer", &pair("INT8", &a, &b)).status, 400);

    // simple_sequence: OUTPUT = (INPUT + START) × READY, per request.
    let seq = |model: &str, id: u64, v: i64, start: bool, end: bool| {
        let body = json!({
            "parameters": {"sequence_id": id, "sequence_start": start, "sequence_end": end},
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [v]}]
        });
        data(&s.post_json(&format!("/v2/models/{model}/infer"), &body), "OUTPUT")[0]
    };
    assert_eq!(seq("simple_sequence", 11, 5, true, false), 6);
    assert_eq!(seq("simple_sequence", 11, 5, false, false), 5);
    assert_eq!(seq("simple_sequence", 11, 2, false, true), 2);
    // String ids (simple_sequence has no CORRID control).
    let text_seq = |v: i64, start: bool, end: bool| {
        let body = json!({
            "parameters": {"sequence_id": "seq-a", "sequence_start": start, "sequence_end": end},
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [v]}]
        });
        data(&s.post_json("/v2/models/simple_sequence/infer", &body), "OUTPUT")[0]
    };
    assert_eq!(text_seq(4, true, false), 5);
    assert_eq!(text_seq(4, false, true), 4);
    // simple_dyna_sequence (oldest): OUTPUT = (INPUT + START + END × CORRID) × READY.
    assert_eq!(seq("simple_dyna_sequence", 1000, 5, true, false), 6);
    assert_eq!(seq("simple_dyna_sequence", 1000, 5, false, false), 5);
    assert_eq!(seq("simple_dyna_sequence", 1000, 5, false, true), 1005);
}

#[test]
fn the_dynamic_batcher_gathers_requests_into_one_execution() {
    let Some(lib) = onnxruntime_library() else { return };
    let repo = Repo::new();
    // One instance, so that the others queue behind the first (an ONNX model without instance
    // groups has two CPU instances, as in tritonserver).
    example(&repo, "simple", "dynamic_batching { } instance_group [ { count: 1 kind: KIND_CPU } ]");
    let s = Server::start(repo.path(), &["--onnxruntime-library", lib.to_str().unwrap()]);
    s.gate("simple", false);
    let port = s.port;
    let send = move |k: i64| {
        std::thread::spawn(move || {
            let body = pair("INT32", &[k; 16], &[1; 16]);
            http(port, "POST", "/v2/models/simple/infer", &[], body.to_string().as_bytes())
        })
    };
    let first = send(100);
    s.wait_until("first executing", || s.executions("simple").0 == 1);
    let others: Vec<_> = (1..=3)
        .map(|k| {
            let h = send(k);
            s.wait_until("queued", || s.queued("simple") == k as u64);
            h
        })
        .collect();
    s.gate("simple", true);
    assert_eq!(data(&first.join().unwrap(), "OUTPUT0"), vec![101; 16]);
    for (k, h) in (1..=3).zip(others) {
        assert_eq!(data(&h.join().unwrap(), "OUTPUT0"), vec![k + 1; 16]);
    }
    assert_eq!(batch_sizes(&s, "simple"), [1, 3], "one execution of 1, then one of the 3 queued requests");
}

#[test]
fn a_ragged_batch_gets_its_batch_inputs_and_each_request_its_own_elements_back() {
    let Some(lib) = onnxruntime_library() else { return };
    let repo = Repo::new();
    example(&repo, "ragged", "");
    let s = Server::start(repo.path(), &["--onnxruntime-library", lib.to_str().unwrap()]);
    s.gate("ragged", false);
    let port = s.port;
    let send = move |n: usize| {
        std::thread::spawn(move || {
            let values: Vec<f32> = (0..n).map(|i| (n * 10 + i) as f32).collect();
            let body =
                json!({"inputs": [{"name": "RAGGED_INPUT", "shape": [1, n], "datatype": "FP32", "data": values}]});
            http(port, "POST", "/v2/models/ragged/infer", &[], body.to_string().as_bytes())
        })
    };
    // One request executing (held at the gate), then three of different lengths queued behind it:
    // they are batched together although their shapes differ.
    let first = send(1);
    s.wait_until("first executing", || s.executions("ragged").0 == 1);
    let lengths = [2usize, 4, 3];
    let queued: Vec<_> = lengths
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let h = send(n);
            s.wait_until("queued", || s.queued("ragged") == k as u64 + 1);
            h
        })
        .collect();
    s.gate("ragged", true);
    assert_eq!(first.join().unwrap().status, 200);
    let mut end = 0;
    for (n, h) in lengths.into_iter().zip(queued) {
        let r = h.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let body = r.json();
        let output =
            |name: &str| body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == name).unwrap().clone();
        // Its own elements, in its own shape, out of the concatenated batch.
        let own = output("RAGGED_OUTPUT");
        assert_eq!(own["shape"], json!([1, n]));
        assert_eq!(own["data"], json!((0..n).map(|i| (n * 10 + i) as f64).collect::<Vec<_>>()));
        // Every batch input kind, one row per request: its element count, where it ends and
        // starts in the concatenation, the batch's largest count (4), its shape without the batch
        // dimension, and the same flattened.
        let start = end;
        end += n;
        assert_eq!((output("COUNT")["data"].clone(), output("END")["data"].clone()), (json!([n as f64]), json!([end])));
        assert_eq!(
            (output("START")["data"].clone(), output("MAX")["data"].clone()),
            (json!([start as f64]), json!([4.0]))
        );
        assert_eq!(
            (output("ITEM")["data"].clone(), output("FLAT")["data"].clone()),
            (json!([n as f64]), json!([n as f64]))
        );
    }
    assert_eq!(
        batch_sizes(&s, "ragged"),
        [1, 3],
        "one execution of 1, then the 3 queued requests of different lengths"
    );
}

/// An initializer that is also a graph input may be declared as an optional input: left out, the
/// model uses its stored value; given, the request's replaces it. A rank-0 input and output are
/// served with `dims: [ 1 ]`; dims of more than one element for them do not load.
#[test]
fn initializers_as_optional_inputs_and_scalars() {
    let Some(lib) = onnxruntime_library() else { return };
    let repo = Repo::new();
    example(&repo, "initializer", "");
    example(&repo, "scalar", "");
    let wide = std::fs::read_to_string(models().join("scalar/config.pbtxt"))
        .unwrap()
        .replace("name: \"scalar\"", "name: \"wide_scalar\"")
        .replace("dims: [ 1 ]", "dims: [ 2 ]");
    let dir = repo.model("wide_scalar", &wide, &["1"]);
    std::fs::copy(models().join("scalar/1/model.onnx"), dir.join("1/model.onnx")).unwrap();
    let s = Server::start(repo.path(), &["--onnxruntime-library", lib.to_str().unwrap()]);
    let fives = |name: &str, v: f32| json!({"name": name, "shape": [5, 5], "datatype": "FP32", "data": vec![v; 25]});
    let sum = |r: &Resp| -> Vec<f64> {
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["outputs"][0]["data"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
    };
    let r = s.post_json("/v2/models/initializer/infer", &json!({"inputs": [fives("INPUT", 2.0)]}));
    assert_eq!(sum(&r), vec![3.0; 25], "the stored initializer (ones)");
    let r = s.post_json(
        "/v2/models/initializer/infer",
        &json!({"inputs": [fives("INPUT", 2.0), fives("INITIALIZER", 5.0)]}),
    );
    assert_eq!(sum(&r), vec![7.0; 25], "the request's value");

    let body = json!({"inputs": [{"name": "INPUT", "shape": [1], "datatype": "FP32", "data": [4.5]}]});
    let r = s.post_json("/v2/models/scalar/infer", &body);
    assert_eq!(r.json()["outputs"][0]["shape"], json!([1]), "{}", r.text());
    assert_eq!(sum(&r), vec![4.5]);
    let (state, reason) = s.model_state("wide_scalar");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("scalar tensor 'INPUT', should only provide 1 in the model configuration"), "{reason}");
}

#[test]
fn without_the_library_onnx_models_are_unavailable_and_the_rest_serve() {
    let repo = Repo::new();
    example(&repo, "simple", "");
    repo.example("add_sub_fp32");
    let s = Server::start(repo.path(), &["--onnxruntime-library", "/nonexistent/libonnxruntime.so"]);
    let index = s.post_json("/v2/repository/index", &json!({})).json();
    let entry = index.as_array().unwrap().iter().find(|m| m["name"] == "simple").unwrap().clone();
    assert_eq!(entry["state"], "UNAVAILABLE");
    assert!(entry["reason"].as_str().unwrap().contains("/nonexistent/libonnxruntime.so"), "{}", entry["reason"]);
    // ... and says how to get one
    assert!(entry["reason"].as_str().unwrap().contains("scripts/setup-onnxruntime.sh"), "{}", entry["reason"]);
    let body = json!({"inputs": [
        {"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]},
        {"name": "INPUT1", "shape": [2], "datatype": "FP32", "data": [1.0, 1.0]}
    ]});
    assert_eq!(s.post_json("/v2/models/add_sub_fp32/infer", &body).status, 200);
}

#[test]
fn configurations_are_completed_from_the_model_unless_strict() {
    let Some(lib) = onnxruntime_library() else { return };
    let repo = Repo::new();
    // No config.pbtxt at all, and one that gives only the platform and max_batch_size.
    for (name, config) in [("bare", None), ("partial", Some("platform: \"onnxruntime_onnx\"\nmax_batch_size: 8\n"))] {
        let dir = repo.path().join(name);
        std::fs::create_dir_all(dir.join("1")).unwrap();
        std::fs::copy(models().join("simple/1/model.onnx"), dir.join("1/model.onnx")).unwrap();
        if let Some(text) = config {
            std::fs::write(dir.join("config.pbtxt"), text).unwrap();
        }
    }
    // A configuration naming an output the model does not have is refused, in the words of
    // tritonserver's ONNX Runtime backend.
    let dir = repo.path().join("misnamed");
    std::fs::create_dir_all(dir.join("1")).unwrap();
    std::fs::copy(models().join("simple/1/model.onnx"), dir.join("1/model.onnx")).unwrap();
    let config = std::fs::read_to_string(models().join("simple/config.pbtxt")).unwrap();
    std::fs::write(
        dir.join("config.pbtxt"),
        config.replace("name: \"simple\"", "name: \"misnamed\"").replace("\"OUTPUT0\"", "\"_OUTPUT0\""),
    )
    .unwrap();
    let s = Server::start(repo.path(), &["--onnxruntime-library", lib.to_str().unwrap()]);
    let (state, reason) = s.model_state("misnamed");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("unexpected inference output '_OUTPUT0', allowed outputs are: "), "{reason}");
    let a: Vec<i64> = (0..16).collect();
    for (name, max_batch_size) in [("bare", 4), ("partial", 8)] {
        let config = s.get(&format!("/v2/models/{name}/config")).json();
        assert_eq!(config["platform"], "onnxruntime_onnx", "{name}");
        assert_eq!(config["max_batch_size"], max_batch_size, "{name}");
        let inputs: Vec<(String, String, Value)> = config["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| (i["name"].as_str().unwrap().into(), i["data_type"].as_str().unwrap().into(), i["dims"].clone()))
            .collect();
        assert_eq!(
            inputs,
            [("INPUT0".into(), "TYPE_INT32".into(), json!([16])), ("INPUT1".into(), "TYPE_INT32".into(), json!([16]))],
            "{name}"
        );
        assert!(config["dynamic_batching"].is_object(), "max_batch_size > 1 and no scheduler: dynamic batching on");
        let r = s.post_json(&format!("/v2/models/{name}/infer"), &pair("INT32", &a, &[1; 16]));
        assert_eq!(data(&r, "OUTPUT0"), a.iter().map(|x| x + 1).collect::<Vec<_>>(), "{name}");
    }
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
    let strict =
        Server::start(repo.path(), &["--onnxruntime-library", lib.to_str().unwrap(), "--strict-model-config=true"]);
    let index = strict.post_json("/v2/repository/index", &json!({})).json();
    // Without auto-complete a folder with no configuration is not a model (tritonserver's poll
    // failure): listed by name in the index, unknown to requests, not counted against readiness.
    let bare = index.as_array().unwrap().iter().find(|m| m["name"] == "bare").unwrap().clone();
    assert_eq!(bare.get("state").and_then(|s| s.as_str()).unwrap_or(""), "", "{bare}");
    let r = strict.get("/v2/models/bare");
    assert_eq!(r.error(), "Request for unknown model: 'bare' is not found");
    // ... and a configuration without inputs is checked as it is against the model, as
    // tritonserver's ONNX Runtime backend checks it.
    let (state, reason) = strict.model_state("partial");
    assert_eq!(state, "UNAVAILABLE");
    assert!(
        reason.contains("unable to load model 'partial', configuration expects 0 inputs, model provides 2"),
        "{reason}"
    );
    // Errors go to standard error, which the test reads on a thread of its own: waited for.
    strict.wait_until("the poll failure's log line", || strict.log().contains("failed to open text file for read"));
}

/// Auto-complete reads the model file of a version the policy loads: a folder with a newer
/// version left empty (or stale) that the policy does not load has no say (Triton's L0_lifecycle
/// `test_config_override`, where versions 1 and 3 are emptied and the policy selects 2).
#[test]
fn auto_complete_reads_a_version_the_policy_loads() {
    let Some(lib) = onnxruntime_library() else { return };
    let repo = Repo::new();
    let policies = [("only_two", "version_policy: { specific { versions: [2] }}\n"), ("latest", "")];
    for (name, policy) in policies {
        let dir = repo.path().join(name);
        for v in ["1", "2", "3"] {
            std::fs::create_dir_all(dir.join(v)).unwrap();
        }
        std::fs::copy(models().join("simple/1/model.onnx"), dir.join("2/model.onnx")).unwrap();
        let config = format!("platform: \"onnxruntime_onnx\"\nmax_batch_size: 8\n{policy}");
        std::fs::write(dir.join("config.pbtxt"), config).unwrap();
    }
    let s = Server::start(repo.path(), &["--onnxruntime-library", lib.to_str().unwrap()]);
    let (state, reason) = s.model_state("only_two");
    assert_eq!(state, "READY", "{reason}");
    let config = s.get("/v2/models/only_two/config").json();
    let inputs: Vec<&str> = config["input"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(inputs, ["INPUT0", "INPUT1"], "{config}");
    let a: Vec<i64> = (0..16).collect();
    let r = s.post_json("/v2/models/only_two/versions/2/infer", &pair("INT32", &a, &[1; 16]));
    assert_eq!(data(&r, "OUTPUT0"), a.iter().map(|x| x + 1).collect::<Vec<_>>());
    // The default policy loads version 3, which has no model file: nothing to complete from.
    let (state, reason) = s.model_state("latest");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("3/model.onnx"), "{reason}");
}

/// KIND_GPU instances, on a machine with an NVIDIA GPU and ONNX Runtime from the `onnxruntime-gpu`
/// package (NEREUS_ONNXRUNTIME_LIB pointing at it): each instance runs the CUDA execution provider
/// on its own stream, two instances execute at once, strings take ORT's host path, sequences feed
/// their control tensors, and KIND_AUTO picks the GPU. Elsewhere it says why and skips; with
/// NEREUS_REQUIRE_GPU set it fails instead.
#[test]
fn gpu_instances_run_the_cuda_provider_on_their_own_streams() {
    let Some(lib) = onnxruntime_library() else { return };
    let required = std::env::var_os("NEREUS_REQUIRE_GPU").is_some();
    if nereus::gpu::device_count() == 0 {
        assert!(!required, "NEREUS_REQUIRE_GPU is set but no CUDA device was found");
        eprintln!("skipping: no CUDA device");
        return;
    }
    let repo = Repo::new();
    example(&repo, "simple", "instance_group [ { kind: KIND_GPU count: 2 } ]");
    example(&repo, "simple_string", "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]");
    example(&repo, "simple_sequence", "instance_group [ { kind: KIND_GPU } ]");
    example(&repo, "simple_int8", "");
    let s = Server::start(repo.path(), &["--onnxruntime-library", lib.to_str().unwrap()]);
    let ready = s.get("/v2/models/simple/ready").status == 200;
    if !ready {
        let index = s.post_json("/v2/repository/index", &json!({})).json();
        let reason = index.as_array().unwrap().iter().find(|m| m["name"] == "simple").unwrap()["reason"].clone();
        assert!(!required, "NEREUS_REQUIRE_GPU is set but the GPU model did not load: {reason}");
        eprintln!("skipping: this ONNX Runtime cannot run on the GPU ({reason})");
        return;
    }
    let group = s.get("/v2/models/simple/config").json()["instance_group"].clone();
    assert_eq!(
        (&group[0]["kind"], &group[0]["gpus"], &group[0]["count"]),
        (&json!("KIND_GPU"), &json!([0]), &json!(2))
    );
    // KIND_AUTO on a GPU machine with a CUDA-capable ONNX Runtime: every GPU, as in Triton.
    let auto = s.get("/v2/models/simple_int8/config").json()["instance_group"].clone();
    assert_eq!(auto[0]["kind"], "KIND_GPU", "{auto}\n{}", s.log());

    // Two requests held at the gate: both instances are executing at once, each on its stream.
    s.gate("simple", false);
    let port = s.port;
    let send = move |k: i64| {
        std::thread::spawn(move || {
            let body = pair("INT32", &(0..16).map(|i| i * k).collect::<Vec<_>>(), &[k; 16]);
            http(port, "POST", "/v2/models/simple/infer", &[], body.to_string().as_bytes())
        })
    };
    let (a, b) = (send(2), send(3));
    s.wait_until("both instances executing", || s.executions("simple").0 == 2);
    s.gate("simple", true);
    for (k, h) in [(2, a), (3, b)] {
        let r = h.join().unwrap();
        assert_eq!(data(&r, "OUTPUT0"), (0..16).map(|i| i * k + k).collect::<Vec<_>>());
        assert_eq!(data(&r, "OUTPUT1"), (0..16).map(|i| i * k - k).collect::<Vec<_>>());
    }
    // A batch of several rows, and only one output asked for.
    let rows: Vec<i64> = (0..48).collect();
    let mut body = json!({"inputs": [
        {"name": "INPUT0", "shape": [3, 16], "datatype": "INT32", "data": rows},
        {"name": "INPUT1", "shape": [3, 16], "datatype": "INT32", "data": vec![5; 48]}
    ], "outputs": [{"name": "OUTPUT1"}]});
    let r = s.post_json("/v2/models/simple/infer", &body);
    assert_eq!(data(&r, "OUTPUT1"), (0..48).map(|i| i - 5).collect::<Vec<_>>());
    assert_eq!(r.json()["outputs"].as_array().unwrap().len(), 1);
    body["inputs"][0]["datatype"] = json!("INT8");
    assert_eq!(s.post_json("/v2/models/simple/infer", &body).status, 400);

    let text = |v: Vec<i64>| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let body = json!({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "BYTES", "data": text((0..16).collect())},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "BYTES", "data": text(vec![7; 16])}
    ]});
    let r = s.post_json("/v2/models/simple_string/infer", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let sums: Vec<String> =
        r.json()["outputs"][0]["data"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    assert_eq!(sums, text((7..23).collect()));

    let seq = |v: i64, start: bool, end: bool| {
        let body = json!({
            "parameters": {"sequence_id": 9, "sequence_start": start, "sequence_end": end},
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [v]}]
        });
        data(&s.post_json("/v2/models/simple_sequence/infer", &body), "OUTPUT")[0]
    };
    assert_eq!([seq(5, true, false), seq(5, false, false), seq(2, false, true)], [6, 5, 2]);
}

/// An output the client puts in system shared memory is written there by ONNX Runtime itself where
/// its shape follows from the model (host/src/backend/onnx/placed.rs); a model whose declared output
/// shape is wrong is answered rightly all the same, and a place too small is the client's error.
#[test]
fn outputs_in_shared_memory_are_right_whether_onnx_runtime_writes_them_or_not() {
    let Some(lib) = onnxruntime_library() else { return };
    let repo = Repo::new();
    let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/model_repository/identity_fp32_onnx");
    let config = std::fs::read_to_string(bench.join("config.pbtxt")).unwrap();
    let dir = repo.model("identity_fp32_onnx", &config, &["1"]);
    std::fs::copy(bench.join("1/model.onnx"), dir.join("1/model.onnx")).unwrap();
    example(&repo, "misdeclared", "");
    // The backend's debug lines say which outputs ONNX Runtime wrote in place (the harness's
    // NEREUS_LOG=info would hide them): right answers alone would not show placing stopped working.
    let s = Server::start_with_env(
        repo.path(),
        &["--onnxruntime-library", lib.to_str().unwrap(), "--allow-client-shm=true"],
        &[("NEREUS_LOG", "info,nereus::backend::onnx=debug")],
    );
    let placed = |output: &str| {
        let name = format!("output '{output}' (");
        s.log().lines().filter(|l| l.contains(&name) && l.contains("bytes) written in place in shared memory")).count()
    };

    // 256 KiB of values that differ along the tensor (above the size placed outputs start at).
    let n = 65_536usize;
    let values: Vec<f32> = (0..n).map(|i| (i % 1021) as f32 * 0.5 - 7.0).collect();
    let input: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let shm_in = ShmObject::new("onnx_in", &input, input.len());
    let shm_out = ShmObject::new("onnx_out", &[], 2 * input.len());
    for (name, shm, size) in [("in", &shm_in, input.len()), ("out", &shm_out, 2 * input.len())] {
        let r = s.post_json(
            &format!("/v2/systemsharedmemory/region/{name}/register"),
            &json!({"key": shm.key, "offset": 0, "byte_size": size}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let request = |input_name: &str, output_name: &str, out_size: usize| {
        json!({"inputs": [{"name": input_name, "shape": [1, n], "datatype": "FP32",
                "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": input.len()}}],
               "outputs": [{"name": output_name,
                "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": out_size}}]})
    };
    let shm_output = |r: &Resp| {
        assert_eq!(r.status, 200, "{}", r.text());
        let body = r.json();
        let out = &body["outputs"][0];
        assert!(out.get("data").is_none(), "the output is in shared memory, not in the answer: {out}");
        (out["shape"].clone(), out["parameters"]["shared_memory_byte_size"].clone())
    };

    // The identity: its output [batch, n] follows from the input's symbols.
    for round in 0..3 {
        shm_out.zero(2 * input.len());
        let r = s.post_json("/v2/models/identity_fp32_onnx/infer", &request("INPUT0", "OUTPUT0", 2 * input.len()));
        assert_eq!(shm_output(&r), (json!([1, n]), json!(input.len())), "round {round}");
        assert!(shm_out.read(input.len()) == input, "round {round}: the identity's output differs from its input");
    }
    s.wait_until("three outputs written in place", || placed("OUTPUT0") == 3);

    // The misdeclared model computes [batch, 2n] where it declares [batch, n]: the right bytes and
    // shape all the same, every time.
    let twice: Vec<u8> = [input.clone(), input.clone()].concat();
    for round in 0..3 {
        shm_out.zero(2 * input.len());
        let r = s.post_json("/v2/models/misdeclared/infer", &request("INPUT", "OUTPUT", 2 * input.len()));
        assert_eq!(shm_output(&r), (json!([1, 2 * n]), json!(twice.len())), "round {round}");
        assert!(shm_out.read(twice.len()) == twice, "round {round}: the output is not the input twice");
    }
    s.wait_until("the misdeclared model's instance to stop placing outputs", || {
        s.log().contains("ONNX Runtime refused outputs of the shapes the model declares")
    });
    let log = s.log();
    let refused = |model: &str| log.lines().any(|l| l.contains(model) && l.contains("refused outputs of the shapes"));
    assert!(refused("'misdeclared'") && !refused("'identity_fp32_onnx'"), "{log}");
    assert_eq!(placed("OUTPUT"), 0, "the misdeclared model's outputs were never ORT's to place: {log}");

    // A place smaller than the output: the client's error, as with any backend, and nothing
    // written past the place.
    shm_out.zero(2 * input.len());
    let small = input.len() - 4;
    let r = s.post_json("/v2/models/identity_fp32_onnx/infer", &request("INPUT0", "OUTPUT0", small));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.error().contains(&format!("does not fit the {small} bytes given in shared memory region 'out'")),
        "{}",
        r.error()
    );
    assert!(shm_out.read(2 * input.len())[small..].iter().all(|b| *b == 0), "written past the place");

    // The server serves on, the plain way too.
    let r = s.post_json(
        "/v2/models/misdeclared/infer",
        &json!({"inputs": [{"name": "INPUT", "shape": [1, 2], "datatype": "FP32", "data": [1.5, -2.0]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["data"], json!([1.5, -2.0, 1.5, -2.0]));
}
