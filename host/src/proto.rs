//! Generated protobuf types: `inference` (model configuration and Triton's gRPC protocol),
//! `grpc.health.v1` and OpenTelemetry's OTLP trace messages, plus the descriptor pool and a JSON renderer in Triton's shape.
use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};

#[allow(clippy::all, missing_docs)]
pub mod inference {
    include!(concat!(env!("OUT_DIR"), "/inference.rs"));
}

#[allow(clippy::all, missing_docs)]
pub mod health {
    include!(concat!(env!("OUT_DIR"), "/grpc.health.v1.rs"));
}

/// OpenTelemetry's OTLP trace messages (`opentelemetry.proto.*`), which the trace exporter sends.
#[allow(clippy::all, missing_docs)]
pub mod otlp {
    pub mod common {
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/opentelemetry.proto.common.v1.rs"));
        }
    }
    pub mod resource {
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/opentelemetry.proto.resource.v1.rs"));
        }
    }
    pub mod trace {
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/opentelemetry.proto.trace.v1.rs"));
        }
    }
    pub mod collector {
        pub mod trace {
            pub mod v1 {
                include!(concat!(env!("OUT_DIR"), "/opentelemetry.proto.collector.trace.v1.rs"));
            }
        }
    }
}

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"))[..])
        .expect("descriptors compiled by build.rs decode")
});

/// The descriptor of message `full_name` (e.g. `inference.ModelConfig`).
pub fn descriptor(full_name: &str) -> MessageDescriptor {
    POOL.get_message_by_name(full_name).unwrap_or_else(|| panic!("{full_name} is in the schema"))
}

/// Renders a message as Triton renders protobuf messages in JSON: proto field names (snake_case),
/// enums by name, every field present with its default, 64-bit integers as numbers.
/// `full_name` is the message's protobuf name, e.g. `inference.ModelConfig`.
pub fn to_json<M: prost::Message>(message: &M, full_name: &str) -> serde_json::Value {
    let dynamic = DynamicMessage::decode(descriptor(full_name), message.encode_to_vec().as_slice())
        .expect("a message re-decodes with its own descriptor");
    let options =
        SerializeOptions::new().use_proto_field_name(true).stringify_64_bit_integers(false).skip_default_fields(false);
    dynamic
        .serialize_with_options(serde_json::value::Serializer, &options)
        .expect("serialising a message to a JSON value cannot fail")
}
