//! Request tensors that stay in a client's GPU memory (Triton's CUDA shared memory): inputs a
//! `KIND_GPU` instance on the same GPU copies from device to device, and outputs it writes straight
//! into the client's buffer, so the bytes never cross to the host.
//!
//! The frontends leave every input of a CUDA region on the device ([`DeviceTensors::keep`]); when
//! the request reaches its model the server copies them to the host unless the model's instances
//! all read that GPU's memory (`InferenceRequest::settle_device_inputs`). So every other backend,
//! ensembles and the validation of byte sizes see host bytes as before, and only the one backend
//! that can use device memory ever meets a tensor whose bytes are elsewhere.
use bytes::Bytes;

use crate::shm::{DeviceSpan, ShmData};

/// A request's tensors that lie in a client's CUDA regions, by name: its inputs still there (the
/// request's tensor of that name holds no bytes until they are settled), or the places of its
/// outputs there.
#[derive(Clone, Debug, Default)]
pub struct DeviceTensors(Vec<(String, DeviceSpan)>);

impl DeviceTensors {
    /// An input's data as the request's tensor holds it: host bytes as they are; device bytes are
    /// kept here (the tensor gets none until they are settled).
    pub fn keep(&mut self, name: &str, data: ShmData) -> Bytes {
        match data {
            ShmData::Host(bytes) => bytes,
            ShmData::Device(span) => {
                self.push(name.to_string(), span);
                Bytes::new()
            }
        }
    }

    pub fn push(&mut self, name: String, span: DeviceSpan) {
        self.0.push((name, span));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where tensor `name` lies on the device, if it does.
    pub fn get(&self, name: &str) -> Option<&DeviceSpan> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, span)| span)
    }

    /// Takes every tensor out, to be pushed again or copied to the host.
    pub fn take_all(&mut self) -> Vec<(String, DeviceSpan)> {
        std::mem::take(&mut self.0)
    }
}
