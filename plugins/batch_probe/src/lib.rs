//! `batch_probe`: reports the batch it executed, so tests and benchmarks can see what a scheduler
//! formed. For a model with `max_batch_size` > 0 and one INT32 input `INPUT0` of shape
//! `[batch, n]` (any n ≥ 1):
//!
//! - `OUTPUT0` echoes `INPUT0`;
//! - `BATCH` (INT32, `[batch, total]`) repeats, for each row, the first element of every row of
//!   every request in the execution, in the order the backend received them — the execution's
//!   composition; `total` is the execution's batch size;
//! - `REQUESTS` (INT32, `[batch, 1]`, when the model declares and a request asks for it) holds, in
//!   each row, how many requests the execution received: 1 for a merged batch (`merge_batches`).
//!
//! Costs, for schedulers' tests and benchmarks (spinning, no clock — the sandbox has none):
//! - a row whose first element is ≥ 1 000 000 spins `(value - 1 000 000)` million iterations before
//!   the execution responds (a slow request);
//! - the model parameter `work_per_execution` (iterations, default 0) is spent once per execution,
//!   whatever its size: a model whose cost is dominated per execution, as a GPU kernel launch is.
use nereus_sdk::{Backend, DataType, InstanceInfo, ModelInfo, Request, Response, Tensor, config_parameter};

const SLOW_BASE: i32 = 1_000_000;

struct BatchProbe {
    work_per_execution: u64,
}

/// Deterministic busy work the optimiser cannot remove.
fn spin(iterations: u64) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..iterations {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    std::hint::black_box(x);
}

/// The first element of each row of `INPUT0`.
fn row_heads(request: &Request) -> Result<Vec<i32>, String> {
    let input = request.input("INPUT0")?;
    if input.datatype() != DataType::Int32 {
        return Err("INPUT0 must be INT32".into());
    }
    let rows = input.shape().first().copied().unwrap_or(1).max(1) as usize;
    let values = input.as_slice::<i32>()?;
    let width = values.len() / rows;
    if width == 0 {
        return Err("INPUT0 needs at least one element per row".into());
    }
    Ok(values.chunks(width).map(|row| row[0]).collect())
}

impl Backend for BatchProbe {
    fn new(model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        let work_per_execution = match config_parameter(model, "work_per_execution")? {
            Some(v) => {
                v.trim().parse().map_err(|_| format!("parameter 'work_per_execution' must be an integer, got {v:?}"))?
            }
            None => 0,
        };
        Ok(BatchProbe { work_per_execution })
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        spin(self.work_per_execution);
        let heads: Vec<Vec<i32>> = requests.iter().map(row_heads).collect::<Result<_, _>>()?;
        let composition: Vec<i32> = heads.iter().flatten().copied().collect();
        for slow in composition.iter().filter(|v| **v >= SLOW_BASE) {
            spin((*slow - SLOW_BASE) as u64 * 1_000_000);
        }
        let total = composition.len() as i64;
        for (mut request, rows) in requests.into_iter().zip(&heads) {
            let mut response = Response::new();
            if request.wants("BATCH") {
                let repeated: Vec<i32> = rows.iter().flat_map(|_| composition.iter().copied()).collect();
                response = response.output(Tensor::from_slice("BATCH", vec![rows.len() as i64, total], &repeated));
            }
            if request.wants("REQUESTS") {
                let count = vec![heads.len() as i32; rows.len()];
                response = response.output(Tensor::from_slice("REQUESTS", vec![rows.len() as i64, 1], &count));
            }
            if request.wants("OUTPUT0") {
                response = response.output(request.take_input("INPUT0")?.renamed("OUTPUT0"));
            }
            request.respond(response)?;
        }
        Ok(())
    }
}

nereus_sdk::export!(BatchProbe);
