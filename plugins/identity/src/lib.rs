//! `identity`: returns each input unchanged, any datatype (BYTES included) and any shape. Input
//! `INPUT<k>` comes back as `OUTPUT<k>`; an input with another name comes back under its own name.
use nereus_sdk::{Backend, InstanceInfo, ModelInfo, Request, Response};

struct Identity;

fn output_name(input: &str) -> String {
    match input.strip_prefix("INPUT") {
        Some(suffix) => format!("OUTPUT{suffix}"),
        None => input.to_string(),
    }
}

impl Backend for Identity {
    fn new(_model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(Identity)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for mut request in requests {
            let names: Vec<String> = request.inputs().iter().map(|t| t.name().to_string()).collect();
            let mut response = Response::new();
            for name in names {
                let out = output_name(&name);
                if request.wants(&out) {
                    let tensor = request.take_input(&name)?.renamed(out);
                    response = response.output(tensor);
                }
            }
            request.respond(response)?;
        }
        Ok(())
    }
}

nereus_sdk::export!(Identity);
