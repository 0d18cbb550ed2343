//! The model repository: config errors, backend resolution, lifecycle errors and version policy,
//! observed through the HTTP surface.
use crate::common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;

fn index(s: &Server) -> Vec<Value> {
    s.post_json("/v2/repository/index", &json!({})).json().as_array().unwrap().clone()
}

fn state_of(s: &Server, name: &str) -> (String, String) {
    let entry = index(s).into_iter().find(|m| m["name"] == name).unwrap_or_else(|| panic!("{name} not in index"));
    (entry["state"].as_str().unwrap().to_string(), entry["reason"].as_str().unwrap().to_string())
}

const ADD_SUB_IO: &str = r#"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
"#;

#[test]
fn bad_models_are_unavailable_with_reasons_and_the_rest_serve() {
    let repo = Repo::new();
    repo.example("simple");
    repo.model("syntax", "name: \"syntax\"\nbackend: \"add_sub\"\ninput [ { name: \"X\" data_type: TYPE_INT32 dims: [ 1 ]\n  bogus_field: 3 } ]\n", &["1"]);
    repo.model(
        "dupe",
        &format!(
            "backend: \"add_sub\" {ADD_SUB_IO} input [ {{ name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 1 ] }} ]"
        ),
        &["1"],
    );
    repo.model("gpu", &format!("backend: \"add_sub\" {ADD_SUB_IO} instance_group [ {{ kind: KIND_GPU }} ]"), &["1"]);
    repo.model("trt", &format!("platform: \"tensorrt_plan\" {ADD_SUB_IO}"), &["1"]);
    repo.model("missing_backend", &format!("backend: \"nowhere\" {ADD_SUB_IO}"), &["1"]);
    repo.model("no_versions", &format!("backend: \"add_sub\" {ADD_SUB_IO}"), &[]);
    repo.model("no_config", "", &["1"]);
    std::fs::remove_file(repo.path().join("no_config/config.pbtxt")).unwrap();
    let dir = repo.model(
        "init_fails",
        &faults_config("init_fails", r#"parameters { key: "init_fault" value: { string_value: "model" } }"#),
        &["1"],
    );
    install_faults_component(&dir);
    let dir = repo.model("not_a_component", &format!("backend: \"junk\" {ADD_SUB_IO}"), &["1"]);
    std::fs::write(dir.join("junk.wasm"), b"\0asm\x01\0\0\0 not really").unwrap();
    let s = Server::start(repo.path(), &[]);

    for (name, needle) in [
        ("syntax", "line 4, column 3: unknown field 'bogus_field' in inference.ModelInput"),
        ("dupe", "invalid config.pbtxt: line 5: input[2] 'INPUT0': duplicate input name"),
        ("gpu", "KIND_GPU but no GPUs are available"),
        ("trt", "backend 'tensorrt' is not supported"),
        ("missing_backend", "unable to find backend library for backend 'nowhere'"),
        ("no_versions", "at least one version must be available"),
        ("init_fails", "test_faults: model initialisation refused as configured"),
        ("not_a_component", "not a usable nereus:backend component"),
    ] {
        let (state, reason) = state_of(&s, name);
        assert_eq!(state, "UNAVAILABLE", "{name}");
        assert!(reason.contains(needle), "{name}: expected '{needle}' in '{reason}'");
        assert_eq!(s.get(&format!("/v2/models/{name}/ready")).status, 400, "{name}");
        let r = s.post_json(&format!("/v2/models/{name}/infer"), &simple_request(1));
        assert_eq!(r.status, 503, "{name}: {}", r.text());
    }
    // A folder with no configuration, and no model file a backend recognises, is not a model
    // (tritonserver's poll failure): listed by name, unknown to requests, logged.
    let listed = index(&s).into_iter().find(|m| m["name"] == "no_config").expect("no_config listed");
    assert!(listed.get("state").and_then(Value::as_str).unwrap_or("").is_empty(), "{listed}");
    let r = s.post_json("/v2/models/no_config/infer", &simple_request(1));
    assert_eq!(r.error(), "Request for unknown model: 'no_config' is not found", "{}", r.text());
    assert!(s.log().contains("no_config/config.pbtxt: No such file or directory"), "{}", s.log());
    // strict readiness: the server is not ready while a model is unavailable; others still serve
    assert_eq!(s.get("/v2/health/ready").status, 400);
    assert_eq!(s.get("/v2/health/live").status, 200);
    let r = s.post_json("/v2/models/simple/infer", &simple_request(2));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["outputs"][0]["data"][1], 3);

    let relaxed = Server::start(repo.path(), &["--strict-readiness=false"]);
    assert_eq!(relaxed.get("/v2/health/ready").status, 200);
}

#[test]
fn backend_components_are_found_where_triton_looks() {
    let repo = Repo::new();
    let backends = TempDir::new("backends");
    std::fs::create_dir_all(backends.path().join("faults")).unwrap();
    std::fs::copy(nereus_plugins::TEST_FAULTS, backends.path().join("faults/faults.wasm")).unwrap();
    let in_version = repo.model("in_version", &faults_config("in_version", "").replace("test_faults", "mine"), &["1"]);
    std::fs::copy(nereus_plugins::TEST_FAULTS, in_version.join("1/mine.wasm")).unwrap();
    let in_model = repo.model("in_model", &faults_config("in_model", "").replace("test_faults", "mine"), &["1"]);
    std::fs::copy(nereus_plugins::TEST_FAULTS, in_model.join("mine.wasm")).unwrap();
    repo.model("in_backend_dir", &faults_config("in_backend_dir", "").replace("test_faults", "faults"), &["1"]);
    repo.model("bundled", &format!("backend: \"add_sub\" {ADD_SUB_IO}"), &["1"]);
    let dir = backends.path().to_str().unwrap().to_string();
    let s = Server::start(repo.path(), &["--backend-directory", &dir]);
    for name in ["in_version", "in_model", "in_backend_dir"] {
        let r = s.post_json(&format!("/v2/models/{name}/infer"), &faults_request(""));
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        assert_eq!(r.json()["outputs"][0]["data"], json!([1, 2, 3]));
    }
    assert_eq!(s.post_json("/v2/models/bundled/infer", &simple_request(1)).status, 200);
}

#[test]
fn version_policies() {
    let repo = Repo::new();
    let base = format!("backend: \"add_sub\" {ADD_SUB_IO}");
    let versions = ["1", "2", "3", "010", "abc"];
    repo.model("latest2", &format!("{base} version_policy {{ latest {{ num_versions: 2 }} }}"), &versions);
    repo.model("all", &format!("{base} version_policy {{ all {{ }} }}"), &versions);
    repo.model("specific", &format!("{base} version_policy: {{ specific {{ versions: [ 1, 3 ] }} }}"), &versions);
    repo.model("default", &base, &versions);
    let s = Server::start(repo.path(), &[]);
    for (name, expected) in [
        ("latest2", json!(["2", "3"])),
        ("all", json!(["1", "2", "3"])),
        ("specific", json!(["1", "3"])),
        ("default", json!(["3"])),
    ] {
        let meta = s.get(&format!("/v2/models/{name}")).json();
        assert_eq!(meta["versions"], expected, "{name}");
        for v in ["1", "2", "3", "10"] {
            let listed = expected.as_array().unwrap().contains(&json!(v));
            let r = s.post_json(&format!("/v2/models/{name}/versions/{v}/infer"), &simple_request(1));
            assert_eq!(r.status, if listed { 200 } else { 404 }, "{name} v{v}: {}", r.text());
            if listed {
                assert_eq!(r.json()["model_version"], v);
            }
        }
        // without a version, the highest ready one answers
        let v = s.post_json(&format!("/v2/models/{name}/infer"), &simple_request(1)).json();
        assert_eq!(v["model_version"], *expected.as_array().unwrap().last().unwrap());
    }
}

/// Folders that are not versions are ignored with tritonserver's warnings, and a `specific`
/// policy's version without a folder is left out with an error line while the others load.
#[test]
fn version_folders_and_missing_specific_versions_as_tritonserver() {
    let repo = Repo::new();
    let base = format!("backend: \"add_sub\" {ADD_SUB_IO}");
    let versions = ["1", "2", "003", "abc", "configs"];
    repo.model("specific", &format!("{base} version_policy: {{ specific {{ versions: [ 1, 3 ] }} }}"), &versions);
    repo.model("nothing_left", &format!("{base} version_policy: {{ specific {{ versions: [ 7 ] }} }}"), &["1"]);
    let s = Server::start(repo.path(), &["--strict-readiness=false"]);
    assert_eq!(s.get("/v2/models/specific").json()["versions"], json!(["1"]));
    assert_eq!(s.post_json("/v2/models/specific/versions/1/infer", &simple_request(1)).status, 200);
    assert_eq!(s.get("/v2/models/nothing_left/ready").status, 400);
    let log = s.log();
    for line in [
        "ignore version directory '003' which contains leading zeros in its directory name",
        "ignore version directory 'abc' which fails to convert to integral number",
        "version 3 is specified for model 'specific', but the version directory is not present",
        "at least one version must be available under the version policy of the model",
    ] {
        assert!(log.contains(line), "{line}\n{log}");
    }
    assert!(!log.contains("'configs'"), "configs is not a version folder:\n{log}");
}

/// A component exporting an (empty) lifecycle and importing `import`.
fn backend_importing(import: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(component {import} (instance $l) (export "nereus:backend/lifecycle@1.1.0" (instance $l)))"#
    ))
    .unwrap()
}

/// Components that are malformed or built for another interface make their model UNAVAILABLE with
/// the reason; the other models (and a healthy component) load and serve.
#[test]
fn malformed_and_mismatched_components_are_unavailable_with_the_reason() {
    let repo = Repo::new();
    repo.example("simple");
    // (model, component bytes, what the reason must say)
    let fixtures: Vec<(&str, Vec<u8>, &str)> = vec![
        ("garbage", b"this is not WebAssembly".to_vec(), "not a WebAssembly binary"),
        ("core_module", wat::parse_str("(module)").unwrap(), "a core WebAssembly module, not a component"),
        (
            "empty_component",
            wat::parse_str("(component)").unwrap(),
            "it exports no nereus:backend/lifecycle interface, so it is not a Nereus backend (it exports: nothing)",
        ),
        (
            "extra_import",
            backend_importing(r#"(import "evil:net/socket" (instance (export "connect" (func))))"#),
            "it imports evil:net/socket (an interface unknown to Nereus), which Nereus does not provide to sandboxed backends",
        ),
        (
            "wrong_version",
            backend_importing(r#"(import "nereus:backend/host@9.0.0" (instance (export "log" (func))))"#),
            "it imports nereus:backend/host@9.0.0 (the Nereus host API of another major version), which Nereus does not provide",
        ),
        (
            // Before 1.0 every minor version was its own incompatible track.
            "older_major",
            backend_importing(r#"(import "nereus:backend/host@0.1.0" (instance (export "log" (func))))"#),
            "it imports nereus:backend/host@0.1.0 (the Nereus host API of another major version)",
        ),
        (
            "lifecycle_v9",
            wat::parse_str(r#"(component (instance $l) (export "nereus:backend/lifecycle@9.0.0" (instance $l)))"#)
                .unwrap(),
            "it was built against nereus:backend@9.0.0, which this server (1.2.0) does not implement",
        ),
        (
            // A lifecycle export whose functions are not the WIT's: the linker's type check says so.
            "hollow_lifecycle",
            wat::parse_str(r#"(component (instance $l) (export "nereus:backend/lifecycle@1.2.0" (instance $l)))"#)
                .unwrap(),
            "nereus:backend/lifecycle@1.2.0",
        ),
    ];
    for (name, bytes, _) in &fixtures {
        let config = format!(
            r#"name: "{name}" backend: "{name}" max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]"#
        );
        let dir = repo.model(name, &config, &["1"]);
        std::fs::write(dir.join(format!("{name}.wasm")), bytes).unwrap();
    }
    let s = Server::start(repo.path(), &[]);
    let index = s.post_json("/v2/repository/index", &json!({})).json();
    for (name, _, needle) in &fixtures {
        let entry = index.as_array().unwrap().iter().find(|m| m["name"] == *name).unwrap().clone();
        assert_eq!(entry["state"], "UNAVAILABLE", "{entry}");
        let reason = entry["reason"].as_str().unwrap();
        assert!(reason.contains(&format!("backend '{name}' is not a usable nereus:backend component")), "{reason}");
        assert!(reason.contains(needle), "{name}: {reason}");
    }
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
}

/// The WIT's compatibility promise: a plugin built against an older minor version of
/// `nereus:backend` (1.0.0, kept in `wit/archive/`) loads and serves on a host of a later 1.x.
#[test]
fn a_plugin_built_against_an_older_minor_wit_version_loads_and_serves() {
    // The fixture really is a 1.0.0 component, and the host really is a later minor version.
    let bytes = std::fs::read(nereus_plugins::COMPAT_V1_0).unwrap();
    let contains = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(contains("nereus:backend/host@1.0.0") && contains("nereus:backend/lifecycle@1.0.0"));
    let wit = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/backend.wit")).unwrap();
    let version = wit.lines().find_map(|l| l.strip_prefix("package nereus:backend@")).unwrap().trim_end_matches(';');
    let (major, minor) = {
        let mut parts = version.split('.').map(|p| p.parse::<u64>().unwrap());
        (parts.next().unwrap(), parts.next().unwrap())
    };
    assert!(major == 1 && minor > 0, "the host's WIT is {version}");
    assert!(!contains(&format!("nereus:backend/host@{version}")));

    let repo = Repo::new();
    let dir = repo.model(
        "negate",
        r#"name: "negate" backend: "compat_v1_0" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 3 ] } ]"#,
        &["1"],
    );
    std::fs::copy(nereus_plugins::COMPAT_V1_0, dir.join("compat_v1_0.wasm")).unwrap();
    let s = Server::start(repo.path(), &[]);
    assert_eq!(
        s.get("/v2/models/negate/ready").status,
        200,
        "{:?}",
        s.post_json("/v2/repository/index", &json!({})).json()
    );
    let request = json!({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [2, 3], "data": [1, -2, 3, 0, 7, -2147483648i64]}]});
    let r = s.post_json("/v2/models/negate/infer", &request);
    assert_eq!(r.status, 200, "{}", r.text());
    let out = &r.json()["outputs"][0];
    assert_eq!(out["name"], "OUTPUT0");
    assert_eq!(out["shape"], json!([2, 3]));
    assert_eq!(out["data"], json!([-1, 2, -3, 0, -7, -2147483648i64]));
}
