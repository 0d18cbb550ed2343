//! tritonserver's `ValidateModelIOConfig`: each input's and output's name, datatype, dims and
//! reshape, and the batch inputs and outputs, with tritonserver's messages (` for <model>` at the
//! end). tritonserver checks these when the configuration is read only when auto-complete is off;
//! with it on, once the backend has completed them.
use std::collections::HashSet;

use super::ConfigError;
use super::schema::ModelConfig;
use crate::proto::inference::ModelTensorReshape;
use crate::proto::inference::{DataType, batch_input, batch_output, model_input};

/// What [`check_tensor`] looks at, the same for an input and an output.
struct Tensor<'a> {
    /// `"model input "` or `"model output "`.
    what: &'static str,
    name: &'a str,
    data_type: i32,
    dims: &'a [i64],
    reshape: Option<&'a ModelTensorReshape>,
    is_shape_tensor: bool,
    is_non_linear_format_io: bool,
}

pub fn validate_io(config: &ModelConfig) -> Result<(), ConfigError> {
    let name = &config.name;
    let located = |path: String| move |message: String| ConfigError::at(path.clone(), format!("{message} for {name}"));
    for (i, input) in config.input.iter().enumerate() {
        let at = located(format!("input[{i}]"));
        let tensor = Tensor {
            what: "model input ",
            name: &input.name,
            data_type: input.data_type,
            dims: &input.dims,
            reshape: input.reshape.as_ref(),
            is_shape_tensor: input.is_shape_tensor,
            is_non_linear_format_io: input.is_non_linear_format_io,
        };
        check_tensor(&tensor, config).map_err(&at)?;
        let format = input.format;
        if (format == model_input::Format::Nhwc as i32 || format == model_input::Format::Nchw as i32)
            && input.dims.len() != 3
        {
            return Err(at("model input NHWC/NCHW require 3 dims".into()));
        }
    }
    for (i, output) in config.output.iter().enumerate() {
        let tensor = Tensor {
            what: "model output ",
            name: &output.name,
            data_type: output.data_type,
            dims: &output.dims,
            reshape: output.reshape.as_ref(),
            is_shape_tensor: output.is_shape_tensor,
            is_non_linear_format_io: output.is_non_linear_format_io,
        };
        check_tensor(&tensor, config).map_err(located(format!("output[{i}]")))?;
    }
    check_batch_io(config).map_err(located("batch_input".into()))?;
    // Not checks of tritonserver's, which would fail at the first request instead.
    for (list, names) in [
        ("input", config.input.iter().map(|t| t.name.as_str()).collect::<Vec<_>>()),
        ("output", config.output.iter().map(|t| t.name.as_str()).collect()),
    ] {
        let mut seen = HashSet::new();
        if let Some((i, dup)) = names.iter().enumerate().find(|(_, n)| !seen.insert(**n)) {
            return Err(ConfigError::at(format!("{list}[{i}]"), format!("{list}[{i}] '{dup}': duplicate {list} name")));
        }
    }
    Ok(())
}

/// tritonserver's `ValidateIOShape`, then the platform-specific flags.
fn check_tensor(t: &Tensor<'_>, config: &ModelConfig) -> Result<(), String> {
    let what = t.what;
    if t.name.is_empty() {
        return Err(format!("{what}must specify 'name'"));
    }
    let named = format!("{what}'{}' ", t.name);
    if t.data_type == DataType::TypeInvalid as i32 {
        return Err(format!("{named}must specify 'data_type'"));
    }
    if t.dims.is_empty() {
        return Err(format!("{named}must specify 'dims'"));
    }
    if t.reshape.is_some_and(|r| r.shape.is_empty()) && config.max_batch_size == 0 {
        return Err(format!(
            "{named}cannot have empty reshape for non-batching model as scalar tensors are not supported"
        ));
    }
    if t.dims.iter().any(|d| *d < 1 && *d != -1) {
        return Err(format!("{named}dimension must be integer >= 1, or -1 to indicate a variable-size dimension"));
    }
    if let Some(reshape) = t.reshape {
        if reshape.shape.iter().any(|d| *d < 1 && *d != -1) {
            return Err(format!(
                "{named}reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension"
            ));
        }
        check_reshape(t.dims, &reshape.shape).map_err(|why| format!("{named}{why}"))?;
    }
    if config.platform != "tensorrt_plan" {
        if t.is_shape_tensor {
            return Err("shape tensors are only supported for TensorRT platform".into());
        }
        if t.is_non_linear_format_io {
            return Err("Non-linear IO format is only supported for the TensorRT platform".into());
        }
    } else if t.is_non_linear_format_io && t.dims.len() != 3 {
        let kind = if what.contains("input") { "input" } else { "output" };
        return Err(format!("Non-linear IO format {kind} requires 3 dims"));
    }
    Ok(())
}

/// The element count of `dims`, -1 when one is variable (tritonserver's `GetElementCount`); an
/// empty shape counts 0 elements, as tritonserver counts it here.
fn element_count(dims: &[i64]) -> i64 {
    if dims.is_empty() {
        return 0;
    }
    if dims.contains(&-1) {
        return -1;
    }
    dims.iter().fold(1i64, |n, d| n.saturating_mul(*d))
}

/// `dims` and `reshape` must hold as many elements; where they have variable dimensions, as many
/// between each pair of them (`[2, 4, -1, 6]` to `[8, -1, 1, 6]` is a valid reshape).
fn check_reshape(dims: &[i64], reshape: &[i64]) -> Result<(), &'static str> {
    let (dims_size, reshape_size) = (element_count(dims), element_count(reshape));
    // An empty reshape (a scalar of a batching model) needs dims of one element.
    if dims_size != reshape_size && (reshape_size != 0 || dims_size != 1) {
        return Err("has different size for dims and reshape");
    }
    if dims_size == -1 {
        let runs = |shape: &[i64]| -> Vec<i64> {
            shape.split(|d| *d == -1).map(|run| run.iter().fold(1i64, |n, d| n.saturating_mul(*d))).collect()
        };
        let (a, b) = (runs(dims), runs(reshape));
        if a.len() != b.len() {
            return Err("has different number of variable-size dimensions for dims and reshape");
        }
        if a != b {
            return Err("has different size for dims and reshape");
        }
    }
    Ok(())
}

/// tritonserver's `ValidateBatchIO`.
fn check_batch_io(config: &ModelConfig) -> Result<(), String> {
    let inputs: HashSet<&str> = config.input.iter().map(|i| i.name.as_str()).collect();
    let outputs: HashSet<&str> = config.output.iter().map(|o| o.name.as_str()).collect();
    for b in &config.batch_input {
        let kind = batch_input::Kind::try_from(b.kind).map_err(|_| format!("unknown batch input kind '{}'", b.kind))?;
        if b.source_input.len() != 1 {
            return Err(format!(
                "batch input kind '{}' expects 1 source input, got {}",
                kind.as_str_name(),
                b.source_input.len()
            ));
        }
        if b.data_type != DataType::TypeInt32 as i32 && b.data_type != DataType::TypeFp32 as i32 {
            return Err("batch input data type must be TYPE_INT32 or TYPE_FP32".into());
        }
        if let Some(unknown) = b.source_input.iter().find(|s| !inputs.contains(s.as_str())) {
            return Err(format!("unknown source input name '{unknown}'"));
        }
    }
    for b in &config.batch_output {
        let kind =
            batch_output::Kind::try_from(b.kind).map_err(|_| format!("unknown batch output kind '{}'", b.kind))?;
        if b.source_input.len() != 1 {
            return Err(format!(
                "batch output kind '{}' expects 1 source input, got {}",
                kind.as_str_name(),
                b.source_input.len()
            ));
        }
        if let Some(unknown) = b.source_input.iter().find(|s| !inputs.contains(s.as_str())) {
            return Err(format!("unknown source input name '{unknown}'"));
        }
        let mut targets = HashSet::new();
        for target in &b.target_name {
            if !outputs.contains(target.as_str()) {
                return Err(format!("unknown target output name '{target}'"));
            }
            if !targets.insert(target.as_str()) {
                return Err(format!("target output name '{target}' can only be specified once"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_pbtxt;

    fn check(src: &str) -> Result<(), ConfigError> {
        let mut config = parse_pbtxt(src).unwrap();
        config.name = "m".into();
        validate_io(&config)
    }

    #[test]
    fn reshapes_compare_the_runs_between_variable_dimensions() {
        assert_eq!(check_reshape(&[2, 4, -1, 6], &[8, -1, 1, 6]), Ok(()));
        assert_eq!(check_reshape(&[1], &[]), Ok(()));
        assert_eq!(check_reshape(&[2, 3], &[5]), Err("has different size for dims and reshape"));
        assert_eq!(
            check_reshape(&[2, -1, -1], &[2, -1]),
            Err("has different number of variable-size dimensions for dims and reshape")
        );
        assert_eq!(check_reshape(&[2, -1, 3], &[3, -1, 2]), Err("has different size for dims and reshape"));
    }

    #[test]
    fn rejects_with_tritonservers_words() {
        for (src, message) in [
            (r#"input [ { name: "input" dims: [ 4 ] } ]"#, "model input 'input' must specify 'data_type' for m"),
            (
                r#"output [ { name: "output" data_type: TYPE_FP32 dims: [ 0 ] } ]"#,
                "model output 'output' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m",
            ),
            (
                r#"input [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ ] } } ]"#,
                "model input 'input' cannot have empty reshape for non-batching model as scalar tensors are not \
                 supported for m",
            ),
            (
                r#"input [ { name: "I" data_type: TYPE_FP32 dims: [ -1 ] } ]
                   batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_FP32 } ]"#,
                "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0 for m",
            ),
            (
                r#"input [ { name: "I" data_type: TYPE_FP32 dims: [ -1 ] } ] output [ { name: "O" data_type: TYPE_FP32 dims: [ -1 ] } ]
                   batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: [ "O", "O" ] source_input: "I" } ]"#,
                "target output name 'O' can only be specified once for m",
            ),
            (
                r#"input [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ]"#,
                "input[1] 'I': duplicate input name",
            ),
        ] {
            assert_eq!(check(src).unwrap_err().message, message, "{src}");
        }
    }
}
