//! Where an ensemble's tensors cross between batching and non-batching models, tritonserver adds
//! or strips the batch dimension (`EnsembleContext::ReshapeTensorDims`): a tensor from a model that
//! does not batch, going to one that does, whose shape is exactly what that model declares
//! without a batch dimension, becomes a batch of one; a batch of one going to a model that does not
//! batch, whose shape that model does not take as it is, loses its batch dimension. Any other
//! tensor goes as it is (a non-batching ensemble's tensors may carry the batch dimension in their
//! dims themselves).

/// The shape `dims` of a tensor of `batch_size` (0: it came from a model, or an ensemble request,
/// that does not batch) takes where it meets `config_dims` of a model or ensemble output that
/// batches (`batching`) or not; `None` when it goes as it is.
pub fn reshaped(config_dims: &[i64], batching: bool, batch_size: u64, dims: &[i64]) -> Option<Vec<i64>> {
    if batching == (batch_size != 0) {
        return None;
    }
    let matches = matches_with_wildcard(config_dims, dims);
    if batching {
        matches.then(|| std::iter::once(1).chain(dims.iter().copied()).collect())
    } else {
        (!matches && batch_size == 1 && !dims.is_empty()).then(|| dims[1..].to_vec())
    }
}

/// The batch size of a tensor with shape `dims` that a batching source (`batching`) produced; 0
/// for a non-batching one (and for an empty batch, as tritonserver counts it).
pub fn batch_size(batching: bool, dims: &[i64]) -> u64 {
    if batching { dims.first().map_or(0, |&b| b.max(0) as u64) } else { 0 }
}

/// tritonserver's `CompareDimsWithWildcard`: the same rank, and each dimension equal or -1 on
/// either side.
fn matches_with_wildcard(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| x == -1 || y == -1 || x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_batched_tensor_becomes_a_batch_of_one_only_where_it_fits_the_dims() {
        assert_eq!(reshaped(&[-1], true, 0, &[0]), Some(vec![1, 0]));
        assert_eq!(reshaped(&[-1, -1], true, 0, &[2, 3]), Some(vec![1, 2, 3]));
        // The tensor already carries a batch dimension in its dims.
        assert_eq!(reshaped(&[16], true, 0, &[2, 16]), None);
    }

    #[test]
    fn a_batch_of_one_loses_its_batch_dimension_where_the_model_cannot_take_it() {
        assert_eq!(reshaped(&[-1], false, 1, &[1, 5]), Some(vec![5]));
        // The whole batch fits the dims as one tensor.
        assert_eq!(reshaped(&[-1, 16], false, 1, &[1, 16]), None);
        // Only a batch of one is stripped.
        assert_eq!(reshaped(&[-1], false, 2, &[2, 5]), None);
    }

    #[test]
    fn tensors_between_models_that_agree_go_as_they_are() {
        assert_eq!(reshaped(&[-1], true, 3, &[3, 4]), None);
        assert_eq!(reshaped(&[-1], false, 0, &[4]), None);
        assert_eq!(batch_size(true, &[3, 4]), 3);
        assert_eq!(batch_size(true, &[0, 4]), 0);
        assert_eq!(batch_size(false, &[3, 4]), 0);
    }
}
