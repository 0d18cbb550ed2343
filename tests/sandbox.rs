//! Misbehaving plugins are contained: the affected request fails with a clear error naming the
//! model, the instance is rebuilt, and the next request succeeds.
use crate::common;

use common::*;
use serde_json::json;

fn faulty_server() -> (Repo, Server) {
    let repo = Repo::new();
    let limits = r#"parameters [
  { key: "sandbox.execution_timeout_ms" value: { string_value: "1000" } },
  { key: "sandbox.memory_limit_mb" value: { string_value: "48" } },
  { key: "sandbox.max_output_bytes" value: { string_value: "1048576" } }
]"#;
    let dir = repo.model("faulty", &faults_config("faulty", limits), &["1"]);
    install_faults_component(&dir);
    repo.example("simple");
    let server = Server::start(repo.path(), &[]);
    (repo, server)
}

fn healthy(s: &Server) {
    let r = s.post_json("/v2/models/faulty/infer", &faults_request(""));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["data"], json!([1, 2, 3]));
    let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn every_fault_fails_only_its_request() {
    let (_repo, s) = faulty_server();
    healthy(&s);
    for (fault, needle) in [
        ("trap", "trapped"),
        ("loop", "exceeded its execution deadline of 1000 ms"),
        ("oom", "exceeded its memory limit of 48 MiB"),
        ("oom_error", "exceeded its memory limit of 48 MiB"),
        ("no_response", "returned no response"),
        ("bad_output", "sent an invalid response: output 'OUTPUT0' has datatype FP64"),
        ("error", "failed to execute: test_faults: execution error requested"),
        ("recursion", "trapped: wasm trap: call stack exhausted"),
        ("huge_output", "sent an invalid response: response exceeds the model's output limit of 1048576 bytes"),
        ("unknown_output", "sent an invalid response: unknown output 'NOPE'"),
        ("wrong_byte_count", "output byte size mismatch for output 'OUTPUT0'. Expected 12, got 8"),
        ("wrong_shape", "output 'OUTPUT0' has shape [1,3], which does not match the declared dims [-1]"),
        ("missing_output", "sent an invalid response: the response lacks the requested output 'OUTPUT0'"),
    ] {
        let mut request = faults_request(fault);
        if fault == "huge_output" {
            // Just past the 1 MiB limit: the refusal, not the work of a larger output, is tested.
            request["parameters"]["count"] = json!(300_000);
        }
        let r = s.post_json("/v2/models/faulty/infer", &request);
        assert_eq!(r.status, 500, "{fault}: {}", r.text());
        let e = r.error();
        assert!(e.contains("faulty"), "{fault}: error should name the model: {e}");
        assert!(e.contains(needle), "{fault}: expected '{needle}' in '{e}'");
        healthy(&s);
    }
    // the model stayed ready throughout, and statistics saw 13 failures among 27 requests
    assert_eq!(s.get("/v2/models/faulty/ready").status, 200);
    let stats = s.get("/v2/models/faulty/stats").json();
    let inf = &stats["model_stats"][0]["inference_stats"];
    assert_eq!((inf["success"]["count"].as_u64(), inf["fail"]["count"].as_u64()), (Some(14), Some(13)), "{inf}");
}

#[test]
fn a_fault_does_not_disturb_requests_queued_behind_it() {
    let (_repo, s) = faulty_server();
    s.gate("faulty", false);
    let port = s.port;
    let send = |fault: &'static str| {
        std::thread::spawn(move || {
            http(port, "POST", "/v2/models/faulty/infer", &[], faults_request(fault).to_string().as_bytes())
        })
    };
    let trap = send("trap");
    s.wait_until("the trap request executing", || s.executions("faulty").0 == 1);
    let after: Vec<_> = (0..3).map(|_| send("")).collect();
    s.gate("faulty", true);
    assert_eq!(trap.join().unwrap().status, 500);
    for t in after {
        let r = t.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

#[test]
fn a_failed_rebuild_makes_the_model_unavailable_with_the_reason() {
    let (_repo, s) = faulty_server();
    let r = s.post_json("/nereus/test/models/faulty/refuse_rebuilds", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = s.post_json("/v2/models/faulty/infer", &faults_request("trap"));
    assert_eq!(r.status, 500, "{}", r.text());
    // the trapped instance could not be rebuilt: the model is UNAVAILABLE, with the reason
    let r = s.post_json("/v2/models/faulty/infer", &faults_request(""));
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(s.get("/v2/models/faulty/ready").status, 400);
    let index = s.post_json("/v2/repository/index", &json!({})).json();
    let entry = index.as_array().unwrap().iter().find(|m| m["name"] == "faulty").unwrap().clone();
    assert_eq!(entry["state"], "UNAVAILABLE");
    let reason = entry["reason"].as_str().unwrap();
    assert!(
        reason.contains("could not be rebuilt after a fault") && reason.contains("refused by a test hook"),
        "{reason}"
    );
    // everything else keeps serving
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
}

/// A rebuild refused by the server's Wasm memory budget, which other sandboxes hold and may give
/// back, is not for good: the model stays READY, and its instance builds again on its next request
/// (here the budget is held by a test hook for the rebuild's duration only, as other models could).
#[test]
fn a_rebuild_refused_for_memory_others_hold_is_tried_again_on_the_next_request() {
    let repo = Repo::new();
    let one = "instance_group [ { count: 1 kind: KIND_CPU } ]";
    install_faults_component(&repo.model("lone", &faults_config("lone", one), &["1"]));
    let s = Server::start(repo.path(), &[]);
    let r = s.post_json("/nereus/test/models/lone/hold_budget_at_rebuilds", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    let on_demand = || {
        s.metrics()
            .lines()
            .find(|l| l.starts_with("nereus_instance_sandbox_builds_on_demand{") && l.contains("model=\"lone\""))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    assert_eq!(on_demand(), Some(0.0));
    let r = s.post_json("/v2/models/lone/infer", &faults_request("trap"));
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(s.get("/v2/models/lone/ready").status, 200, "a refusal for memory held elsewhere is not for good");
    assert_eq!(s.model_state("lone").0, "READY");
    let r = s.post_json("/v2/models/lone/infer", &faults_request(""));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(on_demand(), Some(1.0), "the one instance was built again for the request");
}

/// A request asking the `test_faults` plugin to reach outside its sandbox.
fn reach(fault: &str, key: &str, value: &str) -> serde_json::Value {
    json!({
        "parameters": {"fault": fault, key: value},
        "inputs": [{"name": "INPUT0", "shape": [3], "datatype": "INT32", "data": [1, 2, 3]}]
    })
}

/// The policy in force is part of the model's configuration (defaults included); nothing outside
/// the sandbox is reachable — files, the environment, the network — except, when the policy grants
/// it, the model's own version folder, read-only, at `/model`. Each refusal fails only its request.
#[test]
fn the_sandbox_policy_is_visible_and_grants_only_the_model_folder_read_only() {
    let repo = Repo::new();
    let granted = repo.model(
        "granted",
        &faults_config("granted", r#"parameters { key: "sandbox.model_dir" value: { string_value: "read_only" } }"#),
        &["1"],
    );
    install_faults_component(&granted);
    std::fs::write(granted.join("1/vocab.txt"), "hello sandbox").unwrap();
    let closed = repo.model("closed", &faults_config("closed", ""), &["1"]);
    install_faults_component(&closed);
    std::fs::write(closed.join("1/vocab.txt"), "never read").unwrap();
    let crowded = repo.model(
        "crowded",
        &faults_config(
            "crowded",
            r#"instance_group [ { count: 3 } ] parameters { key: "sandbox.max_instances" value: { string_value: "2" } }"#,
        ),
        &["1"],
    );
    install_faults_component(&crowded);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let s = Server::start(repo.path(), &[]);

    let parameters = s.get("/v2/models/closed/config").json()["parameters"].clone();
    for (key, value) in [
        ("sandbox.memory_limit_mb", "256"),
        ("sandbox.execution_timeout_ms", "10000"),
        ("sandbox.max_output_bytes", "67108864"),
        ("sandbox.max_responses", "100000"),
        ("sandbox.max_instances", "32"),
        ("sandbox.fuel", "none"),
        ("sandbox.model_dir", "none"),
        ("sandbox.callable_models", ""),
    ] {
        assert_eq!(parameters[key]["string_value"], value, "{key} in {parameters}");
    }
    assert_eq!(
        s.get("/v2/models/granted/config").json()["parameters"]["sandbox.model_dir"]["string_value"],
        "read_only"
    );

    let got = |r: &Resp| {
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["parameters"]["got"].as_str().unwrap_or_default().to_string()
    };
    // The plugin fails the request with the sandbox's error (`Request::fail`: 400).
    let refused = |r: &Resp, needle: &str| {
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.error().contains(needle), "{}", r.error());
    };
    let infer = |model: &str, body: serde_json::Value| s.post_json(&format!("/v2/models/{model}/infer"), &body);
    assert_eq!(got(&infer("granted", reach("read_file", "path", "/model/vocab.txt"))), "hello sandbox");
    refused(&infer("granted", reach("write_file", "path", "/model/new.txt")), "cannot write /model/new.txt");
    refused(&infer("granted", reach("write_file", "path", "/model/vocab.txt")), "cannot write /model/vocab.txt");
    refused(&infer("granted", reach("read_file", "path", "/model/../../config.pbtxt")), "cannot read");
    refused(&infer("closed", reach("read_file", "path", "/model/vocab.txt")), "cannot read /model/vocab.txt");
    refused(&infer("closed", reach("read_file", "path", "/etc/passwd")), "cannot read /etc/passwd");
    assert_eq!(got(&infer("closed", reach("env", "", ""))), "0 variables");
    refused(&infer("closed", reach("connect", "address", &address)), &format!("cannot connect to {address}"));
    assert_eq!(std::fs::read_to_string(granted.join("1/vocab.txt")).unwrap(), "hello sandbox");
    assert!(!granted.join("1/new.txt").exists());
    // Each refusal failed only its request.
    for model in ["granted", "closed"] {
        assert_eq!(infer(model, faults_request("")).json()["outputs"][0]["data"], json!([1, 2, 3]));
    }

    let index = s.post_json("/v2/repository/index", &json!({})).json();
    let entry = index.as_array().unwrap().iter().find(|m| m["name"] == "crowded").unwrap().clone();
    assert_eq!(entry["state"], "UNAVAILABLE");
    assert!(entry["reason"].as_str().unwrap().contains("allows at most 2 (sandbox.max_instances)"), "{entry}");
    drop(listener);
}

/// A decoupled plugin that floods a request with responses is cut off at `sandbox.max_responses`
/// (the request ends with an error naming the limit), and one that returns without the final
/// response has its request ended with an error; the stream and the model keep serving.
#[test]
fn decoupled_plugins_cannot_flood_or_leave_a_request_open() {
    use nereus::proto::inference as pb;
    use pb::infer_parameter::ParameterChoice;
    let repo = Repo::new();
    let extra = r#"model_transaction_policy { decoupled: true }
parameters { key: "sandbox.max_responses" value: { string_value: "50" } }"#;
    let dir = repo.model("streamer", &faults_config("streamer", extra), &["1"]);
    install_faults_component(&dir);
    let s = Server::start(repo.path(), &[]);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut c = grpc_client(&s).await;
        let request = |id: &str, fault: &str, count: i64| {
            let mut r = pb::ModelInferRequest {
                model_name: "streamer".into(),
                id: id.into(),
                inputs: vec![pb::model_infer_request::InferInputTensor {
                    name: "INPUT0".into(),
                    datatype: "INT32".into(),
                    shape: vec![1],
                    parameters: Default::default(),
                    contents: None,
                }],
                raw_input_contents: vec![bytes::Bytes::from(le_i32(&[9]))],
                ..Default::default()
            };
            let text = |s: &str| pb::InferParameter { parameter_choice: Some(ParameterChoice::StringParam(s.into())) };
            r.parameters.insert("fault".into(), text(fault));
            r.parameters.insert(
                "count".into(),
                pb::InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(count)) },
            );
            // The final flag travels alone, so the stream says when each request ends.
            r.parameters.insert(
                "triton_enable_empty_final_response".into(),
                pb::InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(true)) },
            );
            r
        };
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut stream =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        // Reads one request's messages up to its error or final flag: (responses, error).
        async fn drain(stream: &mut tonic::Streaming<pb::ModelStreamInferResponse>) -> (usize, String) {
            let mut responses = 0;
            loop {
                let m = tokio::time::timeout(WAIT, stream.message())
                    .await
                    .unwrap_or_else(|_| panic!("timed out after {responses} responses"))
                    .unwrap()
                    .unwrap();
                if !m.error_message.is_empty() {
                    return (responses, m.error_message);
                }
                let r = m.infer_response.unwrap();
                let last = matches!(
                    r.parameters.get("triton_final_response").and_then(|p| p.parameter_choice.clone()),
                    Some(ParameterChoice::BoolParam(true))
                );
                if !r.outputs.is_empty() {
                    responses += 1;
                }
                if last {
                    return (responses, String::new());
                }
            }
        }
        tx.send(request("a", "flood", 10)).await.unwrap();
        assert_eq!(drain(&mut stream).await, (10, String::new()), "within the limit: every response, then final");
        tx.send(request("b", "flood", 1_000_000)).await.unwrap();
        let (n, error) = drain(&mut stream).await;
        assert_eq!(n, 50, "cut off at the limit");
        assert!(error.contains("streamer") && error.contains("more than 50 responses"), "{error}");
        tx.send(request("c", "never_final", 0)).await.unwrap();
        let (n, error) = drain(&mut stream).await;
        assert_eq!(n, 1);
        assert!(error.contains("returned without sending the request's final response"), "{error}");
        tx.send(request("d", "", 0)).await.unwrap();
        assert_eq!(drain(&mut stream).await, (1, String::new()), "the same stream and model still serve");
    });
}

/// The nice value of the server's thread named `name` (Linux: /proc/<pid>/task/*/stat).
#[cfg(target_os = "linux")]
fn nice_of(s: &Server, name: &str) -> Option<i64> {
    for task in std::fs::read_dir(format!("/proc/{}/task", s.pid())).ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            // Fields after "(comm)": state is field 3, nice field 19.
            return stat.rsplit_once(')')?.1.split_whitespace().nth(16)?.parse().ok();
        }
    }
    None
}

/// An instance whose plugin hit a limit keeps serving at the lowest CPU priority, so a plugin that
/// keeps misbehaving only gets the CPU that healthy models leave over; other models keep theirs.
#[cfg(target_os = "linux")]
#[test]
fn a_faulting_instance_drops_to_the_lowest_cpu_priority() {
    let (_repo, s) = faulty_server();
    // Workers run on shared threads, named after the instance while they run it: look while a
    // request loops (1 s, to its deadline).
    let looping = |s: &Server| {
        std::thread::scope(|scope| {
            let call = scope.spawn(|| s.post_json("/v2/models/faulty/infer", &faults_request("loop")).status);
            let mut seen = None;
            s.wait_until("the looping worker visible", || {
                seen = nice_of(s, "faulty#0");
                seen.is_some()
            });
            assert_eq!(call.join().unwrap(), 500);
            seen.unwrap()
        })
    };
    let before = looping(&s);
    assert!(before < 19, "{before}");
    assert_eq!(looping(&s), 19, "after its fault the instance runs at the lowest priority");
    // The thread that ran the fault does not carry the penalty into other models' work.
    healthy(&s);
    let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!(r.status, 200);
    assert!(nice_of(&s, "nereus-worker").is_none_or(|n| n < 19), "a shared worker thread kept the penalty");
    assert!(nice_of(&s, "simple#0").is_none_or(|n| n < 19), "simple's worker has the penalty");
}

/// `sandbox.fuel` is a deterministic budget per call: an endless loop runs out of fuel long before
/// its deadline and fails with the budget named; a request within the budget succeeds right after.
/// The same component serves a model without a budget beside it (compiled a second time, without
/// fuel counting): its loop runs until the deadline instead.
#[test]
fn a_fuel_budget_stops_a_loop_deterministically() {
    let repo = Repo::new();
    let extra = r#"parameters [
  { key: "sandbox.fuel" value: { string_value: "50000000" } },
  { key: "sandbox.execution_timeout_ms" value: { string_value: "60000" } }
]"#;
    let dir = repo.model("fueled", &faults_config("fueled", extra), &["1"]);
    install_faults_component(&dir);
    let unmetered = r#"parameters [ { key: "sandbox.execution_timeout_ms" value: { string_value: "300" } } ]"#;
    let dir = repo.model("unmetered", &faults_config("unmetered", unmetered), &["1"]);
    install_faults_component(&dir);
    let s = Server::start(repo.path(), &[]);
    let r = s.post_json("/v2/models/unmetered/infer", &faults_request("loop"));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.error().contains("model 'unmetered'") && r.error().contains("exceeded its execution deadline of 300 ms"),
        "{}",
        r.error()
    );
    assert_eq!(
        s.post_json("/v2/models/unmetered/infer", &faults_request("")).json()["outputs"][0]["data"],
        json!([1, 2, 3])
    );
    assert_eq!(s.get("/v2/models/fueled/config").json()["parameters"]["sandbox.fuel"]["string_value"], "50000000");
    let r = s.post_json("/v2/models/fueled/infer", &faults_request("loop"));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.error().contains("model 'fueled'") && r.error().contains("exceeded its fuel budget of 50000000"),
        "{}",
        r.error()
    );
    let r = s.post_json("/v2/models/fueled/infer", &faults_request(""));
    assert_eq!(r.json()["outputs"][0]["data"], json!([1, 2, 3]));
}

/// A client that goes away cancels its request: the backend sees `is-cancelled`, stops, and its
/// instance serves the next request. The fault has no deadline of its own and the sandbox's is ten
/// minutes, so only the cancellation can end it within the test's bound.
#[test]
fn a_client_that_disconnects_cancels_its_request() {
    let repo = Repo::new();
    waiting_faults_model(&repo, "waits");
    let s = Server::start(repo.path(), &[]);
    s.post_then_hang_up("/v2/models/waits/infer", &faults_request("until_cancelled"), || s.executions("waits").0 == 1);
    let fails = || s.get("/v2/models/waits/stats").json()["model_stats"][0]["inference_stats"]["fail"]["count"].clone();
    s.wait_until("the cancelled request to end", || fails() == 1);
    let r = s.post_json("/v2/models/waits/infer", &faults_request(""));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.executions("waits").0, 0);
}

/// Inline execution (README, "Inline execution"): a model whose executions are short runs on the
/// I/O thread after its warm-up; a fault ends that for good and the model keeps serving through its
/// worker; a backend that blocks is run again on its worker and runs inline no more; one slow
/// execution sends a model back to its worker for a longer warm-up; a model with long executions
/// never runs inline.
#[test]
fn only_fast_well_behaved_models_run_inline() {
    let repo = Repo::new();
    let one = "instance_group [ { count: 1 kind: KIND_CPU } ]";
    for name in ["fast", "naps", "long", "spiky"] {
        let dir = repo.model(name, &faults_config(name, one), &["1"]);
        install_faults_component(&dir);
    }
    // A limit well above a fast execution even on a loaded machine, well below the 2 ms spins.
    let s = Server::start(repo.path(), &["--inline-execution-us", "1000"]);
    let inline = |m: &str| s.get(&format!("/nereus/test/models/{m}/executions")).json()["inline"].as_u64().unwrap();
    let ok = |m: &str, body: &serde_json::Value| {
        let r = s.post_json(&format!("/v2/models/{m}/infer"), body);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["outputs"][0]["data"], json!([1, 2, 3]));
    };
    let warm_up = |m: &str| {
        for _ in 0..200 {
            ok(m, &faults_request(""));
        }
        let n = inline(m);
        assert!(n > 0, "{m} never ran inline\n{}", s.log());
        n
    };

    // A fault (a trap) fails its request and ends inline execution.
    warm_up("fast");
    let r = s.post_json("/v2/models/fast/infer", &faults_request("trap"));
    assert_eq!(r.status, 500, "{}", r.text());
    let after_fault = inline("fast");
    for _ in 0..200 {
        ok("fast", &faults_request(""));
    }
    assert_eq!(inline("fast"), after_fault);

    // A sleep is a blocking WASI call, which cannot run on an I/O thread: the request runs again
    // on the worker and succeeds; the model is not tried inline again.
    let before_nap = warm_up("naps");
    ok("naps", &faults_request("nap"));
    for _ in 0..100 {
        ok("naps", &faults_request(""));
    }
    assert_eq!(inline("naps"), before_nap + 1, "only the nap was tried inline");

    let mut spin = faults_request("spin");
    spin["parameters"]["spin_ms"] = json!(2);
    for _ in 0..100 {
        ok("long", &spin);
    }
    assert_eq!(inline("long"), 0);

    // A slow execution once inline (the first only makes the gate time the next on the CPU clock
    // as well: most long wall times on a busy machine are preemptions; the second, slow on both
    // clocks, counts) sends the model back to its worker for a warm-up twice as long
    // (2 × 64 fast executions), after which it runs inline again. The spin waits on the wall
    // clock, so it lasts 50 ms: a 2 ms one preempted for more than half its time (CI, 2 cores,
    // tests in parallel) cost under the 1 ms limit on the CPU clock and counted as fast.
    let mut long_spin = faults_request("spin");
    long_spin["parameters"]["spin_ms"] = json!(50);
    let before_spin = warm_up("spiky");
    ok("spiky", &long_spin);
    ok("spiky", &long_spin);
    assert_eq!(inline("spiky"), before_spin + 2, "the slow executions themselves ran inline");
    for _ in 0..2 * 64 - 1 {
        ok("spiky", &faults_request(""));
    }
    assert_eq!(inline("spiky"), before_spin + 2, "no inline execution during the longer warm-up");
    for _ in 0..200 {
        ok("spiky", &faults_request(""));
    }
    assert!(inline("spiky") > before_spin + 2, "inline again after the warm-up");
}

/// The dynamic batcher's inline batches (docs/scheduling.md): once the model's warm-up is over, a
/// batch that an arrival completes (here every arrival: no queue delay) runs on the I/O thread that
/// queued it, with the right answer; a backend that blocks there gives the batch back to the
/// worker, which answers it, and the model's batches run inline no more.
#[test]
fn a_batch_an_arrival_completes_runs_inline_until_its_backend_blocks() {
    let repo = Repo::new();
    let config = r#"name: "batched"
backend: "test_faults"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { }"#;
    let dir = repo.model("batched", config, &["1"]);
    install_faults_component(&dir);
    let s = Server::start(repo.path(), &["--inline-execution-us", "1000"]);
    let inline = || s.get("/nereus/test/models/batched/executions").json()["inline"].as_u64().unwrap();
    let ok = |fault: &str| {
        let body = json!({
            "parameters": {"fault": fault},
            "inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "INT32", "data": [1, 2, 3]}]
        });
        let r = s.post_json("/v2/models/batched/infer", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["outputs"][0]["data"], json!([1, 2, 3]));
        assert_eq!(r.json()["outputs"][0]["shape"], json!([1, 3]));
    };
    for _ in 0..200 {
        ok("");
    }
    let before_nap = inline();
    assert!(before_nap > 0, "no batch ran inline\n{}", s.log());
    ok("nap");
    for _ in 0..100 {
        ok("");
    }
    assert_eq!(inline(), before_nap + 1, "only the nap's batch was tried inline");
}

/// The frames of the last guest backtrace logged for `model` (an error line whose message, a JSON
/// string, holds the fault and then one line per frame), with the fault's line first; empty when
/// there is none yet.
fn logged_backtrace(s: &Server, model: &str) -> Vec<String> {
    let log = s.log();
    let Some(line) = log
        .lines()
        .rev()
        .find(|l| l.starts_with('E') && l.contains(&format!("model '{model}'")) && l.contains("guest backtrace"))
    else {
        return Vec::new();
    };
    let Some((_, quoted)) = line.split_once("] ") else { return Vec::new() };
    let message: String = serde_json::from_str(quoted).expect("a log message is a JSON string");
    let lines: Vec<&str> = message.lines().collect();
    let is_frame = |l: &&str| l.trim_start().split_once(": ").is_some_and(|(n, _)| n.parse::<usize>().is_ok());
    std::iter::once(lines[0]).chain(lines[1..].iter().copied().take_while(is_frame)).map(String::from).collect()
}

/// A trap logs the guest backtrace at ERROR for the plugin's author: one line per frame with the
/// offset and the function's name, demangled, from the component's name section (which the plugin
/// profile keeps), at most 32 frames. The client's error stays short: the model and the fault.
#[test]
fn a_trap_logs_the_guest_backtrace_and_answers_a_short_error() {
    let (_repo, s) = faulty_server();
    let r = s.post_json("/v2/models/faulty/infer", &faults_request("trap"));
    assert_eq!(r.status, 500, "{}", r.text());
    let e = r.error();
    assert!(e.contains("model 'faulty'") && e.contains("trapped: wasm trap"), "{e}");
    assert!(!e.contains("backtrace") && !e.contains("panic_on_request") && !e.contains('\n') && e.len() < 200, "{e}");
    // The plugin panics in `panic_on_request` (`panic = "abort"`: a trap in the panic machinery,
    // a few frames further in); its frame is in the trace, named, with its offsets. (The log is
    // read line by line as it comes: wait for the frame itself.)
    let named = |trace: &[String]| trace.iter().any(|l| l.contains("test_faults::panic_on_request"));
    s.wait_until("the trap's backtrace in the log", || named(&logged_backtrace(&s, "faulty")));
    let trace = logged_backtrace(&s, "faulty");
    assert!(trace[0].contains("trapped: wasm trap"), "{trace:#?}");
    let frame = trace.iter().find(|l| l.contains("test_faults::panic_on_request+0x"));
    assert!(frame.is_some_and(|f| f.contains(" - ")), "no named frame of the plugin's:\n{}", s.log());
    assert!(trace.len() <= 1 + 32, "{trace:#?}");
    healthy(&s);

    // Unbounded recursion: thousands of frames, of which the innermost 32 are logged.
    let r = s.post_json("/v2/models/faulty/infer", &faults_request("recursion"));
    assert_eq!(r.status, 500, "{}", r.text());
    s.wait_until("the recursion's backtrace in the log", || s.log().contains("(only the innermost 32 calls are kept)"));
    let trace = logged_backtrace(&s, "faulty");
    assert!(trace[0].contains("call stack exhausted"), "{trace:#?}");
    assert_eq!(trace.len(), 1 + 32, "{trace:#?}");
    // (The innermost frame may lack offsets: the overflow is caught in the function's prologue.)
    assert!(trace[1..].iter().all(|l| l.contains("Backend>::execute::deeper")), "{trace:#?}");
    healthy(&s);
}

/// A trap in a lifecycle call (here the model's initialisation) is logged the same way; the load
/// fails with a short reason.
#[test]
fn a_trap_during_initialisation_logs_the_guest_backtrace() {
    let repo = Repo::new();
    let extra = r#"parameters { key: "init_fault" value: { string_value: "trap" } }"#;
    let dir = repo.model("init_traps", &faults_config("init_traps", extra), &["1"]);
    install_faults_component(&dir);
    let s = Server::start(repo.path(), &[]);
    let index = s.post_json("/v2/repository/index", &json!({})).json();
    let entry = index.as_array().unwrap().iter().find(|m| m["name"] == "init_traps").unwrap().clone();
    assert_eq!(entry["state"], "UNAVAILABLE", "{entry}");
    let reason = entry["reason"].as_str().unwrap();
    assert!(reason.contains("trapped: wasm trap") && !reason.contains("panic_on_request"), "{reason}");
    s.wait_until("the trap's backtrace in the log", || {
        logged_backtrace(&s, "init_traps").iter().any(|l| l.contains("test_faults::panic_on_request"))
    });
    // Once: the trapped store is not entered again to finalise it.
    assert!(!s.log().contains("cannot enter component instance"), "{}", s.log());
}
