//! tritonserver's `ValidateEnsembleSchedulingConfig`: what an ensemble's own configuration must
//! satisfy before its composing models are looked at — no instance groups, optimization or warm-up
//! of its own, complete steps, and a data flow in which every ensemble output is written and every
//! tensor used. Messages are tritonserver's.
use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::ConfigError;
use super::schema::ModelConfig;

/// A tensor of the ensemble's data flow: which tensors a step computes it from (`prev`) and which
/// it feeds (`next`), by index.
#[derive(Default)]
struct Node {
    /// Produced by a step's output map.
    is_output: bool,
    ready: bool,
    prev: Vec<usize>,
    next: Vec<usize>,
}

/// The data flow of the steps: tensors by name (ordered, so that the first problem reported does
/// not depend on hashing), each with its links.
#[derive(Default)]
struct Graph {
    index: BTreeMap<String, usize>,
    names: Vec<String>,
    nodes: Vec<Node>,
}

impl Graph {
    fn node(&mut self, name: &str) -> usize {
        if let Some(i) = self.index.get(name) {
            return *i;
        }
        self.index.insert(name.to_string(), self.nodes.len());
        self.names.push(name.to_string());
        self.nodes.push(Node::default());
        self.nodes.len() - 1
    }
}

pub fn validate(config: &ModelConfig) -> Result<(), ConfigError> {
    let name = &config.name;
    let err = |path: &str, message: String| Err(ConfigError::at(path, message));
    if config.platform != "ensemble" {
        return err(
            "ensemble_scheduling",
            format!("ensemble scheduling cannot be set for model '{name}' whose platform is not ensemble"),
        );
    }
    if !config.instance_group.is_empty() {
        return err("instance_group", format!("instance group should not be specified for ensemble '{name}'"));
    }
    if config.optimization.is_some() {
        return err("optimization", format!("optimization should not be specified for ensemble '{name}'"));
    }
    if !config.model_warmup.is_empty() {
        return err("model_warmup", format!("model_warmup can not be specified for ensemble '{name}'"));
    }
    let steps = super::ensemble_scheduling(config).map(|e| e.step.as_slice()).unwrap_or_default();
    if steps.is_empty() {
        return err("ensemble_scheduling", format!("must specify 'step' for ensemble '{name}'"));
    }
    let mut graph = build(config, name)?;

    // Flood from the ensemble inputs: a tensor is ready once everything it is computed from is.
    let mut queue = std::collections::VecDeque::new();
    for input in &config.input {
        let Some(&i) = graph.index.get(&input.name) else {
            return err("input", format!("ensemble input '{}' for ensemble {name}' is not used", input.name));
        };
        graph.nodes[i].ready = true;
        queue.push_back(i);
    }
    while let Some(i) = queue.pop_front() {
        for next in graph.nodes[i].next.clone() {
            if graph.nodes[next].ready {
                continue;
            }
            if graph.nodes[next].prev.iter().all(|p| graph.nodes[*p].ready) {
                graph.nodes[next].ready = true;
                queue.push_back(next);
            }
        }
    }
    let mut outputs = BTreeSet::new();
    for output in &config.output {
        let Some(&i) = graph.index.get(&output.name) else {
            return err("output", format!("ensemble output '{}' for ensemble {name}' is not used", output.name));
        };
        if !graph.nodes[i].ready {
            let mut message = format!("output '{}' for ensemble '{name}' is not written", output.name);
            // Walk back along tensors that are not ready to the first one nothing writes.
            let (mut last, mut seen) = (i, HashSet::new());
            let mut prev = Some(graph.nodes[i].prev.clone());
            while let Some(nodes) = prev.take().filter(|n| !n.is_empty()) {
                if let Some(&p) = nodes.iter().find(|p| !graph.nodes[**p].ready && !seen.contains(*p)) {
                    seen.insert(p);
                    last = p;
                    prev = Some(graph.nodes[p].prev.clone());
                }
            }
            if last != i {
                message +=
                    &format!(": at least one of its depending tensors, '{}', is not connected", graph.names[last]);
            }
            return err("output", message);
        }
        outputs.insert(i);
    }
    for (tensor, &i) in &graph.index {
        if outputs.contains(&i) {
            continue;
        }
        if !graph.nodes[i].ready || graph.nodes[i].next.is_empty() {
            return err("ensemble_scheduling", format!("ensemble tensor '{tensor}' is unused in ensemble '{name}'"));
        }
    }
    Ok(())
}

/// tritonserver's `BuildEnsembleGraph`: each step's outputs are computed from all of its inputs.
fn build(config: &ModelConfig, name: &str) -> Result<Graph, ConfigError> {
    let mut graph = Graph::default();
    let steps = super::ensemble_scheduling(config).map(|e| e.step.as_slice()).unwrap_or_default();
    for (s, step) in steps.iter().enumerate() {
        let at = |message: String| ConfigError::at(format!("ensemble_scheduling.step[{s}]"), message);
        if step.model_name.is_empty() {
            return Err(at(format!("must specify 'model_name' in step {s} of ensemble '{name}'")));
        }
        if step.input_map.is_empty() {
            return Err(at(format!("must specify 'input_map' in step {s} of ensemble '{name}'")));
        }
        if step.output_map.is_empty() {
            return Err(at(format!("must specify 'output_map' in step {s} of ensemble '{name}'")));
        }
        // In key order: the maps' own order is a hash's, and the first problem reported should not
        // depend on it.
        let sorted = |map: &std::collections::HashMap<String, String>| -> Vec<String> {
            let mut entries: Vec<(&String, &String)> = map.iter().collect();
            entries.sort();
            entries.into_iter().map(|(_, tensor)| tensor.clone()).collect()
        };
        let mut produced = Vec::new();
        for tensor in &sorted(&step.output_map) {
            let i = graph.node(tensor);
            if graph.nodes[i].is_output {
                return Err(at(format!(
                    "ensemble tensor '{tensor}' can appear in an output map only once for ensemble '{name}' step {s}"
                )));
            }
            graph.nodes[i].is_output = true;
            produced.push(i);
        }
        for tensor in &sorted(&step.input_map) {
            let i = graph.node(tensor);
            for &o in &produced {
                graph.nodes[o].prev.push(i);
                graph.nodes[i].next.push(o);
            }
        }
    }
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_pbtxt;

    fn check(body: &str) -> Result<(), ConfigError> {
        let mut config = parse_pbtxt(&format!(
            r#"platform: "ensemble"
               input [ {{ name: "in" data_type: TYPE_FP32 dims: [ 1 ] }} ]
               output [ {{ name: "out" data_type: TYPE_FP32 dims: [ 1 ] }} ]
               {body}"#
        ))
        .unwrap();
        config.name = "e".into();
        validate(&config)
    }

    fn step(model: &str, from: &str, to: &str) -> String {
        format!(
            r#"{{ model_name: "{model}" input_map {{ key: "I" value: "{from}" }} output_map {{ key: "O" value: "{to}" }} }}"#
        )
    }

    #[test]
    fn a_connected_flow_passes() {
        let steps = format!("ensemble_scheduling {{ step [ {}, {} ] }}", step("a", "in", "t"), step("b", "t", "out"));
        check(&steps).unwrap();
    }

    #[test]
    fn rejects_with_tritonservers_words() {
        for (body, message) in [
            ("ensemble_scheduling { }".to_string(), "must specify 'step' for ensemble 'e'".to_string()),
            (
                format!("ensemble_scheduling {{ step [ {} ] }}", step("a", "in", "t")),
                "ensemble output 'out' for ensemble e' is not used".into(),
            ),
            (
                format!("ensemble_scheduling {{ step [ {}, {} ] }}", step("a", "in", "t"), step("b", "x", "out")),
                "output 'out' for ensemble 'e' is not written: at least one of its depending tensors, 'x', is not \
                 connected"
                    .into(),
            ),
            (
                format!("ensemble_scheduling {{ step [ {}, {} ] }}", step("a", "in", "out"), step("b", "in", "out")),
                "ensemble tensor 'out' can appear in an output map only once for ensemble 'e' step 1".into(),
            ),
            (
                format!("ensemble_scheduling {{ step [ {}, {} ] }}", step("a", "in", "out"), step("b", "in", "spare")),
                "ensemble tensor 'spare' is unused in ensemble 'e'".into(),
            ),
            (
                format!(
                    "instance_group [ {{ count: 1 }} ] ensemble_scheduling {{ step [ {} ] }}",
                    step("a", "in", "out")
                ),
                "instance group should not be specified for ensemble 'e'".into(),
            ),
        ] {
            assert_eq!(check(&body).unwrap_err().message, message, "{body}");
        }
    }
}
