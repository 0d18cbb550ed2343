//! The response cache (tritonserver's `--cache-config local,size=N` with a model's
//! `response_cache { enable: true }`): the same request again is answered without executing, over
//! HTTP and gRPC, counted in the statistics and metrics as tritonserver counts it; what differs in
//! any input, output asked for or parameter is not; the least recently used entries leave a full
//! cache; an entry larger than the cache is refused with tritonserver's log line; ensembles cache
//! their top-level response; the flags and configurations tritonserver refuses are refused.
use crate::common;

use common::*;
use serde_json::{Value, json};

const CACHED: &str = "response_cache { enable: true }";

/// `(success, cache_hit, cache_miss, execution_count)` of a model's statistics.
fn counts(s: &Server, model: &str) -> (u64, u64, u64, u64) {
    let stats = s.get(&format!("/v2/models/{model}/stats")).json();
    let m = &stats["model_stats"][0];
    let count = |field: &str| m["inference_stats"][field]["count"].as_u64().unwrap();
    (count("success"), count("cache_hit"), count("cache_miss"), m["execution_count"].as_u64().unwrap())
}

fn output(r: &Resp, name: &str) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    let outputs = r.json()["outputs"].as_array().unwrap().clone();
    outputs.into_iter().find(|o| o["name"] == name).map(|o| o["data"].clone()).unwrap_or(Value::Null)
}

/// The value of the series of `family` for `model` version 1 in a scrape (`None`: not shown).
fn series(text: &str, family: &str, model: &str) -> Option<f64> {
    let prefix = format!("{family}{{model=\"{model}\",version=\"1\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).map(|v| v.parse().unwrap())
}

#[test]
fn the_same_request_again_is_answered_from_the_cache() {
    let repo = Repo::new();
    repo.model("simple", &add_sub_config("simple", CACHED), &["1"]);
    repo.model("uncached", &add_sub_config("uncached", ""), &["1"]);
    let s = Server::start(
        repo.path(),
        &["--cache-config", "local,size=1048576", "--metrics-config", "summary_latencies=true"],
    );
    let sums = |b: i32| json!((0..16).map(|x| x + b).collect::<Vec<_>>());

    let first = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!(output(&first, "OUTPUT0"), sums(1));
    assert_eq!(counts(&s, "simple"), (1, 0, 1, 1), "a miss, executed");
    let mut again = simple_request(1);
    again["id"] = json!("again");
    let second = s.post_json("/v2/models/simple/infer", &again);
    assert_eq!(output(&second, "OUTPUT0"), sums(1));
    assert_eq!(output(&second, "OUTPUT1"), output(&first, "OUTPUT1"));
    assert_eq!(second.json()["id"], "again", "the answer carries the request's own id");
    assert_eq!(counts(&s, "simple"), (2, 1, 1, 1), "a hit, not executed");

    // Over gRPC, the same key: another hit.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let answer = rt.block_on(async { grpc_client(&s).await.model_infer(grpc_simple_request(1)).await.unwrap() });
    let raw = &answer.get_ref().raw_output_contents[0];
    assert_eq!(&raw[..], &le_i32(&(1..17).collect::<Vec<_>>())[..]);
    assert_eq!(counts(&s, "simple"), (3, 2, 1, 1));

    // Other bytes, another output asked for, a parameter: each its own key, each executed.
    assert_eq!(output(&s.post_json("/v2/models/simple/infer", &simple_request(2)), "OUTPUT0"), sums(2));
    let mut only_diff = simple_request(1);
    only_diff["outputs"] = json!([{"name": "OUTPUT1"}]);
    let r = s.post_json("/v2/models/simple/infer", &only_diff);
    assert_eq!(output(&r, "OUTPUT0"), Value::Null, "only the output asked for");
    assert_eq!(output(&r, "OUTPUT1"), json!((0..16).map(|x| x - 1).collect::<Vec<_>>()));
    let mut with_parameter = simple_request(1);
    with_parameter["parameters"] = json!({"note": "x"});
    assert_eq!(output(&s.post_json("/v2/models/simple/infer", &with_parameter), "OUTPUT0"), sums(1));
    assert_eq!(counts(&s, "simple"), (6, 2, 4, 4));

    // A model without `response_cache` executes every request.
    for _ in 0..2 {
        assert_eq!(output(&s.post_json("/v2/models/uncached/infer", &simple_request(1)), "OUTPUT0"), sums(1));
    }
    assert_eq!(counts(&s, "uncached"), (2, 0, 0, 2));

    // The metrics: the cache's counters and summaries for the model that uses it only, and no
    // request summary for it (tritonserver's DLIS-4762).
    let text = s.metrics();
    assert_eq!(series(&text, "nv_cache_num_hits_per_model", "simple"), Some(2.0), "{text}");
    assert_eq!(series(&text, "nv_cache_num_misses_per_model", "simple"), Some(4.0));
    assert!(series(&text, "nv_cache_hit_duration_per_model", "simple").is_some());
    assert!(series(&text, "nv_cache_miss_duration_per_model", "simple").is_some());
    assert_eq!(series(&text, "nv_cache_hit_summary_per_model_count", "simple"), Some(2.0));
    assert_eq!(series(&text, "nv_cache_miss_summary_per_model_count", "simple"), Some(4.0));
    assert_eq!(series(&text, "nv_inference_request_success", "simple"), Some(6.0));
    assert_eq!(series(&text, "nv_inference_count", "simple"), Some(4.0), "hits are not inferences");
    assert_eq!(series(&text, "nv_inference_request_summary_us_count", "simple"), None);
    assert_eq!(series(&text, "nv_inference_request_summary_us_count", "uncached"), Some(2.0));
    assert_eq!(series(&text, "nv_cache_num_hits_per_model", "uncached"), None);
}

/// A full cache lets its least recently used entry go; an entry larger than the whole cache is
/// not kept, with tritonserver's log line, and the request is answered all the same.
#[test]
fn a_full_cache_lets_the_least_recently_used_go() {
    let repo = Repo::new();
    repo.model("simple", &add_sub_config("simple", CACHED), &["1"]);
    // One `simple` response fits (its entry counts 750 bytes), two do not.
    let s = Server::start(repo.path(), &["--cache-config", "local,size=1000"]);
    let ask = |b: i32| {
        let r = s.post_json("/v2/models/simple/infer", &simple_request(b));
        assert_eq!(output(&r, "OUTPUT0"), json!((0..16).map(|x| x + b).collect::<Vec<_>>()));
    };
    ask(1);
    ask(1);
    assert_eq!(counts(&s, "simple"), (2, 1, 1, 1));
    ask(2); // takes the place of 1's entry
    ask(1);
    assert_eq!(counts(&s, "simple"), (4, 1, 3, 3), "1's entry was let go for 2's");
    assert!(!s.log().contains("Failed to insert key"), "{}", s.log());
    drop(s);

    let s = Server::start(repo.path(), &["--cache-config", "local,size=200"]);
    for _ in 0..2 {
        let r = s.post_json("/v2/models/simple/infer", &simple_request(3));
        assert_eq!(output(&r, "OUTPUT0"), json!((3..19).collect::<Vec<_>>()));
    }
    assert_eq!(counts(&s, "simple"), (2, 0, 2, 2), "never kept: two misses");
    s.wait_until("the log line of an entry larger than the cache", || {
        s.log()
            .lines()
            .any(|l| l.contains("Failed to insert key [") && l.contains("exceed the cache's size of 200 bytes"))
    });
}

/// A reload (here a changed configuration) never answers from the entries of the load before it:
/// another plugin under the same version could answer differently. A plain load of the unchanged
/// model is no reload, and keeps them.
#[test]
fn a_reload_starts_afresh() {
    let repo = Repo::new();
    let dir = repo.model("simple", &add_sub_config("simple", CACHED), &["1"]);
    let s = Server::start(
        repo.path(),
        &["--cache-config", "local,size=1048576", "--model-control-mode", "explicit", "--load-model", "simple"],
    );
    let ask = || output(&s.post_json("/v2/models/simple/infer", &simple_request(1)), "OUTPUT1");
    let load = || s.post_json("/v2/repository/models/simple/load", &json!({})).status;
    ask();
    ask();
    assert_eq!(counts(&s, "simple"), (2, 1, 1, 1));
    assert_eq!(load(), 200);
    ask();
    assert_eq!(counts(&s, "simple"), (3, 2, 1, 1), "no reload: the entry answers");
    std::fs::write(dir.join("config.pbtxt"), add_sub_config("simple", &format!("{CACHED}\n# changed"))).unwrap();
    assert_eq!(load(), 200);
    assert_eq!(counts(&s, "simple"), (0, 0, 0, 0), "a reload's statistics start afresh");
    ask();
    assert_eq!(counts(&s, "simple"), (1, 0, 1, 1), "the reloaded model executes");
}

/// An ensemble that enables the cache answers the same request from it at the top level: its
/// steps do not run again.
#[test]
fn an_ensemble_caches_its_own_response() {
    let repo = Repo::new();
    repo.model("simple", &add_sub_config("simple", ""), &["1"]);
    repo.model("add_sub_twice", &format!("{ADD_SUB_TWICE}\n{CACHED}"), &["1"]);
    let s = Server::start(repo.path(), &["--cache-config", "local,size=1048576"]);
    let body = json!({"inputs": [
        {"name": "A", "shape": [1, 16], "datatype": "INT32", "data": (0..16).collect::<Vec<i32>>()},
        {"name": "B", "shape": [1, 16], "datatype": "INT32", "data": vec![1; 16]}
    ]});
    for _ in 0..2 {
        let r = s.post_json("/v2/models/add_sub_twice/infer", &body);
        assert_eq!(output(&r, "SUM2"), json!((0..16).map(|x| 2 * x).collect::<Vec<_>>()));
    }
    let (success, hit, miss, _) = counts(&s, "add_sub_twice");
    assert_eq!((success, hit, miss), (2, 1, 1));
    assert_eq!(counts(&s, "simple"), (2, 0, 0, 2), "the steps ran for the first request only");
}

/// What tritonserver refuses: both cache flags, two caches, a cache other than `local`; a
/// decoupled model, a sequence model or an ensemble with a decoupled step that enables the cache.
#[test]
fn unusable_cache_settings_are_refused() {
    let repo = Repo::new();
    repo.model("simple", &add_sub_config("simple", CACHED), &["1"]);
    let err = refused_start(repo.path(), &["--cache-config", "local,size=1", "--response-cache-byte-size", "1"]);
    assert!(err.contains("Incompatible flags --response-cache-byte-size and --cache-config"), "{err}");
    let err = refused_start(repo.path(), &["--cache-config", "local,size=8192", "--cache-config", "redis,key=value"]);
    assert!(err.contains("multiple cache configurations"), "{err}");
    let err = refused_start(repo.path(), &["--cache-config", "redis,host=localhost"]);
    assert!(err.contains("'local' cache only"), "{err}");

    std::fs::create_dir_all(repo.path().join("repeat_int32/1")).unwrap();
    let repeat = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../model_repository/repeat_int32/config.pbtxt"),
    )
    .unwrap();
    std::fs::write(repo.path().join("repeat_int32/config.pbtxt"), &repeat).unwrap();
    let decoupled = repeat.replace("name: \"repeat_int32\"", "name: \"repeat_cached\"");
    repo.model("repeat_cached", &format!("{decoupled}\n{CACHED}"), &["1"]);
    let over_stream = r#"name: "over_stream"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
        { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "repeat_int32" model_version: -1
  input_map { key: "IN" value: "IN" } input_map { key: "DELAY" value: "DELAY" } input_map { key: "WAIT" value: "WAIT" }
  output_map { key: "OUT" value: "OUT" } } ] }
response_cache { enable: true }"#;
    repo.model("over_stream", over_stream, &["1"]);
    let s = Server::start(repo.path(), &["--cache-config", "local,size=8192"]);
    for model in ["repeat_cached", "over_stream"] {
        let (state, reason) = s.model_state(model);
        assert_eq!(state, "UNAVAILABLE", "{model}");
        assert!(
            reason.contains(&format!(
                "Response Cache does not currently support model {model} with 'decoupled' transaction policy"
            )),
            "{model}: {reason}"
        );
    }
    assert_eq!(s.model_state("simple").0, "READY");
}
