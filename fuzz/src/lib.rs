//! The fuzz targets' bodies (each `fuzz_targets/*.rs` hands libFuzzer's input to one of these), the
//! model every decoded request is validated against, and the property every request that passes
//! validation must have. Plain Rust with no libFuzzer in it: `tests/fuzz_replay.rs` includes this
//! file to run the same bodies over the seed corpus and its mutations in the ordinary test suite.
use std::sync::LazyLock;

use bytes::Bytes;
use nereus::config::{complete_standalone, from_json, parse_pbtxt_with_lines, to_json};
use nereus::frontend::grpc::convert;
use nereus::frontend::http::codec::decode_request;
use nereus::proto::inference::ModelInferRequest;
use nereus::request::InferenceRequest;
use nereus::shm::SharedMemory;
use nereus::tensor::{DataType, bytes_elements, count_bytes_elements};
use nereus::validate::{IoSpec, check_byte_size, validate_request};
use prost::Message;

/// The HTTP infer body, in all three framings: JSON alone, JSON followed by binary tensors
/// (`Inference-Header-Content-Length`), and the raw binary request (header length 0). The first
/// byte picks the framing; for the binary extension the next two give the header length.
pub fn http_infer_body(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let (header_len, body) = match mode % 3 {
        0 => (None, rest),
        1 => match rest.split_first_chunk::<2>() {
            Some((len, body)) => (Some(usize::from(u16::from_le_bytes(*len))), body),
            None => return,
        },
        _ => (Some(0), rest),
    };
    let shm = SharedMemory::new(false);
    let raw_input = || Ok(("INPUT0".to_string(), DataType::Int32, vec![-1], true));
    if let Ok((request, _outputs)) = decode_request(Bytes::copy_from_slice(body), header_len, raw_input, &shm, "fuzz") {
        validate_and_check(request);
    }
}

/// A gRPC ModelInferRequest (the message of ModelInfer and of each ModelStreamInfer request): the
/// protobuf decoding, the translation to the server's request (typed `contents` and
/// `raw_input_contents`, parameters) and validation against a model.
pub fn grpc_infer_request(data: &[u8]) {
    let Ok(message) = ModelInferRequest::decode(data) else { return };
    let shm = SharedMemory::new(false);
    if let Ok((request, _outputs, _classes)) = convert::request(message, &shm) {
        validate_and_check(request);
    }
}

/// BYTES tensor decoding (4-byte little-endian length, then the bytes, per element): splitting and
/// counting agree, and a tensor that splits cleanly is exactly its elements re-serialised.
pub fn bytes_elements_agree(data: &[u8]) {
    let elements: Result<Vec<&[u8]>, _> = bytes_elements(data).collect();
    let count = count_bytes_elements(data);
    match elements {
        Ok(elements) => {
            assert_eq!(count, Ok(elements.len() as u64));
            let mut again = Vec::with_capacity(data.len());
            for e in &elements {
                again.extend_from_slice(&(e.len() as u32).to_le_bytes());
                again.extend_from_slice(e);
            }
            assert_eq!(again, data);
        }
        Err(e) => assert_eq!(count, Err(e)),
    }
}

/// `config.pbtxt`: protobuf text-format parsing into Triton's ModelConfig, then the validation a
/// model repository runs. A configuration that is accepted must render as JSON (what
/// `GET /v2/models/{m}/config` serves) that parses back to the same configuration.
pub fn config_pbtxt(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let Ok((config, _lines)) = parse_pbtxt_with_lines(src) else { return };
    let Ok(config) = complete_standalone(config, "fuzzed", 1) else { return };
    let _ = IoSpec::new(&config);
    let json = to_json(&config);
    let back = from_json(&json.to_string()).expect("an accepted configuration's JSON parses back");
    assert_eq!(to_json(&back), json);
}

/// A model with the shapes that make validation interesting: a batch dimension, variable and fixed
/// dims, BYTES, FP16 (raw only over gRPC), an optional input and reshape.
pub const MODEL: &str = r#"
name: "fuzzed"
backend: "identity"
max_batch_size: 4
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 2, -1 ] },
  { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] optional: true },
  { name: "HALF" data_type: TYPE_FP16 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } optional: true }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 2, -1 ] }
]
"#;

/// The model's validated configuration, built once.
pub static SPEC: LazyLock<IoSpec> = LazyLock::new(|| {
    let config = nereus::config::parse_pbtxt(MODEL).expect("the fuzzed model's configuration parses");
    let config = complete_standalone(config, "fuzzed", 0).expect("and is valid");
    IoSpec::new(&config)
});

/// Validates a decoded request against [`SPEC`]; a request that passes must be consistent: every
/// tensor's bytes match its datatype and shape, which is what backends rely on.
pub fn validate_and_check(mut request: InferenceRequest) {
    if validate_request(&SPEC, &mut request).is_ok() {
        for tensor in &request.inputs {
            if let Err(e) = check_byte_size(tensor, None) {
                panic!("input '{}' passed validation but {e}", tensor.name);
            }
        }
    }
}
