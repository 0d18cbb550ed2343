//! Where one small request's CPU goes, in process, without sockets: perf_analyzer's HTTP request
//! for Triton's `simple` (two INT32 [1,16] inputs as binary tensors, both outputs asked as binary)
//! decoded (`codec::decode_request`), run (`Server::infer`: validation, the scheduler, the Wasm
//! call, the response's checks; inline on the calling thread, as on an I/O thread) and encoded
//! (`codec::encode_response`), each timed and its heap allocations counted. A profile of the whole
//! server under load spreads these over hyper and tokio; this measures them alone, quietly enough
//! to see a change of a few hundred nanoseconds (run it pinned: `taskset -c 1`).
//!
//!   cargo build --release -p nereus --example request_path
//!   taskset -c 1 target/release/examples/request_path bench/model_repository [all|decode|infer] [N]
//!
//! `decode` and `infer` time that step alone in a loop (infer runs a clone of one decoded request).
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use clap::Parser;
use nereus::cli::Cli;
use nereus::frontend::http::codec;
use nereus::server::Server;

/// The system allocator, counting allocations (and reallocations).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

#[allow(unsafe_code)]
// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

const HEADER: &[u8] = br#"{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}},{"name":"OUTPUT1","parameters":{"binary_data":true}}]}"#;

/// Requests run before timing starts (the inline gate's warm-up, caches).
const WARMUP: u64 = 20_000;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let repository =
        args.get(1).ok_or_else(|| anyhow::anyhow!("usage: request_path REPOSITORY [all|decode|infer] [N]"))?;
    let mode = args.get(2).map_or("all", String::as_str);
    let n: u64 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(200_000);
    // No busy-poll spinner: its thread would compete with this one for nothing.
    let cli = Cli::parse_from(["nereus", "--model-repository", repository, "--busy-poll-us", "0"]);
    // Three I/O threads, as the 2-core server has (two HTTP, one gRPC): this thread may run inline.
    let (options, _) = cli.serve.server_options(3)?;
    let server = Server::start(options)?;
    let _ = server.load_startup_models();
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let mut body = HEADER.to_vec();
    body.extend(std::iter::repeat_n(1u8, 128));
    let body = Bytes::from(body);
    let no_raw_input = || Err(nereus::error::InferError::invalid("not a raw request"));
    let decode = || -> anyhow::Result<_> {
        let (mut request, options) =
            codec::decode_request(body.clone(), Some(HEADER.len()), no_raw_input, server.shm(), "simple")?;
        request.model_name = "simple".into();
        Ok((request, options))
    };
    let infer = |request| -> anyhow::Result<_> {
        let answer = server.infer(request, "HTTP end point")?;
        Ok(runtime.block_on(answer)??)
    };

    match mode {
        "decode" | "infer" => {
            let (request, _) = decode()?;
            let step = || -> anyhow::Result<()> {
                if mode == "decode" {
                    std::hint::black_box(decode()?);
                } else {
                    std::hint::black_box(infer(request.clone())?);
                }
                Ok(())
            };
            for _ in 0..WARMUP {
                step()?;
            }
            let (started, allocated) = (Instant::now(), allocations());
            for _ in 0..n {
                step()?;
            }
            let per = |total: f64| total / n as f64;
            println!(
                "{mode} alone: {:.2} µs, {:.1} allocations a request{}",
                per(started.elapsed().as_nanos() as f64 / 1000.0),
                per((allocations() - allocated) as f64),
                if mode == "infer" { " (with the request's clone)" } else { "" }
            );
        }
        _ => {
            let mut nanos = [0u128; 3];
            let mut counted = [0u64; 3];
            for i in 0..WARMUP + n {
                let (a0, t0) = (allocations(), Instant::now());
                let (request, options) = decode()?;
                let (a1, t1) = (allocations(), Instant::now());
                let response = infer(request)?;
                let (a2, t2) = (allocations(), Instant::now());
                std::hint::black_box(codec::encode_response(&response, &options)?.into_chunks());
                drop(response);
                let (a3, t3) = (allocations(), Instant::now());
                if i >= WARMUP {
                    for (k, (t, a)) in
                        [(t1 - t0, a1 - a0), (t2 - t1, a2 - a1), (t3 - t2, a3 - a2)].into_iter().enumerate()
                    {
                        nanos[k] += t.as_nanos();
                        counted[k] += a;
                    }
                }
            }
            for (k, step) in ["decode", "infer", "encode"].into_iter().enumerate() {
                println!(
                    "{step}: {:.2} µs, {:.1} allocations a request",
                    nanos[k] as f64 / n as f64 / 1000.0,
                    counted[k] as f64 / n as f64
                );
            }
        }
    }
    // The server's threads are not stopped: this measures, it does not serve.
    std::process::exit(0);
}
