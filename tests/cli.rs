//! The `nereus` process as someone starting it by hand sees it: its log lines (tritonserver's
//! formats, where they go, `--log-*` and the logging extension), and the line that says it is ready.
use crate::common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// A `nereus serve` started by a test, its standard output and error going to files.
struct Started {
    child: Child,
    dir: TempDir,
}

impl Started {
    fn new(repo: &Repo, extra: &[&str]) -> Started {
        let dir = TempDir::new("cli-log");
        let out = std::fs::File::create(dir.path().join("stdout")).unwrap();
        let err = std::fs::File::create(dir.path().join("stderr")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_nereus"))
            .args(["serve", "--model-repository"])
            .arg(repo.path())
            .args([
                "--http-address",
                "127.0.0.1",
                "--http-port",
                "0",
                "--grpc-address",
                "127.0.0.1",
                "--grpc-port",
                "0",
                "--metrics-port",
                "0",
            ])
            .args(["--disable-component-cache", "--strict-readiness=false"])
            .args(extra)
            .env_remove("NEREUS_LOG")
            .env_remove("TRITON_SERVER_ESCAPE_LOG_MESSAGES")
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("starting nereus");
        Started { child, dir }
    }

    fn read(&self, name: &str) -> String {
        let bytes = std::fs::read(self.dir.path().join(name)).unwrap_or_default();
        String::from_utf8(bytes).expect("the log is UTF-8")
    }

    /// Waits for `file` (in the test's folder, or any path) to hold the ready line.
    fn wait_ready(&mut self, file: &Path) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = String::from_utf8_lossy(&std::fs::read(file).unwrap_or_default()).into_owned();
            if text.contains("Nereus is ready") {
                return text;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("nereus exited ({status}):\n{text}\n{}", self.read("stderr"));
            }
            assert!(Instant::now() < deadline, "no ready line:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(mut self) -> (String, String) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
        (self.read("stdout"), self.read("stderr"))
    }
}

/// The HTTP port in a log's `Started HTTPService at …` line.
fn http_port(log: &str) -> u16 {
    log.lines()
        .find_map(|l| l.split("Started HTTPService at 127.0.0.1:").nth(1))
        .and_then(|p| p.trim().trim_end_matches('"').parse().ok())
        .expect("the HTTP port in the log")
}

/// Whether `line` is part of a start-up table (a divider, a row, or the blank line after it), which
/// is laid out over several lines below its log line, as tritonserver's are.
fn is_table_line(line: &str) -> bool {
    line.is_empty() || line.starts_with('+') || line.starts_with('|')
}

/// Whether `line` is a tritonserver log line in the `default` format:
/// `I1125 06:48:54.627601 12454 server.rs:97] "message"`.
fn is_default_line(line: &str) -> bool {
    let b = line.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r.clone()).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    line.len() > 24
        && matches!(b[0], b'I' | b'W' | b'E')
        && digits(1..5)
        && b[5] == b' '
        && digits(6..8)
        && b[8] == b':'
        && digits(9..11)
        && b[11] == b':'
        && digits(12..14)
        && b[14] == b'.'
        && digits(15..21)
        && b[21] == b' '
        && quoted_message(line)
}

/// Whether `line` is a tritonserver log line in the `ISO8601` format:
/// `2026-11-25T06:48:54Z I 12454 server.rs:97] "message"`.
fn is_iso8601_line(line: &str) -> bool {
    let b = line.as_bytes();
    line.len() > 24
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[19] == b'Z'
        && matches!(b[21], b'I' | b'W' | b'E')
        && quoted_message(line)
}

/// The part after `<file>:<line>] ` is one JSON string: a message cannot start or hide a line.
/// The one exception is a start-up table's, which is empty there and laid out on the lines below.
fn quoted_message(line: &str) -> bool {
    line.split_once("] ").is_some_and(|(head, message)| {
        head.rsplit_once(':').is_some_and(|(_, n)| n.parse::<u32>().is_ok())
            && (serde_json::from_str::<String>(message).is_ok()
                || (message.is_empty() && head.contains("startup_summary.rs")))
    })
}

/// On the console, as tritonserver's: information to standard output, warnings and errors to
/// standard error, every line in its `default` format with no terminal escape; the last
/// information line says the server is ready and names a request to try.
#[test]
fn console_lines_are_tritons_information_on_stdout_errors_on_stderr() {
    let repo = Repo::new();
    repo.example("simple");
    repo.model("broken", "backend: \"nowhere\"\nmax_batch_size: 0\n", &["1"]);
    let mut s = Started::new(&repo, &[]);
    let out_path = s.dir.path().join("stdout");
    let out = s.wait_ready(&out_path);
    let port = http_port(&out);
    // Information off at run time: the shutdown's information lines are not written.
    let r = http(port, "POST", "/v2/logging", &[], br#"{"log_info": false}"#);
    assert_eq!((r.status, r.json()["log_info"].clone()), (200, json!(false)));
    let (out, err) = s.stop();
    assert!(!out.contains("Waiting for in-flight requests"), "{out}");
    assert!(!out.contains('\u{1b}') && !err.contains('\u{1b}'), "terminal escapes:\n{out:?}\n{err:?}");
    for line in out.lines().filter(|l| !is_table_line(l)) {
        assert!(is_default_line(line) && line.starts_with('I'), "not an information line: {line}");
    }
    assert!(!err.is_empty());
    for line in err.lines() {
        assert!(is_default_line(line) && (line.starts_with('E') || line.starts_with('W')), "{line}");
    }
    assert!(err.contains("unable to find backend library for backend 'nowhere'"), "{err}");
    let ready = out.lines().find(|l| l.contains("Nereus is ready")).unwrap();
    assert!(ready.contains("1 of 2 models READY"), "{ready}");
    assert!(ready.ends_with(&format!("try: curl -s 127.0.0.1:{port}/v2/models/simple\"")), "{ready}");
}

/// `--log-file` takes every line, `--log-format ISO8601` changes their format, and the logging
/// extension changes the format and the levels at run time; the file itself cannot be changed over
/// the network (tritonserver's UNSUPPORTED).
#[test]
fn log_file_format_and_levels_as_tritonserver() {
    let repo = Repo::new();
    repo.example("simple");
    repo.model("broken", "backend: \"nowhere\"\nmax_batch_size: 0\n", &["1"]);
    let file = TempDir::new("log-file");
    let path = file.path().join("server.log");
    let path_text = path.display().to_string();
    let mut s = Started::new(&repo, &["--log-file", &path_text, "--log-format", "ISO8601", "--log-verbose", "1"]);
    let log = s.wait_ready(&path);
    let port = http_port(&log);
    for line in log.lines().filter(|l| !is_table_line(l)) {
        assert!(is_iso8601_line(line), "not an ISO8601 line: {line}");
    }
    // tritonserver's start-up tables: the model table has a row per version, with its state and
    // reason, escaped within its cell.
    assert!(log.lines().any(|l| l.starts_with("| Model ") && l.contains("| Version | Status")), "{log}");
    assert!(log.lines().any(|l| l.starts_with("| simple ") && l.contains("| 1       | READY ")), "{log}");
    assert!(
        log.lines().any(|l| l.starts_with("| broken ") && l.contains("UNAVAILABLE: ") && l.contains("nowhere")),
        "{log}"
    );
    assert!(log.lines().any(|l| l.starts_with("| add_sub ") && l.contains("\"sandbox\"")), "backends table:\n{log}");
    assert!(log.lines().any(|l| l.as_bytes()[21] == b'E' && l.contains("nowhere")), "{log}");
    let settings = http(port, "GET", "/v2/logging", &[], b"").json();
    assert_eq!(
        settings,
        json!({"log_file": path_text, "log_info": true, "log_warning": true, "log_error": true,
               "log_verbose_level": 1, "log_format": "ISO8601"})
    );
    // Back to the default format, at once; the file cannot be changed, a null leaves it.
    let r = http(port, "POST", "/v2/logging", &[], br#"{"log_format": "default", "log_file": null}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = http(port, "POST", "/v2/logging", &[], br#"{"log_file": "/tmp/elsewhere.log"}"#);
    assert_eq!(r.status, 501, "{}", r.text());
    assert_eq!(r.error(), "log file location can not be updated through network protocol");
    let r = http(port, "POST", "/v2/logging", &[], br#"{"log_format": "xml"}"#);
    assert_eq!((r.status, r.error()), (503, "invalid argument for --log_format, got: xml".to_string()));
    let before = std::fs::read_to_string(&path).unwrap().lines().count();
    let (out, err) = s.stop();
    assert!(out.is_empty() && err.is_empty(), "lines outside the log file:\n{out}\n{err}");
    let log = std::fs::read_to_string(&path).unwrap();
    let after: Vec<&str> = log.lines().skip(before).collect();
    assert!(after.iter().any(|l| l.contains("Waiting for in-flight requests to complete.")), "{log}");
    for line in after.iter().filter(|l| !is_table_line(l)) {
        assert!(is_default_line(line), "not in the default format after the change: {line}");
    }
}

/// Runs `nereus serve` on `repo` with exactly `args` (no port defaults), expecting it to exit
/// with a failure at once; returns its standard error.
fn refused(repo: &Repo, args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nereus"))
        .args(["serve", "--model-repository"])
        .arg(repo.path())
        .args(args)
        .env_remove("NEREUS_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    err
}

/// An unusable `--log-file` stops the start with one line naming it.
#[test]
fn an_unusable_log_file_is_refused() {
    let repo = Repo::new();
    repo.example("simple");
    let err = refused(
        &repo,
        &["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--log-file", "/nonexistent/dir/server.log"],
    );
    assert!(err.contains("/nonexistent/dir/server.log"), "{err}");
}

/// `--http-max-input-size` of zero or below stops the start in tritonserver's words.
#[test]
fn a_max_input_size_below_one_is_refused() {
    let repo = Repo::new();
    repo.example("simple");
    for value in ["0", "-1024"] {
        let flag = format!("--http-max-input-size={value}");
        let err = refused(&repo, &["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", &flag]);
        assert!(err.contains("Error: --http-max-input-size must be greater than 0."), "{value}: {err}");
    }
}

/// `--grpc-infer-response-compression-level` takes tritonserver's four levels and refuses others
/// in its words.
#[test]
fn an_unknown_compression_level_is_refused() {
    let repo = Repo::new();
    repo.example("simple");
    let flag = "--grpc-infer-response-compression-level=max";
    let err = refused(&repo, &["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", flag]);
    assert!(err.contains("invalid argument for --grpc_infer_response_compression_level"), "{err}");
}

/// `--id` names the server in its metadata, as tritonserver's flag does.
#[test]
fn id_names_the_server() {
    let repo = Repo::new();
    repo.example("simple");
    let s = Server::start(repo.path(), &[]);
    assert_eq!(s.get("/v2").json()["name"], "nereus");
    let s = Server::start(repo.path(), &["--id", "triton"]);
    assert_eq!(s.get("/v2").json()["name"], "triton");
}

/// `--exit-on-error=true` stops the start at a model that fails to load, with tritonserver's
/// "failed to load all models"; by default (Nereus's `false`) the server runs and the model is
/// UNAVAILABLE with its reason while the others serve.
#[test]
fn exit_on_error_decides_whether_a_failed_model_stops_the_start() {
    let repo = Repo::new();
    repo.example("simple");
    repo.model("broken", "backend: \"nowhere\"\nmax_batch_size: 0\n", &["1"]);
    let err = refused_start(repo.path(), &["--exit-on-error=true"]);
    assert!(err.contains("failed to load all models (failed: broken)"), "{err}");
    let s = Server::start(repo.path(), &["--strict-readiness=false"]);
    assert_eq!(s.get("/v2/models/simple/ready").status, 200);
    assert_eq!(s.get("/v2/models/broken/ready").status, 400);
}

/// A model repository that cannot be read: with `--exit-on-error=false` the server answers but is
/// neither live nor ready, over both protocols, and loads nothing (tritonserver "failed to
/// initialize"); with `true` it does not start.
#[test]
fn an_unreadable_repository_fails_the_initialization() {
    let repo = Repo::new();
    repo.example("simple");
    let missing = repo.path().join("no-such-folder");
    let missing_text = missing.display().to_string();
    let err = refused_start(repo.path(), &["--model-repository", &missing_text, "--exit-on-error=true"]);
    assert!(err.contains(&format!("model repository {missing_text} cannot be read")), "{err}");
    let s = Server::start(repo.path(), &["--model-repository", &missing_text, "--exit-on-error=false"]);
    assert_eq!(s.get("/v2/health/live").status, 400);
    assert_eq!(s.get("/v2/health/ready").status, 400);
    assert_eq!(s.get("/v2").status, 200, "the metadata is still served");
    assert_eq!(s.get("/v2/models/simple/ready").status, 400, "no model is loaded");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut client = grpc_client(&s).await;
        let live = client.server_live(nereus::proto::inference::ServerLiveRequest {}).await.unwrap();
        assert!(!live.into_inner().live);
    });
    assert!(s.log().contains("the server failed to initialize"), "{}", s.log());
}

/// A port in use stops the start, and the log says which endpoint and socket, in tritonserver's
/// words.
#[test]
fn a_port_in_use_stops_the_start_with_tritonservers_message() {
    let repo = Repo::new();
    repo.example("simple");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let err = refused(
        &repo,
        &["--grpc-address", "127.0.0.1", "--grpc-port", &port, "--http-port", "0", "--metrics-port", "0"],
    );
    let want = format!("failed to start GRPC service: Unavailable - Socket '127.0.0.1:{port}' already in use");
    assert_eq!(err.matches(&want).count(), 1, "{err}");
}
