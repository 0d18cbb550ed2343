//! Merged batches: a batch's requests handed to the plugin as one request whose inputs are theirs
//! concatenated along the batch dimension, and the one response the plugin sends split back into
//! one per request — the way Triton's framework backends run a batch (`backend::batch`), opted into
//! per model with `parameters { key: "merge_batches" value { string_value: "true" } }`.
//!
//! Why: a plugin called with a batch of N requests lowers N requests' records into its memory,
//! runs its code N times and lifts N responses back, so a batch of 8 small requests cost the
//! sandbox as much as 8 single ones (4.6 µs a request either way for `simple`,
//! bench/results/2026-12-02-batcher-conns.md) and the batcher earned nothing inside the call.
//! Merged, the batch is one lowering, one run over all the rows, and one response.
//!
//! Only a model whose plugin treats every row of the batch dimension alone may merge: the plugin
//! cannot tell where one request ends (it sees one request of the batch's total batch size), so it
//! is the model author's statement, as `max_batch_size` is for a framework model. The host checks
//! everything it can: the merged response must have the batch's total rows in every output, each
//! request then gets its own rows of the outputs it asked for. A merged request carries no id, no
//! correlation id and no sequence flags, and the request parameters its requests share; requests
//! whose parameters differ, or whose inputs cannot be concatenated, run as a batch of requests as
//! usual. Calls the plugin makes to other models (`nereus:backend/models`) while it runs a merged
//! request name request 0, and follow the batch's first request's deadline, priority and
//! cancellation. Not for decoupled or sequence-batched models, nor ragged inputs (the rows of a request
//! could not be told apart): their configurations are refused.
use crate::backend::batch::{Gathered, gather};
use crate::config::ConfigError;
use crate::config::ModelConfig;
use crate::config::schema::model_config::SchedulingChoice;
use crate::request::{Job, ParamValue};

/// The model parameter that turns merging on.
pub const PARAMETER: &str = "merge_batches";

/// Whether the model's configuration asks for merged batches, refusing one that asks where its
/// batches cannot be merged.
pub fn enabled(config: &ModelConfig) -> Result<bool, ConfigError> {
    let asked = match config.parameters.get(PARAMETER).map(|p| p.string_value.trim()) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ConfigError::new(format!(
                "parameter '{PARAMETER}' must be \"true\" or \"false\", got {other:?}"
            )));
        }
    };
    if !asked {
        return Ok(false);
    }
    let refused = |why: &str| Err(ConfigError::new(format!("parameter '{PARAMETER}' is for {why}")));
    if config.max_batch_size <= 0 {
        return refused("a model that batches (max_batch_size > 0)");
    }
    if config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled) {
        return refused("a model that sends one response a request, not a decoupled one");
    }
    if matches!(config.scheduling_choice, Some(SchedulingChoice::SequenceBatching(_))) {
        return refused("models without sequence batching: a sequence's requests are its own");
    }
    if let Some(input) = config.input.iter().find(|i| i.allow_ragged_batch) {
        return refused(&format!(
            "inputs batched along their first dimension; '{}' allows a ragged batch, whose requests' rows the \
             plugin could not tell apart",
            input.name
        ));
    }
    Ok(true)
}

/// A batch's requests as one: what the plugin is lent instead of them.
pub(super) struct Merged {
    pub parameters: Vec<(String, ParamValue)>,
    /// Each input of the first request, gathered from every request in batch order.
    pub inputs: Vec<Gathered>,
    /// Every output any of the requests asked for, once each.
    pub requested_outputs: Vec<String>,
}

/// The batch's requests as one, or `None` where they cannot be one: a single request (nothing to
/// merge), requests whose parameters or input names differ, or inputs that do not concatenate
/// (different datatypes or non-batch dimensions).
pub(super) fn merge(jobs: &[Job]) -> Option<Merged> {
    let (first, rest) = jobs.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let first = &first.request;
    let alike = rest.iter().all(|job| {
        let r = &job.request;
        r.parameters == first.parameters
            && r.inputs.len() == first.inputs.len()
            && r.inputs.iter().zip(&first.inputs).all(|(a, b)| a.name == b.name)
    });
    if !alike {
        return None;
    }
    let inputs = first.inputs.iter().map(|t| gather(jobs, &t.name, false).ok()).collect::<Option<Vec<_>>>()?;
    let mut requested_outputs = first.requested_outputs.clone();
    for job in rest {
        for name in &job.request.requested_outputs {
            if !requested_outputs.contains(name) {
                requested_outputs.push(name.clone());
            }
        }
    }
    Some(Merged { parameters: first.parameters.clone(), inputs, requested_outputs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::ModelParameter;
    use crate::proto::inference::ModelTransactionPolicy;
    use crate::request::{InferenceRequest, ResponseSender, Tensor};
    use crate::stats::ModelStats;
    use crate::tensor::DataType;
    use std::sync::Arc;
    use std::time::Instant;

    fn config(value: &str) -> ModelConfig {
        let mut config = ModelConfig { max_batch_size: 8, ..Default::default() };
        config.parameters.insert(PARAMETER.into(), ModelParameter { string_value: value.into() });
        config
    }

    fn job(rows: i64, first: i32, outputs: &[&str]) -> Job {
        let (sender, _rx) = ResponseSender::unary(Arc::new(ModelStats::default()));
        let values: Vec<u8> = (0..rows as i32 * 2).flat_map(|v| (first + v).to_le_bytes()).collect();
        let input = Tensor { name: "X".into(), datatype: DataType::Int32, shape: vec![rows, 2], data: values.into() };
        let request = InferenceRequest {
            inputs: vec![input],
            requested_outputs: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        Job { request, sender, enqueued: Instant::now() }
    }

    #[test]
    fn only_a_batching_model_with_one_response_a_request_merges() {
        assert!(!enabled(&ModelConfig::default()).unwrap());
        assert!(enabled(&config("true")).unwrap());
        assert!(!enabled(&config("false")).unwrap());
        assert!(enabled(&config("yes")).unwrap_err().message.contains("must be \"true\" or \"false\""));
        let unbatched = ModelConfig { max_batch_size: 0, ..config("true") };
        assert!(enabled(&unbatched).unwrap_err().message.contains("max_batch_size > 0"));
        let decoupled = ModelConfig {
            model_transaction_policy: Some(ModelTransactionPolicy { decoupled: true }),
            ..config("true")
        };
        assert!(enabled(&decoupled).unwrap_err().message.contains("not a decoupled one"));
    }

    #[test]
    fn a_batch_merges_into_one_request_of_all_its_rows_and_every_output_asked_for() {
        let jobs = [job(1, 0, &["A"]), job(2, 10, &["B", "A"])];
        let merged = merge(&jobs).unwrap();
        assert_eq!(merged.inputs.len(), 1);
        assert_eq!(merged.inputs[0].shape, [3, 2]);
        let bytes: Vec<u8> = merged.inputs[0].parts.iter().flat_map(|p| p.to_vec()).collect();
        let values: Vec<i32> = bytes.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(values, [0, 1, 10, 11, 12, 13]);
        assert_eq!(merged.requested_outputs, ["A", "B"]);
    }

    #[test]
    fn requests_that_differ_stay_apart() {
        assert!(merge(&[job(1, 0, &["A"])]).is_none(), "one request is not merged");
        let mut other = job(1, 0, &["A"]);
        other.request.parameters.push(("k".into(), ParamValue::Int64(1)));
        assert!(merge(&[job(1, 0, &["A"]), other]).is_none(), "different parameters");
        let mut wider = job(1, 0, &["A"]);
        wider.request.inputs[0].shape = vec![2, 1];
        assert!(merge(&[job(1, 0, &["A"]), wider]).is_none(), "different non-batch dimensions");
    }
}
