//! What the plugin's tests encode: JPEGs of a synthetic picture, through jpeg-encoder.
#![allow(dead_code)] // each test file uses part of it
use jpeg_encoder::{ColorType, Encoder, SamplingFactor};

/// A picture with gradients, hard edges and texture, `channels` bytes a pixel.
pub fn picture(width: usize, height: usize, channels: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(width * height * channels);
    for y in 0..height {
        for x in 0..width {
            for c in 0..channels {
                let gradient = (x * 255 / width.max(2) + y * 97 / height.max(2) + c * 60) % 256;
                let edge = if (x / 37 + y / 23 + c) % 3 == 0 { 90 } else { 0 };
                let texture = (x * 7 + y * 13 + c * 29) % 17;
                data.push(((gradient + edge + texture) % 256) as u8);
            }
        }
    }
    data
}

/// [`picture`] as a JPEG, quality 90, with the given chroma subsampling and progressive or not.
pub fn jpeg(width: u16, height: u16, color: ColorType, sampling: SamplingFactor, progressive: bool) -> Vec<u8> {
    let pixels = picture(width.into(), height.into(), channels(color));
    encode(&pixels, width, height, color, |encoder| {
        encoder.set_sampling_factor(sampling);
        encoder.set_progressive(progressive);
    })
}

pub fn channels(color: ColorType) -> usize {
    match color {
        ColorType::Luma => 1,
        ColorType::Cmyk => 4,
        _ => 3,
    }
}

/// `pixels` as a JPEG, quality 90 unless `configure` says otherwise.
pub fn encode(
    pixels: &[u8],
    width: u16,
    height: u16,
    color: ColorType,
    configure: impl FnOnce(&mut Encoder<&mut Vec<u8>>),
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = Encoder::new(&mut out, 90);
    configure(&mut encoder);
    encoder.encode(pixels, width, height, color).expect("encodes");
    out
}
