//! Model configuration: the `inference.ModelConfig` schema, `config.pbtxt` parsing, normalisation
//! to Triton's defaults, validation, and the JSON rendering `GET …/config` returns.
//!
//! A configuration goes through tritonserver's stages in its order: [`fill_backend_fields`] and
//! [`normalize`], then [`validate_model_config`] (and [`validate_io`] when auto-complete is off)
//! when it is read; [`normalize_instance_groups`] and [`validate_instance_groups`] when the model
//! is created, after its version folders; then the backend's auto-complete and [`validate_io`].
mod ensemble_graph;
mod error;
mod instance_groups;
mod io_rules;
mod json;
mod normalize;
mod pbtxt;
pub mod schema;
mod validate;

pub use error::ConfigError;
pub use instance_groups::{normalize_instance_groups, validate_instance_groups};
pub use io_rules::validate_io;
pub use json::{JsonError, from_json, to_json};
pub use normalize::{FirstVersion, fill_backend_fields, normalize};
pub use pbtxt::{ParseError, SourceLines};
pub use schema::ModelConfig;
pub use validate::{check_response_cache, is_plain_name, validate_model_config};

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

/// Takes a configuration that stands alone — no model folder to look into, no backend to complete
/// it — through every stage a model's configuration goes through, in tritonserver's order: what a
/// fuzz target or an offline check of a `config.pbtxt` wants. `gpu_count` is the GPUs the instance
/// groups may use.
pub fn complete_standalone(mut config: ModelConfig, name: &str, gpu_count: usize) -> Result<ModelConfig, ConfigError> {
    let nothing = FirstVersion { exists: false, entries: Vec::new() };
    fill_backend_fields(&mut config, name, &nothing)?;
    normalize(&mut config);
    validate_model_config(&config)?;
    normalize_instance_groups(&mut config, gpu_count, false);
    validate_instance_groups(&config, gpu_count)?;
    validate_io(&config)?;
    Ok(config)
}

/// The ensemble's steps (`ensemble_scheduling`), if the configuration has them.
pub fn ensemble_scheduling(config: &ModelConfig) -> Option<&crate::proto::inference::ModelEnsembling> {
    match &config.scheduling_choice {
        Some(schema::model_config::SchedulingChoice::EnsembleScheduling(e)) => Some(e),
        _ => None,
    }
}
