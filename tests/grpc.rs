//! Triton's gRPC protocol (`inference.GRPCInferenceService`) against the real `nereus` binary, with
//! a tonic client generated from the same schema.
use crate::common;

use bytes::Bytes;
use common::*;
use nereus::proto::health::health_client::HealthClient;
use nereus::proto::health::{HealthCheckRequest, health_check_response::ServingStatus};
use nereus::proto::inference as pb;
use nereus::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use nereus::proto::inference::infer_parameter::ParameterChoice;
use pb::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use tonic::Code;
use tonic::transport::Channel;

fn runtime() -> tokio::runtime::Runtime {
    // Multi-threaded: tests block this thread on HTTP polls while the gRPC connection keeps working.
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

async fn client(s: &Server) -> GrpcInferenceServiceClient<Channel> {
    grpc_client(s).await
}

fn examples() -> (Repo, Server) {
    let repo = Repo::new();
    for m in ["simple", "string_upper", "identity_fp32"] {
        repo.example(m);
    }
    let dir = repo.model("echo", &faults_config("echo", ""), &["1"]);
    install_faults_component(&dir);
    let s = Server::start(repo.path(), &[]);
    (repo, s)
}

fn raw_input(name: &str, datatype: &str, shape: Vec<i64>) -> InferInputTensor {
    InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape,
        parameters: Default::default(),
        contents: None,
    }
}

/// A raw-contents `simple` request: INPUT0 = 0..16, INPUT1 = `b`.
fn simple(b: i32, id: &str) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: "simple".into(),
        id: id.into(),
        inputs: vec![raw_input("INPUT0", "INT32", vec![1, 16]), raw_input("INPUT1", "INT32", vec![1, 16])],
        raw_input_contents: vec![Bytes::from(le_i32(&(0..16).collect::<Vec<_>>())), Bytes::from(le_i32(&[b; 16]))],
        ..Default::default()
    }
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn health_metadata_config_and_repository() {
    let (_repo, s) = examples();
    runtime().block_on(async {
        let mut c = client(&s).await;
        assert!(c.server_live(pb::ServerLiveRequest {}).await.unwrap().into_inner().live);
        assert!(c.server_ready(pb::ServerReadyRequest {}).await.unwrap().into_inner().ready);
        let ready = |name: &str, version: &str| pb::ModelReadyRequest { name: name.into(), version: version.into() };
        assert!(c.model_ready(ready("simple", "")).await.unwrap().into_inner().ready);
        assert!(c.model_ready(ready("simple", "1")).await.unwrap().into_inner().ready);
        assert!(!c.model_ready(ready("simple", "2")).await.unwrap().into_inner().ready);
        assert!(!c.model_ready(ready("nope", "")).await.unwrap().into_inner().ready);

        let meta = c.server_metadata(pb::ServerMetadataRequest {}).await.unwrap().into_inner();
        assert_eq!(meta.name, "nereus");
        assert!(meta.extensions.contains(&"statistics".to_string()));

        let m = c
            .model_metadata(pb::ModelMetadataRequest { name: "simple".into(), version: String::new() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (m.name.as_str(), m.versions.clone(), m.platform.as_str()),
            ("simple", vec!["1".to_string()], "add_sub")
        );
        assert_eq!(m.inputs[1].name, "INPUT1");
        assert_eq!(m.inputs[1].shape, vec![-1, 16]);
        let e = c
            .model_metadata(pb::ModelMetadataRequest { name: "nope".into(), version: String::new() })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound);
        let e = c
            .model_metadata(pb::ModelMetadataRequest { name: "simple".into(), version: "x".into() })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);

        let cfg = c
            .model_config(pb::ModelConfigRequest { name: "simple".into(), version: "1".into() })
            .await
            .unwrap()
            .into_inner();
        let cfg = cfg.config.unwrap();
        assert_eq!((cfg.name.as_str(), cfg.backend.as_str(), cfg.max_batch_size), ("simple", "add_sub", 8));
        assert_eq!(cfg.input[0].dims, vec![16]);
        assert_eq!(cfg.instance_group[0].count, 1);

        let index = c
            .repository_index(pb::RepositoryIndexRequest { repository_name: String::new(), ready: true })
            .await
            .unwrap();
        let names: Vec<String> =
            index.into_inner().models.into_iter().map(|m| format!("{}:{}:{}", m.name, m.version, m.state)).collect();
        assert_eq!(names, vec!["echo:1:READY", "identity_fp32:1:READY", "simple:1:READY", "string_upper:1:READY"]);
        let e = c
            .repository_model_load(pb::RepositoryModelLoadRequest { model_name: "simple".into(), ..Default::default() })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
        let e = c
            .repository_model_unload(pb::RepositoryModelUnloadRequest {
                model_name: "simple".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);

        // system shared memory is off without --allow-client-shm: registering is UNIMPLEMENTED
        // and says how to turn it on, the status has no regions (as tritonserver answers)
        let status = c.system_shared_memory_status(pb::SystemSharedMemoryStatusRequest::default()).await.unwrap();
        assert!(status.into_inner().regions.is_empty());
        let e = c
            .system_shared_memory_register(pb::SystemSharedMemoryRegisterRequest {
                name: "r".into(),
                key: "/nope".into(),
                offset: 0,
                byte_size: 8,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unimplemented);
        assert!(e.message().contains("--allow-client-shm=true"), "{e}");
        // CUDA shared memory: off with the rest of client shared memory
        let e = c.cuda_shared_memory_register(pb::CudaSharedMemoryRegisterRequest::default()).await.unwrap_err();
        assert_eq!(e.code(), Code::Unimplemented);
        // The trace extension answers (tracing off by default: its level is OFF).
        let t = c.trace_setting(pb::TraceSettingRequest::default()).await.unwrap().into_inner();
        assert_eq!(t.settings["trace_level"].value, ["OFF"]);
        assert_eq!(t.settings["trace_mode"].value, ["triton"]);

        let mut health = HealthClient::connect(format!("http://127.0.0.1:{}", s.grpc_port)).await.unwrap();
        let h = health.check(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
        assert_eq!(h.status, ServingStatus::Serving as i32);
    });
}

#[test]
fn log_settings_read_and_update() {
    let (_repo, s) = examples();
    runtime().block_on(async {
        use pb::log_settings_request::setting_value::ParameterChoice as In;
        use pb::log_settings_response::setting_value::ParameterChoice as Out;
        let mut c = client(&s).await;
        let current = c.log_settings(pb::LogSettingsRequest::default()).await.unwrap().into_inner().settings;
        assert_eq!(current["log_verbose_level"].parameter_choice, Some(Out::Uint32Param(0)));
        assert_eq!(current["log_info"].parameter_choice, Some(Out::BoolParam(true)));
        let set = |k: &str, v: In| {
            let mut r = pb::LogSettingsRequest::default();
            r.settings.insert(k.into(), pb::log_settings_request::SettingValue { parameter_choice: Some(v) });
            r
        };
        let after = c.log_settings(set("log_verbose_level", In::Uint32Param(2))).await.unwrap().into_inner().settings;
        assert_eq!(after["log_verbose_level"].parameter_choice, Some(Out::Uint32Param(2)));
        // and HTTP sees the same settings
        assert_eq!(s.get("/v2/logging").json()["log_verbose_level"], 2);
        let e = c.log_settings(set("log_info", In::StringParam("yes".into()))).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        let e = c.log_settings(set("no_such_setting", In::BoolParam(true))).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
    });
    let r = s.post_json("/v2/logging", &serde_json::json!({"log_verbose_level": 0, "log_warning": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["log_verbose_level"], 0);
}

/// At `--log-verbose=1` each call is logged over both protocols (tritonserver's "HTTP request:"
/// line with libevhtp's method number, a line per gRPC call), and each request as it reaches its
/// model, with what the client sent written as data; at 0 none is.
#[test]
fn verbose_log_follows_each_request() {
    let (_repo, s) = examples();
    let set_verbose = |level: u32| {
        let r = s.post_json("/v2/logging", &serde_json::json!({ "log_verbose_level": level }));
        assert_eq!(r.status, 200, "{}", r.text());
    };
    set_verbose(1);
    let r = s.post_json(
        "/v2/models/simple/infer",
        &serde_json::json!({
        "id": "forged\nI1125 00:00:00.000000 1 x.rs:1] \"ready\"",
        "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": vec![0; 16]},
                   {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": vec![0; 16]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    runtime().block_on(async {
        let mut c = client(&s).await;
        c.model_infer(simple(3, "g-verbose")).await.unwrap();
    });
    set_verbose(0);
    assert_eq!(s.get("/v2/models/simple/config").status, 200);
    // A request logged after it shows whether the quiet one was.
    set_verbose(1);
    assert_eq!(s.get("/v2/models/simple/ready").status, 200);
    s.wait_until("the last request's line", || s.log().contains("HTTP request: 0 /v2/models/simple/ready"));
    let log = s.log();
    assert!(log.contains("HTTP request: 2 /v2/models/simple/infer"), "{log}");
    assert!(log.contains("gRPC request: /inference.GRPCInferenceService/ModelInfer"), "{log}");
    let prepared = log.lines().find(|l| l.contains("g-verbose") && l.contains("prepared:")).expect("a prepared line");
    assert!(prepared.contains("model: simple, requested version: -1, actual version: 1"), "{prepared}");
    assert!(prepared.contains("inputs: [INPUT0 INT32 [1, 16] (64 bytes), INPUT1 INT32"), "{prepared}");
    assert!(!log.lines().any(|l| l.starts_with("I1125 00:00:00")), "a request id started a line:\n{log}");
    assert!(!log.contains("HTTP request: 0 /v2/models/simple/config"), "logged at verbose 0:\n{log}");
}

#[test]
fn unary_inference_raw_and_typed() {
    let (_repo, s) = examples();
    runtime().block_on(async {
        let mut c = client(&s).await;
        let r = c.model_infer(simple(3, "g-1")).await.unwrap().into_inner();
        assert_eq!((r.model_name.as_str(), r.model_version.as_str(), r.id.as_str()), ("simple", "1", "g-1"));
        assert_eq!(r.outputs.len(), 2);
        assert_eq!(r.outputs[0].name, "OUTPUT0");
        assert_eq!(r.outputs[0].shape, vec![1, 16]);
        assert_eq!(i32s(&r.raw_output_contents[0]), (3..19).collect::<Vec<_>>());
        assert_eq!(i32s(&r.raw_output_contents[1]), (-3..13).collect::<Vec<_>>());

        // typed contents, a requested subset of outputs and an explicit version
        let mut typed =
            pb::ModelInferRequest { model_name: "simple".into(), model_version: "1".into(), ..Default::default() };
        for (name, values) in [("INPUT0", vec![5; 16]), ("INPUT1", vec![2; 16])] {
            let mut t = raw_input(name, "INT32", vec![1, 16]);
            t.contents = Some(pb::InferTensorContents { int_contents: values, ..Default::default() });
            typed.inputs.push(t);
        }
        typed.outputs.push(InferRequestedOutputTensor { name: "OUTPUT1".into(), parameters: Default::default() });
        let r = c.model_infer(typed).await.unwrap().into_inner();
        assert_eq!(r.outputs.len(), 1);
        assert_eq!(i32s(&r.raw_output_contents[0]), vec![3; 16]);

        // BYTES through typed contents
        let mut t = raw_input("INPUT0", "BYTES", vec![2]);
        t.contents = Some(pb::InferTensorContents {
            bytes_contents: vec![Bytes::from_static(b"grpc"), Bytes::from_static("ünï".as_bytes())],
            ..Default::default()
        });
        let r = c
            .model_infer(pb::ModelInferRequest {
                model_name: "string_upper".into(),
                inputs: vec![t],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let out = &r.raw_output_contents[0];
        let elements: Vec<String> = {
            let mut v = Vec::new();
            let mut d = &out[..];
            while d.len() >= 4 {
                let n = u32::from_le_bytes([d[0], d[1], d[2], d[3]]) as usize;
                v.push(String::from_utf8(d[4..4 + n].to_vec()).unwrap());
                d = &d[4 + n..];
            }
            v
        };
        assert_eq!(elements, vec!["GRPC".to_string(), "ÜNÏ".to_string()]);

        // FP32 raw (the only way for FP16/BF16 too)
        let data: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|f| f.to_le_bytes()).collect();
        let r = c
            .model_infer(pb::ModelInferRequest {
                model_name: "identity_fp32".into(),
                inputs: vec![raw_input("INPUT0", "FP32", vec![1, 2])],
                raw_input_contents: vec![Bytes::from(data.clone())],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(&r.raw_output_contents[0][..], &data[..]);

        // request parameters reach the backend; the backend's response parameters come back
        let mut echo = pb::ModelInferRequest { model_name: "echo".into(), id: "e".into(), ..Default::default() };
        let mut t = raw_input("INPUT0", "INT32", vec![2]);
        t.contents = Some(pb::InferTensorContents { int_contents: vec![7, 8], ..Default::default() });
        echo.inputs.push(t);
        for (k, v) in [
            ("b", ParameterChoice::BoolParam(true)),
            ("i", ParameterChoice::Int64Param(-5)),
            ("u", ParameterChoice::Uint64Param(u64::MAX)),
            ("d", ParameterChoice::DoubleParam(0.25)),
            ("s", ParameterChoice::StringParam("x".into())),
            ("sequence_id", ParameterChoice::Uint64Param(4)),
        ] {
            echo.parameters.insert(k.into(), pb::InferParameter { parameter_choice: Some(v) });
        }
        let r = c.model_infer(echo).await.unwrap().into_inner();
        let p = |k: &str| r.parameters.get(k).and_then(|p| p.parameter_choice.clone());
        assert_eq!(p("b"), Some(ParameterChoice::BoolParam(true)));
        assert_eq!(p("i"), Some(ParameterChoice::Int64Param(-5)));
        assert_eq!(p("u"), Some(ParameterChoice::Uint64Param(u64::MAX)));
        assert_eq!(p("d"), Some(ParameterChoice::DoubleParam(0.25)));
        assert_eq!(p("s"), Some(ParameterChoice::StringParam("x".into())));
        assert_eq!(p("echo_id"), Some(ParameterChoice::StringParam("e".into())));
        assert_eq!(p("sequence_id"), None, "reserved parameters are not custom");
    });
}

#[test]
fn unary_errors_map_to_grpc_codes() {
    let (_repo, s) = examples();
    runtime().block_on(async {
        let mut c = client(&s).await;
        let mut unknown = simple(1, "");
        unknown.model_name = "nope".into();
        assert_eq!(c.model_infer(unknown).await.unwrap_err().code(), Code::NotFound);
        let mut version = simple(1, "");
        version.model_version = "9".into();
        assert_eq!(c.model_infer(version).await.unwrap_err().code(), Code::NotFound);
        let mut dtype = simple(1, "");
        dtype.inputs[0].datatype = "FP32".into();
        let e = c.model_infer(dtype).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("data-type is 'FP32'"), "{}", e.message());
        let mut short = simple(1, "");
        short.raw_input_contents[1] = Bytes::from_static(&[0; 60]);
        let e = c.model_infer(short).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("Expected 64, got 60"), "{}", e.message());
        let mut missing = simple(1, "");
        missing.raw_input_contents.pop();
        assert_eq!(c.model_infer(missing).await.unwrap_err().code(), Code::InvalidArgument);
        let mut fp16 = raw_input("INPUT0", "FP16", vec![1, 1]);
        fp16.contents = Some(pb::InferTensorContents::default());
        let e = c
            .model_infer(pb::ModelInferRequest {
                model_name: "identity_fp32".into(),
                inputs: vec![fp16],
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        let mut trap = pb::ModelInferRequest { model_name: "echo".into(), ..Default::default() };
        let mut t = raw_input("INPUT0", "INT32", vec![1]);
        t.contents = Some(pb::InferTensorContents { int_contents: vec![1], ..Default::default() });
        trap.inputs.push(t);
        trap.parameters.insert(
            "fault".into(),
            pb::InferParameter { parameter_choice: Some(ParameterChoice::StringParam("trap".into())) },
        );
        let e = c.model_infer(trap).await.unwrap_err();
        assert_eq!(e.code(), Code::Internal);
        assert!(e.message().contains("echo") && e.message().contains("trapped"), "{}", e.message());
        // still serving
        assert_eq!(i32s(&c.model_infer(simple(1, "")).await.unwrap().into_inner().raw_output_contents[0])[0], 1);
    });
}

#[test]
fn streaming_many_requests_and_errors_on_one_stream() {
    let (_repo, s) = examples();
    runtime().block_on(async {
        let mut c = client(&s).await;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut responses =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        let mut bad = simple(0, "bad");
        bad.inputs[0].name = "NOPE".into();
        tx.send(simple(1, "a")).await.unwrap();
        tx.send(bad).await.unwrap();
        tx.send(simple(2, "b")).await.unwrap();
        let mut got = std::collections::BTreeMap::new();
        for _ in 0..3 {
            let r = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
            let resp = r.infer_response.unwrap();
            got.insert(resp.id.clone(), (r.error_message, resp.raw_output_contents.first().map(|b| i32s(b)[0])));
        }
        assert_eq!(got["a"], (String::new(), Some(1)));
        assert_eq!(got["b"], (String::new(), Some(2)));
        assert!(got["bad"].0.contains("unexpected inference input 'NOPE'"), "{:?}", got["bad"]);
        // the stream survives the error
        tx.send(simple(3, "c")).await.unwrap();
        let r = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
        assert_eq!(r.infer_response.unwrap().id, "c");
        drop(tx);
        let end = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap();
        assert!(end.is_none(), "the stream ends after the client closes its side");
    });
}

#[test]
fn streamed_responses_arrive_as_they_complete() {
    let (_repo, s) = examples();
    runtime().block_on(async {
        let mut c = client(&s).await;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut responses =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        // hold `simple` at the gate: the echo request sent after it must come back first
        s.gate("simple", false);
        tx.send(simple(1, "held")).await.unwrap();
        s.wait_until("simple executing", || s.executions("simple").0 == 1);
        let mut echo = pb::ModelInferRequest { model_name: "echo".into(), id: "quick".into(), ..Default::default() };
        let mut t = raw_input("INPUT0", "INT32", vec![1]);
        t.contents = Some(pb::InferTensorContents { int_contents: vec![9], ..Default::default() });
        echo.inputs.push(t);
        tx.send(echo).await.unwrap();
        let first = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
        assert_eq!(first.infer_response.unwrap().id, "quick");
        s.gate("simple", true);
        let second = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
        assert_eq!(second.infer_response.unwrap().id, "held");
    });
}

#[test]
fn statistics_over_grpc() {
    let (_repo, s) = examples();
    runtime().block_on(async {
        let mut c = client(&s).await;
        for i in 0..4 {
            c.model_infer(simple(i, "")).await.unwrap();
        }
        let mut bad = simple(0, "");
        bad.model_version = "1".into();
        bad.inputs[0].shape = vec![2, 16];
        assert!(c.model_infer(bad).await.is_err());
        let stats = c
            .model_statistics(pb::ModelStatisticsRequest { name: "simple".into(), version: String::new() })
            .await
            .unwrap()
            .into_inner();
        let m = &stats.model_stats[0];
        assert_eq!((m.name.as_str(), m.version.as_str(), m.inference_count, m.execution_count), ("simple", "1", 4, 4));
        let inf = m.inference_stats.as_ref().unwrap();
        assert_eq!(inf.success.as_ref().unwrap().count, 4);
        assert_eq!(inf.compute_infer.as_ref().unwrap().count, 4);
        assert_eq!(m.batch_stats.len(), 1);
        assert_eq!(m.batch_stats[0].batch_size, 1);
        let all = c.model_statistics(pb::ModelStatisticsRequest::default()).await.unwrap().into_inner();
        assert_eq!(all.model_stats.len(), 4);
        let e = c
            .model_statistics(pb::ModelStatisticsRequest { name: "nope".into(), version: String::new() })
            .await
            .unwrap_err();
        assert_eq!((e.code(), e.message()), (Code::InvalidArgument, "requested model 'nope' is not available"));
    });
}

/// A `repeat_int32` request.
fn repeat(values: &[i32], delays: &[u32], wait: u32, id: &str, empty_final: bool) -> pb::ModelInferRequest {
    let u32s = |v: &[u32]| Bytes::from(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
    let mut r = pb::ModelInferRequest {
        model_name: "repeat_int32".into(),
        id: id.into(),
        inputs: vec![
            raw_input("IN", "INT32", vec![values.len() as i64]),
            raw_input("DELAY", "UINT32", vec![delays.len() as i64]),
            raw_input("WAIT", "UINT32", vec![1]),
        ],
        raw_input_contents: vec![Bytes::from(le_i32(values)), u32s(delays), u32s(&[wait])],
        ..Default::default()
    };
    if empty_final {
        r.parameters.insert(
            "triton_enable_empty_final_response".into(),
            pb::InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(true)) },
        );
    }
    r
}

fn final_flag(r: &pb::ModelInferResponse) -> Option<bool> {
    match r.parameters.get("triton_final_response").and_then(|p| p.parameter_choice.clone()) {
        Some(ParameterChoice::BoolParam(b)) => Some(b),
        _ => None,
    }
}

#[test]
fn decoupled_model_streams_each_response_then_the_final_flag() {
    let repo = Repo::new();
    repo.example("repeat_int32");
    let s = Server::start(repo.path(), &[]);
    runtime().block_on(async {
        let mut c = client(&s).await;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut responses =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        // two requests in flight at once (the model has two instances), one with an empty final response
        tx.send(repeat(&[10, 20, 30], &[0, 1, 0], 0, "r1", true)).await.unwrap();
        tx.send(repeat(&[7, 8], &[0, 0], 0, "r2", false)).await.unwrap();
        // per request id: (OUT, IDX, final flag) of each response
        type Seen = std::collections::BTreeMap<String, Vec<(Option<i32>, Option<u32>, Option<bool>)>>;
        let mut seen: Seen = Default::default();
        // r1: 3 responses + 1 empty final; r2: 2 responses (its final flag travels alone, unsent)
        for _ in 0..6 {
            let m = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
            assert!(m.error_message.is_empty(), "{}", m.error_message);
            let r = m.infer_response.unwrap();
            let out = r.raw_output_contents.first().map(|b| i32s(b)[0]);
            let idx = r.raw_output_contents.get(1).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            seen.entry(r.id.clone()).or_default().push((out, idx, final_flag(&r)));
        }
        assert_eq!(
            seen["r1"],
            vec![
                (Some(10), Some(0), Some(false)),
                (Some(20), Some(1), Some(false)),
                (Some(30), Some(2), Some(false)),
                (None, None, Some(true))
            ]
        );
        assert_eq!(seen["r2"], vec![(Some(7), Some(0), Some(false)), (Some(8), Some(1), Some(false))]);
        // a request the backend rejects gets its error on the stream, which stays usable
        tx.send(repeat(&[1, 2], &[0], 0, "bad", true)).await.unwrap();
        let m = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
        assert!(m.error_message.contains("DELAY has 1 elements but IN has 2"), "{}", m.error_message);
        tx.send(repeat(&[5], &[0], 0, "after", true)).await.unwrap();
        let m = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
        assert_eq!(m.infer_response.unwrap().id, "after");

        // decoupled models answer only on the stream, as Triton's
        let e = c.model_infer(repeat(&[1], &[0], 0, "", false)).await.unwrap_err();
        assert_eq!(e.code(), Code::Unimplemented);
        assert!(
            e.message().contains("ModelInfer RPC doesn't support models with decoupled transaction policy"),
            "{}",
            e.message()
        );
    });
    let r = s.post_json(
        "/v2/models/repeat_int32/infer",
        &serde_json::json!({"inputs": [
            {"name": "IN", "shape": [1], "datatype": "INT32", "data": [1]},
            {"name": "DELAY", "shape": [1], "datatype": "UINT32", "data": [0]},
            {"name": "WAIT", "shape": [1], "datatype": "UINT32", "data": [0]}]}),
    );
    assert_eq!(r.status, 501, "{}", r.text());
    assert!(r.error().contains("HTTP end point doesn't support models with decoupled transaction policy"));
    // every completed request is counted, the flag-only completions included
    s.wait_until("three successful repeat requests", || {
        s.get("/v2/models/repeat_int32/stats").json()["model_stats"][0]["inference_stats"]["success"]["count"] == 3
    });
    // response_stats by response index: r1 sent 3 responses + a final flag, r2 2 + a flag, "after" 1 + a
    // flag, "bad" failed at once
    let stats = s.get("/v2/models/repeat_int32/stats").json();
    let rs = &stats["model_stats"][0]["response_stats"];
    let count = |k: &str, what: &str| rs[k][what]["count"].as_u64().unwrap_or(0);
    assert_eq!((count("0", "success"), count("0", "fail")), (3, 1), "{rs}");
    assert_eq!((count("1", "success"), count("1", "empty_response")), (2, 1), "{rs}");
    assert_eq!((count("2", "success"), count("2", "empty_response")), (1, 1), "{rs}");
    assert_eq!((count("3", "success"), count("3", "empty_response")), (0, 1), "{rs}");
}

/// A model that is not decoupled whose backend sends several responses and then the final flag
/// alone (Triton's repeat backend configured without `decoupled: true`, as L0_grpc_state_cleanup
/// runs it): a stream gets the first response, as tritonserver's writes it; a unary call its one
/// response, or tritonserver's error when the backend sent more than one.
#[test]
fn a_non_decoupled_models_early_responses_settle_when_it_completes() {
    let repo = Repo::new();
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../model_repository/repeat_int32/config.pbtxt"),
    )
    .unwrap();
    let config: String = example
        .lines()
        .filter(|l| !l.contains("model_transaction_policy") && !l.starts_with('#'))
        .map(|l| l.replace(r#"name: "repeat_int32""#, r#"name: "repeat_nd""#) + "\n")
        .collect();
    assert!(config.contains(r#"name: "repeat_nd""#) && !config.contains("decoupled"), "{config}");
    repo.model("repeat_nd", &config, &["1"]);
    let s = Server::start(repo.path(), &[]);
    let nd = |values: &[i32], id: &str| pb::ModelInferRequest {
        model_name: "repeat_nd".into(),
        ..repeat(values, &vec![0; values.len()], 0, id, false)
    };
    runtime().block_on(async {
        let mut c = client(&s).await;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut responses =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        // four responses, then the flag: the stream answers once, with the first
        tx.send(nd(&[10, 20, 30, 40], "four")).await.unwrap();
        let m = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
        assert!(m.error_message.is_empty(), "{}", m.error_message);
        let r = m.infer_response.unwrap();
        assert_eq!((r.id.as_str(), i32s(&r.raw_output_contents[0])[0]), ("four", 10));
        assert_eq!(i32s(&r.raw_output_contents[1])[0], 0, "IDX of the first response");
        // nothing else of that request comes: the next message answers the next request
        tx.send(nd(&[5], "one")).await.unwrap();
        let m = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
        let r = m.infer_response.unwrap();
        assert_eq!((r.id.as_str(), i32s(&r.raw_output_contents[0])[0]), ("one", 5));

        // unary: one response before the flag is the answer; two are tritonserver's error
        let r = c.model_infer(nd(&[7], "")).await.unwrap().into_inner();
        assert_eq!(i32s(&r.raw_output_contents[0]), vec![7]);
        let e = c.model_infer(nd(&[7, 8], "")).await.unwrap_err();
        assert_eq!((e.code(), e.message()), (Code::Internal, "expected a single response, got 2"));
    });
    let http = |values: &[i32]| {
        let n = values.len();
        s.post_json(
            "/v2/models/repeat_nd/infer",
            &serde_json::json!({"inputs": [
                {"name": "IN", "shape": [n], "datatype": "INT32", "data": values},
                {"name": "DELAY", "shape": [n], "datatype": "UINT32", "data": vec![0; n]},
                {"name": "WAIT", "shape": [1], "datatype": "UINT32", "data": [0]}]}),
        )
    };
    let r = http(&[3]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["data"], serde_json::json!([3]));
    let r = http(&[3, 4, 5]);
    assert_eq!((r.status, r.error()), (500, "expected a single response, got 3".to_string()));
    // the model keeps serving
    assert_eq!(http(&[9]).status, 200);
}

/// `--grpc-restricted-protocol`, as tritonserver: a restricted call without the
/// `triton-grpc-protocol-<key>` header answers UNAVAILABLE with Triton's message, streams included;
/// with it the call succeeds; other protocols stay open.
/// Requests compressed with deflate or gzip are accepted, as gRPC core accepts them; inference
/// responses are compressed only at a --grpc-infer-response-compression-level above none (Triton's
/// L0_grpc runs its deflate example against `high`), and other responses never.
#[test]
fn compressed_requests_and_responses() {
    use tonic::codec::CompressionEncoding::{Deflate, Gzip};
    let repo = Repo::new();
    repo.example("simple");
    for (level, compressed) in [("none", false), ("high", true)] {
        let flag = format!("--grpc-infer-response-compression-level={level}");
        let s = Server::start(repo.path(), &[&flag]);
        runtime().block_on(async {
            for encoding in [Deflate, Gzip] {
                let mut c = client(&s).await.send_compressed(encoding).accept_compressed(encoding);
                let r = c.model_infer(simple(1, "z")).await.unwrap();
                let answered = r.metadata().get("grpc-encoding").map(|v| v.to_str().unwrap().to_string());
                let want = compressed.then(|| encoding.to_string());
                assert_eq!(answered, want, "{level} {encoding}");
                let out = r.into_inner();
                assert_eq!(i32s(&out.raw_output_contents[0]), (1..17).collect::<Vec<_>>());
                // Only inference responses are compressed, as in tritonserver.
                let m = c.server_metadata(pb::ServerMetadataRequest {}).await.unwrap();
                assert!(m.metadata().get("grpc-encoding").is_none(), "{level} {encoding}: metadata compressed");
            }
        });
    }
}

#[test]
fn restricted_protocols_need_their_header() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--grpc-restricted-protocol", "health,inference:infer-key=go"]);
    runtime().block_on(async {
        let mut c = client(&s).await;
        let expected = "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'";
        let e = c.server_live(pb::ServerLiveRequest {}).await.unwrap_err();
        assert_eq!((e.code(), e.message()), (Code::Unavailable, expected));
        let with_key = |mut r: tonic::Request<pb::ServerLiveRequest>| {
            r.metadata_mut().insert("triton-grpc-protocol-infer-key", "go".parse().unwrap());
            r
        };
        assert!(
            c.server_live(with_key(tonic::Request::new(pb::ServerLiveRequest {}))).await.unwrap().into_inner().live
        );
        let mut wrong = tonic::Request::new(pb::ServerLiveRequest {});
        wrong.metadata_mut().insert("triton-grpc-protocol-infer-key", "no".parse().unwrap());
        assert_eq!(c.server_live(wrong).await.unwrap_err().code(), Code::Unavailable);
        // Streams are refused before any request is read.
        let (_tx, rx) = tokio::sync::mpsc::channel::<pb::ModelInferRequest>(1);
        let e = c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap_err();
        assert_eq!((e.code(), e.message()), (Code::Unavailable, expected));
        // The standard health service is in the `health` group too.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", s.grpc_port))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let e = HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
        // Open protocols need nothing.
        let meta = c.model_metadata(pb::ModelMetadataRequest { name: "simple".into(), version: String::new() }).await;
        assert_eq!(meta.unwrap().into_inner().name, "simple");
    });
}

/// Cancelling a stream cancels its requests: `repeat_int32` checks `is-cancelled` while it waits
/// and completes early, freeing its instances. Each request would otherwise take more than a day
/// (100000 responses a second apart), so only the cancellation can let them end in the test's bound.
#[test]
fn a_cancelled_stream_stops_its_decoupled_requests() {
    let repo = Repo::new();
    repo.example("repeat_int32"); // two instances
    let s = Server::start(repo.path(), &[]);
    let values: Vec<i32> = (0..100_000).collect();
    let delays: Vec<u32> = std::iter::once(0).chain(std::iter::repeat_n(1000, values.len() - 1)).collect();
    runtime().block_on(async {
        let mut c = client(&s).await;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut responses =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        for id in ["long1", "long2", "queued"] {
            tx.send(repeat(&values, &delays, 0, id, false)).await.unwrap();
        }
        // the first two are running (each sent its first response); the third waits for an instance
        for _ in 0..2 {
            let m = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
            assert!(m.error_message.is_empty(), "{}", m.error_message);
        }
        drop(responses); // cancels the call
        drop(tx);
    });
    // both completed early, with their one response and the final flag
    s.wait_until("the cancelled requests to complete", || {
        s.get("/v2/models/repeat_int32/stats").json()["model_stats"][0]["inference_stats"]["success"]["count"] == 2
    });
    // the waiting one is answered CANCELLED once an instance takes it, which tritonserver counts
    // as a response apart from the failures
    s.wait_until("the queued request to be answered", || {
        s.get("/v2/models/repeat_int32/stats").json()["model_stats"][0]["response_stats"]["0"]["cancel"]["count"] == 1
    });
    let stats = s.get("/v2/models/repeat_int32/stats").json();
    let rs = &stats["model_stats"][0]["response_stats"];
    assert_eq!(rs["0"]["success"]["count"], 2, "{rs}");
    assert_eq!(rs["0"]["fail"]["count"], 0, "{rs}");
    assert_eq!(rs["1"]["empty_response"]["count"], 2, "{rs}");
    // and the instances serve a new stream
    runtime().block_on(async {
        let mut c = client(&s).await;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut responses =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        tx.send(repeat(&[42], &[0], 0, "after", true)).await.unwrap();
        let m = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
        assert_eq!(m.infer_response.unwrap().raw_output_contents[0].as_ref(), 42i32.to_le_bytes());
    });
}

/// A request for `waiting_faults_model`'s model named `waiter`, with the `fault` parameter when
/// given (`until_cancelled`: it waits until its request is cancelled).
fn waiter_request(fault: Option<&str>) -> pb::ModelInferRequest {
    let mut parameters = std::collections::HashMap::new();
    if let Some(fault) = fault {
        parameters.insert(
            "fault".to_string(),
            pb::InferParameter { parameter_choice: Some(ParameterChoice::StringParam(fault.into())) },
        );
    }
    pb::ModelInferRequest {
        model_name: "waiter".into(),
        inputs: vec![raw_input("INPUT0", "INT32", vec![2])],
        raw_input_contents: vec![Bytes::from(le_i32(&[7, 8]))],
        parameters,
        ..Default::default()
    }
}

/// A call's deadline (`grpc-timeout`) is kept by the server as gRPC core keeps it: a call still
/// running when it passes ends with DEADLINE_EXCEEDED "Deadline Exceeded" (tonic's own server says
/// CANCELLED "Timeout expired"), and its request is cancelled. The calls go over a bare HTTP/2
/// connection, with no timer on the client's side, so the status read is the server's.
#[test]
fn a_call_past_its_deadline_ends_with_deadline_exceeded_and_is_cancelled() {
    use prost::Message;
    let repo = Repo::new();
    waiting_faults_model(&repo, "waiter");
    let s = Server::start(repo.path(), &[]);
    let request = |fault: Option<&str>| {
        let message = waiter_request(fault).encode_to_vec();
        grpc_framed(0, message.len(), &message)
    };
    runtime().block_on(async {
        // Waits until cancelled: only the deadline can end it.
        let call = raw_call_with(&s, "ModelInfer", request(Some("until_cancelled")), &[("grpc-timeout", "200m")]);
        let (_, status, message) = tokio::time::timeout(WAIT, call).await.expect("the server ends the call");
        assert_eq!((status.as_str(), message.as_str()), ("4", "Deadline Exceeded"));
        // A deadline the call meets changes nothing.
        let (body, status, message) = raw_call_with(&s, "ModelInfer", request(None), &[("grpc-timeout", "60S")]).await;
        assert_eq!(status, "0", "{message}");
        let answer = pb::ModelInferResponse::decode(&body[5..]).unwrap();
        assert_eq!(i32s(&answer.raw_output_contents[0]), [7, 8]);
    });
    // The first request ended as cancelled, counted as a failure, and freed the model's one
    // instance for the second.
    let stats = s.get("/v2/models/waiter/stats").json();
    let inference = &stats["model_stats"][0]["inference_stats"];
    assert_eq!(inference["fail"]["count"], 1, "{inference}");
    assert_eq!(inference["success"]["count"], 1, "{inference}");
}

/// A call its client cancels is logged at `--log-verbose=1` with tritonserver's line, once
/// ("Cancellation notification received for ModelInferHandler", or `ModelStreamInferHandler` for a
/// stream; Triton's L0_request_cancellation counts them); an answered call logs none.
#[test]
fn a_cancelled_call_is_logged_once_as_tritonserver_logs_it() {
    use prost::Message;
    let repo = Repo::new();
    waiting_faults_model(&repo, "waiter");
    repo.example("simple");
    // The tests' servers log at info whatever their flags (NEREUS_LOG): this one's verbose lines.
    let s = Server::start_with_env(repo.path(), &["--log-verbose=1"], &[("NEREUS_LOG", "debug")]);
    let notices = |handler: &str| s.log().matches(&format!("Cancellation notification received for {handler}")).count();
    let waiting = waiter_request(Some("until_cancelled")).encode_to_vec();
    let failed =
        || s.get("/v2/models/waiter/stats").json()["model_stats"][0]["inference_stats"]["fail"]["count"].clone();
    // Each runtime ends with its block, and its connections with it (the server sees them go).
    runtime().block_on(async {
        let mut c = client(&s).await;
        c.model_infer(grpc_simple_request(1)).await.unwrap();
        // The client gives the call up (its future dropped: RST_STREAM) while the model waits.
        let call = raw_call_with(&s, "ModelInfer", grpc_framed(0, waiting.len(), &waiting), &[]);
        assert!(tokio::time::timeout(std::time::Duration::from_millis(300), call).await.is_err());
    });
    s.wait_until("the cancelled call's notice and its request's end", || {
        notices("ModelInferHandler") == 1 && failed() == 1
    });
    // A stream whose one request waits until cancelled: only the client's going can end it.
    runtime().block_on(async {
        let mut c = client(&s).await;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut responses =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        tx.send(waiter_request(Some("until_cancelled"))).await.unwrap();
        assert!(tokio::time::timeout(std::time::Duration::from_millis(300), responses.message()).await.is_err());
    });
    s.wait_until("the cancelled stream's notice and its request's end", || {
        notices("ModelStreamInferHandler") == 1 && failed() == 2
    });
    assert_eq!((notices("ModelInferHandler"), notices("ModelStreamInferHandler")), (1, 1), "{}", s.log());
}

/// tritonserver's testing hooks `TRITONSERVER_DELAY_RESPONSE_COMPLETION` and `_COMPLETE_EXEC`
/// (Triton's L0_request_cancellation sets them) hold a `ModelInfer` answer back once its request
/// is done: a deadline shorter than the hold ends the call although its request succeeded; other
/// calls are not held.
#[test]
fn the_response_completion_hooks_hold_a_model_infer_answer_back() {
    use prost::Message;
    let repo = Repo::new();
    repo.example("simple");
    let env =
        [("TRITONSERVER_DELAY_RESPONSE_COMPLETION", "300000"), ("TRITONSERVER_DELAY_RESPONSE_COMPLETE_EXEC", "300000")];
    let s = Server::start_with_env(repo.path(), &[], &env);
    let message = grpc_simple_request(1).encode_to_vec();
    runtime().block_on(async {
        let call = raw_call_with(&s, "ModelInfer", grpc_framed(0, message.len(), &message), &[("grpc-timeout", "1S")]);
        let (_, status, message) = tokio::time::timeout(WAIT, call).await.expect("the deadline ends the call");
        assert_eq!((status.as_str(), message.as_str()), ("4", "Deadline Exceeded"));
        let ready = pb::ModelReadyRequest { name: "simple".into(), version: String::new() }.encode_to_vec();
        let call = raw_call_with(&s, "ModelReady", grpc_framed(0, ready.len(), &ready), &[("grpc-timeout", "60S")]);
        let (body, status, message) = tokio::time::timeout(WAIT, call).await.expect("not held");
        assert_eq!(status, "0", "{message}");
        assert!(pb::ModelReadyResponse::decode(&body[5..]).unwrap().ready);
    });
    let stats = s.get("/v2/models/simple/stats").json();
    let inference = &stats["model_stats"][0]["inference_stats"];
    assert_eq!((inference["success"]["count"].as_u64(), inference["fail"]["count"].as_u64()), (Some(1), Some(0)));
}

/// Sends `body` as one `ModelInfer` call over a bare HTTP/2 connection (no gRPC library in the
/// way, so that the message may be malformed) and returns the call's `grpc-status` and
/// `grpc-message`, from the headers of a trailers-only answer or from the trailers.
async fn raw_model_infer(s: &Server, body: Vec<u8>) -> (String, String) {
    let (_, status, message) = raw_call(s, "ModelInfer", body).await;
    (status, message)
}

/// Sends `body` as one call of `method` over a bare HTTP/2 connection: the answer's body, and its
/// `grpc-status` and `grpc-message` (see [`raw_model_infer`]).
async fn raw_call(s: &Server, method: &str, body: Vec<u8>) -> (Bytes, String, String) {
    raw_call_with(s, method, body, &[]).await
}

/// [`raw_call`] with more request headers.
async fn raw_call_with(s: &Server, method: &str, body: Vec<u8>, headers: &[(&str, &str)]) -> (Bytes, String, String) {
    use http_body_util::BodyExt;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", s.grpc_port)).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut request =
        hyper::Request::post(format!("http://127.0.0.1:{}/inference.GRPCInferenceService/{method}", s.grpc_port))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(http_body_util::Full::new(Bytes::from(body))).unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let get = |name: &str| {
        let value = parts.headers.get(name).or_else(|| trailers.get(name));
        value.map(|v| percent_decoded(v.to_str().unwrap())).unwrap_or_default()
    };
    (collected.to_bytes(), get("grpc-status"), get("grpc-message"))
}

/// An `identity_fp32` request of 1.2 MB, whose answer's tensor is a frame of its own.
fn large_identity_request() -> pb::ModelInferRequest {
    let values: Vec<f32> = (0..300_000).map(|i| i as f32 * 0.5).collect();
    pb::ModelInferRequest {
        model_name: "identity_fp32".into(),
        id: "large".into(),
        inputs: vec![raw_input("INPUT0", "FP32", vec![1, values.len() as i64])],
        raw_input_contents: vec![Bytes::from(values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())],
        ..Default::default()
    }
}

/// A message with its gRPC prefix: the compressed flag and the length announced.
fn grpc_framed(flag: u8, length: usize, message: &[u8]) -> Vec<u8> {
    let mut body = vec![flag];
    body.extend_from_slice(&(length as u32).to_be_bytes());
    body.extend_from_slice(message);
    body
}

/// A `grpc-message` as sent (percent-encoded, gRPC's rule) made text again.
fn percent_decoded(value: &str) -> String {
    let (bytes, mut out, mut i) = (value.as_bytes(), Vec::new(), 0);
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `ModelInfer` calls that nothing compresses are read and answered past tonic's codec
/// (`frontend/grpc/direct.rs`). Their answers are the ones tonic gives a compressed call of the same
/// request, large outputs included, and malformed messages get tonic's statuses, each failing
/// alone.
#[test]
fn uncompressed_model_infer_answers_as_tonic_does() {
    use prost::Message;
    let (_repo, s) = examples();
    runtime().block_on(async {
        let mut plain = client(&s).await.max_decoding_message_size(usize::MAX);
        let encoding = tonic::codec::CompressionEncoding::Gzip;
        let mut gzip = client(&s).await.send_compressed(encoding).max_decoding_message_size(usize::MAX);
        // A small answer (one frame) and a large one (its tensor a frame of its own).
        let large = large_identity_request();
        for request in [simple(3, "small"), large] {
            let direct = plain.model_infer(request.clone()).await.unwrap().into_inner();
            let through_tonic = gzip.model_infer(request.clone()).await.unwrap().into_inner();
            assert_eq!(direct, through_tonic, "{}", request.id);
            assert_eq!(direct.id, request.id);
            if request.model_name == "identity_fp32" {
                assert_eq!(direct.raw_output_contents[0], request.raw_input_contents[0]);
            } else {
                assert_eq!(i32s(&direct.raw_output_contents[0]), (3..19).collect::<Vec<_>>());
            }
        }

        let message = simple(2, "raw").encode_to_vec();
        let framed = grpc_framed;
        // Well formed: OK.
        assert_eq!(raw_model_infer(&s, framed(0, message.len(), &message)).await.0, "0");
        // The compressed flag without a grpc-encoding: INTERNAL (13), as gRPC core and tonic say.
        let (code, text) = raw_model_infer(&s, framed(1, message.len(), &message)).await;
        assert_eq!(code, "13");
        assert!(text.contains("compressed-flag but no grpc-encoding"), "{text}");
        // A body that ends inside its message, and an empty one.
        let (code, text) = raw_model_infer(&s, framed(0, message.len() + 10, &message)).await;
        assert_eq!((code.as_str(), text.as_str()), ("13", "Unexpected EOF decoding stream."));
        let (code, text) = raw_model_infer(&s, vec![]).await;
        assert_eq!((code.as_str(), text.as_str()), ("13", "Missing request message."));
        // Bytes that are not a ModelInferRequest: prost's error, INTERNAL.
        let (code, text) = raw_model_infer(&s, framed(0, 3, &[0xff, 0xff, 0xff])).await;
        assert_eq!(code, "13", "{text}");
        // Every failure was the call's own.
        let answer = plain.model_infer(simple(5, "after")).await.unwrap().into_inner();
        assert_eq!(i32s(&answer.raw_output_contents[0]), (5..21).collect::<Vec<_>>());
    });
}

/// `ModelStreamInfer` calls that nothing compresses are read and answered past tonic's codec too.
/// Each answer on such a stream is the one a compressed stream (served by tonic) gets for the same
/// request, large outputs and errors included; messages that share a frame are each answered; a
/// body that ends inside a message ends the stream with tonic's status, after the answers to the
/// messages before it.
#[test]
fn uncompressed_model_stream_infer_answers_as_tonic_does() {
    use prost::Message;
    let (_repo, s) = examples();
    runtime().block_on(async {
        let large = large_identity_request();
        let mut bad = simple(0, "bad");
        bad.inputs[0].name = "NOPE".into();
        let requests = [simple(3, "small"), large.clone(), bad];
        let mut streams = Vec::new();
        for compressed in [false, true] {
            let mut c = client(&s).await.max_decoding_message_size(usize::MAX);
            if compressed {
                c = c.send_compressed(tonic::codec::CompressionEncoding::Gzip);
            }
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            let mut responses =
                c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
            let mut answers = Vec::new();
            // One request at a time, so that both streams answer in the same order.
            for request in &requests {
                tx.send(request.clone()).await.unwrap();
                answers.push(tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap());
            }
            drop(tx);
            assert!(tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().is_none());
            streams.push(answers);
        }
        assert_eq!(streams[0], streams[1]);
        let answer = |i: usize| streams[0][i].infer_response.clone().unwrap();
        assert_eq!(i32s(&answer(0).raw_output_contents[0]), (3..19).collect::<Vec<_>>());
        assert_eq!(answer(1).raw_output_contents[0], large.raw_input_contents[0]);
        assert!(streams[0][2].error_message.contains("unexpected inference input 'NOPE'"), "{:?}", streams[0][2]);
        assert_eq!(answer(2).id, "bad");

        // Three messages in one frame, the third cut short: two answers, then tonic's status.
        let mut body = Vec::new();
        for (value, id) in [(1, "one"), (2, "two")] {
            let message = simple(value, id).encode_to_vec();
            body.extend(grpc_framed(0, message.len(), &message));
        }
        let third = simple(3, "three").encode_to_vec();
        body.extend(grpc_framed(0, third.len(), &third[..third.len() - 4]));
        let (mut answers, code, text) = raw_call(&s, "ModelStreamInfer", body).await;
        assert_eq!((code.as_str(), text.as_str()), ("13", "Unexpected EOF decoding stream."));
        let mut ids = Vec::new();
        while !answers.is_empty() {
            let length = u32::from_be_bytes(answers[1..5].try_into().unwrap()) as usize;
            let message = answers.split_to(5 + length).split_off(5);
            let answer = pb::ModelStreamInferResponse::decode(message).unwrap().infer_response.unwrap();
            let first = i32s(&answer.raw_output_contents[0])[0];
            ids.push((answer.id, first));
        }
        ids.sort();
        assert_eq!(ids, [("one".to_string(), 1), ("two".to_string(), 2)]);
    });
}
