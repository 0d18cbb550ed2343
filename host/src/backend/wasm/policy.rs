//! The per-model sandbox policy, read from `config.pbtxt` `parameters` with safe defaults.
//!
//! | parameter                        | default   | meaning                                        |
//! |----------------------------------|-----------|------------------------------------------------|
//! | `sandbox.memory_limit_mb`        | 256       | cap on each sandbox's linear memory            |
//! | `sandbox.execution_timeout_ms`   | 10000     | deadline for one `execute` call                |
//! | `sandbox.load_timeout_ms`        | 60000     | deadline for one lifecycle call (initialise, finalise) |
//! | `sandbox.max_output_bytes`       | 67108864  | cap on the output bytes of one response        |
//! | `sandbox.max_responses`          | 100000    | responses one request may get (decoupled)      |
//! | `sandbox.max_instances`          | 32        | most instances (sandboxes) the model may have  |
//! | `sandbox.fuel`                   | `none`    | instructions one call may execute (deterministic) |
//! | `sandbox.model_dir`              | `none`    | `read_only`: the version folder at `/model`    |
//! | `sandbox.callable_models`        | (none)    | models it may call (`a,b` or `*`; `models.infer`) |
//!
//! Nothing else is granted: no network, no environment, no other paths, no stdio; WASI's clocks
//! and random numbers are all a sandbox can ask of the host. The policy in force is written back
//! into the model's `parameters`, so `GET …/config` shows it.
use std::path::PathBuf;
use std::time::Duration;

use crate::config::{ConfigError, ModelConfig};

/// The largest linear memory any sandbox may be granted (the pooling allocator reserves address
/// space for it up front); per-model caps are enforced below it by a resource limiter.
pub const MAX_MEMORY_BYTES: u64 = 4 << 30;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxPolicy {
    pub memory_limit_bytes: u64,
    pub execution_timeout: Duration,
    /// The deadline of each lifecycle call (initialise and finalise the backend, model, instance):
    /// a plugin hanging in its initialisation holds only its own model's load, this long.
    pub load_timeout: Duration,
    pub max_output_bytes: u64,
    /// Responses one request may receive (a decoupled plugin cannot flood a client).
    pub max_responses: u64,
    pub max_instances: u64,
    /// Fuel (about one unit per instruction) one call may burn; `None`: no budget, only the deadline.
    pub fuel: Option<u64>,
    /// Whether the version folder is granted read-only (`sandbox.model_dir: "read_only"`).
    pub grant_model_dir: bool,
    /// The folder granted, set per version at load.
    pub model_dir: Option<PathBuf>,
    /// The models the plugin may call from `execute` (`nereus:backend/models`): none by default.
    pub callable_models: CallableModels,
}

/// Which models a plugin may call (`sandbox.callable_models`): deny by default, a list of names,
/// or every model (`*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CallableModels {
    #[default]
    None,
    Listed(Vec<String>),
    All,
}

impl CallableModels {
    fn parse(text: &str) -> Result<Self, ConfigError> {
        let names: Vec<String> = text.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect();
        match names.as_slice() {
            [] => Ok(CallableModels::None),
            [all] if all == "*" => Ok(CallableModels::All),
            _ if names.iter().any(|n| n == "*") => Err(ConfigError::new(
                "parameter 'sandbox.callable_models' is either \"*\" or a comma-separated list of model names, not both",
            )),
            _ => Ok(CallableModels::Listed(names)),
        }
    }

    /// Whether the plugin may call `model`.
    pub fn allows(&self, model: &str) -> bool {
        match self {
            CallableModels::None => false,
            CallableModels::All => true,
            CallableModels::Listed(names) => names.iter().any(|n| n == model),
        }
    }

    /// Whether the plugin may call any model at all.
    pub fn any(&self) -> bool {
        *self != CallableModels::None
    }

    /// As the configuration shows it.
    fn shown(&self) -> String {
        match self {
            CallableModels::None => String::new(),
            CallableModels::All => "*".into(),
            CallableModels::Listed(names) => names.join(","),
        }
    }
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        SandboxPolicy {
            memory_limit_bytes: 256 << 20,
            execution_timeout: Duration::from_millis(10_000),
            load_timeout: Duration::from_millis(60_000),
            max_output_bytes: 64 << 20,
            max_responses: 100_000,
            max_instances: 32,
            fuel: None,
            grant_model_dir: false,
            model_dir: None,
            callable_models: CallableModels::None,
        }
    }
}

impl SandboxPolicy {
    /// Reads the policy from the model's parameters; a malformed or out-of-range value is a
    /// configuration error naming the parameter.
    pub fn from_config(config: &ModelConfig) -> Result<Self, ConfigError> {
        Self::from_config_or(config, SandboxPolicy::default())
    }

    /// The same, with `defaults` for what the parameters leave out.
    pub fn from_config_or(config: &ModelConfig, defaults: SandboxPolicy) -> Result<Self, ConfigError> {
        let mut policy = defaults;
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
        if let Some(ms) = get("sandbox.load_timeout_ms")? {
            if ms == 0 {
                return Err(ConfigError::new("parameter 'sandbox.load_timeout_ms' must be at least 1"));
            }
            policy.load_timeout = Duration::from_millis(ms);
        }
        if let Some(bytes) = get("sandbox.max_output_bytes")? {
            policy.max_output_bytes = bytes;
        }
        if let Some(n) = get("sandbox.max_responses")? {
            if n == 0 {
                return Err(ConfigError::new("parameter 'sandbox.max_responses' must be at least 1"));
            }
            policy.max_responses = n;
        }
        if let Some(n) = get("sandbox.max_instances")? {
            if n == 0 {
                return Err(ConfigError::new("parameter 'sandbox.max_instances' must be at least 1"));
            }
            policy.max_instances = n;
        }
        if let Some(p) = config.parameters.get("sandbox.fuel")
            && p.string_value.trim() != "none"
        {
            match get("sandbox.fuel")? {
                Some(0) => return Err(ConfigError::new("parameter 'sandbox.fuel' must be at least 1 or \"none\"")),
                n => policy.fuel = n,
            }
        }
        policy.grant_model_dir = match config.parameters.get("sandbox.model_dir").map(|p| p.string_value.trim()) {
            None | Some("none") => false,
            Some("read_only") => true,
            Some(other) => {
                return Err(ConfigError::new(format!(
                    "parameter 'sandbox.model_dir' must be \"none\" or \"read_only\", got {other:?}"
                )));
            }
        };
        if let Some(p) = config.parameters.get("sandbox.callable_models") {
            policy.callable_models = CallableModels::parse(&p.string_value)?;
        }
        Ok(policy)
    }

    /// The configuration with the policy in force written into its `parameters` (every key, the
    /// defaults included), as the model's configuration shows it.
    pub fn shown_in(&self, config: &ModelConfig) -> ModelConfig {
        let mut config = config.clone();
        let mut set = |key: &str, value: String| {
            config.parameters.insert(key.to_string(), crate::config::schema::ModelParameter { string_value: value });
        };
        set("sandbox.memory_limit_mb", (self.memory_limit_bytes >> 20).to_string());
        set("sandbox.execution_timeout_ms", self.execution_timeout.as_millis().to_string());
        set("sandbox.load_timeout_ms", self.load_timeout.as_millis().to_string());
        set("sandbox.max_output_bytes", self.max_output_bytes.to_string());
        set("sandbox.max_responses", self.max_responses.to_string());
        set("sandbox.max_instances", self.max_instances.to_string());
        set("sandbox.fuel", self.fuel.map_or("none".to_string(), |f| f.to_string()));
        set("sandbox.model_dir", if self.grant_model_dir { "read_only" } else { "none" }.to_string());
        set("sandbox.callable_models", self.callable_models.shown());
        config
    }
}

#[cfg(test)]
mod tests {
    use super::CallableModels;

    #[test]
    fn callable_models_deny_by_default_and_read_lists_and_star() {
        assert_eq!(CallableModels::parse("").unwrap(), CallableModels::None);
        assert!(!CallableModels::None.allows("simple"));
        let listed = CallableModels::parse(" simple , digit_classifier,").unwrap();
        assert!(listed.allows("simple") && listed.allows("digit_classifier") && !listed.allows("other"));
        assert_eq!(listed.shown(), "simple,digit_classifier");
        assert!(CallableModels::parse("*").unwrap().allows("anything"));
        assert!(CallableModels::parse("simple,*").is_err());
    }
}
