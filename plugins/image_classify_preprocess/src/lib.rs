//! `image_classify_preprocess`: the preprocessing step in front of every ImageNet classifier
//! (torchvision's `Resize(256)`, `CenterCrop(224)`, `ToTensor()`, `Normalize(mean, std)`).
//! IMAGE BYTES (each element one encoded JPEG or PNG) → PIXELS FP32 `[3, 224, 224]` per image:
//!
//! 1. decode, and convert to RGB as Pillow's `Image.open(f).convert("RGB")` does: grey is repeated
//!    into the three channels, a palette is looked up, an alpha channel (RGBA, LA, a palette's or a
//!    colour's `tRNS` transparency) is **dropped**, not composited. 16-bit PNGs keep their high byte
//!    (`v >> 8`, as Pillow does for 16-bit RGB PNGs; Pillow's `convert("RGB")` of a 16-bit *grey*
//!    `I;16` image clips at 255 instead, which whitens the picture, so this differs there on purpose).
//!    EXIF orientation is **not** applied, as neither `Image.open` nor `convert` apply it (a client
//!    that wants it rotates first, or sends `ImageOps.exif_transpose`'s result).
//! 2. resize so that the shorter side is 256 and the longer `floor(long × 256 / short)`, with
//!    Pillow's `Image.resize(size, BILINEAR)`: the same triangle filter widened by the scale when
//!    shrinking (antialiasing), the same coefficients and the same 22-bit fixed-point arithmetic,
//!    horizontal pass first, each pass rounded to 8 bits. Only the pixels of the centre crop are
//!    computed.
//! 3. centre-crop 224 × 224 at `((w - 224) // 2, (h - 224) // 2)`.
//! 4. scale to [0, 1] and normalise with ImageNet's mean (0.485, 0.456, 0.406) and standard
//!    deviation (0.229, 0.224, 0.225), channels first.
//!
//! On PNGs the output equals Pillow + numpy's (to float rounding). JPEG decoders differ from
//! libjpeg-turbo (Pillow's) in their inverse DCT and chroma upsampling by a level or two. Pillow 13
//! runs the vertical pass first for some sizes; there the rounding between passes differs by at most
//! one level.
//!
//! Model `parameters` (all optional):
//! - `max_pixels` (default 4096 × 4096 = 16777216): a larger image (width × height, read from its
//!   header before anything is allocated) fails its request with INVALID_ARG: decompression bombs.
//! - `jpeg_decoder`: `jpeg-decoder` (the default: the fastest measured in the sandbox, 1.2–2× zune-jpeg
//!   there; bench/results/2026-11-26-preprocess.md) or `zune` (zune-jpeg).
//! - `jpeg_dct_scaling_min_side` (default 0, off): with `jpeg-decoder`, a JPEG whose shorter side is
//!   at least twice this is decoded at 1/2, 1/4 or 1/8 scale in the DCT domain (the largest
//!   reduction that keeps the shorter side at or above this value), then resized as above. Faster on
//!   large photos, and no longer Pillow's result exactly: the DCT reduction averages blocks, a box
//!   filter, where Pillow applies one triangle filter to the full-size image. Measured on a
//!   1920×1080 photo against Pillow: 512 halves the decode (max abs error 0.26, mean 0.006, against
//!   0.035 and 0.0012 without), 256 quarters it (max 0.85, mean 0.016): both beyond the tolerance
//!   the test holds JPEGs to (max 0.15), hence off by default.
//!
//! An IMAGE of shape `[..., 1]` gives PIXELS `[..., 3, 224, 224]` (`[B, 1]` → `[B, 3, 224, 224]`
//! under batching). A request whose element is not a JPEG or PNG, is corrupt, or is too large fails
//! alone with INVALID_ARG and a message naming the element; the other requests of the batch are
//! answered.
use std::io::Cursor;

use nereus_sdk::{Backend, ErrorKind, InstanceInfo, ModelInfo, Request, Response, Tensor, config_parameter};

const SIDE: usize = 256;
const CROP: usize = 224;
const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const STD: [f32; 3] = [0.229, 0.224, 0.225];

#[derive(Clone, Copy, PartialEq)]
enum JpegDecoder {
    Zune,
    JpegDecoder,
}

#[derive(Clone, Copy)]
struct Settings {
    max_pixels: u64,
    jpeg: JpegDecoder,
    dct_min_side: usize,
}

fn settings(model: &ModelInfo) -> Result<Settings, String> {
    fn number<T: std::str::FromStr>(model: &ModelInfo, key: &str, default: T) -> Result<T, String> {
        match config_parameter(model, key)? {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| format!("parameter '{key}' is not a valid number: {v:?}")),
        }
    }
    let jpeg = match config_parameter(model, "jpeg_decoder")?.as_deref() {
        Some("zune") => JpegDecoder::Zune,
        None | Some("jpeg-decoder") => JpegDecoder::JpegDecoder,
        Some(other) => {
            return Err(format!("parameter 'jpeg_decoder' must be \"zune\" or \"jpeg-decoder\", not {other:?}"));
        }
    };
    let s = Settings {
        max_pixels: number(model, "max_pixels", 4096 * 4096)?,
        jpeg,
        dct_min_side: number(model, "jpeg_dct_scaling_min_side", 0)?,
    };
    if s.dct_min_side > 0 && s.jpeg != JpegDecoder::JpegDecoder {
        return Err("parameter 'jpeg_dct_scaling_min_side' needs jpeg_decoder \"jpeg-decoder\"".into());
    }
    Ok(s)
}

/// A decoded image, 8-bit RGB, row-major.
struct Rgb {
    width: usize,
    height: usize,
    data: Vec<u8>,
    /// The encoded image's size (larger than `width × height` after a DCT-domain reduction).
    source: (usize, usize),
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

fn decode_png(bytes: &[u8], max_pixels: u64) -> Result<Rgb, String> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    // Palettes and bit depths below 8 expand to 8 bits; 16 bits keep their high byte.
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    decoder.set_ignore_text_chunk(true);
    let mut reader = decoder.read_info().map_err(|e| format!("invalid PNG: {e}"))?;
    let (w, h) = reader.info().size();
    check_size(u64::from(w), u64::from(h), max_pixels)?;
    let size = reader.output_buffer_size().ok_or("invalid PNG: its size overflows")?;
    let mut buf = vec![0u8; size];
    let frame = reader.next_frame(&mut buf).map_err(|e| format!("invalid PNG: {e}"))?;
    let (width, height) = (frame.width as usize, frame.height as usize);
    let channels = match frame.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => return Err("invalid PNG: palette not expanded".into()),
    };
    let line = frame.line_size;
    if channels == 3 && line == width * 3 {
        buf.truncate(width * height * 3);
        return Ok(Rgb { width, height, data: buf, source: (width, height) });
    }
    let mut data = Vec::with_capacity(width * height * 3);
    for row in buf.chunks_exact(line).take(height) {
        let row = &row[..width * channels];
        match channels {
            1 => row.iter().for_each(|&v| data.extend_from_slice(&[v, v, v])),
            2 => row.chunks_exact(2).for_each(|p| data.extend_from_slice(&[p[0], p[0], p[0]])),
            3 => data.extend_from_slice(row),
            _ => row.chunks_exact(4).for_each(|p| data.extend_from_slice(&p[..3])),
        }
    }
    Ok(Rgb { width, height, data, source: (width, height) })
}

fn cmyk_to_rgb(pixels: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(pixels.len() / 4 * 3);
    for c in pixels.chunks_exact(4) {
        let k = 255 - u32::from(c[3]);
        let ch = |v: u8| ((255 - u32::from(v)) * k / 255) as u8;
        data.extend_from_slice(&[ch(c[0]), ch(c[1]), ch(c[2])]);
    }
    data
}

/// jpeg-decoder, optionally reducing in the DCT domain (see the module's `jpeg_dct_scaling_min_side`).
fn decode_jpeg_decoder(bytes: &[u8], s: &Settings) -> Result<Rgb, String> {
    let mut decoder = jpeg_decoder::Decoder::new(Cursor::new(bytes));
    decoder.read_info().map_err(|e| format!("invalid JPEG: {e}"))?;
    let info = decoder.info().ok_or("invalid JPEG: no header")?;
    check_size(u64::from(info.width), u64::from(info.height), s.max_pixels)?;
    let source = (usize::from(info.width), usize::from(info.height));
    let (mut width, mut height) = source;
    if s.dct_min_side > 0 {
        let short = width.min(height);
        // The largest reduction 1/2, 1/4, 1/8 that keeps the shorter side >= dct_min_side.
        let mut denom = 1;
        while denom < 8 && short.div_ceil(denom * 2) >= s.dct_min_side {
            denom *= 2;
        }
        if denom > 1 {
            let (w, h) = decoder
                .scale(width.div_ceil(denom) as u16, height.div_ceil(denom) as u16)
                .map_err(|e| format!("invalid JPEG: {e}"))?;
            (width, height) = (usize::from(w), usize::from(h));
        }
    }
    let pixels = decoder.decode().map_err(|e| format!("invalid JPEG: {e}"))?;
    let info = decoder.info().ok_or("invalid JPEG: no header")?;
    let data = match info.pixel_format {
        jpeg_decoder::PixelFormat::L8 => pixels.iter().flat_map(|&v| [v, v, v]).collect(),
        jpeg_decoder::PixelFormat::L16 => pixels.chunks_exact(2).flat_map(|c| [c[0], c[0], c[0]]).collect(),
        jpeg_decoder::PixelFormat::RGB24 => pixels,
        jpeg_decoder::PixelFormat::CMYK32 => cmyk_to_rgb(&pixels),
    };
    if data.len() != width * height * 3 {
        return Err("invalid JPEG: truncated pixel data".into());
    }
    Ok(Rgb { width, height, data, source })
}

fn decode_zune(bytes: &[u8], s: &Settings) -> Result<Rgb, String> {
    use zune_core::bytestream::ZCursor;
    use zune_core::colorspace::ColorSpace;
    use zune_core::options::DecoderOptions;
    let options = DecoderOptions::default()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        .set_max_width(1 << 16)
        .set_max_height(1 << 16);
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder.decode_headers().map_err(|e| format!("invalid JPEG: {e}"))?;
    let (width, height) = decoder.dimensions().ok_or("invalid JPEG: no header")?;
    check_size(width as u64, height as u64, s.max_pixels)?;
    let size = decoder.output_buffer_size().ok_or("invalid JPEG: its size overflows")?;
    let mut data = vec![0u8; size];
    decoder.decode_into(&mut data).map_err(|e| format!("invalid JPEG: {e}"))?;
    if decoder.output_colorspace() != Some(ColorSpace::RGB) || data.len() != width * height * 3 {
        return Err(format!("unsupported JPEG colour space {:?}", decoder.input_colorspace()));
    }
    Ok(Rgb { width, height, data, source: (width, height) })
}

fn decode(bytes: &[u8], s: &Settings) -> Result<Rgb, String> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        decode_png(bytes, s.max_pixels)
    } else if bytes.starts_with(&[0xFF, 0xD8]) {
        match s.jpeg {
            JpegDecoder::Zune => decode_zune(bytes, s),
            JpegDecoder::JpegDecoder => decode_jpeg_decoder(bytes, s),
        }
    } else {
        Err("neither a PNG nor a JPEG image".into())
    }
}

/// Pillow's `precompute_coeffs` (libImaging/Resample.c) for the bilinear filter, for the outputs
/// `first..first + count` of a resize from `in_size` to `out_size`: each output's first source
/// index and its 22-bit fixed-point weights (`normalize_coeffs_8bpc`), `ksize` per output.
struct Coeffs {
    start: Vec<usize>,
    len: Vec<usize>,
    ksize: usize,
    weights: Vec<i32>,
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

fn coeffs(in_size: usize, out_size: u64, first: usize, count: usize) -> Coeffs {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filterscale; // bilinear's support is 1
    let ksize = support.ceil() as usize * 2 + 1;
    let mut c = Coeffs {
        start: Vec::with_capacity(count),
        len: Vec::with_capacity(count),
        ksize,
        weights: vec![0; count * ksize],
    };
    let mut k = vec![0f64; ksize];
    for (i, xx) in (first..first + count).enumerate() {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        let xmin = ((center - support + 0.5) as i64).max(0) as usize; // C's (int) truncates
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize - xmin;
        let mut ww = 0.0;
        for (x, kx) in k.iter_mut().enumerate().take(xmax) {
            let t = ((x + xmin) as f64 - center + 0.5) * ss;
            let t = t.abs();
            *kx = if t < 1.0 { 1.0 - t } else { 0.0 };
            ww += *kx;
        }
        for (x, &kx) in k.iter().enumerate().take(xmax) {
            let w = if ww != 0.0 { kx / ww } else { kx };
            let f = w * f64::from(1u32 << PRECISION_BITS);
            c.weights[i * ksize + x] = if w < 0.0 { (f - 0.5).trunc() } else { (f + 0.5).trunc() } as i32;
        }
        c.start.push(xmin);
        c.len.push(xmax);
    }
    c
}

#[inline]
fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Resize (shorter side 256), centre-crop 224 and normalise `image` into `out` (CHW).
fn resize_crop_normalise(image: &Rgb, lut: &[[f32; 256]; 3], out: &mut Vec<f32>) {
    // The output geometry comes from the original size, so a DCT-reduced decode lands on the same grid.
    let (ow, oh) = (image.source.0 as u64, image.source.1 as u64);
    let (new_w, new_h) =
        if ow <= oh { (SIDE as u64, oh * SIDE as u64 / ow) } else { (ow * SIDE as u64 / oh, SIDE as u64) };
    let left = ((new_w - CROP as u64) / 2) as usize;
    let top = ((new_h - CROP as u64) / 2) as usize;
    let (w, h) = (image.width, image.height);

    let hc = (w as u64 != new_w).then(|| coeffs(w, new_w, left, CROP));
    let vc = (h as u64 != new_h).then(|| coeffs(h, new_h, top, CROP));
    // Source rows the vertical pass reads.
    let (y0, y1) = match &vc {
        Some(v) => (v.start[0], v.start[CROP - 1] + v.len[CROP - 1]),
        None => (top, top + CROP),
    };
    // Horizontal pass: rows y0..y1, the crop's 224 columns, 3 channels.
    let rows = y1 - y0;
    let mut tmp = vec![0u8; rows * CROP * 3];
    for (r, y) in (y0..y1).enumerate() {
        let src = &image.data[y * w * 3..(y + 1) * w * 3];
        let dst = &mut tmp[r * CROP * 3..(r + 1) * CROP * 3];
        match &hc {
            None => dst.copy_from_slice(&src[left * 3..(left + CROP) * 3]),
            Some(c) => {
                for x in 0..CROP {
                    let (start, len) = (c.start[x], c.len[x]);
                    let k = &c.weights[x * c.ksize..x * c.ksize + len];
                    let px = &src[start * 3..(start + len) * 3];
                    let half = 1i32 << (PRECISION_BITS - 1);
                    let (mut s0, mut s1, mut s2) = (half, half, half);
                    for (p, &kk) in px.chunks_exact(3).zip(k) {
                        s0 += i32::from(p[0]) * kk;
                        s1 += i32::from(p[1]) * kk;
                        s2 += i32::from(p[2]) * kk;
                    }
                    dst[x * 3] = clip8(s0);
                    dst[x * 3 + 1] = clip8(s1);
                    dst[x * 3 + 2] = clip8(s2);
                }
            }
        }
    }
    // Vertical pass and normalisation, straight into the CHW output.
    let base = out.len();
    out.resize(base + 3 * CROP * CROP, 0.0);
    let plane = CROP * CROP;
    let mut row = [0u8; CROP * 3];
    for y in 0..CROP {
        match &vc {
            None => row.copy_from_slice(&tmp[y * CROP * 3..(y + 1) * CROP * 3]),
            Some(c) => {
                let (start, len) = (c.start[y] - y0, c.len[y]);
                let k = &c.weights[y * c.ksize..y * c.ksize + len];
                let mut acc = [1i32 << (PRECISION_BITS - 1); CROP * 3];
                for (j, &kk) in k.iter().enumerate() {
                    let src = &tmp[(start + j) * CROP * 3..(start + j + 1) * CROP * 3];
                    for (a, &p) in acc.iter_mut().zip(src) {
                        *a += i32::from(p) * kk;
                    }
                }
                for (r, a) in row.iter_mut().zip(acc) {
                    *r = clip8(a);
                }
            }
        }
        for x in 0..CROP {
            for ch in 0..3 {
                out[base + ch * plane + y * CROP + x] = lut[ch][usize::from(row[x * 3 + ch])];
            }
        }
    }
}

struct ClassifyPreprocess {
    settings: Settings,
    lut: Box<[[f32; 256]; 3]>,
}

impl ClassifyPreprocess {
    fn preprocess(&self, request: &Request) -> Result<Response, String> {
        let input = request.input("IMAGE")?;
        let shape = input.shape();
        let Some((1, outer)) = shape.split_last() else {
            return Err(format!("IMAGE must hold one image per row (last dimension 1), got shape {shape:?}"));
        };
        let mut pixels = Vec::with_capacity(input.element_count() * 3 * CROP * CROP);
        for (i, element) in input.bytes_elements()?.enumerate() {
            let image = decode(element?, &self.settings).map_err(|e| format!("IMAGE element {i}: {e}"))?;
            resize_crop_normalise(&image, &self.lut, &mut pixels);
        }
        let mut out_shape = outer.to_vec();
        out_shape.extend([3, CROP as i64, CROP as i64]);
        Ok(Response::new().output(Tensor::from_slice("PIXELS", out_shape, &pixels)))
    }
}

impl Backend for ClassifyPreprocess {
    fn initialize_model(model: &ModelInfo) -> Result<(), String> {
        settings(model).map(|_| ())
    }

    fn new(model: &ModelInfo, _instance: &InstanceInfo) -> Result<Self, String> {
        let mut lut = Box::new([[0f32; 256]; 3]);
        for (ch, table) in lut.iter_mut().enumerate() {
            for (v, x) in table.iter_mut().enumerate() {
                *x = (v as f32 / 255.0 - MEAN[ch]) / STD[ch];
            }
        }
        Ok(ClassifyPreprocess { settings: settings(model)?, lut })
    }

    fn execute(&mut self, requests: Vec<Request>) -> Result<(), String> {
        for request in &requests {
            // Undecodable or oversized images are the client's error (400), not the server's.
            match self.preprocess(request) {
                Ok(response) => request.respond(response)?,
                Err(message) => request.fail_with(ErrorKind::InvalidArgument, &message)?,
            }
        }
        Ok(())
    }
}

nereus_sdk::export!(ClassifyPreprocess);
