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
        ParameterValue::Double(v) => python_float(*v),
        ParameterValue::Text(s) => s.clone(),
    }
}

/// Python's `repr` of a float (which `str` is): the shortest digits that read back the same,
/// positional for exponents from -4 to 15 (with `.0` when whole), else `<digits>e<sign><2+ digits>`.
fn python_float(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let scientific = format!("{v:e}"); // shortest round-trip digits: "1.5e-5", "1e20"
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..16).contains(&exponent) {
        let positional = v.to_string();
        if positional.contains('.') { positional } else { format!("{positional}.0") }
    } else {
        format!("{mantissa}e{}{:02}", if exponent < 0 { '-' } else { '+' }, exponent.abs())
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

#[cfg(test)]
mod tests {
    use super::python_float;

    #[test]
    fn floats_read_as_python_writes_them() {
        for (v, python) in [
            (123.123, "123.123"),
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1e20, "1e+20"),
            (1.5e-5, "1.5e-05"),
            (1e-4, "0.0001"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(python_float(v), python, "{v}");
        }
    }
}
