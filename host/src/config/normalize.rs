//! What tritonserver fills into every configuration before it validates it, whether auto-complete
//! is on or not: the backend fields, from the platform, the default model file name or the files of
//! the first version folder (`AutoCompleteBackendFields`), then the defaults of
//! `NormalizeModelConfig`.
use super::ConfigError;
use super::schema::model_config::SchedulingChoice;
use super::schema::model_version_policy::{Latest, PolicyChoice};
use super::schema::{ModelConfig, ModelVersionPolicy};
use crate::proto::inference::ModelOptimizationPolicy;
use crate::proto::inference::model_optimization_policy::PinnedMemoryBuffer;

/// What is in the model folder's first version folder (in name order, as tritonserver picks it),
/// which is all the backend fields are inferred from.
pub struct FirstVersion {
    /// Whether the model folder has a sub-folder at all.
    pub exists: bool,
    /// `(file name, is a folder)` of each entry of it.
    pub entries: Vec<(String, bool)>,
}

impl FirstVersion {
    fn file(&self, name: &str) -> bool {
        self.entries.iter().any(|(n, dir)| n == name && !dir)
    }

    fn folder(&self, name: &str) -> bool {
        self.entries.iter().any(|(n, dir)| n == name && *dir)
    }

    fn any(&self, name: &str) -> bool {
        self.entries.iter().any(|(n, _)| n == name)
    }
}

/// Fills in `name`, `backend`, `platform` and `default_model_filename` as tritonserver's
/// `AutoCompleteBackendFields` does. A configuration that names nothing and whose version folder
/// holds no model file a framework is known by takes its backend from the model name
/// (`<model>.<backend>`); without a `.` in it, the backend cannot be determined.
pub fn fill_backend_fields(
    config: &mut ModelConfig,
    model_name: &str,
    first: &FirstVersion,
) -> Result<(), ConfigError> {
    if config.name.is_empty() {
        config.name = model_name.to_string();
    }
    let nothing_named = |c: &ModelConfig| c.platform.is_empty() && c.default_model_filename.is_empty();
    // TensorFlow
    if config.platform.is_empty() && (config.backend.is_empty() || config.backend == "tensorflow") {
        match config.default_model_filename.as_str() {
            "model.savedmodel" => config.platform = "tensorflow_savedmodel".into(),
            "model.graphdef" => config.platform = "tensorflow_graphdef".into(),
            "" if first.exists => {
                if first.folder("model.savedmodel") {
                    config.platform = "tensorflow_savedmodel".into();
                }
                if first.file("model.graphdef") {
                    config.platform = "tensorflow_graphdef".into();
                }
            }
            _ => {}
        }
    }
    if config.platform == "tensorflow_savedmodel" || config.platform == "tensorflow_graphdef" {
        set_if_empty(&mut config.backend, "tensorflow");
        let file = if config.platform == "tensorflow_savedmodel" { "model.savedmodel" } else { "model.graphdef" };
        set_if_empty(&mut config.default_model_filename, file);
        return Ok(());
    }
    // TensorRT
    if config.backend.is_empty()
        && (config.platform == "tensorrt_plan"
            || config.default_model_filename == "model.plan"
            || (nothing_named(config) && first.exists && first.file("model.plan")))
    {
        config.backend = "tensorrt".into();
    }
    if config.backend == "tensorrt" {
        set_if_empty(&mut config.platform, "tensorrt_plan");
        set_if_empty(&mut config.default_model_filename, "model.plan");
        return Ok(());
    }
    // ONNX Runtime (a large model is a folder named model.onnx)
    if config.backend.is_empty()
        && (config.platform == "onnxruntime_onnx"
            || config.default_model_filename == "model.onnx"
            || (nothing_named(config) && first.exists && first.any("model.onnx")))
    {
        config.backend = "onnxruntime".into();
    }
    if config.backend == "onnxruntime" {
        set_if_empty(&mut config.platform, "onnxruntime_onnx");
        set_if_empty(&mut config.default_model_filename, "model.onnx");
        return Ok(());
    }
    // OpenVINO
    if config.backend.is_empty()
        && (config.default_model_filename == "model.xml"
            || (nothing_named(config) && first.exists && first.any("model.xml")))
    {
        config.backend = "openvino".into();
    }
    if config.backend == "openvino" {
        set_if_empty(&mut config.default_model_filename, "model.xml");
        return Ok(());
    }
    // PyTorch
    if config.backend.is_empty() {
        if config.platform == "pytorch_libtorch" || config.default_model_filename == "model.pt" {
            config.backend = "pytorch".into();
        } else if nothing_named(config) && first.exists && first.file("model.pt") {
            config.backend = "pytorch".into();
            config.platform = "pytorch_libtorch".into();
        }
    }
    if config.backend == "pytorch" {
        if config.platform.is_empty() {
            config.platform = "pytorch_libtorch".into();
            set_if_empty(&mut config.default_model_filename, "model.pt");
        }
        return Ok(());
    }
    // Python
    if config.backend.is_empty()
        && (config.default_model_filename == "model.py"
            || (nothing_named(config) && first.exists && first.any("model.py")))
    {
        config.backend = "python".into();
    }
    if config.backend == "python" {
        set_if_empty(&mut config.default_model_filename, "model.py");
        return Ok(());
    }
    // A custom backend, named by the model: `<model>.<backend>`.
    if config.backend.is_empty() && nothing_named(config) {
        let Some((_, backend)) = model_name.split_once('.') else {
            return Err(ConfigError::new(format!(
                "Invalid model name: Could not determine backend for model '{model_name}' with no backend in model \
                 configuration. Expected model name of the form 'model.<backend_name>'."
            )));
        };
        config.backend = backend.to_string();
        config.default_model_filename = format!("model.{backend}");
    }
    Ok(())
}

fn set_if_empty(field: &mut String, value: &str) {
    if field.is_empty() {
        *field = value.to_string();
    }
}

/// tritonserver's `NormalizeModelConfig`: the latest version when no policy is given, the
/// preferred batch size `[max_batch_size]` for dynamic batching, and (for a model with instances
/// of its own) pinned memory for inputs and outputs.
pub fn normalize(config: &mut ModelConfig) {
    if config.version_policy.as_ref().is_none_or(|p| p.policy_choice.is_none()) {
        config.version_policy =
            Some(ModelVersionPolicy { policy_choice: Some(PolicyChoice::Latest(Latest { num_versions: 1 })) });
    }
    let max_batch_size = config.max_batch_size;
    if let Some(SchedulingChoice::DynamicBatching(db)) = &mut config.scheduling_choice
        && db.preferred_batch_size.is_empty()
        && max_batch_size > 0
    {
        db.preferred_batch_size.push(max_batch_size);
    }
    if super::ensemble_scheduling(config).is_none() {
        let optimization = config.optimization.get_or_insert_with(ModelOptimizationPolicy::default);
        optimization.input_pinned_memory.get_or_insert(PinnedMemoryBuffer { enable: true });
        optimization.output_pinned_memory.get_or_insert(PinnedMemoryBuffer { enable: true });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(config: &str, model: &str, files: &[&str]) -> Result<ModelConfig, ConfigError> {
        let mut config = crate::config::parse_pbtxt(config).unwrap();
        let first = FirstVersion { exists: true, entries: files.iter().map(|f| (f.to_string(), false)).collect() };
        fill_backend_fields(&mut config, model, &first).map(|_| config)
    }

    #[test]
    fn backend_fields_come_from_the_platform_the_file_name_or_the_files() {
        let fields = |c: ModelConfig| (c.name, c.platform, c.backend, c.default_model_filename);
        let s = |v: &str| v.to_string();
        assert_eq!(
            fields(filled("", "m", &["model.onnx"]).unwrap()),
            (s("m"), s("onnxruntime_onnx"), s("onnxruntime"), s("model.onnx"))
        );
        assert_eq!(
            fields(filled(r#"platform: "onnxruntim" default_model_filename: "model.onnx""#, "m", &[]).unwrap()),
            (s("m"), s("onnxruntim"), s("onnxruntime"), s("model.onnx"))
        );
        assert_eq!(
            fields(filled("", "m.identity", &[]).unwrap()),
            (s("m.identity"), s(""), s("identity"), s("model.identity"))
        );
        assert_eq!(fields(filled(r#"platform: "ensemble""#, "e", &[]).unwrap()), (s("e"), s("ensemble"), s(""), s("")));
        assert_eq!(
            filled("", "m", &["model.bin"]).unwrap_err().message,
            "Invalid model name: Could not determine backend for model 'm' with no backend in model configuration. \
             Expected model name of the form 'model.<backend_name>'."
        );
    }

    #[test]
    fn normalizing_fills_tritonservers_defaults() {
        let mut config = crate::config::parse_pbtxt("max_batch_size: 8 dynamic_batching { }").unwrap();
        normalize(&mut config);
        let Some(SchedulingChoice::DynamicBatching(db)) = &config.scheduling_choice else { panic!("lost") };
        assert_eq!(db.preferred_batch_size, [8]);
        let pinned = config.optimization.as_ref().and_then(|o| o.input_pinned_memory.as_ref()).map(|p| p.enable);
        assert_eq!(pinned, Some(true));
        assert!(matches!(
            config.version_policy.and_then(|p| p.policy_choice),
            Some(PolicyChoice::Latest(Latest { num_versions: 1 }))
        ));
    }
}
