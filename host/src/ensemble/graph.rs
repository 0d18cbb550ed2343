//! Building an ensemble's step graph from `ensemble_scheduling`, with the checks Triton makes at
//! load: known and available composing models, known step inputs and outputs, every consumed tensor
//! produced exactly once, no cycles, matching datatypes, every ensemble output produced.
use std::collections::HashMap;

use super::{Ensemble, Step};
use crate::config::ModelConfig;
use crate::load_error::{EnsembleError, StepError};
use crate::model::ModelResolver;
use crate::tensor::DataType;

/// A tensor of the graph: its datatype, and who makes it.
struct Produced {
    datatype: DataType,
    /// `None`: an ensemble input.
    step: Option<usize>,
}

impl Ensemble {
    /// Builds and checks the graph; an error is the reason the ensemble is unavailable, naming the
    /// step at fault.
    pub fn build(config: &ModelConfig, models: &dyn ModelResolver) -> Result<Ensemble, EnsembleError> {
        let scheduling = crate::config::ensemble_scheduling(config).ok_or(EnsembleError::NoScheduling)?;
        let mut tensors: HashMap<String, Produced> = HashMap::new();
        for input in &config.input {
            let datatype = DataType::from_config(input.data_type).ok_or(EnsembleError::Datatype("input"))?;
            tensors.insert(input.name.clone(), Produced { datatype, step: None });
        }
        let mut steps = Vec::with_capacity(scheduling.step.len());
        for (i, s) in scheduling.step.iter().enumerate() {
            let at = |problem| EnsembleError::Step { step: i, model: s.model_name.clone(), problem: Box::new(problem) };
            if s.model_name == config.name {
                return Err(at(StepError::ContainsItself));
            }
            // -1 (and 0, which no version folder can have) means the latest version.
            let version = (s.model_version > 0).then_some(s.model_version);
            let model = models.version(&s.model_name, version).map_err(|e| at(StepError::Model(e)))?;
            let mut inputs: Vec<(String, String)> = s.input_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let mut outputs: Vec<(String, String)> = s.output_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            inputs.sort();
            outputs.sort();
            for (step_input, _) in &inputs {
                if !model.io.inputs.iter().any(|t| &t.name == step_input) {
                    return Err(at(StepError::NoInput(step_input.clone())));
                }
            }
            if let Some(missing) =
                model.io.inputs.iter().find(|t| !t.optional && !inputs.iter().any(|(k, _)| k == &t.name))
            {
                return Err(at(StepError::Unmapped(missing.name.clone())));
            }
            for (step_output, tensor) in &outputs {
                let out = model.io.output(step_output).ok_or_else(|| at(StepError::NoOutput(step_output.clone())))?;
                let produced = Produced { datatype: out.datatype, step: Some(i) };
                if let Some(previous) = tensors.insert(tensor.clone(), produced) {
                    return Err(at(StepError::ProducedTwice { tensor: tensor.clone(), by: previous.step }));
                }
            }
            steps.push(Step {
                model: s.model_name.clone(),
                version,
                inputs,
                outputs,
                depends_on: Vec::new(),
                decoupled: model.is_decoupled(),
            });
        }
        // Every consumed tensor is produced, with a matching datatype and shape.
        for (i, step) in steps.iter_mut().enumerate() {
            let at = |problem| EnsembleError::Step { step: i, model: step.model.clone(), problem: Box::new(problem) };
            let model = models.version(&step.model, step.version).map_err(EnsembleError::Model)?;
            for (step_input, tensor) in &step.inputs {
                let p = tensors
                    .get(tensor)
                    .ok_or_else(|| at(StepError::NotProduced { input: step_input.clone(), tensor: tensor.clone() }))?;
                // Checked in the first pass (the same version, unless it was replaced since).
                let wanted = model
                    .io
                    .inputs
                    .iter()
                    .find(|t| &t.name == step_input)
                    .ok_or_else(|| at(StepError::NoInput(step_input.clone())))?;
                if p.datatype != wanted.datatype {
                    return Err(at(StepError::Datatype {
                        tensor: tensor.clone(),
                        input: step_input.clone(),
                        produced: p.datatype,
                        expected: wanted.datatype,
                    }));
                }
                // Shapes were checked by `super::composition`, as tritonserver checks them (a
                // non-batching step's [-1, d…] meets a batching one's [d…]).
                if let Some(producer) = p.step
                    && !step.depends_on.contains(&producer)
                {
                    step.depends_on.push(producer);
                }
            }
        }
        check_acyclic(&steps)?;
        for output in &config.output {
            let p = tensors.get(&output.name).ok_or_else(|| EnsembleError::OutputNotProduced(output.name.clone()))?;
            let datatype = DataType::from_config(output.data_type).ok_or(EnsembleError::Datatype("output"))?;
            if p.datatype != datatype {
                return Err(EnsembleError::OutputDatatype {
                    output: output.name.clone(),
                    declared: datatype,
                    produced: p.datatype,
                });
            }
        }
        Ok(Ensemble::new(config, steps))
    }
}

/// Rejects steps that depend on each other in a circle, naming them.
fn check_acyclic(steps: &[Step]) -> Result<(), EnsembleError> {
    let mut done = vec![false; steps.len()];
    let mut progress = true;
    while progress {
        progress = false;
        for (i, step) in steps.iter().enumerate() {
            if !done[i] && step.depends_on.iter().all(|d| done[*d]) {
                done[i] = true;
                progress = true;
            }
        }
    }
    let stuck: Vec<usize> = (0..steps.len()).filter(|i| !done[*i]).collect();
    if stuck.is_empty() { Ok(()) } else { Err(EnsembleError::Cycle(stuck)) }
}
