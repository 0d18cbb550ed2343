//! The image-classification demo of model_repository/ (`classify_digit`: Wasm decode and resize →
//! ONNX classifier → Wasm top-k) over HTTP with binary tensors, and its Wasm steps' refusals: bytes
//! that are no image, truncated images, images over the step's `max_pixels` (refused from the header,
//! before decoding), and a top-k step configured with `top_k` 0 (UNAVAILABLE with the reason). The Python test
//! (tests/python/test_image_classifier.py) drives the same demo with Triton's clients over both
//! protocols and compares the scores with onnxruntime.
use crate::common;

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
    // A bad image fails that request with the client's error, naming the ensemble (as tritonserver
    // words a step's error); the demo keeps serving.
    let r = image_request(&s, "classify_digit", &[b"not an image".to_vec()], &["LABELS"]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.error().starts_with("in ensemble 'classify_digit', ") && r.error().contains("neither a PNG nor a JPEG"),
        "{}",
        r.error()
    );
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

/// PNG's CRC-32.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// An uncompressed (stored-deflate) PNG of `width` × `height` pixels of 8-bit `color_type` (0 grey,
/// 2 RGB, 6 RGBA), every pixel `pixel`.
fn solid_png(width: u32, height: u32, color_type: u8, pixel: &[u8]) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8], body: &[u8]) {
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(body);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    // Each row: filter type 0 (none), then the pixels.
    let row: Vec<u8> =
        std::iter::once(0).chain(pixel.iter().copied().cycle().take(width as usize * pixel.len())).collect();
    let raw = row.repeat(height as usize);
    let mut zlib = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65535).collect();
    for (i, block) in blocks.iter().enumerate() {
        zlib.push(u8::from(i + 1 == blocks.len()));
        zlib.extend_from_slice(&(block.len() as u16).to_le_bytes());
        zlib.extend_from_slice(&(!(block.len() as u16)).to_le_bytes());
        zlib.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in &raw {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    zlib.extend_from_slice(&((b << 16) | a).to_be_bytes());
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, color_type, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(&mut png, b"IDAT", &zlib);
    chunk(&mut png, b"IEND", &[]);
    png
}

/// `image_classify_preprocess` (the Python test compares it with Pillow + numpy on real pictures):
/// a solid colour stays that colour through the resize and crop, normalised with ImageNet's mean and
/// std, for RGB, grey and RGBA (alpha dropped) inputs, up- and downscaled, one per row of a batch;
/// bytes that are no image and an image over `max_pixels` fail with 400 and the element's message.
#[test]
fn image_classify_preprocess_normalises_and_refuses() {
    let repo = Repo::new();
    repo.example("image_classify_preprocess");
    let s = Server::start(repo.path(), &[]);
    let images = [
        (solid_png(300, 260, 2, &[200, 100, 50]), [200.0f32, 100.0, 50.0]),
        (solid_png(97, 131, 0, &[77]), [77.0, 77.0, 77.0]),
        (solid_png(640, 480, 6, &[10, 20, 30, 0]), [10.0, 20.0, 30.0]),
    ];
    let r = image_request(
        &s,
        "image_classify_preprocess",
        &images.iter().map(|i| i.0.clone()).collect::<Vec<_>>(),
        &["PIXELS"],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let out = &r.json()["outputs"][0];
    assert_eq!(out["shape"], json!([3, 3, 224, 224]), "{out}");
    let data: Vec<f32> = out["data"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    let (mean, std) = ([0.485f32, 0.456, 0.406], [0.229f32, 0.224, 0.225]);
    for (i, (_, rgb)) in images.iter().enumerate() {
        for ch in 0..3 {
            let want = (rgb[ch] / 255.0 - mean[ch]) / std[ch];
            let plane = &data[(i * 3 + ch) * 224 * 224..(i * 3 + ch + 1) * 224 * 224];
            assert!(plane.iter().all(|v| (v - want).abs() < 1e-5), "image {i} channel {ch}: want {want}");
        }
    }
    let r = image_request(&s, "image_classify_preprocess", &[b"GIF89a not supported".to_vec()], &["PIXELS"]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("IMAGE element 0: neither a PNG nor a JPEG image"), "{}", r.error());
    // 5000 × 4000 announced by the header: refused before a byte of pixels is allocated.
    let mut bomb = solid_png(1, 1, 0, &[0]);
    bomb[16..24].copy_from_slice(&[0, 0, 0x13, 0x88, 0, 0, 0x0f, 0xa0]);
    let crc = crc32(&bomb[12..29]);
    bomb[29..33].copy_from_slice(&crc.to_be_bytes());
    let r = image_request(&s, "image_classify_preprocess", &[bomb], &["PIXELS"]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.error().contains("5000×4000, more than the model's max_pixels"), "{}", r.error());
}
