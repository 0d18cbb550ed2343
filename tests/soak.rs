//! A bounded soak of hostile client input: thousands of seeded malformed HTTP requests (mutated
//! JSON bodies, lying binary framing, broken compression, odd paths) and gRPC requests (lying
//! shapes, datatypes and raw contents). No answer may be a server error, nothing may hang (every
//! request is bounded by the harness's socket timeouts), and afterwards the server still answers
//! correctly. The seed is fixed, so a failure reproduces.
use crate::common;

use common::*;
use serde_json::json;

/// Valid request bodies to start from.
fn seeds() -> Vec<(&'static str, String)> {
    vec![
        ("/v2/models/simple/infer", simple_request(3).to_string()),
        (
            "/v2/models/string_upper/infer",
            json!({"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "BYTES", "data": ["abc", "déf"]}]})
                .to_string(),
        ),
        (
            "/v2/models/identity_fp32/infer",
            json!({"inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1.5, 2, -3]}],
                   "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}]})
            .to_string(),
        ),
    ]
}

/// Fragments that make JSON lie about itself.
const LIES: &[&str] = &[
    "[2147483648]",
    "[-1]",
    "[9223372036854775807, 9223372036854775807]",
    "\"FP64\"",
    "\"BYTES\"",
    "\"BOOL\"",
    "null",
    "{}",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    "1e400",
    "\"\\ud800\"",
    "-0",
    "18446744073709551616",
];

fn mutate(rng: &mut Rng, body: &str) -> Vec<u8> {
    let mut b = body.as_bytes().to_vec();
    for _ in 0..=rng.below(3) {
        let at = rng.below(b.len() + 1);
        match rng.below(6) {
            0 => b.truncate(at),
            1 if at < b.len() => b[at] = rng.next() as u8,
            2 => b.splice(at..at, rng.pick(LIES).bytes()).for_each(drop),
            3 if at < b.len() => {
                // Replace a number or value after a key with a lie.
                let end = (at + 1 + rng.below(12)).min(b.len());
                b.splice(at..end, rng.pick(LIES).bytes()).for_each(drop);
            }
            4 => b.splice(at..at, (0..rng.below(8)).map(|_| rng.next() as u8)).for_each(drop),
            _ => b.extend_from_slice(b",]}"),
        }
    }
    b
}

#[test]
fn thousands_of_malformed_requests_get_client_errors_and_the_server_stays_correct() {
    let repo = Repo::new();
    for m in ["simple", "string_upper", "identity_fp32"] {
        repo.example(m);
    }
    let s = Server::start(repo.path(), &[]);
    let mut rng = Rng(0x5EED_2026_1122);
    let seeds = seeds();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..3000 {
        let (path, body) = rng.pick(&seeds).clone();
        let mut headers: Vec<(&str, String)> = Vec::new();
        let mut payload = mutate(&mut rng, &body);
        let path = match rng.below(20) {
            0 => "/v2/models/simple/versions/x/infer".to_string(),
            1 => format!("{path}/../../v2"),
            2 => "/v2/models//infer".to_string(),
            _ => path.to_string(),
        };
        match rng.below(8) {
            // Binary framing whose header length lies.
            0 => headers.push(("Inference-Header-Content-Length", (rng.below(payload.len() * 2 + 2)).to_string())),
            1 => headers.push(("Inference-Header-Content-Length", "-5".to_string())),
            // A compressed body that is not what it says.
            2 => headers.push(("Content-Encoding", rng.pick(&["gzip", "deflate", "br", "zstd"]).to_string())),
            3 => payload.extend((0..rng.below(64)).map(|_| rng.next() as u8)),
            _ => {}
        }
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = http(s.port, "POST", &path, &headers, &payload);
        *statuses.entry(r.status).or_default() += 1;
        assert!(
            r.status < 500,
            "request {i} to {path} ({headers:?}) answered {}: {}\nbody: {}",
            r.status,
            r.text(),
            String::from_utf8_lossy(&payload)
        );
    }
    eprintln!("HTTP statuses: {statuses:?}");

    // gRPC: well-formed messages whose contents lie.
    use nereus::proto::inference as pb;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut c = grpc_client(&s).await;
        let datatypes = ["INT32", "FP32", "BYTES", "FP16", "BOOL", "UINT64", "NOPE", ""];
        let mut codes = std::collections::BTreeMap::<String, usize>::new();
        for i in 0..1000 {
            let inputs: Vec<_> = (0..rng.below(3))
                .map(|k| pb::model_infer_request::InferInputTensor {
                    name: rng.pick(&["INPUT0", "INPUT1", "X", ""]).to_string(),
                    datatype: rng.pick(&datatypes).to_string(),
                    shape: (0..rng.below(4))
                        .map(|_| *rng.pick(&[1i64, 16, 0, -1, i64::MAX, 1 << 31, k as i64]))
                        .collect(),
                    parameters: Default::default(),
                    contents: None,
                })
                .collect();
            let raw: Vec<bytes::Bytes> = (0..rng.below(3))
                .map(|_| bytes::Bytes::from((0..rng.below(80)).map(|_| rng.next() as u8).collect::<Vec<u8>>()))
                .collect();
            let request = pb::ModelInferRequest {
                model_name: rng.pick(&["simple", "string_upper", "identity_fp32", "nope"]).to_string(),
                inputs,
                raw_input_contents: raw,
                ..Default::default()
            };
            match c.model_infer(request.clone()).await {
                Ok(_) => *codes.entry("Ok".into()).or_default() += 1,
                Err(e) => {
                    assert!(
                        !matches!(e.code(), tonic::Code::Internal | tonic::Code::Unknown),
                        "gRPC request {i} answered {:?}: {}\n{request:?}",
                        e.code(),
                        e.message()
                    );
                    *codes.entry(format!("{:?}", e.code())).or_default() += 1;
                }
            }
        }
        eprintln!("gRPC codes: {codes:?}");
    });

    // Still alive and still correct.
    let r = s.post_json("/v2/models/simple/infer", &simple_request(5));
    assert_eq!(r.status, 200, "{}", r.text());
    let sum: Vec<i64> =
        r.json()["outputs"][0]["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    assert_eq!(sum, (0..16).map(|i| i + 5).collect::<Vec<_>>());
}
