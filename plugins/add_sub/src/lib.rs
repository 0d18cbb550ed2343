//! `add_sub`: Triton's `simple` model as a Nereus backend. OUTPUT0 = INPUT0 + INPUT1 and
//! OUTPUT1 = INPUT0 - INPUT1, element-wise, for INT32 (wrapping) or FP32 inputs of any shape.
use nereus_sdk::{Backend, DataType, Element, InstanceInfo, ModelInfo, Request, Response, Tensor};

struct AddSub;

fn compute<T: Element>(request: &Request, add: fn(T, T) -> T, sub: fn(T, T) -> T) -> Result<Response, String> {
    let (x, y) = (request.input("INPUT0")?, request.input("INPUT1")?);
    let (a, b) = (x.as_slice::<T>()?, y.as_slice::<T>()?);
    if a.len() != b.len() {
        return Err("INPUT0 and INPUT1 must have the same number of elements".into());
    }
    let shape = x.shape().to_vec();
    let mut response = Response::new();
    if request.wants("OUTPUT0") {
        let sum: Vec<T> = a.iter().zip(b.iter()).map(|(p, q)| add(*p, *q)).collect();
        response = response.output(Tensor::from_slice("OUTPUT0", shape.clone(), &sum));
    }
    if request.wants("OUTPUT1") {
        let diff: Vec<T> = a.iter().zip(b.iter()).map(|(p, q)| sub(*p, *q)).collect();
        response = response.output(Tensor::from_slice("OUTPUT1", shape, &diff));
    }
    Ok(response)
}

impl Backend for AddSub {
    fn new(_model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(AddSub)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            let outcome = match request.input("INPUT0")?.datatype() {
                DataType::Int32 => compute::<i32>(request, i32::wrapping_add, i32::wrapping_sub),
                DataType::Fp32 => compute::<f32>(request, |a, b| a + b, |a, b| a - b),
                other => Err(format!("add_sub supports INT32 and FP32, not {other:?}")),
            };
            match outcome {
                Ok(response) => request.respond(response)?,
                Err(message) => request.fail(&message)?,
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(AddSub);
