//! `config.pbtxt`: protobuf text-format parsing into Triton's ModelConfig, then the validation a
//! model repository runs. A configuration that is accepted must render as JSON (what
//! `GET /v2/models/{m}/config` serves) that parses back to the same configuration.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nereus::config::{from_json, complete_standalone, parse_pbtxt_with_lines, to_json};
use nereus::validate::IoSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let Ok((config, _lines)) = parse_pbtxt_with_lines(src) else { return };
    let Ok(config) = complete_standalone(config, "fuzzed", 1) else { return };
    let _ = IoSpec::new(&config);
    let json = to_json(&config);
    let back = from_json(&json.to_string()).expect("an accepted configuration's JSON parses back");
    assert_eq!(to_json(&back), json);
});
