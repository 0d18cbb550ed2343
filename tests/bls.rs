//! Business logic scripting through the public surface: plugins calling other models
//! (`nereus:backend/models`). The examples against what they stand for (`bls_add_sub` against the
//! two-step ensemble, over HTTP and gRPC; the fan-out against `simple`; the cascade's two paths),
//! and the `bls_probe` test plugin, driven by request parameters, for the policy (allowed and
//! denied calls), cycles and the depth limit, a failing or trapping callee, deadlines, a decoupled
//! and a stateful callee, fan-out with a failing part, and the cancellation of calls when the
//! caller's client goes away, when its execute returns without waiting, or when it traps.
use crate::common;

use common::*;
use serde_json::{Value, json};

/// A `bls_probe` model (INPUT0 → OUTPUT0, INT32 [-1]) with `extra` configuration.
fn probe(repo: &Repo, name: &str, extra: &str) {
    let config = format!(
        r#"name: "{name}"
backend: "bls_probe"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}"#
    );
    let dir = repo.model(name, &config, &["1"]);
    std::fs::copy(nereus_plugins::BLS_PROBE, dir.join("bls_probe.wasm")).unwrap();
}

const CALLS_ANY: &str = r#"parameters { key: "sandbox.callable_models" value: { string_value: "*" } }"#;

/// A `test_faults` model that waits for its requests' cancellation (ten-minute deadline).
fn waiter(repo: &Repo, name: &str) {
    waiting_faults_model(repo, name);
}

fn request(values: &[i32], parameters: Value) -> Value {
    json!({
        "parameters": parameters,
        "inputs": [{"name": "INPUT0", "shape": [values.len()], "datatype": "INT32", "data": values}]
    })
}

fn infer(s: &Server, model: &str, body: &Value) -> Resp {
    s.post_json(&format!("/v2/models/{model}/infer"), body)
}

fn ints(r: &Resp, name: &str) -> Vec<i64> {
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    let o = body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == name).unwrap_or_else(|| panic!("{name}"));
    o["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
}

fn stats(s: &Server, model: &str) -> Value {
    s.get(&format!("/v2/models/{model}/stats")).json()["model_stats"][0]["inference_stats"].clone()
}

fn count(s: &Server, model: &str, what: &str) -> u64 {
    stats(s, model)[what]["count"].as_u64().unwrap_or(0)
}

fn ab(a: &[i32], b: &[i32]) -> Value {
    json!({"inputs": [
        {"name": "A", "shape": [1, 16], "datatype": "INT32", "data": a},
        {"name": "B", "shape": [1, 16], "datatype": "INT32", "data": b}
    ]})
}

#[test]
fn the_examples_compute_what_they_stand_for() {
    let repo = Repo::new();
    for example in ["simple", "bls_add_sub", "fanout_simple"] {
        repo.example(example);
    }
    repo.model("add_sub_twice", ADD_SUB_TWICE, &["1"]);
    for name in ["cheap", "expensive"] {
        repo.model(
            name,
            &format!(
                r#"name: "{name}" backend: "identity" max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]"#
            ),
            &["1"],
        );
    }
    repo.model(
        "cascade",
        r#"name: "cascade" backend: "bls_cascade" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "PATH" data_type: TYPE_STRING dims: [ 1 ] } ]
parameters [
  { key: "sandbox.callable_models" value: { string_value: "cheap,expensive" } },
  { key: "cascade.cheap_model" value: { string_value: "cheap" } },
  { key: "cascade.expensive_model" value: { string_value: "expensive" } },
  { key: "cascade.score_output" value: { string_value: "OUTPUT0" } },
  { key: "cascade.threshold" value: { string_value: "0.9" } }
]"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);

    // bls_add_sub answers what the ensemble answers, over HTTP …
    let (a, b): (Vec<i32>, Vec<i32>) = ((0..16).collect(), (0..16).map(|i| 7 - 3 * i).collect());
    let by_ensemble = infer(&s, "add_sub_twice", &ab(&a, &b));
    let by_bls = infer(&s, "bls_add_sub", &ab(&a, &b));
    for output in ["SUM2", "DIFF2"] {
        assert_eq!(ints(&by_bls, output), ints(&by_ensemble, output), "{output}");
    }
    assert_eq!(ints(&by_bls, "SUM2"), a.iter().map(|v| 2 * *v as i64).collect::<Vec<_>>());
    // … each call a request of `simple`'s own: two per ensemble request, two per bls_add_sub one.
    assert_eq!(count(&s, "simple", "success"), 4);
    assert_eq!(count(&s, "bls_add_sub", "success"), 1);
    // … and over gRPC.
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(async {
        use nereus::proto::inference::ModelInferRequest;
        use nereus::proto::inference::model_infer_request::InferInputTensor;
        let mut client = grpc_client(&s).await;
        let tensor = |name: &str| InferInputTensor {
            name: name.into(),
            datatype: "INT32".into(),
            shape: vec![1, 16],
            parameters: Default::default(),
            contents: None,
        };
        let call = |model: &str| ModelInferRequest {
            model_name: model.into(),
            inputs: vec![tensor("A"), tensor("B")],
            raw_input_contents: vec![bytes::Bytes::from(le_i32(&a)), bytes::Bytes::from(le_i32(&b))],
            ..Default::default()
        };
        let bls = client.model_infer(call("bls_add_sub")).await.unwrap().into_inner();
        let ensemble = client.model_infer(call("add_sub_twice")).await.unwrap().into_inner();
        assert_eq!(bls.raw_output_contents.len(), 2);
        for (name, data) in bls.outputs.iter().zip(&bls.raw_output_contents) {
            let k = ensemble.outputs.iter().position(|o| o.name == name.name).unwrap();
            assert_eq!(data, &ensemble.raw_output_contents[k], "{}", name.name);
        }
    });

    // The fan-out splits a batch of three rows into three calls and merges them in order.
    let rows: Vec<i32> = (0..48).collect();
    let body = json!({"inputs": [
        {"name": "INPUT0", "shape": [3, 16], "datatype": "INT32", "data": rows},
        {"name": "INPUT1", "shape": [3, 16], "datatype": "INT32", "data": vec![1; 48]}
    ]});
    let before = count(&s, "simple", "success");
    let fanned = infer(&s, "fanout_simple", &body);
    let direct = infer(&s, "simple", &body);
    for output in ["OUTPUT0", "OUTPUT1"] {
        assert_eq!(ints(&fanned, output), ints(&direct, output), "{output}");
    }
    assert_eq!(count(&s, "simple", "success"), before + 3 + 1, "three parts, then the direct request");

    // The cascade: a confident cheap model decides alone; an unsure one defers to the expensive.
    let path = |r: &Resp| {
        assert_eq!(r.status, 200, "{}", r.text());
        let body = r.json();
        body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == "PATH").unwrap()["data"][0].clone()
    };
    let fp32 = |values: &[f32]| json!({"inputs": [{"name": "INPUT0", "shape": [values.len()], "datatype": "FP32", "data": values}]});
    assert_eq!(path(&infer(&s, "cascade", &fp32(&[0.95, 0.05]))), "cheap");
    assert_eq!(count(&s, "expensive", "success"), 0);
    assert_eq!(path(&infer(&s, "cascade", &fp32(&[0.5, 0.5]))), "expensive");
    assert_eq!(count(&s, "expensive", "success"), 1);
    assert_eq!(count(&s, "cheap", "success"), 2);
    // The threshold is the request's to lower.
    let mut lowered = fp32(&[0.5, 0.5]);
    lowered["parameters"] = json!({"threshold": 0.4});
    assert_eq!(path(&infer(&s, "cascade", &lowered)), "cheap");
}

/// A call to a model that has shown its executions are short runs on the calling plugin's thread,
/// which waits for it anyway (as an ensemble's steps run on the I/O thread): no handoff to the
/// callee's worker and back. Not with inline execution off (`--inline-execution-us 0`).
#[test]
fn calls_to_a_fast_model_run_on_the_callers_thread() {
    let repo = Repo::new();
    for example in ["simple", "bls_add_sub"] {
        repo.example(example);
    }
    let (a, b): (Vec<i32>, Vec<i32>) = ((0..16).collect(), (0..16).map(|i| 5 * i - 40).collect());
    let doubled = |v: &[i32]| v.iter().map(|x| 2 * *x as i64).collect::<Vec<_>>();
    let run = |s: &Server, requests: usize| {
        for _ in 0..requests {
            let r = infer(s, "bls_add_sub", &ab(&a, &b));
            assert_eq!((ints(&r, "SUM2"), ints(&r, "DIFF2")), (doubled(&a), doubled(&b)));
        }
    };
    let on_caller = |s: &Server| s.get("/nereus/test/models/simple/executions").json()["on_caller"].as_u64().unwrap();

    // Two calls a request: after the gate's warm-up (64 fast executions) they run on the caller.
    let s = Server::start(repo.path(), &[]);
    run(&s, 100);
    let ran_there = on_caller(&s);
    assert!(ran_there > 0, "no call ran on the caller's thread");
    assert!(ran_there <= 200 - 64, "{ran_there} ran on the caller's thread before the warm-up ended");
    assert_eq!(count(&s, "simple", "success"), 200, "each call is a request of simple's own");
    drop(s);

    let s = Server::start(repo.path(), &["--inline-execution-us", "0"]);
    run(&s, 100);
    assert_eq!(on_caller(&s), 0);
    assert_eq!(count(&s, "simple", "success"), 200);
}

#[test]
fn policy_cycles_depth_and_failing_callees() {
    let repo = Repo::new();
    for i in 0..10 {
        probe(&repo, &format!("p{i}"), CALLS_ANY);
    }
    probe(&repo, "narrow", r#"parameters { key: "sandbox.callable_models" value: { string_value: "p1" } }"#);
    probe(&repo, "closed", "");
    let echo = repo.model("echo", &faults_config("echo", "instance_group [ { count: 2 kind: KIND_CPU } ]"), &["1"]);
    install_faults_component(&echo);
    let s = Server::start(repo.path(), &[]);
    let error = |r: &Resp, status: u16| {
        assert_eq!(r.status, status, "{}", r.text());
        r.error()
    };

    // The policy in force is in the configuration.
    let shown = |model: &str| {
        s.get(&format!("/v2/models/{model}/config")).json()["parameters"]["sandbox.callable_models"]["string_value"]
            .clone()
    };
    assert_eq!(shown("narrow"), "p1");
    assert_eq!(shown("p0"), "*");
    assert_eq!(shown("closed"), "");

    // Allowed: each hop adds one; a chain of three models.
    assert_eq!(ints(&infer(&s, "narrow", &request(&[1, 2], json!({"route": "p1"}))), "OUTPUT0"), vec![3, 4]);
    assert_eq!(ints(&infer(&s, "p0", &request(&[10], json!({"route": "p1,p2"}))), "OUTPUT0"), vec![13]);
    assert_eq!(count(&s, "p2", "success"), 1, "a callee counts its requests");

    // Denied, deny by default.
    let e = error(&infer(&s, "narrow", &request(&[1], json!({"route": "p2"}))), 500);
    assert!(e.starts_with("not-allowed: model 'narrow' may not call model 'p2'"), "{e}");
    let e = error(&infer(&s, "closed", &request(&[1], json!({"route": "p1"}))), 500);
    assert!(e.starts_with("not-allowed: ") && e.contains("lists none in sandbox.callable_models"), "{e}");
    assert_eq!(count(&s, "p2", "success"), 1, "a denied call never reaches the callee");

    // A model calling itself through its one instance fails at once instead of waiting for itself;
    // so does a longer cycle, naming the chain.
    let e = error(&infer(&s, "p0", &request(&[1], json!({"route": "p0"}))), 500);
    assert!(e.starts_with("cycle: ") && e.contains("p0 → p0"), "{e}");
    let e = error(&infer(&s, "p0", &request(&[1], json!({"route": "p1,p2,p0"}))), 500);
    assert!(e.contains("cycle: ") && e.contains("p0 → p1 → p2 → p0"), "{e}");

    // Depth: eight calls deep is allowed, nine is not.
    let deepest = (1..9).map(|i| format!("p{i}")).collect::<Vec<_>>().join(",");
    assert_eq!(ints(&infer(&s, "p0", &request(&[0], json!({"route": deepest}))), "OUTPUT0"), vec![9]);
    let too_deep = (1..10).map(|i| format!("p{i}")).collect::<Vec<_>>().join(",");
    let e = error(&infer(&s, "p0", &request(&[0], json!({"route": too_deep}))), 500);
    assert!(e.contains("too-deep: ") && e.contains("deeper than 8: p0 → p1"), "{e}");

    // A callee that fails, or traps, fails the call with its error; the callee serves on.
    let e = error(&infer(&s, "p0", &request(&[1], json!({"route": "echo", "fault": "error"}))), 500);
    assert!(e.starts_with("internal: model 'echo': ") && e.contains("execution error requested"), "{e}");
    let e = error(&infer(&s, "p0", &request(&[1], json!({"route": "echo", "fault": "trap"}))), 500);
    assert!(e.starts_with("internal: model 'echo': ") && e.contains("trapped"), "{e}");
    let e = error(&infer(&s, "p0", &request(&[1], json!({"route": "nowhere"}))), 503);
    assert!(e.starts_with("not-found: model 'nowhere'"), "{e}");
    assert_eq!(ints(&infer(&s, "p0", &request(&[5], json!({"route": "echo"}))), "OUTPUT0"), vec![6]);

    // Fan-out: four parts at once, part 2 fails; the others answer.
    let before = (count(&s, "echo", "success"), count(&s, "echo", "fail"));
    let r = infer(
        &s,
        "p0",
        &request(&[0, 1, 2, 3, 4, 5, 6, 7], json!({"route": "echo", "mode": "fanout", "parts": 4, "fail_part": 2})),
    );
    assert_eq!(ints(&r, "OUTPUT0"), vec![1, 2, 3, 4, -1, -1, 7, 8]);
    let failed = r.json()["parameters"]["failed"].as_str().unwrap_or_default().to_string();
    assert!(failed.starts_with("2: internal: model 'echo'"), "{failed}");
    assert_eq!((count(&s, "echo", "success"), count(&s, "echo", "fail")), (before.0 + 3, before.1 + 1));
}

#[test]
fn decoupled_and_stateful_callees() {
    let repo = Repo::new();
    probe(&repo, "p0", CALLS_ANY);
    repo.example("repeat_int32");
    repo.example("accumulate_state");
    let s = Server::start(repo.path(), &[]);

    // Every response of a decoupled callee, in order.
    let r = infer(&s, "p0", &request(&[4, 5, 6], json!({"route": "repeat_int32", "mode": "stream"})));
    assert_eq!(ints(&r, "OUTPUT0"), vec![4, 5, 6]);
    assert_eq!(r.json()["parameters"]["responses"], 3);
    // `wait` (or `infer`) on a decoupled callee is refused with a pointer to `next`.
    let e = infer(&s, "p0", &request(&[4], json!({"route": "repeat_int32"})));
    assert_ne!(e.status, 200, "{}", e.text());

    // A stateful callee, driven with the sequence's flags: a running sum per sequence.
    let r =
        infer(&s, "p0", &request(&[1, 2, 3], json!({"route": "accumulate_state", "mode": "sequence", "corrid": 42})));
    assert_eq!(ints(&r, "OUTPUT0"), vec![1, 3, 6]);
    let r = infer(&s, "p0", &request(&[5, 5], json!({"route": "accumulate_state", "mode": "sequence", "corrid": 43})));
    assert_eq!(ints(&r, "OUTPUT0"), vec![5, 10], "a new sequence starts from zero");
}

#[test]
fn deadlines_and_cancellation_reach_the_callees() {
    let repo = Repo::new();
    probe(&repo, "p0", CALLS_ANY);
    probe(&repo, "p1", CALLS_ANY);
    probe(
        &repo,
        "short",
        r#"parameters [
  { key: "sandbox.callable_models" value: { string_value: "*" } },
  { key: "sandbox.execution_timeout_ms" value: { string_value: "700" } }
]"#,
    );
    for w in ["w_timeout", "w_deadline", "w_hangup", "w_leave", "w_trap"] {
        waiter(&repo, w);
    }
    let s = Server::start(repo.path(), &[]);
    let until_cancelled = |route: &str, extra: Value| {
        let mut parameters = json!({"route": route, "fault": "until_cancelled"});
        parameters.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        request(&[1, 2, 3], parameters)
    };
    // The waiter fails its request once it sees the cancellation: that is how each case shows it.
    let cancelled =
        |model: &str| s.wait_until(&format!("{model} to see its request cancelled"), || count(&s, model, "fail") == 1);

    // The call's own timeout: the call ends with `timeout`, and the callee is cancelled.
    let r = infer(&s, "p0", &until_cancelled("w_timeout", json!({"timeout_ms": 300})));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        r.error().starts_with("timeout: model 'w_timeout' did not answer before the caller's deadline"),
        "{}",
        r.error()
    );
    cancelled("w_timeout");

    // The caller's own execution deadline bounds the call, through a model in between.
    let r = infer(&s, "short", &until_cancelled("p1,w_deadline", json!({})));
    assert_ne!(r.status, 200, "{}", r.text());
    let e = r.error();
    assert!(e.contains("deadline"), "{e}");
    cancelled("w_deadline");

    // The caller's client goes away: its call is cancelled.
    s.post_then_hang_up("/v2/models/p0/infer", &until_cancelled("w_hangup", json!({})), || {
        s.executions("w_hangup").0 == 1
    });
    cancelled("w_hangup");

    // A caller that returns without waiting, or traps, has its calls cancelled.
    let r = infer(&s, "p0", &until_cancelled("w_leave", json!({"mode": "leave"})));
    assert_eq!(ints(&r, "OUTPUT0"), vec![1, 2, 3]);
    cancelled("w_leave");
    let r = infer(&s, "p0", &until_cancelled("w_trap", json!({"mode": "trap_after_start"})));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.error().contains("trapped"), "{}", r.error());
    cancelled("w_trap");
    // The probe was rebuilt after its trap and calls on.
    assert_eq!(ints(&infer(&s, "p0", &request(&[1], json!({"route": "p1"}))), "OUTPUT0"), vec![3]);
}

/// The repository's cascade on real models: `digit_classifier` (ONNX Runtime) first, and the
/// five-times-dearer `digit_classifier_tta` only below the threshold. Each path answers exactly
/// what its model answers when asked directly. Skipped without ONNX Runtime's library, as
/// `tests/onnx.rs` is.
#[test]
fn the_digit_cascade_defers_to_the_expensive_model_only_when_unsure() {
    let lib = std::env::var_os("NEREUS_ONNXRUNTIME_LIB")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/nereus/onnxruntime/libonnxruntime.so"))
        })
        .filter(|p| p.exists());
    let Some(lib) = lib else {
        assert!(std::env::var_os("NEREUS_REQUIRE_ONNXRUNTIME").is_none(), "no ONNX Runtime library");
        eprintln!("skipping: no ONNX Runtime library (scripts/setup-onnxruntime.sh installs one)");
        return;
    };
    let repo = Repo::new();
    for name in ["digit_classifier", "digit_classifier_tta", "digit_cascade"] {
        repo.example(name);
        let onnx =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../model_repository/{name}/1/model.onnx"));
        if onnx.exists() {
            std::fs::copy(onnx, repo.path().join(format!("{name}/1/model.onnx"))).unwrap();
        }
    }
    let s = Server::start(repo.path(), &["--onnxruntime-library", lib.to_str().unwrap()]);
    // A faint, off-centre stroke: no model is sure of it.
    let mut pixels = vec![0.0f32; 64];
    for (i, p) in pixels.iter_mut().enumerate() {
        if i % 8 == 6 {
            *p = 0.3;
        }
    }
    let body = |threshold: Option<f64>| {
        let mut b = json!({"inputs": [{"name": "PIXELS", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": pixels}]});
        if let Some(t) = threshold {
            b["parameters"] = json!({"threshold": t});
        }
        b
    };
    let probabilities = |r: &Resp| -> Vec<f64> {
        assert_eq!(r.status, 200, "{}", r.text());
        let body = r.json();
        let o = body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == "PROBABILITIES").unwrap().clone();
        o["data"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
    };
    let path = |r: &Resp| {
        r.json()["outputs"].as_array().unwrap().iter().find(|o| o["name"] == "PATH").unwrap()["data"][0].clone()
    };
    let cheap = infer(&s, "digit_classifier", &body(None));
    let expensive = infer(&s, "digit_classifier_tta", &body(None));
    assert_ne!(probabilities(&cheap), probabilities(&expensive), "the two models differ");

    let sure = infer(&s, "digit_cascade", &body(Some(0.0)));
    assert_eq!(path(&sure), "cheap");
    assert_eq!(probabilities(&sure), probabilities(&cheap));
    let unsure = infer(&s, "digit_cascade", &body(Some(1.01)));
    assert_eq!(path(&unsure), "expensive");
    assert_eq!(probabilities(&unsure), probabilities(&expensive));
    assert_eq!(count(&s, "digit_classifier_tta", "success"), 2, "once directly, once for the unsure request");
    assert_eq!(count(&s, "digit_classifier", "success"), 3, "once directly, once per cascade request");
}

/// A call is counted before its request is copied out of the caller's memory: 100,000 inputs that
/// all name the same 1 MiB (100 GB, had the host copied each first) fail the call with
/// `invalid-argument`, not the server; within the sandbox's memory limit the same call is served,
/// and a caller without permission to call is told so only once its request is counted.
#[test]
fn an_aliased_call_is_refused_before_it_is_copied() {
    let repo = Repo::new();
    probe(
        &repo,
        "caller",
        &format!("{CALLS_ANY}\nparameters {{ key: \"sandbox.memory_limit_mb\" value: {{ string_value: \"64\" }} }}"),
    );
    probe(&repo, "denied", "");
    install_faults_component(&repo.model("echo", &faults_config("echo", ""), &["1"]));
    let s = Server::start(repo.path(), &[]);
    let aliased = |model: &str, count: i64, copies: i64| {
        infer(&s, model, &request(&[1], json!({"route": "echo", "mode": "aliased", "count": count, "copies": copies})))
    };
    let r = aliased("caller", 1 << 20, 100_000);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.error().contains(&format!(
            "0: the request to model 'echo' comes to {} bytes or more, past the calling sandbox's memory limit of {} \
             bytes",
            4 + 64 * ((1 << 20) + 32 + 6 + 8),
            64u64 << 20
        )),
        "{}",
        r.error()
    );
    let r = aliased("caller", 12, 1);
    assert_eq!(ints(&r, "OUTPUT0"), vec![0x6161_6161; 3]);
    let r = aliased("denied", 12, 1);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("may not call other models"), "{}", r.error());
    let r = aliased("denied", 1 << 20, 100_000);
    assert!(r.error().contains("past the calling sandbox's memory limit"), "{}", r.error());
    assert_eq!(ints(&infer(&s, "caller", &request(&[1, 2], json!({"route": "echo"}))), "OUTPUT0"), vec![2, 3]);
}

/// The calls a plugin keeps in flight hold host memory its own limit does not see (their requests'
/// copies, queued on the callee, or their answers), so together they may count no more than the
/// calling sandbox's memory limit: a plugin that starts 1 MiB calls without waiting gets 15 in
/// 16 MiB, the 16th refused as `unavailable`. What a call counted is given back when the guest
/// drops it or takes its answer (the same loop doing either starts all of them) and when `execute`
/// ends (the next request gets 15 again), and a plugin within its limit calls as before.
#[test]
fn calls_in_flight_are_bounded_by_the_callers_memory_limit() {
    let repo = Repo::new();
    probe(
        &repo,
        "caller",
        &format!("{CALLS_ANY}\nparameters {{ key: \"sandbox.memory_limit_mb\" value: {{ string_value: \"16\" }} }}"),
    );
    install_faults_component(&repo.model("echo", &faults_config("echo", ""), &["1"]));
    let s = Server::start(repo.path(), &[]);
    let hoard = |drop: bool, take: bool| {
        let parameters =
            json!({"route": "echo", "mode": "hoard", "count": 1 << 20, "copies": 40, "drop": drop, "take": take});
        let r = infer(&s, "caller", &request(&[1], parameters));
        assert_eq!(ints(&r, "OUTPUT0"), vec![2], "{}", r.text());
        let p = &r.json()["parameters"];
        (p["started"].as_i64().unwrap_or(-1), p["refused"].as_str().unwrap_or_default().to_string())
    };
    let (started, refused) = hoard(false, false);
    assert_eq!(started, 15, "{refused}");
    assert!(refused.starts_with("unavailable: a call to model 'echo' counting "), "{refused}");
    assert!(
        refused.contains(&format!(
            "does not fit beside the 15 calls in flight, which count {} bytes of the calling sandbox's memory limit \
             of {} bytes",
            refused_count(&refused),
            16u64 << 20
        )),
        "{refused}"
    );
    assert!(refused_count(&refused) > 15 << 20, "{refused}");
    assert_eq!(hoard(true, false), (40, String::new()));
    assert_eq!(hoard(false, true), (40, String::new()), "a call whose answer was taken holds nothing");
    assert_eq!(hoard(false, false).0, 15);
    let r = infer(&s, "caller", &request(&[1, 2, 3, 4], json!({"route": "echo", "mode": "fanout"})));
    assert_eq!(ints(&r, "OUTPUT0"), vec![2, 3, 4, 5], "{}", r.text());
}

/// The bytes the calls in flight counted, as a refusal of `calls_in_flight_are_bounded_…` says.
fn refused_count(refused: &str) -> u64 {
    refused
        .split("which count ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A callee that faults while running on its caller's thread charges the caller nothing: its
/// rebuild (the plugin's initialisation, which the caller's deadline does not bound) waits for the
/// callee's own worker, at its next request, and the caller keeps serving.
#[test]
fn a_callee_faulting_on_the_callers_thread_is_rebuilt_on_its_own_worker() {
    let repo = Repo::new();
    probe(&repo, "caller", CALLS_ANY);
    let one = "instance_group [ { count: 1 kind: KIND_CPU } ]";
    install_faults_component(&repo.model("echo", &faults_config("echo", one), &["1"]));
    let s = Server::start(repo.path(), &[]);
    let on_caller = || s.get("/nereus/test/models/echo/executions").json()["on_caller"].as_u64().unwrap_or(0);
    let rebuilds = || {
        s.metrics()
            .lines()
            .find(|l| l.starts_with("nereus_instance_rebuilds{") && l.contains("model=\"echo\""))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    // Until a call runs on the caller's thread (the callee's inline gate open).
    let ran_there = (0..1000).any(|_| {
        let before = on_caller();
        assert_eq!(ints(&infer(&s, "caller", &request(&[1], json!({"route": "echo"}))), "OUTPUT0"), vec![2]);
        on_caller() > before
    });
    assert!(ran_there, "no call ran on the caller's thread");
    let before = on_caller();
    let r = infer(&s, "caller", &request(&[1], json!({"route": "echo", "fault": "trap"})));
    assert_eq!(r.status, 500, "{}", r.text());
    let e = r.error();
    assert!(e.starts_with("internal: model 'echo': ") && e.contains("trapped"), "{e}");
    assert_eq!(on_caller(), before + 1, "the faulting call ran on the caller's thread");
    assert_eq!(rebuilds(), Some(0.0), "not rebuilt on the caller's thread");
    let r = s.post_json("/v2/models/echo/infer", &faults_request(""));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(rebuilds(), Some(1.0), "rebuilt on its own worker, for its next request");
    assert_eq!(ints(&infer(&s, "caller", &request(&[1], json!({}))), "OUTPUT0"), vec![2]);
}
