//! conn-load — many connections, one small request each at a time: Triton's `simple` (add_sub, INT32
//! [1,16]) over KServe v2 HTTP/1.1 keep-alive (binary tensors, as perf_analyzer sends) or Triton's gRPC (raw contents, one HTTP/2
//! connection per client), closed loop, as `wrk -c N` drives a server, for both protocols alike (the
//! machines here have no wrk, and no gRPC load tool that opens a connection per client).
//!
//! Prints one line: throughput, p50/p99/max latency, and the CPU time per request of this client and
//! (with --server-pid) of the server. Every answer is checked: the first of each connection against
//! the sums and differences, the rest byte for byte against that first answer (same input, same
//! bytes), so a server cannot win by answering wrongly. Only requests that finish inside the window
//! count.
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tensor_bench::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensor_bench::pb::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use tensor_bench::pb::*;
use tensor_bench::{cpu_over_window, exit_with, percentile};
use tonic::transport::Endpoint;

#[derive(Parser, Debug, Clone)]
struct Args {
    /// host:port of the HTTP or gRPC endpoint.
    #[arg(long)]
    url: String,
    #[arg(long, default_value = "http")]
    protocol: String,
    #[arg(long, default_value = "simple")]
    model: String,
    /// Connections, each with one request in flight.
    #[arg(long, default_value_t = 256)]
    connections: usize,
    /// Measurement window, seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Unmeasured warm-up before the window, seconds (every connection is open before it starts).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// The server's pids (comma-separated), to report its CPU time per request over the window.
    #[arg(long, value_delimiter = ',')]
    server_pid: Vec<u32>,
    /// Client runtime threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// The inputs every request sends: INPUT0 = 0..16, INPUT1 = 1s (as Triton's simple_http_infer_client).
fn inputs() -> (Vec<i32>, Vec<i32>) {
    ((0..16).collect(), vec![1; 16])
}

/// Checks OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1.
fn check_sums(out0: &[i32], out1: &[i32]) -> anyhow::Result<()> {
    let (a, b) = inputs();
    let sum: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let diff: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
    if out0 != sum || out1 != diff {
        bail!("wrong answer: OUTPUT0 {out0:?}, OUTPUT1 {out1:?}");
    }
    Ok(())
}

/// Latencies of the requests that completed, with when each completed.
type Done = Vec<(Instant, Duration)>;

// ---- HTTP ----

/// The request: a JSON header, then both inputs as raw bytes (the binary extension), outputs asked
/// for as binary — what perf_analyzer sends, and all the bare-hyper ceiling answers.
fn http_request() -> (Bytes, usize) {
    let (a, b) = inputs();
    let header = json!({
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
        ],
        "outputs": [
            {"name": "OUTPUT0", "parameters": {"binary_data": true}},
            {"name": "OUTPUT1", "parameters": {"binary_data": true}},
        ],
    })
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend(a.iter().chain(&b).flat_map(|x| x.to_le_bytes()));
    (Bytes::from(body), header.len())
}

/// OUTPUT0 and OUTPUT1 of an answer: its JSON header names the outputs and their binary sizes, in the
/// order their bytes follow it.
fn http_outputs(answer: &[u8], header_len: Option<usize>) -> anyhow::Result<(Vec<i32>, Vec<i32>)> {
    let header_len = header_len.context("no inference-header-content-length: outputs not binary")?;
    let v: Value = serde_json::from_slice(answer.get(..header_len).context("short answer")?)?;
    let (mut at, mut out0, mut out1) = (header_len, None, None);
    for o in v["outputs"].as_array().context("no outputs")? {
        let size = o["parameters"]["binary_data_size"].as_u64().context("an output without binary data")? as usize;
        let bytes = answer.get(at..at + size).context("short answer")?;
        at += size;
        match o["name"].as_str() {
            Some("OUTPUT0") => out0 = Some(le_i32(bytes)),
            Some("OUTPUT1") => out1 = Some(le_i32(bytes)),
            _ => {}
        }
    }
    Ok((out0.context("no OUTPUT0")?, out1.context("no OUTPUT1")?))
}

async fn http_worker(args: Arc<Args>, start: Instant, end: Instant) -> anyhow::Result<Done> {
    let tcp = tokio::net::TcpStream::connect(&args.url).await.with_context(|| format!("connecting to {}", args.url))?;
    tcp.set_nodelay(true)?;
    let (mut sender, conn) = http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let path = format!("/v2/models/{}/infer", args.model);
    let (body, header_len) = http_request();
    let mut first: Option<Bytes> = None;
    let mut done = Vec::new();
    while Instant::now() < end {
        let t0 = Instant::now();
        let req = hyper::Request::post(&path)
            .header("host", &args.url)
            .header("inference-header-content-length", header_len)
            .body(Full::new(body.clone()))?;
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let answer_header: Option<usize> = resp
            .headers()
            .get("inference-header-content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let answer = resp.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!("{status}: {}", String::from_utf8_lossy(&answer[..answer.len().min(500)]));
        }
        match &first {
            Some(f) if *f == answer => {}
            Some(_) => bail!("answer differs from the connection's first: {}", String::from_utf8_lossy(&answer)),
            None => {
                let (out0, out1) = http_outputs(&answer, answer_header)?;
                check_sums(&out0, &out1)?;
                first = Some(answer);
            }
        }
        let t1 = Instant::now();
        if t1 >= start && t1 <= end {
            done.push((t1, t1 - t0));
        }
    }
    Ok(done)
}

// ---- gRPC ----

fn le_i32(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

async fn grpc_worker(args: Arc<Args>, start: Instant, end: Instant) -> anyhow::Result<Done> {
    // A channel of its own: one HTTP/2 connection per client, as 256 separate clients would have.
    let channel = Endpoint::from_shared(format!("http://{}", args.url))?
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("connecting to {}", args.url))?;
    let mut client = GrpcInferenceServiceClient::new(channel);
    let (a, b) = inputs();
    let le = |v: &[i32]| Bytes::from(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
    let input = |name: &str| InferInputTensor {
        name: name.into(),
        datatype: "INT32".into(),
        shape: vec![1, 16],
        ..Default::default()
    };
    let request = ModelInferRequest {
        model_name: args.model.clone(),
        inputs: vec![input("INPUT0"), input("INPUT1")],
        outputs: ["OUTPUT0", "OUTPUT1"]
            .into_iter()
            .map(|n| InferRequestedOutputTensor { name: n.into(), ..Default::default() })
            .collect(),
        raw_input_contents: vec![le(&a), le(&b)],
        ..Default::default()
    };
    let mut first: Option<Vec<Bytes>> = None;
    let mut done = Vec::new();
    while Instant::now() < end {
        let t0 = Instant::now();
        let resp = client.model_infer(request.clone()).await?.into_inner();
        match &first {
            Some(f) if *f == resp.raw_output_contents => {}
            Some(_) => bail!("answer differs from the connection's first"),
            None => {
                let by_name = |n: &str| {
                    let i = resp.outputs.iter().position(|o| o.name == n).with_context(|| format!("no {n}"))?;
                    resp.raw_output_contents.get(i).map(|b| le_i32(b)).with_context(|| format!("no contents for {n}"))
                };
                check_sums(&by_name("OUTPUT0")?, &by_name("OUTPUT1")?)?;
                first = Some(resp.raw_output_contents);
            }
        }
        let t1 = Instant::now();
        if t1 >= start && t1 <= end {
            done.push((t1, t1 - t0));
        }
    }
    Ok(done)
}

fn main() -> std::process::ExitCode {
    exit_with("conn-load", run(Args::parse()))
}

fn run(args: Args) -> anyhow::Result<()> {
    if args.connections == 0 {
        bail!("--connections must be at least 1");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads.max(1)).enable_all().build()?;
    let args = Arc::new(args);
    let (done, cpu, wall) = rt.block_on(async {
        // The window starts after the warm-up, counted from when the connections are being opened.
        let start = Instant::now() + Duration::from_secs_f64(args.warmup);
        let end = start + Duration::from_secs_f64(args.seconds);
        let mut tasks = Vec::new();
        for _ in 0..args.connections {
            let args = args.clone();
            tasks.push(tokio::spawn(async move {
                if args.protocol == "grpc" {
                    grpc_worker(args, start, end).await
                } else {
                    http_worker(args, start, end).await
                }
            }));
        }
        let cpu = tokio::spawn(cpu_over_window(args.server_pid.clone(), start, end));
        let mut done = Vec::new();
        for t in tasks {
            done.extend(t.await??);
        }
        anyhow::Ok((done, cpu.await?, end - start))
    })?;
    let mut lat: Vec<Duration> = done.iter().map(|(_, l)| *l).collect();
    lat.sort();
    let n = lat.len();
    let secs = wall.as_secs_f64();
    let per_req = |d: Duration| if n == 0 { 0.0 } else { d.as_secs_f64() * 1e6 / n as f64 };
    println!(
        "model={} protocol={} connections={} requests={} throughput={:.1} p50_us={} p99_us={} max_us={} \
         client_cpu_us_per_req={:.1} server_cpu_us_per_req={}",
        args.model,
        args.protocol,
        args.connections,
        n,
        n as f64 / secs,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().map_or(0, |d| d.as_micros()),
        per_req(cpu.0),
        cpu.1.map_or("-".to_string(), |s| format!("{:.1}", per_req(s))),
    );
    if n == 0 {
        bail!("no request completed within the window");
    }
    Ok(())
}
