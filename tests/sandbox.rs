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
