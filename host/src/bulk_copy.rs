//! Copies of megabyte tensors with non-temporal stores: the sandbox's two copies of a tensor (into
//! the guest's memory as `execute` is called, out of it as `send-response` is handled), the joins of
//! HTTP bodies and gRPC messages, and writes into a client's shared-memory mapping.
//!
//! A copy of many megabytes does not fit in the caches, and with ordinary stores every line of the
//! destination is first read from memory only to be overwritten (a read for ownership), and evicts
//! what the cache held. Streaming stores write whole lines past the cache: on the 2-core machine the
//! benchmarks run on (an AMD EPYC, 32 MiB of L3), a 16–64 MiB copy ran at 6.0–6.4 GB/s with glibc's
//! `memcpy` and 10.5–12.6 GB/s with AVX2 streaming stores. glibc switches to
//! streaming stores itself only above `x86_non_temporal_threshold`, which it put at 192 MiB there.
//! Below [`STREAM_THRESHOLD`] the destination is likely still in cache when it is next read and
//! `memcpy` is the faster (a 4 MiB copy: 28 against 18 GB/s), so it is used as ever, unless the
//! process holds so many megabyte buffers at once that they crowd the cache out anyway (several
//! large requests in flight): then copies from [`CROWDED_THRESHOLD`] stream too.
#![allow(unsafe_code)] // Streaming stores are intrinsics; each block says why it is sound.
use std::mem::MaybeUninit;

/// The size from which a copy streams: where source and destination together outgrow half of a
/// typical last-level cache (an 8 MiB copy streamed at 17–19 GB/s against `memcpy`'s 9.5–10.4).
pub const STREAM_THRESHOLD: usize = 8 << 20;

/// The size from which a copy streams while the process holds [`CROWDED_LIVE`] bytes or more of
/// megabyte buffers (`large_pages::live_bytes`): several large tensors in flight at once outgrow
/// the cache together although each alone would fit. Measured at 4 MiB, a threshold of 4 MiB
/// gained 1.08–1.37× at concurrency 4 over HTTP and gRPC (10 of 10 rounds) and lost at
/// concurrency 1 through shared memory (server CPU 1.29 → 1.65 ms a request), where one request's
/// buffers stay in the cache between its copies (bench/results/2026-12-01-streamed-copies.md).
pub const CROWDED_THRESHOLD: usize = 4 << 20;

/// Bytes of megabyte buffers held at once from which copies of [`CROWDED_THRESHOLD`] stream: half
/// of the benchmark machine's 32 MiB of L3. One 4 MiB request over HTTP holds about 12 MiB of them
/// (its joined body and its answer, each mapped in whole huge pages); two hold more.
pub const CROWDED_LIVE: usize = 16 << 20;

/// Copies `src` into `dst`, which must be as long.
///
/// # Panics
///
/// If the lengths differ, as [`slice::copy_from_slice`].
pub fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "bulk_copy::copy: lengths differ");
    // SAFETY: both are valid for `len` bytes (equal lengths asserted), and a `&mut` cannot overlap
    // a `&`.
    unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// `src` in a new buffer of the host's (what `Bytes::copy_from_slice` does, streamed when large).
pub fn to_bytes(src: &[u8]) -> bytes::Bytes {
    if !should_stream(src.len()) {
        return bytes::Bytes::copy_from_slice(src);
    }
    let mut buffer: Vec<u8> = Vec::with_capacity(src.len());
    let spare: &mut [MaybeUninit<u8>] = &mut buffer.spare_capacity_mut()[..src.len()];
    // SAFETY: `spare` is valid for writes of `src.len()` bytes and, being the vector's own fresh
    // allocation, cannot overlap `src`.
    unsafe { stream_nonoverlapping(src.as_ptr(), spare.as_mut_ptr().cast(), src.len()) };
    // SAFETY: the copy initialised the first `src.len()` bytes, within the capacity.
    unsafe { buffer.set_len(src.len()) };
    bytes::Bytes::from(buffer)
}

/// Appends `data` to `buffer`, streamed when `stream` says so for the whole the pieces make up (a
/// body joined from the frames it arrived in: each frame is small, the buffer they fill may not
/// be). [`should_stream`] decides it from that size, once for the whole.
pub fn extend(buffer: &mut bytes::BytesMut, data: &[u8], stream: bool) {
    if !stream {
        buffer.extend_from_slice(data);
        return;
    }
    buffer.reserve(data.len());
    let spare = &mut buffer.spare_capacity_mut()[..data.len()];
    // SAFETY: `spare` is valid for writes of `data.len()` bytes (reserved above) and is the buffer's
    // own unused capacity, which `data`, borrowed apart from the `&mut` buffer, cannot overlap.
    unsafe { stream_nonoverlapping(data.as_ptr(), spare.as_mut_ptr().cast(), data.len()) };
    // SAFETY: the copy initialised the `data.len()` bytes after the buffer's end, within capacity.
    unsafe { buffer.set_len(buffer.len() + data.len()) };
}

/// Whether a buffer that ends up `total` bytes long is filled with streaming stores: from
/// [`STREAM_THRESHOLD`], or from [`CROWDED_THRESHOLD`] while the process holds many megabyte
/// buffers (see [`streams`]).
pub fn should_stream(total: usize) -> bool {
    // The size first: a small tensor's copy does not read the allocator's count.
    total >= CROWDED_THRESHOLD && streams(total, crate::large_pages::live_bytes())
}

/// [`should_stream`]'s rule, given the bytes of megabyte buffers held now.
fn streams(total: usize, live: usize) -> bool {
    total >= STREAM_THRESHOLD || (total >= CROWDED_THRESHOLD && live >= CROWDED_LIVE)
}

/// Copies `len` bytes from `src` to `dst`, streaming when [`should_stream`] says so.
///
/// # Safety
///
/// As [`std::ptr::copy_nonoverlapping`]: `src` valid for reads and `dst` for writes of `len`
/// bytes, the two not overlapping. Neither needs any alignment.
pub unsafe fn copy_nonoverlapping(src: *const u8, dst: *mut u8, len: usize) {
    if should_stream(len) {
        // SAFETY: the caller's contract.
        unsafe { stream_nonoverlapping(src, dst, len) }
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }
}

/// Copies `len` bytes from `src` to `dst` with streaming stores whatever `len`. A CPU without AVX2
/// (x86 before 2013, other architectures) keeps `memcpy`: SSE2's 16-byte streaming stores ran 10–20%
/// below AVX2's, and one loop is less unsafe code to keep than two.
///
/// # Safety
///
/// As [`copy_nonoverlapping`].
unsafe fn stream_nonoverlapping(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the caller's contract; AVX2 is present (detected above).
            unsafe { x86::stream_avx2(src, dst, len) };
            return;
        }
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Copies with 32-byte streaming stores, 128 bytes a step: the head up to the destination's
    /// first 32-byte boundary and the tail after the last whole step with `memcpy`.
    ///
    /// # Safety
    ///
    /// As [`super::copy_nonoverlapping`], and the CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn stream_avx2(src: *const u8, dst: *mut u8, len: usize) {
        // SAFETY (the whole function): every offset read or written is below `len`, the
        // caller's ranges; loads are unaligned loads, and stores go to `dst + head + 128 * k`,
        // 32-byte aligned by the choice of `head`.
        unsafe {
            let head = dst.align_offset(32).min(len);
            std::ptr::copy_nonoverlapping(src, dst, head);
            let (mut s, mut d) = (src.add(head), dst.add(head));
            let steps = (len - head) / 128;
            for _ in 0..steps {
                let a = _mm256_loadu_si256(s.cast());
                let b = _mm256_loadu_si256(s.add(32).cast());
                let c = _mm256_loadu_si256(s.add(64).cast());
                let e = _mm256_loadu_si256(s.add(96).cast());
                _mm256_stream_si256(d.cast(), a);
                _mm256_stream_si256(d.add(32).cast(), b);
                _mm256_stream_si256(d.add(64).cast(), c);
                _mm256_stream_si256(d.add(96).cast(), e);
                s = s.add(128);
                d = d.add(128);
            }
            // Streaming stores are weakly ordered: fence them before anything that publishes the
            // buffer (a response handed to another thread) can be seen.
            _mm_sfence();
            std::ptr::copy_nonoverlapping(s, d, len - head - steps * 128);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source whose every byte differs from its neighbours' (a wrong offset shows).
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn a_streamed_copy_is_exact_at_every_alignment_and_tail() {
        let len = STREAM_THRESHOLD + 200;
        let source = pattern(len + 64);
        let mut target = vec![0u8; len + 64];
        // Source and destination misaligned by each amount, tails of every length modulo a step.
        for (from, to, cut) in [(0, 0, 0), (1, 0, 1), (0, 3, 17), (5, 31, 127), (33, 17, 64), (63, 1, 100)] {
            let n = len - cut;
            target.fill(0);
            copy(&mut target[to..to + n], &source[from..from + n]);
            assert!(target[to..to + n] == source[from..from + n], "from {from} to {to}, {n} bytes");
            assert!(target[..to].iter().all(|b| *b == 0), "nothing written before the destination");
            assert!(target[to + n..].iter().all(|b| *b == 0), "nothing written after it");
        }
    }

    #[test]
    fn small_and_large_copies_into_new_buffers_keep_their_bytes() {
        for len in [0, 1, 4096, STREAM_THRESHOLD - 1, STREAM_THRESHOLD, STREAM_THRESHOLD + 3] {
            let source = pattern(len);
            let bytes = to_bytes(&source);
            assert_eq!(bytes.len(), len);
            assert!(bytes[..] == source[..], "{len} bytes");
        }
    }

    #[test]
    fn a_buffer_joined_from_streamed_pieces_holds_them_in_order() {
        let source = pattern(3 * 4096 + 77);
        for stream in [false, true] {
            let mut buffer = bytes::BytesMut::with_capacity(5);
            buffer.extend_from_slice(b"head:");
            // Pieces of uneven sizes, one empty, the buffer growing past its capacity on the way.
            for piece in source.chunks(1001).chain(std::iter::once(&[][..])) {
                extend(&mut buffer, piece, stream);
            }
            assert_eq!(&buffer[..5], b"head:");
            assert!(buffer[5..] == source[..], "stream {stream}");
        }
    }

    #[test]
    fn copies_stream_from_the_threshold_or_from_the_crowded_one_while_many_buffers_are_held() {
        assert!(!streams(STREAM_THRESHOLD - 1, 0));
        assert!(streams(STREAM_THRESHOLD, 0));
        assert!(!streams(CROWDED_THRESHOLD, CROWDED_LIVE - 1), "one request's buffers fit");
        assert!(streams(CROWDED_THRESHOLD, CROWDED_LIVE));
        assert!(!streams(CROWDED_THRESHOLD - 1, usize::MAX), "small copies never stream");
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn lengths_that_differ_are_refused() {
        copy(&mut [0u8; 3], &[1u8; 4]);
    }
}
