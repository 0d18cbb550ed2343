//! What a model's instances need to call other models, set once per model version at load: who
//! is calling (for the chain), what it may call, and how it reaches the models.
use std::sync::{Arc, Weak};

use super::super::policy::CallableModels;
use crate::model::ModelResolver;

/// What a model's instances need to call other models: set once per model version at load.
pub struct ModelCalls {
    /// The calling model's name, as the chain records it.
    pub model: Arc<str>,
    /// `sandbox.callable_models`.
    pub callable: CallableModels,
    /// The server's model table.
    pub models: Weak<dyn ModelResolver>,
    /// The server's async runtime, entered to start a call (a called ensemble spawns its steps
    /// there).
    pub reactor: Option<tokio::runtime::Handle>,
}
