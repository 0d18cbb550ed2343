//! The checks tritonserver makes of an ensemble against its composing models before it builds the
//! pipeline (`ValidateEnsembleConfig`, and its dependency graph's checks), with its messages: the
//! models exist and have the versions the steps require, no step model batches less than the
//! ensemble, every step input is mapped and every mapping names a real input or output, each
//! ensemble tensor has one datatype and a compatible shape wherever it appears, and no step mixes
//! responses of different decoupled models.
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::config::ModelConfig;
use crate::error::ErrorKind;
use crate::load_error::EnsembleError;
use crate::model::ModelResolver;
use crate::proto::inference::DataType;
use crate::tensor::shape_string;

/// An ensemble tensor as one model sees it, and its links in the data flow (by index).
struct Node {
    model: String,
    datatype: i32,
    dims: Vec<i64>,
    /// `dims` after the batch dimension, when that model batches.
    full_dims: Vec<i64>,
    decoupled: bool,
    label: usize,
    visited: bool,
    prev: Vec<usize>,
    next: Vec<usize>,
    /// The node standing for the other outputs of the same step (they share a label).
    sibling: Option<usize>,
}

impl Node {
    fn new(model: &str, batching: bool, datatype: i32, dims: &[i64]) -> Node {
        let full_dims =
            if batching { std::iter::once(-1).chain(dims.iter().copied()).collect() } else { dims.to_vec() };
        Node {
            model: model.to_string(),
            datatype,
            dims: dims.to_vec(),
            full_dims,
            decoupled: false,
            label: 0,
            visited: false,
            prev: Vec::new(),
            next: Vec::new(),
            sibling: None,
        }
    }

    fn symbolic(model: &str) -> Node {
        Node::new(model, false, 0, &[])
    }
}

fn fail<T>(message: String) -> Result<T, EnsembleError> {
    Err(EnsembleError::Composition(message))
}

/// A step's map as (key, tensor) pairs in key order.
fn sorted(map: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    entries.sort();
    entries
}

fn wildcard_equal(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| *x == -1 || *y == -1 || x == y)
}

fn type_name(datatype: i32) -> &'static str {
    DataType::try_from(datatype).map_or("TYPE_INVALID", |t| t.as_str_name())
}

/// The same tensor seen by two models must agree (tritonserver's `ValidateTensorConsistency`).
fn consistent(lhs: &Node, rhs: &Node, prefix: &str) -> Result<(), EnsembleError> {
    if lhs.datatype != rhs.datatype {
        return fail(format!(
            "{prefix}inconsistent data type: {} is inferred from model {} while {} is inferred from model {}",
            type_name(lhs.datatype),
            lhs.model,
            type_name(rhs.datatype),
            rhs.model
        ));
    }
    if !wildcard_equal(&lhs.dims, &rhs.dims) && !wildcard_equal(&lhs.full_dims, &rhs.full_dims) {
        return fail(format!(
            "{prefix}inconsistent shape: {} is inferred from model {} while {} is inferred from model {}",
            shape_string(&lhs.full_dims),
            lhs.model,
            shape_string(&rhs.full_dims),
            rhs.model
        ));
    }
    Ok(())
}

/// Refuses an ensemble that depends on itself through its steps' models, as tritonserver's
/// dependency graph does (`steps_of` gives the models a model's steps name; none for a model that
/// is not an ensemble).
pub fn check_cycles(name: &str, steps_of: &dyn Fn(&str) -> Vec<String>) -> Result<(), EnsembleError> {
    fn walk(
        current: &str,
        start: &str,
        steps_of: &dyn Fn(&str) -> Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> Result<(), EnsembleError> {
        for upstream in steps_of(current) {
            if upstream == start {
                return fail(format!("circular dependency between ensembles: {start} -> ... -> {current} -> {start}"));
            }
            if seen.insert(upstream.clone()) {
                walk(&upstream, start, steps_of, seen)?;
            }
        }
        Ok(())
    }
    walk(name, name, steps_of, &mut BTreeSet::new())
}

/// Checks the ensemble `config` (already valid on its own) against its composing models.
pub fn check(config: &ModelConfig, models: &dyn ModelResolver) -> Result<(), EnsembleError> {
    let name = &config.name;
    let steps = crate::config::ensemble_scheduling(config).map(|e| e.step.as_slice()).unwrap_or_default();

    // The composing models: present, loaded, with the versions required.
    let mut missing = BTreeSet::new();
    let mut step_configs: Vec<Arc<ModelConfig>> = Vec::new();
    for step in steps {
        match models.version(&step.model_name, None) {
            Ok(model) => step_configs.push(model.config.clone()),
            Err(e) if e.kind == ErrorKind::NotFound => {
                missing.insert(step.model_name.clone());
            }
            Err(_) => {
                return fail(format!(
                    "ensemble '{name}' depends on '{}' which has no loaded version.",
                    step.model_name
                ));
            }
        }
    }
    if !missing.is_empty() {
        let list: Vec<String> = missing.into_iter().collect();
        return fail(format!(
            "ensemble {name} contains models that are not available or ambiguous: {}",
            list.join(", ")
        ));
    }
    for step in steps.iter().filter(|s| s.model_version > 0) {
        if models.version(&step.model_name, Some(step.model_version)).is_err() {
            return fail(format!(
                "ensemble '{name}' depends on '{}' whose required version {} is not loaded",
                step.model_name, step.model_version
            ));
        }
    }

    let batching = config.max_batch_size > 0;
    let mut nodes: Vec<Node> = Vec::new();
    let mut tensors: HashMap<String, usize> = HashMap::new();
    for input in &config.input {
        let dims = input.reshape.as_ref().map_or(&input.dims, |r| &r.shape);
        tensors.insert(input.name.clone(), nodes.len());
        nodes.push(Node::new(name, batching, input.data_type, dims));
    }
    let sink = nodes.len();
    nodes.push(Node::symbolic(name));
    for output in &config.output {
        let dims = output.reshape.as_ref().map_or(&output.dims, |r| &r.shape);
        let i = *tensors.entry(output.name.clone()).or_insert_with(|| {
            nodes.push(Node::new(name, batching, output.data_type, dims));
            nodes.len() - 1
        });
        nodes[sink].prev.push(i);
        nodes[i].next.push(sink);
    }

    for (step, model) in steps.iter().zip(&step_configs) {
        let step_model = &step.model_name;
        // In key order: the maps' own order is a hash's (see `sorted`).
        let (input_map, output_map) = (sorted(&step.input_map), sorted(&step.output_map));
        if model.max_batch_size != 0 && model.max_batch_size < config.max_batch_size {
            return fail(format!(
                "ensemble {name} allows maximum batch size {}, but it contains model {step_model} which only allows \
                 maximum batch size to be {}",
                config.max_batch_size, model.max_batch_size
            ));
        }
        let step_batching = model.max_batch_size > 0;
        for (input, tensor) in &input_map {
            if !model.input.iter().any(|i| &i.name == input) {
                return fail(format!(
                    "in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing input {input} in model \
                     {step_model}"
                ));
            }
        }
        for input in &model.input {
            let mapped: Vec<&String> = input_map.iter().filter(|(i, _)| *i == input.name).map(|(_, t)| t).collect();
            match mapped.as_slice() {
                [] if input.optional => {}
                [] => {
                    return fail(format!(
                        "in ensemble {name}, input {} in model {step_model} is not mapped to any ensemble tensors",
                        input.name
                    ));
                }
                [tensor] => {
                    let node = Node::new(step_model, step_batching, input.data_type, &input.dims);
                    match tensors.get(*tensor) {
                        Some(&i) => {
                            consistent(&nodes[i], &node, &format!("in ensemble {name}, ensemble tensor {tensor}: "))?
                        }
                        None => {
                            tensors.insert((*tensor).clone(), nodes.len());
                            nodes.push(node);
                        }
                    }
                }
                _ => {
                    return fail(format!(
                        "in ensemble {name}, input {} in model {step_model} is mapped to multiple ensemble tensors",
                        input.name
                    ));
                }
            }
        }
        for (output, tensor) in &output_map {
            if !model.output.iter().any(|o| &o.name == output) {
                return fail(format!(
                    "in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing output {output} in \
                     model {step_model}"
                ));
            }
        }
        let sibling = nodes.len();
        nodes.push(Node::symbolic(step_model));
        for (output, tensor) in &output_map {
            let Some(declared) = model.output.iter().find(|o| &o.name == output) else { continue };
            let node = Node::new(step_model, step_batching, declared.data_type, &declared.dims);
            let i = match tensors.get(tensor) {
                Some(&i) => {
                    consistent(&nodes[i], &node, &format!("in ensemble {name}, ensemble tensor {tensor}: "))?;
                    i
                }
                None => {
                    tensors.insert(tensor.clone(), nodes.len());
                    nodes.push(node);
                    nodes.len() - 1
                }
            };
            nodes[i].sibling = Some(sibling);
        }
        let decoupled = model.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        for (_, tensor) in &output_map {
            let Some(&o) = tensors.get(tensor) else { continue };
            nodes[o].decoupled = decoupled;
            for (_, from) in &input_map {
                let Some(&p) = tensors.get(from) else { continue };
                nodes[o].prev.push(p);
                nodes[p].next.push(o);
            }
        }
    }
    check_decoupled_branching(name, &config.input, &tensors, &mut nodes)
}

/// Walks the data flow from the ensemble inputs, labelling each tensor with the decoupled model its
/// responses come from; a step whose inputs carry different labels would have to pair responses
/// that do not correspond.
fn check_decoupled_branching(
    name: &str,
    inputs: &[crate::config::schema::ModelInput],
    tensors: &HashMap<String, usize>,
    nodes: &mut [Node],
) -> Result<(), EnsembleError> {
    let mut label = 0;
    let mut queue = std::collections::VecDeque::new();
    for input in inputs {
        if let Some(&i) = tensors.get(&input.name) {
            nodes[i].visited = true;
            queue.push_back(i);
        }
    }
    while let Some(current) = queue.pop_front() {
        for next in nodes[current].next.clone() {
            if nodes[next].visited || !nodes[next].prev.iter().all(|p| nodes[*p].visited) {
                continue;
            }
            let Some(&first) = nodes[next].prev.first() else { continue };
            let prev_label = nodes[first].label;
            if nodes[next].prev.iter().any(|p| nodes[*p].label != prev_label) {
                return fail(format!(
                    "in ensemble {name}, step of model '{}' receives inputs originated from different decoupled models",
                    nodes[next].model
                ));
            }
            let sibling = nodes[next].sibling;
            match sibling {
                Some(s) if nodes[s].visited => nodes[next].label = nodes[s].label,
                sibling => {
                    if nodes[next].decoupled {
                        label += 1;
                    }
                    let own = if nodes[next].decoupled { label } else { prev_label };
                    nodes[next].label = own;
                    if let Some(s) = sibling {
                        nodes[s].label = own;
                        nodes[s].visited = true;
                    }
                }
            }
            nodes[next].visited = true;
            queue.push_back(next);
        }
    }
    Ok(())
}
