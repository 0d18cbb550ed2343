//! shm-map-probe — would mapping a client's shared-memory pages into a sandbox's linear memory beat
//! copying them in? (issue 28: through system shared memory the sandboxed identity copies twice, the
//! client's input into guest memory and the guest's output into the client's output region, where
//! the mapped ceiling and ONNX Runtime copy once.)
//!
//! Per request and tensor size, in one process, no server: an input region and an output region in
//! `/dev/shm` (mapped once, as the server maps a registered region), and a "guest" buffer of plain
//! anonymous 4 KiB pages touched beforehand (wasmtime's pooling allocator gives linear memory such
//! pages), then for each mode the input reaches the guest buffer and the output copy reads it there:
//! - `copy`: the server's way: `bulk_copy::copy` in, `bulk_copy::copy` out;
//! - `map`: the input region's pages mapped over the guest buffer (`MAP_PRIVATE | MAP_FIXED`: the
//!   guest may write its input without the client seeing it), the output copy faulting them in, and
//!   anonymous pages mapped back afterwards (the guest must not go on seeing the client's memory);
//!   the guest never touches the pages given back, which flatters this mode;
//! - `map-reuse`: `map`, and the guest touches each page given back once (a zero-filled fault each),
//!   as its allocator reusing the memory for anything would.
//!
//! Modes alternate within every round; prints each mode's median µs a request and GB/s of payload,
//! and the median over rounds of each mode's time ÷ `copy`'s. Linux only. Not a test.
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Parser;
use nereus::bulk_copy;

#[derive(Parser, Debug)]
struct Args {
    /// Tensor sizes, MiB.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    sizes: Vec<usize>,
    /// Rounds (every mode once a round, in turn).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Payload a measurement moves, MiB (at least 4 requests).
    #[arg(long, default_value_t = 512)]
    mib_per_measurement: usize,
}

const MODES: [&str; 3] = ["copy", "map", "map-reuse"];
const PAGE: usize = 4096;

/// A file in `/dev/shm` of `len` bytes mapped shared, as a registered region is; unlinked at once.
struct Region {
    fd: libc::c_int,
    ptr: *mut u8,
    len: usize,
}

impl Region {
    fn new(name: &str, len: usize, fill: u8) -> anyhow::Result<Self> {
        let path = std::ffi::CString::new(format!("/shm-map-probe-{}-{name}", std::process::id()))?;
        // SAFETY: a fresh file of our own, mapped whole; the mapping is owned by the returned value.
        unsafe {
            let fd = libc::shm_open(path.as_ptr(), libc::O_CREAT | libc::O_RDWR | libc::O_EXCL, 0o600);
            if fd < 0 {
                bail!("shm_open: {}", std::io::Error::last_os_error());
            }
            libc::shm_unlink(path.as_ptr());
            if libc::ftruncate(fd, len as libc::off_t) != 0 {
                bail!("ftruncate: {}", std::io::Error::last_os_error());
            }
            let ptr =
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            if ptr == libc::MAP_FAILED {
                bail!("mmap: {}", std::io::Error::last_os_error());
            }
            std::ptr::write_bytes(ptr.cast::<u8>(), fill, len);
            Ok(Region { fd, ptr: ptr.cast(), len })
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: mapped for `len` bytes while `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is the only way to it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: our own mapping and descriptor.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
            libc::close(self.fd);
        }
    }
}

/// The guest buffer: anonymous private pages, touched once.
struct Guest {
    ptr: *mut u8,
    len: usize,
}

/// Maps `len` bytes of anonymous private pages, at `at` in place of what is there when
/// `libc::MAP_FIXED` is among `flags`.
fn anonymous(at: *mut u8, len: usize, flags: libc::c_int) -> anyhow::Result<*mut u8> {
    // SAFETY: an anonymous mapping; with MAP_FIXED it replaces pages of a mapping the caller owns.
    let p = unsafe {
        libc::mmap(
            at.cast(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        bail!("mmap: {}", std::io::Error::last_os_error());
    }
    Ok(p.cast())
}

impl Guest {
    fn new(len: usize) -> anyhow::Result<Self> {
        let mut guest = Guest { ptr: anonymous(std::ptr::null_mut(), len, 0)?, len };
        guest.bytes_mut().fill(0);
        Ok(guest)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: mapped for `len` bytes while `self` lives (remapped in place, never unmapped).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Maps `region`'s pages over the buffer, copy-on-write.
    fn map(&mut self, region: &Region) -> anyhow::Result<()> {
        // SAFETY: replaces pages of our own mapping, same length, with the region's file.
        let p = unsafe {
            libc::mmap(
                self.ptr.cast(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                region.fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!("mmap over the guest: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Gives the buffer anonymous pages again.
    fn restore(&mut self) -> anyhow::Result<()> {
        anonymous(self.ptr, self.len, libc::MAP_FIXED).map(drop)
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One request in `mode`; returns nothing but leaves the output region holding the input.
fn request(mode: &str, input: &Region, guest: &mut Guest, output: &mut Region) -> anyhow::Result<()> {
    match mode {
        "copy" => bulk_copy::copy(guest.bytes_mut(), input.bytes()),
        _ => guest.map(input)?,
    }
    bulk_copy::copy(output.bytes_mut(), guest.bytes());
    if mode != "copy" {
        guest.restore()?;
        if mode == "map-reuse" {
            for page in guest.bytes_mut().chunks_mut(PAGE) {
                page[0] = 1;
            }
        }
    }
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!("| MiB | mode | µs a request | GB/s | ÷ copy (median of rounds) |");
    println!("|---|---|---|---|---|");
    for &mib in &args.sizes {
        let len = mib << 20;
        let input = Region::new("in", len, 7).context("input region")?;
        let mut output = Region::new("out", len, 0).context("output region")?;
        let mut guest = Guest::new(len)?;
        let requests = (args.mib_per_measurement / mib.max(1)).max(4);
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
        for _ in 0..args.rounds {
            for (m, mode) in MODES.iter().enumerate() {
                request(mode, &input, &mut guest, &mut output)?; // warm
                let start = Instant::now();
                for _ in 0..requests {
                    request(mode, &input, &mut guest, &mut output)?;
                }
                times[m].push(start.elapsed().as_secs_f64() / requests as f64);
            }
        }
        if output.bytes().iter().any(|&b| b != 7) {
            bail!("the output region does not hold the input");
        }
        let copy = times[0].clone();
        for (m, mode) in MODES.iter().enumerate() {
            let mut ratios: Vec<f64> = times[m].iter().zip(&copy).map(|(t, c)| t / c).collect();
            let t = median(&mut times[m].clone());
            println!("| {mib} | {mode} | {:.0} | {:.2} | {:.2} |", t * 1e6, len as f64 / t / 1e9, median(&mut ratios));
        }
    }
    Ok(())
}
