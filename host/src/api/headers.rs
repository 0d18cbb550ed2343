//! tritonserver's `--http-header-forward-pattern` and `--grpc-header-forward-pattern`: the request
//! headers (gRPC metadata) whose names the pattern matches become string parameters of the request,
//! which reach its backend (and an ensemble's steps) as any other parameter. A header whose name
//! is one Triton reserves for its own parameters (`sequence_id`, `priority`, `triton_*`, …) fails
//! the request, in tritonserver's words. The pattern matches anywhere in the name (RE2's
//! `PartialMatch`) and ignores case unless it says `(?-i)`: HTTP and gRPC libraries lowercase
//! header names on the way, so `MY_HEADER.*` matches the `my_header_1` a client sent as
//! `MY_HEADER_1` (Triton's L0_parameters expects this).
use crate::error::InferError;
use crate::request::{InferenceRequest, ParamValue, is_reserved_parameter};
use crate::trace::context::Carrier;

/// A compiled forward pattern.
#[derive(Clone, Debug)]
pub struct HeaderForward(regex::Regex);

impl HeaderForward {
    /// The pattern of a `--*-header-forward-pattern` flag; an error names what is wrong with it.
    pub fn new(pattern: &str) -> Result<Self, String> {
        regex::RegexBuilder::new(pattern)
            .case_insensitive(true)
            .build()
            .map(HeaderForward)
            .map_err(|e| format!("invalid header forward pattern '{pattern}': {e}"))
    }

    /// Whether header `name` is forwarded.
    pub fn matches(&self, name: &str) -> bool {
        self.0.is_match(name)
    }

    /// Adds every header of `headers` the pattern matches to `request`'s parameters, as a string,
    /// in the order the headers came.
    pub fn apply(&self, headers: &dyn Carrier, request: &mut InferenceRequest) -> Result<(), InferError> {
        for (name, value) in headers.pairs() {
            if !self.matches(&name) {
                continue;
            }
            if is_reserved_parameter(&name) {
                return Err(InferError::invalid(format!(
                    "Header '{name}' is reserved for Triton usage and cannot be forwarded."
                )));
            }
            request.parameters.push((name, ParamValue::String(value)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn matching_headers_become_string_parameters() {
        let mut request = InferenceRequest::default();
        let sent = headers(&[("my_header_1", "v1"), ("header_2", "v2"), ("my_header_3", "a \"quoted\" \\ value")]);
        HeaderForward::new("MY_HEADER.*").unwrap().apply(&sent, &mut request).unwrap();
        assert_eq!(
            request.parameters,
            vec![
                ("my_header_1".to_string(), ParamValue::String("v1".into())),
                ("my_header_3".to_string(), ParamValue::String("a \"quoted\" \\ value".into())),
            ]
        );
        let mut request = InferenceRequest::default();
        HeaderForward::new("(?-i)MY_HEADER.*").unwrap().apply(&sent, &mut request).unwrap();
        assert!(request.parameters.is_empty(), "case-sensitive on request");
        let mut request = InferenceRequest::default();
        HeaderForward::new("header_2").unwrap().apply(&sent, &mut request).unwrap();
        assert_eq!(request.parameters.len(), 1, "matched anywhere in the name");
    }

    #[test]
    fn reserved_names_fail_the_request() {
        for name in ["sequence_id", "priority", "timeout", "headers", "binary_data_output", "triton_x"] {
            let mut request = InferenceRequest::default();
            let e = HeaderForward::new(".*").unwrap().apply(&headers(&[(name, "1")]), &mut request).unwrap_err();
            assert_eq!(e.message, format!("Header '{name}' is reserved for Triton usage and cannot be forwarded."));
        }
        assert!(HeaderForward::new("(").is_err());
    }
}
