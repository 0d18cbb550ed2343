//! The operator's sandbox budgets against hostile models and plugins (issue 24): a configuration
//! cannot raise the server's limits, the server-wide totals of instances and Wasm memory hold,
//! deadlines and cancellation reach a plugin blocked in a WASI call, everything a plugin returns
//! counts (response parameters, error messages), and its log lines can neither pose as the host's
//! nor flood the log. Each time a healthy model keeps answering.
use crate::common;

use common::*;
use serde_json::json;

fn faults_model(repo: &Repo, name: &str, extra: &str) {
    let dir = repo.model(name, &faults_config(name, extra), &["1"]);
    install_faults_component(&dir);
}

fn sandbox_parameter(key: &str, value: &str) -> String {
    format!(r#"parameters [ {{ key: "{key}" value: {{ string_value: "{value}" }} }} ]"#)
}

fn assert_simple_answers(s: &Server) {
    let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["data"][15], 16);
}

#[test]
fn a_model_cannot_raise_the_operators_limits() {
    let repo = Repo::new();
    repo.example("simple");
    faults_model(&repo, "many_slots", &sandbox_parameter("sandbox.max_instances", "998"));
    faults_model(&repo, "many_instances", "instance_group [ { count: 8 kind: KIND_CPU } ]");
    faults_model(&repo, "much_memory", &sandbox_parameter("sandbox.memory_limit_mb", "1024"));
    faults_model(&repo, "long_deadline", &sandbox_parameter("sandbox.execution_timeout_ms", "7200000"));
    let s = Server::start(
        repo.path(),
        &["--sandbox-max-instances", "4", "--sandbox-max-memory-mb", "128", "--strict-readiness", "false"],
    );
    // A model that asks for nothing gets the defaults within the ceilings (256 MiB is above them).
    let config = s.get("/v2/models/simple/config").json();
    assert_eq!(config["parameters"]["sandbox.memory_limit_mb"]["string_value"], "128");
    for (model, needle) in [
        (
            "many_slots",
            "sandbox.max_instances 998 exceeds what the operator allows: at most 4 (--sandbox-max-instances)",
        ),
        ("many_instances", "instance_group's count 8 exceeds what the operator allows: at most 4"),
        (
            "much_memory",
            "sandbox.memory_limit_mb 1024 exceeds what the operator allows: at most 128 (--sandbox-max-memory-mb)",
        ),
        ("long_deadline", "at most 3600000 (--sandbox-max-execution-timeout-ms)"),
    ] {
        let (state, reason) = s.model_state(model);
        assert_eq!(state, "UNAVAILABLE", "{model}: {reason}");
        assert!(reason.contains(needle), "{model}: expected '{needle}' in '{reason}'");
    }
    assert_simple_answers(&s);
}

/// The server's sandboxes are lent on demand: an instance at rest gives its back to a load or an
/// instance that needs one, and builds a new one on its next request; a sequence-batched model's
/// are never taken back (its plugin keeps the sequences' state), and a model that finds too few,
/// free or to be taken back, is UNAVAILABLE with the reason.
#[test]
fn the_server_wide_instance_total_holds() {
    let repo = Repo::new();
    repo.example("simple");
    repo.example("simple_sequence");
    faults_model(&repo, "big", "instance_group [ { count: 3 kind: KIND_CPU } ]");
    let s = Server::start(
        repo.path(),
        &[
            "--sandbox-total-instances",
            "3",
            "--model-control-mode",
            "explicit",
            "--load-model",
            "simple",
            "--load-model",
            "simple_sequence",
        ],
    );
    let step = |value: i32, start: bool| {
        let r = s.post_json(
            "/v2/models/simple_sequence/infer",
            &json!({
                "parameters": {"sequence_id": 7, "sequence_start": start},
                "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}]
            }),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["outputs"][0]["data"][0].as_i64().unwrap()
    };
    assert_eq!(step(3, true), 3);
    // big needs 3: the free one and simple's (at rest) are 2; the sequence model keeps its own.
    let r = s.post_json("/v2/repository/models/big/load", &json!({}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.error().contains("the model needs 3 sandboxes (one per instance) and 2 of the server's 3 are left"),
        "{}",
        r.text()
    );
    // simple gave its sandbox back to the failed load: it builds a new one and answers.
    assert_simple_answers(&s);
    assert_eq!(step(4, false), 7, "the sequence's state survived");
    // Unloading the sequence model gives its sandbox back: big fits, and takes simple's.
    assert_eq!(s.post_json("/v2/repository/models/simple_sequence/unload", &json!({})).status, 200);
    let r = s.post_json("/v2/repository/models/big/load", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    // Every sandbox is big's now, all at rest: simple takes one of them back.
    assert_simple_answers(&s);
}

#[test]
fn wasm_memory_is_held_within_the_total_and_each_models_share() {
    let repo = Repo::new();
    repo.example("simple");
    let one_instance = "instance_group [ { count: 1 kind: KIND_CPU } ]";
    faults_model(&repo, "hog", one_instance);
    faults_model(&repo, "other", one_instance);
    let s = Server::start(repo.path(), &["--sandbox-total-memory-mb", "160", "--sandbox-model-memory-share", "0.5"]);
    let r = s.post_json("/v2/models/hog/infer", &faults_request("oom"));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.error().contains("could not grow its memory: the model's sandboxes hold")
            && r.error().contains("their share of the server's Wasm memory is 80 MiB"),
        "{}",
        r.text()
    );
    assert_simple_answers(&s);
    // The hog's memory went back with its faulted instance: the other model can still grow to its
    // own share (a 16 MiB output needs about three times that in the guest), and the hog serves
    // again.
    let mut big = faults_request("huge_output");
    big["parameters"]["count"] = json!(4 << 20);
    let r = s.post_json("/v2/models/other/infer", &big);
    assert_eq!(r.status, 200, "{}", r.error());
    let r = s.post_json("/v2/models/hog/infer", &faults_request(""));
    assert_eq!(r.status, 200, "{}", r.text());
    let metrics = s.metrics();
    let total: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("nereus_wasm_memory_bytes{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(total <= (160u64 << 20) as f64, "every sandbox together within the total: {total}");
}

/// A backend's own sandbox (where `initialize-backend` runs, kept for as long as a model uses the
/// backend) is held to the operator's ceilings and counted in the server's Wasm memory: a backend
/// that keeps 48 MiB as it initialises fails the load under `--sandbox-max-memory-mb 32`, and
/// under a total of 40 MiB, each time with the reason; the other models serve.
#[test]
fn a_backends_own_sandbox_is_within_the_operators_limits() {
    let hoarding = |repo: &Repo| {
        let config = faults_config("hoarder", "")
            .replace(r#"backend: "test_faults""#, "backend: \"test_faults_hoarding\"\nruntime: \"test_faults.wasm\"");
        install_faults_component(&repo.model("hoarder", &config, &["1"]));
    };
    for (flags, reason) in [
        (["--sandbox-max-memory-mb", "32"], "exceeded its memory limit of 32 MiB"),
        (["--sandbox-total-memory-mb", "40"], "of the server's Wasm memory is 20 MiB"),
    ] {
        let repo = Repo::new();
        repo.example("simple");
        hoarding(&repo);
        let s = Server::start(repo.path(), &flags);
        let (state, why) = s.model_state("hoarder");
        assert_eq!(state, "UNAVAILABLE", "{flags:?}: {why}");
        assert!(why.contains("test_faults_hoarding") && why.contains(reason), "{flags:?}: {why}");
        assert_simple_answers(&s);
    }
    // Within the limits it loads and serves.
    let repo = Repo::new();
    hoarding(&repo);
    let s = Server::start(repo.path(), &["--sandbox-total-memory-mb", "200"]);
    let r = s.post_json("/v2/models/hoarder/infer", &faults_request(""));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A response is counted before it is copied: a plugin that names the same 64 KiB of its memory as
/// 100,000 outputs or parameter keys (6.5 GB, had the host copied each to count it) is refused
/// with what the host read, and the server keeps serving.
#[test]
fn an_aliased_response_is_refused_before_it_is_copied() {
    let repo = Repo::new();
    repo.example("simple");
    faults_model(&repo, "faults", &sandbox_parameter("sandbox.max_output_bytes", "1048576"));
    let s = Server::start(repo.path(), &[]);
    for (fault, expected) in [
        ("aliased_outputs", "sent an invalid response: 100000 outputs in one response; the model has 1"),
        (
            "aliased_parameters",
            "sent an invalid response: response parameters of 1114112 bytes or more exceed the model's output \
             limit of 1048576 bytes",
        ),
    ] {
        let answer = s.post_json("/v2/models/faults/infer", &faults_request(fault));
        assert_eq!(answer.status, 500, "{fault}: {}", answer.text());
        assert!(answer.error().contains(expected), "{fault}: {}", answer.error());
    }
    // One output whose 1 MiB of data fits the limit, but not with its name and shape: counted too.
    let mut r = faults_request("aliased_outputs");
    r["parameters"]["copies"] = json!(1);
    r["parameters"]["count"] = json!(1 << 20);
    let answer = s.post_json("/v2/models/faults/infer", &r);
    assert_eq!(answer.status, 500, "{}", answer.text());
    assert!(
        answer.error().contains("response exceeds the model's output limit of 1048576 bytes"),
        "{}",
        answer.error()
    );
    // Within the limit, the same call is an ordinary response.
    r["parameters"]["count"] = json!(12);
    let answer = s.post_json("/v2/models/faults/infer", &r);
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json()["outputs"][0]["data"], json!([0x6161_6161, 0x6161_6161, 0x6161_6161]));
    assert_simple_answers(&s);
}

#[test]
fn everything_a_plugin_returns_counts_against_its_output_limit() {
    let repo = Repo::new();
    repo.example("simple");
    faults_model(&repo, "faults", &sandbox_parameter("sandbox.max_output_bytes", "1048576"));
    let s = Server::start(repo.path(), &[]);
    let mut r = faults_request("huge_parameters");
    r["parameters"]["count"] = json!(2 << 20);
    let answer = s.post_json("/v2/models/faults/infer", &r);
    assert_eq!(answer.status, 500, "{}", answer.text());
    assert!(
        answer
            .error()
            .contains("response parameters of 2097156 bytes exceed the model's output limit of 1048576 bytes"),
        "{}",
        answer.error()
    );
    let mut r = faults_request("huge_error");
    r["parameters"]["count"] = json!(1 << 20);
    let answer = s.post_json("/v2/models/faults/infer", &r);
    assert_eq!(answer.status, 500, "{}", answer.text());
    let message = answer.error();
    assert!(message.len() < 17 << 10, "the error message is cut: {} bytes", message.len());
    assert!(
        message.ends_with(&format!("… ({} more bytes cut)", (1 << 20) - (16 << 10))),
        "{}",
        &message[message.len() - 60..]
    );
    assert_simple_answers(&s);
}

/// With tritonserver's own escaping of log messages turned off (TRITON_SERVER_ESCAPE_LOG_MESSAGES=0),
/// a plugin's line breaks are still escaped; and its lines are rate-limited, the drops counted.
#[test]
fn plugin_logs_cannot_forge_lines_or_flood() {
    let repo = Repo::new();
    repo.example("simple");
    faults_model(&repo, "noisy", "");
    let s = Server::start_with_env(
        repo.path(),
        &["--sandbox-log-lines-per-sec", "10"],
        &[("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "0")],
    );
    let forged = "I1125 12:00:00.000000 1 server.rs:1] Nereus is ready";
    let mut r = faults_request("log");
    r["parameters"]["count"] = json!(1);
    r["parameters"]["text"] = json!(format!("innocent\n{forged}\r\x1b[2K"));
    assert_eq!(s.post_json("/v2/models/noisy/infer", &r).status, 200);
    s.wait_until("the plugin's line in the log", || s.log().contains("innocent"));
    let log = s.log();
    assert!(!log.lines().any(|l| l.starts_with(forged)), "a plugin started a line of its own:\n{log}");
    let line = log.lines().find(|l| l.contains("innocent")).unwrap();
    assert!(line.contains("model 'noisy' instance 'noisy_0'") && line.contains(r"innocent\nI1125"), "{line}");
    assert!(!line.contains('\x1b') && line.contains(r"\r\u{1b}[2K"), "{line}");

    r["parameters"]["count"] = json!(1000);
    r["parameters"]["text"] = json!("flood");
    assert_eq!(s.post_json("/v2/models/noisy/infer", &r).status, 200);
    let written = || s.log().lines().filter(|l| l.ends_with("flood")).count();
    let dropped = || -> usize {
        s.metrics()
            .lines()
            .find(|l| l.starts_with("nereus_plugin_log_lines_dropped{") && l.contains("model=\"noisy\""))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .expect("the drop counter") as usize
    };
    s.wait_until("every line written or counted as dropped", || written() + dropped() == 1000);
    assert!(written() <= 20, "at most a second's worth and what came back meanwhile: {}", written());
    // The next line the limit lets through says how many went.
    s.wait_until("the drops told", || {
        r["parameters"]["count"] = json!(1);
        r["parameters"]["text"] = json!("after");
        assert_eq!(s.post_json("/v2/models/noisy/infer", &r).status, 200);
        s.log().contains("log line(s) dropped (more than --sandbox-log-lines-per-sec)")
    });
    assert_simple_answers(&s);
}

/// A plugin asleep in a blocking WASI call (not running Wasm code, where epoch interruption would
/// stop it) is stopped at its deadline, in execution and in initialisation, and when its client
/// goes away; at shutdown the exit timeout holds whatever it does.
#[test]
fn deadlines_and_cancellation_reach_a_plugin_blocked_in_wasi() {
    let repo = Repo::new();
    repo.example("simple");
    let one_instance = "instance_group [ { count: 1 kind: KIND_CPU } ]";
    faults_model(
        &repo,
        "sleeper",
        &format!("{one_instance}\n{}", sandbox_parameter("sandbox.execution_timeout_ms", "300")),
    );
    faults_model(
        &repo,
        "patient",
        &format!("{one_instance}\n{}", sandbox_parameter("sandbox.execution_timeout_ms", "600000")),
    );
    let init = r#"parameters [ { key: "init_fault" value: { string_value: "sleep" } },
  { key: "sandbox.load_timeout_ms" value: { string_value: "300" } } ]"#;
    faults_model(&repo, "sleepy_init", init);
    let mut s = Server::start(repo.path(), &["--strict-readiness", "false", "--exit-timeout-secs", "1"]);

    let (state, reason) = s.model_state("sleepy_init");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("exceeded its initialization deadline of 300 ms (sandbox.load_timeout_ms)"), "{reason}");

    let mut sleep = faults_request("sleep");
    sleep["parameters"]["sleep_ms"] = json!(120_000);
    let started = std::time::Instant::now();
    let r = s.post_json("/v2/models/sleeper/infer", &sleep);
    let took = started.elapsed();
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.error().contains("exceeded its execution deadline of 300 ms"), "{}", r.error());
    assert!(took < std::time::Duration::from_secs(30), "stopped at the deadline, not after the 120 s sleep: {took:?}");
    assert_eq!(s.post_json("/v2/models/sleeper/infer", &faults_request("")).status, 200, "rebuilt and serving");

    // The client hangs up: the sleep ends, and the one instance is free for the next request.
    s.post_then_hang_up("/v2/models/patient/infer", &sleep, || s.executions("patient").0 == 1);
    let r = s.post_json("/v2/models/patient/infer", &faults_request(""));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_simple_answers(&s);

    // Shutdown with the plugin asleep: the exit timeout (1 s) holds.
    let port = s.port;
    let body = sleep.to_string();
    let _asleep = std::thread::spawn(move || {
        let _ = std::panic::catch_unwind(|| http(port, "POST", "/v2/models/patient/infer", &[], body.as_bytes()));
    });
    s.wait_until("the plugin asleep", || s.executions("patient").0 == 1);
    let status = s.terminate();
    assert_eq!(status.code(), Some(1), "{}", s.log());
    assert!(s.log().contains("cut off: model 'patient' version 1 had 1 request(s) in flight or queued"));
}

/// A plugin that hangs in its initialisation holds only its own model: the endpoints listen from
/// the start, live and not ready while the start-up models load; the other models load beside it
/// and serve at once; at its `sandbox.load_timeout_ms` it is UNAVAILABLE with the reason and the
/// server is ready. A model asking for a longer load deadline than the operator allows is refused.
#[test]
fn a_hanging_initialisation_does_not_hold_the_other_models() {
    let repo = Repo::new();
    repo.example("simple");
    let init = r#"parameters [ { key: "init_fault" value: { string_value: "sleep" } },
  { key: "sandbox.load_timeout_ms" value: { string_value: "4000" } } ]"#;
    faults_model(&repo, "hangs", init);
    faults_model(&repo, "greedy", &sandbox_parameter("sandbox.load_timeout_ms", "700000"));
    let s = Server::listening(repo.path(), &["--strict-readiness", "false", "--model-load-thread-count", "2"], &[]);
    s.wait_until("simple serving while 'hangs' initialises", || {
        s.post_json("/v2/models/simple/infer", &simple_request(2)).status == 200
    });
    assert_eq!(s.model_state("hangs").0, "LOADING", "{}", s.log());
    assert_eq!(s.get("/v2/models/simple/ready").status, 200, "simple is ready while 'hangs' initialises");
    assert_eq!(s.get("/v2/health/live").status, 200);
    assert_eq!(s.get("/v2/health/ready").status, 400, "not ready while the start-up models load");

    s.wait_until("the start-up models to load", || s.log().contains("Nereus is ready: "));
    let (state, reason) = s.model_state("hangs");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("exceeded its initialization deadline of 4000 ms (sandbox.load_timeout_ms)"), "{reason}");
    let (state, reason) = s.model_state("greedy");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("sandbox.load_timeout_ms 700000 exceeds what the operator allows"), "{reason}");
    assert_eq!(s.get("/v2/health/ready").status, 200);
    assert_simple_answers(&s);
}

/// A decoupled plugin streaming to a gRPC client that stops reading waits for it: the responses
/// the server holds stay bounded (the plugin is never more than the stream's buffer, the gRPC
/// frontend's and what HTTP/2 holds in flight ahead of the reader), and at its deadline its send
/// fails. When a client cancels, the plugin's next send fails and its instance is free again.
#[test]
fn a_slow_stream_reader_holds_the_plugin_back_and_a_cancel_frees_it() {
    use nereus::proto::inference as pb;
    use pb::infer_parameter::ParameterChoice;
    let repo = Repo::new();
    let decoupled = |timeout_ms: &str| {
        format!(
            r#"model_transaction_policy {{ decoupled: true }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters [ {{ key: "sandbox.max_responses" value: {{ string_value: "10000000" }} }},
  {{ key: "sandbox.execution_timeout_ms" value: {{ string_value: "{timeout_ms}" }} }} ]"#
        )
    };
    faults_model(&repo, "hurried", &decoupled("1000"));
    faults_model(&repo, "patient", &decoupled("600000"));
    let s = Server::start(repo.path(), &[]);
    let stats = |model: &str| s.get(&format!("/v2/models/{model}/stats")).json()["model_stats"][0].clone();
    let flood = |model: &str, count: i64, elements: usize| {
        let mut r = pb::ModelInferRequest {
            model_name: model.into(),
            inputs: vec![pb::model_infer_request::InferInputTensor {
                name: "INPUT0".into(),
                datatype: "INT32".into(),
                shape: vec![elements as i64],
                parameters: Default::default(),
                contents: None,
            }],
            raw_input_contents: vec![bytes::Bytes::from(le_i32(&vec![7; elements]))],
            ..Default::default()
        };
        r.parameters.insert(
            "fault".into(),
            pb::InferParameter { parameter_choice: Some(ParameterChoice::StringParam("flood".into())) },
        );
        r.parameters
            .insert("count".into(), pb::InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(count)) });
        r
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut c = grpc_client(&s).await;
        // A million responses of 64 KiB; the client reads five, then nothing, until the plugin's
        // 1 s deadline ends the request.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut stream =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        tx.send(flood("hurried", 1_000_000, 1 << 14)).await.unwrap();
        for _ in 0..5 {
            let m = tokio::time::timeout(WAIT, stream.message()).await.expect("a response").unwrap().unwrap();
            assert!(m.error_message.is_empty(), "{}", m.error_message);
        }
        tokio::task::block_in_place(|| {
            s.wait_until("the request to end at its deadline", || {
                stats("hurried")["inference_stats"]["fail"]["count"] == 1
            })
        });
        let sent = stats("hurried")["response_stats"].as_object().map_or(0, |r| r.len());
        // The stream's buffer (64), the gRPC frontend's (64) and what HTTP/2 holds in flight: the
        // server's 400 KiB send buffer and the client's 2 MiB stream window, 38 responses of 64 KiB.
        // Unbounded, the plugin sent thousands in its second.
        assert!(sent <= 5 + 64 + 64 + 64, "the plugin sent {sent} responses to a reader that took 5");

        // The client cancels: the plugin stops at its next send, and the only instance is free.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut stream =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        tx.send(flood("patient", 1_000_000, 1 << 14)).await.unwrap();
        let m = tokio::time::timeout(WAIT, stream.message()).await.expect("a response").unwrap().unwrap();
        assert!(m.error_message.is_empty(), "{}", m.error_message);
        drop(stream);
        drop(tx);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut stream =
            c.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        tx.send(flood("patient", 2, 4)).await.unwrap();
        for _ in 0..2 {
            let m =
                tokio::time::timeout(WAIT, stream.message()).await.expect("the next request served").unwrap().unwrap();
            assert!(m.error_message.is_empty(), "{}", m.error_message);
        }
    });
}

/// The server's resident memory (VmRSS), in bytes.
fn rss(s: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kib << 10
}

/// After a burst that grew every instance's sandbox by hundreds of MiB, the idle instances are
/// rebuilt and the memory goes back to the operating system: the server's RSS returns to within a
/// bound of its baseline, and the model still serves.
#[test]
fn memory_goes_back_after_a_burst() {
    let repo = Repo::new();
    let config = format!(
        "instance_group [ {{ count: 4 kind: KIND_CPU }} ]\n{}",
        sandbox_parameter("sandbox.memory_limit_mb", "512")
    );
    faults_model(&repo, "burst", &config);
    let s = Server::start(repo.path(), &[]);
    assert_eq!(s.post_json("/v2/models/burst/infer", &faults_request("")).status, 200);
    let baseline = rss(&s);
    // Four at once, each a 48 MiB output: every instance's sandbox grows by well over 100 MiB.
    let mut big = faults_request("huge_output");
    big["parameters"]["count"] = json!(12 << 20);
    let port = s.port;
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let body = big.to_string();
            std::thread::spawn(move || http(port, "POST", "/v2/models/burst/infer", &[], body.as_bytes()).status)
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), 200);
    }
    let memory = |s: &Server| model_metric(s, "nereus_wasm_memory_bytes", "burst");
    s.wait_until("the sandboxes' memory given back", || memory(&s) < (64u64 << 20) as f64);
    s.wait_until("the server's RSS back near its baseline", || rss(&s) < baseline + (96 << 20));
    assert!(model_metric(&s, "nereus_instance_trims", "burst") >= 1.0);
    assert_eq!(s.post_json("/v2/models/burst/infer", &faults_request("")).status, 200);
}

/// A model's value of a metric with `model` and `version` labels (NaN when absent).
fn model_metric(s: &Server, name: &str, model: &str) -> f64 {
    s.metrics()
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&format!("model=\"{model}\"")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Sequential requests that each grow the sandbox by far more than `--sandbox-trim-above-mb` (a
/// 16 MiB output, past a limit of 8 MiB), on a server started with `flags`; returns the
/// instance's trims once all are answered.
fn trims_after_grown_requests(flags: &[&str]) -> (Server, f64) {
    let repo = Repo::new();
    faults_model(&repo, "grows", "");
    let mut args = vec!["--sandbox-trim-above-mb", "8"];
    args.extend_from_slice(flags);
    let s = Server::start(repo.path(), &args);
    let mut big = faults_request("huge_output");
    big["parameters"]["count"] = json!(4 << 20);
    for _ in 0..3 {
        let r = s.post_json("/v2/models/grows/infer", &big);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let trims = model_metric(&s, "nereus_instance_trims", "grows");
    (s, trims)
}

/// A load whose every request needs the grown memory keeps it while it lasts: the instance is
/// not rebuilt between its requests (each rebuild would cost the plugin's initialisation and the
/// memory's page faults again on the next request).
#[test]
fn a_load_that_keeps_needing_its_memory_keeps_it() {
    // A delay no run of this test reaches between two of its requests.
    let (s, trims) = trims_after_grown_requests(&["--sandbox-trim-after-idle-ms", "600000"]);
    assert_eq!(trims, 0.0);
    assert!(model_metric(&s, "nereus_wasm_memory_bytes", "grows") > (16u64 << 20) as f64);
}

/// With no delay, a grown instance is rebuilt as soon as its worker finds no work: after each of
/// the requests (the next one arrives only once the client has read the 16 MiB answer).
#[test]
fn with_no_delay_a_grown_instance_is_rebuilt_whenever_idle() {
    let (s, _) = trims_after_grown_requests(&["--sandbox-trim-after-idle-ms", "0"]);
    s.wait_until("a trim after each request", || model_metric(&s, "nereus_instance_trims", "grows") >= 3.0);
    assert!(model_metric(&s, "nereus_wasm_memory_bytes", "grows") < (8u64 << 20) as f64);
}

/// An instance grown by a request it ran inline, on the I/O thread that received it, gives the
/// memory back too: no idle worker follows such an execution (before, a burst's last request run
/// inline kept its memory until the model's next execution on its worker).
#[test]
fn memory_grown_inline_goes_back() {
    let repo = Repo::new();
    faults_model(&repo, "inline", "instance_group [ { count: 1 kind: KIND_CPU } ]");
    // A limit well above a small execution even on a loaded machine (as in tests/sandbox.rs).
    let s = Server::start(repo.path(), &["--inline-execution-us", "1000", "--sandbox-trim-above-mb", "8"]);
    let inline = || s.get("/nereus/test/models/inline/executions").json()["inline"].as_u64().unwrap();
    for _ in 0..200 {
        assert_eq!(s.post_json("/v2/models/inline/infer", &faults_request("")).status, 200);
    }
    let before = inline();
    assert!(before > 0, "the model never ran inline\n{}", s.log());
    let mut big = faults_request("huge_output");
    big["parameters"]["count"] = json!(4 << 20);
    let r = s.post_json("/v2/models/inline/infer", &big);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(inline(), before + 1, "the large request ran inline");
    s.wait_until("the memory grown inline given back", || {
        model_metric(&s, "nereus_instance_trims", "inline") >= 1.0
            && model_metric(&s, "nereus_wasm_memory_bytes", "inline") < (8u64 << 20) as f64
    });
}
