//! `parameter`: a stand-in for the Python model `parameter` of Triton's QA suite L0_parameters
//! (conformance/, docs/conformance.md), which answers each request with its parameters: outputs
//! `key` and `value` (BYTES, one element per parameter, in the request's order), each value as
//! Python's `str()` writes it (`True`/`False` for booleans, integers and floats in decimal, text as
//! it is). The input `INPUT0` is not read. Headers the server forwards (`--*-header-forward-pattern`)
//! arrive as text parameters, so the model shows them too.
use nereus_sdk::{Backend, BytesBuilder, InstanceInfo, ModelInfo, ParameterValue, Request, Response};

struct Parameter;

/// A parameter's value as Python's `str()` writes the value it would hold.
fn python_str(value: &ParameterValue) -> String {
    match value {
        ParameterValue::Boolean(true) => "True".into(),
        ParameterValue::Boolean(false) => "False".into(),
        ParameterValue::Int64(v) => v.to_string(),
        ParameterValue::Uint64(v) => v.to_string(),
        // Python writes a float with a decimal point or an exponent ("1.0", "1e+20").
        ParameterValue::Double(v) if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e16 => format!("{v:.1}"),
        ParameterValue::Double(v) => v.to_string(),
        ParameterValue::Text(s) => s.clone(),
    }
}

impl Backend for Parameter {
    fn new(_model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(Parameter)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            let (mut keys, mut values) = (BytesBuilder::new(), BytesBuilder::new());
            for p in request.parameters() {
                keys.push(&p.key);
                values.push(python_str(&p.value));
            }
            let n = keys.len() as i64;
            let mut response = Response::new();
            if request.wants("key") {
                response = response.output(keys.finish("key", vec![n]));
            }
            if request.wants("value") {
                response = response.output(values.finish("value", vec![n]));
            }
            request.respond(response)?;
        }
        Ok(())
    }
}

nereus_sdk::export!(Parameter);
