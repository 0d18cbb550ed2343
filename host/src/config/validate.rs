//! tritonserver's `ValidateModelConfig`: the checks of a model's configuration that need neither
//! its files nor its backend, in tritonserver's order and with its messages (most end in
//! ` for <model>`), so that the first problem reported is the one tritonserver reports.
use super::ConfigError;
use super::schema::model_config::SchedulingChoice;
use super::schema::model_queue_policy::TimeoutAction;
use super::schema::model_sequence_batching::{self, control::Kind as ControlKind};
use super::schema::{ModelConfig, ModelDynamicBatching, ModelQueuePolicy};
use crate::proto::inference::DataType;

/// The most priority levels a model may have (`dynamic_batching.priority_levels`): each is a queue
/// made when the model loads, and tritonserver sets no bound (2^64 levels would exhaust memory).
pub const MAX_PRIORITY_LEVELS: u64 = 65_536;

/// The framework a backend name or a platform denotes (tritonserver's `BackendType`): a backend
/// and a platform that denote different known frameworks contradict each other.
#[derive(PartialEq, Eq)]
enum Framework {
    TensorFlow,
    TensorRt,
    OnnxRuntime,
    PyTorch,
    Unknown,
}

fn framework_of_backend(backend: &str) -> Framework {
    match backend {
        "tensorflow" => Framework::TensorFlow,
        "tensorrt" => Framework::TensorRt,
        "onnxruntime" => Framework::OnnxRuntime,
        "pytorch" => Framework::PyTorch,
        _ => Framework::Unknown,
    }
}

fn framework_of_platform(platform: &str) -> Framework {
    match platform {
        "tensorflow_graphdef" | "tensorflow_savedmodel" => Framework::TensorFlow,
        "tensorrt_plan" => Framework::TensorRt,
        "onnxruntime_onnx" => Framework::OnnxRuntime,
        "pytorch_libtorch" => Framework::PyTorch,
        _ => Framework::Unknown,
    }
}

/// Checks a normalised configuration (backend fields filled in, see `super::normalize`) as
/// tritonserver's `ValidateModelConfig` does; inputs and outputs are `super::validate_io`'s.
pub fn validate_model_config(config: &ModelConfig) -> Result<(), ConfigError> {
    let name = &config.name;
    if name.is_empty() {
        return Err(ConfigError::at("name", "model configuration must specify 'name'"));
    }
    if config.backend.is_empty() {
        if config.platform != "ensemble" {
            return Err(ConfigError::at(
                "platform",
                format!("unexpected platform type '{}' for {name}", config.platform),
            ));
        }
    } else if config.platform == "ensemble" {
        return Err(ConfigError::at(
            "backend",
            format!("Ensemble model '{name}' must have platform type 'ensemble' and empty backend type"),
        ));
    }
    // Not checks of tritonserver's: both name files the server opens, and a load request may send
    // them (`/etc/x` joined to a folder is `/etc/x`, `../x` leaves it).
    if !config.backend.is_empty() && !is_plain_name(&config.backend) {
        return Err(ConfigError::at(
            "backend",
            format!("backend '{}' of {name} must be a plain name: no path separators, not '..'", config.backend),
        ));
    }
    if !config.default_model_filename.is_empty() && !is_relative_inside(&config.default_model_filename) {
        return Err(ConfigError::at(
            "default_model_filename",
            format!(
                "default_model_filename '{}' of {name} must be a path inside the version folder",
                config.default_model_filename
            ),
        ));
    }
    let framework = framework_of_backend(&config.backend);
    if framework != Framework::Unknown && framework != framework_of_platform(&config.platform) {
        return Err(ConfigError::at(
            "platform",
            format!("unexpected 'platform' and 'backend' pair, got:{}, {}", config.platform, config.backend),
        ));
    }
    if config.max_batch_size < 0 {
        return Err(ConfigError::at(
            "max_batch_size",
            format!("'max_batch_size' must be non-negative value for {name}"),
        ));
    }
    if config.version_policy.is_none() {
        return Err(ConfigError::new(format!("must specify 'version policy' for {name}")));
    }
    // Not a check of tritonserver's, which would load no version at all.
    if let Some(super::schema::ModelVersionPolicy {
        policy_choice: Some(super::schema::model_version_policy::PolicyChoice::Latest(l)),
    }) = &config.version_policy
        && l.num_versions == 0
    {
        return Err(ConfigError::at("version_policy", "'version_policy.latest.num_versions' must be at least 1"));
    }
    match &config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(db)) => check_dynamic_batching(db, config.max_batch_size, name)?,
        Some(SchedulingChoice::SequenceBatching(sb)) => check_sequence_batching(config, sb, name)?,
        _ => {}
    }
    match &config.scheduling_choice {
        Some(SchedulingChoice::EnsembleScheduling(_)) => super::ensemble_graph::validate(config)?,
        _ if config.platform == "ensemble" => {
            return Err(ConfigError::new(format!(
                "ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
            )));
        }
        _ => {}
    }
    check_response_cache(config)?;
    Ok(())
}

/// `dynamic_batching`: preferred sizes within `max_batch_size`, priority levels in range, and what
/// `preserve_ordering` rules out.
fn check_dynamic_batching(db: &ModelDynamicBatching, max_batch_size: i32, name: &str) -> Result<(), ConfigError> {
    let at = |message: String| ConfigError::at("dynamic_batching", message);
    for size in &db.preferred_batch_size {
        if *size <= 0 {
            return Err(at(format!("dynamic batching preferred size must be positive for {name}")));
        }
        if *size > max_batch_size {
            return Err(at(format!("dynamic batching preferred size must be <= max batch size for {name}")));
        }
    }
    let levels = db.priority_levels;
    // Not a check of tritonserver's: each level is a queue of its own, made when the model loads.
    if levels > MAX_PRIORITY_LEVELS {
        return Err(at(format!("priority levels must be at most {MAX_PRIORITY_LEVELS} for {name}")));
    }
    if levels != 0 {
        if db.default_priority_level == 0 || db.default_priority_level > levels {
            return Err(at(format!("default priority level must be in range [1, {levels}] for {name}")));
        }
        if db.priority_queue_policy.keys().any(|l| *l == 0 || *l > levels) {
            return Err(at(format!(
                "priority queue policy must have priority level in range [1, {levels}] for {name}"
            )));
        }
    }
    if db.preserve_ordering {
        if levels > 1 {
            return Err(at(format!("Only one priority level is allowed when 'preserve_ordering' is true for {name}")));
        }
        let delays = |p: &ModelQueuePolicy| {
            p.default_timeout_microseconds != 0 && p.timeout_action == TimeoutAction::Delay as i32
        };
        if db.default_queue_policy.as_ref().is_some_and(delays) || db.priority_queue_policy.values().any(delays) {
            return Err(at(format!(
                "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {name}"
            )));
        }
    }
    Ok(())
}

/// A decoupled model cannot enable the response cache (tritonserver's check; an ensemble with a
/// decoupled step is decoupled too, and is checked again once its steps are known).
pub fn check_response_cache(config: &ModelConfig) -> Result<(), ConfigError> {
    let decoupled = config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
    if decoupled && config.response_cache.as_ref().is_some_and(|c| c.enable) {
        return Err(ConfigError::at(
            "response_cache",
            format!(
                "Response Cache does not currently support model {} with 'decoupled' transaction policy. \
                 Please disable the response cache.",
                config.name
            ),
        ));
    }
    Ok(())
}

/// `sequence_batching`: each control kind at most once, on a named tensor used for one kind only,
/// with the values its kind needs; the strategy's settings in range.
fn check_sequence_batching(
    config: &ModelConfig,
    sb: &crate::proto::inference::ModelSequenceBatching,
    name: &str,
) -> Result<(), ConfigError> {
    let at = |message: String| ConfigError::at("sequence_batching", message);
    if config.response_cache.as_ref().is_some_and(|c| c.enable) {
        return Err(ConfigError::at(
            "response_cache",
            format!(
                "Response Cache does not currently support model {name} with sequence batching scheduler. \
                 Please disable the response cache."
            ),
        ));
    }
    for kind in [ControlKind::ControlSequenceStart, ControlKind::ControlSequenceEnd, ControlKind::ControlSequenceReady]
    {
        check_control(sb, kind, true, name).map_err(at)?;
    }
    if let Some(datatype) = check_control(sb, ControlKind::ControlSequenceCorrid, false, name).map_err(at)? {
        let allowed = [
            DataType::TypeUint64,
            DataType::TypeInt64,
            DataType::TypeUint32,
            DataType::TypeInt32,
            DataType::TypeString,
        ];
        if !allowed.iter().any(|d| *d as i32 == datatype) {
            return Err(at(format!(
                "unexpected data type for control CONTROL_SEQUENCE_CORRID for {name}. Allowed data types are \
                 TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
            )));
        }
    }
    match &sb.strategy_choice {
        Some(model_sequence_batching::StrategyChoice::Oldest(oldest)) => {
            for size in &oldest.preferred_batch_size {
                if *size <= 0 {
                    return Err(at(format!("sequence batching preferred batch size must be positive for {name}")));
                }
                if *size > config.max_batch_size {
                    return Err(at(format!(
                        "sequence batching preferred batch size must be <= max batch size for {name}"
                    )));
                }
            }
        }
        Some(model_sequence_batching::StrategyChoice::Direct(direct))
            if !(0.0..=1.0).contains(&direct.minimum_slot_utilization) =>
        {
            return Err(at(format!(
                "sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}"
            )));
        }
        _ => {}
    }
    Ok(())
}

/// The checks tritonserver makes of one control kind (`GetBooleanSequenceControlProperties` when
/// `boolean`, else `GetTypedSequenceControlProperties`). Returns the datatype a typed control
/// declares, when the kind is present.
fn check_control(
    sb: &crate::proto::inference::ModelSequenceBatching,
    kind: ControlKind,
    boolean: bool,
    name: &str,
) -> Result<Option<i32>, String> {
    let kind_name = kind.as_str_name();
    let mut seen_tensors = std::collections::HashSet::new();
    let mut found = None;
    for input in &sb.control_input {
        if input.name.is_empty() {
            return Err(format!("sequence batching control tensor must have a name for {name}"));
        }
        if !seen_tensors.insert(input.name.as_str()) {
            return Err(format!(
                "sequence batching control tensor '{}' is specified for multiple control kinds for {name}",
                input.name
            ));
        }
        for c in input.control.iter().filter(|c| c.kind == kind as i32) {
            if found.is_some() {
                return Err(format!("sequence batching specifies multiple {kind_name} tensors for {name}"));
            }
            found = Some(c.data_type);
            let lists = [c.int32_false_true.len(), c.fp32_false_true.len(), c.bool_false_true.len()];
            let given = lists.iter().filter(|n| **n != 0).count();
            if !boolean {
                if given != 0 {
                    return Err(format!(
                        "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or \
                         'bool_false_true' for {kind_name} for {name}"
                    ));
                }
                continue;
            }
            if given == 0 {
                return Err(format!(
                    "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or \
                     'bool_false_true' for {kind_name} for {name}"
                ));
            }
            if given > 1 {
                return Err(format!(
                    "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and \
                     'bool_false_true' for {kind_name} for {name}"
                ));
            }
            let (list, len) = if lists[0] != 0 {
                ("int32_false_true", lists[0])
            } else if lists[1] != 0 {
                ("fp32_false_true", lists[1])
            } else {
                ("bool_false_true", lists[2])
            };
            if len != 2 {
                return Err(format!(
                    "sequence batching control '{list}' must have exactly 2 entries for {kind_name} for {name}"
                ));
            }
        }
    }
    Ok(found)
}

/// One folder or file name: not empty, no separators, not `.` or `..`.
pub fn is_plain_name(name: &str) -> bool {
    let mut parts = std::path::Path::new(name).components();
    matches!(parts.next(), Some(std::path::Component::Normal(_)))
        && parts.next().is_none()
        && !name.contains(['/', '\\'])
}

/// A relative path of plain names only: it stays inside the folder it is joined to.
fn is_relative_inside(path: &str) -> bool {
    let path = std::path::Path::new(path);
    path.components().next().is_some() && path.components().all(|c| matches!(c, std::path::Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_pbtxt;

    fn check(src: &str) -> Result<(), ConfigError> {
        let mut config = parse_pbtxt(src).unwrap();
        let no_files = crate::config::FirstVersion { exists: false, entries: Vec::new() };
        crate::config::fill_backend_fields(&mut config, "m", &no_files)?;
        crate::config::normalize(&mut config);
        validate_model_config(&config)
    }

    #[test]
    fn rejects_with_tritonservers_words() {
        for (src, message) in [
            (r#"platform: "onnxruntime_onnx" max_batch_size: -1"#, "'max_batch_size' must be non-negative value for m"),
            (r#"platform: "x""#, "unexpected platform type 'x' for m"),
            (
                r#"platform: "ensemble" backend: "b""#,
                "Ensemble model 'm' must have platform type 'ensemble' and empty backend type",
            ),
            (
                r#"platform: "tensorrt_plan" backend: "onnxruntime""#,
                "unexpected 'platform' and 'backend' pair, got:tensorrt_plan, onnxruntime",
            ),
            (r#"platform: "ensemble""#, "ensemble scheduling must be set for ensemble m whose platform is ensemble"),
            (
                r#"backend: "b" max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }"#,
                "dynamic batching preferred size must be <= max batch size for m",
            ),
            (
                r#"backend: "b" max_batch_size: 4 dynamic_batching { priority_levels: 2 }"#,
                "default priority level must be in range [1, 2] for m",
            ),
            (
                r#"backend: "b" max_batch_size: 4 dynamic_batching { preserve_ordering: true
                   default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5 } }"#,
                "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m",
            ),
            (
                r#"backend: "b" sequence_batching { control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_READY } ] } ] }"#,
                "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' \
                 for CONTROL_SEQUENCE_READY for m",
            ),
            (
                r#"backend: "b" sequence_batching { control_input [
                   { name: "S" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
                   { name: "T" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] } ] }"#,
                "sequence batching specifies multiple CONTROL_SEQUENCE_END tensors for m",
            ),
        ] {
            assert_eq!(check(src).unwrap_err().message, message, "{src}");
        }
    }
}
