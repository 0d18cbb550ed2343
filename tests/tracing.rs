//! Tracing end to end, as tritonserver traces: the real binary exports OpenTelemetry spans over
//! OTLP/HTTP to a collector this test runs (a hyper server decoding each `ExportTraceServiceRequest`
//! with the official OpenTelemetry protocol types, the `opentelemetry-proto` crate); requests carry
//! W3C `traceparent`s over HTTP headers and gRPC metadata, and their spans must join the caller's
//! trace with tritonserver's span names, events and attributes. Also: the execution's batch size
//! with the dynamic batcher, an ensemble's steps, rate and count sampling, the trace extension over
//! both protocols (tritonserver's JSON and messages), and Triton mode's JSON trace file.
use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use nereus::proto::inference as pb;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::{Value, json};

/// A span as the collector received it, with its resource's attributes and its scope's name.
#[derive(Clone, Debug)]
struct Received {
    resource: Vec<(String, String)>,
    scope: String,
    span: Span,
}

/// An OTLP/HTTP trace collector: `POST /v1/traces` with an `application/x-protobuf` body.
struct Collector {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    /// Requests it could not take (wrong path, content type, or a body that does not decode).
    refused: Arc<Mutex<Vec<String>>>,
    /// How many of the next exports to answer 503 (busy), and how many it answered so.
    busy: Arc<(AtomicUsize, AtomicUsize)>,
    _runtime: tokio::runtime::Runtime,
}

impl Collector {
    fn start() -> Collector {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let busy = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let (r, f, b) = (received.clone(), refused.clone(), busy.clone());
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (r, f, b) = (r.clone(), f.clone(), b.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (r, f, b) = (r.clone(), f.clone(), b.clone());
                        async move {
                            if b.0.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                                b.1.fetch_add(1, Ordering::SeqCst);
                                let mut busy = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::new()));
                                *busy.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
                                return Ok::<_, std::convert::Infallible>(busy);
                            }
                            Ok(receive(req, &r, &f).await)
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        Collector { port, received, refused, busy, _runtime: runtime }
    }

    fn url(&self) -> String {
        // As tritonserver's own tests give it: no scheme.
        format!("127.0.0.1:{}/v1/traces", self.port)
    }

    /// Polls until `done` holds for what has been received (bounded by [`WAIT`]).
    fn wait_for(&self, what: &str, mut done: impl FnMut(&[Received]) -> bool) -> Vec<Received> {
        let deadline = Instant::now() + WAIT;
        loop {
            let refused = self.refused.lock().unwrap().clone();
            assert!(refused.is_empty(), "the collector refused exports: {refused:?}");
            let received = self.received.lock().unwrap().clone();
            if done(&received) {
                return received;
            }
            let names: Vec<&str> = received.iter().map(|r| r.span.name.as_str()).collect();
            assert!(Instant::now() < deadline, "timed out waiting for {what}; received {names:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for `count` spans of trace `trace_id` (hex) and returns them.
    fn trace(&self, trace_id: &str, count: usize) -> Vec<Received> {
        let of_trace =
            |r: &[Received]| r.iter().filter(|s| hex(&s.span.trace_id) == trace_id).cloned().collect::<Vec<_>>();
        let spans =
            of_trace(&self.wait_for(&format!("{count} spans of trace {trace_id}"), |r| of_trace(r).len() >= count));
        assert_eq!(spans.len(), count, "{spans:#?}");
        spans
    }

    /// Root spans (`InferRequest`) without a parent: the traces the server started itself.
    fn own_roots(&self) -> usize {
        let received = self.received.lock().unwrap();
        received.iter().filter(|r| r.span.name == "InferRequest" && r.span.parent_span_id.is_empty()).count()
    }
}

async fn receive(
    req: hyper::Request<hyper::body::Incoming>,
    received: &Mutex<Vec<Received>>,
    refused: &Mutex<Vec<String>>,
) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    use http_body_util::BodyExt;
    let content_type = req.headers().get("content-type").map(|v| v.to_str().unwrap_or_default().to_string());
    let target = (req.method().clone(), req.uri().path().to_string());
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let reply = |status: u16, body: Vec<u8>| {
        let mut r = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
        *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
        r
    };
    if target != (hyper::Method::POST, "/v1/traces".to_string())
        || content_type.as_deref() != Some("application/x-protobuf")
    {
        refused.lock().unwrap().push(format!("{target:?} {content_type:?}"));
        return reply(400, Vec::new());
    }
    let export = match ExportTraceServiceRequest::decode(body) {
        Ok(e) => e,
        Err(e) => {
            refused.lock().unwrap().push(format!("undecodable: {e}"));
            return reply(400, Vec::new());
        }
    };
    let mut received = received.lock().unwrap();
    for rs in export.resource_spans {
        let resource: Vec<(String, String)> =
            rs.resource.map(|r| r.attributes.iter().map(|a| (a.key.clone(), text(a))).collect()).unwrap_or_default();
        for ss in rs.scope_spans {
            let scope = ss.scope.map(|s| s.name).unwrap_or_default();
            for span in ss.spans {
                received.push(Received { resource: resource.clone(), scope: scope.clone(), span });
            }
        }
    }
    reply(200, ExportTraceServiceResponse::default().encode_to_vec())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An attribute's value as text (integers in decimal).
fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).map(text)
}

fn events(span: &Span) -> Vec<&str> {
    span.events.iter().map(|e| e.name.as_str()).collect()
}

/// The one span named `name` among `spans`.
fn named<'a>(spans: &'a [Received], name: &str) -> &'a Span {
    let found: Vec<&Received> = spans.iter().filter(|r| r.span.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} span in {spans:#?}");
    &found[0].span
}

/// A `traceparent` with a trace id and a parent span id made from `n`.
fn traceparent(n: u8, flags: &str) -> (String, String, String) {
    let trace_id = format!("{:032x}", 0x0af7_6519_16cd_43dd_8448_eb21_1c12_6600_u128 + u128::from(n));
    let span_id = format!("{:016x}", 0xb7ad_6b71_6924_2400_u64 + u64::from(n));
    (format!("00-{trace_id}-{span_id}-{flags}"), trace_id, span_id)
}

fn infer_with(s: &Server, model: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
    let r = s.request("POST", &format!("/v2/models/{model}/infer"), headers, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    r
}

const REQUEST_EVENTS: [&str; 3] = ["REQUEST_START", "QUEUE_START", "REQUEST_END"];
const COMPUTE_EVENTS: [&str; 4] = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"];

fn repo() -> Repo {
    let repo = Repo::new();
    repo.example("simple");
    repo.example("simple_dyna");
    repo.model("add_sub_twice", ADD_SUB_TWICE, &["1"]);
    repo
}

/// A server in OpenTelemetry mode exporting to `collector`, with `extra` flags.
fn otel_server(repo: &Repo, collector: &Collector, extra: &[&str]) -> Server {
    let url = format!("opentelemetry,url={}", collector.url());
    let mut args = vec![
        "--trace-config",
        "mode=opentelemetry",
        "--trace-config",
        &url,
        "--trace-config",
        "opentelemetry,bsp_schedule_delay=20",
        "--trace-config",
        "opentelemetry,resource=test.key=test.value",
    ];
    args.extend_from_slice(extra);
    Server::start(repo.path(), &args)
}

fn ab() -> Value {
    json!({"id": "ensemble-1", "inputs": [
        {"name": "A", "shape": [1, 16], "datatype": "INT32", "data": vec![3; 16]},
        {"name": "B", "shape": [1, 16], "datatype": "INT32", "data": vec![1; 16]}
    ]})
}

/// The gRPC `simple` request (INPUT0 = 0..16, INPUT1 = 1s).
fn grpc_simple(model: &str) -> pb::ModelInferRequest {
    let input = |name: &str| pb::model_infer_request::InferInputTensor {
        name: name.into(),
        datatype: "INT32".into(),
        shape: vec![1, 16],
        ..Default::default()
    };
    pb::ModelInferRequest {
        model_name: model.into(),
        id: "grpc-1".into(),
        inputs: vec![input("INPUT0"), input("INPUT1")],
        raw_input_contents: vec![le_i32(&(0..16).collect::<Vec<_>>()).into(), le_i32(&[1; 16]).into()],
        ..Default::default()
    }
}

fn with_traceparent<T>(message: T, traceparent: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("traceparent", traceparent.parse().unwrap());
    request
}

#[test]
fn spans_join_the_callers_trace_with_tritonservers_names_events_and_attributes() {
    let collector = Collector::start();
    let repo = repo();
    let s = otel_server(&repo, &collector, &["--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"]);

    // HTTP, the caller's context in a header.
    let (tp, trace_id, caller) = traceparent(1, "01");
    let mut body = simple_request(1);
    body["id"] = json!("http-1");
    infer_with(&s, "simple", &body, &[("traceparent", &tp)]);
    let spans = collector.trace(&trace_id, 3);
    for r in &spans {
        assert!(r.resource.contains(&("service.name".into(), "triton-inference-server".into())), "{:?}", r.resource);
        assert!(r.resource.contains(&("test.key".into(), "test.value".into())), "{:?}", r.resource);
        assert_eq!(r.scope, "triton-server");
        assert_eq!(r.span.kind, SpanKind::Server as i32);
        assert!(r.span.start_time_unix_nano <= r.span.end_time_unix_nano);
    }
    let root = named(&spans, "InferRequest");
    assert_eq!(hex(&root.parent_span_id), caller, "the server's span is a child of the caller's");
    assert_eq!(
        events(root),
        ["HTTP_RECV_START", "HTTP_RECV_END", "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
    );
    assert!(root.events.windows(2).all(|w| w[0].time_unix_nano <= w[1].time_unix_nano), "{root:#?}");
    let model = named(&spans, "simple");
    assert_eq!(model.parent_span_id, root.span_id);
    assert_eq!(events(model), REQUEST_EVENTS);
    assert_eq!(attribute(model, "triton.model_name").as_deref(), Some("simple"));
    assert_eq!(attribute(model, "triton.model_version").as_deref(), Some("1"));
    assert_eq!(attribute(model, "triton.trace_parent_id").as_deref(), Some("0"));
    assert_eq!(attribute(model, "triton.request_id").as_deref(), Some("http-1"));
    assert!(attribute(model, "triton.trace_id").is_some());
    let compute = named(&spans, "compute");
    assert_eq!(compute.parent_span_id, model.span_id);
    assert_eq!(events(compute), COMPUTE_EVENTS);
    assert!(compute.events.windows(2).all(|w| w[0].time_unix_nano <= w[1].time_unix_nano));
    assert!(model.start_time_unix_nano <= compute.start_time_unix_nano);
    assert!(compute.end_time_unix_nano <= model.end_time_unix_nano);
    assert_eq!(attribute(compute, "nereus.batch_size").as_deref(), Some("1"));
    assert_eq!(attribute(compute, "nereus.batch_requests").as_deref(), Some("1"));

    // gRPC, the caller's context in the call's metadata; and a stream's metadata for its requests.
    let (tp2, trace2, caller2) = traceparent(2, "01");
    let (tp3, trace3, caller3) = traceparent(3, "01");
    runtime().block_on(async {
        let mut c = grpc_client(&s).await;
        c.model_infer(with_traceparent(grpc_simple("simple"), &tp2)).await.unwrap();
        let requests = tokio_stream::iter(vec![grpc_simple("simple"), grpc_simple("simple")]);
        let mut stream = c.model_stream_infer(with_traceparent(requests, &tp3)).await.unwrap().into_inner();
        for _ in 0..2 {
            let reply = stream.message().await.unwrap().unwrap();
            assert!(reply.error_message.is_empty(), "{}", reply.error_message);
        }
    });
    let grpc_events =
        ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "INFER_RESPONSE_COMPLETE", "GRPC_SEND_START", "GRPC_SEND_END"];
    let spans = collector.trace(&trace2, 3);
    let root = named(&spans, "InferRequest");
    assert_eq!(hex(&root.parent_span_id), caller2);
    assert_eq!(events(root), grpc_events);
    assert_eq!(named(&spans, "simple").parent_span_id, root.span_id);
    assert_eq!(attribute(named(&spans, "simple"), "triton.request_id").as_deref(), Some("grpc-1"));
    // Two requests on the stream: two server traces below the caller's span.
    let spans = collector.trace(&trace3, 6);
    let roots: Vec<&Span> = spans.iter().map(|r| &r.span).filter(|s| s.name == "InferRequest").collect();
    assert_eq!(roots.len(), 2);
    for root in roots {
        assert_eq!(hex(&root.parent_span_id), caller3);
        assert_eq!(events(root), grpc_events);
    }

    // An ensemble: a span per step below the ensemble's, each with its execution; the ensemble
    // itself has no execution.
    let (tp4, trace4, caller4) = traceparent(4, "01");
    infer_with(&s, "add_sub_twice", &ab(), &[("traceparent", &tp4)]);
    let spans = collector.trace(&trace4, 6);
    let root = named(&spans, "InferRequest");
    assert_eq!(hex(&root.parent_span_id), caller4);
    let ensemble = named(&spans, "add_sub_twice");
    assert_eq!(ensemble.parent_span_id, root.span_id);
    assert_eq!(events(ensemble), REQUEST_EVENTS);
    let steps: Vec<&Span> = spans.iter().map(|r| &r.span).filter(|s| s.name == "simple").collect();
    assert_eq!(steps.len(), 2);
    for step in &steps {
        assert_eq!(step.parent_span_id, ensemble.span_id);
        assert_eq!(events(step), REQUEST_EVENTS);
        assert_eq!(attribute(step, "triton.trace_parent_id"), attribute(ensemble, "triton.trace_id"));
        assert_eq!(attribute(step, "triton.request_id").as_deref(), Some("ensemble-1"));
        let computes: Vec<&Span> =
            spans.iter().map(|r| &r.span).filter(|c| c.name == "compute" && c.parent_span_id == step.span_id).collect();
        assert_eq!(computes.len(), 1);
    }
    assert!(steps[0].span_id != steps[1].span_id);
    assert!(spans.iter().all(|r| r.span.name != "compute" || r.span.parent_span_id != ensemble.span_id));

    // The dynamic batcher: three requests queued behind a held execution run as one batch of 3.
    s.gate("simple_dyna", false);
    let post = |n: u8| {
        let (tp, trace_id, _) = traceparent(n, "01");
        let port = s.port;
        let body = simple_request(1).to_string();
        let h = std::thread::spawn(move || {
            http(port, "POST", "/v2/models/simple_dyna/infer", &[("traceparent", &tp)], body.as_bytes())
        });
        (h, trace_id)
    };
    let (held, held_trace) = post(10);
    s.wait_until("the first request executing", || s.executions("simple_dyna").0 == 1);
    let mut queued = Vec::new();
    for n in 11..14 {
        let before = s.queued("simple_dyna");
        queued.push(post(n));
        s.wait_until("the request queued", || s.queued("simple_dyna") == before + 1);
    }
    s.gate("simple_dyna", true);
    assert_eq!(held.join().unwrap().status, 200);
    let spans = collector.trace(&held_trace, 3);
    assert_eq!(attribute(named(&spans, "compute"), "nereus.batch_size").as_deref(), Some("1"));
    for (h, trace_id) in queued {
        assert_eq!(h.join().unwrap().status, 200);
        let spans = collector.trace(&trace_id, 3);
        let compute = named(&spans, "compute");
        assert_eq!(attribute(compute, "nereus.batch_size").as_deref(), Some("3"), "{compute:#?}");
        assert_eq!(attribute(compute, "nereus.batch_requests").as_deref(), Some("3"));
        // Queued while the first one executed: QUEUE_START comes well before COMPUTE_START.
        let model = named(&spans, "simple_dyna");
        assert!(model.events[1].time_unix_nano <= compute.start_time_unix_nano);
    }

    // Without a traceparent the server starts a trace of its own.
    let mut body = simple_request(2);
    body["id"] = json!("own-trace");
    infer_with(&s, "simple", &body, &[]);
    let received = collector.wait_for("the server's own trace", |r| {
        r.iter().any(|s| attribute(&s.span, "triton.request_id").as_deref() == Some("own-trace"))
    });
    let model =
        received.iter().find(|s| attribute(&s.span, "triton.request_id").as_deref() == Some("own-trace")).unwrap();
    let spans = collector.trace(&hex(&model.span.trace_id), 3);
    assert!(named(&spans, "InferRequest").parent_span_id.is_empty());
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The trace extension's answer as text, for checks of key order and repeated keys.
fn settings_text(s: &Server, path: &str) -> String {
    let r = s.get(path);
    assert_eq!(r.status, 200, "{}", r.text());
    r.text()
}

#[test]
fn sampling_follows_rate_count_and_per_model_settings_changed_at_run_time() {
    let collector = Collector::start();
    let repo = repo();
    let s = otel_server(
        &repo,
        &collector,
        &[
            "--trace-config",
            "level=TIMESTAMPS",
            "--trace-config",
            "rate=1",
            "--trace-config",
            "opentelemetry,resource=test.key=again",
        ],
    );
    let url = collector.url();

    // tritonserver's settings JSON: its keys in its order, the mode's settings after them (a
    // repeated setting twice), every value a string.
    let text = settings_text(&s, "/v2/trace/setting");
    let expected = format!(
        r#"{{"trace_level":["TIMESTAMPS"],"trace_rate":"1","trace_count":"-1","trace_mode":"opentelemetry","url":"{url}","bsp_schedule_delay":"20","resource":"test.key=test.value","resource":"test.key=again","bsp_max_queue_size":"2048","bsp_max_export_batch_size":"512"}}"#
    );
    assert_eq!(text, expected);
    assert_eq!(settings_text(&s, "/v2/models/simple/trace/setting"), expected, "a model follows the global setting");
    let g = runtime().block_on(async {
        let mut c = grpc_client(&s).await;
        c.trace_setting(pb::TraceSettingRequest::default()).await.unwrap().into_inner()
    });
    assert_eq!(g.settings["resource"].value, ["test.key=test.value", "test.key=again"]);
    assert_eq!(g.settings["trace_mode"].value, ["opentelemetry"]);
    assert_eq!(g.settings["trace_level"].value, ["TIMESTAMPS"]);
    assert_eq!(g.settings.len(), 9);

    // A request whose caller sent a context is always traced; one whose caller did not sample
    // its own span never is. Spans leave in order, so once a marker's trace has arrived,
    // everything before it has too.
    let mut marker = 100u8;
    let mut mark = |s: &Server| {
        marker += 1;
        let (tp, trace_id, _) = traceparent(marker, "01");
        infer_with(s, "simple", &simple_request(1), &[("traceparent", &tp)]);
        collector.trace(&trace_id, 3);
    };
    let roots = |c: &Collector| c.own_roots();

    // rate 3: every third request. Requests for a model that is not there do not count.
    let r = s.post_json("/v2/trace/setting", &json!({"trace_rate": "3"}));
    assert_eq!(r.json()["trace_rate"], "3");
    for _ in 0..3 {
        let r = s.post_json("/v2/models/nope/infer", &simple_request(1));
        assert_eq!(r.status, 404, "{}", r.text());
    }
    for _ in 0..6 {
        infer_with(&s, "simple", &simple_request(1), &[]);
    }
    mark(&s);
    assert_eq!(roots(&collector), 2);

    // count 2 at rate 1: two more, then none; the count shows what is left.
    let r = s.post_json("/v2/trace/setting", &json!({"trace_rate": "1", "trace_count": "2"}));
    assert_eq!((r.json()["trace_rate"].clone(), r.json()["trace_count"].clone()), (json!("1"), json!("2")));
    for _ in 0..5 {
        infer_with(&s, "simple", &simple_request(1), &[]);
    }
    mark(&s);
    assert_eq!(roots(&collector), 4);
    assert_eq!(s.get("/v2/trace/setting").json()["trace_count"], "0");
    // An unsampled caller: not traced, whatever the settings.
    let (unsampled, unsampled_trace, _) = traceparent(50, "00");
    infer_with(&s, "simple", &simple_request(1), &[("traceparent", &unsampled)]);
    mark(&s);
    let seen: BTreeSet<String> = collector.received.lock().unwrap().iter().map(|r| hex(&r.span.trace_id)).collect();
    assert!(!seen.contains(&unsampled_trace));

    // A model's own level: OFF for `simple` (even a caller's context is not traced), while
    // `simple_dyna` follows the global setting; cleared, `simple` follows it again.
    let r = s.post_json("/v2/models/simple/trace/setting", &json!({"trace_level": ["OFF"]}));
    assert_eq!(r.json()["trace_level"], json!(["OFF"]));
    assert_eq!(s.get("/v2/trace/setting").json()["trace_level"], json!(["TIMESTAMPS"]));
    let (off, off_trace, _) = traceparent(60, "01");
    infer_with(&s, "simple", &simple_request(1), &[("traceparent", &off)]);
    let (dyna, dyna_trace, _) = traceparent(61, "01");
    infer_with(&s, "simple_dyna", &simple_request(1), &[("traceparent", &dyna)]);
    collector.trace(&dyna_trace, 3);
    assert!(collector.received.lock().unwrap().iter().all(|r| hex(&r.span.trace_id) != off_trace));
    let r = s.post_json("/v2/models/simple/trace/setting", &json!({"trace_level": null}));
    assert_eq!(r.json(), s.get("/v2/trace/setting").json());

    // Over gRPC: a model's rate; an empty value list clears it.
    runtime().block_on(async {
        let mut c = grpc_client(&s).await;
        let set = |key: &str, values: &[&str]| pb::TraceSettingRequest {
            settings: [(
                key.to_string(),
                pb::trace_setting_request::SettingValue { value: values.iter().map(|v| v.to_string()).collect() },
            )]
            .into(),
            model_name: "simple".into(),
        };
        // The global count has run out, and a model's setting would take it: tritonserver refuses.
        let e = c.trace_setting(set("trace_rate", &["5"])).await.unwrap_err();
        assert_eq!(
            (e.code(), e.message()),
            (tonic::Code::InvalidArgument, "Attempting to set invalid trace setting :")
        );
        // Clearing the global count restores the command line's (no limit).
        let r = s.post_json("/v2/trace/setting", &json!({"trace_count": null}));
        assert_eq!(r.json()["trace_count"], "-1");
        let g = c.trace_setting(set("trace_rate", &["5"])).await.unwrap().into_inner();
        assert_eq!(g.settings["trace_rate"].value, ["5"]);
        assert_eq!(s.get("/v2/models/simple/trace/setting").json()["trace_rate"], "5");
        assert_eq!(s.get("/v2/trace/setting").json()["trace_rate"], "1");
        let g = c.trace_setting(set("trace_rate", &[])).await.unwrap().into_inner();
        assert_eq!(g.settings["trace_rate"].value, ["1"]);
        // tritonserver's errors.
        let e = c.trace_setting(set("trace_file", &["x.json"])).await.unwrap_err();
        assert_eq!(
            (e.code(), e.message()),
            (tonic::Code::Unimplemented, "trace file location can not be updated through network protocol")
        );
        let e = c.trace_setting(set("trace_rate", &["1", "2"])).await.unwrap_err();
        assert_eq!((e.code(), e.message()), (tonic::Code::InvalidArgument, "expect only 1 value for 'trace_rate'"));
        let e = c
            .trace_setting(pb::TraceSettingRequest { model_name: "nope".into(), ..Default::default() })
            .await
            .unwrap_err();
        assert_eq!((e.code(), e.message()), (tonic::Code::InvalidArgument, "Request for unknown model : nope"));
    });
    let r = s.post_json("/v2/models/simple/trace/setting", &json!({"trace_file": "model.json"}));
    assert_eq!((r.status, r.error()), (501, "trace file location can not be updated through network protocol".into()));
    let r = s.post_json("/v2/trace/setting", &json!({"trace_count": "10000000000"}));
    assert_eq!(
        (r.status, r.error()),
        (400, "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: 10000000000".into())
    );
    let r = s.post_json("/v2/trace/setting", &json!({"trace_rate": "0"}));
    assert_eq!(
        (r.status, r.error()),
        (400, "Attempting to set invalid trace setting :sample rate must be non-zero".into())
    );
    let r = s.get("/v2/models/nope/trace/setting");
    assert_eq!((r.status, r.error()), (400, "Request for unknown model : nope".into()));
    assert_eq!(s.get("/v2/models/simple/versions/1/trace/setting").status, 404);
    // The extension is listed.
    assert!(s.get("/v2").json()["extensions"].as_array().unwrap().contains(&json!("trace")));
}

/// A Triton-mode trace file's records of one id.
#[derive(Debug, Default)]
struct Records {
    /// `{"id", "model_name", "model_version", …}`.
    model: Option<Value>,
    /// The timestamps' names and times, in file order.
    names: Vec<String>,
    times: Vec<u64>,
}

/// The records of a Triton-mode trace file, by id.
fn trace_file(path: &std::path::Path) -> HashMap<u64, Records> {
    let entries: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut by_id: HashMap<u64, Records> = HashMap::new();
    for e in entries.as_array().unwrap() {
        let slot = by_id.entry(e["id"].as_u64().unwrap()).or_default();
        if e.get("model_name").is_some() {
            slot.model = Some(e.clone());
        }
        for t in e["timestamps"].as_array().into_iter().flatten() {
            slot.names.push(t["name"].as_str().unwrap().to_string());
            slot.times.push(t["ns"].as_u64().unwrap());
        }
    }
    by_id
}

/// Waits until `path` holds a whole JSON array (it is written at once, but may be caught midway).
fn wait_for_file(s: &Server, path: &std::path::Path) {
    s.wait_until(&format!("{}", path.display()), || {
        std::fs::read_to_string(path).is_ok_and(|t| serde_json::from_str::<Value>(&t).is_ok())
    });
}

#[test]
fn triton_mode_writes_tritonservers_trace_file() {
    let repo = repo();
    let dir = TempDir::new("trace-file");
    let file = dir.path().join("trace.json");
    let file_flag = format!("triton,file={}", file.display());
    let mut s = Server::start(
        repo.path(),
        &[
            "--trace-config",
            &file_flag,
            "--trace-config",
            "level=TIMESTAMPS",
            "--trace-config",
            "rate=1",
            "--trace-config",
            "triton,log-frequency=2",
        ],
    );
    let settings = s.get("/v2/trace/setting").json();
    assert_eq!(
        settings,
        json!({"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1", "log_frequency": "2",
               "trace_file": file.display().to_string(), "trace_mode": "triton"})
    );

    // Two traces: the first batch of log_frequency, in trace.json.0.
    infer_with(&s, "simple", &simple_request(1), &[]);
    infer_with(&s, "simple", &simple_request(1), &[]);
    let first = dir.path().join("trace.json.0");
    wait_for_file(&s, &first);
    let traces = trace_file(&first);
    assert_eq!(traces.len(), 2);
    let expected = [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
        "INFER_RESPONSE_COMPLETE",
        "HTTP_SEND_START",
        "HTTP_SEND_END",
    ];
    for (id, Records { model, names, times }) in &traces {
        let model = model.as_ref().unwrap();
        assert_eq!(model, &json!({"id": id, "model_name": "simple", "model_version": 1}));
        let mut sorted = names.clone();
        sorted.sort();
        let mut want: Vec<String> = expected.iter().map(|n| n.to_string()).collect();
        want.sort();
        assert_eq!(sorted, want, "{names:?}");
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "time order: {names:?} {times:?}");
    }

    // An ensemble over gRPC: its steps are records of their own with the ensemble's as parent.
    runtime().block_on(async {
        let mut c = grpc_client(&s).await;
        let mut request = grpc_simple("add_sub_twice");
        request.inputs[0].name = "A".into();
        request.inputs[1].name = "B".into();
        c.model_infer(request).await.unwrap();
        c.model_infer(grpc_simple("simple")).await.unwrap();
    });
    let second = dir.path().join("trace.json.1");
    wait_for_file(&s, &second);
    let traces = trace_file(&second);
    assert_eq!(traces.len(), 4, "{traces:?}");
    let ensemble =
        traces.values().find_map(|r| r.model.clone().filter(|m| m["model_name"] == "add_sub_twice")).unwrap();
    let steps: Vec<&Value> =
        traces.values().filter_map(|r| r.model.as_ref()).filter(|m| m.get("parent_id").is_some()).collect();
    assert_eq!(steps.len(), 2);
    for step in steps {
        assert_eq!((step["model_name"].clone(), step["parent_id"].clone()), (json!("simple"), ensemble["id"].clone()));
    }
    let ensemble_names = &traces[&ensemble["id"].as_u64().unwrap()].names;
    assert!(
        ensemble_names.contains(&"GRPC_WAITREAD_START".to_string())
            && !ensemble_names.contains(&"COMPUTE_START".to_string())
    );

    // log_frequency 0 (through the extension): the traces go to trace.json when the server stops.
    let r = s.post_json("/v2/trace/setting", &json!({"log_frequency": "0"}));
    assert_eq!(r.json()["log_frequency"], "0");
    infer_with(&s, "simple", &simple_request(1), &[]);
    assert!(s.terminate().success());
    let traces = trace_file(&file);
    assert_eq!(traces.len(), 1);
    assert!(!dir.path().join("trace.json.2").exists());
}

#[test]
fn a_busy_collector_gets_the_spans_again() {
    let collector = Collector::start();
    // The collector answers the next two exports 503: the exporter tries again (1 s, then 1.5 s).
    collector.busy.0.store(2, Ordering::SeqCst);
    let repo = Repo::new();
    repo.example("simple");
    let s = otel_server(&repo, &collector, &["--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"]);
    let (tp, trace_id, _) = traceparent(70, "01");
    infer_with(&s, "simple", &simple_request(1), &[("traceparent", &tp)]);
    collector.trace(&trace_id, 3);
    assert_eq!(collector.busy.1.load(Ordering::SeqCst), 2);
}

#[test]
fn bad_tracing_flags_stop_the_server_with_tritonservers_messages() {
    let repo = Repo::new();
    repo.example("simple");
    let err = refused_start(repo.path(), &["--trace-config", "mode=zipkin"]);
    assert!(err.contains("invalid value for trace mode option: zipkin"), "{err}");
    let err = refused_start(repo.path(), &["--trace-config", "rate"]);
    assert!(err.contains("--trace-config option format is '<trace mode>,<setting>=<value>'. Got rate"), "{err}");
    let err = refused_start(
        repo.path(),
        &[
            "--trace-config",
            "mode=opentelemetry",
            "--trace-config",
            "opentelemetry,url=https://collector:4318/v1/traces",
        ],
    );
    assert!(err.contains("only http:// collectors are supported"), "{err}");
}
