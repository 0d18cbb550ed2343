//! Triton's generate extension: `…/generate` answers a model's one response as a flat JSON object,
//! `…/generate_stream` every response of a decoupled plugin as server-sent events, with
//! tritonserver's mapping of JSON fields to inputs and parameters and its messages.
use crate::common;

use common::*;
use serde_json::{Value, json};

fn server() -> (Repo, Server) {
    let repo = Repo::new();
    for m in ["simple", "string_upper", "repeat_int32"] {
        repo.example(m);
    }
    let s = Server::start(repo.path(), &[]);
    (repo, s)
}

/// The events of a generate_stream body: each `data: {…}` followed by a blank line.
fn events(body: &str) -> Vec<Value> {
    assert!(body.ends_with("\n\n"), "{body:?}");
    body.split_terminator("\n\n")
        .map(|e| {
            serde_json::from_str(e.strip_prefix("data: ").unwrap_or_else(|| panic!("not an event: {e:?}"))).unwrap()
        })
        .collect()
}

#[test]
fn generate_maps_fields_to_inputs_and_answers_one_flat_object() {
    let (_repo, s) = server();
    let body = json!({
        "id": "g1",
        "INPUT0": (0..16).collect::<Vec<i32>>(),
        "parameters": {"INPUT1": vec![1; 16], "note": "kept as a request parameter"}
    });
    let r = s.post_json("/v2/models/simple/generate", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.json(),
        json!({
            "id": "g1", "model_name": "simple", "model_version": "1",
            "OUTPUT0": (1..17).collect::<Vec<i32>>(), "OUTPUT1": (-1..15).collect::<Vec<i32>>()
        })
    );
    // A single element is a value, not an array; a version in the path is honoured.
    let r = s.post_json("/v2/models/string_upper/versions/1/generate", &json!({"INPUT0": "shout"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!((r.json()["OUTPUT0"].clone(), r.json()["OUTPUT1"].clone()), (json!("SHOUT"), json!(5)));

    // A decoupled model answering once is fine; answering three times is not a generate.
    let r = s.post_json("/v2/models/repeat_int32/generate", &json!({"IN": [7], "DELAY": [0], "WAIT": 0}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!((r.json()["OUT"].clone(), r.json()["IDX"].clone()), (json!(7), json!(0)));
    let r = s.post_json("/v2/models/repeat_int32/generate", &json!({"IN": [1, 2, 3], "DELAY": [0, 0, 0], "WAIT": 0}));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.error().starts_with("generate expects model to produce exactly 1 response"), "{}", r.error());
}

#[test]
fn generate_stream_sends_each_response_as_an_event() {
    let (_repo, s) = server();
    let body = json!({"IN": [4, 5, 6], "DELAY": [0, 0, 0], "WAIT": 0});
    let r = s.post_json("/v2/models/repeat_int32/generate_stream", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream; charset=utf-8"));
    let got: Vec<(Value, Value)> = events(&r.text()).iter().map(|e| (e["OUT"].clone(), e["IDX"].clone())).collect();
    assert_eq!(got, vec![(json!(4), json!(0)), (json!(5), json!(1)), (json!(6), json!(2))]);
    assert!(events(&r.text()).iter().all(|e| e["model_name"] == "repeat_int32" && e["model_version"] == "1"));

    // A model that is not decoupled streams its one response.
    let r = s.post_json("/v2/models/string_upper/generate_stream", &json!({"INPUT0": ["a", "bc"]}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(events(&r.text())[0]["OUTPUT0"], json!(["A", "BC"]));
}

#[test]
fn what_cannot_be_mapped_is_refused_with_tritonservers_words() {
    let (_repo, s) = server();
    for (model, body, expected) in [
        (
            "simple",
            json!({"INPUT0": [1, 2, 3], "INPUT1": vec![0; 16]}),
            "The schema can not convert input 'INPUT0' to tensor with proper shape",
        ),
        (
            "simple",
            json!({"INPUT0": vec![0; 16], "INPUT1": vec![0; 16], "odd": {"a": 1}}),
            "parameter 'odd' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        ("simple", json!({"INPUT0": vec![0; 16], "parameters": [1]}), "Expected JSON object for keyword: 'parameters'"),
        (
            "simple",
            json!({"INPUT0": vec![0; 16], "parameters": {"INPUT1": [1, 2]}}),
            "Converting keyword: 'parameters': The schema can not convert input 'INPUT1'",
        ),
        (
            "simple",
            json!({"INPUT0": vec![0; 16]}),
            "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required \
             input(s) ['INPUT1']. Please provide all required input(s).",
        ),
    ] {
        for endpoint in ["generate", "generate_stream"] {
            let r = s.post_json(&format!("/v2/models/{model}/{endpoint}"), &body);
            assert_eq!(r.status, 400, "{endpoint} {body}: {}", r.text());
            assert!(r.error().contains(expected), "{endpoint}: expected '{expected}' in '{}'", r.error());
        }
    }
    // The body's members are read in its order, a repeated input refused (the first repeated one
    // named), as tritonserver reads them; a value of the wrong JSON type in its words.
    let sixteen = format!("{:?}", vec![0; 16]);
    let strings = format!(r#"{{"INPUT0": {:?}, "INPUT1": {sixteen}}}"#, vec!["seven"; 16]);
    let repeated = format!(r#"{{"INPUT1": {sixteen}, "INPUT0": {sixteen}, "INPUT0": {sixteen}, "INPUT1": {sixteen}}}"#);
    for (body, expected) in [
        (repeated.as_str(), "input 'INPUT0' already exists in request"),
        (strings.as_str(), "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
    ] {
        for endpoint in ["generate", "generate_stream"] {
            let r = http(s.port, "POST", &format!("/v2/models/simple/{endpoint}"), &[], body.as_bytes());
            assert_eq!(r.status, 400, "{endpoint} {body}: {}", r.text());
            assert_eq!(r.error(), expected, "{endpoint} {body}");
        }
    }
    let r = s.post_json("/v2/models/nothing/generate", &json!({}));
    assert!(r.status >= 400 && r.error().contains("nothing"), "{}", r.text());
    // Only POST.
    assert_eq!(s.get("/v2/models/simple/generate").status, 405);
}

/// A stream outlives the connection's quiet period (`--http-header-timeout-ms`, here 100 ms) while
/// its events come, and while it waits for the model's next one: ten events 100 ms apart all
/// arrive, the last one final. The period closes connections whose client went quiet, not streams
/// that are still answering.
#[test]
fn a_stream_longer_than_the_quiet_period_is_not_cut() {
    let repo = Repo::new();
    repo.example("repeat_int32");
    let s = Server::start(repo.path(), &["--http-header-timeout-ms", "100"]);
    let body = json!({"IN": (0..10).collect::<Vec<i32>>(), "DELAY": vec![100; 10], "WAIT": 0});
    let r = s.post_json("/v2/models/repeat_int32/generate_stream", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let got: Vec<Value> = events(&r.text()).iter().map(|e| e["OUT"].clone()).collect();
    assert_eq!(got, (0..10).map(|i| json!(i)).collect::<Vec<_>>());
}
