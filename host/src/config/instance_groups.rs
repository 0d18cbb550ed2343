//! Instance groups: tritonserver's `NormalizeInstanceGroup` (names, kinds, counts, GPUs filled in)
//! and `ValidateInstanceGroup` (the kinds and GPUs that cannot work), with its messages. Both run
//! when the model is created, after its version folders are known, as in tritonserver.
use std::collections::HashSet;

use super::ConfigError;
use super::schema::model_instance_group::Kind;
use super::schema::{ModelConfig, ModelInstanceGroup};

/// Fills in what tritonserver fills in: a model with no group gets one named after the model; an
/// unnamed group is `<model>_<index>`; KIND_AUTO becomes KIND_GPU where `auto_gpu` (there are GPUs
/// and the backend can use them; every group naming GPUs counts as asking for them) else KIND_CPU;
/// a count below 1 is tritonserver's default (2 CPU instances for ONNX Runtime, else 1); KIND_GPU
/// with no `gpus` means every GPU. Ensembles have no instances of their own.
pub fn normalize_instance_groups(config: &mut ModelConfig, gpu_count: usize, auto_gpu: bool) {
    if super::ensemble_scheduling(config).is_some() {
        return;
    }
    if config.instance_group.is_empty() {
        config.instance_group.push(ModelInstanceGroup { name: config.name.clone(), ..Default::default() });
    }
    let model_name = config.name.clone();
    let backend = config.backend.clone();
    let gpu_ids = || (0..gpu_count as i32).collect::<Vec<i32>>();
    for (i, group) in config.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{model_name}_{i}");
        }
        if group.kind == Kind::Auto as i32 {
            let listed_exist = group.gpus.iter().all(|g| *g >= 0 && (*g as usize) < gpu_count);
            let gpu = gpu_count > 0 && listed_exist && (auto_gpu || !group.gpus.is_empty());
            group.kind = if gpu { Kind::Gpu as i32 } else { Kind::Cpu as i32 };
        }
        if group.count < 1 {
            let onnx_cpu = group.kind == Kind::Cpu as i32 && (backend == "onnxruntime" || backend == "tensorflow");
            group.count = if onnx_cpu { 2 } else { 1 };
        }
        if group.kind == Kind::Gpu as i32 && group.gpus.is_empty() {
            group.gpus = gpu_ids();
        }
    }
}

/// Rejects the groups tritonserver rejects: GPUs listed by a group that does not run on them,
/// KIND_GPU without GPUs, and a GPU id that is not one of this machine's; `profile` outside
/// TensorRT.
pub fn validate_instance_groups(config: &ModelConfig, gpu_count: usize) -> Result<(), ConfigError> {
    if super::ensemble_scheduling(config).is_some() {
        return Ok(());
    }
    let model = &config.name;
    if config.instance_group.is_empty() {
        return Err(ConfigError::new(format!("must specify one or more 'instance group's for {model}")));
    }
    let supported: Vec<String> = (0..gpu_count).map(|g| g.to_string()).collect();
    let mut names = HashSet::new();
    for (i, group) in config.instance_group.iter().enumerate() {
        let at = |message: String| ConfigError::at(format!("instance_group[{i}]"), message);
        let name = &group.name;
        match Kind::try_from(group.kind).unwrap_or(Kind::Auto) {
            Kind::Model | Kind::Cpu if !group.gpus.is_empty() => {
                let kind = if group.kind == Kind::Model as i32 { "KIND_MODEL" } else { "KIND_CPU" };
                return Err(at(format!(
                    "instance group {name} of model {model} has kind {kind} but specifies one or more GPUs"
                )));
            }
            Kind::Model | Kind::Cpu => {}
            Kind::Gpu => {
                if group.gpus.is_empty() {
                    return Err(at(format!(
                        "instance group {name} of model {model} has kind KIND_GPU but no GPUs are available"
                    )));
                }
                if let Some(g) = group.gpus.iter().find(|g| **g < 0 || **g as usize >= gpu_count) {
                    // tritonserver names the minimum CUDA compute capability it was built for;
                    // Nereus requires none of its own (ONNX Runtime's CUDA provider decides).
                    return Err(at(format!(
                        "instance group {name} of model {model} specifies invalid or unsupported gpu id {g}. \
                         GPUs with at least the minimum required CUDA compute compatibility are: {}",
                        supported.join(", ")
                    )));
                }
            }
            Kind::Auto => {
                return Err(at(format!("instance group {name} of model {model} has unexpected kind KIND_AUTO")));
            }
        }
        if config.platform != "tensorrt_plan" && !group.profile.is_empty() {
            return Err(at(format!(
                "instance group {name} of model {model} and platform {}specifies profile field which is only \
                 supported for TensorRT models",
                config.platform
            )));
        }
        // Not a check of tritonserver's: two groups of one name would share their instances' names.
        if !names.insert(name.as_str()) {
            return Err(at(format!("instance_group[{i}]: duplicate group name '{name}'")));
        }
    }
    // Not a check of tritonserver's: every instance is described before any backend's own limit is
    // looked at, so a count of 2^31 (which a load request may send) would exhaust memory first.
    let instances = config.instance_group.iter().try_fold(0u64, |total, g| {
        let each = g.gpus.len().max(1) as u64;
        total.checked_add(u64::try_from(g.count).ok()?.checked_mul(each)?)
    });
    match instances {
        Some(n) if n <= MAX_MODEL_INSTANCES => Ok(()),
        _ => Err(ConfigError::at(
            "instance_group",
            format!("model {model} asks for more than the {MAX_MODEL_INSTANCES} instances a model may have"),
        )),
    }
}

/// The most instances one model may ask for, all groups and GPUs together (tritonserver sets no
/// bound; a Wasm model is held to `--sandbox-max-instances`, lower, after this).
pub const MAX_MODEL_INSTANCES: u64 = 4096;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_pbtxt;

    fn normalized(src: &str, gpus: usize, auto_gpu: bool) -> ModelConfig {
        let mut config = parse_pbtxt(src).unwrap();
        config.name = "m".into();
        normalize_instance_groups(&mut config, gpus, auto_gpu);
        config
    }

    #[test]
    fn defaults_follow_tritonserver() {
        let groups = |c: &ModelConfig| -> Vec<(String, i32, i32, Vec<i32>)> {
            c.instance_group.iter().map(|g| (g.name.clone(), g.kind, g.count, g.gpus.clone())).collect()
        };
        let (cpu, gpu) = (Kind::Cpu as i32, Kind::Gpu as i32);
        assert_eq!(groups(&normalized(r#"backend: "b""#, 0, false)), [("m".into(), cpu, 1, vec![])]);
        assert_eq!(groups(&normalized(r#"backend: "onnxruntime""#, 0, false)), [("m".into(), cpu, 2, vec![])]);
        assert_eq!(groups(&normalized(r#"backend: "onnxruntime""#, 2, true)), [("m".into(), gpu, 1, vec![0, 1])]);
        assert_eq!(
            groups(&normalized(
                "instance_group [ { count: -3 }, { name: \"g\" kind: KIND_GPU gpus: [ 1 ] } ]",
                2,
                false
            )),
            [("m_0".into(), cpu, 1, vec![]), ("g".into(), gpu, 1, vec![1])]
        );
        assert_eq!(
            groups(&normalized("instance_group [ { gpus: [ 1 ] } ]", 2, false)),
            [("m_0".into(), gpu, 1, vec![1])]
        );
    }

    #[test]
    fn rejects_with_tritonservers_words() {
        for (src, gpus, message) in [
            (
                "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]",
                1,
                "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs",
            ),
            (
                "instance_group [ { kind: KIND_GPU } ]",
                0,
                "instance group m_0 of model m has kind KIND_GPU but no GPUs are available",
            ),
            (
                "instance_group [ { kind: KIND_GPU gpus: [ 42 ] } ]",
                1,
                "instance group m_0 of model m specifies invalid or unsupported gpu id 42. GPUs with at least the \
                 minimum required CUDA compute compatibility are: 0",
            ),
        ] {
            let config = normalized(src, gpus, false);
            assert_eq!(validate_instance_groups(&config, gpus).unwrap_err().message, message, "{src}");
        }
    }
}
