//! A gRPC ModelInferRequest, translated and validated (see `nereus_fuzz::grpc_infer_request`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nereus_fuzz::grpc_infer_request(data));
