//! The Prometheus metrics endpoint: tritonserver's metric names, labels and meanings, checked
//! against the requests sent, with the endpoint's text parsed by a Prometheus text-format parser
//! (`prometheus-parse`; `tests/python/test_metrics.py` checks it with the official Python client's
//! parser too).
use crate::common;

use common::*;
use serde_json::{Value, json};

/// The endpoint's samples.
fn scrape(s: &Server) -> Vec<prometheus_parse::Sample> {
    let text = s.metrics();
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("the metrics text parses").samples
}

/// The value of `metric` for `labels` (every pair must match), if the endpoint has it.
fn value(samples: &[prometheus_parse::Sample], metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples.iter().find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))).map(|s| {
        match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        }
    })
}

fn model_value(samples: &[prometheus_parse::Sample], metric: &str, model: &str) -> f64 {
    value(samples, metric, &[("model", model), ("version", "1")]).unwrap_or_else(|| panic!("no {metric} for {model}"))
}

fn failures(samples: &[prometheus_parse::Sample], model: &str, reason: &str) -> f64 {
    value(samples, "nv_inference_request_failure", &[("model", model), ("version", "1"), ("reason", reason)])
        .unwrap_or_else(|| panic!("no failure count for {model} {reason}"))
}

fn batch_of(n: usize) -> Value {
    let mut r = simple_request(1);
    for i in 0..2 {
        r["inputs"][i]["shape"] = json!([n, 16]);
        r["inputs"][i]["data"] = json!(vec![1; 16 * n]);
    }
    r
}

#[test]
fn metrics_count_what_was_served() {
    let repo = Repo::new();
    repo.example("simple");
    let dir = repo.model(
        "faults",
        &faults_config(
            "faults",
            r#"parameters [ { key: "sandbox.execution_timeout_ms" value: { string_value: "300" } } ]"#,
        ),
        &["1"],
    );
    install_faults_component(&dir);
    repo.model(
        "queue",
        r#"name: "queue"
backend: "batch_probe"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "BATCH" data_type: TYPE_INT32 dims: [ -1 ] } ]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);

    // Before any request, every model is there with zeros (every failure reason too).
    let before = scrape(&s);
    for model in ["simple", "faults", "queue"] {
        assert_eq!(model_value(&before, "nv_inference_request_success", model), 0.0, "{model}");
        for reason in ["REJECTED", "CANCELED", "BACKEND", "OTHER"] {
            assert_eq!(failures(&before, model, reason), 0.0, "{model} {reason}");
        }
        assert!(model_value(&before, "nv_model_load_duration_secs", model) > 0.0, "{model}");
    }

    // simple: 5 requests of one, one of a batch of 3 = 6 requests, 8 inferences, 6 executions.
    for b in 0..5 {
        assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(b)).status, 200);
    }
    assert_eq!(s.post_json("/v2/models/simple/infer", &batch_of(3)).status, 200);
    // faults: 2 answered, 1 plugin error, 1 trap, 1 deadline.
    for (fault, status) in [("", 200), ("", 200), ("error", 500), ("trap", 500), ("spin", 500)] {
        let mut r = faults_request(fault);
        if fault == "spin" {
            r["parameters"]["spin_ms"] = json!(5000);
        }
        assert_eq!(s.post_json("/v2/models/faults/infer", &r).status, status, "{fault}");
    }
    // queue: one executing (held), one queued, one rejected.
    s.gate("queue", false);
    // One after the other: sent together, the two could make one batch.
    let send = || {
        let port = s.port;
        let body = json!({"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": [1]}]});
        std::thread::spawn(move || http(port, "POST", "/v2/models/queue/infer", &[], body.to_string().as_bytes()))
    };
    let mut held = vec![send()];
    s.wait_until("one executing", || s.executions("queue").0 == 1);
    held.push(send());
    s.wait_until("one executing, one queued", || s.executions("queue").0 == 1 && s.queued("queue") == 1);
    let during = scrape(&s);
    assert_eq!(model_value(&during, "nv_inference_pending_request_count", "queue"), 1.0);
    let full = s.post_json(
        "/v2/models/queue/infer",
        &json!({"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": [1]}]}),
    );
    assert_eq!(full.status, 503, "{}", full.text());
    s.gate("queue", true);
    for h in held {
        assert_eq!(h.join().unwrap().status, 200);
    }

    let after = scrape(&s);
    assert_eq!(model_value(&after, "nv_inference_request_success", "simple"), 6.0);
    assert_eq!(model_value(&after, "nv_inference_count", "simple"), 8.0);
    assert_eq!(model_value(&after, "nv_inference_exec_count", "simple"), 6.0);
    assert_eq!(model_value(&after, "nv_inference_request_success", "faults"), 2.0);
    assert_eq!(failures(&after, "faults", "BACKEND"), 3.0);
    assert_eq!(failures(&after, "queue", "REJECTED"), 1.0);
    assert_eq!(model_value(&after, "nv_inference_request_success", "queue"), 2.0);
    assert_eq!(model_value(&after, "nv_inference_pending_request_count", "queue"), 0.0);
    // Durations are cumulative microseconds, and grow with what ran.
    let request_us = model_value(&after, "nv_inference_request_duration_us", "simple");
    let infer_us = model_value(&after, "nv_inference_compute_infer_duration_us", "simple");
    assert!(request_us > 0.0 && infer_us > 0.0 && infer_us <= request_us, "{request_us} {infer_us}");
    assert!(model_value(&after, "nv_inference_queue_duration_us", "queue") > 0.0);
    // Nereus's own: the trap and the deadline, and the instance rebuilt after each.
    let fault = |kind| value(&after, "nereus_sandbox_faults", &[("model", "faults"), ("kind", kind)]).unwrap();
    assert_eq!((fault("trap"), fault("deadline"), fault("memory")), (1.0, 1.0, 0.0));
    assert_eq!(model_value(&after, "nereus_instance_rebuilds", "faults"), 2.0);
    let loads: f64 = ["memory", "disk", "compiled"]
        .iter()
        .map(|src| value(&after, "nereus_component_loads", &[("model", "faults"), ("source", src)]).unwrap())
        .sum();
    assert_eq!(loads, 1.0, "one component load for the one version");
    // The machine's gauges.
    let total = value(&after, "nv_cpu_memory_total_bytes", &[]).unwrap();
    let used = value(&after, "nv_cpu_memory_used_bytes", &[]).unwrap();
    assert!(total > 0.0 && used > 0.0 && used <= total, "{used} of {total}");
    let cpu = value(&after, "nv_cpu_utilization", &[]).unwrap();
    assert!((0.0..=1.0).contains(&cpu), "{cpu}");

    // Other paths on the metrics port are not found.
    assert_eq!(http(s.metrics_port(), "GET", "/v2", &[], b"").status, 404);
}

/// `nereus_wasm_memory_bytes` follows the linear memory of a model's sandboxes: it grows with
/// what a plugin allocates, gives back what a faulted instance held, and falls to 0
/// when the model is unloaded.
#[test]
fn wasm_memory_follows_the_sandboxes() {
    let repo = Repo::new();
    let one_instance = r#"instance_group [ { count: 1 kind: KIND_CPU } ]
parameters [ { key: "sandbox.memory_limit_mb" value: { string_value: "64" } } ]"#;
    let dir = repo.model("faults", &faults_config("faults", one_instance), &["1"]);
    install_faults_component(&dir);
    let s = Server::start(repo.path(), &["--model-control-mode", "explicit", "--load-model", "faults"]);
    let memory = || model_value(&scrape(&s), "nereus_wasm_memory_bytes", "faults");
    let loaded = memory();
    assert!(loaded > 0.0, "the model and instance sandboxes have linear memory: {loaded}");

    let mut big = faults_request("huge_output");
    big["parameters"]["count"] = json!(4 << 20);
    let r = s.post_json("/v2/models/faults/infer", &big);
    assert_eq!(r.status, 200, "{}", r.text());
    let grown = memory();
    assert!(grown >= loaded + (16 << 20) as f64, "a 16 MiB output grew the instance's memory: {loaded} -> {grown}");

    let r = s.post_json("/v2/models/faults/infer", &faults_request("oom"));
    assert!(r.error().contains("exceeded its memory limit of 64 MiB"), "{}", r.text());
    // The faulted store is dropped before the answer goes out (its rebuild may come later).
    let after_fault = memory();
    assert!(after_fault < grown, "the faulted instance's memory was given back: {grown} -> {after_fault}");

    let r = s.post_json("/v2/repository/models/faults/unload", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(memory(), 0.0, "an unloaded model holds no sandbox memory");
}

/// The GPU gauges, labelled by each CUDA device's UUID, where the machine has GPUs (and nothing of
/// them where it has none, as a tritonserver without GPUs).
#[test]
fn gpu_gauges_for_each_cuda_device() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--metrics-interval-ms", "50"]);
    let gauges = ["nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes", "nv_gpu_power_limit"];
    let samples = scrape(&s);
    let devices = nereus::gpu::device_count();
    if devices == 0 {
        for g in gauges.iter().chain(&["nv_gpu_power_usage", "nv_energy_consumption"]) {
            assert!(samples.iter().all(|x| x.metric != *g), "no GPU, no {g}");
        }
        eprintln!("no CUDA device here: checked only that no GPU gauge is reported");
        return;
    }
    for ordinal in 0..devices {
        let uuid = nereus::gpu::device_uuid(ordinal).expect("the device's UUID");
        assert!(uuid.starts_with("GPU-"), "{uuid}");
        let get = |samples: &[prometheus_parse::Sample], g: &str| {
            value(samples, g, &[("gpu_uuid", uuid.as_str())]).unwrap_or_else(|| panic!("no {g} for {uuid}"))
        };
        let total = get(&samples, "nv_gpu_memory_total_bytes");
        assert!(total > (1u64 << 30) as f64, "a GPU has more than 1 GiB: {total}");
        let used = get(&samples, "nv_gpu_memory_used_bytes");
        assert!((0.0..=total).contains(&used), "{used} of {total}");
        let utilization = get(&samples, "nv_gpu_utilization");
        assert!((0.0..=1.0).contains(&utilization), "{utilization}");
        assert!(get(&samples, "nv_gpu_power_limit") > 0.0);
        let energy = get(&samples, "nv_energy_consumption");
        s.wait_until("the energy counter to grow", || get(&scrape(&s), "nv_energy_consumption") > energy);
    }
}

/// Counters belong to the model and version, not to a loaded instance of it: a reload keeps them.
#[test]
fn counters_carry_on_across_a_reload() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--model-control-mode", "explicit", "--load-model", "simple"]);
    for b in 0..3 {
        assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(b)).status, 200);
    }
    let config = s.get("/v2/models/simple/config").json();
    let mut changed = config.clone();
    changed["max_batch_size"] = json!(4);
    let r = s.post_json("/v2/repository/models/simple/load", &json!({"parameters": {"config": changed.to_string()}}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(9)).status, 200);
    let samples = scrape(&s);
    assert_eq!(model_value(&samples, "nv_inference_request_success", "simple"), 4.0);
    // The statistics extension counts the loaded version's requests, as tritonserver's.
    let stats = s.get("/v2/models/simple/stats").json();
    assert_eq!(stats["model_stats"][0]["inference_stats"]["success"]["count"], 1);
}

#[test]
fn latency_summaries_when_asked() {
    let repo = Repo::new();
    repo.example("simple");
    let plain = Server::start(repo.path(), &[]);
    assert_eq!(plain.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
    assert!(!plain.metrics().contains("nv_inference_request_summary_us"));
    drop(plain);

    let s = Server::start(repo.path(), &["--metrics-config", "summary_latencies=true"]);
    for b in 0..7 {
        assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(b)).status, 200);
    }
    let samples = scrape(&s);
    let summary = samples
        .iter()
        .find(|x| x.metric == "nv_inference_request_summary_us" && x.labels.get("model") == Some("simple"))
        .expect("the request summary");
    let prometheus_parse::Value::Summary(quantiles) = &summary.value else { panic!("not a summary: {summary:?}") };
    let qs: Vec<f64> = quantiles.iter().map(|q| q.quantile).collect();
    assert_eq!(qs, vec![0.5, 0.9, 0.95, 0.99]);
    assert!(quantiles.iter().all(|q| q.count > 0.0), "{quantiles:?}");
    assert_eq!(value(&samples, "nv_inference_request_summary_us_count", &[("model", "simple")]), Some(7.0));
}

#[test]
fn metrics_can_be_turned_off() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--allow-metrics=false"]);
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
    assert!(!s.log().contains("Metrics Service"), "{}", s.log());
    let err = refused_start(repo.path(), &["--metrics-config", "bogus=1"]);
    assert!(err.contains("unknown metrics setting 'bogus'"), "{err}");
}

/// `--metrics-config counter_latencies=false` leaves out the duration counters, and
/// `histogram_latencies=true` adds tritonserver's first-response histogram (milliseconds, its
/// buckets), each request counted once.
#[test]
fn latency_counters_and_first_response_histogram_as_configured() {
    let repo = Repo::new();
    repo.example("simple");
    let plain = Server::start(repo.path(), &[]);
    assert_eq!(plain.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
    let text = plain.metrics();
    assert!(text.contains("nv_inference_request_duration_us{"), "{text}");
    assert!(!text.contains("nv_inference_first_response_histogram_ms"), "{text}");
    drop(plain);

    let args = ["--metrics-config", "counter_latencies=false", "--metrics-config", "histogram_latencies=true"];
    let s = Server::start(repo.path(), &args);
    for b in 0..3 {
        assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(b)).status, 200);
    }
    let text = s.metrics();
    for family in [
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ] {
        assert!(!text.contains(family), "{family} with counter_latencies=false:\n{text}");
    }
    assert!(text.contains("nv_inference_request_success{"), "the other counters stay:\n{text}");
    let samples = scrape(&s);
    let histogram = samples
        .iter()
        .find(|x| x.metric == "nv_inference_first_response_histogram_ms" && x.labels.get("model") == Some("simple"))
        .expect("the first-response histogram");
    let prometheus_parse::Value::Histogram(buckets) = &histogram.value else {
        panic!("not a histogram: {histogram:?}")
    };
    let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
    assert_eq!(bounds, [100.0, 500.0, 2000.0, 5000.0, f64::INFINITY]);
    assert_eq!(buckets.last().map(|b| b.count), Some(3.0));
    assert_eq!(value(&samples, "nv_inference_first_response_histogram_ms_count", &[("model", "simple")]), Some(3.0));
}
