//! Where a `--model-repository` is: a local folder, served in place as always, or a remote
//! address (`s3://`, `gs://`, `as://`/`az://`, `file://`) served from a local copy.
use std::fmt;
use std::path::PathBuf;

use super::remote::uri::{RemoteUri, UriError, is_remote};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RepositoryLocation {
    Local(PathBuf),
    Remote(RemoteUri),
}

impl RepositoryLocation {
    /// A `--model-repository` value: a remote address by its scheme, else a local path.
    pub fn parse(text: &str) -> Result<RepositoryLocation, UriError> {
        if is_remote(text) {
            RemoteUri::parse(text).map(RepositoryLocation::Remote)
        } else {
            Ok(RepositoryLocation::Local(text.into()))
        }
    }
}

impl fmt::Display for RepositoryLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepositoryLocation::Local(path) => write!(f, "{}", path.display()),
            RepositoryLocation::Remote(uri) => f.write_str(&uri.text),
        }
    }
}

impl From<PathBuf> for RepositoryLocation {
    fn from(path: PathBuf) -> Self {
        RepositoryLocation::Local(path)
    }
}
