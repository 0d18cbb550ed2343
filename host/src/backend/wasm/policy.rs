//! The per-model sandbox policy, read from `config.pbtxt` `parameters` with safe defaults.
//!
//! | parameter                        | default   | meaning                                        |
//! |----------------------------------|-----------|------------------------------------------------|
//! | `sandbox.memory_limit_mb`        | 256       | cap on each sandbox's linear memory            |
//! | `sandbox.execution_timeout_ms`   | 10000     | deadline for one `execute` (or lifecycle) call |
//! | `sandbox.max_output_bytes`       | 67108864  | cap on the output bytes of one response        |
use std::time::Duration;

use super::runtime::MAX_MEMORY_BYTES;
use crate::config::{ConfigError, ModelConfig};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxPolicy {
    pub memory_limit_bytes: u64,
    pub execution_timeout: Duration,
    pub max_output_bytes: u64,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        SandboxPolicy {
            memory_limit_bytes: 256 << 20,
            execution_timeout: Duration::from_millis(10_000),
            max_output_bytes: 64 << 20,
        }
    }
}

impl SandboxPolicy {
    /// Reads the policy from the model's parameters; a malformed or out-of-range value is a
    /// configuration error naming the parameter.
    pub fn from_config(config: &ModelConfig) -> Result<Self, ConfigError> {
        let mut policy = SandboxPolicy::default();
        let get = |key: &str| -> Result<Option<u64>, ConfigError> {
            match config.parameters.get(key) {
                None => Ok(None),
                Some(p) => p.string_value.trim().parse::<u64>().map(Some).map_err(|_| {
                    ConfigError::new(format!(
                        "parameter '{key}' must be a non-negative integer, got {:?}",
                        p.string_value
                    ))
                }),
            }
        };
        if let Some(mb) = get("sandbox.memory_limit_mb")? {
            let bytes = mb.saturating_mul(1 << 20);
            if mb == 0 || bytes > MAX_MEMORY_BYTES {
                return Err(ConfigError::new(format!(
                    "parameter 'sandbox.memory_limit_mb' must be between 1 and {}",
                    MAX_MEMORY_BYTES >> 20
                )));
            }
            policy.memory_limit_bytes = bytes;
        }
        if let Some(ms) = get("sandbox.execution_timeout_ms")? {
            if ms == 0 {
                return Err(ConfigError::new("parameter 'sandbox.execution_timeout_ms' must be at least 1"));
            }
            policy.execution_timeout = Duration::from_millis(ms);
        }
        if let Some(bytes) = get("sandbox.max_output_bytes")? {
            policy.max_output_bytes = bytes;
        }
        Ok(policy)
    }
}
