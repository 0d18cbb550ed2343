//! `string_case`: a BYTES-processing backend. INPUT0 BYTES (UTF-8 text) → OUTPUT0 BYTES with each
//! element's case changed, OUTPUT1 INT32 with each element's length in characters. The model's
//! `parameters { key: "mode" value: { string_value: "upper" | "lower" } }` picks the case
//! (default "upper"), so one component serves differently configured models.
use nereus_sdk::{Backend, BytesBuilder, InstanceInfo, ModelInfo, Request, Response, Tensor, config_parameter};

#[derive(Clone, Copy)]
enum Mode {
    Upper,
    Lower,
}

struct StringCase {
    mode: Mode,
}

fn mode_of(model: &ModelInfo) -> Result<Mode, String> {
    match config_parameter(model, "mode")?.as_deref() {
        None | Some("upper") => Ok(Mode::Upper),
        Some("lower") => Ok(Mode::Lower),
        Some(other) => Err(format!("parameter 'mode' must be \"upper\" or \"lower\", not {other:?}")),
    }
}

fn convert(mode: Mode, request: &Request) -> Result<Response, String> {
    let input = request.input("INPUT0")?;
    let mut text = BytesBuilder::new();
    let mut lengths = Vec::new();
    for element in input.bytes_elements()? {
        let s = std::str::from_utf8(element?).map_err(|e| format!("INPUT0 element is not UTF-8: {e}"))?;
        let converted = match mode {
            Mode::Upper => s.to_uppercase(),
            Mode::Lower => s.to_lowercase(),
        };
        lengths.push(s.chars().count() as i32);
        text.push(converted);
    }
    let shape = input.shape().to_vec();
    let mut response = Response::new();
    if request.wants("OUTPUT0") {
        response = response.output(text.finish("OUTPUT0", shape.clone()));
    }
    if request.wants("OUTPUT1") {
        response = response.output(Tensor::from_slice("OUTPUT1", shape, &lengths));
    }
    Ok(response)
}

impl Backend for StringCase {
    fn initialize_model(model: &ModelInfo) -> Result<(), String> {
        mode_of(model).map(|_| ())
    }

    fn new(model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(StringCase { mode: mode_of(model)? })
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            match convert(self.mode, request) {
                Ok(response) => request.respond(response)?,
                Err(message) => request.fail(&message)?,
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(StringCase);
