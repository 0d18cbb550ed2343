//! Host-side bindings generated from `wit/backend.wit`, and conversions to the host's own types.
use crate::error::{ErrorKind as HostErrorKind, InferError};
use crate::request::ParamValue;
use crate::tensor::DataType as HostDataType;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "backend",
    ownership: Borrowing { duplicate_if_necessary: true },
});

// Types the host passes into the guest (the lifecycle's infos, and the parameters and flags of
// `execute`'s requests, whose records `lower.rs` defines itself to copy tensors its own way) are
// generated borrowing (`ownership: Borrowing`): lowered into guest memory straight from the host's
// own buffers, with no copy on the host first. The same WIT types received from the
// guest (responses, calls) are owned: `TensorResult` and the like, named here as the WIT names them.
pub use self::nereus::backend::types::{
    CorrelationIdParam, CorrelationIdResult as CorrelationId, DataType, ErrorKind, InstanceInfo, InstanceKind,
    ModelInfo, ParameterParam, ParameterResult as Parameter, ParameterValueParam,
    ParameterValueResult as ParameterValue, Response, SequenceFlags, TensorResult as Tensor,
};

impl From<HostDataType> for DataType {
    fn from(d: HostDataType) -> Self {
        match d {
            HostDataType::Bool => DataType::Bool,
            HostDataType::Uint8 => DataType::Uint8,
            HostDataType::Uint16 => DataType::Uint16,
            HostDataType::Uint32 => DataType::Uint32,
            HostDataType::Uint64 => DataType::Uint64,
            HostDataType::Int8 => DataType::Int8,
            HostDataType::Int16 => DataType::Int16,
            HostDataType::Int32 => DataType::Int32,
            HostDataType::Int64 => DataType::Int64,
            HostDataType::Fp16 => DataType::Fp16,
            HostDataType::Fp32 => DataType::Fp32,
            HostDataType::Fp64 => DataType::Fp64,
            HostDataType::Bytes => DataType::Bytes,
            HostDataType::Bf16 => DataType::Bf16,
        }
    }
}

impl From<DataType> for HostDataType {
    fn from(d: DataType) -> Self {
        match d {
            DataType::Bool => HostDataType::Bool,
            DataType::Uint8 => HostDataType::Uint8,
            DataType::Uint16 => HostDataType::Uint16,
            DataType::Uint32 => HostDataType::Uint32,
            DataType::Uint64 => HostDataType::Uint64,
            DataType::Int8 => HostDataType::Int8,
            DataType::Int16 => HostDataType::Int16,
            DataType::Int32 => HostDataType::Int32,
            DataType::Int64 => HostDataType::Int64,
            DataType::Fp16 => HostDataType::Fp16,
            DataType::Fp32 => HostDataType::Fp32,
            DataType::Fp64 => HostDataType::Fp64,
            DataType::Bytes => HostDataType::Bytes,
            DataType::Bf16 => HostDataType::Bf16,
        }
    }
}

/// What the host keeps of a model's `model-info`, lent to each sandbox's `initialize-model`.
#[derive(Clone, Debug)]
pub struct OwnedModelInfo {
    pub name: String,
    pub version: i64,
    pub config_json: String,
}

impl OwnedModelInfo {
    pub fn lend(&self) -> ModelInfo<'_> {
        ModelInfo { name: &self.name, version: self.version, config_json: &self.config_json }
    }
}

/// What the host keeps of an instance's `instance-info`, lent to its sandbox's `initialize-instance`.
#[derive(Clone, Debug)]
pub struct OwnedInstanceInfo {
    pub name: String,
    pub kind: InstanceKind,
    pub device_id: i32,
}

impl OwnedInstanceInfo {
    pub fn lend(&self) -> InstanceInfo<'_> {
        InstanceInfo { name: &self.name, kind: self.kind, device_id: self.device_id }
    }
}

impl<'a> From<&'a ParamValue> for ParameterValueParam<'a> {
    fn from(v: &'a ParamValue) -> Self {
        match v {
            ParamValue::Bool(b) => ParameterValueParam::Boolean(*b),
            ParamValue::Int64(i) => ParameterValueParam::Int64(*i),
            ParamValue::Uint64(u) => ParameterValueParam::Uint64(*u),
            ParamValue::Double(d) => ParameterValueParam::Double(*d),
            ParamValue::String(s) => ParameterValueParam::Text(s),
        }
    }
}

impl From<&ParamValue> for ParameterValue {
    fn from(v: &ParamValue) -> Self {
        match v {
            ParamValue::Bool(b) => ParameterValue::Boolean(*b),
            ParamValue::Int64(i) => ParameterValue::Int64(*i),
            ParamValue::Uint64(u) => ParameterValue::Uint64(*u),
            ParamValue::Double(d) => ParameterValue::Double(*d),
            ParamValue::String(s) => ParameterValue::Text(s.clone()),
        }
    }
}

impl From<ParameterValue> for ParamValue {
    fn from(v: ParameterValue) -> Self {
        match v {
            ParameterValue::Boolean(b) => ParamValue::Bool(b),
            ParameterValue::Int64(i) => ParamValue::Int64(i),
            ParameterValue::Uint64(u) => ParamValue::Uint64(u),
            ParameterValue::Double(d) => ParamValue::Double(d),
            ParameterValue::Text(s) => ParamValue::String(s),
        }
    }
}

/// A backend-reported error, as the client will see it.
pub fn backend_error(kind: ErrorKind, message: String) -> InferError {
    let kind = match kind {
        ErrorKind::InvalidArgument => HostErrorKind::InvalidArg,
        ErrorKind::Internal => HostErrorKind::Internal,
        ErrorKind::Unavailable => HostErrorKind::Unavailable,
        ErrorKind::Unsupported => HostErrorKind::Unsupported,
    };
    InferError::new(kind, message)
}
