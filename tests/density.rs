//! Many models in one server (issue 29): idle models hold no thread, and every one of them serves.
mod common;

use common::{Repo, Server, simple_request};

/// `simple`'s configuration under another name (the bundled add_sub backend).
fn simple_copy(name: &str) -> String {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../model_repository/simple/config.pbtxt");
    std::fs::read_to_string(src).unwrap().replace("name: \"simple\"", &format!("name: \"{name}\""))
}

/// The threads of the server's process (Linux: /proc/<pid>/task).
#[cfg(target_os = "linux")]
fn threads(s: &Server) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", s.pid())).map(|d| d.count()).unwrap_or(0)
}

fn repo_of(models: usize) -> Repo {
    let repo = Repo::new();
    for i in 0..models {
        let name = format!("m{i}");
        repo.model(&name, &simple_copy(&name), &["1"]);
    }
    repo
}

/// 800 models (more than the 450 that fitted when every model held a sandbox of its own beside its
/// instance's) load READY, and the server has about as many threads as with one: a worker takes a
/// thread from the shared pool only while it has work. After requests to many of them, the threads
/// are bounded by the work that ran at once, not by the models.
#[cfg(target_os = "linux")]
#[test]
fn idle_models_hold_no_thread() {
    let one = repo_of(1);
    let s = Server::start(one.path(), &[]);
    let baseline = threads(&s);
    drop(s);

    const MODELS: usize = 800;
    let many = repo_of(MODELS);
    let s = Server::start(many.path(), &[]);
    assert!(s.log().contains(&format!("{MODELS} of {MODELS} models READY")), "{}", s.log());
    assert_eq!(s.get("/v2/health/ready").status, 200);
    let loaded = threads(&s);
    assert!(loaded <= baseline + 4, "{loaded} threads with {MODELS} models, {baseline} with one");

    // Four clients, each through 100 of the models, twice.
    std::thread::scope(|scope| {
        for client in 0..4 {
            let s = &s;
            scope.spawn(move || {
                for round in 0..2 {
                    for i in (client * 100)..(client * 100 + 100) {
                        let b = i + round;
                        let r = s.post_json(&format!("/v2/models/m{i}/infer"), &simple_request(b));
                        assert_eq!(r.status, 200, "m{i}: {}", r.text());
                        let sum: Vec<i64> = serde_json::from_value(r.json()["outputs"][0]["data"].clone()).unwrap();
                        assert_eq!(sum, (0..16).map(|x| x + i64::from(b)).collect::<Vec<_>>(), "m{i}");
                    }
                }
            });
        }
    });
    let after = threads(&s);
    // Four clients: the workers that ran at once (each polls for 200 µs after its batch before it
    // gives its thread back, so a few per client), nowhere near one per model.
    assert!(after < baseline + 100, "{after} threads after requests to 400 models, {baseline} with one idle");
}
