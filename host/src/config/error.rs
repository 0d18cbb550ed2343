//! Why a configuration is unusable, located at the offending field.

/// Why a configuration is unusable: the message is tritonserver's where it has one (tools and
/// Triton's own QA suite match those words), and `path` locates the field (`input[1]`,
/// `instance_group[0]`) so the caller can add its line in the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    pub path: Option<String>,
    pub message: String,
}

impl ConfigError {
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError { path: None, message: message.into() }
    }

    /// The error at field `path`.
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { path: Some(path.into()), message: message.into() }
    }

    /// The line of the offending field in the file, when `lines` knows it.
    pub fn line_in(&self, lines: &super::SourceLines) -> Option<usize> {
        self.path.as_deref().and_then(|p| lines.line_of(p))
    }
}
