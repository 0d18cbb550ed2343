//! The HTTP infer body in its three framings (see `nereus_fuzz::http_infer_body`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nereus_fuzz::http_infer_body(data));
