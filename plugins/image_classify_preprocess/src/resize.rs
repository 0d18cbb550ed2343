//! Resize so that the shorter side is 256, centre-crop 224 and normalise, exactly as Pillow's
//! `Image.resize(size, BILINEAR)` followed by the crop and ImageNet's mean and std: the same
//! coefficients, the same 22-bit fixed-point arithmetic, horizontal pass first, each pass rounded to
//! 8 bits. Only the crop's pixels are computed.
//!
//! The horizontal pass is most of the work (every source row the crop needs, 224 outputs of `k`
//! taps × 3 channels each). Built with Wasm SIMD it runs each output as `k / 2` pairs of taps through
//! `i32x4.dot_i16x8_s` (`simd`): the resize of a 640×480 image takes 1.6 ms in the sandbox instead of
//! 3.6, bit for bit the same (bench/results/2026-11-28-preprocess.md).
use std::ops::Range;

use crate::decode::Rgb;

const SIDE: usize = 256;
pub const CROP: usize = 224;
const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const STD: [f32; 3] = [0.229, 0.224, 0.225];
/// One row of the crop, RGB interleaved.
const ROW: usize = CROP * 3;
const PRECISION_BITS: u32 = 32 - 8 - 2;
const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// Pillow's `precompute_coeffs` (libImaging/Resample.c) for the bilinear filter, for the outputs
/// `first..first + count` of a resize from `in_size` to `out_size`, as fixed-length taps: each
/// output's first source index and `k` 22-bit fixed-point weights (`normalize_coeffs_8bpc`), zero
/// past Pillow's own count. Where the window would run past the source its start moves left and the
/// taps moved over get weight 0, so that every output reads exactly `k` pixels.
struct Taps {
    start: Vec<usize>,
    k: usize,
    weights: Vec<i32>,
}

fn taps(in_size: usize, out_size: u64, first: usize, count: usize) -> Taps {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filterscale; // bilinear's support is 1
    let ksize = support.ceil() as usize * 2 + 1;
    let k = ksize.min(in_size);
    let mut t = Taps { start: Vec::with_capacity(count), k, weights: vec![0; count * k] };
    let mut kernel = vec![0f64; ksize];
    for (i, xx) in (first..first + count).enumerate() {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        let xmin = ((center - support + 0.5) as i64).max(0) as usize; // C's (int) truncates
        let len = ((center + support + 0.5) as i64).min(in_size as i64) as usize - xmin;
        let mut ww = 0.0;
        for (x, kx) in kernel.iter_mut().enumerate().take(len) {
            let t = ((x + xmin) as f64 - center + 0.5) * ss;
            let t = t.abs();
            *kx = if t < 1.0 { 1.0 - t } else { 0.0 };
            ww += *kx;
        }
        // How far the window moves left so that it ends within the source.
        let shift = (xmin + k).saturating_sub(in_size).min(xmin);
        let dst = &mut t.weights[i * k + shift..i * k + shift + len];
        for (d, &kx) in dst.iter_mut().zip(&kernel) {
            let w = if ww != 0.0 { kx / ww } else { kx };
            let f = w * f64::from(1u32 << PRECISION_BITS);
            *d = if w < 0.0 { (f - 0.5).trunc() } else { (f + 0.5).trunc() } as i32;
        }
        t.start.push(xmin - shift);
    }
    t
}

#[inline]
fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

/// One row's horizontal pass, `K` taps known at compile time (unrolled).
fn hrow<const K: usize>(src: &[u8], t: &Taps, dst: &mut [u8]) {
    hrow_of(src, t, dst, K)
}

/// One row's horizontal pass, any number of taps.
fn hrow_any(src: &[u8], t: &Taps, dst: &mut [u8]) {
    hrow_of(src, t, dst, t.k)
}

/// The horizontal pass with `k` taps (`t.k`), inlined into its callers so that a constant `k` unrolls.
#[inline(always)]
fn hrow_of(src: &[u8], t: &Taps, dst: &mut [u8], k: usize) {
    for ((&start, w), d) in t.start.iter().zip(t.weights.chunks_exact(k)).zip(dst.chunks_exact_mut(3)) {
        let px = &src[start * 3..(start + k) * 3];
        let (mut s0, mut s1, mut s2) = (HALF, HALF, HALF);
        for (p, &kk) in px.chunks_exact(3).zip(w) {
            s0 += i32::from(p[0]) * kk;
            s1 += i32::from(p[1]) * kk;
            s2 += i32::from(p[2]) * kk;
        }
        d[0] = clip8(s0);
        d[1] = clip8(s1);
        d[2] = clip8(s2);
    }
}

/// One output row's vertical pass over `K` rows of the horizontal pass's result (`K` known at
/// compile time, so the column loop is the inner one and vectorises).
fn vrow<const K: usize>(tmp: &[u8], start: usize, k: &[i32], row: &mut [u8; ROW]) {
    let Ok(k) = <&[i32; K]>::try_from(k) else { return vrow_any(tmp, start, k, row) };
    let rows: [&[u8]; K] = std::array::from_fn(|t| &tmp[(start + t) * ROW..(start + t + 1) * ROW]);
    for (x, r) in row.iter_mut().enumerate() {
        let mut s = HALF;
        for t in 0..K {
            s += i32::from(rows[t][x]) * k[t];
        }
        *r = clip8(s);
    }
}

fn vrow_any(tmp: &[u8], start: usize, k: &[i32], row: &mut [u8; ROW]) {
    let mut acc = [HALF; ROW];
    for (j, &kk) in k.iter().enumerate() {
        for (a, &p) in acc.iter_mut().zip(&tmp[(start + j) * ROW..(start + j + 1) * ROW]) {
            *a += i32::from(p) * kk;
        }
    }
    for (r, a) in row.iter_mut().zip(acc) {
        *r = clip8(a);
    }
}

/// Calls `$f::<K>` for the tap counts a resize to 256 takes from sources of up to about 2,300
/// pixels (a shrink by `s` has `2⌈s⌉ + 1` taps), `$any` otherwise.
macro_rules! by_taps {
    ($k:expr, $f:ident, $any:ident, ($($arg:expr),*)) => {
        match $k {
            3 => $f::<3>($($arg),*), 5 => $f::<5>($($arg),*), 7 => $f::<7>($($arg),*),
            9 => $f::<9>($($arg),*), 11 => $f::<11>($($arg),*), 13 => $f::<13>($($arg),*),
            15 => $f::<15>($($arg),*), 17 => $f::<17>($($arg),*), 19 => $f::<19>($($arg),*),
            _ => $any($($arg),*),
        }
    };
}

/// The resize of one image: each direction's taps (None where that side keeps its size) and the
/// crop's first column and row in the resized image.
struct Plan {
    horizontal: Option<Taps>,
    vertical: Option<Taps>,
    left: usize,
    top: usize,
}

impl Plan {
    /// For a `width × height` image decoded from one of `source` pixels (larger after a DCT-domain
    /// reduction: the output geometry comes from the original size, so that a reduced decode lands
    /// on the same grid).
    fn new(width: usize, height: usize, source: (usize, usize)) -> Plan {
        let (ow, oh) = (source.0 as u64, source.1 as u64);
        let (new_w, new_h) =
            if ow <= oh { (SIDE as u64, oh * SIDE as u64 / ow) } else { (ow * SIDE as u64 / oh, SIDE as u64) };
        let left = ((new_w - CROP as u64) / 2) as usize;
        let top = ((new_h - CROP as u64) / 2) as usize;
        Plan {
            horizontal: (width as u64 != new_w).then(|| taps(width, new_w, left, CROP)),
            vertical: (height as u64 != new_h).then(|| taps(height, new_h, top, CROP)),
            left,
            top,
        }
    }

    /// The source columns the horizontal pass reads (the taps' starts only grow).
    fn columns(&self) -> Range<usize> {
        match &self.horizontal {
            Some(t) => t.start[0]..t.start[CROP - 1] + t.k,
            None => self.left..self.left + CROP,
        }
    }

    /// The source rows the vertical pass reads.
    fn rows(&self) -> Range<usize> {
        match &self.vertical {
            Some(t) => t.start[0]..t.start[CROP - 1] + t.k,
            None => self.top..self.top + CROP,
        }
    }
}

/// The source pixels (columns, rows) that [`resize_crop_normalise`] reads of a `width × height`
/// image decoded from one of `source` pixels: a decoder may leave the others out.
pub fn needed(width: usize, height: usize, source: (usize, usize)) -> (Range<usize>, Range<usize>) {
    let plan = Plan::new(width, height, source);
    (plan.columns(), plan.rows())
}

/// Resize (shorter side 256), centre-crop 224 and normalise `image` into `out` (CHW, appended).
pub fn resize_crop_normalise(image: &Rgb, out: &mut Vec<f32>) {
    let (w, h) = (image.width, image.height);
    let plan = Plan::new(w, h, image.source);
    let (left, ht, vt) = (plan.left, &plan.horizontal, &plan.vertical);
    let Range { start: y0, end: y1 } = plan.rows();
    // Horizontal pass: rows y0..y1, the crop's 224 columns, 3 channels.
    let rows = y1 - y0;
    let mut tmp = vec![0u8; rows * ROW];
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    let pairs = ht.as_ref().map(simd::PairTaps::new);
    for (r, y) in (y0..y1).enumerate() {
        let (from, to) = (y * w * 3, (y + 1) * w * 3);
        let Some(t) = ht else {
            tmp[r * ROW..(r + 1) * ROW].copy_from_slice(&image.data[from + left * 3..from + (left + CROP) * 3]);
            continue;
        };
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        if let Some(p) = &pairs
            && let Some(src) = image.data.get(from..to + simd::OVERREAD)
            && simd::hrow(src, t, p, &mut tmp[r * ROW..(r + 1) * ROW])
        {
            continue;
        }
        by_taps!(t.k, hrow, hrow_any, (&image.data[from..to], t, &mut tmp[r * ROW..(r + 1) * ROW]));
    }
    // Vertical pass and normalisation, straight into the CHW output.
    let base = out.len();
    out.resize(base + 3 * CROP * CROP, 0.0);
    let (r_plane, rest) = out[base..].split_at_mut(CROP * CROP);
    let (g_plane, b_plane) = rest.split_at_mut(CROP * CROP);
    let mut row = [0u8; ROW];
    for y in 0..CROP {
        match vt {
            None => row.copy_from_slice(&tmp[y * ROW..(y + 1) * ROW]),
            Some(t) => {
                let (start, k) = (t.start[y] - y0, &t.weights[y * t.k..(y + 1) * t.k]);
                by_taps!(t.k, vrow, vrow_any, (&tmp, start, k, &mut row))
            }
        }
        let line = y * CROP..(y + 1) * CROP;
        let (r, g, b) = (&mut r_plane[line.clone()], &mut g_plane[line.clone()], &mut b_plane[line]);
        for (x, p) in row.chunks_exact(3).enumerate() {
            r[x] = (f32::from(p[0]) / 255.0 - MEAN[0]) / STD[0];
            g[x] = (f32::from(p[1]) / 255.0 - MEAN[1]) / STD[1];
            b[x] = (f32::from(p[2]) / 255.0 - MEAN[2]) / STD[2];
        }
    }
}

/// The horizontal pass with Wasm SIMD. Pillow's weights are 22-bit, too wide for a 16-bit multiply,
/// so each is split `w = hi × 2048 + lo` (both fit an i16) and the sums put back together exactly:
/// `Σ p·w = 2048·Σ p·hi + Σ p·lo`. Each output reads its taps two pixels at a time: 8 bytes loaded,
/// shuffled to `[r₀ r₁ g₀ g₁ b₀ b₁ 0 0]` as i16, and `i32x4.dot_i16x8_s` against `[w₀ w₁]` per
/// channel sums both taps of all three channels in one instruction.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    use core::arch::wasm32::*;

    use super::{HALF, PRECISION_BITS, Taps};

    /// Bytes read past a row's end at most: a window of `k` pixels is read as `⌈k / 2⌉` loads of 8
    /// bytes, 6 apart (`6⌈k/2⌉ + 2 ≤ 3k + 5`).
    pub const OVERREAD: usize = 5;

    /// The taps as pairs of weight vectors, `pairs` per output, high and low halves.
    pub struct PairTaps {
        pairs: usize,
        hi: Vec<v128>,
        lo: Vec<v128>,
    }

    impl PairTaps {
        pub fn new(t: &Taps) -> Self {
            let pairs = t.k.div_ceil(2);
            let n = t.start.len() * pairs;
            let mut p = PairTaps { pairs, hi: Vec::with_capacity(n), lo: Vec::with_capacity(n) };
            for w in t.weights.chunks_exact(t.k) {
                for j in 0..pairs {
                    let (a, b) = (w[2 * j], w.get(2 * j + 1).copied().unwrap_or(0));
                    let (ah, al, bh, bl) = ((a >> 11) as i16, (a & 2047) as i16, (b >> 11) as i16, (b & 2047) as i16);
                    p.hi.push(i16x8(ah, bh, ah, bh, ah, bh, 0, 0));
                    p.lo.push(i16x8(al, bl, al, bl, al, bl, 0, 0));
                }
            }
            p
        }
    }

    /// One row's horizontal pass into `dst`; `src` is the source row and [`OVERREAD`] bytes more
    /// (the next row's). False, with nothing written, for more taps than it unrolls.
    pub fn hrow(src: &[u8], t: &Taps, p: &PairTaps, dst: &mut [u8]) -> bool {
        match p.pairs {
            1 => row::<1>(src, t, p, dst),
            2 => row::<2>(src, t, p, dst),
            3 => row::<3>(src, t, p, dst),
            4 => row::<4>(src, t, p, dst),
            5 => row::<5>(src, t, p, dst),
            6 => row::<6>(src, t, p, dst),
            7 => row::<7>(src, t, p, dst),
            8 => row::<8>(src, t, p, dst),
            9 => row::<9>(src, t, p, dst),
            10 => row::<10>(src, t, p, dst),
            11 => row::<11>(src, t, p, dst),
            12 => row::<12>(src, t, p, dst),
            13 => row::<13>(src, t, p, dst),
            14 => row::<14>(src, t, p, dst),
            15 => row::<15>(src, t, p, dst),
            16 => row::<16>(src, t, p, dst),
            _ => return false,
        }
        true
    }

    fn row<const P: usize>(src: &[u8], t: &Taps, p: &PairTaps, dst: &mut [u8]) {
        // Bytes r₀ g₀ b₀ r₁ g₁ b₁ to i16 lanes r₀ r₁ g₀ g₁ b₀ b₁ 0 0 (an index ≥ 16 gives 0).
        let spread = u8x16(0, 16, 3, 16, 1, 16, 4, 16, 2, 16, 5, 16, 16, 16, 16, 16);
        for ((&start, (hi, lo)), d) in
            t.start.iter().zip(p.hi.chunks_exact(P).zip(p.lo.chunks_exact(P))).zip(dst.chunks_exact_mut(3))
        {
            let px = &src[start * 3..start * 3 + 6 * P + 2];
            let (mut sum_hi, mut sum_lo) = (i32x4_splat(0), i32x4_splat(HALF));
            for j in 0..P {
                let bytes = u64::from_le_bytes(px[6 * j..6 * j + 8].try_into().unwrap_or_default());
                let v = i8x16_swizzle(u64x2(bytes, 0), spread);
                sum_hi = i32x4_add(sum_hi, i32x4_dot_i16x8(v, hi[j]));
                sum_lo = i32x4_add(sum_lo, i32x4_dot_i16x8(v, lo[j]));
            }
            let s = i32x4_shr(i32x4_add(i32x4_shl(sum_hi, 11), sum_lo), PRECISION_BITS);
            // Saturating narrows: the clamp to 0..=255 of the scalar pass.
            let s = i16x8_narrow_i32x4(s, s);
            let rgb = u32x4_extract_lane::<0>(u8x16_narrow_i16x8(s, s)).to_le_bytes();
            d.copy_from_slice(&rgb[..3]);
        }
    }
}
