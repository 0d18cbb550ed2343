//! `reduce_sum`: FP32 `INPUT0` of shape `[..., n]` in, `OUTPUT0` of shape `[..., 1]` out, each row's
//! sum. The large-tensor benchmark's reduce (bench/tensors.sh): megabytes go into the sandbox and a
//! few bytes come out, so it measures the request path into the guest alone, where `identity`
//! measures both directions. The ONNX twin is `ReduceSum(axes=[-1], keepdims=1)`.
use nereus_sdk::{Backend, InstanceInfo, ModelInfo, Request, Response, Tensor};

struct ReduceSum;

/// The sum of `row`, in eight lanes: an order of additions the compiler may keep in one Wasm SIMD
/// register (a single running sum is a chain it must not reorder), as ONNX Runtime's kernels also
/// sum in lanes.
fn sum(row: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let chunks = row.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (lane, v) in lanes.iter_mut().zip(chunk) {
            *lane += v;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

fn reduce(request: &Request) -> Result<Response, String> {
    let input = request.input("INPUT0")?;
    let shape = input.shape();
    let Some((&n, outer)) = shape.split_last() else {
        return Err("INPUT0 must have at least one dimension".into());
    };
    let values = input.as_slice::<f32>()?;
    let sums: Vec<f32> = if n == 0 {
        vec![0.0; outer.iter().product::<i64>().max(0) as usize]
    } else {
        values.chunks_exact(n as usize).map(sum).collect()
    };
    let out_shape: Vec<i64> = outer.iter().copied().chain([1]).collect();
    Ok(Response::new().output(Tensor::from_slice("OUTPUT0", out_shape, &sums)))
}

impl Backend for ReduceSum {
    fn new(_model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(ReduceSum)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in requests {
            match reduce(&request) {
                Ok(response) => request.respond(response)?,
                Err(message) => request.fail(&message)?,
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(ReduceSum);
