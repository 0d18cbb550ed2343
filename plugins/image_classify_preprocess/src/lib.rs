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
//!    that wants it rotates first, or sends `ImageOps.exif_transpose`'s result). With jpeg-decoder
//!    (the default), a JPEG is decoded only where step 2 reads it (its inverse DCT, upsampling and
//!    colour conversion; the vendored `jpeg-decoder/`'s `set_region`), with exactly the pixels a
//!    whole decode gives there.
//! 2. resize so that the shorter side is 256 and the longer `floor(long × 256 / short)`, with
//!    Pillow's `Image.resize(size, BILINEAR)`: the same triangle filter widened by the scale when
//!    shrinking (antialiasing), the same coefficients and the same 22-bit fixed-point arithmetic,
//!    horizontal pass first, each pass rounded to 8 bits. Only the pixels of the centre crop are
//!    computed.
//! 3. centre-crop 224 × 224 at `((w - 224) // 2, (h - 224) // 2)`.
//! 4. scale to [0, 1] and normalise with ImageNet's mean (0.485, 0.456, 0.406) and standard
//!    deviation (0.229, 0.224, 0.225), channels first.
//!
//! PNG chunk CRCs are not verified (Pillow skips the image data's too); a corrupt stream still fails
//! where it cannot be inflated or runs short of rows.
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
//!
//! Natively the crate is a library (the component's exports are for `wasm32` with the default
//! `backend` feature): `examples/preprocess_time.rs` times the decode and the resize, built natively
//! and for the sandbox from this source (`bench/preprocess_sandbox.sh`).
// Without the component's exports (see the end) the backend is unused: this crate is then only the
// library `examples/preprocess_time.rs` times.
#![cfg_attr(not(all(target_arch = "wasm32", feature = "backend")), allow(dead_code))]

pub mod decode;
pub mod resize;

use nereus_sdk::{Backend, ErrorKind, InstanceInfo, ModelInfo, Request, Response, Tensor, config_parameter};

use crate::decode::{JpegDecoder, Settings, decode};
use crate::resize::{CROP, needed, resize_crop_normalise};

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

struct ClassifyPreprocess {
    settings: Settings,
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
            let image = decode(element?, &self.settings, needed).map_err(|e| format!("IMAGE element {i}: {e}"))?;
            resize_crop_normalise(&image, &mut pixels);
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
        Ok(ClassifyPreprocess { settings: settings(model)? })
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

// The component's exports, in the plugin build only: natively, and for the Wasm build of
// `examples/preprocess_time.rs` (`--no-default-features`), this crate is a plain library.
#[cfg(all(target_arch = "wasm32", feature = "backend"))]
nereus_sdk::export!(ClassifyPreprocess);
