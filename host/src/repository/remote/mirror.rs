//! A remote repository's local copy: lists the objects under the repository's prefix and brings
//! the copy in line with them, model folder by model folder, downloading only the objects whose
//! size, ETag or modification time differ from what the copy was made from. Each changed model is
//! assembled in a hidden staging folder (unchanged files linked from the current copy), every
//! download checked against the listing's size and, where the ETag is a plain MD5 (S3's
//! single-part uploads), against the content's MD5, and only a complete folder replaces the old
//! one: a model is never loaded from half a download. A model that fails keeps its previous copy
//! (if any) and is reported with the object and the cause.
//!
//! The copy's layout is the bucket's: `<root>/<model>/...`, so that the existing scanner, version
//! rules and fingerprints work on it unchanged. Hidden entries (`.manifest.json`, `.staging-*`,
//! `.old-*`) are skipped by the scanner.
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use md5::Digest;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use super::uri::{Cloud, RemoteUri};

/// How many objects of one model download at once.
const PARALLEL_DOWNLOADS: usize = 8;
/// The copy's record of what each model folder was made from.
const MANIFEST: &str = ".manifest.json";

/// Why a sync, or one model of it, failed. Each names the object (or repository) and the cause.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum RemoteError {
    #[error("model repository {uri}: {cause}")]
    Setup { uri: String, cause: String },
    #[error("cannot list model repository {uri}: {cause}")]
    List { uri: String, cause: String },
    #[error("cannot download {object}: {cause}")]
    Download { object: String, cause: String },
    #[error("{object} is corrupt: {why}")]
    Corrupt { object: String, why: String },
    #[error("cannot write the local copy {path}: {cause}")]
    Cache { path: String, cause: String },
}

/// One object as listed: what decides whether the local copy of it is current.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectState {
    pub size: u64,
    pub etag: Option<String>,
    /// Nanoseconds since the epoch; compared where there is no ETag.
    pub modified: i64,
}

/// A model folder's objects by path relative to the folder, and its empty folders (directory
/// markers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelObjects {
    pub files: BTreeMap<String, ObjectState>,
    pub dirs: BTreeSet<String>,
}

/// What one sync did.
#[derive(Debug, Default)]
pub struct SyncReport {
    /// Models whose copy was (re)made.
    pub updated: Vec<String>,
    /// Models no longer in the bucket, whose copy was removed.
    pub removed: Vec<String>,
    /// Models whose copy could not be made, with why.
    pub failed: BTreeMap<String, RemoteError>,
}

/// Keeps `root` a copy of the objects of `uri` in `store`.
pub struct Mirror {
    pub uri: RemoteUri,
    pub store: Arc<dyn ObjectStore>,
    pub root: PathBuf,
}

impl Mirror {
    /// The store's location of the repository's prefix (`None`: the whole bucket, or a
    /// `file://` store rooted at the folder).
    fn prefix(&self) -> Option<ObjectPath> {
        (self.uri.cloud != Cloud::File && !self.uri.prefix.is_empty())
            .then(|| ObjectPath::from(self.uri.prefix.as_str()))
    }

    /// Lists the repository, then updates the copy of each model that changed and removes those
    /// gone from the bucket. An error listing fails the whole sync and leaves the copy as it was.
    pub async fn sync(&self) -> Result<SyncReport, RemoteError> {
        // The copy's folder first: the scan after a failed sync then finds an empty repository
        // rather than a missing one.
        std::fs::create_dir_all(&self.root).map_err(|e| cache_error(&self.root, e))?;
        let listed = self.list().await?;
        self.clear_leftovers();
        let mut manifest = self.read_manifest();
        let mut report = SyncReport::default();
        for (model, objects) in &listed {
            if manifest.get(model) == Some(objects) && self.copy_is_complete(model, objects) {
                continue;
            }
            match self.update_model(model, objects, manifest.get(model)).await {
                Ok(()) => {
                    manifest.insert(model.clone(), objects.clone());
                    report.updated.push(model.clone());
                }
                Err(e) => {
                    report.failed.insert(model.clone(), e);
                }
            }
        }
        for model in self.local_models() {
            if !listed.contains_key(&model) {
                let dir = self.root.join(&model);
                std::fs::remove_dir_all(&dir).map_err(|e| cache_error(&dir, e))?;
                manifest.remove(&model);
                report.removed.push(model);
            }
        }
        manifest.retain(|m, _| listed.contains_key(m));
        self.write_manifest(&manifest)?;
        Ok(report)
    }

    /// Every object under the prefix, grouped by model folder. Objects directly under the prefix
    /// (not in a model folder) and hidden model names are left out, as the scanner leaves them.
    async fn list(&self) -> Result<BTreeMap<String, ModelObjects>, RemoteError> {
        let prefix = self.prefix();
        let metas: Vec<ObjectMeta> = self
            .store
            .list(prefix.as_ref())
            .try_collect()
            .await
            .map_err(|e| RemoteError::List { uri: self.uri.text.clone(), cause: cause(&e, &self.uri) })?;
        let skip = prefix.as_ref().map(|p| p.as_ref().len() + 1).unwrap_or(0);
        let relative: Vec<(String, &ObjectMeta)> =
            metas.iter().filter_map(|m| m.location.as_ref().get(skip..).map(|r| (r.to_string(), m))).collect();
        // A zero-size object that is also a folder of other objects is a directory marker.
        let parents: BTreeSet<&str> =
            relative.iter().flat_map(|(r, _)| r.match_indices('/').map(move |(i, _)| &r[..i])).collect();
        let mut out: BTreeMap<String, ModelObjects> = BTreeMap::new();
        for (rel, meta) in &relative {
            let Some((model, inside)) = rel.split_once('/') else { continue };
            if model.starts_with('.') {
                continue;
            }
            let entry = out.entry(model.to_string()).or_default();
            let is_marker = meta.size == 0 && (parents.contains(rel.as_str()) || is_version_marker(inside));
            if is_marker {
                entry.dirs.insert(inside.to_string());
            } else {
                let state = ObjectState {
                    size: meta.size,
                    etag: meta.e_tag.clone(),
                    modified: meta.last_modified.timestamp_nanos_opt().unwrap_or_default(),
                };
                entry.files.insert(inside.to_string(), state);
            }
        }
        Ok(out)
    }

    /// Builds `model`'s folder afresh in a staging folder and swaps it in.
    async fn update_model(
        &self,
        model: &str,
        objects: &ModelObjects,
        before: Option<&ModelObjects>,
    ) -> Result<(), RemoteError> {
        let current = self.root.join(model);
        let staging = self.root.join(format!(".staging-{model}"));
        let result = self
            .stage(model, objects, before, &current, &staging)
            .await
            .and_then(|()| swap(&current, &staging, &self.root.join(format!(".old-{model}"))));
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&staging);
        }
        result
    }

    async fn stage(
        &self,
        model: &str,
        objects: &ModelObjects,
        before: Option<&ModelObjects>,
        current: &Path,
        staging: &Path,
    ) -> Result<(), RemoteError> {
        let _ = std::fs::remove_dir_all(staging);
        std::fs::create_dir_all(staging).map_err(|e| cache_error(staging, e))?;
        for dir in &objects.dirs {
            let path = staging.join(dir);
            std::fs::create_dir_all(&path).map_err(|e| cache_error(&path, e))?;
        }
        let mut downloads = Vec::new();
        for (rel, state) in &objects.files {
            let target = staging.join(rel);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| cache_error(parent, e))?;
            }
            let old = current.join(rel);
            let unchanged = before.and_then(|b| b.files.get(rel)) == Some(state)
                && std::fs::metadata(&old).is_ok_and(|m| m.is_file() && m.len() == state.size);
            if unchanged && (std::fs::hard_link(&old, &target).is_ok() || std::fs::copy(&old, &target).is_ok()) {
                continue;
            }
            downloads.push((format!("{model}/{rel}"), target));
        }
        futures::stream::iter(downloads)
            .map(|(rel, target)| async move { self.download(&rel, &target).await })
            .buffer_unordered(PARALLEL_DOWNLOADS)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Downloads the object at `rel` (relative to the prefix) to `target`, checking its size
    /// against the store's and its content against an MD5 ETag.
    async fn download(&self, rel: &str, target: &Path) -> Result<(), RemoteError> {
        let object = self.uri.object(rel);
        let location = match self.prefix() {
            Some(p) => ObjectPath::from(format!("{}/{rel}", p.as_ref())),
            None => ObjectPath::from(rel),
        };
        let failed =
            |e: object_store::Error| RemoteError::Download { object: object.clone(), cause: cause(&e, &self.uri) };
        let got = self.store.get(&location).await.map_err(failed)?;
        let etag = got.meta.e_tag.clone();
        let expected = got.meta.size;
        let mut stream = got.into_stream();
        let mut file = std::fs::File::create(target).map_err(|e| cache_error(target, e))?;
        let mut md5 = md5::Md5::new();
        let mut written: u64 = 0;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(failed)?;
            md5.update(&chunk);
            written += chunk.len() as u64;
            file.write_all(&chunk).map_err(|e| cache_error(target, e))?;
        }
        file.sync_all().map_err(|e| cache_error(target, e))?;
        let digest: String = md5.finalize().iter().map(|b| format!("{b:02x}")).collect();
        verify(&object, self.uri.cloud, written, expected, etag.as_deref(), &digest)
    }

    /// Whether every file the manifest lists is in the copy with its size (a copy someone
    /// removed files from is made again).
    fn copy_is_complete(&self, model: &str, objects: &ModelObjects) -> bool {
        let dir = self.root.join(model);
        objects.files.iter().all(|(rel, s)| std::fs::metadata(dir.join(rel)).is_ok_and(|m| m.len() == s.size))
            && objects.dirs.iter().all(|d| dir.join(d).is_dir())
    }

    /// The model folders of the copy.
    fn local_models(&self) -> Vec<String> {
        std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| !n.starts_with('.'))
            .collect()
    }

    /// Removes staging and old folders an interrupted sync left.
    fn clear_leftovers(&self) {
        for entry in std::fs::read_dir(&self.root).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with(".staging-") || name.starts_with(".old-") {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    fn read_manifest(&self) -> BTreeMap<String, ModelObjects> {
        std::fs::read(self.root.join(MANIFEST)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    fn write_manifest(&self, manifest: &BTreeMap<String, ModelObjects>) -> Result<(), RemoteError> {
        let path = self.root.join(MANIFEST);
        let partial = self.root.join(".manifest.json.partial");
        let bytes = serde_json::to_vec(manifest).map_err(|e| cache_error(&path, e))?;
        std::fs::write(&partial, bytes).map_err(|e| cache_error(&partial, e))?;
        std::fs::rename(&partial, &path).map_err(|e| cache_error(&path, e))
    }
}

/// A failure to write the local copy at `path`.
fn cache_error(path: &Path, cause: impl std::fmt::Display) -> RemoteError {
    RemoteError::Cache { path: path.display().to_string(), cause: cause.to_string() }
}

/// Whether a download is whole: `written` bytes against the store's `expected` size, and for S3
/// the content's MD5 (`digest`, lowercase hex) against an ETag that is one.
fn verify(
    object: &str,
    cloud: Cloud,
    written: u64,
    expected: u64,
    etag: Option<&str>,
    digest: &str,
) -> Result<(), RemoteError> {
    let corrupt = |why: String| Err(RemoteError::Corrupt { object: object.to_string(), why });
    if written != expected {
        return corrupt(format!("{written} bytes arrived, the store says {expected} bytes"));
    }
    if cloud == Cloud::S3
        && let Some(want) = etag.and_then(plain_md5)
        && digest != want
    {
        return corrupt(format!("its content's MD5 is {digest}, its ETag says {want}"));
    }
    Ok(())
}

/// Replaces `current` with `staging`, through `old`.
fn swap(current: &Path, staging: &Path, old: &Path) -> Result<(), RemoteError> {
    let _ = std::fs::remove_dir_all(old);
    if current.exists() {
        std::fs::rename(current, old).map_err(|e| cache_error(current, e))?;
    }
    std::fs::rename(staging, current).map_err(|e| cache_error(current, e))?;
    let _ = std::fs::remove_dir_all(old);
    Ok(())
}

/// An empty version folder as a console's "create folder" leaves it: `<digits>` directly in the
/// model folder (its trailing `/` is lost in the listing).
fn is_version_marker(inside: &str) -> bool {
    !inside.is_empty() && inside.bytes().all(|b| b.is_ascii_digit())
}

/// The MD5 an S3 ETag states, when it is one (`"<32 hex>"`; multipart ETags have a `-N`).
fn plain_md5(etag: &str) -> Option<String> {
    let tag = etag.trim_matches('"');
    (tag.len() == 32 && tag.bytes().all(|b| b.is_ascii_hexdigit())).then(|| tag.to_ascii_lowercase())
}

/// The cause of a store error in words an operator acts on, with the store's own message.
pub fn cause(e: &object_store::Error, uri: &RemoteUri) -> String {
    use object_store::Error as E;
    let text = e.to_string();
    let no_bucket = text.contains("NoSuchBucket") || text.contains("ContainerNotFound");
    // Keys the store does not know, or a wrong secret: said before the 403 that carries them.
    let refused = text.contains("InvalidAccessKeyId") || text.contains("SignatureDoesNotMatch");
    match e {
        _ if no_bucket => format!("no such bucket '{}': {text}", uri.bucket),
        _ if refused => format!("the credentials were refused: {text}"),
        E::NotFound { .. } => format!("not found: {text}"),
        E::PermissionDenied { .. } => format!("access denied: {text}"),
        E::Unauthenticated { .. } => format!("not authenticated (check the credentials): {text}"),
        _ if text.contains("AccessDenied") || text.contains("403 Forbidden") => format!("access denied: {text}"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::local::LocalFileSystem;
    use std::os::unix::ffi::OsStrExt;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nereus-mirror-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mirror(bucket: &Path, root: &Path) -> Mirror {
        let uri = RemoteUri::parse(&format!("file://{}", bucket.display())).unwrap();
        Mirror { store: Arc::new(LocalFileSystem::new_with_prefix(bucket).unwrap()), uri, root: root.to_path_buf() }
    }

    fn put(bucket: &Path, rel: &str, bytes: &str) {
        let path = bucket.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn sync(m: &Mirror) -> SyncReport {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(m.sync()).unwrap()
    }

    #[test]
    fn copies_changes_only_and_removes_what_is_gone() {
        let (bucket, root) = (temp("bucket"), temp("root"));
        put(&bucket, "a/config.pbtxt", "name: \"a\"");
        put(&bucket, "a/1/model.wasm", "wasm");
        put(&bucket, "b/config.pbtxt", "name: \"b\"");
        put(&bucket, "README", "top-level files are not models");
        let m = mirror(&bucket, &root);
        let first = sync(&m);
        assert_eq!(first.updated, ["a", "b"]);
        assert_eq!(std::fs::read_to_string(root.join("a/1/model.wasm")).unwrap(), "wasm");
        assert!(!root.join("README").exists());
        // Nothing changed: nothing is copied again.
        let again = sync(&m);
        assert!(again.updated.is_empty() && again.removed.is_empty(), "{again:?}");
        // One object changes: that model alone is made again, with the unchanged file kept.
        put(&bucket, "a/1/model.wasm", "wasm, version two");
        let third = sync(&m);
        assert_eq!(third.updated, ["a"]);
        assert_eq!(std::fs::read_to_string(root.join("a/1/model.wasm")).unwrap(), "wasm, version two");
        assert_eq!(std::fs::read_to_string(root.join("a/config.pbtxt")).unwrap(), "name: \"a\"");
        // A model gone from the bucket goes from the copy.
        std::fs::remove_dir_all(bucket.join("b")).unwrap();
        assert_eq!(sync(&m).removed, ["b"]);
        assert!(!root.join("b").exists());
        // A copy someone damaged is made again.
        std::fs::remove_file(root.join("a/config.pbtxt")).unwrap();
        assert_eq!(sync(&m).updated, ["a"]);
        assert!(root.join("a/config.pbtxt").is_file());
        std::fs::remove_dir_all(bucket).unwrap();
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_listing_failure_leaves_the_copy_and_names_the_repository() {
        let (bucket, root) = (temp("unreadable"), temp("unreadable-root"));
        put(&bucket, "a/config.pbtxt", "x");
        let m = mirror(&bucket, &root);
        sync(&m);
        // A folder inside the bucket that cannot be read fails the listing (root reads anything,
        // so a name that is not valid UTF-8 stands in for it: the store cannot list it).
        let bad = bucket.join(std::ffi::OsStr::from_bytes(b"a/\xff"));
        std::fs::create_dir_all(&bad).unwrap();
        std::fs::write(bad.join("f"), "x").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let e = rt.block_on(m.sync()).unwrap_err().to_string();
        assert!(e.starts_with(&format!("cannot list model repository {}: ", m.uri.text)), "{e}");
        assert_eq!(std::fs::read_to_string(root.join("a/config.pbtxt")).unwrap(), "x");
        std::fs::remove_dir_all(bucket).unwrap();
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn downloads_are_checked_against_the_size_and_an_md5_etag() {
        let object = "s3://b/m/1/model.onnx";
        let md5_of_a = "0cc175b9c0f1b6a831c399e269772661";
        assert_eq!(verify(object, Cloud::S3, 1, 1, Some(&format!("\"{md5_of_a}\"")), md5_of_a), Ok(()));
        let short = verify(object, Cloud::S3, 1, 2, None, md5_of_a).unwrap_err().to_string();
        assert_eq!(short, "s3://b/m/1/model.onnx is corrupt: 1 bytes arrived, the store says 2 bytes");
        let other = "92eb5ffee6ae2fec3ad71c777531578f";
        let wrong = verify(object, Cloud::S3, 1, 1, Some(&format!("\"{md5_of_a}\"")), other).unwrap_err().to_string();
        assert!(wrong.contains(object) && wrong.contains("MD5") && wrong.contains(other), "{wrong}");
        // Multipart ETags, and other clouds' ETags, are not MD5s: only the size is checked.
        assert_eq!(verify(object, Cloud::S3, 1, 1, Some("\"abc-2\""), other), Ok(()));
        assert_eq!(verify(object, Cloud::Gcs, 1, 1, Some(md5_of_a), other), Ok(()));
    }

    #[test]
    fn store_errors_say_the_cause_first() {
        let uri = RemoteUri::parse("s3://bucket/models").unwrap();
        let generic = |body: &str| object_store::Error::Generic { store: "S3", source: body.to_string().into() };
        let said = |e: object_store::Error| cause(&e, &uri);
        assert!(said(generic("404 Not Found: <Code>NoSuchBucket</Code>")).starts_with("no such bucket 'bucket': "));
        assert!(
            said(generic("403 Forbidden: <Code>InvalidAccessKeyId</Code>"))
                .starts_with("the credentials were refused: ")
        );
        assert!(said(generic("403 Forbidden: <Code>AccessDenied</Code>")).starts_with("access denied: "));
        let denied = object_store::Error::PermissionDenied { path: "m".into(), source: "no".into() };
        assert!(said(denied).starts_with("access denied: "));
        let missing = object_store::Error::NotFound { path: "m/config.pbtxt".into(), source: "gone".into() };
        assert!(said(missing).starts_with("not found: "));
        assert_eq!(said(generic("connection refused")), "Generic S3 error: connection refused");
    }

    #[test]
    fn markers_and_md5_etags() {
        assert!(is_version_marker("1") && !is_version_marker("config.pbtxt") && !is_version_marker(""));
        assert_eq!(
            plain_md5("\"0CC175B9C0F1B6A831C399E269772661\"").as_deref(),
            Some("0cc175b9c0f1b6a831c399e269772661")
        );
        assert_eq!(plain_md5("\"0cc175b9c0f1b6a831c399e269772661-2\""), None);
        assert_eq!(plain_md5("1234"), None);
    }
}
