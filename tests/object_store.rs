//! Model repositories in object storage, end to end: an S3-compatible server (moto in server
//! mode, started here) holds the models; `nereus --model-repository s3://127.0.0.1:PORT/bucket/…`
//! copies them into its cache and serves them. Models added to the bucket after start load on an
//! explicit load or the next poll; a corrupt object, a missing bucket and missing credentials are
//! each reported with what and why, while the other repositories keep serving.
//!
//! moto comes from the test environment scripts/setup.sh --test makes. scripts/test.sh names it
//! in NEREUS_MOTO_SERVER, and then a missing one fails the tests; run on their own, they look for
//! it in that environment's usual place and on PATH, and are skipped (saying so) without it.
use crate::common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use common::{Repo, Server, TempDir, http, simple_request};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A moto S3 server on a free port, killed on drop.
struct Moto {
    child: Child,
    port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The moto_server executable: NEREUS_MOTO_SERVER (required to work when set), else the test
/// environment's (NEREUS_TEST_VENV, or the target folder's pyvenv), else PATH's.
fn moto_server() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("NEREUS_MOTO_SERVER") {
        return Some(path.into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let venv = std::env::var_os("NEREUS_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| target.join("pyvenv"));
    let candidates = [venv.join("bin/moto_server")];
    if let Some(found) = candidates.into_iter().find(|p| p.is_file()) {
        return Some(found);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("moto_server"))
        .find(|p| p.is_file())
}

/// Starts moto, or says why the test is skipped (`None`).
fn start_moto() -> Option<Moto> {
    start_moto_with(&[])
}

/// The same, with environment variables for moto.
fn start_moto_with(env: &[(&str, &str)]) -> Option<Moto> {
    let Some(exe) = moto_server() else {
        eprintln!("skipped: moto_server not found (scripts/setup.sh --test installs it; scripts/test.sh requires it)");
        return None;
    };
    let mut child = Command::new(&exe)
        .args(["-H", "127.0.0.1", "-p", "0"])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", exe.display()));
    // werkzeug says `Running on http://127.0.0.1:PORT` on standard error.
    let (tx, rx) = std::sync::mpsc::channel();
    for stream in [
        Box::new(child.stderr.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stdout.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if let Some(port) =
                    line.split("Running on http://127.0.0.1:").nth(1).and_then(|p| p.trim().parse::<u16>().ok())
                {
                    let _ = tx.send(port);
                }
            }
        });
    }
    let port = rx.recv_timeout(common::WAIT).unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("moto_server did not start")
    });
    Some(Moto { child, port })
}

impl Moto {
    /// Creates a bucket (moto takes the unsigned request).
    fn create_bucket(&self, bucket: &str) {
        let r = http(self.port, "PUT", &format!("/{bucket}"), &[], b"");
        assert_eq!(r.status, 200, "create bucket: {}", r.text());
    }
    /// A signed client of `bucket`, as a user uploading models has (moto refuses unsigned writes
    /// to a bucket once signed requests have used it).
    fn client(&self, bucket: &str) -> AmazonS3 {
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        AmazonS3Builder::new()
            .with_endpoint(format!("http://127.0.0.1:{}", self.port))
            .with_allow_http(true)
            .with_bucket_name(bucket)
            .with_region("us-east-1")
            .with_access_key_id("testing")
            .with_secret_access_key("testing")
            .build()
            .unwrap()
    }
    fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        let client = self.client(bucket);
        let body = PutPayload::from(body.to_vec());
        runtime().block_on(client.put(&ObjectPath::from(key), body)).unwrap_or_else(|e| panic!("put {key}: {e}"));
    }
    fn delete(&self, bucket: &str, key: &str) {
        let client = self.client(bucket);
        runtime().block_on(client.delete(&ObjectPath::from(key))).unwrap_or_else(|e| panic!("delete {key}: {e}"));
    }
    /// Puts an add_sub model named `name` under `prefix`, its version folder an empty object
    /// named after it (what a console's "create folder" lists as).
    fn put_model(&self, bucket: &str, prefix: &str, name: &str) {
        let config = SIMPLE_CONFIG.replace("NAME", name);
        self.put(bucket, &format!("{prefix}/{name}/config.pbtxt"), config.as_bytes());
        self.put(bucket, &format!("{prefix}/{name}/1/"), b"");
    }
    /// A new bucket holding the add_sub models `models` under `prefix`.
    fn bucket(&self, bucket: &str, prefix: &str, models: &[&str]) {
        self.create_bucket(bucket);
        for model in models {
            self.put_model(bucket, prefix, model);
        }
    }
    fn uri(&self, bucket: &str, prefix: &str) -> String {
        format!("s3://127.0.0.1:{}/{bucket}/{prefix}", self.port)
    }
}

const SIMPLE_CONFIG: &str = r#"name: "NAME"
backend: "add_sub"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
"#;

/// Credentials moto accepts (it checks none), and a shared credentials file that is not there,
/// so that the machine's own never count.
fn aws_env(cache: &TempDir) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_DEFAULT_REGION", "us-east-1".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", cache.path().join("no-credentials").display().to_string()),
        ("AWS_CONFIG_FILE", cache.path().join("no-config").display().to_string()),
        ("TRITON_CLOUD_CREDENTIAL_PATH", String::new()),
    ]
}

fn start(local: &Repo, cache: &TempDir, args: &[&str], env: &[(&'static str, String)]) -> Server {
    // The copies go where TRITON_AWS_MOUNT_DIRECTORY says (the harness's --cache-directory is
    // shared by every test).
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("TRITON_AWS_MOUNT_DIRECTORY", cache.path().to_str().unwrap()));
    Server::start_with_env(local.path(), args, &env)
}

fn infer_sum(server: &Server, model: &str) -> Vec<i64> {
    let r = server.post_json(&format!("/v2/models/{model}/infer"), &simple_request(1));
    assert_eq!(r.status, 200, "{model}: {}", r.text());
    r.json()["outputs"][0]["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
}

#[test]
fn serves_a_bucket_and_loads_a_model_added_after_start() {
    let Some(moto) = start_moto() else { return };
    moto.bucket("models", "triton/repo", &["first"]);
    let (local, cache) = (Repo::new(), TempDir::new("s3-cache"));
    let uri = moto.uri("models", "triton//repo/");
    let server = start(
        &local,
        &cache,
        &["--model-repository", &uri, "--model-control-mode", "explicit", "--load-model", "first"],
        &aws_env(&cache),
    );
    assert_eq!(infer_sum(&server, "first"), (1..17).collect::<Vec<i64>>());
    assert_eq!(server.get("/v2/health/ready").status, 200);
    // Not in the bucket yet: the load says so.
    let r = server.post_json("/v2/repository/models/second/load", &serde_json::json!({}));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.error().contains("model not found in any model repository"), "{}", r.error());
    // Added to the bucket after start: the explicit load copies and loads it.
    moto.put_model("models", "triton/repo", "second");
    let r = server.post_json("/v2/repository/models/second/load", &serde_json::json!({}));
    assert_eq!(r.status, 200, "{}\n{}", r.text(), server.log());
    assert_eq!(infer_sum(&server, "second"), (1..17).collect::<Vec<i64>>());
    let copy = std::fs::read_dir(cache.path().join("nereus-repositories")).unwrap().flatten().next().unwrap().path();
    assert!(copy.join("second/config.pbtxt").is_file() && copy.join("second/1").is_dir(), "{}", copy.display());
    // A changed object reloads the model from the new copy.
    moto.put(
        "models",
        "triton/repo/second/config.pbtxt",
        SIMPLE_CONFIG.replace("NAME", "second").replace("max_batch_size: 8", "max_batch_size: 4").as_bytes(),
    );
    let r = server.post_json("/v2/repository/models/second/load", &serde_json::json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(server.get("/v2/models/second/config").json()["max_batch_size"], 4);
    // The syncs copied nothing of the unchanged model again, and it was loaded once.
    assert_eq!(server.log().matches("successfully loaded 'first'").count(), 1, "{}", server.log());
    assert_eq!(infer_sum(&server, "first"), (1..17).collect::<Vec<i64>>());
    assert!(
        server.log().contains(&format!("model repository {}", moto.uri("models", "triton/repo"))),
        "{}",
        server.log()
    );
}

#[test]
fn polling_follows_the_bucket() {
    let Some(moto) = start_moto() else { return };
    moto.bucket("polled", "repo", &["kept"]);
    let (local, cache) = (Repo::new(), TempDir::new("s3-poll-cache"));
    let uri = moto.uri("polled", "repo");
    let server = start(
        &local,
        &cache,
        &["--model-repository", &uri, "--model-control-mode", "poll", "--repository-poll-secs", "1"],
        &aws_env(&cache),
    );
    assert_eq!(server.model_state("kept").0, "READY");
    moto.put_model("polled", "repo", "added");
    server.wait_until("the added model to load", || server.get("/v2/models/added/ready").status == 200);
    assert_eq!(infer_sum(&server, "added"), (1..17).collect::<Vec<i64>>());
    moto.delete("polled", "repo/added/config.pbtxt");
    moto.delete("polled", "repo/added/1");
    server.wait_until("the removed model to unload", || server.get("/v2/models/added/ready").status != 200);
    assert_eq!(server.get("/v2/models/kept/ready").status, 200);
    // The store goes away: the polls fail, say so, and what was loaded keeps serving.
    drop(moto);
    server.wait_until("a failed poll", || server.log().contains(&format!("cannot list model repository {uri}")));
    assert_eq!(infer_sum(&server, "kept"), (1..17).collect::<Vec<i64>>());
    assert_eq!(server.get("/v2/health/ready").status, 200);
}

#[test]
fn a_corrupt_object_and_a_missing_bucket_leave_the_other_models_serving() {
    let Some(moto) = start_moto() else { return };
    moto.bucket("mixed", "repo", &["good"]);
    moto.put("mixed", "repo/broken/config.pbtxt", b"name: \"broken\" backend: \"add_sub\" input [ {");
    moto.put("mixed", "repo/broken/1/", b"");
    let (local, cache) = (Repo::new(), TempDir::new("s3-mixed-cache"));
    local.example("simple");
    let (good, missing) = (moto.uri("mixed", "repo"), moto.uri("no-such-bucket", "repo"));
    let server =
        start(&local, &cache, &["--model-repository", &good, "--model-repository", &missing], &aws_env(&cache));
    assert_eq!(infer_sum(&server, "simple"), (1..17).collect::<Vec<i64>>());
    assert_eq!(infer_sum(&server, "good"), (1..17).collect::<Vec<i64>>());
    let (state, reason) = server.model_state("broken");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("config.pbtxt"), "{reason}");
    let log = server.log();
    assert!(log.contains(&format!("cannot list model repository {missing}: no such bucket 'no-such-bucket'")), "{log}");
    assert_eq!(server.get("/v2/health/live").status, 200);
    // Live, serving, and not ready: a model is UNAVAILABLE and a repository was never read.
    assert_ne!(server.get("/v2/health/ready").status, 200);
}

#[test]
fn missing_credentials_are_named_and_the_local_models_serve() {
    let Some(moto) = start_moto() else { return };
    moto.bucket("private", "repo", &["secret"]);
    let (local, cache) = (Repo::new(), TempDir::new("s3-nocreds-cache"));
    local.example("simple");
    let mut env = aws_env(&cache);
    env.retain(|(k, _)| !k.starts_with("AWS_ACCESS") && !k.starts_with("AWS_SECRET"));
    env.extend([
        ("AWS_ACCESS_KEY_ID", String::new()),
        ("AWS_SECRET_ACCESS_KEY", String::new()),
        ("AWS_PROFILE", String::new()),
    ]);
    let uri = moto.uri("private", "repo");
    let server = start(
        &local,
        &cache,
        &["--model-repository", &uri, "--model-control-mode", "explicit", "--load-model", "*"],
        &env,
    );
    assert_eq!(infer_sum(&server, "simple"), (1..17).collect::<Vec<i64>>());
    let log = server.log();
    assert!(log.contains(&format!("model repository {uri}: no AWS credentials")), "{log}");
    // A load names the cause too, and the server goes on.
    let r = server.post_json("/v2/repository/models/secret/load", &serde_json::json!({}));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.error().contains("no AWS credentials"), "{}", r.error());
    assert_eq!(server.get("/v2/health/live").status, 200);
    // Not ready while the repository has never been read, with strict readiness; ready without.
    assert_ne!(server.get("/v2/health/ready").status, 200);
    drop(server);
    let server = start(&local, &cache, &["--model-repository", &uri, "--strict-readiness=false"], &env);
    assert_eq!(server.get("/v2/health/ready").status, 200);
}

#[test]
fn credentials_from_tritons_credential_file() {
    let Some(moto) = start_moto() else { return };
    moto.bucket("filed", "repo", &["from_file"]);
    let (local, cache) = (Repo::new(), TempDir::new("s3-credfile-cache"));
    let uri = moto.uri("filed", "repo");
    // The longest matching name wins; the environment has no keys.
    let file = cache.path().join("credentials.json");
    let json = serde_json::json!({"s3": {
        format!("s3://127.0.0.1:{}", moto.port): {"key_id": "wrong", "secret_key": "wrong"},
        uri.clone(): {"key_id": "testing", "secret_key": "testing", "region": "us-east-1"},
    }});
    std::fs::write(&file, json.to_string()).unwrap();
    let mut env = aws_env(&cache);
    env.retain(|(k, _)| {
        !k.starts_with("AWS_ACCESS") && !k.starts_with("AWS_SECRET") && *k != "TRITON_CLOUD_CREDENTIAL_PATH"
    });
    env.push(("TRITON_CLOUD_CREDENTIAL_PATH", file.display().to_string()));
    let server = start(&local, &cache, &["--model-repository", &uri], &env);
    assert_eq!(infer_sum(&server, "from_file"), (1..17).collect::<Vec<i64>>());
    // An address no entry matches is refused, naming the file, as Triton's "Cannot match".
    drop(server);
    let other = format!("s3://localhost:{}/unlisted/repo", moto.port);
    let server = start(&local, &cache, &["--model-repository", &other, "--strict-readiness=false"], &env);
    let log = server.log();
    assert!(
        log.contains(&format!("no credential in TRITON_CLOUD_CREDENTIAL_PATH file {} matches {other}", file.display())),
        "{log}"
    );
}

#[test]
fn refused_credentials_are_named() {
    // moto checks signatures after its first request (the bucket's creation): the test's keys
    // belong to no user it knows.
    let Some(moto) = start_moto_with(&[("INITIAL_NO_AUTH_ACTION_COUNT", "1")]) else { return };
    moto.create_bucket("guarded");
    let (local, cache) = (Repo::new(), TempDir::new("s3-denied-cache"));
    local.example("simple");
    let uri = moto.uri("guarded", "repo");
    let server = start(&local, &cache, &["--model-repository", &uri], &aws_env(&cache));
    assert_eq!(infer_sum(&server, "simple"), (1..17).collect::<Vec<i64>>());
    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains(&format!("cannot list model repository {uri}")))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains(&format!("{uri}: the credentials were refused: ")), "{line}");
    assert!(line.contains("InvalidAccessKeyId"), "{line}");
}
