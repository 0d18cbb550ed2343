//! Request tensors that stay in a client's GPU memory (Triton's CUDA shared memory): inputs a
//! `KIND_GPU` instance on the same GPU copies from device to device, and outputs it writes straight
//! into the client's buffer, so the bytes never cross to the host.
//!
//! The frontends leave every input of a CUDA region on the device ([`DeviceInputs::keep`]); when the
//! request reaches its model the server copies them to the host unless the model's instances all
//! read that GPU's memory (`InferenceRequest::settle_device_inputs`). So every other backend, ensembles and the
//! validation of byte sizes see host bytes as before, and only the one backend that can use device
//! memory ever meets a tensor whose bytes are elsewhere.
use bytes::Bytes;

use crate::shm::{DeviceSpan, ShmData};

/// The inputs of a request whose bytes are still in a client's CUDA region. Until
/// [`settle`](Self::settle) copies them, the request's tensor of that name holds no bytes.
#[derive(Clone, Debug, Default)]
pub struct DeviceInputs(Vec<(String, DeviceSpan)>);

impl DeviceInputs {
    /// An input's data as the request's tensor holds it: host bytes as they are; device bytes are
    /// kept here (the tensor gets none until they are settled).
    pub fn keep(&mut self, name: &str, data: ShmData) -> Bytes {
        match data {
            ShmData::Host(bytes) => bytes,
            ShmData::Device(span) => {
                self.0.push((name.to_string(), span));
                Bytes::new()
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The device bytes of input `name`, when they are still on the device.
    pub fn get(&self, name: &str) -> Option<&DeviceSpan> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, span)| span)
    }

    /// Takes every input out, to be kept again ([`Self::keep_span`]) or copied to the host.
    pub fn take_all(&mut self) -> Vec<(String, DeviceSpan)> {
        std::mem::take(&mut self.0)
    }

    pub fn keep_span(&mut self, name: String, span: DeviceSpan) {
        self.0.push((name, span));
    }
}

/// The outputs a client placed in CUDA regions: a `KIND_GPU` instance on the region's GPU writes
/// them there itself ([`crate::request::InferenceResponse::in_place`] then names them).
#[derive(Clone, Debug, Default)]
pub struct DeviceOutputs(Vec<(String, DeviceSpan)>);

impl DeviceOutputs {
    pub fn push(&mut self, name: &str, span: DeviceSpan) {
        self.0.push((name.to_string(), span));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where output `name` goes on the device, if the client placed it in a CUDA region.
    pub fn get(&self, name: &str) -> Option<&DeviceSpan> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, span)| span)
    }
}
