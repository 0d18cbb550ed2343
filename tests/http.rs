//! The KServe v2 HTTP/REST surface, driven against the real `nereus` binary.
use crate::common;

use std::io::{Read, Write};
use std::sync::OnceLock;

use common::*;
use serde_json::{Value, json};

/// One server with the example repository, shared by the read-only tests of this file.
fn examples() -> &'static (Repo, Server) {
    static S: OnceLock<(Repo, Server)> = OnceLock::new();
    S.get_or_init(|| {
        let repo = Repo::new();
        for m in ["simple", "add_sub_fp32", "identity_fp32", "identity_bytes", "string_upper", "string_lower"] {
            repo.example(m);
        }
        let dir = repo.model("echo", &faults_config("echo", ""), &["1"]);
        install_faults_component(&dir);
        repo.model(
            "raw_bytes",
            r#"backend: "identity"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]"#,
            &["1"],
        );
        let server = Server::start(repo.path(), &[]);
        clean_up_at_exit(&server, &repo);
        (repo, server)
    })
}

fn server() -> &'static Server {
    &examples().1
}

#[test]
fn health_and_server_metadata() {
    let s = server();
    let live = s.get("/v2/health/live");
    assert_eq!((live.status, live.body.len()), (200, 0));
    assert_eq!(s.get("/v2/health/ready").status, 200);
    let meta = s.get("/v2").json();
    assert_eq!(meta["name"], "nereus");
    let extensions = meta["extensions"].as_array().unwrap();
    assert!(extensions.contains(&json!("binary_tensor_data")));
    // tritonserver's word for the sequence extension (Triton's L0_server_status looks for it).
    assert!(extensions.contains(&json!("sequence")), "{extensions:?}");
    assert_eq!(s.get("/v2/nothing/here").status, 404);
}

#[test]
fn model_metadata_readiness_and_config() {
    let s = server();
    for path in ["/v2/models/simple", "/v2/models/simple/versions/1"] {
        let m = s.get(path).json();
        assert_eq!(m["name"], "simple");
        assert_eq!(m["versions"], json!(["1"]));
        assert_eq!(m["platform"], "add_sub");
        assert_eq!(m["inputs"][0], json!({"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}));
        assert_eq!(m["outputs"][1], json!({"name": "OUTPUT1", "datatype": "INT32", "shape": [-1, 16]}));
    }
    assert_eq!(s.get("/v2/models/simple/ready").status, 200);
    assert_eq!(s.get("/v2/models/simple/versions/1/ready").status, 200);
    assert_eq!(s.get("/v2/models/simple/versions/2/ready").status, 400);
    assert_eq!(s.get("/v2/models/nope/ready").status, 400);

    let c = s.get("/v2/models/simple/config").json();
    assert_eq!(c["name"], "simple");
    assert_eq!(c["backend"], "add_sub");
    assert_eq!(c["max_batch_size"], 8);
    assert_eq!(c["input"][0]["data_type"], "TYPE_INT32");
    assert_eq!(c["input"][0]["dims"], json!([16]));
    assert_eq!(c["instance_group"][0]["kind"], "KIND_CPU");
    assert_eq!(c["instance_group"][0]["count"], 1);
    assert_eq!(c["version_policy"], json!({"latest": {"num_versions": 1}}));
    assert_eq!(s.get("/v2/models/simple/versions/1/config").json(), c);
    let params = s.get("/v2/models/string_lower/config").json();
    assert_eq!(params["parameters"]["mode"]["string_value"], "lower");

    let unknown = s.get("/v2/models/nope");
    assert_eq!(unknown.status, 404);
    assert!(unknown.error().contains("'nope'"), "{}", unknown.text());
    assert_eq!(s.get("/v2/models/simple/versions/7").status, 404);
    assert_eq!(s.get("/v2/models/simple/versions/x").status, 400);
    let index = s.post_json("/v2/repository/index", &json!({})).json();
    assert!(index.as_array().unwrap().iter().any(|m| m["name"] == "simple" && m["state"] == "READY"));
    // `ready` must be a boolean, however deeply its value nests (tritonserver parses any depth)
    let depth = 100_000;
    let nested = format!("{{\"ready\":{}true{}}}", "[".repeat(depth), "]".repeat(depth));
    for body in [nested.as_str(), r#"{"ready":"yes"}"#, r#"{"ready":null}"#] {
        let r = s.request("POST", "/v2/repository/index", &[], body.as_bytes());
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(r.error(), "Invalid value for 'ready': expected a boolean");
    }
    let ready = s.request("POST", "/v2/repository/index", &[], br#"{"ready": true, "other": [[[1]]]}"#);
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert!(s.get("/v2/health/live").status == 200);
}

#[test]
fn json_inference() {
    let s = server();
    let mut body = simple_request(3);
    body["id"] = json!("req-42");
    let r = s.post_json("/v2/models/simple/infer", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["model_name"], "simple");
    assert_eq!(v["model_version"], "1");
    assert_eq!(v["id"], "req-42");
    let expect_sum: Vec<i32> = (0..16).map(|i| i + 3).collect();
    let expect_diff: Vec<i32> = (0..16).map(|i| i - 3).collect();
    assert_eq!(v["outputs"][0]["name"], "OUTPUT0");
    assert_eq!(v["outputs"][0]["shape"], json!([1, 16]));
    assert_eq!(v["outputs"][0]["data"], json!(expect_sum));
    assert_eq!(v["outputs"][1]["data"], json!(expect_diff));

    // a subset of outputs, with a version in the path; nested data
    let mut body = simple_request(1);
    body["inputs"][0]["data"] = json!([(0..16).collect::<Vec<i32>>()]);
    body["outputs"] = json!([{"name": "OUTPUT1"}]);
    let v = s.post_json("/v2/models/simple/versions/1/infer", &body).json();
    assert_eq!(v["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(v["outputs"][0]["name"], "OUTPUT1");

    // batch of 2, FP32
    let v = s
        .post_json(
            "/v2/models/add_sub_fp32/infer",
            &json!({"inputs": [
                {"name": "INPUT0", "shape": [3], "datatype": "FP32", "data": [1.5, 2.0, -1.0]},
                {"name": "INPUT1", "shape": [3], "datatype": "FP32", "data": [0.5, 1.0, 1.0]}]}),
        )
        .json();
    assert_eq!(v["outputs"][0]["data"], json!([2.0, 3.0, 0.0]));
    assert_eq!(v["outputs"][1]["data"], json!([1.0, 1.0, -2.0]));
}

/// NaN and the infinities go both ways as tritonserver's JSON library writes and reads them (the
/// bare tokens `NaN`, `Infinity` and `-Infinity`, as Python's `json` does), not as `null` and not
/// refused; in strings they stay text, and a non-float input refuses them as tritonserver does.
#[test]
fn json_floats_carry_nan_and_infinities() {
    let s = server();
    let body = r#"{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,6],"data":[NaN,Infinity,-Infinity,Inf,-Inf,1.5]}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":false}}],"id":"NaN Infinity"}"#;
    let r =
        s.request("POST", "/v2/models/identity_fp32/infer", &[("Content-Type", "application/json")], body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(text.contains(r#""data":[NaN,Infinity,-Infinity,Infinity,-Infinity,1.5]"#), "{text}");
    assert!(text.contains(r#""id":"NaN Infinity""#), "{text}");
    // The same values as binary data: each arrived as the float it names.
    let binary = body.replace(r#""binary_data":false"#, r#""binary_data":true"#);
    let r = s.request("POST", "/v2/models/identity_fp32/infer", &[], binary.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let n: usize = r.header("Inference-Header-Content-Length").unwrap().parse().unwrap();
    let floats: Vec<f32> = r.body[n..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert!(floats[0].is_nan());
    assert_eq!(&floats[1..], [f32::INFINITY, f32::NEG_INFINITY, f32::INFINITY, f32::NEG_INFINITY, 1.5]);
    // Not a number for an integer input; a word that only starts like one is still no JSON.
    let ints = r#"{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[NaN,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}"#;
    let r = s.request("POST", "/v2/models/simple/infer", &[], ints.as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("attempt to access JSON non-signed-integer as signed-integer"), "{}", r.text());
    let r = s.request("POST", "/v2/models/identity_fp32/infer", &[], body.replace("[NaN,", "[NaNs,").as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().starts_with("failed to parse the request JSON"), "{}", r.text());
    // A token where a string goes, or as a key, is no string.
    let r =
        s.request("POST", "/v2/models/identity_fp32/infer", &[], body.replace(r#""NaN Infinity""#, "NaN").as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("Unable to parse 'id'"), "{}", r.text());
    let keyed = body.replace(r#""binary_data":false"#, r#""binary_data":false,NaN:1"#);
    let r = s.request("POST", "/v2/models/identity_fp32/infer", &[], keyed.as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().starts_with("failed to parse the request JSON"), "{}", r.text());
    // The generate extension reads and writes them the same, its one element unwrapped too.
    for (data, written) in [("[NaN,-Infinity,2.5]", "[NaN,-Infinity,2.5]"), ("Infinity", "Infinity")] {
        let body = format!(r#"{{"INPUT0":{data},"score":-Inf}}"#);
        let r = s.request("POST", "/v2/models/identity_fp32/generate", &[], body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().contains(&format!(r#""OUTPUT0":{written}"#)), "{}", r.text());
    }
    let r = s.request("POST", "/v2/models/identity_fp32/generate", &[], br#"{"INPUT0":[1],"id":NaN}"#);
    assert_eq!((r.status, r.error()), (400, "Unable to get request ID as string".to_string()));
}

/// BYTES tensors: a count of elements that disagrees with the shape is refused with tritonserver's
/// words (it stops at the first element too many), and an element that is not UTF-8 text is never
/// altered into JSON: asked for as JSON it is refused; as binary data it comes back as it was.
#[test]
fn bytes_elements_are_counted_as_tritonserver_counts_them_and_never_altered() {
    let s = server();
    let element = |b: &[u8]| [&(b.len() as u32).to_le_bytes()[..], b].concat();
    let call = |shape: &str, data: &[u8], binary_output: bool| {
        let header = format!(
            r#"{{"inputs":[{{"name":"INPUT0","datatype":"BYTES","shape":{shape},"parameters":{{"binary_data_size":{}}}}}],"outputs":[{{"name":"OUTPUT0","parameters":{{"binary_data":{binary_output}}}}}]}}"#,
            data.len()
        );
        let body = [header.as_bytes(), data].concat();
        s.request(
            "POST",
            "/v2/models/raw_bytes/infer",
            &[("Inference-Header-Content-Length", &header.len().to_string())],
            &body,
        )
    };
    let three = [element(b"a"), element(b"b"), element(b"c")].concat();
    let r = call("[2,1]", &three, true);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.error(),
        "unexpected number of string elements 3 for inference input 'INPUT0' for model 'raw_bytes', expecting 2"
    );
    let r = call("[4,1]", &three, true);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error(), "expected 4 string elements for inference input 'INPUT0' for model 'raw_bytes', got 3");

    let not_text = [element(b"\xff\xfeA"), element(b"ok")].concat();
    let r = call("[2,1]", &not_text, false);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("output 'OUTPUT0' holds an element that is not UTF-8 text"), "{}", r.text());
    let r = call("[2,1]", &not_text, true);
    assert_eq!(r.status, 200, "{}", r.text());
    let n: usize = r.header("Inference-Header-Content-Length").unwrap().parse().unwrap();
    assert_eq!(&r.body[n..], &not_text[..]);
}

#[test]
fn bytes_tensors() {
    let s = server();
    let r = s.post_json(
        "/v2/models/string_upper/infer",
        &json!({"inputs": [{"name": "INPUT0", "shape": [3], "datatype": "BYTES", "data": ["héllo", "", "Wasm"]}]}),
    );
    let v = r.json();
    assert_eq!(v["outputs"][0]["datatype"], "BYTES");
    assert_eq!(v["outputs"][0]["data"], json!(["HÉLLO", "", "WASM"]));
    assert_eq!(v["outputs"][1]["data"], json!([5, 0, 4]));
    let v = s
        .post_json(
            "/v2/models/string_lower/infer",
            &json!({"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES", "data": ["MiXeD"]}]}),
        )
        .json();
    assert_eq!(v["outputs"][0]["data"], json!(["mixed"]));

    // BYTES in binary framing both ways, through identity
    let mut tensor = Vec::new();
    for e in [&b"\x00\xffraw"[..], b"two"] {
        tensor.extend_from_slice(&(e.len() as u32).to_le_bytes());
        tensor.extend_from_slice(e);
    }
    let header = json!({"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": tensor.len()}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}]})
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend_from_slice(&tensor);
    let hl = header.len().to_string();
    let r = s.request("POST", "/v2/models/identity_bytes/infer", &[("Inference-Header-Content-Length", &hl)], &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let n: usize = r.header("Inference-Header-Content-Length").unwrap().parse().unwrap();
    let head: Value = serde_json::from_slice(&r.body[..n]).unwrap();
    assert_eq!(head["outputs"][0]["parameters"]["binary_data_size"], tensor.len());
    assert_eq!(&r.body[n..], &tensor[..]);
}

#[test]
fn binary_tensor_extension_both_ways() {
    let s = server();
    let a: Vec<i32> = (0..16).map(|i| i * 10).collect();
    let b: Vec<i32> = vec![7; 16];
    let header = json!({
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}, {"name": "OUTPUT1", "parameters": {"binary_data": false}}]
    })
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend(le_i32(&a));
    body.extend(le_i32(&b));
    let hl = header.len().to_string();
    let r = s.request("POST", "/v2/models/simple/infer", &[("Inference-Header-Content-Length", &hl)], &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("Content-Type"), Some("application/octet-stream"));
    let n: usize = r.header("Inference-Header-Content-Length").unwrap().parse().unwrap();
    let head: Value = serde_json::from_slice(&r.body[..n]).unwrap();
    assert_eq!(head["outputs"][0]["parameters"]["binary_data_size"], 64);
    assert!(head["outputs"][0].get("data").is_none());
    let diff: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
    assert_eq!(head["outputs"][1]["data"], json!(diff));
    let sum: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(&r.body[n..], &le_i32(&sum)[..]);

    // request-level binary_data_output with JSON inputs
    let mut body = simple_request(2);
    body["parameters"] = json!({"binary_data_output": true});
    let r = s.post_json("/v2/models/simple/infer", &body);
    let n: usize = r.header("Inference-Header-Content-Length").unwrap().parse().unwrap();
    assert_eq!(r.body.len() - n, 128);
    // a listed output without its own binary_data is JSON even so, as tritonserver: the request's
    // binary_data_output is the default of the outputs it does not list
    body["outputs"] = json!([{"name": "OUTPUT0", "parameters": {"binary_data": false}}, {"name": "OUTPUT1"}]);
    let r = s.post_json("/v2/models/simple/infer", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("Inference-Header-Content-Length").is_none(), "{:?}", r.header("Inference-Header-Content-Length"));
    let v = r.json();
    assert!(v["outputs"][0]["data"].is_array() && v["outputs"][1]["data"].is_array(), "{v}");

    // raw binary request: only the tensor, for a one-input model; outputs come back binary
    let data: Vec<u8> = [1.0f32, 2.5, -3.0].iter().flat_map(|f| f.to_le_bytes()).collect();
    let r = s.request("POST", "/v2/models/identity_fp32/infer", &[("Inference-Header-Content-Length", "0")], &data);
    assert_eq!(r.status, 200, "{}", r.text());
    let n: usize = r.header("Inference-Header-Content-Length").unwrap().parse().unwrap();
    let head: Value = serde_json::from_slice(&r.body[..n]).unwrap();
    assert_eq!(head["outputs"][0]["shape"], json!([1, 3]));
    assert_eq!(&r.body[n..], &data[..]);
    let r = s.request("POST", "/v2/models/simple/infer", &[("Inference-Header-Content-Length", "0")], &data);
    assert_eq!(r.status, 400);
    assert!(r.error().contains("Raw request must only have 1 input"), "{}", r.text());
    // BYTES: the whole body is the one element of a [1]-shaped input, as tritonserver reads it
    let text = b"raw \0 bytes, any of them: \xff";
    let r = s.request("POST", "/v2/models/raw_bytes/infer", &[("Inference-Header-Content-Length", "0")], text);
    assert_eq!(r.status, 200, "{}", r.text());
    let n: usize = r.header("Inference-Header-Content-Length").unwrap().parse().unwrap();
    let head: Value = serde_json::from_slice(&r.body[..n]).unwrap();
    assert_eq!(head["outputs"][0]["shape"], json!([1, 1]));
    assert_eq!(&r.body[n..n + 4], &(text.len() as u32).to_le_bytes());
    assert_eq!(&r.body[n + 4..], &text[..]);
    // ... and only there: identity_bytes takes [-1]
    let r = s.request("POST", "/v2/models/identity_bytes/infer", &[("Inference-Header-Content-Length", "0")], text);
    assert_eq!(r.status, 400);
    assert!(r.error().contains("the model must have input shape [1]"), "{}", r.text());
}

#[test]
fn parameters_and_request_id_reach_the_backend() {
    let s = server();
    let r = s.post_json(
        "/v2/models/echo/infer",
        &json!({"id": "abc", "parameters": {"flag": true, "n": -4, "x": 1.5, "s": "str", "sequence_id": 9},
            "inputs": [{"name": "INPUT0", "shape": [2], "datatype": "INT32", "data": [5, 6]}]}),
    );
    let v = r.json();
    assert_eq!(v["id"], "abc");
    assert_eq!(v["outputs"][0]["data"], json!([5, 6]));
    let p = &v["parameters"];
    assert_eq!(p["flag"], true);
    assert_eq!(p["n"], -4);
    assert_eq!(p["x"], 1.5);
    assert_eq!(p["s"], "str");
    assert_eq!(p["echo_id"], "abc");
    assert!(p.get("sequence_id").is_none(), "reserved parameters are not custom: {p}");
    // `triton_` keys are tritonserver's own: its HTTP frontend refuses them from a client.
    let r = s.post_json(
        "/v2/models/echo/infer",
        &json!({"parameters": {"triton_hidden": 1}, "inputs": [{"name": "INPUT0", "shape": [1], "datatype": "INT32", "data": [5]}]}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.error(),
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
    );
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn compression_both_ways() {
    let s = server();
    let body = simple_request(1).to_string();
    let packed = gzip(body.as_bytes());
    let r = s.request(
        "POST",
        "/v2/models/simple/infer",
        &[("Content-Encoding", "gzip"), ("Accept-Encoding", "gzip")],
        &packed,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Encoding"), Some("gzip"));
    let mut plain = String::new();
    flate2::read::GzDecoder::new(&r.body[..]).read_to_string(&mut plain).unwrap();
    let v: Value = serde_json::from_str(&plain).unwrap();
    assert_eq!(v["outputs"][0]["data"][15], 16);

    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(body.as_bytes()).unwrap();
    let r = s.request(
        "POST",
        "/v2/models/simple/infer",
        &[("Content-Encoding", "deflate"), ("Accept-Encoding", "deflate")],
        &e.finish().unwrap(),
    );
    assert_eq!(r.header("Content-Encoding"), Some("deflate"));
    let mut plain = String::new();
    flate2::read::ZlibDecoder::new(&r.body[..]).read_to_string(&mut plain).unwrap();
    assert!(plain.contains("\"OUTPUT0\""));

    // Only when asked, and as tritonserver picks among several codings: the highest weight
    let r = s.post_json("/v2/models/simple/infer", &simple_request(1));
    assert_eq!((r.status, r.header("Content-Encoding")), (200, None));
    for (accept, coding) in [
        ("identity, gzip", None),
        ("gzip;q=0", None),
        ("deflate;q=0.5, gzip", Some("gzip")),
        ("br, deflate", Some("deflate")),
    ] {
        let r = s.request("POST", "/v2/models/simple/infer", &[("Accept-Encoding", accept)], body.as_bytes());
        assert_eq!((r.status, r.header("Content-Encoding")), (200, coding), "{accept}");
    }
    // An error is plain JSON, asked or not.
    let r = s.request("POST", "/v2/models/nope/infer", &[("Accept-Encoding", "gzip")], body.as_bytes());
    assert_eq!((r.status, r.header("Content-Encoding")), (404, None));
    assert!(r.error().contains("nope"), "{}", r.text());

    let r = s.request("POST", "/v2/models/simple/infer", &[("Content-Encoding", "gzip")], b"definitely not gzip");
    assert_eq!(r.status, 400, "{}", r.text());
    let r = s.request("POST", "/v2/models/simple/infer", &[("Content-Encoding", "br")], body.as_bytes());
    assert_eq!(r.status, 415, "{}", r.text());
}

/// tritonserver compresses inference responses only: every other route answers plain JSON even to
/// a client that accepts gzip (tritonclient's asyncio HTTP client, aiohttp, reads them as text).
#[test]
fn only_inference_responses_are_compressed() {
    let s = server();
    let gets = [
        "/v2",
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/simple",
        "/v2/models/simple/versions/1",
        "/v2/models/simple/ready",
        "/v2/models/simple/config",
        "/v2/models/stats",
        "/v2/models/simple/stats",
        "/v2/logging",
        "/v2/systemsharedmemory/status",
        "/v2/models/nope",
    ];
    for path in gets {
        for coding in ["gzip", "deflate", "gzip, deflate"] {
            let r = s.request("GET", path, &[("Accept-Encoding", coding)], b"");
            assert_eq!(r.header("Content-Encoding"), None, "{path} ({coding})");
            if !r.body.is_empty() {
                serde_json::from_slice::<Value>(&r.body).unwrap_or_else(|e| panic!("{path}: {e}: {:?}", r.body));
            }
        }
    }
    for path in ["/v2/repository/index", "/v2/logging", "/v2/systemsharedmemory/unregister"] {
        let body = if path == "/v2/logging" { b"{}".as_slice() } else { b"".as_slice() };
        let r = s.request("POST", path, &[("Accept-Encoding", "gzip")], body);
        assert_eq!(r.header("Content-Encoding"), None, "POST {path}");
        if !r.body.is_empty() {
            serde_json::from_slice::<Value>(&r.body).unwrap_or_else(|e| panic!("{path}: {e}: {:?}", r.body));
        }
    }
    let r = s.request(
        "POST",
        "/v2/models/simple/infer",
        &[("Accept-Encoding", "gzip")],
        simple_request(1).to_string().as_bytes(),
    );
    assert_eq!((r.status, r.header("Content-Encoding")), (200, Some("gzip")));
}

/// Every validation fault gets its status and a message naming the problem; the server keeps
/// answering correctly afterwards.
#[test]
fn validation_errors() {
    let s = server();
    let post = |model: &str, body: Value| s.post_json(&format!("/v2/models/{model}/infer"), &body);
    let mut cases: Vec<(Value, &str, &str)> = Vec::new();
    let mut missing = simple_request(1);
    missing["inputs"].as_array_mut().unwrap().pop();
    cases.push((missing, "simple", "Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']"));
    let mut extra = simple_request(1);
    extra["inputs"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "EXTRA", "shape": [1], "datatype": "INT32", "data": [1]}));
    cases.push((extra, "simple", "unexpected inference input 'EXTRA'"));
    let mut dup = simple_request(1);
    let first = dup["inputs"][0].clone();
    dup["inputs"].as_array_mut().unwrap().push(first);
    cases.push((dup, "simple", "already exists in request"));
    let mut dtype = simple_request(1);
    dtype["inputs"][0]["datatype"] = json!("FP32");
    cases.push((dtype, "simple", "data-type is 'FP32', but model 'simple' expects 'INT32'"));
    let mut bad_dtype = simple_request(1);
    bad_dtype["inputs"][0]["datatype"] = json!("INT33");
    cases.push((bad_dtype, "simple", "invalid datatype 'INT33'"));
    let mut shape = simple_request(1);
    shape["inputs"][0]["shape"] = json!([2, 8]);
    cases.push((shape, "simple", "Expected [-1,16], got [2,8]"));
    let mut batch = simple_request(1);
    for i in 0..2 {
        batch["inputs"][i]["shape"] = json!([9, 16]);
        batch["inputs"][i]["data"] = json!(vec![0; 144]);
    }
    cases.push((batch, "simple", "batch-size must be <= 8"));
    let mut count = simple_request(1);
    count["inputs"][0]["data"] = json!([1, 2, 3]);
    cases.push((count, "simple", "Failed to parse 'data' field: shape does not match true shape"));
    let mut surplus = simple_request(1);
    surplus["inputs"][0]["data"] = json!(vec![1; 18]);
    cases.push((surplus, "simple", "Unable to parse 'data': Shape does not match true shape of 'data' field"));
    let mut lying = simple_request(1);
    lying["inputs"][0]["shape"] = json!([1, 2147483648i64]);
    cases.push((lying, "simple", "Failed to parse 'data' field: shape does not match true shape"));
    let mut huge = simple_request(1);
    huge["inputs"][0]["shape"] = json!([16, (1u64 << 60) + 2]);
    cases.push((huge, "simple", "causes total element count to exceed maximum size of 9223372036854775807"));
    let mut wide = simple_request(1);
    wide["inputs"][0]["shape"] = json!([4, (1u64 << 60) + 2]);
    cases.push((
        wide,
        "simple",
        "byte size overflow for input 'INPUT0': element count (4611686018427387912) * data type size (4)",
    ));
    let mut deep = simple_request(1);
    deep["inputs"][0]["shape"] = json!([1, 1]);
    deep["inputs"][0]["data"] = (0..100).fold(json!(1), |v, _| json!([v]));
    cases.push((deep, "simple", "JSON nesting depth exceeds maximum allowed limit (100)"));
    let mut twice = simple_request(1);
    twice["outputs"] = json!([{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]);
    cases.push((twice, "simple", "output 'OUTPUT0' already exists in request"));
    let mut range = simple_request(1);
    range["inputs"][0]["data"][0] = json!(4294967296i64);
    cases.push((range, "simple", "out of range"));
    let mut not_int = simple_request(1);
    not_int["inputs"][0]["data"][0] = json!("seven");
    cases.push((not_int, "simple", "attempt to access JSON non-signed-integer as signed-integer"));
    let mut unknown_out = simple_request(1);
    unknown_out["outputs"] = json!([{"name": "OUTPUT9"}]);
    cases.push((unknown_out, "simple", "unexpected inference output 'OUTPUT9'"));
    let mut classification = simple_request(1);
    classification["outputs"] = json!([{"name": "OUTPUT0", "parameters": {"classification": "two"}}]);
    cases.push((classification, "simple", "Unable to set 'classification'"));
    cases.push((json!({"inputs": "nope"}), "simple", "failed to parse the request JSON"));
    cases.push((
        json!({"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP16", "data": [1]}]}),
        "identity_fp32",
        "no JSON form",
    ));
    for (body, model, needle) in cases {
        let r = post(model, body.clone());
        assert_eq!(r.status, 400, "{needle}: {}", r.text());
        assert!(r.error().contains(needle), "expected '{needle}' in: {}", r.text());
    }
    // a negative dimension fails tritonserver's JSON parse of the shape: 500, in its words
    let mut neg = simple_request(1);
    neg["inputs"][0]["shape"] = json!([1, -16]);
    let r = post("simple", neg);
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.error().contains("Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"),
        "{}",
        r.text()
    );

    // malformed JSON text and framing
    let r = s.request("POST", "/v2/models/simple/infer", &[], b"{\"inputs\": [");
    assert_eq!(r.status, 400);
    let r = s.request("POST", "/v2/models/simple/infer", &[("Inference-Header-Content-Length", "9999")], b"{}");
    assert_eq!(r.status, 400);
    assert!(r.error().contains("exceeds the body size"));
    let r = s.request("POST", "/v2/models/simple/infer", &[("Inference-Header-Content-Length", "x")], b"{}");
    assert_eq!(r.status, 400);
    let header = json!({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}]})
    .to_string();
    let mut short = header.clone().into_bytes();
    short.extend(vec![0u8; 100]);
    let hl = header.len().to_string();
    let r = s.request("POST", "/v2/models/simple/infer", &[("Inference-Header-Content-Length", &hl)], &short);
    assert_eq!(r.status, 400);
    assert!(r.error().contains("binary_data_size"), "{}", r.text());
    let header = json!({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 60}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}]})
    .to_string();
    let mut wrong = header.clone().into_bytes();
    wrong.extend(vec![0u8; 124]);
    let hl = header.len().to_string();
    let r = s.request("POST", "/v2/models/simple/infer", &[("Inference-Header-Content-Length", &hl)], &wrong);
    assert_eq!(r.status, 400);
    assert!(r.error().contains("Expected 64, got 60"), "{}", r.text());

    let r = post("nope", simple_request(1));
    assert_eq!(r.status, 404);
    let r = s.post_json("/v2/models/simple/versions/3/infer", &simple_request(1));
    assert_eq!(r.status, 404);

    // and the server still serves correct answers
    let v = post("simple", simple_request(5)).json();
    assert_eq!(v["outputs"][0]["data"][0], 5);
}

#[test]
fn body_size_limit() {
    let repo = Repo::new();
    repo.example("identity_fp32");
    let s = Server::start(repo.path(), &["--http-max-input-size", "1024"]);
    let big = json!({"inputs": [{"name": "INPUT0", "shape": [1, 400], "datatype": "FP32", "data": vec![1.0; 400]}]});
    let r = s.post_json("/v2/models/identity_fp32/infer", &big);
    assert_eq!(r.status, 400);
    assert!(r.error().starts_with("request JSON size of "), "{}", r.text());
    assert!(
        r.error().ends_with(
            " bytes exceeds the maximum allowed input size of 1024 bytes. Use --http-max-input-size to increase the limit."
        ),
        "{}",
        r.text()
    );
    // a raw binary request names its raw input, as tritonserver
    let raw = vec![0u8; 2048];
    let r = s.request("POST", "/v2/models/identity_fp32/infer", &[("Inference-Header-Content-Length", "0")], &raw);
    assert_eq!(r.status, 400);
    assert_eq!(
        r.error(),
        "Raw input has a byte_size (2048 bytes) that exceeds the maximum allowed value of 1024 bytes. \
         Use --http-max-input-size to increase the limit."
    );
    // a gzip bomb within the compressed limit but past it once inflated
    let bomb = gzip(&vec![b' '; 256 << 10]);
    assert!(bomb.len() < 1024);
    let r = s.request("POST", "/v2/models/identity_fp32/infer", &[("Content-Encoding", "gzip")], &bomb);
    assert_eq!(r.status, 400);
    assert!(
        r.error().starts_with("Decompressed data size exceeds the maximum allowed value of 1024 bytes"),
        "{}",
        r.text()
    );
    let ok = json!({"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}]});
    assert_eq!(s.post_json("/v2/models/identity_fp32/infer", &ok).status, 200);
}

#[test]
fn instance_group_count_two_executes_two_batches_at_once() {
    let repo = Repo::new();
    repo.example("identity_fp32");
    let s = Server::start(repo.path(), &[]);
    s.gate("identity_fp32", false);
    let port = s.port;
    let body =
        json!({"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}]}).to_string();
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || http(port, "POST", "/v2/models/identity_fp32/infer", &[], body.as_bytes()))
        })
        .collect();
    // Both instances hold a request inside the gate at the same time.
    s.wait_until("two executions in flight", || s.executions("identity_fp32").0 == 2);
    s.gate("identity_fp32", true);
    for c in clients {
        let r = c.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["outputs"][0]["data"], json!([1.0, 2.0]));
    }
    let (in_flight, max, done) = s.executions("identity_fp32");
    assert_eq!((in_flight, max, done), (0, 2, 2));
}

#[test]
fn two_models_execute_at_the_same_time() {
    let repo = Repo::new();
    repo.example("simple");
    repo.example("add_sub_fp32");
    let s = Server::start(repo.path(), &[]);
    s.gate("simple", false);
    s.gate("add_sub_fp32", false);
    let port = s.port;
    let a = {
        let body = simple_request(1).to_string();
        std::thread::spawn(move || http(port, "POST", "/v2/models/simple/infer", &[], body.as_bytes()))
    };
    let b = {
        let body = json!({"inputs": [
            {"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1.0]},
            {"name": "INPUT1", "shape": [1], "datatype": "FP32", "data": [2.0]}]})
        .to_string();
        std::thread::spawn(move || http(port, "POST", "/v2/models/add_sub_fp32/infer", &[], body.as_bytes()))
    };
    s.wait_until("both models executing", || s.executions("simple").0 == 1 && s.executions("add_sub_fp32").0 == 1);
    s.gate("simple", true);
    s.gate("add_sub_fp32", true);
    assert_eq!(a.join().unwrap().json()["outputs"][0]["data"][15], 16);
    assert_eq!(b.join().unwrap().json()["outputs"][0]["data"], json!([3.0]));
}

#[test]
fn shutdown_drains_in_flight_requests() {
    let repo = Repo::new();
    let dir = repo.model("slow", &faults_config("slow", ""), &["1"]);
    install_faults_component(&dir);
    let mut s = Server::start(repo.path(), &[]);
    let port = s.port;
    let client = std::thread::spawn(move || {
        let body = json!({"parameters": {"fault": "spin", "spin_ms": 1500},
            "inputs": [{"name": "INPUT0", "shape": [2], "datatype": "INT32", "data": [4, 2]}]})
        .to_string();
        http(port, "POST", "/v2/models/slow/infer", &[], body.as_bytes())
    });
    s.wait_until("the request executing", || s.executions("slow").0 == 1);
    let status = s.terminate();
    let r = client.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["outputs"][0]["data"], json!([4, 2]));
    assert!(status.success(), "exit status {status:?}\n{}", s.log());
    assert!(s.log().contains("Waiting for in-flight requests to complete."), "{}", s.log());
}

/// A shutdown whose in-flight requests outlast `--exit-timeout-secs` exits at the timeout (status
/// 1) and logs what it cut off; before that, new requests are refused.
#[test]
fn shutdown_exits_at_its_timeout_and_says_what_it_cut_off() {
    let repo = Repo::new();
    let dir = repo.model("slow", &faults_config("slow", ""), &["1"]);
    install_faults_component(&dir);
    let mut s = Server::start(repo.path(), &["--exit-timeout-secs", "1"]);
    let port = s.port;
    let client = std::thread::spawn(move || {
        let body = json!({"parameters": {"fault": "spin", "spin_ms": 20000},
            "inputs": [{"name": "INPUT0", "shape": [2], "datatype": "INT32", "data": [4, 2]}]})
        .to_string();
        let _ = std::panic::catch_unwind(|| http(port, "POST", "/v2/models/slow/infer", &[], body.as_bytes()));
    });
    s.wait_until("the request executing", || s.executions("slow").0 == 1);
    let started = std::time::Instant::now();
    let status = s.terminate();
    assert_eq!(status.code(), Some(1), "{}", s.log());
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "the spin is 20 s; the exit timeout 1 s");
    let log = s.log();
    assert!(log.contains("Exit timeout expired. Exiting immediately."), "{log}");
    assert!(log.contains("cut off: model 'slow' version 1 had 1 request(s) in flight or queued"), "{log}");
    let _ = client.join();
}

#[test]
fn statistics_count_exactly_what_was_served() {
    let repo = Repo::new();
    repo.example("simple");
    repo.example("identity_fp32");
    let s = Server::start(repo.path(), &[]);
    let stats = |path: &str| s.get(path).json();
    let before = stats("/v2/models/simple/stats");
    assert_eq!(before["model_stats"][0]["inference_count"], 0);
    for b in 0..3 {
        assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(b)).status, 200);
    }
    // a batch of 2 in one request counts 2 inferences and 1 execution
    let mut two = simple_request(0);
    for i in 0..2 {
        two["inputs"][i]["shape"] = json!([2, 16]);
        two["inputs"][i]["data"] = json!(vec![1; 32]);
    }
    assert_eq!(s.post_json("/v2/models/simple/infer", &two).status, 200);
    // validation failures never reach the model
    let mut bad = simple_request(0);
    bad["inputs"][0]["datatype"] = json!("FP32");
    assert_eq!(s.post_json("/v2/models/simple/infer", &bad).status, 400);

    let m = &stats("/v2/models/simple/versions/1/stats")["model_stats"][0];
    assert_eq!(m["name"], "simple");
    assert_eq!(m["version"], "1");
    assert_eq!(m["inference_count"], 5);
    assert_eq!(m["execution_count"], 4);
    let inf = &m["inference_stats"];
    assert_eq!(inf["success"]["count"], 4);
    assert_eq!(inf["fail"]["count"], 0);
    for phase in ["queue", "compute_input", "compute_infer", "compute_output"] {
        assert_eq!(inf[phase]["count"], 4, "{phase}");
    }
    assert!(inf["compute_infer"]["ns"].as_u64().unwrap() > 0);
    let sizes: Vec<u64> =
        m["batch_stats"].as_array().unwrap().iter().map(|b| b["batch_size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, vec![1, 2]);
    assert!(m["last_inference"].as_u64().unwrap() > 0);

    let all = stats("/v2/models/stats");
    let names: Vec<&str> = all["model_stats"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["identity_fp32", "simple"]);
    // As tritonserver's TRITONSERVER_ServerModelStatistics: INVALID_ARG for a model with no ready
    // version (known or not) and for a version that is not ready.
    let r = s.get("/v2/models/nope/stats");
    assert_eq!((r.status, r.error()), (400, "requested model 'nope' is not available".to_string()));
    let r = s.get("/v2/models/simple/versions/7/stats");
    assert_eq!((r.status, r.error()), (400, "requested model version is not available for model 'simple'".to_string()));
}

/// `--http-restricted-api`, as tritonserver: a restricted group answers 403 with Triton's message
/// unless the request carries the group's header with its value; other APIs stay open; a bad
/// option stops the server before it serves.
#[test]
fn restricted_apis_need_their_header() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(
        repo.path(),
        &[
            "--http-restricted-api",
            "model-repository,model-config:Admin-Key=s3cret",
            "--http-restricted-api=inference:infer-key=go",
        ],
    );
    let admin = [("admin-key", "s3cret")];
    let r = s.request("POST", "/v2/repository/index", &[], b"{}");
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.error(), "This API is restricted, expecting header 'admin-key'");
    assert_eq!(s.request("POST", "/v2/repository/index", &[("admin-key", "wrong")], b"{}").status, 403);
    assert_eq!(s.request("POST", "/v2/repository/index", &admin, b"{}").status, 200);
    assert_eq!(s.request("GET", "/v2/models/simple/config", &[], b"").status, 403);
    assert_eq!(s.request("GET", "/v2/models/simple/config", &admin, b"").status, 200);
    let body = simple_request(2).to_string();
    let r = s.request("POST", "/v2/models/simple/infer", &admin, body.as_bytes());
    assert_eq!((r.status, r.error()), (403, "This API is restricted, expecting header 'infer-key'".to_string()));
    let r = s.request("POST", "/v2/models/simple/infer", &[("infer-key", "go")], body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    // Open groups need nothing.
    for path in ["/v2/health/ready", "/v2", "/v2/models/simple", "/v2/models/simple/ready", "/v2/models/simple/stats"] {
        assert_eq!(s.get(path).status, 200, "{path}");
    }

    for (option, message) in [
        ("model-repository,health:k1=v1", "api 'health' can not be specified in multiple config groups"),
        ("model-reposit:k1=v1", "unknown restricted api 'model-reposit'"),
    ] {
        let stderr = refused_start(
            repo.path(),
            &["--http-restricted-api", "metadata,health:k2=v2", "--http-restricted-api", option],
        );
        assert!(stderr.contains(message), "{stderr}");
    }
}

/// Stalled clients time out without holding the server: one that never finishes its headers loses
/// its connection, one that never finishes its body is answered 408; others are served meanwhile.
#[test]
fn stalled_clients_time_out() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--http-header-timeout-ms", "300", "--http-body-timeout-ms", "300"]);
    let connect = || {
        let c = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        c.set_read_timeout(Some(WAIT)).unwrap();
        c
    };
    let mut headers = connect();
    headers.write_all(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n").unwrap();
    let mut body = connect();
    body.write_all(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"inputs\"")
        .unwrap();
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
    let mut raw = Vec::new();
    headers.read_to_end(&mut raw).expect("the server closes a connection whose headers never end");
    assert!(!String::from_utf8_lossy(&raw).contains("200 OK"));
    let mut raw = Vec::new();
    let _ = body.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("did not arrive within 300 ms"), "{text}");
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(2)).status, 200);
}

/// The remaining client limits answer 4xx and leave the server serving: oversized headers, deeply
/// nested JSON, BYTES elements whose length prefix lies, and gRPC messages over the size limit.
#[test]
fn oversized_headers_deep_json_lying_bytes_and_big_grpc_messages_are_client_errors() {
    let repo = Repo::new();
    repo.example("simple");
    repo.example("identity_bytes");
    let s = Server::start(repo.path(), &["--grpc-max-message-size", "4096"]);
    let big = "a".repeat(1 << 20);
    let r = s.request("GET", "/v2/health/ready", &[("X-Big", &big)], b"");
    assert_eq!(r.status, 431, "{}", r.text());
    let many: Vec<(String, String)> = (0..200).map(|i| (format!("X-H{i}"), "v".to_string())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(s.request("GET", "/v2/health/ready", &many, b"").status, 431);

    let deep = format!(
        r#"{{"inputs":[{{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":{}1{}}}]}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let r = s.request("POST", "/v2/models/simple/infer", &[], deep.as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("recursion limit"), "{}", r.text());

    // One BYTES element claiming 2 GiB in a 12-byte tensor.
    let header = json!({"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES",
        "parameters": {"binary_data_size": 12}}]})
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend_from_slice(&0x7fff_ffffu32.to_le_bytes());
    body.extend_from_slice(b"12345678");
    let r = s.request(
        "POST",
        "/v2/models/identity_bytes/infer",
        &[("Inference-Header-Content-Length", &header.len().to_string())],
        &body,
    );
    assert_eq!(r.status, 400, "{}", r.text());

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        use nereus::proto::inference as pb;
        let mut c = grpc_client(&s).await;
        let request = pb::ModelInferRequest {
            model_name: "simple".into(),
            raw_input_contents: vec![bytes::Bytes::from(vec![0u8; 8192])],
            ..Default::default()
        };
        let e = c.model_infer(request).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::OutOfRange, "{e}");
        assert!(e.message().contains("message length too large"), "{e}");
        let live = c.server_live(pb::ServerLiveRequest {}).await.unwrap().into_inner().live;
        assert!(live);
    });
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
}

/// After stalled clients time out, the server holds none of their connections and its memory is
/// back near where it was (Linux: /proc/<pid>/fd and VmRSS), though the clients never hang up.
#[cfg(target_os = "linux")]
#[test]
fn stalled_clients_leave_no_connections_or_memory_behind() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &["--http-header-timeout-ms", "200", "--http-body-timeout-ms", "200"]);
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", s.pid())).unwrap().count();
    let rss_kib = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap().to_string();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
    };
    for i in 0..20 {
        assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(i)).status, 200);
    }
    let (fds_before, rss_before) = (fds(), rss_kib());
    let mut stalled = Vec::new();
    for i in 0..100 {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        if i % 2 == 0 {
            c.write_all(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n").unwrap();
        } else {
            c.write_all(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
                .unwrap();
            c.write_all(&vec![b' '; 64 << 10]).unwrap();
        }
        stalled.push(c);
    }
    s.wait_until("the stalled connections are accepted", || fds() >= fds_before + 50);
    s.wait_until("the stalled connections are released", || fds() <= fds_before + 2);
    let grown = rss_kib().saturating_sub(rss_before);
    assert!(grown < 16 << 10, "memory grew by {grown} KiB and stayed");
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
    drop(stalled);
}

/// A chunked body may have at most 65536 non-empty chunks (tritonserver's cap): past it the
/// request is refused in tritonserver's words before the rest is read; at the cap it is read and
/// answered by the model's checks. The server serves on.
#[test]
fn a_chunked_body_of_too_many_chunks_is_refused() {
    let s = server();
    let send = |chunks: usize| {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        let mut request = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: 0\r\n\
            Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            .to_vec();
        for _ in 0..chunks {
            request.extend_from_slice(b"1\r\nA\r\n");
        }
        request.extend_from_slice(b"0\r\n\r\n");
        // The server may answer and close before it has read everything: what matters is its answer.
        let _ = c.write_all(&request);
        let mut answer = Vec::new();
        let _ = c.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    };
    let message = "Chunked request body exceeds maximum of 65536 non-empty chunks. Send fewer or larger HTTP chunks.";
    let over = send(65537);
    assert!(over.starts_with("HTTP/1.1 400 ") && over.contains(message), "{over}");
    let at = send(65536);
    assert!(at.starts_with("HTTP/1.1 400 ") && !at.contains(message), "{at}");
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
}

/// System shared memory is off unless `--allow-client-shm`; when on, regions are checked against
/// the shared-memory object at registration and every range against the region (the full data
/// path is tested with tritonclient's shm utilities in tests/python/test_system_shm.py).
#[cfg(target_os = "linux")]
#[test]
fn system_shared_memory_is_opt_in_and_bounds_checked() {
    let repo = Repo::new();
    repo.example("simple");
    let off = Server::start(repo.path(), &[]);
    let register = |s: &Server, name: &str, body: Value| {
        s.post_json(&format!("/v2/systemsharedmemory/region/{name}/register"), &body)
    };
    // as tritonserver: registering is UNSUPPORTED (501) and says how to turn it on; the status is
    // an empty list, since no region can exist
    let r = register(&off, "r", json!({"key": "/nope", "offset": 0, "byte_size": 8}));
    assert_eq!(r.status, 501, "{}", r.text());
    assert!(r.error().contains("--allow-client-shm=true"), "{}", r.text());
    let r = off.get("/v2/systemsharedmemory/status");
    assert_eq!((r.status, r.json()), (200, json!([])));
    assert_eq!(off.request("POST", "/v2/systemsharedmemory/unregister", &[], b"").status, 501);
    drop(off);

    // A 64-byte POSIX shared-memory object made here.
    let key = format!("/nereus_test_{}", std::process::id());
    let c_key = std::ffi::CString::new(key.clone()).unwrap();
    #[allow(unsafe_code)]
    unsafe {
        let fd = libc::shm_open(c_key.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o600);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, 64), 0);
        libc::close(fd);
    }
    let s = Server::start(repo.path(), &["--allow-client-shm=true"]);
    let r = register(&s, "big", json!({"key": key, "offset": 0, "byte_size": 128}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("failed to register shared memory region 'big': invalid args"), "{}", r.text());
    let r = register(&s, "all_slashes", json!({"key": "///", "byte_size": 8}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("cannot register shared memory region 'all_slashes' - invalid shm key '///'"));
    let r = register(&s, "missing", json!({"key": "/nereus_no_such_key", "byte_size": 8}));
    // tritonserver answers a key shm_open cannot open with INTERNAL: 500.
    assert!(
        r.status == 500 && r.error() == "Unable to open shared memory region: '/nereus_no_such_key'",
        "{}",
        r.text()
    );
    assert_eq!(register(&s, "r", json!({"key": key, "offset": 0, "byte_size": 64})).status, 200);
    assert_eq!(register(&s, "r", json!({"key": key, "offset": 0, "byte_size": 64})).status, 400, "twice");
    let status = s.get("/v2/systemsharedmemory/status").json();
    assert_eq!(status, json!([{"name": "r", "key": key, "offset": 0, "byte_size": 64}]));
    assert_eq!(s.get("/v2/systemsharedmemory/region/other/status").status, 404);
    let mut body = simple_request(1);
    body["inputs"][0] = json!({"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
        "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 64, "shared_memory_offset": 8}});
    let r = s.post_json("/v2/models/simple/infer", &body);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error(), "Invalid offset + byte size for shared memory region: 'r'");
    // An output's place is checked as the request arrives, with tritonserver's messages.
    for (offset, byte_size, message) in [
        (64u64, 4u64, "Invalid offset for shared memory region: 'r'".to_string()),
        (
            32,
            u64::MAX - 31,
            format!(
                "Integer overflow detected: byte_size ({}) + offset (32) exceeds maximum value ({}) for region 'r'",
                u64::MAX - 31,
                u64::MAX
            ),
        ),
    ] {
        let mut body = simple_request(1);
        body["outputs"] = json!([{"name": "OUTPUT0", "parameters": {"shared_memory_region": "r",
            "shared_memory_byte_size": byte_size, "shared_memory_offset": offset}}]);
        let r = s.post_json("/v2/models/simple/infer", &body);
        assert_eq!((r.status, r.error()), (400, message));
    }
    assert_eq!(s.request("POST", "/v2/systemsharedmemory/unregister", &[], b"").status, 200);
    assert_eq!(s.get("/v2/systemsharedmemory/status").json(), json!([]));
    assert_eq!(s.post_json("/v2/models/simple/infer", &simple_request(1)).status, 200);
    #[allow(unsafe_code)]
    unsafe {
        libc::shm_unlink(c_key.as_ptr());
    }
}

/// `--http-header-forward-pattern` and `--grpc-header-forward-pattern`: the headers (gRPC metadata,
/// a stream's too) whose names match reach the model as string parameters; names are matched
/// ignoring case unless the pattern says `(?-i)`; a reserved name fails the request; without the
/// flags no header is passed on.
#[test]
fn matching_headers_reach_the_model_as_parameters() {
    let repo = Repo::new();
    let dir = repo.model("echo", &faults_config("echo", ""), &["1"]);
    install_faults_component(&dir);
    let s = Server::start(
        repo.path(),
        &["--http-header-forward-pattern", "MY_HEADER.*|priority", "--grpc-header-forward-pattern", "(?-i)^x-fwd"],
    );
    let body = json!({"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "INT32", "data": [5]}]}).to_string();
    let headers = [("Content-Type", "application/json"), ("My_Header_1", "v \"1\""), ("other", "no")];
    let r = s.request("POST", "/v2/models/echo/infer", &headers, body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let p = &r.json()["parameters"];
    assert_eq!(p["my_header_1"], "v \"1\"", "{p}");
    assert!(p.get("other").is_none(), "{p}");
    let r = s.request("POST", "/v2/models/echo/infer", &[("priority", "1")], body.as_bytes());
    assert_eq!(r.status, 400);
    assert_eq!(r.error(), "Header 'priority' is reserved for Triton usage and cannot be forwarded.");

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        use nereus::proto::inference::model_infer_request::InferInputTensor;
        let message = nereus::proto::inference::ModelInferRequest {
            model_name: "echo".into(),
            inputs: vec![InferInputTensor {
                name: "INPUT0".into(),
                datatype: "INT32".into(),
                shape: vec![1],
                ..Default::default()
            }],
            raw_input_contents: vec![bytes::Bytes::from(le_i32(&[5]))],
            ..Default::default()
        };
        let mut client = grpc_client(&s).await;
        let mut request = tonic::Request::new(message.clone());
        request.metadata_mut().insert("x-fwd-a", "1".parse().unwrap());
        request.metadata_mut().insert("my_header_1", "not for grpc".parse().unwrap());
        request.metadata_mut().insert_bin("x-fwd-c-bin", tonic::metadata::MetadataValue::from_bytes(b"abc"));
        let answer = client.model_infer(request).await.unwrap().into_inner();
        let text = |key: &str| {
            answer.parameters.get(key).and_then(|p| match &p.parameter_choice {
                Some(nereus::proto::inference::infer_parameter::ParameterChoice::StringParam(s)) => Some(s.clone()),
                _ => None,
            })
        };
        assert_eq!(text("x-fwd-a").as_deref(), Some("1"), "{answer:?}");
        assert_eq!(text("my_header_1"), None, "the gRPC pattern is its own");
        assert_eq!(text("x-fwd-c-bin").as_deref(), Some("abc"), "a binary value, decoded");
        // A stream's metadata, for each of its requests.
        let mut request = tonic::Request::new(tokio_stream::iter(vec![message.clone(), message]));
        request.metadata_mut().insert("x-fwd-b", "2".parse().unwrap());
        let mut answers = client.model_stream_infer(request).await.unwrap().into_inner();
        for _ in 0..2 {
            let answer = answers.message().await.unwrap().unwrap();
            let response = answer.infer_response.unwrap();
            assert_eq!(
                response.parameters.get("x-fwd-b").and_then(|p| p.parameter_choice.clone()),
                Some(nereus::proto::inference::infer_parameter::ParameterChoice::StringParam("2".into())),
                "{response:?}"
            );
        }
    });

    // Without the flag, nothing is forwarded.
    let r = server().request("POST", "/v2/models/echo/infer", &headers, body.as_bytes());
    assert!(r.json()["parameters"].get("my_header_1").is_none(), "{}", r.text());
    // A pattern that does not compile stops the start, saying why.
    let err = refused_start(repo.path(), &["--grpc-header-forward-pattern", "MY_(HEADER"]);
    assert!(err.contains("invalid header forward pattern 'MY_(HEADER'"), "{err}");
}
