//! Misbehaving plugins are contained: the affected request fails with a clear error naming the
//! model, the instance is rebuilt, and the next request succeeds.
mod common;

use common::*;
use serde_json::json;

fn faulty_server() -> (Repo, Server) {
    let repo = Repo::new();
    let limits = r#"parameters [
  { key: "sandbox.execution_timeout_ms" value: { string_value: "300" } },
  { key: "sandbox.memory_limit_mb" value: { string_value: "48" } }
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
        ("loop", "exceeded its execution deadline of 300 ms"),
        ("oom", "exceeded its memory limit of 48 MiB"),
        ("no_response", "returned no response"),
        ("bad_output", "sent an invalid response: output 'OUTPUT0' has datatype FP64"),
        ("error", "failed to execute: test_faults: execution error requested"),
    ] {
        let r = s.post_json("/v2/models/faulty/infer", &faults_request(fault));
        assert_eq!(r.status, 500, "{fault}: {}", r.text());
        let e = r.error();
        assert!(e.contains("faulty"), "{fault}: error should name the model: {e}");
        assert!(e.contains(needle), "{fault}: expected '{needle}' in '{e}'");
        healthy(&s);
    }
    // the model stayed ready throughout, and statistics saw 6 failures among 13 requests
    assert_eq!(s.get("/v2/models/faulty/ready").status, 200);
    let stats = s.get("/v2/models/faulty/stats").json();
    let inf = &stats["model_stats"][0]["inference_stats"];
    assert_eq!((inf["success"]["count"].as_u64(), inf["fail"]["count"].as_u64()), (Some(7), Some(6)), "{inf}");
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
        ("sandbox.max_instances", "32"),
        ("sandbox.model_dir", "none"),
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
