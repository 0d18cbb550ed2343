//! Model control (tritonserver's `--model-control-mode`): explicit load and unload through the
//! repository API over HTTP and gRPC, reloads that lose no request, failed reloads that keep the
//! old version serving, unloads that wait for in-flight requests, and POLL mode picking up a
//! replaced component, a changed configuration, an added and a removed model.
use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::*;
use serde_json::{Value, json};

fn index(s: &Server) -> Vec<Value> {
    let r = s.post_json("/v2/repository/index", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().as_array().unwrap().clone()
}

/// The index rows of `name`.
fn rows(s: &Server, name: &str) -> Vec<Value> {
    index(s).into_iter().filter(|m| m["name"] == name).collect()
}

fn load(s: &Server, name: &str, body: &Value) -> Resp {
    s.post_json(&format!("/v2/repository/models/{name}/load"), body)
}

fn unload(s: &Server, name: &str, body: &Value) -> Resp {
    s.post_json(&format!("/v2/repository/models/{name}/unload"), body)
}

/// A two-step ensemble over `simple` (its OUTPUT0 fed to `simple` again as INPUT0).
fn ensemble_config(name: &str) -> String {
    format!(
        r#"name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "A" data_type: TYPE_INT32 dims: [ 16 ] }}, {{ name: "B" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "simple" model_version: -1
    input_map {{ key: "INPUT0" value: "A" }} input_map {{ key: "INPUT1" value: "B" }}
    output_map {{ key: "OUTPUT0" value: "SUM" }} }}
] }}"#
    )
}

fn assert_simple_answers(s: &Server, model: &str) {
    let r = s.post_json(&format!("/v2/models/{model}/infer"), &simple_request(2));
    assert_eq!(r.status, 200, "{model}: {}", r.text());
    assert_eq!(r.json()["outputs"][0]["data"][3], 5, "{model}");
}

#[test]
fn explicit_mode_loads_and_unloads_on_request() {
    let repo = Repo::new();
    repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    repo.model("other", &add_sub_config("other", ""), &["1"]);
    repo.model("pipeline", &ensemble_config("pipeline"), &["1"]);
    let s = Server::start(repo.path(), &["--model-control-mode", "explicit", "--load-model", "other"]);

    // Only the --load-model model loaded; the others are listed by name alone, as tritonserver.
    assert_eq!(rows(&s, "other")[0]["state"], "READY");
    assert_eq!(rows(&s, "simple"), vec![json!({"name": "simple"})]);
    assert_eq!(s.get("/v2/models/simple/ready").status, 400);
    assert_eq!(s.get("/v2/health/ready").status, 200, "models never loaded do not count");

    // Loading the ensemble loads the model it composes.
    assert_eq!(load(&s, "pipeline", &json!({})).status, 200);
    assert_eq!(rows(&s, "simple")[0]["state"], "READY");
    let r = s.post_json(
        "/v2/models/pipeline/infer",
        &json!({"inputs": [
            {"name": "A", "shape": [1, 16], "datatype": "INT32", "data": vec![1; 16]},
            {"name": "B", "shape": [1, 16], "datatype": "INT32", "data": vec![2; 16]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["data"][0], 3);

    // Unload without dependents: as tritonserver, the ensemble cannot serve without its step and
    // is unloaded too; it loads again when the step does.
    assert_eq!(unload(&s, "simple", &json!({})).status, 200);
    assert_eq!(
        rows(&s, "simple"),
        vec![json!({"name": "simple", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"})]
    );
    assert_eq!(s.get("/v2/models/simple/ready").status, 400);
    assert_eq!(s.get("/v2/models/pipeline/ready").status, 400);
    assert_eq!(rows(&s, "pipeline")[0]["reason"], "unloaded");
    assert_eq!(s.get("/v2/health/ready").status, 200, "unloaded models do not count");
    assert_eq!(load(&s, "simple", &json!({})).status, 200);
    assert_eq!(s.get("/v2/models/pipeline/ready").status, 200, "the ensemble is back with its step");
    // An ensemble unloaded on request stays unloaded when its step loads again.
    assert_eq!(unload(&s, "pipeline", &json!({})).status, 200);
    assert_eq!(unload(&s, "simple", &json!({})).status, 200);
    assert_eq!(load(&s, "simple", &json!({})).status, 200);
    assert_eq!(s.get("/v2/models/pipeline/ready").status, 400);
    // Loaded again, then unloaded with its dependents.
    assert_eq!(load(&s, "pipeline", &json!({})).status, 200);
    assert_simple_answers(&s, "simple");
    let r = unload(&s, "simple", &json!({"parameters": {"unload_dependents": true}}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.get("/v2/models/pipeline/ready").status, 400);
    assert_eq!(rows(&s, "pipeline")[0]["reason"], "unloaded");
    assert_eq!(s.get("/v2/models/other/ready").status, 200, "an unrelated model keeps serving");

    // An ensemble unloaded with its dependents takes the steps its load brought along (tritonserver's
    // cascading removal); without, they stay; a step loaded on its own account always stays.
    assert_eq!(load(&s, "pipeline", &json!({})).status, 200);
    assert_simple_answers(&s, "simple");
    assert_eq!(unload(&s, "pipeline", &json!({"parameters": {"unload_dependents": true}})).status, 200);
    assert_eq!(s.get("/v2/models/simple/ready").status, 400, "brought along by the ensemble, unloaded with it");
    assert_eq!(load(&s, "pipeline", &json!({})).status, 200);
    assert_eq!(unload(&s, "pipeline", &json!({})).status, 200);
    assert_simple_answers(&s, "simple");
    assert_eq!(unload(&s, "simple", &json!({})).status, 200);
    assert_eq!(load(&s, "simple", &json!({})).status, 200);
    assert_eq!(load(&s, "pipeline", &json!({})).status, 200);
    assert_eq!(unload(&s, "pipeline", &json!({"parameters": {"unload_dependents": true}})).status, 200);
    assert_simple_answers(&s, "simple");

    // A model no repository has, and a name that is not a folder name.
    let r = load(&s, "nowhere", &json!({}));
    assert_eq!(r.status, 500);
    assert!(r.error().starts_with("failed to load 'nowhere', failed to poll from model repository"), "{}", r.error());
    assert_eq!(load(&s, "..", &json!({})).status, 400);
    // Unknown load parameters are refused, as tritonserver refuses them.
    let r = load(&s, "simple", &json!({"parameters": {"bogus": 1}}));
    assert_eq!((r.status, r.error()), (400, "Unrecognized load parameter 'bogus' with type 'INT'".to_string()));

    // The server's metadata says unload_dependents is supported.
    let extensions = s.get("/v2").json()["extensions"].clone();
    assert!(extensions.as_array().unwrap().contains(&json!("model_repository(unload_dependents)")));
}

#[test]
fn load_and_unload_are_refused_outside_explicit_mode() {
    let repo = Repo::new();
    repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    for mode in ["none", "poll"] {
        let s = Server::start(repo.path(), &["--model-control-mode", mode]);
        for r in [load(&s, "simple", &json!({})), unload(&s, "simple", &json!({}))] {
            assert_eq!(r.status, 503, "{mode}");
            assert_eq!(r.error(), "explicit model load / unload is not allowed if polling is enabled");
        }
        assert_simple_answers(&s, "simple");
    }
    let err = refused_start(
        repo.path(),
        &["--model-control-mode", "explicit", "--load-model", "*", "--load-model", "simple"],
    );
    assert!(err.contains("Wildcard model name '*' must be the ONLY startup model"), "{err}");
}

/// How many reloads [`reloads_under_load_lose_no_request`] makes: a request lost at a swap is a
/// race, so many swaps make it likely to show.
const ROUNDS: i32 = 40;

/// Reloads (a changed configuration on disk, and a configuration override) while clients send
/// requests without pause: every request is answered, correctly.
#[test]
fn reloads_under_load_lose_no_request() {
    let repo = Repo::new();
    let dir = repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    let s = Arc::new(Server::start(repo.path(), &["--model-control-mode", "explicit", "--load-model", "*"]));
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (s, stop, answered, failed) = (s.clone(), stop.clone(), answered.clone(), failed.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let b = (c * 1000 + i) % 5000;
                    let r = s.post_json("/v2/models/simple/infer", &simple_request(b));
                    if r.status == 200 && r.json()["outputs"][0]["data"][1] == json!(1 + b) {
                        answered.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("failed: {} {}", r.status, r.text());
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let wait_for_requests = |n: u64| {
        let target = answered.load(Ordering::Relaxed) + n;
        s.wait_until("requests to be answered", || answered.load(Ordering::Relaxed) >= target);
    };
    for round in 0..ROUNDS {
        wait_for_requests(50);
        let r = if round % 2 == 0 {
            // A changed config.pbtxt: the folder changed, so the load reloads.
            let count = round % 3 + 1;
            std::fs::write(
                dir.join("config.pbtxt"),
                add_sub_config("simple", &format!("instance_group [ {{ kind: KIND_CPU count: {count} }} ]")),
            )
            .unwrap();
            load(&s, "simple", &json!({}))
        } else {
            let config = json!({"backend": "add_sub", "max_batch_size": 4 + round,
                "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]},
                          {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]}],
                "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]},
                           {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [16]}]});
            load(&s, "simple", &json!({"parameters": {"config": config.to_string()}}))
        };
        assert_eq!(r.status, 200, "round {round}: {}", r.text());
        if round % 2 == 1 {
            assert_eq!(s.get("/v2/models/simple/config").json()["max_batch_size"], 4 + round);
        }
    }
    wait_for_requests(20);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "requests failed during reloads");
    let loads = s.log().matches("successfully loaded 'simple'").count();
    assert_eq!(loads, 1 + ROUNDS as usize, "one load at start-up and a reload a round:\n{}", s.log());
    // An explicit load of the unchanged folder is not a reload (and keeps the last round's
    // configuration override, as the test below shows).
    assert_eq!(load(&s, "simple", &json!({})).status, 200);
    assert_eq!(load(&s, "simple", &json!({})).status, 200);
    assert_eq!(s.log().matches("successfully loaded 'simple'").count(), 1 + ROUNDS as usize);
}

/// A configuration override stays until the folder changes, as tritonserver's does (it dates the
/// override at its load, and a later plain load reloads only files modified after it: Triton's
/// L0_lifecycle `test_config_override`); a file override is undone by the next plain load.
#[test]
fn a_configuration_override_stays_until_the_folder_changes() {
    let repo = Repo::new();
    let dir = repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    let s = Server::start(repo.path(), &["--model-control-mode", "explicit", "--load-model", "simple"]);
    let max_batch_size = || s.get("/v2/models/simple/config").json()["max_batch_size"].as_i64().unwrap();
    let a: Vec<i32> = (0..16).collect();
    let answers = || {
        let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
        r.status == 200 && r.json()["outputs"][0]["data"] == json!(a.iter().map(|x| x + 1).collect::<Vec<_>>())
    };
    assert_eq!(max_batch_size(), 8);

    let config = json!({"backend": "add_sub", "max_batch_size": 3,
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]},
                  {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]},
                   {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [16]}]});
    let r = load(&s, "simple", &json!({"parameters": {"config": config.to_string()}}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(max_batch_size(), 3);

    // A plain load of the unchanged folder keeps the override.
    assert_eq!(load(&s, "simple", &json!({})).status, 200);
    assert_eq!(max_batch_size(), 3, "the override kept");
    assert!(answers());

    // A change to the folder after the override: the plain load reloads it from disk.
    std::fs::write(dir.join("config.pbtxt"), add_sub_config("simple", "# changed after the override\n")).unwrap();
    assert_eq!(load(&s, "simple", &json!({})).status, 200);
    assert_eq!(max_batch_size(), 8, "reloaded from the folder");

    // A file override (the same plugin uploaded): the next plain load undoes it.
    let component = base64::engine::general_purpose::STANDARD.encode(std::fs::read(nereus_plugins::ADD_SUB).unwrap());
    let uploaded = json!({"parameters": {"config": config.to_string(), "file:1/add_sub.wasm": component}});
    let r = load(&s, "simple", &uploaded);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(max_batch_size(), 3);
    assert_eq!(load(&s, "simple", &json!({})).status, 200);
    assert_eq!(max_batch_size(), 8, "the file override undone");
    assert!(answers());
}

/// A reload that fails — a configuration the server refuses, a plugin whose initialisation fails —
/// leaves the version that served serving, and says why.
#[test]
fn a_failed_reload_keeps_the_old_version_serving() {
    let repo = Repo::new();
    let dir = repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    let s = Server::start(repo.path(), &["--model-control-mode", "explicit", "--load-model", "simple"]);

    let r =
        load(&s, "simple", &json!({"parameters": {"config": "{\"max_batch_size\": 16, \"backend\": \"nowhere\"}"}}));
    assert_eq!(r.status, 400);
    assert!(
        r.error().starts_with(
            "load failed for model 'simple': version 1 is at UNAVAILABLE state: unable to find backend library for backend 'nowhere'"
        ),
        "{}",
        r.error()
    );
    let r = load(&s, "simple", &json!({"parameters": {"config": "not json"}}));
    assert_eq!(r.status, 500);
    assert!(
        r.error().contains("failed to load 'simple', failed to poll from model repository: Invalid config override"),
        "{}",
        r.error()
    );
    std::fs::write(dir.join("config.pbtxt"), "name: \"simple\" bogus: 1").unwrap();
    assert_eq!(load(&s, "simple", &json!({})).status, 500);
    // The faults plugin refusing its initialisation, in place of add_sub.
    std::fs::write(
        dir.join("config.pbtxt"),
        faults_config("simple", r#"parameters { key: "init_fault" value: { string_value: "model" } }"#),
    )
    .unwrap();
    install_faults_component(&dir);
    let r = load(&s, "simple", &json!({}));
    assert_eq!(r.status, 400);
    assert!(r.error().contains("model initialisation refused as configured"), "{}", r.error());

    assert_simple_answers(&s, "simple");
    assert_eq!(s.get("/v2/models/simple/config").json()["max_batch_size"], 8);
    assert_eq!(rows(&s, "simple"), vec![json!({"name": "simple", "version": "1", "state": "READY"})]);
}

/// An unload answers once the model's in-flight requests are answered; those requests succeed.
/// With a short `--exit-timeout-secs` the unload answers at the timeout, and the request still
/// finishes.
#[test]
fn unload_waits_for_in_flight_requests() {
    let repo = Repo::new();
    let dir = repo.model("slow", &faults_config("slow", ""), &["1"]);
    install_faults_component(&dir);
    for (timeout, spin_ms) in [("60", 1500), ("1", 6000)] {
        let s = Arc::new(Server::start(
            repo.path(),
            &["--model-control-mode", "explicit", "--load-model", "slow", "--exit-timeout-secs", timeout],
        ));
        let request = json!({"parameters": {"fault": "spin", "spin_ms": spin_ms},
            "inputs": [{"name": "INPUT0", "shape": [3], "datatype": "INT32", "data": [1, 2, 3]}]});
        // The request cannot end before `sent + spin`: the plugin spins that long once it has it.
        let sent = Instant::now();
        let slow = {
            let s = s.clone();
            std::thread::spawn(move || s.post_json("/v2/models/slow/infer", &request))
        };
        s.wait_until("the slow request to execute", || s.executions("slow").0 == 1);
        let r = unload(&s, "slow", &json!({}));
        let unloaded_after = sent.elapsed();
        assert_eq!(r.status, 200, "{}", r.text());
        let answer = slow.join().unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.json()["outputs"][0]["data"], json!([1, 2, 3]));
        let spin = Duration::from_millis(spin_ms);
        if timeout == "60" {
            assert!(unloaded_after >= spin, "the unload answered before the in-flight request: {unloaded_after:?}");
        } else {
            assert!(unloaded_after < spin, "the unload waited past its 1 s timeout: {unloaded_after:?}");
        }
        s.wait_until("the version to be unloaded", || rows(&s, "slow")[0].get("reason") == Some(&json!("unloaded")));
    }
}

/// The repository API over gRPC: index, a load that uploads a plugin (`file:` parameters with a
/// configuration), unload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_load_uploads_a_plugin_and_unloads_it() {
    use nereus::proto::inference as pb;
    let repo = Repo::new();
    repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    let s = Server::start(repo.path(), &["--model-control-mode", "explicit"]);
    let mut client = grpc_client(&s).await;
    let index = client.repository_index(pb::RepositoryIndexRequest::default()).await.unwrap().into_inner();
    assert_eq!(index.models.len(), 1);
    assert_eq!((index.models[0].name.as_str(), index.models[0].state.as_str()), ("simple", ""));

    let param = |choice| pb::ModelRepositoryParameter { parameter_choice: Some(choice) };
    use pb::model_repository_parameter::ParameterChoice as P;
    let config = json!({"backend": "mine", "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [-1]}]});
    let component = std::fs::read(nereus_plugins::IDENTITY).unwrap();
    let request = pb::RepositoryModelLoadRequest {
        model_name: "uploaded".into(),
        parameters: [
            ("config".to_string(), param(P::StringParam(config.to_string()))),
            ("file:1/mine.wasm".to_string(), param(P::BytesParam(component.into()))),
        ]
        .into(),
        ..Default::default()
    };
    client.repository_model_load(request).await.unwrap();
    let r = s.post_json("/v2/models/uploaded/infer", &faults_request(""));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["data"], json!([1, 2, 3]));

    // A file override without a configuration, and one that leaves the folder: refused.
    for (name, file) in [("no_config", "file:1/mine.wasm"), ("escape", "file:../x.wasm")] {
        let mut parameters: std::collections::HashMap<_, _> =
            [(file.to_string(), param(P::BytesParam(vec![0u8].into())))].into();
        if name == "escape" {
            parameters.insert("config".into(), param(P::StringParam("{}".into())));
        }
        let request = pb::RepositoryModelLoadRequest { model_name: name.into(), parameters, ..Default::default() };
        let e = client.repository_model_load(request).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal, "{name}: {e:?}");
        assert!(e.message().contains("failed to poll from model repository"), "{name}: {}", e.message());
    }

    let request = pb::RepositoryModelUnloadRequest {
        model_name: "uploaded".into(),
        parameters: [("unload_dependents".to_string(), param(P::BoolParam(true)))].into(),
        ..Default::default()
    };
    client.repository_model_unload(request).await.unwrap();
    assert_eq!(s.get("/v2/models/uploaded/ready").status, 400);
    let e = client
        .repository_model_load(pb::RepositoryModelLoadRequest { model_name: "nowhere".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Internal);
    assert!(e.message().starts_with("failed to load 'nowhere'"), "{}", e.message());
}

/// The override files of an HTTP load are base64, as tritonclient sends them.
/// A load's model name is checked as tritonserver's `ValidateModelName` checks it, with its
/// messages (INVALID_ARGUMENT): empty or whitespace only, or `..` or a `/` once trimmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_refuses_empty_and_traversing_names_with_tritons_messages() {
    use nereus::proto::inference as pb;
    let repo = Repo::new();
    repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    let s = Server::start(repo.path(), &["--model-control-mode", "explicit"]);
    let mut client = grpc_client(&s).await;
    let empty = "Model name cannot be empty. Please enter a valid name to deploy.";
    let traversal =
        |name: &str| format!("invalid model name '{name}', model name must not contain path traversal characters");
    let cases = [
        ("", empty.to_string()),
        (" ", empty.to_string()),
        ("\t\n ", empty.to_string()),
        ("..", traversal("..")),
        (" ..", traversal(" ..")),
        (".. ", traversal(".. ")),
        ("../etc", traversal("../etc")),
        ("a/b", traversal("a/b")),
        (".", "failed to load '.': invalid model name".to_string()),
    ];
    for (name, message) in cases {
        let e = client
            .repository_model_load(pb::RepositoryModelLoadRequest { model_name: name.into(), ..Default::default() })
            .await
            .unwrap_err();
        assert_eq!((e.code(), e.message()), (tonic::Code::InvalidArgument, message.as_str()), "{name:?}");
    }
    // A name that is only padded is looked up as it is, and is no model here.
    let e = client
        .repository_model_load(pb::RepositoryModelLoadRequest { model_name: " simple".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert_ne!(e.code(), tonic::Code::Ok);
    client
        .repository_model_load(pb::RepositoryModelLoadRequest { model_name: "simple".into(), ..Default::default() })
        .await
        .unwrap();
}

#[test]
fn http_load_uploads_a_plugin() {
    let repo = Repo::new();
    let s = Server::start(repo.path(), &["--model-control-mode", "explicit"]);
    let config = json!({"backend": "mine", "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [-1]}]})
    .to_string();
    let component =
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(nereus_plugins::TEST_FAULTS).unwrap());
    let r = load(&s, "uploaded", &json!({"parameters": {"config": config, "file:1/mine.wasm": component}}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = s.post_json("/v2/models/uploaded/infer", &faults_request("error"));
    assert_eq!(r.status, 500, "the uploaded test_faults plugin answers its fault: {}", r.text());
    let r = load(&s, "uploaded", &json!({"parameters": {"config": "{}", "file:1/mine.wasm": "not base64!"}}));
    assert_eq!(r.status, 400, "{}", r.text());
}

/// POLL mode: a replaced component and a changed configuration reload the model, an added folder
/// loads, a removed one unloads; a broken change keeps the old version serving.
#[test]
fn poll_mode_follows_the_repository() {
    let repo = Repo::new();
    let dir = repo.model("swap", &faults_config("swap", "").replace("test_faults", "mine"), &["1"]);
    std::fs::copy(nereus_plugins::TEST_FAULTS, dir.join("1/mine.wasm")).unwrap();
    repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    let s = Server::start(repo.path(), &["--model-control-mode", "poll", "--repository-poll-secs", "1"]);
    assert_eq!(s.post_json("/v2/models/swap/infer", &faults_request("error")).status, 500);

    // The component replaced by identity, which ignores the fault parameter.
    std::fs::copy(nereus_plugins::IDENTITY, dir.join("1/mine.wasm")).unwrap();
    s.wait_until("the replaced component to be served", || {
        s.post_json("/v2/models/swap/infer", &faults_request("error")).status == 200
    });

    // A changed configuration.
    std::fs::write(
        dir.join("config.pbtxt"),
        faults_config("swap", "").replace("test_faults", "mine").replace(
            "max_batch_size: 0",
            "max_batch_size: 0\nparameters { key: \"p\" value: { string_value: \"2\" } }",
        ),
    )
    .unwrap();
    s.wait_until("the changed configuration to be served", || {
        s.get("/v2/models/swap/config").json()["parameters"]["p"]["string_value"] == "2"
    });

    // A broken configuration: logged, and the old version keeps serving.
    let loads = s.log().matches("failed to load 'swap'").count();
    std::fs::write(dir.join("config.pbtxt"), "name: \"swap\" bogus: 1").unwrap();
    s.wait_until("the broken reload to be tried", || s.log().matches("failed to load 'swap'").count() > loads);
    assert_eq!(s.post_json("/v2/models/swap/infer", &faults_request("error")).status, 200);

    // Added and removed models.
    repo.model("added", &add_sub_config("added", ""), &["1"]);
    s.wait_until("the added model to load", || s.get("/v2/models/added/ready").status == 200);
    assert_simple_answers(&s, "added");
    std::fs::remove_dir_all(repo.path().join("simple")).unwrap();
    s.wait_until("the removed model to unload", || s.get("/v2/models/simple/ready").status == 400);
    assert!(rows(&s, "simple").is_empty());
    assert_eq!(s.get("/v2/health/ready").status, 200);
    // As tritonserver, the removed model stays known, with no available version.
    let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!(r.error(), "Request for unknown model: 'simple' has no available versions");
}

/// A version folder removed under POLL: the version is unloaded and stays known ("not at ready
/// state", UNAVAILABLE "unloaded" in the index), the others keep serving and the server stays
/// ready; a version folder added loads.
#[test]
fn poll_mode_unloads_a_removed_version() {
    let repo = Repo::new();
    let dir = repo.model("simple", &add_sub_config("simple", "version_policy: { all { } }"), &["1", "2"]);
    let s = Server::start(repo.path(), &["--model-control-mode", "poll", "--repository-poll-secs", "1"]);
    assert_eq!(s.get("/v2/models/simple/versions/1/ready").status, 200);
    std::fs::remove_dir_all(dir.join("1")).unwrap();
    s.wait_until("version 1 to unload", || s.get("/v2/models/simple/versions/1/ready").status == 400);
    let r = s.post_json("/v2/models/simple/versions/1/infer", &simple_request(1));
    assert_eq!(r.error(), "Request for unknown model: 'simple' version 1 is not at ready state");
    let states: Vec<(String, String, String)> = rows(&s, "simple")
        .iter()
        .map(|m| {
            (
                m["version"].as_str().unwrap().into(),
                m["state"].as_str().unwrap().into(),
                m["reason"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [("1".into(), "UNAVAILABLE".into(), "unloaded".into()), ("2".into(), "READY".into(), String::new())]
    );
    assert_simple_answers(&s, "simple");
    assert_eq!(s.get("/v2/health/ready").status, 200);
    std::fs::create_dir(dir.join("7")).unwrap();
    s.wait_until("version 7 to load", || s.get("/v2/models/simple/versions/7/ready").status == 200);
    assert_eq!(s.get("/v2/models/simple/versions/1/ready").status, 400);
}

/// A model folder in two repositories is one UNAVAILABLE row of the index, with tritonserver's
/// reason, whether a load was tried or not; a load request for it fails; the server is ready.
#[test]
fn a_model_in_two_repositories_is_unavailable_in_the_index() {
    let repo = Repo::new();
    let other = Repo::new();
    repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    other.model("simple", &add_sub_config("simple", ""), &["1"]);
    other.model("alone", &add_sub_config("alone", ""), &["1"]);
    let other_path = other.path().display().to_string();
    let s = Server::start(repo.path(), &["--model-repository", &other_path, "--model-control-mode", "explicit"]);
    let want =
        json!([{"name": "simple", "state": "UNAVAILABLE", "reason": "model appears in two or more repositories"}]);
    assert_eq!(json!(rows(&s, "simple")), want);
    assert_eq!(load(&s, "simple", &json!({})).status, 500);
    assert_eq!(json!(rows(&s, "simple")), want);
    assert_eq!(load(&s, "alone", &json!({})).status, 200);
    // Never loaded, it does not count against readiness (as tritonserver's, which leaves it out).
    assert_eq!(s.get("/v2/health/ready").status, 200);
}

/// `--model-config-name custom`: a model's `configs/custom.pbtxt` is preferred to its
/// `config.pbtxt`, as tritonserver's; under POLL, adding or removing it reloads the model.
#[test]
fn a_named_configuration_is_preferred_and_followed_under_poll() {
    let repo = Repo::new();
    let dir = repo.model("simple", &add_sub_config("simple", ""), &["1", "2"]);
    let args = ["--model-config-name", "custom", "--model-control-mode", "poll", "--repository-poll-secs", "1"];
    let s = Server::start(repo.path(), &args);
    let ready = |v: u32| s.get(&format!("/v2/models/simple/versions/{v}/ready")).status == 200;
    assert!(ready(2) && !ready(1), "config.pbtxt: the latest version");
    std::fs::create_dir(dir.join("configs")).unwrap();
    let custom = dir.join("configs/custom.pbtxt");
    std::fs::write(&custom, add_sub_config("simple", "version_policy: { specific: { versions: [ 1 ] } }")).unwrap();
    s.wait_until("configs/custom.pbtxt to be loaded", || ready(1) && !ready(2));
    assert_simple_answers(&s, "simple");
    std::fs::remove_file(&custom).unwrap();
    s.wait_until("config.pbtxt again", || ready(2) && !ready(1));
    let rows = s.post_json("/v2/repository/index", &json!({})).json();
    assert!(rows.as_array().unwrap().iter().any(|r| r["version"] == "2" && r["state"] == "READY"), "{rows}");
}

/// A load request's configuration is the client's: values that would exhaust the server or name
/// files outside the repository fail that load with the reason, and the model already loaded
/// keeps serving — a sequence state of 10^18 elements, 10^15 priority levels, 2^31 instances, a
/// backend or model file named by an absolute or `..` path, an ensemble step outside the
/// repositories.
#[test]
fn hostile_configurations_in_a_load_request_fail_only_their_load() {
    let repo = Repo::new();
    repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    repo.model("e", &ensemble_config("e"), &["1"]);
    // A loadable model in a folder beside the repository, which no request may reach.
    let outside = Repo::new();
    // Its configuration names no model (the folder's name is taken), as many do.
    outside.model("secret", &add_sub_config("secret", "").replacen("name: \"secret\"\n", "", 1), &["1"]);
    let s = Server::start(repo.path(), &["--model-control-mode", "explicit", "--load-model", "simple"]);
    let base = s.get("/v2/models/simple/config").json();
    let refused = |change: &dyn Fn(&mut Value), expected: &str| {
        let mut config = base.clone();
        change(&mut config);
        let r = load(&s, "simple", &json!({"parameters": {"config": config.to_string()}}));
        assert_ne!(r.status, 200, "{expected}: {}", r.text());
        assert!(r.error().contains(expected), "{expected}: {}", r.error());
        assert_simple_answers(&s, "simple");
    };
    refused(
        &|c| {
            c["sequence_batching"] = json!({"state": [{"input_name": "S_IN", "output_name": "S_OUT",
                "data_type": "TYPE_FP64", "dims": [1_000_000_000i64, 1_000_000_000i64]}]})
        },
        "state 'S_IN' with dims [1000000000, 1000000000] is larger than the 1024 MiB a sequence state may be",
    );
    refused(
        &|c| c["dynamic_batching"] = json!({"priority_levels": 1_000_000_000_000_000u64, "default_priority_level": 1}),
        "priority levels must be at most 65536 for simple",
    );
    refused(
        &|c| c["instance_group"] = json!([{"kind": "KIND_CPU", "count": 2147483647}]),
        "model simple asks for more than the 4096 instances a model may have",
    );
    let escape = format!("../{}/secret/1/secret", outside.path().file_name().unwrap().to_string_lossy());
    refused(&|c| c["backend"] = json!(escape), "must be a plain name: no path separators, not '..'");
    refused(&|c| c["backend"] = json!("/etc/passwd"), "must be a plain name");
    refused(&|c| c["default_model_filename"] = json!("../../x.onnx"), "must be a path inside the version folder");

    // An ensemble whose step names a model outside the repository: the step is not loaded.
    let step = format!("../{}/secret", outside.path().file_name().unwrap().to_string_lossy());
    let ensemble = json!({"name": "e", "platform": "ensemble", "max_batch_size": 8,
        "input": [{"name": "A", "data_type": "TYPE_INT32", "dims": [16]}, {"name": "B", "data_type": "TYPE_INT32", "dims": [16]}],
        "output": [{"name": "SUM", "data_type": "TYPE_INT32", "dims": [16]}],
        "ensemble_scheduling": {"step": [{"model_name": step, "model_version": -1,
            "input_map": {"INPUT0": "A", "INPUT1": "B"}, "output_map": {"OUTPUT0": "SUM"}}]}});
    let r = load(&s, "e", &json!({"parameters": {"config": ensemble.to_string()}}));
    assert_ne!(r.status, 200, "{}", r.text());
    assert!(index(&s).iter().all(|m| !m["name"].as_str().unwrap_or_default().contains("secret")), "{:?}", index(&s));
    assert_simple_answers(&s, "simple");
}
