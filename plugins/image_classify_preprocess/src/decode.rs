//! Encoded PNG and JPEG images to 8-bit RGB, as Pillow's `Image.open(f).convert("RGB")` gives them
//! (see the crate's documentation for what is converted how).
use std::io::Cursor;
use std::ops::Range;

/// The pixels (columns, rows) the caller reads of a `width × height` image decoded from one of
/// `source` pixels (`resize::needed`): a JPEG decodes only those (see `decode_jpeg_decoder`).
pub type Needed = fn(width: usize, height: usize, source: (usize, usize)) -> (Range<usize>, Range<usize>);

/// Which JPEG decoder runs (the model's `jpeg_decoder` parameter).
#[derive(Clone, Copy, PartialEq)]
pub enum JpegDecoder {
    Zune,
    JpegDecoder,
}

/// How images are decoded (the model's parameters; see the crate's documentation).
#[derive(Clone, Copy)]
pub struct Settings {
    pub max_pixels: u64,
    pub jpeg: JpegDecoder,
    pub dct_min_side: usize,
}

/// A decoded image, 8-bit RGB, row-major.
pub struct Rgb {
    pub width: usize,
    pub height: usize,
    pub data: Vec<u8>,
    /// The encoded image's size (larger than `width × height` after a DCT-domain reduction).
    pub source: (usize, usize),
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
    // Chunk CRCs are not checked: Pillow skips the image data's too, and in the sandbox the table-driven
    // CRC-32 (no carry-less multiply in Wasm) cost a tenth of a 1920x1080 PNG's time. A corrupt
    // stream still fails where it cannot be inflated or is short of rows.
    let mut options = png::DecodeOptions::default();
    options.set_ignore_crc(true);
    let mut decoder = png::Decoder::new_with_options(Cursor::new(bytes), options);
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

/// jpeg-decoder, optionally reducing in the DCT domain (see the module's `jpeg_dct_scaling_min_side`),
/// and computing only the `needed` pixels: the entropy-coded data is read whole, but the blocks and
/// rows the resize does not read skip the inverse DCT, upsampling and colour conversion (the
/// vendored `jpeg-decoder/`'s `set_region`). The pixels read come out exactly as in a whole decode;
/// 15–20% less time for a 640×480 or 1920×1080 photo in the sandbox.
fn decode_jpeg_decoder(bytes: &[u8], s: &Settings, needed: Needed) -> Result<Rgb, String> {
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
    let (columns, rows) = needed(width, height, source);
    decoder.set_region(jpeg_decoder::Region { columns, rows });
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

/// An encoded PNG or JPEG as 8-bit RGB, converted as the crate's documentation says.
pub fn decode(bytes: &[u8], s: &Settings, needed: Needed) -> Result<Rgb, String> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        decode_png(bytes, s.max_pixels)
    } else if bytes.starts_with(&[0xFF, 0xD8]) {
        match s.jpeg {
            JpegDecoder::Zune => decode_zune(bytes, s),
            JpegDecoder::JpegDecoder => decode_jpeg_decoder(bytes, s, needed),
        }
    } else {
        Err("neither a PNG nor a JPEG image".into())
    }
}
