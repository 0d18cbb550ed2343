//! Test harness: lays out model repositories in temporary folders, starts the real `nereus` binary
//! on a free port, and talks HTTP/1.1 to it with a small blocking client. Every wait is bounded, so
//! a hang fails the test instead of stalling CI.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long any single wait in a test may take.
pub const WAIT: Duration = Duration::from_secs(60);

/// A temporary folder removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let dir = base.join(format!("{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Servers (and their repositories) kept in a `static`, which Rust never drops: killed and removed
/// when the test process exits, so a test run leaves no server behind.
static AT_EXIT: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

extern "C" fn clean_up_statics() {
    let Ok(list) = AT_EXIT.lock() else { return };
    for (pid, dir) in list.iter() {
        // SAFETY: kill(2) of a child process this test process started and never waited for.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(*pid as libc::pid_t, libc::SIGKILL);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Kills `server` and removes `repo` when the test process exits; for a server shared by a test
/// file's tests through a `static`.
pub fn clean_up_at_exit(server: &Server, repo: &Repo) {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function with no arguments, as atexit(3) expects.
        #[allow(unsafe_code)]
        unsafe {
            libc::atexit(clean_up_statics);
        }
    });
    AT_EXIT.lock().unwrap().push((server.child.id(), repo.path().to_path_buf()));
}

/// A model repository under construction.
pub struct Repo {
    pub dir: TempDir,
}

impl Repo {
    pub fn new() -> Self {
        Repo { dir: TempDir::new("repo") }
    }

    /// Adds `<name>/config.pbtxt` and the given (empty) version folders.
    pub fn model(&self, name: &str, config: &str, versions: &[&str]) -> PathBuf {
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.pbtxt"), config).unwrap();
        for v in versions {
            std::fs::create_dir_all(dir.join(v)).unwrap();
        }
        dir
    }

    /// Copies a model folder of the repository's `model_repository/`.
    pub fn example(&self, name: &str) {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../model_repository").join(name);
        let text = std::fs::read_to_string(src.join("config.pbtxt")).unwrap();
        self.model(name, &text, &["1"]);
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A running `nereus` process.
pub struct Server {
    child: Child,
    pub port: u16,
    pub grpc_port: u16,
    pub log: Arc<Mutex<String>>,
    /// The threads copying its stdout and stderr into `log`; they end when the process has.
    readers: Vec<std::thread::JoinHandle<()>>,
}

fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")
}

impl Server {
    /// Starts `nereus serve` on `repo` with test hooks on and waits until it listens.
    pub fn start(repo: &Path, extra: &[&str]) -> Server {
        Self::start_with_env(repo, extra, &[])
    }

    /// The same, with more environment variables.
    pub fn start_with_env(repo: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let s = Self::listening(repo, extra, env);
        s.wait_until("the start-up models to load", || s.log().contains("Nereus is ready: "));
        s
    }

    /// Starts `nereus serve` and returns as soon as it listens, while its start-up models may
    /// still be loading.
    pub fn listening(repo: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nereus"))
            .arg("serve")
            .arg("--model-repository")
            .arg(repo)
            .args(["--http-port", "0", "--http-address", "127.0.0.1", "--test-hooks"])
            .args(["--grpc-port", "0", "--grpc-address", "127.0.0.1", "--metrics-port", "0"])
            .arg("--cache-directory")
            .arg(cache_dir())
            .args(extra)
            .env("NEREUS_LOG", "info")
            // Two I/O threads whatever the machine: inline execution needs a spare one, and the
            // tests should see the same server everywhere.
            .env("TOKIO_WORKER_THREADS", "2")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting nereus");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<(bool, u16)>();
        let mut readers = Vec::new();
        for stream in
            [Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>, Box::new(child.stderr.take().unwrap())]
        {
            let (log, tx) = (log.clone(), tx.clone());
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    for (grpc, marker) in
                        [(false, "Started HTTPService at "), (true, "Started GRPCInferenceService at ")]
                    {
                        // tritonserver's line: `I1125 … server.rs:97] "Started HTTPService at 127.0.0.1:PORT"`
                        if let Some(addr) = line.split(marker).nth(1)
                            && let Some(port) =
                                addr.trim().trim_end_matches('"').rsplit(':').next().and_then(|p| p.parse().ok())
                        {
                            let _ = tx.send((grpc, port));
                        }
                    }
                    log.lock().unwrap().push_str(&(line + "\n"));
                }
            }));
        }
        let (mut port, mut grpc_port) = (None, None);
        while port.is_none() || grpc_port.is_none() {
            match rx.recv_timeout(WAIT) {
                Ok((false, p)) => port = Some(p),
                Ok((true, p)) => grpc_port = Some(p),
                Err(_) => {
                    let _ = child.kill();
                    panic!("nereus did not start:\n{}", log.lock().unwrap());
                }
            }
        }
        Server { child, port: port.unwrap_or_default(), grpc_port: grpc_port.unwrap_or_default(), log, readers }
    }

    /// The metrics endpoint's port, from the server's log line `Started Metrics Service at …`.
    pub fn metrics_port(&self) -> u16 {
        let marker = "Started Metrics Service at ";
        let port = || {
            let log = self.log();
            let line = log.lines().find(|l| l.contains(marker))?.to_string();
            line.split(marker).nth(1)?.trim().trim_end_matches('"').rsplit(':').next()?.parse().ok()
        };
        self.wait_until("the metrics endpoint", || port().is_some());
        port().unwrap_or_default()
    }

    /// `GET /metrics`: the metrics endpoint's text.
    pub fn metrics(&self) -> String {
        let r = http(self.metrics_port(), "GET", "/metrics", &[], b"");
        assert_eq!(r.status, 200, "{}", r.text());
        r.text()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[], &[])
    }

    pub fn post_json(&self, path: &str, body: &Value) -> Resp {
        self.request("POST", path, &[("Content-Type", "application/json")], body.to_string().as_bytes())
    }

    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        http(self.port, method, path, headers, body)
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit; returns its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.send_sigterm();
        self.wait_exit()
    }

    /// Sends SIGTERM, and returns at once.
    pub fn send_sigterm(&self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
    }

    /// Waits (bounded) for the process to exit, and for its last log lines; returns its exit
    /// status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                for reader in self.readers.drain(..) {
                    let _ = reader.join();
                }
                return status;
            }
            assert!(Instant::now() < deadline, "nereus did not exit after SIGTERM:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls `f` until it holds (bounded by [`WAIT`]); for conditions the server reaches
    /// asynchronously, such as executions entering a gate.
    pub fn wait_until(&self, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends a JSON POST on a connection of its own, waits until `started` holds (e.g. the request
    /// is executing), then closes the connection without reading the answer.
    pub fn post_then_hang_up(&self, path: &str, body: &Value, mut started: impl FnMut() -> bool) {
        let body = serde_json::to_vec(body).unwrap();
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&body).unwrap();
        self.wait_until("the request to start", &mut started);
    }

    /// `name`'s state and reason in the repository index (its first version's row).
    pub fn model_state(&self, name: &str) -> (String, String) {
        let index = self.post_json("/v2/repository/index", &serde_json::json!({})).json();
        let row = index
            .as_array()
            .and_then(|rows| rows.iter().find(|m| m["name"] == name))
            .unwrap_or_else(|| panic!("{name} is not in the index: {index}"))
            .clone();
        (row["state"].as_str().unwrap_or_default().to_string(), row["reason"].as_str().unwrap_or_default().to_string())
    }

    /// The test hook's execution counters of `model`: (in flight, max in flight, executions).
    pub fn executions(&self, model: &str) -> (u64, u64, u64) {
        let v = self.get(&format!("/nereus/test/models/{model}/executions")).json();
        (v["in_flight"].as_u64().unwrap(), v["max_in_flight"].as_u64().unwrap(), v["executions"].as_u64().unwrap())
    }

    /// The test hook's count of `model`'s requests waiting for an instance.
    pub fn queued(&self, model: &str) -> u64 {
        self.get(&format!("/nereus/test/models/{model}/executions")).json()["queued"].as_u64().unwrap()
    }

    pub fn gate(&self, model: &str, open: bool) {
        let r = self.post_json(&format!("/nereus/test/models/{model}/gate"), &serde_json::json!({ "open": open }));
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    /// The `error` message of an error response.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_string()
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`), with socket timeouts.
pub fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.set_write_timeout(Some(WAIT)).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("reading the response");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("response has a header block");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Resp { status, headers, body }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(pos) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(std::str::from_utf8(&data[..pos]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[pos + 2..pos + 2 + size]);
        data = &data[pos + 4 + size..];
    }
}

/// Triton's `ensemble_add_sub`: two chained `simple` steps, A, B → SUM2 = 2A, DIFF2 = 2B.
pub const ADD_SUB_TWICE: &str = r#"name: "add_sub_twice"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "SUM2" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "DIFF2" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    { model_name: "simple" model_version: -1
      input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "diff" } },
    { model_name: "simple" model_version: -1
      input_map { key: "INPUT0" value: "sum" } input_map { key: "INPUT1" value: "diff" }
      output_map { key: "OUTPUT0" value: "SUM2" } output_map { key: "OUTPUT1" value: "DIFF2" } }
  ]
}"#;

/// The configuration of an INT32 add/sub model (the `add_sub` plugin, as `simple`) named `name`,
/// with `extra` appended.
pub fn add_sub_config(name: &str, extra: &str) -> String {
    format!(
        r#"name: "{name}"
backend: "add_sub"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }}, {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }}, {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
{extra}"#
    )
}

/// The INT32 `simple` request body for INPUT0 = 0..16, INPUT1 = `b` everywhere.
pub fn simple_request(b: i32) -> Value {
    serde_json::json!({
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": (0..16).collect::<Vec<i32>>()},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": vec![b; 16]}
        ]
    })
}

/// The same over gRPC, with raw contents.
pub fn grpc_simple_request(b: i32) -> nereus::proto::inference::ModelInferRequest {
    use nereus::proto::inference::model_infer_request::InferInputTensor;
    let input = |name: &str| InferInputTensor {
        name: name.into(),
        datatype: "INT32".into(),
        shape: vec![1, 16],
        parameters: Default::default(),
        contents: None,
    };
    nereus::proto::inference::ModelInferRequest {
        model_name: "simple".into(),
        inputs: vec![input("INPUT0"), input("INPUT1")],
        raw_input_contents: vec![
            bytes::Bytes::from(le_i32(&(0..16).collect::<Vec<_>>())),
            bytes::Bytes::from(le_i32(&[b; 16])),
        ],
        ..Default::default()
    }
}

/// Little-endian bytes of i32 values.
pub fn le_i32(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The `test_faults` config for a model named `name` with extra config text.
pub fn faults_config(name: &str, extra: &str) -> String {
    format!(
        r#"name: "{name}"
backend: "test_faults"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
{extra}"#
    )
}

/// A `test_faults` model with one instance and a ten-minute sandbox deadline: a request with the
/// "until_cancelled" fault then ends only when its client goes away, well within a test's bound.
pub fn waiting_faults_model(repo: &Repo, name: &str) {
    let limits = r#"instance_group [ { count: 1 kind: KIND_CPU } ]
parameters [ { key: "sandbox.execution_timeout_ms" value: { string_value: "600000" } } ]"#;
    let dir = repo.model(name, &faults_config(name, limits), &["1"]);
    install_faults_component(&dir);
}

/// Puts the `test_faults` component where `dir`'s model finds it (the model folder itself).
pub fn install_faults_component(model_dir: &Path) {
    std::fs::copy(nereus_plugins::TEST_FAULTS, model_dir.join("test_faults.wasm")).unwrap();
}

/// A request to a `test_faults` model with the given fault.
pub fn faults_request(fault: &str) -> Value {
    serde_json::json!({
        "parameters": {"fault": fault},
        "inputs": [{"name": "INPUT0", "shape": [3], "datatype": "INT32", "data": [1, 2, 3]}]
    })
}

/// A gRPC client connected to `s` (every call bounded by [`WAIT`]).
pub async fn grpc_client(
    s: &Server,
) -> nereus::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", s.grpc_port))
        .unwrap()
        .timeout(WAIT)
        .connect_timeout(WAIT)
        .connect()
        .await
        .unwrap();
    nereus::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient::new(channel)
}

/// Runs `nereus serve` on `repo` with `extra`, expecting it to refuse to start: returns its
/// standard error. A server that starts anyway is killed after [`WAIT`] and fails the test.
pub fn refused_start(repo: &Path, extra: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nereus"))
        .args(["serve", "--model-repository"])
        .arg(repo)
        .args(["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting nereus");
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started despite {extra:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(!status.success(), "{extra:?}");
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    stderr
}

/// ONNX Runtime's library for the tests that need it (`NEREUS_ONNXRUNTIME_LIB`, else where
/// scripts/setup-onnxruntime.sh puts it); `None` skips them, unless `NEREUS_REQUIRE_ONNXRUNTIME`
/// says CI must have it.
pub fn onnxruntime_library() -> Option<PathBuf> {
    let lib = std::env::var_os("NEREUS_ONNXRUNTIME_LIB")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/nereus/onnxruntime/libonnxruntime.so"))
        })
        .filter(|p| p.exists());
    if lib.is_none() {
        assert!(
            std::env::var_os("NEREUS_REQUIRE_ONNXRUNTIME").is_none(),
            "NEREUS_REQUIRE_ONNXRUNTIME is set but no ONNX Runtime library was found (run scripts/setup-onnxruntime.sh)"
        );
        eprintln!("skipping: no ONNX Runtime library (scripts/setup-onnxruntime.sh installs one)");
    }
    lib
}

/// xorshift64*: a small seeded generator, enough to mutate inputs reproducibly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A POSIX shared-memory object in /dev/shm of `size` bytes holding `data`, removed when dropped;
/// `tag` tells the tests' objects apart (tests run in parallel in one process).
pub struct ShmObject {
    pub key: String,
    pub path: PathBuf,
}

impl ShmObject {
    pub fn new(tag: &str, data: &[u8], size: usize) -> ShmObject {
        use std::os::unix::fs::FileExt;
        let key = format!("/nereus_test_{tag}_{}", std::process::id());
        let path = PathBuf::from("/dev/shm").join(&key[1..]);
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(size as u64).unwrap();
        f.write_all_at(data, 0).unwrap();
        ShmObject { key, path }
    }

    /// The object's first `len` bytes.
    pub fn read(&self, len: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; len];
        std::fs::File::open(&self.path).unwrap().read_exact_at(&mut buf, 0).unwrap();
        buf
    }

    /// Writes `data` at the object's start.
    pub fn write(&self, data: &[u8]) {
        use std::os::unix::fs::FileExt;
        std::fs::File::options().write(true).open(&self.path).unwrap().write_all_at(data, 0).unwrap();
    }

    /// Zeroes the object's first `len` bytes.
    pub fn zero(&self, len: usize) {
        self.write(&vec![0; len]);
    }
}

impl Drop for ShmObject {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
