//! Shutdown on SIGTERM, driven against the real `nereus` binary: connections drain, requests in
//! flight are answered, sequences in flight are waited for, and what the exit timeout cuts off is
//! logged (tritonserver's order and log lines; docs/operations.md#shutdown).
use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use common::*;
use serde_json::json;

/// An HTTP/1.1 keep-alive connection opened before the shutdown, to talk to the server after the
/// listener stopped taking new ones.
struct KeepAlive(BufReader<TcpStream>);

impl KeepAlive {
    fn open(port: u16) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(WAIT)).unwrap();
        KeepAlive(BufReader::new(stream))
    }

    /// Sends one request and reads its answer (a `Content-Length` body).
    fn request(&mut self, method: &str, path: &str, body: &[u8]) -> Resp {
        let head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n", body.len());
        let stream = self.0.get_mut();
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        let mut status_line = String::new();
        self.0.read_line(&mut status_line).unwrap();
        let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            self.0.read_line(&mut line).unwrap();
            match line.trim_end().split_once(':') {
                Some((k, v)) => headers.push((k.trim().to_string(), v.trim().to_string())),
                None => break,
            }
        }
        let length = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; length];
        self.0.read_exact(&mut body).unwrap();
        Resp { status, headers, body }
    }

    /// Whether the server closed the connection (a read finds its end).
    fn closed_by_server(&mut self) -> bool {
        let mut rest = Vec::new();
        matches!(self.0.read_to_end(&mut rest), Ok(0))
    }
}

/// Requests executing and queued when SIGTERM arrives, over HTTP and gRPC, are all answered;
/// meanwhile new connections are refused, and a keep-alive connection opened before is served,
/// told it is not ready, and closed after its answer. Then the process exits 0.
#[test]
fn sigterm_answers_every_request_in_flight_over_http_and_grpc() {
    let repo = Repo::new();
    repo.example("simple");
    let mut s = Server::start(repo.path(), &[]);
    let port = s.port;
    s.gate("simple", false);
    let http_clients: Vec<_> = (0..3)
        .map(|b| {
            std::thread::spawn(move || {
                http(port, "POST", "/v2/models/simple/infer", &[], simple_request(b).to_string().as_bytes())
            })
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let grpc = runtime.block_on(grpc_client(&s));
    let grpc_calls: Vec<_> = (10..13)
        .map(|b| {
            let mut c = grpc.clone();
            runtime.spawn(async move { c.model_infer(grpc_simple_request(b)).await })
        })
        .collect();
    s.wait_until("one request executing and five queued", || s.executions("simple").0 == 1 && s.queued("simple") == 5);
    let mut ready_probe = KeepAlive::open(port);
    let mut gate_opener = KeepAlive::open(port);
    // Answered once before the signal, so the server has accepted both: a connection still in the
    // listener's backlog when the listener closes is reset, as at any server (seen on a loaded CI
    // machine).
    for connection in [&mut ready_probe, &mut gate_opener] {
        assert_eq!(connection.request("GET", "/v2/health/live", b"").status, 200);
    }

    s.send_sigterm();
    s.wait_until("the HTTP listener to close", || TcpStream::connect(("127.0.0.1", port)).is_err());
    let ready = ready_probe.request("GET", "/v2/health/ready", b"");
    assert_eq!(ready.status, 400, "not ready once a shutdown began");
    assert_eq!(ready.header("connection"), Some("close"));
    assert!(ready_probe.closed_by_server());
    let opened = gate_opener.request("POST", "/nereus/test/models/simple/gate", br#"{"open": true}"#);
    assert_eq!(opened.status, 200, "a connection open before the signal is still served: {}", opened.text());
    assert_eq!(opened.header("connection"), Some("close"));

    for (b, client) in (0..).zip(http_clients) {
        let r = client.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["outputs"][0]["data"][15], 15 + b);
    }
    for (b, call) in (10..).zip(grpc_calls) {
        let r = runtime.block_on(call).unwrap().expect("answered").into_inner();
        let out0: Vec<i32> =
            r.raw_output_contents[0].chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(out0[15], 15 + b);
    }
    drop(grpc);
    let status = s.wait_exit();
    assert!(status.success(), "exit status {status:?}\n{}", s.log());
    let log = s.log();
    for line in [
        "HTTP service connections",
        "gRPC service connections and inference handlers",
        "Waiting for in-flight requests to complete.",
        "All models are stopped, unloading models",
    ] {
        assert!(log.contains(line), "the log says {line:?}:\n{log}");
    }
}

/// A sequence started and not ended is in flight: once the connections have closed, the shutdown
/// waits for it (logging it, as tritonserver does) until the sequence batcher lets it go after
/// `max_sequence_idle_microseconds`; then the process exits 0.
#[test]
fn sigterm_waits_for_sequences_in_flight() {
    let repo = Repo::new();
    let config = std::fs::read_to_string(format!(
        "{}/../model_repository/simple_sequence/config.pbtxt",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
    .replace("max_sequence_idle_microseconds: 5000000", "max_sequence_idle_microseconds: 3000000");
    repo.model("simple_sequence", &config, &["1"]);
    let mut s = Server::start(repo.path(), &[]);
    let started = s.post_json(
        "/v2/models/simple_sequence/infer",
        &json!({"parameters": {"sequence_id": 7, "sequence_start": true},
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [5]}]}),
    );
    assert_eq!(started.status, 200, "{}", started.text());
    let status = s.terminate();
    assert!(status.success(), "exit status {status:?}\n{}", s.log());
    let log = s.log();
    assert!(log.contains("Model 'simple_sequence' (version 1) has 1 in-flight inferences"), "{log}");
    assert!(log.contains("All models are stopped, unloading models"), "{log}");
}

/// A gRPC stream opened before a shutdown keeps its answers, but a request it sends once the
/// shutdown has begun is refused as tritonserver refuses it (UNAVAILABLE, in the stream's
/// message), so that a client that keeps sending cannot hold the shutdown open; the process exits
/// once the client closes the stream.
#[test]
fn a_grpc_stream_starts_nothing_new_once_a_shutdown_began() {
    use nereus::proto::inference as pb;
    let repo = Repo::new();
    repo.example("simple");
    let mut s = Server::start(repo.path(), &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let mut client = grpc_client(&s).await;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut responses =
            client.model_stream_infer(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        tx.send(grpc_simple_request(1)).await.unwrap();
        let first: pb::ModelStreamInferResponse = responses.message().await.unwrap().unwrap();
        assert_eq!(first.error_message, "", "answered before the shutdown");
        s.send_sigterm();
        s.wait_until("the gRPC listener to close", || TcpStream::connect(("127.0.0.1", s.grpc_port)).is_err());
        tx.send(grpc_simple_request(2)).await.unwrap();
        let refused = responses.message().await.unwrap().unwrap();
        assert_eq!(refused.error_message, "GRPC server is shutting down and has stopped accepting new requests.");
        drop(tx);
        assert!(responses.message().await.unwrap().is_none(), "the stream ends when the client closes it");
    });
    let status = s.wait_exit();
    assert!(status.success(), "exit status {status:?}\n{}", s.log());
    let log = s.log();
    assert!(log.contains("All models are stopped, unloading models"), "{log}");
}
