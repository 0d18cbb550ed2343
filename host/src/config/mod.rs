//! Model configuration: the `inference.ModelConfig` schema, `config.pbtxt` parsing, normalisation
//! to Triton's defaults, validation, and the JSON rendering `GET …/config` returns.
mod json;
mod pbtxt;
pub mod schema;
mod validate;

pub use json::{JsonError, from_json, to_json};
pub use pbtxt::{ParseError, SourceLines};
pub use schema::ModelConfig;
pub use validate::{ConfigError, normalize_and_validate};

/// Parses `config.pbtxt` text (without normalising it).
pub fn parse_pbtxt(src: &str) -> Result<ModelConfig, ParseError> {
    parse_pbtxt_with_lines(src).map(|(config, _)| config)
}

/// Parses `config.pbtxt` text, also returning where each field starts (for validation messages).
pub fn parse_pbtxt_with_lines(src: &str) -> Result<(ModelConfig, SourceLines), ParseError> {
    let (msg, lines) = pbtxt::parse(src, schema::descriptor())?;
    let config =
        msg.transcode_to::<ModelConfig>().map_err(|e| ParseError { line: 1, column: 1, message: e.to_string() })?;
    Ok((config, lines))
}

/// The ensemble's steps (`ensemble_scheduling`), if the configuration has them.
pub fn ensemble_scheduling(config: &ModelConfig) -> Option<&crate::proto::inference::ModelEnsembling> {
    match &config.scheduling_choice {
        Some(schema::model_config::SchedulingChoice::EnsembleScheduling(e)) => Some(e),
        _ => None,
    }
}
