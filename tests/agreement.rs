//! HTTP and gRPC agree: every route both protocols have gives the same answer on both — the same
//! data, or the same error (its HTTP status and gRPC code mapped as tritonserver maps them, and
//! the same message) — because both are codecs over one request layer.
use crate::common;

use std::collections::HashMap;

use bytes::Bytes;
use common::*;
use nereus::proto::inference as pb;
use pb::infer_parameter::ParameterChoice;
use pb::model_infer_request::InferRequestedOutputTensor;
use serde_json::{Value, json};
use tonic::Code;

/// An answer reduced to what both protocols must agree on.
#[derive(Debug, PartialEq)]
enum Outcome {
    Ok,
    Err(Code, String),
}

/// The gRPC code tritonserver's HTTP status stands for.
fn http_outcome(r: &Resp) -> Outcome {
    let code = match r.status {
        200 => return Outcome::Ok,
        400 => Code::InvalidArgument,
        404 => Code::NotFound,
        500 => Code::Internal,
        501 => Code::Unimplemented,
        503 => Code::Unavailable,
        other => panic!("unexpected HTTP status {other}: {}", r.text()),
    };
    Outcome::Err(code, r.error())
}

fn grpc_outcome<T>(r: Result<tonic::Response<T>, tonic::Status>) -> (Outcome, Option<T>) {
    match r {
        Ok(r) => (Outcome::Ok, Some(r.into_inner())),
        Err(s) => (Outcome::Err(s.code(), s.message().to_string()), None),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn param(v: ParameterChoice) -> pb::InferParameter {
    pb::InferParameter { parameter_choice: Some(v) }
}

/// A `simple` request over gRPC with INPUT0 = 0..16, INPUT1 = 1s, and the given changes.
fn grpc_simple(model: &str, version: &str, parameters: HashMap<String, pb::InferParameter>) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: model.into(),
        model_version: version.into(),
        id: "agree".into(),
        parameters,
        ..grpc_simple_request(1)
    }
}

#[test]
fn every_route_both_protocols_have_answers_alike() {
    let repo = Repo::new();
    repo.example("simple");
    repo.model("broken", "backend: \"nowhere\"\nmax_batch_size: 0\n", &["1"]);
    let s = Server::start(repo.path(), &["--strict-readiness=false"]);
    runtime().block_on(async {
        let mut c = grpc_client(&s).await;

        // Server metadata and health.
        let meta = s.get("/v2").json();
        let g = c.server_metadata(pb::ServerMetadataRequest {}).await.unwrap().into_inner();
        assert_eq!((meta["name"].as_str().unwrap(), meta["version"].as_str().unwrap()), (&*g.name, &*g.version));
        let extensions: Vec<String> =
            meta["extensions"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()).collect();
        assert_eq!(extensions, g.extensions);
        assert_eq!(
            s.get("/v2/health/live").status == 200,
            c.server_live(pb::ServerLiveRequest {}).await.unwrap().into_inner().live
        );
        assert_eq!(
            s.get("/v2/health/ready").status == 200,
            c.server_ready(pb::ServerReadyRequest {}).await.unwrap().into_inner().ready
        );
        for (model, version) in [("simple", ""), ("simple", "1"), ("simple", "2"), ("broken", ""), ("nope", "")] {
            let path = match version {
                "" => format!("/v2/models/{model}/ready"),
                v => format!("/v2/models/{model}/versions/{v}/ready"),
            };
            let ready = c
                .model_ready(pb::ModelReadyRequest { name: model.into(), version: version.into() })
                .await
                .unwrap()
                .into_inner()
                .ready;
            assert_eq!(s.get(&path).status == 200, ready, "{path}");
        }

        // Model metadata, configuration and statistics: found, unknown model, unknown version,
        // a model that failed to load.
        for (model, version) in [("simple", ""), ("simple", "1"), ("nope", ""), ("simple", "7"), ("broken", "")] {
            let base = match version {
                "" => format!("/v2/models/{model}"),
                v => format!("/v2/models/{model}/versions/{v}"),
            };
            let http = s.get(&base);
            let (grpc, g) = grpc_outcome(
                c.model_metadata(pb::ModelMetadataRequest { name: model.into(), version: version.into() }).await,
            );
            assert_eq!(http_outcome(&http), grpc, "metadata {base}");
            if let Some(g) = g {
                let h = http.json();
                assert_eq!(h["name"], g.name);
                let names = |v: &Value| -> Vec<String> {
                    v.as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap().to_string()).collect()
                };
                assert_eq!(names(&h["inputs"]), g.inputs.iter().map(|i| i.name.clone()).collect::<Vec<_>>());
                assert_eq!(names(&h["outputs"]), g.outputs.iter().map(|o| o.name.clone()).collect::<Vec<_>>());
                assert_eq!(h["versions"], json!(g.versions));
            }
            let http = s.get(&format!("{base}/config"));
            let (grpc, g) = grpc_outcome(
                c.model_config(pb::ModelConfigRequest { name: model.into(), version: version.into() }).await,
            );
            assert_eq!(http_outcome(&http), grpc, "config {base}");
            if let Some(g) = g {
                let g = g.config.unwrap();
                let h = http.json();
                assert_eq!(
                    (h["name"].as_str().unwrap(), h["max_batch_size"].as_i64().unwrap()),
                    (&*g.name, g.max_batch_size as i64)
                );
            }
            let http = s.get(&format!("{base}/stats"));
            let (grpc, g) = grpc_outcome(
                c.model_statistics(pb::ModelStatisticsRequest { name: model.into(), version: version.into() }).await,
            );
            assert_eq!(http_outcome(&http), grpc, "stats {base}");
            if let Some(g) = g {
                let names: Vec<String> = http.json()["model_stats"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| format!("{}:{}", m["name"].as_str().unwrap(), m["version"].as_str().unwrap()))
                    .collect();
                assert_eq!(
                    names,
                    g.model_stats.iter().map(|m| format!("{}:{}", m.name, m.version)).collect::<Vec<_>>()
                );
            }
        }
        let all = s.get("/v2/models/stats").json();
        let g = c.model_statistics(pb::ModelStatisticsRequest::default()).await.unwrap().into_inner();
        assert_eq!(all["model_stats"].as_array().unwrap().len(), g.model_stats.len());

        // Inference: an answer, and each kind of refusal, alike on both.
        let http_simple = |model: &str, params: Value| {
            let mut body = simple_request(1);
            body["id"] = json!("agree");
            body["parameters"] = params;
            s.post_json(&format!("/v2/models/{model}/infer"), &body)
        };
        let http = http_simple("simple", json!({}));
        let (grpc, g) = grpc_outcome(c.model_infer(grpc_simple("simple", "", HashMap::new())).await);
        assert_eq!((http_outcome(&http), grpc), (Outcome::Ok, Outcome::Ok));
        let g = g.unwrap();
        let sums: Vec<i32> =
            http.json()["outputs"][0]["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i32).collect();
        assert_eq!(le_i32(&sums), g.raw_output_contents[0].to_vec());
        assert_eq!(http.json()["id"], g.id);
        let refusals: Vec<(&str, Value, HashMap<String, pb::InferParameter>)> = vec![
            ("nope", json!({}), HashMap::new()),
            ("broken", json!({}), HashMap::new()),
            (
                "simple",
                json!({"priority": "high"}),
                HashMap::from([("priority".to_string(), param(ParameterChoice::StringParam("high".into())))]),
            ),
            (
                "simple",
                json!({"sequence_id": -1}),
                HashMap::from([("sequence_id".to_string(), param(ParameterChoice::Int64Param(-1)))]),
            ),
            (
                "simple",
                json!({"sequence_start": 1}),
                HashMap::from([("sequence_start".to_string(), param(ParameterChoice::Int64Param(1)))]),
            ),
        ];
        for (model, http_params, grpc_params) in refusals {
            let http = http_simple(model, http_params.clone());
            let (grpc, _) = grpc_outcome(c.model_infer(grpc_simple(model, "", grpc_params)).await);
            assert_ne!(grpc, Outcome::Ok, "{model} {http_params}");
            assert_eq!(http_outcome(&http), grpc, "{model} {http_params}");
        }
        // A wrong shape, an unknown input, an unknown shm region.
        let mut wrong_shape = simple_request(1);
        wrong_shape["inputs"][0]["shape"] = json!([1, 8]);
        wrong_shape["inputs"][0]["data"] = json!([0, 1, 2, 3, 4, 5, 6, 7]);
        let mut g_wrong_shape = grpc_simple("simple", "", HashMap::new());
        g_wrong_shape.inputs[0].shape = vec![1, 8];
        g_wrong_shape.raw_input_contents[0] = Bytes::from(le_i32(&(0..8).collect::<Vec<_>>()));
        let mut unknown_input = simple_request(1);
        unknown_input["inputs"][1]["name"] = json!("INPUT9");
        let mut g_unknown_input = grpc_simple("simple", "", HashMap::new());
        g_unknown_input.inputs[1].name = "INPUT9".into();
        let mut classify = simple_request(1);
        classify["outputs"] = json!([{"name": "OUTPUT0", "parameters": {"classification": -1}}]);
        let mut g_classify = grpc_simple("simple", "", HashMap::new());
        g_classify.outputs = vec![InferRequestedOutputTensor {
            name: "OUTPUT0".into(),
            parameters: HashMap::from([("classification".to_string(), param(ParameterChoice::Int64Param(-1)))]),
        }];
        let mut shm = simple_request(1);
        shm["inputs"][0] = json!({"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
            "parameters": {"shared_memory_region": "nowhere", "shared_memory_byte_size": 64}});
        let mut g_shm = grpc_simple("simple", "", HashMap::new());
        g_shm.inputs[0].parameters = HashMap::from([
            ("shared_memory_region".to_string(), param(ParameterChoice::StringParam("nowhere".into()))),
            ("shared_memory_byte_size".to_string(), param(ParameterChoice::Int64Param(64))),
        ]);
        g_shm.raw_input_contents.remove(0);
        for (what, body, request) in [
            ("wrong shape", wrong_shape, g_wrong_shape),
            ("unknown input", unknown_input, g_unknown_input),
            ("unknown shm region", shm, g_shm),
        ] {
            let http = s.post_json("/v2/models/simple/infer", &body);
            let (grpc, _) = grpc_outcome(c.model_infer(request).await);
            assert_ne!(grpc, Outcome::Ok, "{what}");
            assert_eq!(http_outcome(&http), grpc, "{what}");
        }
        // A negative class count: the same status, each protocol in tritonserver's words for it.
        let http = s.post_json("/v2/models/simple/infer", &classify);
        let (grpc, _) = grpc_outcome(c.model_infer(g_classify).await);
        match (http_outcome(&http), grpc) {
            (Outcome::Err(h, _), Outcome::Err(g, _)) => assert_eq!(h, g),
            other => panic!("a negative class count: {other:?}"),
        }

        // The repository: its index, and load/unload in control mode NONE.
        let index = s.post_json("/v2/repository/index", &json!({})).json();
        let g = c.repository_index(pb::RepositoryIndexRequest::default()).await.unwrap().into_inner();
        let http_index: Vec<(String, String, String)> = index
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                // HTTP leaves out what is empty, as tritonserver; gRPC has empty strings.
                let text = |key: &str| m.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
                (text("name"), text("state"), text("reason"))
            })
            .collect();
        assert_eq!(
            http_index,
            g.models.iter().map(|m| (m.name.clone(), m.state.clone(), m.reason.clone())).collect::<Vec<_>>()
        );
        let http = s.post_json("/v2/repository/models/simple/load", &json!({}));
        let (grpc, _) = grpc_outcome(
            c.repository_model_load(pb::RepositoryModelLoadRequest {
                model_name: "simple".into(),
                ..Default::default()
            })
            .await,
        );
        assert_eq!(http_outcome(&http), grpc);
        let http = s.post_json("/v2/repository/models/simple/unload", &json!({}));
        let (grpc, _) = grpc_outcome(
            c.repository_model_unload(pb::RepositoryModelUnloadRequest {
                model_name: "simple".into(),
                ..Default::default()
            })
            .await,
        );
        assert_eq!(http_outcome(&http), grpc);

        // Log settings.
        let http = s.get("/v2/logging").json();
        let g = c.log_settings(pb::LogSettingsRequest::default()).await.unwrap().into_inner();
        use pb::log_settings_response::setting_value::ParameterChoice as Log;
        for (key, value) in &g.settings {
            let expected = match value.parameter_choice.as_ref().unwrap() {
                Log::BoolParam(b) => json!(b),
                Log::Uint32Param(n) => json!(n),
                Log::StringParam(s) => json!(s),
            };
            assert_eq!(http[key], expected, "{key}");
        }

        // Shared memory with client shared memory off (system and CUDA), and the trace extension.
        let http = s.get("/v2/systemsharedmemory/status");
        let (grpc, g) =
            grpc_outcome(c.system_shared_memory_status(pb::SystemSharedMemoryStatusRequest::default()).await);
        assert_eq!((http_outcome(&http), grpc), (Outcome::Ok, Outcome::Ok));
        assert_eq!((http.json(), g.unwrap().regions.len()), (json!([]), 0));
        let http = s.post_json("/v2/systemsharedmemory/region/r/register", &json!({"key": "/k", "byte_size": 8}));
        let (grpc, _) = grpc_outcome(
            c.system_shared_memory_register(pb::SystemSharedMemoryRegisterRequest {
                name: "r".into(),
                key: "/k".into(),
                offset: 0,
                byte_size: 8,
            })
            .await,
        );
        assert_eq!(http_outcome(&http), grpc);
        let http = s.request("POST", "/v2/systemsharedmemory/unregister", &[], b"");
        let (grpc, _) =
            grpc_outcome(c.system_shared_memory_unregister(pb::SystemSharedMemoryUnregisterRequest::default()).await);
        assert_eq!(http_outcome(&http), grpc);
        let http = s.get("/v2/cudasharedmemory/region/g/status");
        let (grpc, _) =
            grpc_outcome(c.cuda_shared_memory_status(pb::CudaSharedMemoryStatusRequest { name: "g".into() }).await);
        assert_eq!(http_outcome(&http), grpc);
        let http = s.post_json("/v2/cudasharedmemory/region/g/register", &json!({"byte_size": 8}));
        let (grpc, _) = grpc_outcome(
            c.cuda_shared_memory_register(pb::CudaSharedMemoryRegisterRequest {
                name: "g".into(),
                ..Default::default()
            })
            .await,
        );
        assert_eq!(http_outcome(&http), grpc);
        // The trace extension: the same settings, and the same errors, on both.
        let trace_update = |settings: &[(&str, Option<&str>)]| pb::TraceSettingRequest {
            settings: settings
                .iter()
                .map(|(k, v)| {
                    let value = v.iter().map(|v| v.to_string()).collect();
                    (k.to_string(), pb::trace_setting_request::SettingValue { value })
                })
                .collect(),
            model_name: "simple".into(),
        };
        for (body, settings) in [
            (json!(null), vec![]),
            (
                json!({"trace_rate": "7", "log_frequency": "3"}),
                vec![("trace_rate", Some("7")), ("log_frequency", Some("3"))],
            ),
            (json!({"trace_rate": null}), vec![("trace_rate", None)]),
            (json!({"trace_count": "-5"}), vec![("trace_count", Some("-5"))]),
            (json!({"trace_rate": "x"}), vec![("trace_rate", Some("x"))]),
            (json!({"trace_file": "f.json"}), vec![("trace_file", Some("f.json"))]),
            (json!({"trace_level": ["OFF", "TIMESTAMPS"]}), vec![]),
        ] {
            let path = "/v2/models/simple/trace/setting";
            let http = if body.is_null() { s.get(path) } else { s.post_json(path, &body) };
            let mut request = trace_update(&settings);
            if let Some(levels) = body.get("trace_level") {
                let value = levels.as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect();
                request.settings.insert("trace_level".into(), pb::trace_setting_request::SettingValue { value });
            }
            let (grpc, g) = grpc_outcome(c.trace_setting(request).await);
            assert_eq!(http_outcome(&http), grpc, "{body}");
            if let Some(g) = g {
                let http = http.json();
                let http = http.as_object().unwrap();
                assert_eq!(http.len(), g.settings.len(), "{body}");
                for (key, value) in &g.settings {
                    let expected = if key == "trace_level" { json!(value.value) } else { json!(value.value[0]) };
                    assert_eq!(http[key], expected, "{key}");
                }
            }
        }
        for model in ["", "nope"] {
            let path = if model.is_empty() {
                "/v2/trace/setting".to_string()
            } else {
                format!("/v2/models/{model}/trace/setting")
            };
            let http = s.get(&path);
            let (grpc, _) = grpc_outcome(
                c.trace_setting(pb::TraceSettingRequest { model_name: model.into(), ..Default::default() }).await,
            );
            assert_eq!(http_outcome(&http), grpc, "{path}");
        }
    });
}

/// Routing: an endpoint asked with the wrong method answers 405 as tritonserver's does; unknown
/// paths 404; a trailing slash is the same path; a model name is percent-decoded.
#[test]
fn routes_methods_and_paths() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &[]);
    for (method, path) in [
        ("GET", "/v2/models/simple/infer"),
        ("POST", "/v2/health/ready"),
        ("DELETE", "/v2/models/simple"),
        ("GET", "/v2/systemsharedmemory/region/r/register"),
        ("POST", "/v2/systemsharedmemory/status"),
    ] {
        let r = s.request(method, path, &[], b"");
        assert_eq!(r.status, 405, "{method} {path}: {}", r.text());
        assert_eq!(r.error(), "Method Not Allowed");
    }
    for path in [
        "/v3",
        "/v2/models",
        "/v2/models/simple/versions",
        "/v2/models/simple/nope",
        "/v2/models/simple/versions/1/ready/x",
    ] {
        assert_eq!(s.get(path).status, 404, "{path}");
    }
    assert_eq!(s.get("/v2/models/simple/").status, 200);
    assert_eq!(s.get("/v2/models/%73imple").json()["name"], "simple");
    let r = s.get("/v2/models/simple/versions/x1");
    assert_eq!(r.status, 400);
    assert!(r.error().contains("not a number"), "{}", r.text());
}
