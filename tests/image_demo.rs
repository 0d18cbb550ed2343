//! The image-classification demo of model_repository/ (`classify_digit`: Wasm decode and resize →
//! ONNX classifier → Wasm top-k) over HTTP with binary tensors, and its Wasm steps' refusals: bytes
//! that are no image, truncated images, images over the step's `max_pixels` (refused from the header,
//! before decoding), and a top-k step configured with `top_k` 0 (UNAVAILABLE with the reason). The Python test
//! (tests/python/test_image_classifier.py) drives the same demo with Triton's clients over both
//! protocols and compares the scores with onnxruntime.
mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{Value, json};

fn images() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/images/digits")
}

/// An inference request with one BYTES input holding `images` (one per row) as a binary tensor.
fn image_request(s: &Server, model: &str, images: &[Vec<u8>], outputs: &[&str]) -> Resp {
    let mut raw = Vec::new();
    for image in images {
        raw.extend_from_slice(&(image.len() as u32).to_le_bytes());
        raw.extend_from_slice(image);
    }
    let header = json!({
        "inputs": [{"name": "IMAGE", "shape": [images.len(), 1], "datatype": "BYTES",
                    "parameters": {"binary_data_size": raw.len()}}],
        "outputs": outputs.iter().map(|o| json!({"name": o, "parameters": {"binary_data": false}})).collect::<Vec<_>>()
    })
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend_from_slice(&raw);
    let len = header.len().to_string();
    s.request("POST", &format!("/v2/models/{model}/infer"), &[("Inference-Header-Content-Length", &len)], &body)
}

fn output(r: &Resp, name: &str) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["outputs"].as_array().unwrap().iter().find(|o| o["name"] == name).unwrap()["data"].clone()
}

fn onnx_library() -> Option<String> {
    let lib = std::env::var("NEREUS_ONNXRUNTIME_LIB").ok().filter(|p| Path::new(p).exists());
    if lib.is_none() {
        assert!(std::env::var_os("NEREUS_REQUIRE_ONNXRUNTIME").is_none(), "NEREUS_REQUIRE_ONNXRUNTIME is set");
        eprintln!("skipping: no ONNX Runtime library (scripts/setup-onnxruntime.sh installs one)");
    }
    lib
}

#[test]
fn the_committed_images_are_classified_as_labelled() {
    let Some(lib) = onnx_library() else { return };
    let repo = Repo::new();
    for name in ["digit_preprocess", "digit_top3", "classify_digit", "digit_classifier"] {
        repo.example(name);
    }
    let classifier = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model_repository/digit_classifier/1/model.onnx");
    std::fs::copy(classifier, repo.path().join("digit_classifier/1/model.onnx")).unwrap();
    let s = Server::start(repo.path(), &["--onnxruntime-library", &lib]);
    let expected: Value = serde_json::from_slice(&std::fs::read(images().join("expected.json")).unwrap()).unwrap();
    let mut all = Vec::new();
    for (name, want) in expected.as_object().unwrap() {
        let image = std::fs::read(images().join(name)).unwrap();
        let r = image_request(&s, "classify_digit", std::slice::from_ref(&image), &["LABELS", "TOP_SCORES"]);
        let labels = output(&r, "LABELS");
        assert_eq!(labels[0], want["label"], "{name}: {labels}");
        let scores: Vec<f64> =
            output(&r, "TOP_SCORES").as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]) && scores[0] > 0.5, "{name}: {scores:?}");
        all.push((image, want["label"].clone()));
    }
    // Several images in one request come back row by row, in order.
    let batch: Vec<Vec<u8>> = all.iter().take(4).map(|(i, _)| i.clone()).collect();
    let labels = output(&image_request(&s, "classify_digit", &batch, &["LABELS"]), "LABELS");
    let firsts: Vec<Value> = labels.as_array().unwrap().chunks(3).map(|row| row[0].clone()).collect();
    assert_eq!(firsts, all.iter().take(4).map(|(_, l)| l.clone()).collect::<Vec<_>>());
    // The raw binary form (Inference-Header-Content-Length: 0): the body is the image file as it
    // is, the one element of IMAGE; every output comes back binary.
    let (image, label) = &all[0];
    let r = s.request("POST", "/v2/models/classify_digit/infer", &[("Inference-Header-Content-Length", "0")], image);
    assert_eq!(r.status, 200, "{}", r.text());
    let n: usize = r.header("Inference-Header-Content-Length").unwrap().parse().unwrap();
    let head: Value = serde_json::from_slice(&r.body[..n]).unwrap();
    let mut at = n;
    let mut first_label = None;
    for out in head["outputs"].as_array().unwrap() {
        let size = out["parameters"]["binary_data_size"].as_u64().unwrap() as usize;
        if out["name"] == "LABELS" {
            let len = u32::from_le_bytes(r.body[at..at + 4].try_into().unwrap()) as usize;
            first_label = Some(String::from_utf8(r.body[at + 4..at + 4 + len].to_vec()).unwrap());
        }
        at += size;
    }
    assert_eq!(at, r.body.len(), "{head}");
    assert_eq!(first_label.as_deref(), label.as_str(), "{head}");
    // A bad image fails that request with the client's error, naming the step; the demo keeps serving.
    let r = image_request(&s, "classify_digit", &[b"not an image".to_vec()], &["LABELS"]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("digit_preprocess") && r.error().contains("neither a PNG nor a JPEG"), "{}", r.error());
    assert_eq!(output(&image_request(&s, "classify_digit", &[all[0].0.clone()], &["LABELS"]), "LABELS")[0], all[0].1);
}

#[test]
fn the_wasm_steps_refuse_what_they_cannot_handle() {
    let repo = Repo::new();
    let preprocess = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../model_repository/digit_preprocess/config.pbtxt"),
    )
    .unwrap();
    repo.model("digit_preprocess", &preprocess, &["1"]);
    let small = preprocess.replace("digit_preprocess", "tiny_preprocess")
        + "parameters { key: \"max_pixels\" value: { string_value: \"100\" } }\n";
    repo.model("tiny_preprocess", &small, &["1"]);
    let zero_k = r#"name: "bad_topk" backend: "topk" max_batch_size: 8
        input [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] } ]
        output [ { name: "LABELS" data_type: TYPE_STRING dims: [ 3 ] }, { name: "TOP_SCORES" data_type: TYPE_FP32 dims: [ 3 ] } ]
        parameters { key: "top_k" value: { string_value: "0" } }"#;
    repo.model("bad_topk", zero_k, &["1"]);
    let s = Server::start(repo.path(), &[]);

    let png = std::fs::read(images().join("digit_0.png")).unwrap();
    let jpeg = std::fs::read(images().join("digit_1.jpg")).unwrap();
    let pixels = output(&image_request(&s, "digit_preprocess", &[png.clone(), jpeg.clone()], &["PIXELS"]), "PIXELS");
    let values: Vec<f64> = pixels.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(values.len(), 2 * 64);
    assert!(values.iter().all(|v| (0.0..=1.0).contains(v)), "ink intensities lie in [0, 1]");
    assert!(values.iter().any(|v| *v > 0.5) && values.iter().any(|v| *v < 0.1), "a digit has ink and paper");

    for (image, needle) in [
        (png[..png.len() / 2].to_vec(), "invalid PNG"),
        (jpeg[..40].to_vec(), "invalid JPEG"),
        (b"GIF89a".to_vec(), "neither a PNG nor a JPEG"),
    ] {
        let r = image_request(&s, "digit_preprocess", &[png.clone(), image], &["PIXELS"]);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.error().contains("IMAGE element 1") && r.error().contains(needle), "{}", r.error());
    }
    // 32×32 is over this model's 100-pixel limit: refused from the header.
    let r = image_request(&s, "tiny_preprocess", &[png], &["PIXELS"]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("32×32, more than the model's max_pixels (100)"), "{}", r.error());

    let index = s.post_json("/v2/repository/index", &json!({})).json();
    let bad = index.as_array().unwrap().iter().find(|m| m["name"] == "bad_topk").unwrap().clone();
    assert_eq!(bad["state"], "UNAVAILABLE");
    assert!(bad["reason"].as_str().unwrap().contains("'top_k' must be at least 1"), "{bad}");
}
