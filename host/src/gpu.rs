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

/// Part of a tensor on its way to the device: bytes in host memory, or `(address, length)` of
/// device memory on the same GPU.
pub enum Part<'a> {
    Host(&'a [u8]),
    Device(DevicePtr, usize),
}

impl Part<'_> {
    pub fn len(&self) -> usize {
        match self {
            Part::Host(bytes) => bytes.len(),
            Part::Device(_, n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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
        if n == 0 {
            // Nothing to stage (and no buffer yet, perhaps: no slice from a null pointer).
            return Ok(&mut []);
        }
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

    /// Enqueues each item's parts, in order, into the device address it names: host parts are
    /// staged in pinned memory (one host copy, consecutive host parts sent in one transfer), device
    /// parts (a client's CUDA shared memory) copied from device to device. Work enqueued on the
    /// stream afterwards sees the data.
    pub fn upload(&mut self, items: &[(DevicePtr, Vec<Part<'_>>)]) -> Result<(), String> {
        if items.iter().flat_map(|(_, parts)| parts).all(Part::is_empty) {
            return Ok(());
        }
        let staged: usize =
            items.iter().flat_map(|(_, parts)| parts).map(|p| if let Part::Host(b) = p { b.len() } else { 0 }).sum();
        self.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        // An earlier execution that failed half-way may still be reading the staging buffer.
        self.stream.synchronize().map_err(|e| format!("CUDA stream: {e}"))?;
        let cu_stream = self.stream.cu_stream();
        let staging = self.upload.reserve(staged)?;
        let mut used = 0;
        for (dst, parts) in items {
            // `at`: where the next part goes in `dst`; `pending`: staged host bytes not sent yet,
            // as (offset in `dst`, range of `staging`).
            let mut at = 0u64;
            let mut pending: Option<(u64, std::ops::Range<usize>)> = None;
            let send = |pending: &mut Option<(u64, std::ops::Range<usize>)>, staging: &[u8]| -> Result<(), String> {
                if let Some((offset, span)) = pending.take().filter(|(_, span)| !span.is_empty()) {
                    // SAFETY: `dst + offset .. + span.len()` lies inside the caller's device tensor
                    // (its byte size is the sum of its parts); the source is pinned memory this
                    // instance owns and does not touch again before synchronising the stream.
                    unsafe { result::memcpy_htod_async(*dst + offset, &staging[span], cu_stream) }
                        .map_err(|e| format!("host-to-device copy: {e}"))?;
                }
                Ok(())
            };
            for part in parts {
                match part {
                    Part::Host(bytes) => {
                        staging[used..used + bytes.len()].copy_from_slice(bytes);
                        match &mut pending {
                            Some((_, span)) => span.end += bytes.len(),
                            None => pending = Some((at, used..used + bytes.len())),
                        }
                        used += bytes.len();
                        at += bytes.len() as u64;
                    }
                    Part::Device(src, n) => {
                        send(&mut pending, staging)?;
                        if *n > 0 {
                            // SAFETY: `src .. src + n` is a client's mapped CUDA region (checked
                            // against it when the request was decoded, and kept mapped by the
                            // request until the stream is synchronised); the destination lies
                            // inside the caller's device tensor, as above.
                            unsafe { result::memcpy_dtod_async(*dst + at, *src, *n, cu_stream) }
                                .map_err(|e| format!("device-to-device copy: {e}"))?;
                        }
                        at += *n as u64;
                    }
                }
            }
            send(&mut pending, staging)?;
        }
        Ok(())
    }

    /// Enqueues a copy of `n` bytes from `src` to `dst`, both on this stream's device (an output
    /// into a client's CUDA shared memory). Complete once the stream is synchronised.
    pub fn copy_on_device(&mut self, dst: DevicePtr, src: DevicePtr, n: usize) -> Result<(), String> {
        if n == 0 {
            return Ok(());
        }
        self.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        // SAFETY: the caller passes `n` bytes of device memory at each end (an ORT output it holds
        // and a client's mapped region checked against the output's size), kept alive until it
        // synchronises the stream.
        unsafe { result::memcpy_dtod_async(dst, src, n, self.stream.cu_stream()) }
            .map_err(|e| format!("device-to-device copy: {e}"))
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
        a.upload(&[(ptr, vec![Part::Host(b"hello "), Part::Host(b"gpu!")])]).unwrap();
        let back = a.download(&[(ptr, 10)]).unwrap();
        assert_eq!(back, vec![b"hello gpu!".to_vec()]);
        // Host and device parts interleaved: "hello" from the host, " gpu" from the device copy
        // of the first upload, "?" from the host again, into a second buffer.
        let mut second = stream.alloc_zeros::<u8>(10).unwrap();
        let (ptr2, _sync2) = cudarc::driver::DevicePtrMut::device_ptr_mut(&mut second, &stream);
        let parts = vec![Part::Host(b"hello"), Part::Device(ptr + 5, 4), Part::Host(b"?")];
        a.upload(&[(ptr2, parts)]).unwrap();
        assert_eq!(a.download(&[(ptr2, 10)]).unwrap(), vec![b"hello gpu?".to_vec()]);
        a.copy_on_device(ptr, ptr2 + 6, 4).unwrap();
        assert_eq!(a.download(&[(ptr, 10)]).unwrap(), vec![b"gpu?o gpu!".to_vec()]);
        assert!(InstanceStream::new(device_count()).is_err());
    }
}
