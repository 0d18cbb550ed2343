//! A JPEG decoded only where the resize reads it (`decode::decode` with `resize::needed`, through the
//! vendored jpeg-decoder's `set_region`) gives the model exactly the output of a whole decode, for
//! every chroma subsampling, progressive and baseline, grey and CMYK, odd sizes, upscales and large
//! shrinks; and it did leave pixels out (else the comparison would prove nothing).
use std::ops::Range;

use common::jpeg;
use image_classify_preprocess::decode::{JpegDecoder, Settings, decode};
use image_classify_preprocess::resize::{needed, resize_crop_normalise};
use jpeg_encoder::{ColorType, SamplingFactor};

mod common;

fn whole(width: usize, height: usize, _source: (usize, usize)) -> (Range<usize>, Range<usize>) {
    (0..width, 0..height)
}

#[test]
fn a_region_decode_gives_the_whole_decode_s_output() {
    let settings = Settings { max_pixels: 1 << 26, jpeg: JpegDecoder::JpegDecoder, dct_min_side: 0 };
    let cases = [
        ("640x480 4:2:0", jpeg(640, 480, ColorType::Rgb, SamplingFactor::F_2_2, false)),
        ("640x480 4:2:0 progressive", jpeg(640, 480, ColorType::Rgb, SamplingFactor::F_2_2, true)),
        ("640x480 4:2:2", jpeg(640, 480, ColorType::Rgb, SamplingFactor::F_2_1, false)),
        ("640x480 4:4:0", jpeg(640, 480, ColorType::Rgb, SamplingFactor::F_1_2, false)),
        ("640x480 4:4:4", jpeg(640, 480, ColorType::Rgb, SamplingFactor::F_1_1, false)),
        ("640x480 4:1:1", jpeg(640, 480, ColorType::Rgb, SamplingFactor::F_4_1, false)),
        ("480x640 portrait 4:2:0", jpeg(480, 640, ColorType::Rgb, SamplingFactor::F_2_2, false)),
        ("333x257 odd 4:2:0", jpeg(333, 257, ColorType::Rgb, SamplingFactor::F_2_2, false)),
        ("1921x1081 odd 4:2:0", jpeg(1921, 1081, ColorType::Rgb, SamplingFactor::F_2_2, false)),
        ("3000x2600 23 taps 4:2:0", jpeg(3000, 2600, ColorType::Rgb, SamplingFactor::F_2_2, false)),
        ("100x80 upscaled", jpeg(100, 80, ColorType::Rgb, SamplingFactor::F_2_2, false)),
        ("640x480 grey", jpeg(640, 480, ColorType::Luma, SamplingFactor::F_1_1, false)),
        ("640x480 CMYK", jpeg(640, 480, ColorType::Cmyk, SamplingFactor::F_1_1, false)),
    ];
    for (name, bytes) in cases {
        let all = decode(&bytes, &settings, whole).unwrap_or_else(|e| panic!("{name}: {e}"));
        let part = decode(&bytes, &settings, needed).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((all.width, all.height), (part.width, part.height), "{name}");
        let (columns, rows) = needed(all.width, all.height, all.source);
        let skipped = (columns.len() < all.width || rows.len() < all.height)
            .then(|| all.data.iter().zip(&part.data).filter(|(a, b)| a != b).count());
        // Every pixel the resize reads is the whole decode's.
        let first_difference = rows.clone().flat_map(|y| columns.clone().map(move |x| (x, y))).find(|&(x, y)| {
            let i = (y * all.width + x) * 3;
            all.data[i..i + 3] != part.data[i..i + 3]
        });
        assert_eq!(first_difference, None, "{name}: a pixel read differs (columns {columns:?}, rows {rows:?})");
        let (mut want, mut got) = (Vec::new(), Vec::new());
        resize_crop_normalise(&all, &mut want);
        resize_crop_normalise(&part, &mut got);
        let differing = want.iter().zip(&got).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differing, 0, "{name}: {differing} outputs differ from the whole decode's");
        // Where the resize reads less than the whole image, the region decode left pixels out.
        if let Some(skipped) = skipped {
            assert!(skipped > 0, "{name}: the region decode computed every pixel");
        }
    }
}
