//! The vendored jpeg-decoder decodes every JPEG exactly as upstream's 0.3.2 does, pixel for pixel and
//! error for error: its Huffman decoding (`huffman.rs`: whole bytes from the reader's buffer, a
//! 10-bit lookup table, the bit buffer kept in registers) is the part of a decode that region
//! decoding does not check, since `tests/region.rs` compares the vendored decoder with itself.
//! Noisy pictures give long codes and many stuffed 0xFF bytes; restart intervals put markers in the
//! entropy-coded data; truncations end it anywhere. Every chroma subsampling, for the upsamplers
//! (`upsampler.rs`: H2V2's interior runs on SIMD, 16 output bytes a step).
mod common;

use common::{channels, encode, picture};
use jpeg_encoder::{ColorType, Encoder, SamplingFactor};

/// Upstream's and the vendored decoder's pixels, or their errors as text.
fn both(bytes: &[u8]) -> (Result<Vec<u8>, String>, Result<Vec<u8>, String>) {
    let ours = jpeg_decoder::Decoder::new(std::io::Cursor::new(bytes)).decode().map_err(|e| e.to_string());
    let theirs = upstream_jpeg_decoder::Decoder::new(bytes).decode().map_err(|e| e.to_string());
    (ours, theirs)
}

/// `picture` with pseudo-random noise of up to ±`amplitude` on every sample.
fn noisy(width: u16, height: u16, color: ColorType, amplitude: u32) -> Vec<u8> {
    let mut state = 0x2545_f491_u32;
    let mut pixels = picture(width.into(), height.into(), channels(color));
    for p in &mut pixels {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let delta = (state % (2 * amplitude + 1)) as i32 - amplitude as i32;
        *p = (i32::from(*p) + delta).clamp(0, 255) as u8;
    }
    pixels
}

#[test]
fn the_vendored_decoder_decodes_as_upstream() {
    let (w, h) = (333, 257);
    let rgb = |amplitude, configure: &dyn Fn(&mut Encoder<&mut Vec<u8>>)| {
        encode(&noisy(w, h, ColorType::Rgb, amplitude), w, h, ColorType::Rgb, configure)
    };
    // jpeg-encoder subsamples only below quality 90: every case says its sampling.
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("4:2:0 noisy q90", rgb(40, &|e| e.set_sampling_factor(SamplingFactor::F_2_2))),
        (
            "4:2:0 noisy q100",
            rgb(120, &|e| {
                e.set_quality(100);
                e.set_sampling_factor(SamplingFactor::F_2_2);
            }),
        ),
        (
            "4:4:4 noisy, optimised tables",
            rgb(60, &|e| {
                e.set_sampling_factor(SamplingFactor::F_1_1);
                e.set_optimized_huffman_tables(true);
            }),
        ),
        (
            "4:2:0 restart every MCU",
            rgb(30, &|e| {
                e.set_sampling_factor(SamplingFactor::F_2_2);
                e.set_restart_interval(1);
            }),
        ),
        (
            "4:2:2 restart every 7 MCUs",
            rgb(30, &|e| {
                e.set_sampling_factor(SamplingFactor::F_2_1);
                e.set_restart_interval(7);
            }),
        ),
        ("4:4:0 noisy", rgb(30, &|e| e.set_sampling_factor(SamplingFactor::F_1_2))),
        ("4:1:1 noisy", rgb(30, &|e| e.set_sampling_factor(SamplingFactor::F_4_1))),
        (
            "progressive 4:2:0 noisy",
            rgb(50, &|e| {
                e.set_sampling_factor(SamplingFactor::F_2_2);
                e.set_progressive(true);
            }),
        ),
        (
            "progressive, restarts",
            rgb(50, &|e| {
                e.set_progressive(true);
                e.set_restart_interval(3);
            }),
        ),
        (
            "1000x600 4:2:0",
            encode(&noisy(1000, 600, ColorType::Rgb, 10), 1000, 600, ColorType::Rgb, |e| {
                e.set_sampling_factor(SamplingFactor::F_2_2);
            }),
        ),
        ("grey noisy", encode(&noisy(w, h, ColorType::Luma, 80), w, h, ColorType::Luma, |_| {})),
        ("CMYK", encode(&noisy(w, h, ColorType::Cmyk, 20), w, h, ColorType::Cmyk, |_| {})),
        ("flat 8x8", encode(&[128; 8 * 8 * 3], 8, 8, ColorType::Rgb, |_| {})),
        (
            "18x2 4:2:0",
            encode(&noisy(18, 2, ColorType::Rgb, 50), 18, 2, ColorType::Rgb, |e| {
                e.set_sampling_factor(SamplingFactor::F_2_2);
            }),
        ),
    ];
    for (name, bytes) in &cases {
        let (ours, theirs) = both(bytes);
        let stuffed = bytes.windows(2).filter(|w| w == &[0xFF, 0x00]).count();
        assert!(theirs.is_ok(), "{name}: upstream fails on the whole file: {theirs:?}");
        assert!(ours == theirs, "{name}: the vendored decoder's pixels differ from upstream's");
        if name.contains("noisy") {
            assert!(stuffed > 10, "{name}: only {stuffed} stuffed bytes: not the case meant");
        }
    }
    // Cut anywhere in the entropy-coded data, near its end especially (where fewer than the 8 bytes
    // the fast refill reads remain), both give the same pixels or the same error.
    for (name, bytes) in &cases[..4] {
        let ends = (1..=40).chain((2..20).map(|k| bytes.len() * k / 20));
        for end in ends.filter(|&e| e < bytes.len()) {
            let cut = &bytes[..bytes.len() - end];
            let (ours, theirs) = both(cut);
            assert!(
                ours == theirs,
                "{name} cut {end} bytes short: vendored {:?} against upstream {:?}",
                ours.as_ref().map(Vec::len),
                theirs.as_ref().map(Vec::len)
            );
        }
    }
}
