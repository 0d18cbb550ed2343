//! `image_preprocess`: the preprocessing step of an image-classification pipeline. IMAGE BYTES
//! (each element one encoded PNG or JPEG, as Triton's ensemble example sends images) → PIXELS FP32
//! `[1, height, width]` per image: decoded, converted to grey (luma), resized by area averaging, and
//! normalised to `[0, 1]` (× `scale`).
//!
//! Model `parameters` (all optional): `width`, `height` (output size, default 8 × 8), `invert`
//! ("true" maps dark ink on a light background to high values, as in scikit-learn's digits),
//! `scale` (default 1), `max_pixels` (largest accepted image, width × height, default 4096²: a
//! decompression bomb is refused from its header, before anything is allocated).
//!
//! An IMAGE of shape `[..., 1]` gives PIXELS of shape `[..., 1, height, width]` (so `[B, 1]` →
//! `[B, 1, H, W]` under batching). Bytes that are not a PNG or JPEG fail that request with a message
//! naming the element; the other requests of the batch are unaffected.
use std::io::Cursor;

use nereus_sdk::{Backend, ErrorKind, InstanceInfo, ModelInfo, Request, Response, Tensor, config_parameter};

#[derive(Clone, Copy)]
struct Settings {
    width: usize,
    height: usize,
    invert: bool,
    scale: f32,
    max_pixels: u64,
}

fn settings(model: &ModelInfo) -> Result<Settings, String> {
    fn number<T: std::str::FromStr>(model: &ModelInfo, key: &str, default: T) -> Result<T, String> {
        match config_parameter(model, key)? {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| format!("parameter '{key}' is not a valid number: {v:?}")),
        }
    }
    let s = Settings {
        width: number(model, "width", 8)?,
        height: number(model, "height", 8)?,
        invert: match config_parameter(model, "invert")?.as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => return Err(format!("parameter 'invert' must be \"true\" or \"false\", not {other:?}")),
        },
        scale: number(model, "scale", 1.0)?,
        max_pixels: number(model, "max_pixels", 4096 * 4096)?,
    };
    if s.width == 0 || s.height == 0 || s.width * s.height > 1 << 24 {
        return Err(format!("output size {}×{} must be between 1×1 and 16M pixels", s.width, s.height));
    }
    Ok(s)
}

/// A decoded image as grey levels 0–255, row-major.
struct Grey {
    width: usize,
    height: usize,
    luma: Vec<f32>,
}

fn luma(r: u8, g: u8, b: u8) -> f32 {
    0.299 * f32::from(r) + 0.587 * f32::from(g) + 0.114 * f32::from(b)
}

fn check_size(width: u64, height: u64, max_pixels: u64) -> Result<(), String> {
    if width == 0 || height == 0 {
        return Err("the image is empty".into());
    }
    if width.saturating_mul(height) > max_pixels {
        return Err(format!("the image is {width}×{height}, more than the model's max_pixels ({max_pixels})"));
    }
    Ok(())
}

fn decode_png(bytes: &[u8], max_pixels: u64) -> Result<Grey, String> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().map_err(|e| format!("invalid PNG: {e}"))?;
    let (w, h) = reader.info().size();
    check_size(u64::from(w), u64::from(h), max_pixels)?;
    let size = reader.output_buffer_size().ok_or("invalid PNG: its size overflows")?;
    let mut buf = vec![0u8; size];
    let frame = reader.next_frame(&mut buf).map_err(|e| format!("invalid PNG: {e}"))?;
    let data = &buf[..frame.buffer_size()];
    let (width, height) = (frame.width as usize, frame.height as usize);
    let line = frame.line_size;
    let channels = match frame.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => return Err("invalid PNG: palette not expanded".into()),
    };
    let mut luma_out = Vec::with_capacity(width * height);
    for row in data.chunks_exact(line).take(height) {
        for px in row[..width * channels].chunks_exact(channels) {
            // Transparent pixels are composited over white.
            let (value, alpha) = match channels {
                1 => (f32::from(px[0]), 1.0),
                2 => (f32::from(px[0]), f32::from(px[1]) / 255.0),
                3 => (luma(px[0], px[1], px[2]), 1.0),
                _ => (luma(px[0], px[1], px[2]), f32::from(px[3]) / 255.0),
            };
            luma_out.push(value * alpha + 255.0 * (1.0 - alpha));
        }
    }
    Ok(Grey { width, height, luma: luma_out })
}

fn decode_jpeg(bytes: &[u8], max_pixels: u64) -> Result<Grey, String> {
    let mut decoder = jpeg_decoder::Decoder::new(Cursor::new(bytes));
    decoder.read_info().map_err(|e| format!("invalid JPEG: {e}"))?;
    let info = decoder.info().ok_or("invalid JPEG: no header")?;
    check_size(u64::from(info.width), u64::from(info.height), max_pixels)?;
    let pixels = decoder.decode().map_err(|e| format!("invalid JPEG: {e}"))?;
    let (width, height) = (usize::from(info.width), usize::from(info.height));
    let luma_out: Vec<f32> = match info.pixel_format {
        jpeg_decoder::PixelFormat::L8 => pixels.iter().map(|v| f32::from(*v)).collect(),
        jpeg_decoder::PixelFormat::L16 => {
            pixels.chunks_exact(2).map(|c| f32::from(u16::from_be_bytes([c[0], c[1]])) / 257.0).collect()
        }
        jpeg_decoder::PixelFormat::RGB24 => pixels.chunks_exact(3).map(|c| luma(c[0], c[1], c[2])).collect(),
        jpeg_decoder::PixelFormat::CMYK32 => pixels
            .chunks_exact(4)
            .map(|c| {
                let k = 255 - c[3];
                let ch = |v: u8| ((255 - v) as u16 * k as u16 / 255) as u8;
                luma(ch(c[0]), ch(c[1]), ch(c[2]))
            })
            .collect(),
    };
    if luma_out.len() != width * height {
        return Err("invalid JPEG: truncated pixel data".into());
    }
    Ok(Grey { width, height, luma: luma_out })
}

fn decode(bytes: &[u8], max_pixels: u64) -> Result<Grey, String> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        decode_png(bytes, max_pixels)
    } else if bytes.starts_with(&[0xFF, 0xD8]) {
        decode_jpeg(bytes, max_pixels)
    } else {
        Err("neither a PNG nor a JPEG image".into())
    }
}

/// Resizes by averaging each output pixel's source box (every source pixel counts once at least),
/// then normalises grey levels to [0, 1] (inverted if asked) and scales.
fn resize(image: &Grey, s: &Settings, out: &mut Vec<f32>) {
    let bounds = |o: usize, outer: usize, inner: usize| {
        let start = o * inner / outer;
        let end = ((o + 1) * inner / outer).max(start + 1).min(inner);
        (start, end)
    };
    for oy in 0..s.height {
        let (y0, y1) = bounds(oy, s.height, image.height);
        for ox in 0..s.width {
            let (x0, x1) = bounds(ox, s.width, image.width);
            let mut sum = 0.0f64;
            for y in y0..y1 {
                sum +=
                    image.luma[y * image.width + x0..y * image.width + x1].iter().map(|v| f64::from(*v)).sum::<f64>();
            }
            let mean = (sum / ((y1 - y0) * (x1 - x0)) as f64) as f32 / 255.0;
            out.push(if s.invert { 1.0 - mean } else { mean } * s.scale);
        }
    }
}

fn preprocess(s: &Settings, request: &Request) -> Result<Response, String> {
    let input = request.input("IMAGE")?;
    let shape = input.shape();
    let Some((1, outer)) = shape.split_last() else {
        return Err(format!("IMAGE must hold one image per row (last dimension 1), got shape {shape:?}"));
    };
    let mut pixels = Vec::with_capacity(input.element_count() * s.width * s.height);
    for (i, element) in input.bytes_elements()?.enumerate() {
        let image = decode(element?, s.max_pixels).map_err(|e| format!("IMAGE element {i}: {e}"))?;
        resize(&image, s, &mut pixels);
    }
    let mut out_shape = outer.to_vec();
    out_shape.extend([1, s.height as i64, s.width as i64]);
    Ok(Response::new().output(Tensor::from_slice("PIXELS", out_shape, &pixels)))
}

struct ImagePreprocess {
    settings: Settings,
}

impl Backend for ImagePreprocess {
    fn initialize_model(model: &ModelInfo) -> Result<(), String> {
        settings(model).map(|_| ())
    }

    fn new(model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        Ok(ImagePreprocess { settings: settings(model)? })
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            // Undecodable or oversized images are the client's error (400), not the server's.
            match preprocess(&self.settings, request) {
                Ok(response) => request.respond(response)?,
                Err(message) => request.fail_with(ErrorKind::InvalidArgument, &message)?,
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(ImagePreprocess);
