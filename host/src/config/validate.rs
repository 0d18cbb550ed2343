//! Normalisation to Triton's defaults and validation of a parsed model configuration.
use std::collections::HashSet;

use super::ModelConfig;
use super::schema::{ModelInstanceGroup, ModelVersionPolicy, model_instance_group::Kind, model_version_policy};
use crate::tensor::DataType;

/// Why a configuration is unusable: the message names the offending field, and `path` locates it
/// (`input[1]`, `instance_group[0]`) so the caller can add its line in the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    pub path: Option<String>,
    pub message: String,
}

impl ConfigError {
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError { path: None, message: message.into() }
    }

    /// Places the error under field `parent` (a relative path becomes `parent.path`).
    fn at(mut self, parent: String) -> Self {
        self.path = Some(match self.path.take() {
            Some(child) => format!("{parent}.{child}"),
            None => parent,
        });
        self
    }

    /// The line of the offending field in the file, when `lines` knows it.
    pub fn line_in(&self, lines: &super::SourceLines) -> Option<usize> {
        self.path.as_deref().and_then(|p| lines.line_of(p))
    }
}

/// Returns a `ConfigError` located at field `path`.
macro_rules! bail {
    (at $path:expr; $($arg:tt)*) => {
        return Err(ConfigError { path: Some($path.to_string()), message: format!($($arg)*) })
    };
}

/// Fills in what Triton fills in (name, version policy, instance groups) and rejects what Triton
/// rejects. `gpu_count` is the number of usable GPUs (KIND_GPU needs at least one; KIND_GPU with
/// no `gpus` means all of them); `auto_gpu` says whether KIND_AUTO becomes KIND_GPU, which Triton
/// decides by whether the model's backend can use the GPUs.
pub fn normalize_and_validate(
    mut config: ModelConfig,
    dir_name: &str,
    gpu_count: usize,
    auto_gpu: bool,
) -> Result<ModelConfig, ConfigError> {
    if config.name.is_empty() {
        config.name = dir_name.to_string();
    } else if config.name != dir_name {
        bail!(at "name"; "unexpected 'name' \"{}\" in the configuration of model directory '{dir_name}'", config.name);
    }
    if config.max_batch_size < 0 {
        bail!(at "max_batch_size"; "'max_batch_size' must be non-negative, got {}", config.max_batch_size);
    }
    match &config.version_policy {
        None | Some(ModelVersionPolicy { policy_choice: None }) => {
            config.version_policy = Some(ModelVersionPolicy {
                policy_choice: Some(model_version_policy::PolicyChoice::Latest(model_version_policy::Latest {
                    num_versions: 1,
                })),
            });
        }
        Some(ModelVersionPolicy { policy_choice: Some(model_version_policy::PolicyChoice::Latest(l)) })
            if l.num_versions == 0 =>
        {
            bail!(at "version_policy"; "'version_policy.latest.num_versions' must be at least 1");
        }
        _ => {}
    }

    let mut names = HashSet::new();
    for (i, input) in config.input.iter().enumerate() {
        let what = format!("input[{i}] '{}'", input.name);
        if input.name.is_empty() {
            bail!(at format!("input[{i}]"); "input[{i}] has no 'name'");
        }
        if !names.insert(input.name.as_str()) {
            bail!(at format!("input[{i}]"); "{what}: duplicate input name");
        }
        check_tensor(&what, input.data_type, &input.dims, input.reshape.is_some())
            .map_err(|e| e.at(format!("input[{i}]")))?;
    }
    let mut names = HashSet::new();
    for (i, output) in config.output.iter().enumerate() {
        let what = format!("output[{i}] '{}'", output.name);
        if output.name.is_empty() {
            bail!(at format!("output[{i}]"); "output[{i}] has no 'name'");
        }
        if !names.insert(output.name.as_str()) {
            bail!(at format!("output[{i}]"); "{what}: duplicate output name");
        }
        check_tensor(&what, output.data_type, &output.dims, output.reshape.is_some())
            .map_err(|e| e.at(format!("output[{i}]")))?;
    }

    check_dynamic_batching(&mut config)?;

    // As Triton: a model with no instance group gets one named after the model; an unnamed group
    // is named `<model>_<index>`; a count below 1 means 1.
    // As Triton's normalisation: every configuration states its transaction policy.
    config.model_transaction_policy.get_or_insert_default();
    if config.platform == "ensemble" {
        // An ensemble has no instances of its own; its steps' models do.
        if super::ensemble_scheduling(&config).is_none_or(|e| e.step.is_empty()) {
            bail!(at "ensemble_scheduling"; "an ensemble needs 'ensemble_scheduling' with at least one step");
        }
        return Ok(config);
    }
    if config.instance_group.is_empty() {
        config.instance_group.push(ModelInstanceGroup { name: config.name.clone(), count: 1, ..Default::default() });
    }
    let model_name = config.name.clone();
    let mut group_names = HashSet::new();
    for (i, group) in config.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{model_name}_{i}");
        }
        if !group_names.insert(group.name.clone()) {
            bail!(at format!("instance_group[{i}]"); "instance_group[{i}]: duplicate group name '{}'", group.name);
        }
        group.count = group.count.max(1);
        let kind = Kind::try_from(group.kind).unwrap_or(Kind::Auto);
        match kind {
            // As Triton: KIND_AUTO is KIND_GPU on every GPU when there are GPUs and the backend can
            // use them (here: ONNX Runtime), else KIND_CPU.
            Kind::Auto => {
                if gpu_count > 0 && (auto_gpu || !group.gpus.is_empty()) {
                    group.kind = Kind::Gpu as i32;
                    if group.gpus.is_empty() {
                        group.gpus = (0..gpu_count as i32).collect();
                    }
                } else {
                    group.kind = Kind::Cpu as i32;
                }
            }
            Kind::Gpu => {
                if gpu_count == 0 {
                    bail!(at format!("instance_group[{i}]");
                        "instance_group[{i}] '{}' has kind KIND_GPU but no GPUs are available",
                        group.name
                    );
                }
                if let Some(g) = group.gpus.iter().find(|g| **g < 0 || **g as usize >= gpu_count) {
                    bail!(at format!("instance_group[{i}]"); "instance_group[{i}] '{}' names GPU {g}, which does not exist", group.name);
                }
                if group.gpus.is_empty() {
                    group.gpus = (0..gpu_count as i32).collect();
                }
            }
            Kind::Cpu | Kind::Model => {
                if !group.gpus.is_empty() {
                    bail!(at format!("instance_group[{i}]"); "instance_group[{i}] '{}' lists 'gpus' but its kind is not KIND_GPU", group.name);
                }
            }
        }
    }
    Ok(config)
}

/// Fills in Triton's default preferred batch size (`[max_batch_size]`) and rejects what Triton's
/// `ValidateModelConfig` rejects in `dynamic_batching`, with its reasons.
fn check_dynamic_batching(config: &mut ModelConfig) -> Result<(), ConfigError> {
    use super::schema::model_config::SchedulingChoice;
    use super::schema::model_queue_policy::TimeoutAction;
    let max_batch_size = config.max_batch_size;
    let Some(SchedulingChoice::DynamicBatching(db)) = &mut config.scheduling_choice else {
        return Ok(());
    };
    if db.preferred_batch_size.is_empty() && max_batch_size > 0 {
        db.preferred_batch_size.push(max_batch_size);
    }
    for size in &db.preferred_batch_size {
        if *size <= 0 {
            bail!(at "dynamic_batching"; "dynamic batching preferred size must be positive, got {size}");
        }
        if *size > max_batch_size {
            bail!(at "dynamic_batching"; "dynamic batching preferred size must be <= max batch size ({max_batch_size}), got {size}");
        }
    }
    let levels = db.priority_levels;
    if levels != 0 {
        if db.default_priority_level == 0 || db.default_priority_level > levels {
            bail!(at "dynamic_batching"; "default priority level must be in range [1, {levels}]");
        }
        if let Some(level) = db.priority_queue_policy.keys().find(|l| **l == 0 || **l > levels) {
            bail!(at "dynamic_batching"; "priority queue policy must have priority level in range [1, {levels}], got {level}");
        }
    }
    if db.preserve_ordering {
        if levels > 1 {
            bail!(at "dynamic_batching"; "Only one priority level is allowed when 'preserve_ordering' is true");
        }
        let delays = |p: &super::schema::ModelQueuePolicy| {
            p.default_timeout_microseconds != 0 && p.timeout_action == TimeoutAction::Delay as i32
        };
        if db.default_queue_policy.as_ref().is_some_and(delays) || db.priority_queue_policy.values().any(delays) {
            bail!(at "dynamic_batching"; "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true");
        }
    }
    Ok(())
}

fn check_tensor(what: &str, data_type: i32, dims: &[i64], has_reshape: bool) -> Result<(), ConfigError> {
    if DataType::from_config(data_type).is_none() {
        return Err(ConfigError::new(format!("{what}: 'data_type' must be set to a valid TYPE_*")));
    }
    if dims.is_empty() && !has_reshape {
        return Err(ConfigError::new(format!("{what}: 'dims' must be specified")));
    }
    if let Some(d) = dims.iter().find(|d| **d == 0 || **d < -1) {
        bail!(at "dims"; "{what}: dimension {d} in 'dims' is invalid (each must be positive or -1)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_pbtxt;

    fn check(src: &str) -> Result<ModelConfig, ConfigError> {
        normalize_and_validate(parse_pbtxt(src).unwrap(), "m", 0, false)
    }

    #[test]
    fn defaults_are_filled() {
        let cfg = check(r#"input [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] } ]"#).unwrap();
        assert_eq!(cfg.name, "m");
        assert_eq!(cfg.instance_group.len(), 1);
        assert_eq!(cfg.instance_group[0].count, 1);
        assert_eq!(cfg.instance_group[0].name, "m");
        assert_eq!(cfg.instance_group[0].kind, Kind::Cpu as i32);
        assert!(cfg.version_policy.is_some());
    }

    #[test]
    fn instance_groups_and_batching_defaults_follow_triton() {
        let cfg = check(
            "max_batch_size: 8 dynamic_batching { } instance_group [ { count: -3 }, { name: \"g\" kind: KIND_CPU } ]",
        )
        .unwrap();
        let groups: Vec<(&str, i32)> = cfg.instance_group.iter().map(|g| (g.name.as_str(), g.count)).collect();
        assert_eq!(groups, [("m_0", 1), ("g", 1)]);
        let Some(crate::config::schema::model_config::SchedulingChoice::DynamicBatching(db)) = &cfg.scheduling_choice
        else {
            panic!("dynamic_batching lost")
        };
        assert_eq!(db.preferred_batch_size, [8]);
    }

    #[test]
    fn gpu_groups_take_every_gpu_unless_named_and_auto_follows_the_backend() {
        let on = |src: &str, auto_gpu: bool| {
            let cfg = normalize_and_validate(parse_pbtxt(src).unwrap(), "m", 2, auto_gpu).unwrap();
            cfg.instance_group.iter().map(|g| (Kind::try_from(g.kind).unwrap(), g.gpus.clone())).collect::<Vec<_>>()
        };
        assert_eq!(on("instance_group [ { kind: KIND_GPU } ]", false), [(Kind::Gpu, vec![0, 1])]);
        assert_eq!(on("instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]", false), [(Kind::Gpu, vec![1])]);
        assert_eq!(on("", true), [(Kind::Gpu, vec![0, 1])], "KIND_AUTO with a GPU-capable backend");
        assert_eq!(on("", false), [(Kind::Cpu, vec![])], "KIND_AUTO with a CPU-only backend");
        assert_eq!(on("instance_group [ { gpus: [ 1 ] } ]", false), [(Kind::Gpu, vec![1])], "AUTO naming GPUs");
        let err = normalize_and_validate(
            parse_pbtxt("instance_group [ { kind: KIND_GPU gpus: [ 2 ] } ]").unwrap(),
            "m",
            2,
            true,
        )
        .unwrap_err();
        assert!(err.to_string().contains("GPU 2, which does not exist"), "{err}");
    }

    #[test]
    fn rejects_bad_configs() {
        for (src, needle) in [
            (r#"name: "other""#, "unexpected 'name'"),
            ("max_batch_size: -1", "max_batch_size"),
            (
                r#"input [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ]"#,
                "duplicate",
            ),
            (r#"input [ { name: "I" dims: [ 4 ] } ]"#, "data_type"),
            (r#"output [ { name: "O" data_type: TYPE_FP32 dims: [ 0 ] } ]"#, "dimension 0"),
            (r#"output [ { name: "O" data_type: TYPE_FP32 } ]"#, "'dims'"),
            ("instance_group [ { kind: KIND_GPU } ]", "no GPUs"),
            ("max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }", "<= max batch size (4)"),
            ("max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 0 ] }", "must be positive"),
            (
                "max_batch_size: 4 dynamic_batching { priority_levels: 2 }",
                "default priority level must be in range [1, 2]",
            ),
            (
                "max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 1 \
                 priority_queue_policy { key: 3 value: { max_queue_size: 1 } } }",
                "priority level in range [1, 2], got 3",
            ),
            (
                "max_batch_size: 4 dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }",
                "Only one priority level",
            ),
            (
                "max_batch_size: 4 dynamic_batching { preserve_ordering: true \
                 default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5 } }",
                "DELAY",
            ),
            ("version_policy { latest { num_versions: 0 } }", "num_versions"),
        ] {
            let err = check(src).unwrap_err();
            assert!(err.message.contains(needle), "{src}: {err}");
        }
    }
}
