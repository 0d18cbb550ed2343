//! The plugin's computation alone, timed: decode, then resize + crop + normalise, of one image file,
//! N times after a warm-up, printing the mean milliseconds of each. Built natively and for the sandbox
//! from the same source, it says what the sandbox costs this code (issue 28's "within 1.3× of its
//! own native build"); `bench/preprocess_sandbox.sh` runs both.
//!
//!   preprocess_time IMAGE [N] [jpeg-decoder|zune]
use std::time::{Duration, Instant};

use image_classify_preprocess::decode::{JpegDecoder, Settings, decode};
use image_classify_preprocess::resize::{needed, resize_crop_normalise};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: preprocess_time IMAGE [N] [jpeg-decoder|zune]")?;
    let n: u32 = args.get(2).map_or(Ok(50), |s| s.parse()).map_err(|e| format!("N: {e}"))?;
    let jpeg = match args.get(3).map(String::as_str) {
        None | Some("jpeg-decoder") => JpegDecoder::JpegDecoder,
        Some("zune") => JpegDecoder::Zune,
        Some(other) => return Err(format!("unknown decoder {other:?}")),
    };
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let settings = Settings { max_pixels: 1 << 26, jpeg, dct_min_side: 0 };
    let mut pixels = Vec::new();
    let (mut decoding, mut resizing) = (Duration::ZERO, Duration::ZERO);
    // The fastest image too: on a shared machine the mean carries whatever else ran meanwhile.
    let mut fastest = Duration::MAX;
    for i in 0..n + n.div_ceil(10) {
        let t0 = Instant::now();
        let image = decode(&bytes, &settings, needed)?;
        let t1 = Instant::now();
        pixels.clear();
        resize_crop_normalise(&image, &mut pixels);
        let t2 = Instant::now();
        // The first tenth warms caches and (in the sandbox) grows memory; it is not counted.
        if i >= n.div_ceil(10) {
            decoding += t1 - t0;
            resizing += t2 - t1;
            fastest = fastest.min(t2 - t0);
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3 / f64::from(n);
    let checksum: f64 = pixels.iter().map(|&v| f64::from(v)).sum();
    println!(
        "{} decode_ms={:.3} resize_ms={:.3} total_ms={:.3} n={n} checksum={checksum:.3} fastest_ms={:.3}",
        path.rsplit('/').next().unwrap_or(path),
        ms(decoding),
        ms(resizing),
        ms(decoding + resizing),
        fastest.as_secs_f64() * 1e3
    );
    Ok(())
}
