//! The JSON form of a model configuration, as Triton renders it: proto field names (snake_case),
//! enums by name, every field present with its default, 64-bit integers as numbers.
use prost_reflect::DynamicMessage;

use super::{ModelConfig, schema};

/// Renders `config` as Triton's `GET /v2/models/{m}/config` does.
pub fn to_json(config: &ModelConfig) -> serde_json::Value {
    crate::proto::to_json(config, "inference.ModelConfig")
}

/// Parses a model configuration from its JSON form (the repository API's "config" parameter).
pub fn from_json(json: &str) -> Result<ModelConfig, String> {
    let mut de = serde_json::Deserializer::from_str(json);
    let dynamic = DynamicMessage::deserialize(schema::descriptor(), &mut de).map_err(|e| e.to_string())?;
    dynamic.transcode_to::<ModelConfig>().map_err(|e| e.to_string())
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
