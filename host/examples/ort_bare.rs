//! The bare-ONNX-Runtime baseline for `bench/onnx_overhead.sh`: one session on a model, the same
//! INT32 1×16 inputs every time, run N times; prints the mean microseconds per run. Usage:
//!   cargo run --release --example ort_bare -- LIBONNXRUNTIME MODEL.onnx [RUNS]
use std::time::Instant;

use ort::session::Session;
use ort::value::Tensor;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (lib, model) = (args.get(1).ok_or("library path")?, args.get(2).ok_or("model path")?);
    let runs: usize = args.get(3).map(|r| r.parse()).transpose()?.unwrap_or(200_000);
    let env = ort::init_from(lib)?.build()?;
    let mut session = Session::builder(&env)?.with_intra_threads(1)?.commit_from_file(model)?;
    let a: Vec<i32> = (0..16).collect();
    let b = vec![1i32; 16];
    let mut run = || -> Result<(), ort::Error> {
        let inputs = vec![
            ("INPUT0", Tensor::from_array((vec![1i64, 16], a.clone()))?.into_dyn()),
            ("INPUT1", Tensor::from_array((vec![1i64, 16], b.clone()))?.into_dyn()),
        ];
        let out = session.run(inputs)?;
        let (_, sum) = out["OUTPUT0"].try_extract_tensor::<i32>()?;
        assert_eq!(sum[15], 16);
        Ok(())
    };
    for _ in 0..runs / 10 {
        run()?;
    }
    let start = Instant::now();
    for _ in 0..runs {
        run()?;
    }
    println!("{:.2}", start.elapsed().as_secs_f64() * 1e6 / runs as f64);
    Ok(())
}
