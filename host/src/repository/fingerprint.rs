//! What a model folder looks like on disk, condensed to one number, so that an explicit load of an
//! unchanged model is a no-op and the repository poller reloads only what changed (Triton compares
//! modification times the same way). Every file under the folder counts, by its relative path,
//! size and modification time, plus any extra file the model's backend comes from (a component in
//! the backend directory).
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::time::UNIX_EPOCH;

/// How deep the walk goes below the model folder (`<version>/<files>` and a little more).
const MAX_DEPTH: usize = 6;
/// How many entries the walk looks at before it stops: a huge folder still gets a fingerprint,
/// at a bounded cost, with the rest of it unwatched.
const MAX_ENTRIES: usize = 10_000;

/// A model folder's state on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint(u64);

impl Fingerprint {
    /// Reads `dir` (recursively) and the `extra` files or folders.
    pub fn of(dir: &Path, extra: &[&Path]) -> Fingerprint {
        let mut hasher = DefaultHasher::new();
        let mut budget = MAX_ENTRIES;
        walk(dir, dir, 0, &mut budget, &mut hasher);
        for path in extra {
            path.hash(&mut hasher);
            walk(path, path, 0, &mut budget, &mut hasher);
        }
        Fingerprint(hasher.finish())
    }
}

/// Hashes `path` (relative to `root`) with its size and modification time, and a folder's entries
/// in name order. Unreadable entries hash as absent, so that they count as a change when they
/// come back.
fn walk(root: &Path, path: &Path, depth: usize, budget: &mut usize, hasher: &mut DefaultHasher) {
    if *budget == 0 {
        return;
    }
    *budget -= 1;
    let Ok(meta) = std::fs::metadata(path) else { return };
    path.strip_prefix(root).unwrap_or(path).hash(hasher);
    let mtime = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_nanos());
    (meta.is_dir(), meta.len(), mtime).hash(hasher);
    if !meta.is_dir() || depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else { return };
    let mut names: Vec<_> = entries.flatten().map(|e| e.file_name()).collect();
    names.sort();
    for name in names {
        walk(root, &path.join(name), depth + 1, budget, hasher);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_with_any_file_and_not_without() {
        let dir = std::env::temp_dir().join(format!("nereus-fingerprint-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("1")).unwrap();
        std::fs::write(dir.join("config.pbtxt"), "a").unwrap();
        let first = Fingerprint::of(&dir, &[]);
        assert_eq!(first, Fingerprint::of(&dir, &[]));
        std::fs::write(dir.join("1/model.wasm"), "b").unwrap();
        let second = Fingerprint::of(&dir, &[]);
        assert_ne!(first, second);
        std::fs::write(dir.join("1/model.wasm"), "bc").unwrap();
        assert_ne!(second, Fingerprint::of(&dir, &[]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
