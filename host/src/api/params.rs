//! Request and tensor parameters as both protocols carry them (a JSON object over HTTP, a map of
//! `InferParameter` over gRPC), once each frontend has turned its values into [`ParamValue`]s.
use crate::error::InferError;
use crate::request::{CorrelationId, InferenceRequest, ParamValue, is_reserved_parameter};
use crate::shm::ShmPlace;

/// Applies one request-level parameter. Triton's reserved ones set the request's fields:
/// `sequence_id` (an unsigned integer or a string; 0 and "" mean none), `sequence_start` and
/// `sequence_end` (booleans), `priority` and `timeout` (unsigned integers, the timeout in
/// microseconds). The other reserved ones (`binary_data_output`, `headers`, `triton_*`) are the
/// frontend's business or ignored. Any other parameter is the model's and reaches its backend.
pub fn apply(request: &mut InferenceRequest, key: &str, value: ParamValue) -> Result<(), InferError> {
    let unsigned = |value: &ParamValue| match *value {
        ParamValue::Uint64(n) => Some(n),
        ParamValue::Int64(n) => u64::try_from(n).ok(),
        _ => None,
    };
    match key {
        "sequence_id" => {
            let id = match value {
                ParamValue::String(s) => CorrelationId::Text(s),
                ref v => CorrelationId::Numeric(unsigned(v).ok_or_else(|| {
                    InferError::invalid("parameter 'sequence_id' must be an unsigned integer or a string")
                })?),
            };
            request.correlation_id = id.normalized();
        }
        "sequence_start" | "sequence_end" => {
            let ParamValue::Bool(b) = value else {
                return Err(InferError::invalid(format!("parameter '{key}' must be a boolean")));
            };
            if key == "sequence_start" {
                request.sequence_start = b;
            } else {
                request.sequence_end = b;
            }
        }
        "priority" | "timeout" => {
            let n = unsigned(&value)
                .ok_or_else(|| InferError::invalid(format!("parameter '{key}' must be an unsigned integer")))?;
            if key == "priority" {
                request.priority = n;
            } else {
                request.timeout_us = n;
            }
        }
        k if is_reserved_parameter(k) => {}
        k => request.parameters.push((k.to_string(), value)),
    }
    Ok(())
}

/// The shared-memory place of a tensor (`tensor` names it in errors) from its
/// `shared_memory_region`, `shared_memory_byte_size` and `shared_memory_offset` parameters: `None`
/// without a region; a region needs a byte size; the offset defaults to 0.
pub fn shm_place(
    tensor: &str,
    region: Option<ParamValue>,
    byte_size: Option<ParamValue>,
    offset: Option<ParamValue>,
) -> Result<Option<ShmPlace>, InferError> {
    let number = |key: &str, value: Option<ParamValue>| -> Result<Option<u64>, InferError> {
        match value {
            None => Ok(None),
            Some(ParamValue::Uint64(n)) => Ok(Some(n)),
            Some(ParamValue::Int64(n)) if n >= 0 => Ok(Some(n as u64)),
            Some(_) => Err(InferError::invalid(format!("'{key}' of '{tensor}' must be an unsigned integer"))),
        }
    };
    let region = match region {
        None => return Ok(None),
        Some(ParamValue::String(s)) => s,
        Some(_) => return Err(InferError::invalid(format!("'shared_memory_region' of '{tensor}' must be a string"))),
    };
    let byte_size = number("shared_memory_byte_size", byte_size)?.ok_or_else(|| {
        InferError::invalid(format!(
            "'{tensor}' names shared memory region '{region}' without a 'shared_memory_byte_size'"
        ))
    })?;
    let offset = number("shared_memory_offset", offset)?.unwrap_or(0);
    Ok(Some(ShmPlace { region, offset, byte_size }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_parameters_set_the_request_and_the_rest_reach_the_model() {
        let mut r = InferenceRequest::default();
        apply(&mut r, "sequence_id", ParamValue::Int64(7)).unwrap();
        apply(&mut r, "sequence_start", ParamValue::Bool(true)).unwrap();
        apply(&mut r, "priority", ParamValue::Uint64(2)).unwrap();
        apply(&mut r, "timeout", ParamValue::Int64(1000)).unwrap();
        apply(&mut r, "binary_data_output", ParamValue::Bool(true)).unwrap();
        apply(&mut r, "triton_enable_empty_final_response", ParamValue::Bool(true)).unwrap();
        apply(&mut r, "mine", ParamValue::String("x".into())).unwrap();
        assert_eq!(r.correlation_id, CorrelationId::Numeric(7));
        assert!(r.sequence_start && !r.sequence_end);
        assert_eq!((r.priority, r.timeout_us), (2, 1000));
        assert_eq!(r.parameters, vec![("mine".to_string(), ParamValue::String("x".into()))]);
        apply(&mut r, "sequence_id", ParamValue::String(String::new())).unwrap();
        assert_eq!(r.correlation_id, CorrelationId::None);
        for (key, bad) in [
            ("sequence_id", ParamValue::Int64(-1)),
            ("sequence_id", ParamValue::Double(1.5)),
            ("sequence_end", ParamValue::Int64(1)),
            ("priority", ParamValue::Int64(-3)),
            ("timeout", ParamValue::String("1".into())),
        ] {
            let e = apply(&mut r, key, bad).unwrap_err();
            assert!(e.message.contains(key), "{e:?}");
        }
    }

    #[test]
    fn shared_memory_places_need_a_region_and_a_byte_size() {
        let s = |v: &str| Some(ParamValue::String(v.into()));
        assert_eq!(shm_place("T", None, Some(ParamValue::Int64(4)), None).unwrap(), None);
        assert_eq!(
            shm_place("T", s("r"), Some(ParamValue::Int64(4)), None).unwrap(),
            Some(ShmPlace { region: "r".into(), offset: 0, byte_size: 4 })
        );
        assert!(shm_place("T", s("r"), None, None).unwrap_err().message.contains("shared_memory_byte_size"));
        assert!(shm_place("T", s("r"), Some(ParamValue::Int64(-4)), None).is_err());
        assert!(shm_place("T", Some(ParamValue::Int64(1)), Some(ParamValue::Int64(4)), None).is_err());
    }
}
