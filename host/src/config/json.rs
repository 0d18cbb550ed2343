//! The JSON form of a model configuration, as Triton renders it: proto field names (snake_case),
//! enums by name, every field present with its default, 64-bit integers as numbers.
use prost_reflect::DynamicMessage;

use super::{ModelConfig, schema};

/// Renders `config` as Triton's `GET /v2/models/{m}/config` does.
pub fn to_json(config: &ModelConfig) -> serde_json::Value {
    crate::proto::to_json(config, "inference.ModelConfig")
}

/// Why a JSON model configuration cannot be read; the message is the parser's.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not JSON, or not the shape of an `inference.ModelConfig`.
    #[error(transparent)]
    Syntax(#[from] serde_json::Error),
    /// JSON of the right shape whose values do not make a `ModelConfig`.
    #[error(transparent)]
    Decode(#[from] prost::DecodeError),
}

/// Parses a model configuration from its JSON form (the repository API's "config" parameter).
pub fn from_json(json: &str) -> Result<ModelConfig, JsonError> {
    let mut de = serde_json::Deserializer::from_str(json);
    let dynamic = DynamicMessage::deserialize(schema::descriptor(), &mut de)?;
    Ok(dynamic.transcode_to::<ModelConfig>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_triton_shape() {
        let cfg = crate::config::parse_pbtxt(
            r#"name: "m" max_batch_size: 8 input [ { name: "I" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]
               dynamic_batching { max_queue_delay_microseconds: 100 }"#,
        )
        .unwrap();
        let json = to_json(&cfg);
        assert_eq!(json["name"], "m");
        assert_eq!(json["max_batch_size"], 8);
        assert_eq!(json["input"][0]["data_type"], "TYPE_INT32");
        assert_eq!(json["input"][0]["dims"], serde_json::json!([-1, 16]));
        assert_eq!(json["input"][0]["format"], "FORMAT_NONE");
        assert_eq!(json["dynamic_batching"]["max_queue_delay_microseconds"], 100);
        let back = from_json(&json.to_string()).unwrap();
        assert_eq!(back, cfg);
    }
}
