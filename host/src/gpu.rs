//! CUDA devices, per-instance streams and pinned staging memory, through cudarc's driver API.
//!
//! The driver library (`libcuda`) is loaded at run time, so the server builds and runs on machines
//! with no CUDA at all: there [`device_count`] is 0 and `KIND_GPU` instance groups are rejected
//! with a reason, as Triton rejects them. Each GPU instance owns an [`InstanceStream`]: its own
//! CUDA stream (framework backends run their kernels on it) and two pinned host buffers, one that
//! inputs are staged through on their way to the device and one that outputs come back into, so
//! copies are asynchronous on the instance's stream and different instances overlap copies with
//! each other's kernels.

#![allow(unsafe_code)] // FFI to the CUDA driver; each block says why it is sound.
use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use cudarc::driver::{CudaContext, CudaStream, result, sys};

/// A device address, as the CUDA driver API hands it out.
pub type DevicePtr = sys::CUdeviceptr;

/// Number of usable CUDA devices (honouring `CUDA_VISIBLE_DEVICES`): 0 where no driver library is
/// installed or it fails to initialise. Probed once per process.
pub fn device_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        // SAFETY: only tries to dlopen the driver library.
        if !unsafe { sys::is_culib_present() } {
            return 0;
        }
        // The bindings resolve symbols lazily and panic on a missing one; a driver too broken to
        // initialise must mean "no GPUs", not a crashed server.
        let probe = std::panic::catch_unwind(|| {
            result::init()?;
            result::device::get_count()
        });
        match probe {
            Ok(Ok(n)) => usize::try_from(n).unwrap_or(0),
            Ok(Err(e)) => {
                tracing::info!("CUDA driver present but unusable ({e}); no GPUs");
                0
            }
            Err(_) => {
                tracing::info!("CUDA driver present but incomplete; no GPUs");
                0
            }
        }
    })
}

/// "GPU 0: <name>, <memory> MiB" for each device, for the startup log.
pub fn describe_devices() -> Vec<String> {
    (0..device_count())
        .map(|i| {
            let ordinal = i as i32;
            let name = result::device::get(ordinal).and_then(result::device::get_name).unwrap_or_default();
            // SAFETY: the device handle comes from the driver for an ordinal below the count.
            let memory = result::device::get(ordinal)
                .and_then(|d| unsafe { result::device::total_mem(d) })
                .map(|b| b / (1 << 20))
                .unwrap_or(0);
            format!("GPU {i}: {name}, {memory} MiB")
        })
        .collect()
}

/// The UUID of the CUDA device `ordinal`, as NVML and tritonserver's `gpu_uuid` label spell it
/// (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`); `None` if the driver cannot tell.
pub fn device_uuid(ordinal: usize) -> Option<String> {
    if ordinal >= device_count() {
        return None;
    }
    let device = result::device::get(ordinal as i32).ok()?;
    let uuid = result::device::get_uuid(device).ok()?;
    let b: Vec<u8> = uuid.bytes.iter().map(|c| *c as u8).collect();
    let hex = |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    Some(format!("GPU-{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16)))
}

/// Page-locked host memory owned by one instance, grown on demand and never shrunk.
struct Pinned {
    ctx: Arc<CudaContext>,
    ptr: *mut u8,
    len: usize,
    /// `CU_MEMHOSTALLOC_WRITECOMBINED` for memory the host only writes (faster to send); 0 for
    /// memory the host reads back (write-combined memory is very slow to read).
    flags: u32,
}

// SAFETY: the buffer is exclusively owned by one instance, which one worker thread drives at a time.
unsafe impl Send for Pinned {}

impl Pinned {
    fn new(ctx: Arc<CudaContext>, flags: u32) -> Self {
        Pinned { ctx, ptr: std::ptr::null_mut(), len: 0, flags }
    }

    /// At least `n` bytes of pinned memory (the contents are not kept when it grows).
    fn reserve(&mut self, n: usize) -> Result<&mut [u8], String> {
        if n > self.len {
            self.release();
            let size = n.next_power_of_two().max(1 << 16);
            // SAFETY: a plain allocation; the pointer is freed in `release`.
            let ptr = unsafe { result::malloc_host(size, self.flags) }
                .map_err(|e| format!("cannot allocate {size} bytes of pinned host memory: {e}"))?;
            self.ptr = ptr.cast();
            self.len = size;
        }
        // SAFETY: `ptr` points at `len >= n` bytes this buffer owns; the CUDA copies that read or
        // write them have completed (callers synchronise the stream before reusing the buffer).
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, n) })
    }

    fn release(&mut self) {
        if !self.ptr.is_null() {
            let _ = self.ctx.bind_to_thread();
            // SAFETY: allocated by `malloc_host` and not used after this.
            let _ = unsafe { result::free_host(self.ptr.cast::<c_void>()) };
            self.ptr = std::ptr::null_mut();
            self.len = 0;
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.release();
    }
}

/// One instance's CUDA stream on its device, with the pinned memory its copies go through.
pub struct InstanceStream {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    upload: Pinned,
    download: Pinned,
}

impl InstanceStream {
    /// A new stream on `device`'s primary context (the one CUDA runtime libraries such as ONNX
    /// Runtime use, so the stream is valid for them too).
    pub fn new(device: usize) -> Result<Self, String> {
        if device >= device_count() {
            return Err(format!("GPU {device} does not exist ({} available)", device_count()));
        }
        let ctx = CudaContext::new(device).map_err(|e| format!("cannot open GPU {device}: {e}"))?;
        let stream = ctx.new_stream().map_err(|e| format!("cannot create a CUDA stream on GPU {device}: {e}"))?;
        let upload = Pinned::new(ctx.clone(), sys::CU_MEMHOSTALLOC_WRITECOMBINED);
        let download = Pinned::new(ctx.clone(), 0);
        Ok(InstanceStream { ctx, stream, upload, download })
    }

    /// The raw `CUstream`, for a framework's "user compute stream" option.
    pub fn raw(&self) -> *mut () {
        self.stream.cu_stream().cast()
    }

    /// Stages every item's bytes in pinned memory (one host copy) and enqueues their transfers to
    /// the device addresses on this stream. Work enqueued on the stream afterwards sees the data.
    pub fn upload(&mut self, items: &[(DevicePtr, &[Bytes])]) -> Result<(), String> {
        let total: usize = items.iter().flat_map(|(_, parts)| parts.iter()).map(Bytes::len).sum();
        if total == 0 {
            return Ok(());
        }
        self.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        // An earlier execution that failed half-way may still be reading the staging buffer.
        self.stream.synchronize().map_err(|e| format!("CUDA stream: {e}"))?;
        let staging = self.upload.reserve(total)?;
        let mut offset = 0;
        let mut spans = Vec::with_capacity(items.len());
        for (dst, parts) in items {
            let start = offset;
            for part in parts.iter() {
                staging[offset..offset + part.len()].copy_from_slice(part);
                offset += part.len();
            }
            spans.push((*dst, start..offset));
        }
        for (dst, span) in spans {
            if span.is_empty() {
                continue;
            }
            // SAFETY: `dst` is a device allocation of at least `span.len()` bytes (the caller's
            // tensor of that byte size); the source is pinned memory this instance owns and does
            // not touch again before synchronising the stream.
            unsafe { result::memcpy_htod_async(dst, &staging[span], self.stream.cu_stream()) }
                .map_err(|e| format!("host-to-device copy: {e}"))?;
        }
        Ok(())
    }

    /// Enqueues copies of each `(address, byte length)` back into pinned memory on this stream,
    /// waits for the stream (so for everything enqueued before, kernels included), and returns
    /// the bytes.
    pub fn download(&mut self, items: &[(DevicePtr, usize)]) -> Result<Vec<Vec<u8>>, String> {
        let total: usize = items.iter().map(|(_, n)| n).sum();
        self.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        let cu_stream = self.stream.cu_stream();
        let staging = self.download.reserve(total)?;
        let mut offset = 0;
        for (src, n) in items {
            if *n > 0 {
                // SAFETY: `src` is a device allocation of `n` bytes; the destination is pinned
                // memory this instance owns, read only after the stream is synchronised below.
                unsafe { result::memcpy_dtoh_async(&mut staging[offset..offset + n], *src, cu_stream) }
                    .map_err(|e| format!("device-to-host copy: {e}"))?;
            }
            offset += n;
        }
        self.stream.synchronize().map_err(|e| format!("CUDA stream: {e}"))?;
        let staging = &self.download.reserve(total)?[..];
        let mut offset = 0;
        Ok(items
            .iter()
            .map(|(_, n)| {
                let bytes = staging[offset..offset + n].to_vec();
                offset += n;
                bytes
            })
            .collect())
    }

    /// Waits for everything enqueued on this stream.
    pub fn synchronize(&self) -> Result<(), String> {
        self.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        self.stream.synchronize().map_err(|e| format!("CUDA stream: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Skips (returns None) with a message on machines without a GPU.
    fn gpu() -> Option<()> {
        if device_count() == 0 {
            eprintln!("skipping: no CUDA device");
            return None;
        }
        Some(())
    }

    #[test]
    fn no_gpu_means_zero_devices_not_a_crash() {
        // On any machine this must answer; with no driver it is 0.
        let n = device_count();
        assert_eq!(describe_devices().len(), n);
    }

    #[test]
    fn instances_get_distinct_streams_and_bytes_round_trip_through_the_device() {
        if gpu().is_none() {
            return;
        }
        let mut a = InstanceStream::new(0).unwrap();
        let b = InstanceStream::new(0).unwrap();
        assert_ne!(a.raw(), b.raw(), "each instance owns its own stream");
        let stream = a.stream.clone();
        let mut device = stream.alloc_zeros::<u8>(10).unwrap();
        let (ptr, _sync) = cudarc::driver::DevicePtrMut::device_ptr_mut(&mut device, &stream);
        let parts = [Bytes::from_static(b"hello "), Bytes::from_static(b"gpu!")];
        a.upload(&[(ptr, &parts)]).unwrap();
        let back = a.download(&[(ptr, 10)]).unwrap();
        assert_eq!(back, vec![b"hello gpu!".to_vec()]);
        assert!(InstanceStream::new(device_count()).is_err());
    }
}
