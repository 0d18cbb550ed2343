//! The repository extension's load and unload parameters, as both protocols carry them (a JSON
//! object over HTTP, a map of `ModelRepositoryParameter` over gRPC), once each frontend has turned
//! its values into [`RepoParam`]s (HTTP decodes a `file:` parameter's base64 first).
use crate::error::InferError;
use crate::repository::overrides::LoadOverrides;

/// One load or unload parameter's value.
#[derive(Debug)]
pub enum RepoParam {
    Bool(bool),
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

impl RepoParam {
    /// The type's name in tritonserver's messages.
    fn type_name(&self) -> &'static str {
        match self {
            RepoParam::Bool(_) => "BOOL",
            RepoParam::Int(_) => "INT",
            RepoParam::Text(_) => "STRING",
            RepoParam::Bytes(_) => "BYTES",
        }
    }
}

/// A load request's overrides: `config` (a JSON model configuration, a string) and `file:<path>`
/// (the file's bytes). Any other parameter is refused, as tritonserver refuses it.
pub fn load_overrides(params: Vec<(String, RepoParam)>) -> Result<LoadOverrides, InferError> {
    let mut overrides = LoadOverrides::default();
    for (key, value) in params {
        match (key.as_str(), value) {
            ("config", RepoParam::Text(json)) => overrides.config = Some(json),
            (name, RepoParam::Bytes(bytes)) if name.starts_with("file:") => {
                overrides.files.push((name["file:".len()..].to_string(), bytes));
            }
            (name, value) => {
                return Err(InferError::invalid(format!(
                    "Unrecognized load parameter '{name}' with type '{}'",
                    value.type_name()
                )));
            }
        }
    }
    Ok(overrides)
}

/// Whether an unload request asks for the model's dependents (the ensembles using it) to go too:
/// the `unload_dependents` parameter, a boolean. Other parameters are ignored, as tritonserver does.
pub fn unload_dependents(params: Vec<(String, RepoParam)>) -> Result<bool, InferError> {
    let mut dependents = false;
    for (key, value) in params {
        if key == "unload_dependents" {
            match value {
                RepoParam::Bool(b) => dependents = b,
                other => {
                    return Err(InferError::invalid(format!(
                        "Unexpected type '{}' for parameter 'unload_dependents', expecting BOOL",
                        other.type_name()
                    )));
                }
            }
        }
    }
    Ok(dependents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_parameters() {
        let o = load_overrides(vec![
            ("config".into(), RepoParam::Text("{}".into())),
            ("file:1/model.wasm".into(), RepoParam::Bytes(vec![1, 2])),
        ])
        .unwrap();
        assert_eq!(o.config.as_deref(), Some("{}"));
        assert_eq!(o.files, vec![("1/model.wasm".to_string(), vec![1, 2])]);
        let e = load_overrides(vec![("bogus".into(), RepoParam::Int(1))]).unwrap_err();
        assert_eq!(e.message, "Unrecognized load parameter 'bogus' with type 'INT'");
        assert!(unload_dependents(vec![("unload_dependents".into(), RepoParam::Bool(true))]).unwrap());
        assert!(!unload_dependents(vec![]).unwrap());
        assert!(unload_dependents(vec![("unload_dependents".into(), RepoParam::Text("x".into()))]).is_err());
    }
}
