//! What the fuzz targets share: the model every decoded request is validated against, and the
//! property every request that passes validation must have.
use std::sync::LazyLock;

use nereus::request::InferenceRequest;
use nereus::validate::{IoSpec, check_byte_size, validate_request};

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
    let config = nereus::config::complete_standalone(config, "fuzzed", 0).expect("and is valid");
    IoSpec::new(&config)
});

/// Validates a decoded request against [`SPEC`]; a request that passes must be consistent: every
/// tensor's bytes match its datatype and shape, which is what backends rely on.
pub fn validate_and_check(mut request: InferenceRequest) {
    if validate_request(&SPEC, &mut request).is_ok() {
        for tensor in &request.inputs {
            if let Err(e) = check_byte_size(tensor) {
                panic!("input '{}' passed validation but {e}", tensor.name);
            }
        }
    }
}
