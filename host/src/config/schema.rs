//! The `inference.*` model-configuration types (generated with the rest of the protocol).
use prost_reflect::MessageDescriptor;

pub use crate::proto::inference::{
    DataType, ModelConfig, ModelDynamicBatching, ModelInput, ModelInstanceGroup, ModelOutput, ModelParameter,
    ModelQueuePolicy, ModelVersionPolicy, model_config, model_instance_group, model_queue_policy,
    model_sequence_batching, model_version_policy,
};

/// The descriptor of `inference.ModelConfig`.
pub fn descriptor() -> MessageDescriptor {
    crate::proto::descriptor("inference.ModelConfig")
}
