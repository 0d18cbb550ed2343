//! The generated `inference.*` model-configuration types and their descriptors.
use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

#[allow(clippy::all, missing_docs)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/inference.rs"));
}
pub use generated::*;

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"))[..])
        .expect("descriptors compiled by build.rs decode")
});

/// The descriptor of `inference.ModelConfig`.
pub fn descriptor() -> MessageDescriptor {
    POOL.get_message_by_name("inference.ModelConfig").expect("ModelConfig is in the schema")
}
