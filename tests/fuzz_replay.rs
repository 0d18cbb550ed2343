//! The fuzz targets' bodies (`fuzz/src/lib.rs`, included here as they are) over their seed corpus
//! (`fuzz/corpus/TARGET`) and a fixed number of mutations of it, in the ordinary test suite: every
//! build checks that the inputs the fuzzers keep, and their neighbours, still pass. Not
//! coverage-guided — that is `scripts/fuzz.sh` (libFuzzer through cargo-fuzz, an instrumented build
//! of its own), a documented command. `NEREUS_FUZZ_REPLAY_RUNS` sets the mutations per target.
#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod targets;

use std::panic::AssertUnwindSafe;
use std::path::Path;

use crate::common::Rng;

/// One to four of libFuzzer's simpler mutations: flip a bit, set a byte (often to an edge value),
/// insert or erase bytes, repeat a slice, splice in part of another seed, truncate.
fn mutate(rng: &mut Rng, seed: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(7) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = [0, 1, 0x7f, 0x80, 0xff, b'"', b'{', b'}', b'[', b':'][rng.below(10)];
            }
            2 => {
                let byte = rng.next() as u8;
                data.splice(at..at, std::iter::repeat_n(byte, 1 + rng.below(8)));
            }
            3 if !data.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(data.len());
                data.drain(at.min(end)..end);
            }
            4 if !data.is_empty() => {
                let from = rng.below(data.len());
                let chunk: Vec<u8> = data[from..(from + 1 + rng.below(32)).min(data.len())].to_vec();
                data.splice(at..at, chunk);
            }
            5 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                let to = (from + rng.below(64)).min(other.len());
                data.splice(at..at, other[from..to].iter().copied());
            }
            _ => data.truncate(at),
        }
    }
    data
}

/// Runs `body` over the target's seeds and `runs` mutations of them; a panic fails the test with
/// the input (hex) that caused it.
fn replay(target: &str, body: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    let runs: usize = std::env::var("NEREUS_FUZZ_REPLAY_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
    let inputs = seeds.clone().into_iter().chain((0..runs).map(|i| mutate(&mut rng, &seeds[i % seeds.len()], &seeds)));
    for input in inputs {
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| body(&input))) {
            let message =
                panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            let hex: String = input.iter().take(4096).map(|b| format!("{b:02x}")).collect();
            panic!("{target}: {} on the input (hex, {} bytes): {hex}", message.unwrap_or_default(), input.len());
        }
    }
}

#[test]
fn http_infer_body() {
    replay("http_infer_body", targets::http_infer_body);
}

#[test]
fn grpc_infer_request() {
    replay("grpc_infer_request", targets::grpc_infer_request);
}

#[test]
fn bytes_elements() {
    replay("bytes_elements", targets::bytes_elements_agree);
}

#[test]
fn config_pbtxt() {
    replay("config_pbtxt", targets::config_pbtxt);
}
