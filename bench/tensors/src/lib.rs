//! What the large-tensor benchmark's two programs share: Triton's gRPC types, POSIX shared memory
//! regions, and the two models' arithmetic. Not a product: measuring sticks (bench/tensors.sh).
//!
//! - `tensor-ceiling` serves `identity_fp32` and `reduce_sum_fp32` over bare hyper (KServe v2 HTTP with
//!   the binary extension) and bare tonic (Triton's gRPC), inputs and outputs inline or in system
//!   shared memory, with nothing else in the way.
//! - `tensor-load` drives any server speaking those protocols with one large FP32 tensor per request,
//!   closed loop at a fixed concurrency, and reports throughput, latency, payload bandwidth and the
//!   CPU time the client and the server each spent.

pub mod pb {
    #![allow(clippy::all)]
    tonic::include_proto!("inference");
}

use std::ffi::CString;
use std::time::{Duration, Instant};

/// The models both sides know, by what they compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// OUTPUT0 = INPUT0.
    Identity,
    /// OUTPUT0[..., 0] = the sum of INPUT0's last axis.
    ReduceSum,
}

impl Kind {
    /// What a model computes, from its name: `reduce_sum*` sums, anything else is an identity.
    pub fn of(model: &str) -> Kind {
        if model.starts_with("reduce_sum") { Kind::ReduceSum } else { Kind::Identity }
    }

    /// Output shape for an input of `shape`.
    pub fn output_shape(self, shape: &[i64]) -> Vec<i64> {
        match self {
            Kind::Identity => shape.to_vec(),
            Kind::ReduceSum => {
                shape.split_last().map(|(_, outer)| outer.iter().copied().chain([1]).collect()).unwrap_or_default()
            }
        }
    }

    /// Output bytes for an input of `shape`.
    pub fn output_bytes(self, shape: &[i64]) -> usize {
        self.output_shape(shape).iter().product::<i64>().max(0) as usize * 4
    }

    /// Writes the output for `input` (little-endian FP32 of `shape`) into `out`.
    pub fn compute(self, shape: &[i64], input: &[u8], out: &mut [u8]) {
        match self {
            Kind::Identity => out.copy_from_slice(input),
            Kind::ReduceSum => {
                let n = shape.last().copied().unwrap_or(0).max(1) as usize * 4;
                for (row, o) in input.chunks_exact(n).zip(out.chunks_exact_mut(4)) {
                    o.copy_from_slice(&sum_le_f32(row).to_le_bytes());
                }
            }
        }
    }
}

/// The sum of little-endian FP32 values, in eight lanes (as SIMD kernels do; the order differs
/// from a plain running sum only by rounding).
pub fn sum_le_f32(bytes: &[u8]) -> f32 {
    let mut lanes = [0f32; 8];
    let chunks = bytes.chunks_exact(32);
    let mut tail = 0f32;
    for v in chunks.remainder().chunks_exact(4) {
        tail += f32::from_le_bytes([v[0], v[1], v[2], v[3]]);
    }
    for chunk in chunks {
        for (lane, v) in lanes.iter_mut().zip(chunk.chunks_exact(4)) {
            *lane += f32::from_le_bytes([v[0], v[1], v[2], v[3]]);
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// A POSIX shared memory object mapped read-write (`shm_open` + `mmap`), unmapped on drop.
pub struct Region {
    /// The whole mapping, from the object's start.
    base: *mut u8,
    map_len: usize,
    /// The registered window: `offset` bytes into the mapping.
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; whoever shares a Region decides who writes when (here: one
// request at a time per region, as Triton's clients use them).
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// Creates (or truncates) the object `key` (e.g. "/bench_in_0") of `len` bytes and maps it.
    pub fn create(key: &str, len: usize) -> std::io::Result<Region> {
        Self::open(key, len, 0, true)
    }

    /// Maps `len` bytes at `offset` of the existing object `key`, as a server does on registration.
    pub fn attach(key: &str, offset: usize, len: usize) -> std::io::Result<Region> {
        Self::open(key, len, offset, false)
    }

    fn open(key: &str, len: usize, offset: usize, create: bool) -> std::io::Result<Region> {
        let name = CString::new(key).map_err(|_| std::io::Error::other("key has a NUL"))?;
        let flags = libc::O_RDWR | if create { libc::O_CREAT } else { 0 };
        // SAFETY: plain libc calls on a name we own; every result is checked.
        unsafe {
            let fd = libc::shm_open(name.as_ptr(), flags, 0o600);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if create && libc::ftruncate(fd, len as libc::off_t) != 0 {
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(e);
            }
            let map_len = (offset + len).max(1);
            let ptr =
                libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            libc::close(fd);
            if ptr == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            Ok(Region { base: ptr as *mut u8, map_len, ptr: (ptr as *mut u8).add(offset), len })
        }
    }

    /// Removes the object's name (the mapping stays until dropped).
    pub fn unlink(key: &str) {
        if let Ok(name) = CString::new(key) {
            // SAFETY: a libc call on an owned C string.
            unsafe { libc::shm_unlink(name.as_ptr()) };
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is mapped for as long as self lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The mapped bytes, to write.
    #[allow(clippy::mut_from_ref)]
    pub fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: as `bytes`; concurrent writers are the caller's protocol (one request per region).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `open` mapped.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
    }
}

/// User plus system CPU time of process `pid` so far (`/proc/PID/stat`), or of this process.
pub fn cpu_time(pid: Option<u32>) -> Duration {
    let path = pid.map_or("/proc/self/stat".to_string(), |p| format!("/proc/{p}/stat"));
    let Ok(stat) = std::fs::read_to_string(path) else { return Duration::ZERO };
    // Fields after the command name (which may hold spaces) in parentheses.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return Duration::ZERO };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat; here 11 and 12 after the state field (index 0).
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos((ticks(11) + ticks(12)) * 1_000_000_000 / hz)
}

/// The CPU time this process and the processes `server_pids` (none: not measured) spent between
/// `start` and `end`, sleeping until then: the load generators' per-request cost of each side.
pub async fn cpu_over_window(server_pids: Vec<u32>, start: Instant, end: Instant) -> (Duration, Option<Duration>) {
    let server = || server_pids.iter().map(|p| cpu_time(Some(*p))).sum::<Duration>();
    tokio::time::sleep_until(start.into()).await;
    let (c0, s0) = (cpu_time(None), server());
    tokio::time::sleep_until(end.into()).await;
    (cpu_time(None) - c0, (!server_pids.is_empty()).then(|| server() - s0))
}

/// The `p` quantile (0..=1) of sorted latencies, in microseconds (0 for none).
pub fn percentile(sorted: &[Duration], p: f64) -> u128 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_micros()
}

/// A program's exit: its error on stderr after its name, and failure.
pub fn exit_with(program: &str, result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
