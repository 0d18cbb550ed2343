//! `test_faults`: a test backend that misbehaves on request, to prove the sandbox contains it.
//! INPUT0 INT32 [-1] comes back as OUTPUT0, unless the request parameter `fault` says otherwise:
//! "spin" (busy for `spin_ms` ms, then echoes), "trap" (a panic in `panic_on_request`, which aborts
//! into a Wasm trap; the host logs the guest backtrace, where that name must appear), "loop" (never
//! returns), "oom" (allocates past any memory cap), "oom_error" (allocates until refused, then returns
//! an execution error, as an interpreter that survives it does), "no_response" (returns without answering),
//! "bad_output" (answers with a wrong datatype), "error" (returns an execution error), and attempts
//! to reach outside the sandbox: "read_file"/"write_file" (request parameter `path`), "env",
//! "connect" (`address`), answering with response parameter `got` or failing with the sandbox's
//! error; "recursion" (unbounded), and responses the host must refuse: "huge_output" (`count` INT32
//! elements), "unknown_output", "wrong_byte_count", "wrong_shape", "missing_output"; for decoupled
//! models "flood" (`count` responses, then the final flag) and "never_final" (one response, no
//! final); "until_cancelled" (waits until the client is gone, then fails the request); "nap" (sleeps
//! 1 ms, a blocking WASI call, then echoes); "huge_parameters", "huge_error" (`count` bytes of
//! response parameters or of error message), "aliased_outputs" and "aliased_parameters" (`copies`
//! outputs or parameters all pointing at the same `count` bytes, sent past the SDK; the request
//! then fails with the host's refusal), "log" (`count` log lines of the parameter `text`)
//! and "sleep" (a blocking sleep of `sleep_ms`, default ten minutes). The model parameter `init_fault` = "model" makes model
//! initialisation fail, to test load errors; "trap" makes it trap (in `panic_on_request`); "sleep"
//! makes it sleep ten minutes. Loaded under a backend name ending in "_hoarding" (the model's
//! `runtime` naming this file), its backend initialisation keeps 48 MiB of memory for good.
use nereus_sdk::{
    Backend, DataType, ErrorKind, InstanceInfo, ModelInfo, ParameterValue, Request, Response, Tensor, config_parameter,
};

struct Faults;

impl Backend for Faults {
    fn initialize_backend(backend_name: &str) -> Result<(), String> {
        if backend_name.ends_with("_hoarding") {
            std::mem::forget(std::hint::black_box(vec![1u8; 48 << 20]));
        }
        Ok(())
    }

    fn initialize_model(model: &ModelInfo) -> Result<(), String> {
        match config_parameter(model, "init_fault")?.as_deref() {
            Some("model") => Err("test_faults: model initialisation refused as configured".into()),
            Some("trap") => panic_on_request(),
            // A blocking sleep in initialisation, bounded only by the host's deadline.
            Some("sleep") => {
                std::thread::sleep(std::time::Duration::from_secs(600));
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn new(_model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(Faults)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for mut request in requests {
            let fault = match request.parameter("fault") {
                Some(ParameterValue::Text(s)) => s.clone(),
                _ => String::new(),
            };
            match fault.as_str() {
                "trap" => panic_on_request(),
                "loop" => {
                    let mut x: u64 = 0;
                    loop {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                }
                // Reserves without touching: the growth is what the cap refuses, and writing the
                // pages would only make the test race the execution deadline on a busy machine.
                "oom" => {
                    let mut hog: Vec<Vec<u8>> = Vec::new();
                    loop {
                        hog.push(std::hint::black_box(Vec::with_capacity(16 << 20)));
                        std::hint::black_box(&hog);
                    }
                }
                // Survives the refused growth, as an interpreter does, and gives the batch up.
                "oom_error" => {
                    let mut hog: Vec<Vec<u8>> = Vec::new();
                    loop {
                        let mut chunk = Vec::new();
                        if chunk.try_reserve_exact(16 << 20).is_err() {
                            drop(hog);
                            return Err("test_faults: out of memory".into());
                        }
                        hog.push(std::hint::black_box(chunk));
                        std::hint::black_box(&hog);
                    }
                }
                "no_response" => continue,
                "error" => return Err("test_faults: execution error requested".into()),
                "bad_output" => {
                    let t = Tensor::from_raw("OUTPUT0", DataType::Fp64, vec![1], vec![0; 8]);
                    request.respond(Response::new().output(t))?;
                }
                // Reaching outside the sandbox: each answers with what it got, or fails the request
                // with the error the sandbox gave.
                "read_file" | "write_file" | "env" | "connect" => {
                    let text = |key: &str| match request.parameter(key) {
                        Some(ParameterValue::Text(s)) => s.clone(),
                        _ => String::new(),
                    };
                    let outcome: Result<String, String> = match fault.as_str() {
                        "read_file" => {
                            let path = text("path");
                            std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))
                        }
                        "write_file" => {
                            let path = text("path");
                            std::fs::write(&path, b"x")
                                .map(|_| "written".into())
                                .map_err(|e| format!("cannot write {path}: {e}"))
                        }
                        "env" => Ok(format!("{} variables", std::env::vars().count())),
                        _ => {
                            let address = text("address");
                            std::net::TcpStream::connect(&address)
                                .map(|_| "connected".into())
                                .map_err(|e| format!("cannot connect to {address}: {e}"))
                        }
                    };
                    match outcome {
                        Ok(got) => {
                            let t = request.take_input("INPUT0")?.renamed("OUTPUT0");
                            request.respond(Response::new().output(t).parameter("got", ParameterValue::Text(got)))?;
                        }
                        Err(message) => request.fail(&message)?,
                    }
                }
                "recursion" => {
                    // Unbounded recursion: the stack runs out.
                    #[allow(unconditional_recursion)] // the point: it never returns
                    fn deeper(n: u64) -> u64 {
                        std::hint::black_box(deeper(std::hint::black_box(n + 1))) + 1
                    }
                    let _ = deeper(0);
                }
                // Responses the host must refuse: too large, or not what the model declares.
                "huge_output" | "unknown_output" | "wrong_byte_count" | "wrong_shape" | "missing_output" => {
                    let response = match fault.as_str() {
                        "huge_output" => {
                            let count = match request.parameter("count") {
                                Some(ParameterValue::Int64(n)) => *n as usize,
                                _ => 1 << 20,
                            };
                            Response::new().output(Tensor::from_slice(
                                "OUTPUT0",
                                vec![count as i64],
                                &vec![7i32; count],
                            ))
                        }
                        "unknown_output" => Response::new().output(Tensor::from_slice("NOPE", vec![1], &[1i32])),
                        "wrong_byte_count" => {
                            Response::new().output(Tensor::from_raw("OUTPUT0", DataType::Int32, vec![3], vec![0; 8]))
                        }
                        "wrong_shape" => {
                            Response::new().output(Tensor::from_slice("OUTPUT0", vec![1, 3], &[1i32, 2, 3]))
                        }
                        _ => Response::new(),
                    };
                    request.respond(response)?;
                }
                // Decoupled models only: a response stream that floods, or never ends.
                "flood" => {
                    let count = match request.parameter("count") {
                        Some(ParameterValue::Int64(n)) => *n,
                        _ => 1000,
                    };
                    let t = request.take_input("INPUT0")?.renamed("OUTPUT0");
                    for _ in 0..count {
                        request.send(Response::new().output(t.clone()), false)?;
                    }
                    request.complete()?;
                }
                "never_final" => {
                    let t = request.take_input("INPUT0")?.renamed("OUTPUT0");
                    request.send(Response::new().output(t), false)?;
                }
                // What a plugin returns beyond tensors, which the host counts too: response
                // parameters of `count` bytes, an error message of `count` bytes, or `count` log
                // lines of the request parameter `text`.
                "huge_parameters" | "huge_error" | "log" => {
                    let count = match request.parameter("count") {
                        Some(ParameterValue::Int64(n)) => *n as usize,
                        _ => 1 << 20,
                    };
                    match fault.as_str() {
                        "huge_parameters" => {
                            let t = request.take_input("INPUT0")?.renamed("OUTPUT0");
                            let text = ParameterValue::Text("p".repeat(count));
                            request.respond(Response::new().output(t).parameter("huge", text))?;
                        }
                        "huge_error" => request.fail_with(ErrorKind::Internal, &"e".repeat(count))?,
                        _ => {
                            let text = match request.parameter("text") {
                                Some(ParameterValue::Text(s)) => s.clone(),
                                _ => "a log line".to_string(),
                            };
                            for _ in 0..count {
                                nereus_sdk::log(nereus_sdk::LogLevel::Info, &text);
                            }
                            let t = request.take_input("INPUT0")?.renamed("OUTPUT0");
                            request.respond(Response::new().output(t))?;
                        }
                    }
                }
                // What the SDK would never send, a hostile plugin might: `copies` outputs, or
                // `copies` parameters, whose data or key are all the same `count` bytes of its
                // memory. Cheap for the plugin; the host must not copy them all to find out.
                "aliased_outputs" | "aliased_parameters" => {
                    let count = match request.parameter("count") {
                        Some(ParameterValue::Int64(n)) => *n as usize,
                        _ => 1 << 16,
                    };
                    let copies = match request.parameter("copies") {
                        Some(ParameterValue::Int64(n)) => *n as usize,
                        _ => 100_000,
                    };
                    // A refusal has failed the request already, with the host's reason.
                    let _ = aliased::send(request.index(), fault == "aliased_outputs", count, copies);
                }
                "sleep" => {
                    // A blocking WASI sleep of `sleep_ms` (a monotonic-clock subscription the guest
                    // blocks on), then echoes: only the host's deadline or a cancellation cuts it.
                    let ms = match request.parameter("sleep_ms") {
                        Some(ParameterValue::Int64(n)) => *n as u64,
                        _ => 600_000,
                    };
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                    let t = request.take_input("INPUT0")?.renamed("OUTPUT0");
                    request.respond(Response::new().output(t))?;
                }
                "nap" => {
                    // Sleeps a millisecond (a blocking WASI call), then echoes.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    let t = request.take_input("INPUT0")?.renamed("OUTPUT0");
                    request.respond(Response::new().output(t))?;
                }
                "until_cancelled" => {
                    // Works until nobody waits for the answer any more (no deadline of its own:
                    // only cancellation, or the sandbox's execution deadline, ends it).
                    while !request.is_cancelled() {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    request.fail_with(ErrorKind::Unavailable, "test_faults: cancelled")?;
                }
                "spin" => {
                    // Busy for about `spin_ms` milliseconds, then answers (a long execution).
                    let ms = match request.parameter("spin_ms") {
                        Some(ParameterValue::Int64(n)) => *n as u64,
                        _ => 100,
                    };
                    let start = std::time::Instant::now();
                    while start.elapsed().as_millis() < ms as u128 {
                        std::hint::spin_loop();
                    }
                    let t = request.take_input("INPUT0")?.renamed("OUTPUT0");
                    request.respond(Response::new().output(t))?;
                }
                _ => {
                    // Echo: the input as OUTPUT0, every request parameter back as a response
                    // parameter, and the request id as `echo_id`.
                    let t = request.take_input("INPUT0")?.renamed("OUTPUT0");
                    let mut response = Response::new().output(t);
                    for p in request.parameters().to_vec() {
                        response = response.parameter(p.key, p.value);
                    }
                    response = response.parameter("echo_id", ParameterValue::Text(request.id().to_string()));
                    request.respond(response)?;
                }
            }
        }
        Ok(())
    }
}

/// `send-response` called past the SDK, through the import's canonical ABI, with one buffer
/// aliased many times over: something the SDK's owned types cannot express.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
mod aliased {
    /// WIT's `tensor` in the canonical ABI's memory layout (wasm32: 28 bytes, align 4).
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

    /// WIT's `parameter` with a `text` value (24 bytes, align 8: the value's payload at 16).
    #[repr(C, align(8))]
    struct RawParameter {
        key: *const u8,
        key_len: usize,
        case: u8,
        _padding: [u8; 7],
        text: *const u8,
        text_len: usize,
    }

    /// The `text` case of `parameter-value`; INT32 of `data-type`.
    const TEXT: u8 = 4;
    const INT32: u8 = 7;

    #[cfg(target_arch = "wasm32")]
    #[link(wasm_import_module = "nereus:backend/host@1.2.0")]
    unsafe extern "C" {
        /// `send-response(request, response, final) -> result<_, string>`, flattened: the
        /// response's two lists as (pointer, length) pairs, the result through a return area.
        #[link_name = "send-response"]
        fn send_response(
            request: u32,
            outputs: *const RawTensor,
            outputs_len: usize,
            parameters: *const RawParameter,
            parameters_len: usize,
            final_: u32,
            result: *mut u8,
        );
    }

    /// Sends `copies` outputs named OUTPUT0 (`outputs`) or `copies` parameters (`!outputs`), all
    /// pointing at the same `count` bytes; returns what the host answered.
    #[cfg(target_arch = "wasm32")]
    pub fn send(request: u32, outputs: bool, count: usize, copies: usize) -> Result<(), String> {
        let bytes = vec![b'a'; count];
        let shape = [(count / 4) as i64];
        let name = b"OUTPUT0";
        let tensors: Vec<RawTensor> = (0..if outputs { copies } else { 0 })
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
        let parameters: Vec<RawParameter> = (0..if outputs { 0 } else { copies })
            .map(|_| RawParameter {
                key: bytes.as_ptr(),
                key_len: count,
                case: TEXT,
                _padding: [0; 7],
                text: bytes.as_ptr(),
                text_len: 0,
            })
            .collect();
        // The result: a discriminant byte, then the error string's (pointer, length) at 4.
        #[repr(C, align(4))]
        struct ResultArea([u8; 12]);
        let mut result = ResultArea([0; 12]);
        // SAFETY: every pointer is to memory that lives across the call, with the layouts the
        // canonical ABI gives these types; the host reads them and writes only the result area
        // (and, for an error, a string it allocates through this module's `cabi_realloc`).
        unsafe {
            send_response(
                request,
                tensors.as_ptr(),
                tensors.len(),
                parameters.as_ptr(),
                parameters.len(),
                1,
                result.0.as_mut_ptr(),
            );
        }
        if result.0[0] == 0 {
            return Ok(());
        }
        let pointer = u32::from_le_bytes([result.0[4], result.0[5], result.0[6], result.0[7]]) as usize;
        let len = u32::from_le_bytes([result.0[8], result.0[9], result.0[10], result.0[11]]) as usize;
        // SAFETY: the host wrote a string of `len` bytes at `pointer`, allocated for this module.
        let message = unsafe { std::slice::from_raw_parts(pointer as *const u8, len) };
        Err(String::from_utf8_lossy(message).into_owned())
    }

    /// Natively (the plugin's unit builds) there is no host to call.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn send(_request: u32, _outputs: bool, _count: usize, _copies: usize) -> Result<(), String> {
        Err("not in a sandbox".into())
    }
}

/// Panics (with `panic = "abort"`, a Wasm trap), in a function of its own with a name the tests
/// look for in the host's log of the guest backtrace: kept out of line so that it has a frame.
#[inline(never)]
fn panic_on_request() -> ! {
    panic!("test_faults: trap requested")
}

nereus_sdk::export!(Faults);
