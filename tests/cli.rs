//! The `nereus` process as someone starting it by hand sees it: where its log goes, what the log
//! looks like in a file, and the line that says it is ready.
mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Starts `nereus serve` on `repo` with standard error to a file and no `NO_COLOR`, waits for the
/// ready line, stops it, and returns (standard output, the log file's bytes).
fn run_to_a_file(repo: &Repo, extra: &[&str]) -> (String, Vec<u8>) {
    let dir = TempDir::new("cli-log");
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nereus"))
        .args(["serve", "--model-repository"])
        .arg(repo.path())
        .args(["--http-address", "127.0.0.1", "--http-port", "0", "--grpc-address", "127.0.0.1", "--grpc-port", "0"])
        .args(["--disable-component-cache"])
        .args(extra)
        .env_remove("NO_COLOR")
        .env_remove("NEREUS_LOG")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("starting nereus");
    let deadline = Instant::now() + WAIT;
    loop {
        let text = std::fs::read(&log_path).unwrap();
        if String::from_utf8_lossy(&text).contains("Nereus is ready") {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("nereus exited ({status}):\n{}", String::from_utf8_lossy(&text));
        }
        assert!(Instant::now() < deadline, "no ready line:\n{}", String::from_utf8_lossy(&text));
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    (stdout, std::fs::read(&log_path).unwrap())
}

/// A log written to a file is plain text: no terminal escape in any line, errors and warnings
/// included (they are the coloured ones on a terminal); it goes to standard error, as
/// tritonserver's does, and ends with the ready line naming a request to try.
#[test]
fn a_log_in_a_file_is_plain_text_on_standard_error_with_a_ready_line() {
    let repo = Repo::new();
    repo.example("simple");
    repo.model("broken", "backend: \"nowhere\"\nmax_batch_size: 0\n", &["1"]);
    let (stdout, log) = run_to_a_file(&repo, &["--strict-readiness=false"]);
    let text = String::from_utf8(log).expect("the log is UTF-8");
    assert!(!text.contains('\u{1b}'), "escape bytes in the log:\n{text:?}");
    assert!(text.contains("ERROR") && text.contains("unable to find backend 'nowhere'"), "{text}");
    assert!(stdout.is_empty(), "the log went to standard output: {stdout}");
    let ready = text.lines().find(|l| l.contains("Nereus is ready")).unwrap();
    assert!(ready.contains("1 of 2 models READY"), "{ready}");
    let port = text
        .lines()
        .find_map(|l| l.split("Started HTTPService at 127.0.0.1:").nth(1))
        .and_then(|p| p.trim().parse::<u16>().ok())
        .expect("the HTTP port in the log");
    assert!(ready.ends_with(&format!("try: curl -s 127.0.0.1:{port}/v2/models/simple")), "{ready}");
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
