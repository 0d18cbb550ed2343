//! Model repositories in object storage (S3 and S3-compatible stores, Google Cloud Storage, Azure
//! Blob Storage, and `file://` folders), served from a local copy: each sync lists the bucket,
//! downloads what changed into the copy ([`mirror`]) and leaves the rest of the server to treat
//! the copy as a local repository, so scanning, version rules, fingerprints and polling are the
//! ones local repositories have. Syncs happen before start-up's loads, before each poll and before
//! each explicit load; the repository index shows the copy as of the last sync.
//!
//! Where the copy lives: `<--cache-directory>/repositories/<address>-<hash>`, or under
//! `TRITON_AWS_MOUNT_DIRECTORY` / `TRITON_GCS_MOUNT_DIRECTORY` / `TRITON_AZURE_MOUNT_DIRECTORY`
//! when set (the folders tritonserver downloads into). It is kept between runs: a restart lists
//! the bucket and downloads only what changed since.
pub mod credentials;
pub mod mirror;
pub mod store;
pub mod uri;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use sha2::Digest;

use self::credentials::{Env, ProcessEnv};
use self::mirror::{Mirror, RemoteError, SyncReport};
use self::uri::{Cloud, RemoteUri};

/// One remote repository and its local copy.
pub struct RemoteRepository {
    uri: RemoteUri,
    root: PathBuf,
}

impl RemoteRepository {
    /// The repository at `uri`, copied under `cache_base` (or the cloud's Triton mount directory).
    pub fn new(uri: RemoteUri, cache_base: &Path) -> RemoteRepository {
        let root = copy_folder(&uri, cache_base, &ProcessEnv);
        RemoteRepository { uri, root }
    }

    pub fn uri(&self) -> &RemoteUri {
        &self.uri
    }

    /// The local copy: a repository folder the scanner reads.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Brings the copy in line with the bucket. Builds the client afresh each time, so that
    /// rotated credentials (a re-mounted secret, a new session token) are picked up, on a runtime
    /// of its own on a thread of its own: the callers are plain threads, some of them on the
    /// server's runtime's blocking pool, where waiting on another runtime is not allowed.
    pub fn sync(&self) -> Result<SyncReport, RemoteError> {
        let setup = |cause: String| RemoteError::Setup { uri: self.uri.text.clone(), cause };
        std::thread::scope(|scope| {
            let worker = std::thread::Builder::new()
                .name("nereus-sync".into())
                .spawn_scoped(scope, || {
                    let store = store::build(&self.uri, &ProcessEnv).map_err(|e| setup(e.to_string()))?;
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| setup(format!("cannot start the download runtime: {e}")))?;
                    let mirror = Mirror { uri: self.uri.clone(), store, root: self.root.clone() };
                    runtime.block_on(mirror.sync())
                })
                .map_err(|e| setup(format!("cannot start a thread to sync: {e}")))?;
            worker.join().unwrap_or_else(|_| Err(setup("the sync thread panicked".into())))
        })
    }
}

/// A server's remote repositories, and what their last syncs could not do: the model control
/// syncs them before it scans, and asks here why a model it cannot find is missing.
#[derive(Default)]
pub struct RemoteSet {
    repositories: Vec<Arc<RemoteRepository>>,
    /// Models whose copy could not be made, with why, by name.
    failed_models: Mutex<BTreeMap<String, String>>,
    /// Repositories that could not be synced at all, with why, by address.
    failed_repositories: Mutex<BTreeMap<String, String>>,
    /// The repositories synced at least once: until then their models are unknown.
    synced: Mutex<std::collections::BTreeSet<String>>,
}

impl RemoteSet {
    pub fn new(repositories: Vec<Arc<RemoteRepository>>) -> RemoteSet {
        RemoteSet { repositories, ..RemoteSet::default() }
    }

    /// Syncs every remote repository. A repository that fails keeps its copy as it was (its
    /// models keep serving); a model that fails keeps its previous copy, if it had one. Each
    /// failure is logged once, and again only when its reason changes, so that a poll every few
    /// seconds does not repeat it.
    pub fn sync(&self) {
        for repository in &self.repositories {
            let uri = repository.uri().text.clone();
            let outcome = repository.sync();
            let mut failed_models = self.failed_models.lock();
            let mut failed_repositories = self.failed_repositories.lock();
            match outcome {
                Ok(report) => {
                    failed_repositories.remove(&uri);
                    self.synced.lock().insert(uri.clone());
                    if !report.updated.is_empty() || !report.removed.is_empty() {
                        tracing::info!(
                            "model repository {uri}: copied {:?}, removed {:?} (local copy {})",
                            report.updated,
                            report.removed,
                            repository.root().display()
                        );
                    }
                    for name in report.updated.iter().chain(&report.removed) {
                        failed_models.remove(name);
                    }
                    for (name, error) in report.failed {
                        let why = error.to_string();
                        if failed_models.get(&name) != Some(&why) {
                            tracing::error!("model '{name}': {why}");
                        }
                        failed_models.insert(name, why);
                    }
                }
                Err(error) => {
                    let why = error.to_string();
                    if failed_repositories.get(&uri) != Some(&why) {
                        tracing::error!("{why}; its models are left as they were");
                    }
                    failed_repositories.insert(uri, why);
                }
            }
        }
    }

    /// Whether every repository has been synced at least once (its models are known): the
    /// server is not ready before (`--strict-readiness`), as a pod whose bucket it cannot read
    /// must not take traffic for models it does not have.
    pub fn all_synced_once(&self) -> bool {
        let synced = self.synced.lock();
        self.repositories.iter().all(|r| synced.contains(&r.uri().text))
    }

    /// The models whose copy could not be made, with why.
    pub fn failed_models(&self) -> BTreeMap<String, String> {
        self.failed_models.lock().clone()
    }

    /// The repositories that could not be synced, as `address: why`.
    pub fn failed_repositories(&self) -> BTreeMap<String, String> {
        self.failed_repositories.lock().clone()
    }

    /// Why `name` may be missing from the copies: its own failure, or its repositories'.
    pub fn explain_missing(&self, name: &str) -> Option<String> {
        if let Some(why) = self.failed_models.lock().get(name) {
            return Some(why.clone());
        }
        let repositories = self.failed_repositories.lock();
        (!repositories.is_empty()).then(|| {
            let why: Vec<&str> = repositories.values().map(String::as_str).collect();
            format!("model not found in any model repository; {}", why.join("; "))
        })
    }
}

/// Where `uri`'s copy lives: a folder named after the address (readable in error messages and
/// logs) with a hash of it (distinct for nested prefixes and long addresses).
fn copy_folder(uri: &RemoteUri, cache_base: &Path, env: &dyn Env) -> PathBuf {
    let mount = match uri.cloud {
        Cloud::S3 => env.var("TRITON_AWS_MOUNT_DIRECTORY"),
        Cloud::Gcs => env.var("TRITON_GCS_MOUNT_DIRECTORY"),
        Cloud::Azure => env.var("TRITON_AZURE_MOUNT_DIRECTORY"),
        Cloud::File => None,
    };
    let base =
        mount.map(|m| PathBuf::from(m).join("nereus-repositories")).unwrap_or_else(|| cache_base.join("repositories"));
    let readable: String = uri
        .text
        .replace("://", "_")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "-._".contains(c) { c } else { '_' })
        .take(120)
        .collect();
    let hash = sha2::Sha256::digest(uri.text.as_bytes());
    let short: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
    base.join(format!("{readable}-{short}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Vars(Vec<(&'static str, &'static str)>);
    impl Env for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn copies_have_readable_distinct_folders() {
        let a = RemoteUri::parse("s3://127.0.0.1:9000/bucket/models").unwrap();
        let b = RemoteUri::parse("s3://127.0.0.1:9000/bucket/models/sub").unwrap();
        let none = Vars(vec![]);
        let fa = copy_folder(&a, Path::new("/cache"), &none);
        let fb = copy_folder(&b, Path::new("/cache"), &none);
        assert!(fa.starts_with("/cache/repositories"), "{}", fa.display());
        let name = fa.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("s3_127.0.0.1_9000_bucket_models-"), "{name}");
        assert_ne!(fa.parent(), Some(fb.as_path()));
        assert_ne!(fa, fb);
        let mounted = copy_folder(&a, Path::new("/cache"), &Vars(vec![("TRITON_AWS_MOUNT_DIRECTORY", "/mnt/s3")]));
        assert!(mounted.starts_with("/mnt/s3/nereus-repositories"), "{}", mounted.display());
    }
}
