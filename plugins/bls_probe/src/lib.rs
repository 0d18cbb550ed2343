//! `bls_probe`: a test backend that calls other models as its request's parameters say, for the
//! integration tests of business logic scripting (`tests/bls.rs`). INPUT0 INT32 [-1] → OUTPUT0.
//!
//! Request parameters:
//! - `route` (text, comma-separated model names): the first is called with this request's INPUT0
//!   and every parameter of it, `route` shortened by one; OUTPUT0 is the callee's OUTPUT0 + 1. With
//!   no route, OUTPUT0 = INPUT0 + 1. A failed call fails the request with the call's error, its
//!   message starting with the kind (`cycle: …`).
//! - `timeout_ms` (int64): the call's timeout.
//! - `mode` (text), for the first model of `route` only:
//!   - "fanout": INPUT0 is split into `parts` (int64, default 4) parts, each sent to the model at
//!     once; part `fail_part` (int64) gets the parameter `fault` = "error" (a `test_faults` callee
//!     fails it). OUTPUT0 is the parts' answers merged, -1 for the failed part's elements, and the
//!     response parameter `failed` says which part failed and why.
//!   - "stream": the model is decoupled (`repeat_int32`): IN = INPUT0, no delays; OUTPUT0 is every
//!     OUT it sends, in order, and the response parameter `responses` counts them.
//!   - "sequence": the model is stateful (`accumulate_state`): each element of INPUT0 is sent as
//!     one request of sequence `corrid` (int64), the first flagged start and the last end; OUTPUT0
//!     is the model's OUTPUT after each.
//!   - "leave": starts the call and answers INPUT0 without waiting for it (the host cancels it).
//!   - "trap_after_start": starts the call, then traps.
//!   - "hoard": starts up to `copies` (int64) calls, each with an INPUT0 of `count` (int64) bytes,
//!     keeping every one in flight (with `take` (bool) true, each after taking its answer with
//!     `next`; with `drop` (bool) true, dropping each once started), until one fails to start; answers INPUT0 + 1 with the response parameters `started` (int64, the
//!     calls started) and `refused` (text, the failed start's kind and message, or empty).
//!   - "aliased": calls the model past the SDK with `copies` inputs named INPUT0 whose data are all
//!     the same `count` bytes (0x61) of this plugin's memory, something the SDK cannot express;
//!     OUTPUT0 is the callee's OUTPUT0 unchanged, and a failed call fails the request with the call
//!     error's kind number and message (`3: …`).
use nereus_sdk::{
    Backend, CallError, CorrelationId, InstanceInfo, ModelInfo, ModelRequest, ModelResponse, Parameter, ParameterValue,
    Request, Response, SequenceFlags, Tensor,
};

struct Probe;

fn text(request: &Request, key: &str) -> String {
    match request.parameter(key) {
        Some(ParameterValue::Text(t)) => t.clone(),
        _ => String::new(),
    }
}

fn int(request: &Request, key: &str) -> Option<i64> {
    match request.parameter(key) {
        Some(ParameterValue::Int64(n)) => Some(*n),
        _ => None,
    }
}

/// A call to `model` carrying this request's parameters (but `mode`), `route` set to `rest`.
fn call(request: &Request, model: &str, rest: &str) -> ModelRequest {
    let mut call = request.call(model);
    for Parameter { key, value } in request.parameters() {
        match key.as_str() {
            "route" | "mode" => {}
            _ => call = call.parameter(key.clone(), value.clone()),
        }
    }
    if let Some(ms) = int(request, "timeout_ms") {
        call = call.timeout_ms(ms as u64);
    }
    call.parameter("route", ParameterValue::Text(rest.to_string()))
}

fn ints(t: &Tensor) -> Result<Vec<i32>, String> {
    Ok(t.as_slice::<i32>()?.into_owned())
}

fn output(values: &[i32]) -> Tensor {
    Tensor::from_slice("OUTPUT0", vec![values.len() as i64], values)
}

fn plus_one(response: &ModelResponse) -> Result<Vec<i32>, String> {
    Ok(ints(response.output("OUTPUT0")?)?.iter().map(|v| v.wrapping_add(1)).collect())
}

/// A failed call, as this request's failure: the kind first, so that tests can tell them apart.
fn fail(request: &Request, e: &CallError) -> Result<(), String> {
    request.fail_with(e.error_kind(), &format!("{}: {}", e.kind_name(), e.message))
}

fn handle(request: &Request) -> Result<(), String> {
    let input = request.input("INPUT0")?;
    let values = ints(input)?;
    let route = text(request, "route");
    let (next, rest) = match route.split_once(',') {
        Some((next, rest)) => (next.trim().to_string(), rest.to_string()),
        None => (route.trim().to_string(), String::new()),
    };
    if next.is_empty() {
        let out: Vec<i32> = values.iter().map(|v| v.wrapping_add(1)).collect();
        return request.respond(Response::new().output(output(&out)));
    }
    match text(request, "mode").as_str() {
        "fanout" => {
            let parts = int(request, "parts").unwrap_or(4).max(1) as usize;
            let fail_part = int(request, "fail_part").map(|p| p as usize);
            let n = values.len();
            let bounds: Vec<(usize, usize)> = (0..parts).map(|k| (k * n / parts, (k + 1) * n / parts)).collect();
            let calls: Vec<_> = bounds
                .iter()
                .enumerate()
                .map(|(k, &(from, to))| {
                    let mut c = call(request, &next, &rest).input(Tensor::from_slice(
                        "INPUT0",
                        vec![(to - from) as i64],
                        &values[from..to],
                    ));
                    if fail_part == Some(k) {
                        c = c.parameter("fault", ParameterValue::Text("error".into()));
                    }
                    c.start()
                })
                .collect();
            let mut merged = Vec::with_capacity(n);
            let mut failed = String::new();
            for (k, (c, &(from, to))) in calls.into_iter().zip(&bounds).enumerate() {
                match c.and_then(|c| c.wait()) {
                    Ok(r) => merged.extend(plus_one(&r)?),
                    Err(e) => {
                        failed = format!("{k}: {}: {}", e.kind_name(), e.message);
                        merged.extend(std::iter::repeat_n(-1, to - from));
                    }
                }
            }
            request.respond(Response::new().output(output(&merged)).parameter("failed", ParameterValue::Text(failed)))
        }
        "stream" => {
            let started = request
                .call(&next)
                .input(Tensor::from_slice("IN", vec![values.len() as i64], &values))
                .input(Tensor::from_slice("DELAY", vec![values.len() as i64], &vec![0u32; values.len()]))
                .input(Tensor::from_slice("WAIT", vec![1], &[0u32]))
                .start();
            let c = match started {
                Ok(c) => c,
                Err(e) => return fail(request, &e),
            };
            let mut outs = Vec::new();
            while let Some(answer) = c.next() {
                match answer {
                    Ok(r) => outs.extend(ints(r.output("OUT")?)?),
                    Err(e) => return fail(request, &e),
                }
            }
            let count = outs.len() as i64;
            request.respond(Response::new().output(output(&outs)).parameter("responses", ParameterValue::Int64(count)))
        }
        "sequence" => {
            let id = CorrelationId::Numeric(int(request, "corrid").unwrap_or(1) as u64);
            let mut outs = Vec::with_capacity(values.len());
            for (i, v) in values.iter().enumerate() {
                let mut flags = SequenceFlags::empty();
                if i == 0 {
                    flags = flags | SequenceFlags::START;
                }
                if i + 1 == values.len() {
                    flags = flags | SequenceFlags::END;
                }
                let answer = request
                    .call(&next)
                    .input(Tensor::from_slice("INPUT", vec![1, 1], &[*v]))
                    .sequence(id.clone(), flags)
                    .infer();
                match answer {
                    Ok(r) => outs.extend(ints(r.output("OUTPUT")?)?),
                    Err(e) => return fail(request, &e),
                }
            }
            request.respond(Response::new().output(output(&outs)))
        }
        "leave" => {
            let started = call(request, &next, &rest).input(input.clone()).start();
            // Deliberately never waited for nor dropped: the host cancels it when `execute` returns.
            std::mem::forget(started);
            request.respond(Response::new().output(output(&values)))
        }
        "trap_after_start" => {
            let _started = call(request, &next, &rest).input(input.clone()).start();
            panic!("bls_probe: trapping with a call in flight");
        }
        "hoard" => {
            let count = int(request, "count").unwrap_or(1 << 20) as usize;
            let copies = int(request, "copies").unwrap_or(100) as usize;
            let drop_each = matches!(request.parameter("drop"), Some(ParameterValue::Boolean(true)));
            let take = matches!(request.parameter("take"), Some(ParameterValue::Boolean(true)));
            let (mut kept, mut started, mut refused) = (Vec::new(), 0i64, String::new());
            for _ in 0..copies {
                let data =
                    Tensor::from_raw("INPUT0", nereus_sdk::DataType::Int32, vec![(count / 4) as i64], vec![0; count]);
                match call(request, &next, &rest).input(data).start() {
                    Ok(c) => {
                        started += 1;
                        if take {
                            let _ = c.next();
                        }
                        if !drop_each {
                            kept.push(c);
                        }
                    }
                    Err(e) => {
                        refused = format!("{}: {}", e.kind_name(), e.message);
                        break;
                    }
                }
            }
            let out: Vec<i32> = values.iter().map(|v| v.wrapping_add(1)).collect();
            drop(kept);
            request.respond(
                Response::new()
                    .output(output(&out))
                    .parameter("started", ParameterValue::Int64(started))
                    .parameter("refused", ParameterValue::Text(refused)),
            )
        }
        "aliased" => {
            let count = int(request, "count").unwrap_or(1 << 20) as usize;
            let copies = int(request, "copies").unwrap_or(100_000) as usize;
            match aliased::infer(request.index(), &next, count, copies) {
                Ok(out) => request.respond(Response::new().output(Tensor::from_raw(
                    "OUTPUT0",
                    nereus_sdk::DataType::Int32,
                    vec![out.len() as i64 / 4],
                    out,
                ))),
                Err((kind, message)) => request.fail(&format!("{kind}: {message}")),
            }
        }
        _ => match call(request, &next, &rest).input(input.clone()).infer() {
            Ok(r) => request.respond(Response::new().output(output(&plus_one(&r)?))),
            Err(e) => fail(request, &e),
        },
    }
}

/// `models.infer` called through the import's canonical ABI, as a hostile guest could.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
mod aliased {
    /// WIT's `tensor` in the canonical ABI's layout (wasm32: 28 bytes, align 4).
    #[repr(C)]
    struct RawTensor {
        name: *const u8,
        name_len: usize,
        datatype: u8,
        shape: *const i64,
        shape_len: usize,
        data: *const u8,
        data_len: usize,
    }

    /// INT32 of `data-type`.
    const INT32: u8 = 7;

    #[cfg(target_arch = "wasm32")]
    #[link(wasm_import_module = "nereus:backend/models@1.2.0")]
    unsafe extern "C" {
        /// `infer(parent, request) -> result<inference-response, call-error>`, the request
        /// flattened (15 values: its strings and lists as pointer and length, `correlation-id` as
        /// its case and joined payload), the result through a return area.
        #[link_name = "infer"]
        fn infer_raw(
            parent: u32,
            model: *const u8,
            model_len: usize,
            version: i64,
            inputs: *const RawTensor,
            inputs_len: usize,
            requested_outputs: *const u8,
            requested_outputs_len: usize,
            parameters: *const u8,
            parameters_len: usize,
            correlation_case: u32,
            correlation_first: i64,
            correlation_second: u32,
            flags: u32,
            timeout_ms: i64,
            result: *mut u8,
        );
    }

    fn word(area: &[u8], at: usize) -> usize {
        u32::from_le_bytes([area[at], area[at + 1], area[at + 2], area[at + 3]]) as usize
    }

    /// Calls `model` with `copies` INT32 inputs named INPUT0, all the same `count` bytes; the
    /// callee's first output's bytes, or the call error's kind (its case number) and message.
    #[cfg(target_arch = "wasm32")]
    pub fn infer(parent: u32, model: &str, count: usize, copies: usize) -> Result<Vec<u8>, (u8, String)> {
        let bytes = vec![b'a'; count];
        let shape = [(count / 4) as i64];
        let name = b"INPUT0";
        let inputs: Vec<RawTensor> = (0..copies)
            .map(|_| RawTensor {
                name: name.as_ptr(),
                name_len: name.len(),
                datatype: INT32,
                shape: shape.as_ptr(),
                shape_len: 1,
                data: bytes.as_ptr(),
                data_len: count / 4 * 4,
            })
            .collect();
        // The result: a case byte, then at 4 the response's outputs (pointer, length) or the
        // error's kind byte and, at 8, its message (pointer, length).
        #[repr(C, align(4))]
        struct ResultArea([u8; 20]);
        let mut result = ResultArea([0; 20]);
        // An empty list's place must still be aligned for its elements (8 for a parameter).
        let none = std::ptr::NonNull::<u64>::dangling().as_ptr() as *const u8;
        // SAFETY: every pointer is to memory that lives across the call, with the layouts the
        // canonical ABI gives these types; the host writes only the result area and what it
        // allocates through this module's `cabi_realloc`.
        unsafe {
            infer_raw(
                parent,
                model.as_ptr(),
                model.len(),
                -1,
                inputs.as_ptr(),
                inputs.len(),
                none,
                0,
                none,
                0,
                0,
                0,
                0,
                0,
                0,
                result.0.as_mut_ptr(),
            );
        }
        let area = &result.0;
        if area[0] != 0 {
            // SAFETY: the host wrote the message's place and length, allocated for this module.
            let message = unsafe { std::slice::from_raw_parts(word(area, 8) as *const u8, word(area, 12)) };
            return Err((area[4], String::from_utf8_lossy(message).into_owned()));
        }
        let (outputs, len) = (word(area, 4), word(area, 8));
        if len == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the host wrote `len` tensors at `outputs`; the first one's data is at 20 and 24.
        let first = unsafe { std::slice::from_raw_parts(outputs as *const u8, 28) };
        // SAFETY: as above: the data the host wrote for that tensor.
        let data = unsafe { std::slice::from_raw_parts(word(first, 20) as *const u8, word(first, 24)) };
        Ok(data.to_vec())
    }

    /// Natively (the plugin's unit builds) there is no host to call.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn infer(_parent: u32, _model: &str, _count: usize, _copies: usize) -> Result<Vec<u8>, (u8, String)> {
        Err((0, "not in a sandbox".into()))
    }
}

impl Backend for Probe {
    fn new(_model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(Probe)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            handle(request)?;
        }
        Ok(())
    }
}

nereus_sdk::export!(Probe);
