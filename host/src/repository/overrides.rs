//! A load request's overrides (the repository extension's `config` and `file:<path>` parameters):
//! a configuration to use instead of the folder's `config.pbtxt`, and files that make up a model
//! folder of their own, so that a model — a Wasm plugin included — can be uploaded.
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::ModelConfig;
use crate::load_error::LoadError;

/// What a load request overrides. Empty: load the model from its folder as it is.
#[derive(Default, Debug)]
pub struct LoadOverrides {
    /// The `config` parameter: a model configuration in JSON.
    pub config: Option<String>,
    /// The `file:<path>` parameters: each file's path in the model folder (`1/model.wasm`) and
    /// its bytes.
    pub files: Vec<(String, Vec<u8>)>,
}

impl LoadOverrides {
    pub fn is_empty(&self) -> bool {
        self.config.is_none() && self.files.is_empty()
    }

    /// The configuration override, parsed.
    pub fn parsed_config(&self) -> Result<Option<ModelConfig>, LoadError> {
        self.config.as_deref().map(crate::config::from_json).transpose().map_err(LoadError::ConfigOverride)
    }

    /// Writes the override files into a new temporary folder, the model's folder for this load.
    /// `None` when there are none. Triton asks for a configuration with them (the folder has no
    /// `config.pbtxt` of its own).
    pub fn materialize(&self, model: &str) -> Result<Option<OverrideDir>, LoadError> {
        if self.files.is_empty() {
            return Ok(None);
        }
        if self.config.is_none() {
            return Err(LoadError::FileOverride(format!(
                "failed to load '{model}': the 'config' parameter must be provided with 'file:' overrides"
            )));
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // A name nobody can guess, made by this call or failing (never one found there: another
        // user of the temporary directory could have made it, or a link in it, to catch the
        // files), readable by this user only; what is then made inside it is this server's alone.
        let nonce = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            NEXT.fetch_add(1, Ordering::Relaxed),
        );
        let dir = std::env::temp_dir().join(format!("nereus-override-{}-{nonce:016x}-{model}", std::process::id()));
        let failed = |what: String| LoadError::FileOverride(what);
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir).map_err(|e| failed(format!("cannot create {}: {e}", dir.display())))?;
        let folder = OverrideDir(dir);
        for (name, bytes) in &self.files {
            let relative = safe_relative(name).ok_or_else(|| {
                failed(format!("invalid file override 'file:{name}': the path must be relative, without '..'"))
            })?;
            let path = folder.0.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| failed(format!("cannot create {}: {e}", parent.display())))?;
            }
            std::fs::write(&path, bytes).map_err(|e| failed(format!("cannot write {}: {e}", path.display())))?;
        }
        Ok(Some(folder))
    }
}

/// `name` as a path inside the model folder: relative, only plain components.
fn safe_relative(name: &str) -> Option<PathBuf> {
    let path = Path::new(name);
    let plain = path.components().all(|c| matches!(c, Component::Normal(_)));
    (plain && path.components().next().is_some()).then(|| path.to_path_buf())
}

/// A temporary model folder made of override files; removed when dropped (when the last version
/// loaded from it is gone).
#[derive(Debug)]
pub struct OverrideDir(PathBuf);

impl OverrideDir {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for OverrideDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_paths_stay_inside_the_folder() {
        assert!(safe_relative("1/model.wasm").is_some());
        for bad in ["", "/etc/passwd", "../x", "1/../../x", "./1"] {
            assert!(safe_relative(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn files_need_a_config_and_are_removed_with_the_folder() {
        let mut o = LoadOverrides { config: None, files: vec![("1/m.bin".into(), b"x".to_vec())] };
        assert!(o.materialize("m").is_err());
        o.config = Some("{}".into());
        let dir = o.materialize("m").unwrap().unwrap();
        let path = dir.path().to_path_buf();
        assert_eq!(std::fs::read(path.join("1/m.bin")).unwrap(), b"x");
        drop(dir);
        assert!(!path.exists());
    }
}
