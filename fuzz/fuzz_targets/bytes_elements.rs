//! BYTES tensor decoding: splitting and counting agree (see `nereus_fuzz::bytes_elements_agree`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nereus_fuzz::bytes_elements_agree(data));
