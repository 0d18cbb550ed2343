//! `nereus plugin …` as a backend author runs it: `check` reports what a component asks for and
//! whether the server would load it, with the reasons the server's own load gives; `new` and
//! `build` take an empty folder to a model the server serves.
use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Runs `nereus plugin ARGS`: (exit success, standard output, standard error).
fn plugin(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nereus")).arg("plugin").args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check(file: &Path, config: Option<&Path>) -> (bool, String) {
    let mut args = vec!["check", file.to_str().unwrap()];
    if let Some(config) = config {
        args.extend(["--config", config.to_str().unwrap()]);
    }
    let (ok, out, err) = plugin(&args);
    (ok, format!("{out}{err}"))
}

/// The line of `report` that starts with `head` after the report's left column.
fn line<'a>(report: &'a str, head: &str) -> &'a str {
    report.lines().find(|l| l.starts_with(head)).unwrap_or_else(|| panic!("no '{head}' line in:\n{report}"))
}

#[test]
fn check_lists_the_capabilities_a_component_asks_for_and_what_the_sandbox_grants() {
    let (ok, report) = check(Path::new(nereus_plugins::TEST_FAULTS), None);
    assert!(ok, "{report}");
    assert!(line(&report, "world").contains("nereus:backend@1.2.0"), "{report}");
    assert!(line(&report, "exports").contains("nereus:backend/lifecycle@1.2.0"), "{report}");
    let network = report.lines().find(|l| l.contains("network")).expect("the network is listed");
    assert!(network.contains("denied") && network.contains("wasi:sockets/tcp"), "{network}");
    let files = report.lines().find(|l| l.contains(" files ")).expect("files are listed");
    assert!(files.contains("denied by default") && files.contains("sandbox.model_dir"), "{files}");
    assert_eq!(line(&report, "verdict").split_whitespace().nth(1), Some("loads"));

    // The 1.0 plugin says so, and loads.
    let (ok, report) = check(Path::new(nereus_plugins::COMPAT_V1_0), None);
    assert!(ok && line(&report, "world").contains("nereus:backend@1.0.0"), "{report}");
}

#[test]
fn check_refuses_what_is_not_a_backend_with_the_reason_the_server_gives_at_load() {
    let dir = TempDir::new("plugin-check");
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, wat::parse_str("(module)").unwrap()).unwrap();
    let (ok, report) = check(&core, None);
    assert!(!ok);
    assert!(line(&report, "verdict").contains("a core WebAssembly module, not a component"), "{report}");

    // A component that wants to make HTTP requests: refused by check and by the server, in the
    // same words.
    let http_client = wat::parse_str(
        r#"(component
             (import "wasi:http/outgoing-handler@0.2.0" (instance))
             (instance $l)
             (export "nereus:backend/lifecycle@1.1.0" (instance $l)))"#,
    )
    .unwrap();
    let file = dir.path().join("fetcher.wasm");
    std::fs::write(&file, &http_client).unwrap();
    let (ok, report) = check(&file, None);
    assert!(!ok, "{report}");
    let reason = "it imports wasi:http/outgoing-handler@0.2.0 (HTTP requests), which Nereus does not provide to sandboxed backends";
    assert!(line(&report, "verdict").ends_with(reason), "{report}");
    assert!(
        line(&report, "wants").contains("HTTP requests") && line(&report, "wants").contains("not provided"),
        "{report}"
    );

    let repo = Repo::new();
    let model = repo.model("fetcher", "name: \"fetcher\"\nbackend: \"fetcher\"\ninput [ { name: \"X\" data_type: TYPE_INT32 dims: [ 1 ] } ]\noutput [ { name: \"Y\" data_type: TYPE_INT32 dims: [ 1 ] } ]\n", &["1"]);
    std::fs::write(model.join("fetcher.wasm"), &http_client).unwrap();
    repo.example("simple");
    let server = Server::start(repo.path(), &[]);
    let (state, why) = server.model_state("fetcher");
    assert_eq!(state, "UNAVAILABLE");
    assert!(why.ends_with(reason), "{why}");
    assert_eq!(server.model_state("simple").0, "READY");
}

#[test]
fn check_with_a_config_loads_the_model_and_sends_it_zeros() {
    let simple = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model_repository/simple/config.pbtxt");
    let add_sub = nereus_plugins::ALL.iter().find(|(n, _)| *n == "add_sub").unwrap().1;
    let (ok, report) = check(Path::new(add_sub), Some(&simple));
    assert!(ok, "{report}");
    assert_eq!(line(&report, "load"), "load       model 'simple' version 1: READY");
    assert_eq!(line(&report, "request"), "request    zeros: INPUT0 INT32 [1,16], INPUT1 INT32 [1,16]");
    assert_eq!(line(&report, "response"), "response   OUTPUT0 INT32 [1,16], OUTPUT1 INT32 [1,16]");

    // A configuration the server would not load: the server's reason, and a failed check.
    let dir = TempDir::new("plugin-check-config");
    let config = dir.path().join("config.pbtxt");
    let text = std::fs::read_to_string(&simple).unwrap()
        + "parameters [ { key: \"sandbox.memory_limit_mb\" value: { string_value: \"lots\" } } ]\n";
    std::fs::write(&config, text).unwrap();
    let (ok, report) = check(Path::new(add_sub), Some(&config));
    assert!(!ok, "{report}");
    let load = line(&report, "load");
    assert!(load.contains("UNAVAILABLE") && load.contains("sandbox.memory_limit_mb"), "{report}");

    // Outputs the plugin does not produce: the zeros request fails with the host's check.
    let text = std::fs::read_to_string(&simple).unwrap().replace("\"OUTPUT1\"", "\"OUTPUT9\"");
    std::fs::write(&config, text).unwrap();
    let (ok, report) = check(Path::new(add_sub), Some(&config));
    assert!(ok, "loads: {report}");
    assert!(line(&report, "response").contains("error"), "{report}");
}

#[test]
fn new_rejects_a_bad_name_and_an_existing_folder() {
    let dir = TempDir::new("plugin-new");
    let (ok, _, err) = plugin(&["new", "bad-name", "--lang", "rust", "--dir", dir.path().to_str().unwrap()]);
    assert!(!ok && err.contains("cannot name a plugin"), "{err}");
    std::fs::create_dir_all(dir.path().join("taken")).unwrap();
    let (ok, _, err) = plugin(&["new", "taken", "--lang", "rust", "--dir", dir.path().to_str().unwrap()]);
    assert!(!ok && err.contains("exists already"), "{err}");
}

/// `nereus plugin new` in each language, built by `nereus plugin build` (which installs the
/// toolchain where missing) and served: Triton's `simple` answers.
fn new_builds_and_serves(lang: &str) {
    let dir = TempDir::new(&format!("plugin-new-{lang}"));
    let name = format!("my_{lang}");
    let (ok, out, err) = plugin(&["new", &name, "--lang", lang, "--dir", dir.path().to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    let folder = dir.path().join(&name);
    let (ok, out, err) = plugin(&["build", folder.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    assert!(out.contains(&format!("load       model '{name}' version 1: READY")), "{out}");
    assert!(folder.join(format!("{name}.wasm")).is_file());

    let server = Server::start(dir.path(), &[]);
    let mut request = simple_request(5);
    request["inputs"][0]["data"] = serde_json::json!((0..16).map(|i| i * 3).collect::<Vec<i32>>());
    let resp = server.post_json(&format!("/v2/models/{name}/infer"), &request);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    for output in body["outputs"].as_array().unwrap() {
        let want: Vec<i64> = match output["name"].as_str().unwrap() {
            "OUTPUT0" => (0..16).map(|i| i * 3 + 5).collect(),
            "OUTPUT1" => (0..16).map(|i| i * 3 - 5).collect(),
            other => panic!("unexpected output {other}"),
        };
        let got: Vec<i64> = output["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(got, want);
    }
}

#[test]
fn a_new_rust_plugin_builds_and_serves() {
    new_builds_and_serves("rust");
}

#[test]
fn a_new_c_plugin_builds_and_serves() {
    new_builds_and_serves("c");
}

#[test]
fn a_new_python_plugin_builds_and_serves() {
    new_builds_and_serves("python");
}

#[test]
fn a_new_javascript_plugin_builds_and_serves() {
    new_builds_and_serves("js");
}
