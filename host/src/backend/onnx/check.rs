//! The configuration checked against the model's own inputs and outputs when an instance's session
//! is created, as tritonserver's ONNX Runtime backend checks them (`ValidateInputs`,
//! `ValidateOutputs`), with its messages: how many inputs, which names, datatypes, and dims.
use super::autocomplete::Outlets;
use crate::config::ModelConfig;
use crate::config::schema::model_config::SchedulingChoice;
use crate::load_error::OnnxError;
use crate::proto::inference::DataType as ConfigType;
use crate::tensor::shape_string;

/// Checks `config` against the session's `inputs` and `outputs`. `overridable`: the model's
/// initializers that are also graph inputs, which a configuration may declare as (optional)
/// inputs, as tritonserver's backend merges them in after counting the inputs.
pub fn check_io(
    config: &ModelConfig,
    inputs: &Outlets,
    overridable: &Outlets,
    outputs: &Outlets,
) -> Result<(), OnnxError> {
    let model = &config.name;
    let invalid = |message: String| Err(OnnxError::Mismatch(message));
    let mut expected = config.input.iter().filter(|i| !i.optional).count() + config.batch_input.len();
    if let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice {
        // One tensor for each control kind present, and one per implicit state.
        let mut kinds: Vec<i32> = sb.control_input.iter().flat_map(|c| c.control.iter().map(|k| k.kind)).collect();
        kinds.sort_unstable();
        kinds.dedup();
        expected += kinds.len() + sb.state.len();
    }
    if inputs.len() != expected {
        return invalid(format!(
            "unable to load model '{model}', configuration expects {expected} inputs, model provides {}",
            inputs.len()
        ));
    }
    let inputs: Outlets = inputs.iter().chain(overridable).cloned().collect();
    let inputs = &inputs;
    let batching = config.max_batch_size > 0;
    for input in &config.input {
        if input.optional && batching {
            return invalid(format!(
                "unable to load model '{model}', optional input '{}' is not supported for models that support \
                 batching",
                input.name
            ));
        }
        let Some((_, datatype, model_dims)) = inputs.iter().find(|(n, ..)| *n == input.name) else {
            return Err(OnnxError::NoSuchInput { input: input.name.clone(), available: names(inputs) });
        };
        check_datatype(model, "input", &input.name, input.data_type, *datatype)?;
        // Ragged inputs are batched along their only dimension; their dims are the server's.
        if input.allow_ragged_batch {
            continue;
        }
        let dims = input.reshape.as_ref().map_or(&input.dims, |r| &r.shape);
        check_dims(model, &input.name, model_dims, dims, config.max_batch_size, false)?;
    }
    for output in &config.output {
        let Some((_, datatype, model_dims)) = outputs.iter().find(|(n, ..)| *n == output.name) else {
            return Err(OnnxError::NoSuchOutput { output: output.name.clone(), available: names(outputs) });
        };
        check_datatype(model, "output", &output.name, output.data_type, *datatype)?;
        if config.batch_output.iter().any(|b| b.target_name.contains(&output.name)) {
            continue;
        }
        let dims = output.reshape.as_ref().map_or(&output.dims, |r| &r.shape);
        check_dims(model, &output.name, model_dims, dims, config.max_batch_size, true)?;
    }
    Ok(())
}

/// The model's tensor names in name order, as tritonserver lists the allowed ones.
fn names(list: &Outlets) -> Vec<String> {
    let mut names: Vec<String> = list.iter().map(|(n, ..)| n.clone()).collect();
    names.sort();
    names
}

fn check_datatype(model: &str, what: &str, name: &str, configured: i32, provided: ConfigType) -> Result<(), OnnxError> {
    if configured == provided as i32 {
        return Ok(());
    }
    let configured =
        ConfigType::try_from(configured).map_or_else(|_| configured.to_string(), |t| t.as_str_name().into());
    Err(OnnxError::Mismatch(format!(
        "unable to load model '{model}', configuration expects datatype {configured} for {what} '{name}', model \
         provides {}",
        provided.as_str_name()
    )))
}

/// tritonserver's `CompareDimsSupported`: the model's shape against the batch dimension (when the
/// model batches) and the configured dims; a variable model dimension matches anything unless
/// `exact`. A scalar of the model matches dims of ones.
fn check_dims(
    model: &str,
    name: &str,
    model_dims: &[i64],
    dims: &[i64],
    max_batch_size: i32,
    exact: bool,
) -> Result<(), OnnxError> {
    if model_dims.is_empty() {
        if dims.iter().all(|d| *d == 1) {
            return Ok(());
        }
        return Err(OnnxError::Mismatch(format!(
            "unable to load model '{model}', scalar tensor '{name}', should only provide 1 in the model configuration \
             when the model doesn't support batching. Model configuration provided: {}.",
            shape_string(dims)
        )));
    }
    let matches = |full: &[i64]| {
        model_dims.len() == full.len() && model_dims.iter().zip(full).all(|(m, d)| (!exact && *m == -1) || m == d)
    };
    if max_batch_size > 0 {
        if model_dims[0] != -1 {
            return Err(OnnxError::Mismatch(format!(
                "model '{model}', tensor '{name}': for the model to support batching the shape should have at least 1 \
                 dimension and the first dimension must be -1; but shape expected by the model is {}",
                shape_string(model_dims)
            )));
        }
        let full: Vec<i64> = std::iter::once(-1).chain(dims.iter().copied()).collect();
        if !matches(&full) {
            return Err(OnnxError::Mismatch(format!(
                "model '{model}', tensor '{name}': the model expects {} dimensions (shape {}) but the model \
                 configuration specifies {} dimensions (an initial batch dimension because max_batch_size > 0 \
                 followed by the explicit tensor shape, making complete shape {})",
                model_dims.len(),
                shape_string(model_dims),
                full.len(),
                shape_string(&full)
            )));
        }
    } else if !matches(dims) {
        return Err(OnnxError::Mismatch(format!(
            "model '{model}', tensor '{name}': the model expects {} dimensions (shape {}) but the model configuration \
             specifies {} dimensions (shape {})",
            model_dims.len(),
            shape_string(model_dims),
            dims.len(),
            shape_string(dims)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outlets(list: &[(&str, Vec<i64>)]) -> Outlets {
        list.iter().map(|(n, d)| (n.to_string(), ConfigType::TypeInt32, d.clone())).collect()
    }

    fn check(config: &str) -> Result<(), String> {
        let mut config = crate::config::parse_pbtxt(config).unwrap();
        config.name = "m".into();
        let inputs = outlets(&[("INPUT0", vec![-1, 16]), ("INPUT1", vec![-1, 16])]);
        let outputs = outlets(&[("OUTPUT0", vec![-1, 16])]);
        check_io(&config, &inputs, &Vec::new(), &outputs).map_err(|e| e.to_string())
    }

    const IO: &str = r#"input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]"#;

    #[test]
    fn mismatches_read_as_tritonservers() {
        let out = r#"output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]"#;
        assert_eq!(check(&format!("max_batch_size: 4 {IO} {out}")), Ok(()));
        assert_eq!(
            check(&format!(
                r#"max_batch_size: 4 input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }} ] {out}"#
            )),
            Err("unable to load model 'm', configuration expects 1 inputs, model provides 2".into())
        );
        assert_eq!(
            check(&format!(
                r#"max_batch_size: 4 {IO} output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]"#
            )),
            Err("model 'm', tensor 'OUTPUT0': the model expects 2 dimensions (shape [-1,16]) but the model \
                 configuration specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed \
                 by the explicit tensor shape, making complete shape [-1,1])"
                .into())
        );
        assert_eq!(
            check(&format!(
                r#"max_batch_size: 4 {IO} output [ {{ name: "OUTPUT0" data_type: TYPE_INT8 dims: [ 16 ] }} ]"#
            )),
            Err("unable to load model 'm', configuration expects datatype TYPE_INT8 for output 'OUTPUT0', model \
                 provides TYPE_INT32"
                .into())
        );
        assert_eq!(
            check(&format!(r#"max_batch_size: 4 {IO} output [ {{ name: "X" data_type: TYPE_INT32 dims: [ 16 ] }} ]"#)),
            Err("unexpected inference output 'X', allowed outputs are: OUTPUT0".into())
        );
    }
}
