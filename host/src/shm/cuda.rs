//! A CUDA shared-memory region (Triton's `cuda_shared_memory` extension): device memory a client
//! allocated in its own process and exported with `cudaIpcGetMemHandle`; the server opens the
//! handle (`cuIpcOpenMemHandle`) on the device the client names and copies inputs out of it and
//! outputs into it with the CUDA driver. The driver library is loaded at run time (`crate::gpu`),
//! so this builds everywhere; on a machine without a usable GPU every registration is refused as a
//! tritonserver built with GPU support refuses a handle it cannot open ("invalid args", the reason
//! in the log).
//!
//! Unlike a system region, the memory cannot shrink or vanish under the server: an IPC mapping
//! keeps the client's allocation alive until the server closes the handle, which happens when the
//! region is unregistered and the last request using it has finished (the `Arc` around it).
#![allow(unsafe_code)] // FFI to the CUDA driver; each block says why it is sound.

use std::sync::Arc;

use bytes::Bytes;
use cudarc::driver::{CudaContext, CudaStream, result, sys};

use super::end_of;
use crate::error::InferError;
use crate::gpu::{self, DevicePtr};

/// Bytes in a `cudaIpcMemHandle_t` (`CU_IPC_HANDLE_SIZE`).
pub const HANDLE_SIZE: usize = sys::CU_IPC_HANDLE_SIZE as usize;

/// One registered region: the first `byte_size` bytes of the client's allocation.
pub struct CudaRegion {
    pub name: String,
    pub device_id: u64,
    pub byte_size: u64,
    /// The device's primary context, made current on the calling thread around each driver call.
    ctx: Arc<CudaContext>,
    /// Outputs are copied on this (non-blocking) stream and waited for: a plain `cuMemcpyHtoD` from
    /// pageable memory may return before its DMA lands, and the client reads the buffer as soon as
    /// the response arrives.
    stream: Arc<CudaStream>,
    /// Where the opened handle maps the client's allocation in this process.
    base: DevicePtr,
}

// SAFETY: `base` is an address in the device's virtual address space, not host memory; every use
// binds the context first, and the driver serialises calls on one context from several threads.
unsafe impl Send for CudaRegion {}
unsafe impl Sync for CudaRegion {}

/// tritonserver's answer when the handle cannot be opened (it logs the driver's reason).
fn invalid_args() -> InferError {
    InferError::invalid("failed to register shared memory region: invalid args")
}

impl CudaRegion {
    /// Opens the client's IPC `handle` on GPU `device_id` as region `name` of `byte_size` bytes,
    /// with tritonserver's checks and messages (`SharedMemoryManager::RegisterCUDASharedMemory`).
    pub fn open(name: &str, handle: &[u8], device_id: u64, byte_size: u64) -> Result<Self, InferError> {
        if gpu::device_count() == 0 {
            tracing::warn!("CUDA shared memory region '{name}': this machine has no usable CUDA device");
            return Err(invalid_args());
        }
        // tritonserver reads the 64 bytes whatever it was sent; a shorter or longer handle is no
        // handle the driver made.
        let raw: [u8; HANDLE_SIZE] = handle.try_into().map_err(|_| {
            tracing::warn!("CUDA shared memory region '{name}': a handle of {} bytes, not {HANDLE_SIZE}", handle.len());
            invalid_args()
        })?;
        let device = usize::try_from(device_id).ok().filter(|d| *d < gpu::device_count()).ok_or_else(|| {
            tracing::warn!(
                "CUDA shared memory region '{name}': GPU {device_id} does not exist ({} available)",
                gpu::device_count()
            );
            invalid_args()
        })?;
        let ctx = CudaContext::new(device).map_err(|e| {
            tracing::warn!("CUDA shared memory region '{name}': cannot open GPU {device}: {e}");
            invalid_args()
        })?;
        ctx.bind_to_thread().map_err(|e| InferError::internal(format!("GPU {device}: {e}")))?;
        let stream = ctx
            .new_stream()
            .map_err(|e| InferError::internal(format!("GPU {device}: cannot create a CUDA stream: {e}")))?;
        let mut ipc = sys::CUipcMemHandle_st { reserved: [0; HANDLE_SIZE] };
        for (dst, src) in ipc.reserved.iter_mut().zip(raw) {
            *dst = src as std::ffi::c_char;
        }
        let mut base: DevicePtr = 0;
        // SAFETY: `base` is a valid out-pointer; the handle is plain bytes the driver validates (a
        // forged or stale one is an error, not undefined behaviour); the context is current.
        let opened = unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut base,
                ipc,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as std::ffi::c_uint,
            )
        }
        .result();
        if let Err(e) = opened {
            tracing::warn!("failed to open CUDA IPC handle for shared memory region '{name}': {e}");
            return Err(invalid_args());
        }
        // From here the mapping is closed by Drop, whatever happens next.
        let region = CudaRegion { name: name.into(), device_id, byte_size, ctx, stream, base };
        let (mut start, mut size): (DevicePtr, usize) = (0, 0);
        // SAFETY: out-pointers to locals; `base` was just mapped on the current context.
        let range = unsafe { sys::cuMemGetAddressRange_v2(&mut start, &mut size, base) }.result();
        // The region must lie inside the allocation the handle exports.
        let available = range.ok().map(|()| (start + size as u64).saturating_sub(base));
        if available.is_none_or(|n| byte_size > n) || byte_size == 0 {
            tracing::warn!(
                "CUDA shared memory region '{name}': {byte_size} bytes asked, the allocation holds {}",
                available.map_or_else(|| "an unknown size".to_string(), |n| n.to_string())
            );
            return Err(InferError::invalid(format!("failed to register shared memory region '{name}': invalid args")));
        }
        Ok(region)
    }

    /// The device address of `len` bytes at `offset`, checked against the region.
    fn at(&self, offset: u64, len: u64) -> Result<DevicePtr, InferError> {
        end_of(&self.name, self.byte_size, offset, len)?;
        self.ctx.bind_to_thread().map_err(|e| self.failed("selecting the GPU", e))?;
        Ok(self.base + offset)
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) -> InferError {
        InferError::internal(format!("CUDA shared memory region '{}': {what} failed: {e}", self.name))
    }

    /// A host copy of `len` bytes at `offset` (an input's data, for backends that read host memory).
    pub fn read(&self, offset: u64, len: u64) -> Result<Bytes, InferError> {
        let src = self.at(offset, len)?;
        let n = usize::try_from(len).map_err(|_| InferError::invalid("shared memory range too large"))?;
        // Fallible: the size is the client's (bounded by its own GPU allocation), and an
        // allocation the host refuses must fail this request, not abort the server.
        let mut data = Vec::new();
        data.try_reserve_exact(n).map_err(|_| {
            InferError::invalid(format!(
                "an input of {n} bytes in CUDA shared memory region '{}' is larger than the server can copy to the host",
                self.name
            ))
        })?;
        data.resize(n, 0);
        if n > 0 {
            // SAFETY: `src..src+n` lies inside the mapped allocation (checked by `at` against the
            // size verified at registration); the destination is a host buffer of `n` bytes.
            unsafe { sys::cuMemcpyDtoH_v2(data.as_mut_ptr().cast(), src, n) }
                .result()
                .map_err(|e| self.failed("copying an input from the GPU", e))?;
        }
        Ok(data.into())
    }

    /// `len` bytes at `offset` left on the device, for a backend that reads or writes device memory
    /// in place (a `KIND_GPU` ONNX instance on the same GPU): no copy is made here.
    pub fn span(self: &Arc<Self>, offset: u64, len: u64) -> Result<DeviceSpan, InferError> {
        end_of(&self.name, self.byte_size, offset, len)?;
        let len = usize::try_from(len).map_err(|_| InferError::invalid("shared memory range too large"))?;
        Ok(DeviceSpan { region: self.clone(), ptr: self.base + offset, len })
    }

    /// Copies `data` to `offset` of the region (an output).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), InferError> {
        let dst = self.at(offset, data.len() as u64)?;
        if !data.is_empty() {
            // SAFETY: as in `read`, the destination range lies inside the mapped allocation; the
            // source is `data.len()` readable host bytes, borrowed until the stream is synchronised
            // below.
            unsafe { result::memcpy_htod_async(dst, data, self.stream.cu_stream()) }
                .map_err(|e| self.failed("copying an output to the GPU", e))?;
        }
        // When this returns the output is in the client's buffer.
        self.stream.synchronize().map_err(|e| self.failed("waiting for an output's copy", e))
    }
}

/// A byte range of a CUDA region, kept on the device. It holds the region, so the client's
/// allocation stays mapped while a request uses it, however the region is unregistered meanwhile.
#[derive(Clone)]
pub struct DeviceSpan {
    region: Arc<CudaRegion>,
    ptr: DevicePtr,
    len: usize,
}

impl DeviceSpan {
    /// The CUDA device (ordinal) the memory lies on.
    pub fn device(&self) -> usize {
        self.region.device_id as usize
    }

    /// Its address in this process (valid on the device's primary context).
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes `data` (an output) at the start of the span, through the host: the region the span
    /// was taken from, whatever has been registered under its name since.
    pub fn write(&self, data: &[u8]) -> Result<(), InferError> {
        if data.len() > self.len {
            return Err(super::does_not_fit(data.len(), self.len as u64, &self.region.name));
        }
        self.region.write(self.ptr - self.region.base, data)
    }

    /// The region's name, for messages.
    pub fn region(&self) -> &str {
        &self.region.name
    }

    /// A host copy of the bytes (for a backend that reads host memory).
    pub fn to_host(&self) -> Result<Bytes, InferError> {
        self.region.read(self.ptr - self.region.base, self.len as u64)
    }
}

impl std::fmt::Debug for DeviceSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceSpan({} bytes of '{}' on GPU {})", self.len, self.region.name, self.region.device_id)
    }
}

impl Drop for CudaRegion {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `base` came from cuIpcOpenMemHandle and no copy uses it any more (this is the
            // last reference to the region).
            if let Err(e) = unsafe { sys::cuIpcCloseMemHandle(self.base) }.result() {
                tracing::warn!("CUDA shared memory region '{}': closing its IPC handle failed: {e}", self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With or without a GPU: handles of the wrong size, handles no driver made, devices that do
    /// not exist (and, without a GPU, every handle) get tritonserver's answer, a client error.
    #[test]
    fn handles_that_cannot_be_opened_are_invalid_args() {
        let refused = |handle: &[u8], device: u64| {
            let e = CudaRegion::open("r", handle, device, 64).err().expect("refused");
            assert_eq!(
                (e.kind, e.message.as_str()),
                (invalid_args().kind, "failed to register shared memory region: invalid args")
            );
        };
        refused(&[], 0);
        refused(&[0; 10], 0);
        refused(&[0; HANDLE_SIZE], 0);
        refused(&[7; HANDLE_SIZE], gpu::device_count() as u64);
    }
}
