//! Model configurations as tritonserver reads them (Triton's `qa/L0_model_config` in miniature):
//! each bad configuration is refused with tritonserver's own message, found before the version
//! folders and model files are looked at; and ONNX configurations are auto-completed from
//! `model.onnx` as tritonserver completes them, with or without a `config.pbtxt`.
use crate::common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

/// `name: "<model>"`, an ONNX Runtime platform and one input and output, then `body`.
fn onnx_config(name: &str, body: &str) -> String {
    format!(
        r#"name: "{name}" platform: "onnxruntime_onnx" max_batch_size: 8
           input [ {{ name: "input" data_type: TYPE_FP32 dims: [ 4 ] }} ]
           output [ {{ name: "output" data_type: TYPE_FP32 dims: [ 4 ] }} ]
           {body}"#
    )
}

/// Configurations tritonserver refuses when it reads them, each with its message. None of these
/// models has a version folder or a model file: the configuration is refused first.
#[test]
fn bad_configurations_are_refused_with_tritonservers_messages() {
    let repo = Repo::new();
    let table: Vec<(&str, String, &str)> = vec![
        (
            "negative_max_batch_size",
            onnx_config("negative_max_batch_size", "").replace("max_batch_size: 8", "max_batch_size: -1"),
            "'max_batch_size' must be non-negative value for negative_max_batch_size",
        ),
        (
            "missing_datatype",
            r#"platform: "onnxruntime_onnx" input [ { name: "input" dims: [ 4 ] } ]"#.into(),
            "model input 'input' must specify 'data_type' for missing_datatype",
        ),
        (
            "zerodims",
            r#"platform: "onnxruntime_onnx" input [ { name: "input" data_type: TYPE_FP32 dims: [ 0 ] } ]"#.into(),
            "model input 'input' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for zerodims",
        ),
        (
            "reshape_elementcount",
            r#"platform: "onnxruntime_onnx" max_batch_size: 8
               output [ { name: "output" data_type: TYPE_FP32 dims: [ 2, 3 ] reshape: { shape: [ 5 ] } } ]"#
                .into(),
            "model output 'output' has different size for dims and reshape for reshape_elementcount",
        ),
        (
            "reshape_variable",
            r#"platform: "onnxruntime_onnx" max_batch_size: 8
               input [ { name: "input" data_type: TYPE_FP32 dims: [ 2, -1, -1 ] reshape: { shape: [ 2, -1 ] } } ]"#
                .into(),
            "model input 'input' has different number of variable-size dimensions for dims and reshape for \
             reshape_variable",
        ),
        (
            "priority_level",
            onnx_config("priority_level", "dynamic_batching { priority_levels: 3 default_priority_level: 4 }"),
            "default priority level must be in range [1, 3] for priority_level",
        ),
        (
            "preserve_ordering",
            onnx_config(
                "preserve_ordering",
                "dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }",
            ),
            "Only one priority level is allowed when 'preserve_ordering' is true for preserve_ordering",
        ),
        (
            "control_kind_multiple",
            onnx_config(
                "control_kind_multiple",
                r#"sequence_batching { control_input [
                     { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
                     { name: "START2" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }"#,
            ),
            "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for control_kind_multiple",
        ),
        (
            "batch_output_target",
            onnx_config(
                "batch_output_target",
                r#"batch_output [ { target_name: [ "output", "output" ] kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "input" } ]"#,
            ),
            "target output name 'output' can only be specified once for batch_output_target",
        ),
        (
            "ensemble_scheduling_set",
            onnx_config(
                "ensemble_scheduling_set",
                r#"ensemble_scheduling { step [ { model_name: "m" input_map { key: "a" value: "input" } output_map { key: "b" value: "output" } } ] }"#,
            ),
            "ensemble scheduling cannot be set for model 'ensemble_scheduling_set' whose platform is not ensemble",
        ),
        (
            "invalid_platform",
            r#"platform: "onnxruntim" default_model_filename: "model.onnx""#.into(),
            "unexpected 'platform' and 'backend' pair, got:onnxruntim, onnxruntime",
        ),
        (
            "renamed",
            onnx_config("other_name", ""),
            "unexpected directory name 'renamed' for model 'other_name', directory name must equal model name",
        ),
    ];
    for (name, config, _) in &table {
        repo.model(name, config, &[]);
    }
    let s = Server::start(repo.path(), &["--disable-auto-complete-config"]);
    for (name, _, message) in &table {
        let (state, reason) = s.model_state(name);
        assert_eq!(state, "UNAVAILABLE", "{name}");
        assert!(reason.contains(message), "{name}: expected '{message}' in '{reason}'");
        assert!(!reason.contains("version"), "{name}: the versions were looked at first: {reason}");
    }
    // The log has each on an error line, as tritonserver's (Triton's QA suite greps for them).
    let log = s.log();
    for (name, _, message) in &table {
        assert!(log.lines().any(|l| l.starts_with('E') && l.contains(message)), "{name} not logged:\n{log}");
    }
}

/// What is checked once the model is created, after its versions (instance groups, the backend):
/// with tritonserver's messages too.
#[test]
fn instance_groups_backends_and_ensembles_are_refused_with_tritonservers_messages() {
    let repo = Repo::new();
    let add_sub = r#"max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]"#;
    repo.model("simple", &format!(r#"backend: "add_sub" {add_sub}"#), &["1"]);
    let table: Vec<(&str, String, &str)> = vec![
        (
            "invalid_cpu",
            format!(r#"backend: "add_sub" {add_sub} instance_group [ {{ kind: KIND_CPU gpus: [ 0 ] }} ]"#),
            "instance group invalid_cpu_0 of model invalid_cpu has kind KIND_CPU but specifies one or more GPUs",
        ),
        ("no_delimiter", String::new(), "Invalid model name: Could not determine backend for model 'no_delimiter'"),
        (
            "unknown_backend.unknown",
            String::new(),
            "unable to find backend library for backend 'unknown', try specifying runtime on the model configuration.",
        ),
        (
            "runtime_escape",
            format!(r#"backend: "add_sub" runtime: "../elsewhere/add_sub.wasm" {add_sub}"#),
            "backend library name '../elsewhere/add_sub.wasm' escapes backend directory",
        ),
        (
            "invalid_runtime",
            format!(r#"backend: "add_sub" runtime: "__invalid_runtime__" {add_sub}"#),
            "unable to find backend library '__invalid_runtime__' for model 'invalid_runtime'",
        ),
        (
            "unwritten",
            r#"platform: "ensemble" max_batch_size: 8
                   input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } ]
                   output [ { name: "S" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "T" data_type: TYPE_INT32 dims: [ 16 ] } ]
                   ensemble_scheduling { step [ { model_name: "simple" input_map { key: "INPUT0" value: "A" }
                     input_map { key: "INPUT1" value: "ghost" } output_map { key: "OUTPUT0" value: "S" }
                     output_map { key: "OUTPUT1" value: "T" } } ] }"#.to_string(),
            "output 'S' for ensemble 'unwritten' is not written: at least one of its depending tensors, 'ghost', is \
             not connected",
        ),
        (
            "unmapped",
            r#"platform: "ensemble" max_batch_size: 8
                   input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } ]
                   output [ { name: "S" data_type: TYPE_INT32 dims: [ 16 ] } ]
                   ensemble_scheduling { step [ { model_name: "simple" input_map { key: "INPUT0" value: "A" }
                     output_map { key: "OUTPUT0" value: "S" } } ] }"#.to_string(),
            "in ensemble unmapped, input INPUT1 in model simple is not mapped to any ensemble tensors",
        ),
        (
            "too_large",
            r#"platform: "ensemble" max_batch_size: 16
                   input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } ]
                   output [ { name: "S" data_type: TYPE_INT32 dims: [ 16 ] } ]
                   ensemble_scheduling { step [ { model_name: "simple" input_map { key: "INPUT0" value: "A" }
                     input_map { key: "INPUT1" value: "A" } output_map { key: "OUTPUT0" value: "S" } } ] }"#.to_string(),
            "ensemble too_large allows maximum batch size 16, but it contains model simple which only allows maximum \
             batch size to be 8",
        ),
        (
            "missing_step",
            r#"platform: "ensemble" max_batch_size: 8
                   input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } ]
                   output [ { name: "S" data_type: TYPE_INT32 dims: [ 16 ] } ]
                   ensemble_scheduling { step [ { model_name: "nowhere" input_map { key: "INPUT0" value: "A" }
                     output_map { key: "OUTPUT0" value: "S" } } ] }"#.to_string(),
            "ensemble missing_step contains models that are not available or ambiguous: nowhere",
        ),
    ];
    for (name, config, _) in &table {
        repo.model(name, config, &["1"]);
    }
    let s = Server::start(repo.path(), &[]);
    for (name, _, message) in &table {
        let (state, reason) = s.model_state(name);
        assert_eq!(state, "UNAVAILABLE", "{name}");
        assert!(reason.contains(message), "{name}: expected '{message}' in '{reason}'");
    }
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
}

/// A model folder `name` with Triton's `simple` ONNX model (INT32 INPUT0/INPUT1 [-1,16] to
/// OUTPUT0/OUTPUT1) as version 1, and `config` as its `config.pbtxt` unless `None`.
fn simple_onnx(repo: &Repo, name: &str, config: Option<&str>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/onnx_models/simple/1/model.onnx");
    let dir = repo.path().join(name);
    std::fs::create_dir_all(dir.join("1")).unwrap();
    std::fs::copy(src, dir.join("1/model.onnx")).unwrap();
    if let Some(config) = config {
        std::fs::write(dir.join("config.pbtxt"), config).unwrap();
    }
}

/// The configuration tritonserver shows for `simple` completed from its file on a machine without
/// GPUs: batching (max_batch_size 4, dynamic batching preferring 4), the model's inputs and
/// outputs, two CPU instances, the backend fields and pinned memory.
fn completed(name: &str) -> Value {
    let io = |names: [&str; 2]| -> Value {
        names.iter().map(|n| json!({"name": n, "data_type": "TYPE_INT32", "dims": [16]})).collect()
    };
    json!({
        "name": name,
        "platform": "onnxruntime_onnx",
        "backend": "onnxruntime",
        "default_model_filename": "model.onnx",
        "max_batch_size": 4,
        "input": io(["INPUT0", "INPUT1"]),
        "output": io(["OUTPUT0", "OUTPUT1"]),
        "dynamic_batching": {"preferred_batch_size": [4]},
        "instance_group": [{"name": name, "count": 2, "kind": "KIND_CPU"}],
        "optimization": {"input_pinned_memory": {"enable": true}, "output_pinned_memory": {"enable": true}},
    })
}

/// Asserts that every field of `want` has its value in `got` (lists compared by their elements'
/// fields, in order).
fn assert_has(got: &Value, want: &Value, at: &str) {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            for (k, v) in w {
                assert_has(g.get(k).unwrap_or(&Value::Null), v, &format!("{at}.{k}"));
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            assert_eq!(g.len(), w.len(), "{at}: {got} against {want}");
            for (i, (g, w)) in g.iter().zip(w).enumerate() {
                assert_has(g, w, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(got, want, "{at}"),
    }
}

#[test]
fn onnx_configurations_are_completed_from_the_model_with_or_without_config_pbtxt() {
    let Some(lib) = onnxruntime_library() else { return };
    let lib = lib.to_str().unwrap();
    let repo = Repo::new();
    simple_onnx(&repo, "no_config", None);
    simple_onnx(&repo, "empty_config", Some(""));
    // Inputs given, outputs not: the outputs are the model's, max_batch_size stays.
    simple_onnx(
        &repo,
        "partial",
        Some(
            r#"max_batch_size: 2 input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
               { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]"#,
        ),
    );
    simple_onnx(
        &repo,
        "bad_dims",
        Some(
            r#"max_batch_size: 4
               input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16, 1 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
               output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]"#,
        ),
    );
    simple_onnx(
        &repo,
        "too_few_inputs",
        Some(
            r#"max_batch_size: 4 input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
               output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]"#,
        ),
    );
    let s = Server::start(repo.path(), &["--onnxruntime-library", lib]);
    if nereus::gpu::device_count() == 0 {
        for name in ["no_config", "empty_config"] {
            assert_has(&s.get(&format!("/v2/models/{name}/config")).json(), &completed(name), name);
        }
    }
    let partial = s.get("/v2/models/partial/config").json();
    assert_eq!(partial["max_batch_size"], 2, "{partial}");
    assert_has(&partial["output"], &completed("partial")["output"], "partial.output");
    assert_eq!(partial["dynamic_batching"]["preferred_batch_size"], json!([2]), "{partial}");
    let a: Vec<i32> = (0..16).collect();
    let r = s.post_json(
        "/v2/models/no_config/infer",
        &json!({"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": a},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": vec![1; 16]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for (name, message) in [
        (
            "bad_dims",
            "model 'bad_dims', tensor 'INPUT0': the model expects 2 dimensions (shape [-1,16]) but the model \
             configuration specifies 3 dimensions (an initial batch dimension because max_batch_size > 0 followed by \
             the explicit tensor shape, making complete shape [-1,16,1])",
        ),
        ("too_few_inputs", "unable to load model 'too_few_inputs', configuration expects 1 inputs, model provides 2"),
    ] {
        let (state, reason) = s.model_state(name);
        assert_eq!(state, "UNAVAILABLE", "{name}");
        assert!(reason.contains(message), "{name}: expected '{message}' in '{reason}'");
    }
    drop(s);

    // Without auto-complete a folder without configuration is no model, and an empty one is
    // checked as it is: it has none of the model's inputs.
    let s = Server::start(repo.path(), &["--onnxruntime-library", lib, "--disable-auto-complete-config"]);
    let (state, reason) = s.model_state("empty_config");
    assert_eq!(state, "UNAVAILABLE");
    assert!(
        reason.contains("unable to load model 'empty_config', configuration expects 0 inputs, model provides 2"),
        "{reason}"
    );
    assert_eq!(s.get("/v2/models/no_config").error(), "Request for unknown model: 'no_config' is not found");
}

/// tritonserver's warnings about its deprecated `--strict-model-config`.
#[test]
fn strict_model_config_is_deprecated_as_in_tritonserver() {
    let repo = Repo::new();
    let s = Server::start(repo.path(), &["--strict-model-config=false", "--disable-auto-complete-config"]);
    let log = s.log();
    assert!(
        log.contains(
            "Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' instead."
        ),
        "{log}"
    );
    assert!(
        log.contains(
            "Warning: Overriding deprecated '--strict-model-config' from False to True in favor of \
             '--disable-auto-complete-config'!"
        ),
        "{log}"
    );
    drop(s);
    let s = Server::start(repo.path(), &["--disable-auto-complete-config"]);
    assert!(!s.log().contains("--strict-model-config"), "{}", s.log());
}

/// `reshape` with variable-size dimensions, as tritonserver applies it: the backend sees the input
/// in the reshape's shape, each -1 taking the size of the request's -1 dimension (in order), and
/// the client sees the output in its `dims`, the sizes carried back; also through an ensemble
/// whose own output has a reshape.
#[test]
fn variable_dimensions_carry_across_reshapes() {
    let repo = Repo::new();
    repo.model(
        "flip",
        r#"backend: "identity"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2, 2, -1 ] reshape: { shape: [ 4, -1 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2, 2, -1 ] reshape: { shape: [ 4, -1 ] } } ]"#,
        &["1"],
    );
    repo.model(
        "flat",
        r#"platform: "ensemble"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2, 2, -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2, 1, 2, -1 ] reshape: { shape: [ 2, 2, -1 ] } } ]
ensemble_scheduling { step [ { model_name: "flip" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }"#,
        &["1"],
    );
    let s = Server::start(repo.path(), &[]);
    let data: Vec<i32> = (0..12).collect();
    let cases = [("flip", "INPUT0", "OUTPUT0", json!([1, 2, 2, 3])), ("flat", "IN", "OUT", json!([1, 2, 1, 2, 3]))];
    for (model, input, output, want) in cases {
        let body = json!({"inputs": [{"name": input, "shape": [1, 2, 2, 3], "datatype": "INT32", "data": data}]});
        let r = s.post_json(&format!("/v2/models/{model}/infer"), &body);
        assert_eq!(r.status, 200, "{model}: {}", r.text());
        let out = &r.json()["outputs"][0];
        assert_eq!((&out["name"], &out["shape"], &out["data"]), (&json!(output), &want, &json!(data)), "{model}");
    }
}
