//! `config.pbtxt`: parsed, validated, and its JSON parses back the same (see `nereus_fuzz::config_pbtxt`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nereus_fuzz::config_pbtxt(data));
