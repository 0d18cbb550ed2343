//! The vendored fdeflate (png's inflate, changed for the sandbox's compiler: fdeflate/README.md)
//! inflates what miniz_oxide deflates back to exactly the original bytes, whole and streamed in small
//! pieces, on data shaped to reach every path of the fast loop the changes touch: literals one and two
//! to a table entry, runs of one byte (distance 1) in the middle and at the end of the output,
//! overlapping copies at short distances, codes too long for the primary tables, and stored blocks.
//! Corrupted streams must be refused where miniz_oxide refuses them and give its answer where it
//! does not, never panic (a panic in the sandbox is a trap); upstream's own regression streams and
//! unit tests of the public API give upstream's answers (its tests of private items, such as the fixed
//! tables, are covered by inflating fixed-code streams here). Runs natively and in the sandbox
//! (`scripts/test.sh`).

use fdeflate::{DecompressionError, Decompressor, decompress_to_vec};

/// A small deterministic generator (xorshift64*), so that a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Inputs, each named for what it exercises.
fn inputs() -> Vec<(&'static str, Vec<u8>)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::new();

    // PNG-like: filtered rows of a smooth picture with noise, mostly small values and runs of zeros.
    let mut png = Vec::new();
    for row in 0..300u64 {
        png.push((row % 5) as u8);
        for x in 0..900u64 {
            let v = if (x / 64 + row / 16) % 3 == 0 { 0 } else { (rng.below(7) as u8).wrapping_sub(3) };
            png.push(v);
        }
    }
    out.push(("png-like rows", png));

    // Skewed bytes: a geometric distribution gives rare symbols codes longer than the primary
    // tables (secondary table entries), and common ones short codes, paired two to an entry.
    let mut skewed = Vec::new();
    for _ in 0..200_000 {
        let mut v = 0u8;
        while v < 255 && rng.below(4) != 0 {
            v += 1;
        }
        skewed.push(v);
    }
    out.push(("skewed literals", skewed));

    // Runs of one byte of every length up to past the longest match, one ending the data.
    let mut runs = Vec::new();
    for len in 1..600usize {
        runs.push(rng.below(256) as u8);
        let b = rng.below(256) as u8;
        runs.extend(std::iter::repeat_n(b, len));
    }
    runs.extend(std::iter::repeat_n(7u8, 100_000));
    out.push(("runs", runs));

    // Repeats at distances 2..48 (overlapping copies below 16) and far ones.
    let mut repeats = Vec::new();
    for dist in 2..48usize {
        let pattern: Vec<u8> = (0..dist).map(|_| rng.below(256) as u8).collect();
        for i in 0..(dist * 37 + 11) {
            repeats.push(pattern[i % dist]);
        }
    }
    let far: Vec<u8> = (0..5000).map(|_| rng.below(256) as u8).collect();
    for _ in 0..8 {
        repeats.extend_from_slice(&far);
        repeats.extend((0..rng.below(3000)).map(|_| rng.below(256) as u8));
    }
    out.push(("repeats", repeats));

    // Many distinct distances with skewed frequencies: distance codes past the primary table.
    let mut distances = (0..40_000).map(|_| rng.below(256) as u8).collect::<Vec<u8>>();
    for _ in 0..20_000 {
        let mut d = 1usize;
        while d < 30_000 && rng.below(3) != 0 {
            d = d * 2 + rng.below(2) as usize;
        }
        let start = distances.len() - d.min(distances.len() - 1);
        let len = 3 + rng.below(40) as usize;
        for k in 0..len {
            let b = distances[start + k];
            distances.push(b);
        }
        distances.push(rng.below(256) as u8);
    }
    out.push(("many distances", distances));

    // Incompressible bytes (stored blocks at level 0, near-flat codes otherwise).
    out.push(("random", (0..100_000).map(|_| rng.below(256) as u8).collect()));
    out.push(("empty", Vec::new()));
    out.push(("one byte", vec![42]));
    out
}

const LEVELS: [u8; 5] = [0, 1, 6, 9, 10];

/// miniz_oxide's deflate with fixed Huffman codes only (deflate's static blocks, which it otherwise
/// writes only for inputs under 48 bytes): the fast loop over the fixed literal table.
fn deflate_fixed(data: &[u8]) -> Vec<u8> {
    use miniz_oxide::deflate::core::{
        CompressionStrategy, CompressorOxide, TDEFLFlush, TDEFLStatus, compress_to_output,
        create_comp_flags_from_zip_params,
    };
    let flags = create_comp_flags_from_zip_params(6, 15, CompressionStrategy::Fixed as i32);
    let mut compressor = CompressorOxide::new(flags);
    let mut out = Vec::new();
    let (status, _) = compress_to_output(&mut compressor, data, TDEFLFlush::Finish, |chunk| {
        out.extend_from_slice(chunk);
        true
    });
    assert_eq!(status, TDEFLStatus::Done);
    out
}

/// Every way the tests deflate: miniz_oxide's levels, and fixed codes only.
fn deflated(data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<_> = LEVELS
        .iter()
        .map(|&level| (format!("level {level}"), miniz_oxide::deflate::compress_to_vec_zlib(data, level)))
        .collect();
    all.push(("fixed codes".to_string(), deflate_fixed(data)));
    all
}

/// Inflates `stream` feeding at most `chunk` input bytes a call into an output window that grows
/// by at most `grow` bytes a call: the careful loop's paths and the queued runs and copies.
fn streamed(stream: &[u8], chunk: usize, grow: usize) -> Result<Vec<u8>, DecompressionError> {
    let mut d = Decompressor::new();
    // As png does. Upstream skips the checksum of a queued run or copy that a small output window
    // cuts (`Decompressor::read`'s early returns), so a stream inflated a few bytes at a time fails
    // its checksum though every byte is right; the whole inflates above check it.
    d.ignore_adler32();
    let mut out = vec![0u8; 0];
    let mut position = 0;
    let mut input = stream;
    let mut stalled = 0;
    while !d.is_done() {
        if out.len() < position + grow {
            out.resize(position + grow, 0);
        }
        let take = input.len().min(chunk);
        let end = take == input.len();
        let (consumed, written) = d.read(&input[..take], &mut out[..position + grow], position, end)?;
        input = &input[consumed..];
        position += written;
        stalled = if consumed == 0 && written == 0 { stalled + 1 } else { 0 };
        assert!(stalled < 4, "no progress at input {} output {position}", stream.len() - input.len());
    }
    out.truncate(position);
    Ok(out)
}

#[test]
fn inflates_what_miniz_oxide_deflates_whole_and_streamed() {
    for (name, data) in inputs() {
        for (how, stream) in deflated(&data) {
            let whole = decompress_to_vec(&stream).unwrap_or_else(|e| panic!("{name} {how}: {e:?}"));
            assert!(whole == data, "{name} {how}: whole inflate differs");
            // Windows of 17 bytes leave the fast loop's 16-byte run writes no room; 300 and more do.
            for (chunk, grow) in [(1, 1 << 20), (7, 1000), (64, 17), (3, 300), (4096, 300_000)] {
                let out = streamed(&stream, chunk, grow)
                    .unwrap_or_else(|e| panic!("{name} {how} chunk {chunk} grow {grow}: {e:?}"));
                assert!(out == data, "{name} {how} chunk {chunk} grow {grow}: differs");
            }
        }
    }
}

#[test]
fn corrupted_streams_fail_or_agree_with_miniz_oxide_and_never_panic() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut failed = 0;
    for (name, data) in inputs() {
        let stream = miniz_oxide::deflate::compress_to_vec_zlib(&data, 6);
        for round in 0..40 {
            let mut bad = stream.clone();
            if bad.len() <= 2 {
                continue;
            }
            // Flip a few bits after the zlib header, or cut the stream short.
            if round % 4 == 3 {
                bad.truncate(2 + rng.below(bad.len() as u64 - 2) as usize);
            } else {
                for _ in 0..1 + rng.below(3) {
                    let i = 2 + rng.below(bad.len() as u64 - 2) as usize;
                    bad[i] ^= 1 << rng.below(8);
                }
            }
            let ours = decompress_to_vec(&bad);
            let theirs = miniz_oxide::inflate::decompress_to_vec_zlib(&bad);
            match (&ours, &theirs) {
                (Ok(a), Ok(b)) => assert!(a == b, "{name} round {round}: both accept, outputs differ"),
                (Ok(_), Err(e)) => panic!("{name} round {round}: accepted what miniz_oxide refuses ({e:?})"),
                (Err(e), Ok(_)) => panic!("{name} round {round}: refused ({e:?}) what miniz_oxide accepts"),
                (Err(_), Err(_)) => failed += 1,
            }
        }
    }
    // The corruptions are real ones: most streams must be refused.
    assert!(failed > 100, "only {failed} corrupted streams refused");
}

/// Upstream's regression streams (fdeflate/tests, found by fuzzers, their checksums not kept): whole
/// and byte by byte, the same answer, which is upstream's.
#[test]
fn upstreams_chunking_regressions_answer_as_upstream() {
    let example = |n: u32| -> &'static [u8] {
        match n {
            1 => include_bytes!("../fdeflate/tests/input-chunking-sensitivity-example1.zz"),
            2 => include_bytes!("../fdeflate/tests/input-chunking-sensitivity-example2.zz"),
            _ => include_bytes!("../fdeflate/tests/input-chunking-sensitivity-example3.zz"),
        }
    };
    let both = |stream: &[u8]| {
        let whole = streamed(stream, stream.len(), 1 << 20);
        assert_eq!(whole, streamed(stream, 1, 1 << 20), "whole and byte by byte differ");
        whole
    };
    let first = both(example(1)).expect("example 1 inflates");
    assert_eq!((first.len(), simd_adler32::adler32(&first.as_slice())), (281, 751299));
    for n in [2, 3] {
        assert_eq!(both(example(n)), Err(DecompressionError::BadLiteralLengthHuffmanTree), "example {n}");
    }
}

/// Upstream's unit tests of the public API (`src/decompress.rs`'s, not vendored): the checksum
/// checked or ignored, the checksum's last byte arriving after the data, empty stored blocks.
#[test]
fn upstreams_public_api_tests() {
    let mut compressed = fdeflate::compress_to_vec(b"Hello world!");
    let last = compressed.len() - 1;
    compressed[last] = compressed[last].wrapping_add(1);
    assert_eq!(decompress_to_vec(&compressed), Err(DecompressionError::WrongChecksum));
    let mut d = Decompressor::new();
    d.ignore_adler32();
    let mut out = vec![0; 1024];
    let written = d.read(&compressed, &mut out, 0, true).expect("checksum ignored").1;
    assert_eq!(&out[..written], b"Hello world!");

    let input = b"Hello world!";
    let compressed = fdeflate::compress_to_vec(input);
    let mut d = Decompressor::new();
    let mut out = vec![0; 1024];
    let (consumed, written) = d.read(&compressed[..compressed.len() - 1], &mut out, 0, false).expect("all but one");
    assert_eq!((consumed, written), (compressed.len() - 1, input.len()));
    let (consumed, written) = d.read(&compressed[consumed..], &mut out[..written], written, true).expect("the last");
    assert!(d.is_done());
    assert_eq!((consumed, written), (1, 0));
    assert_eq!(&out[..input.len()], input);

    let mut compressed = fdeflate::compress_to_vec(b"");
    for _ in 0..10 {
        compressed.splice(2..2, [0u8, 0, 0, 0xff, 0xff]);
    }
    for end_of_input in [true, false] {
        let mut d = Decompressor::new();
        let (consumed, written) = d.read(&compressed, &mut [], 0, end_of_input).expect("empty blocks");
        assert!(d.is_done());
        assert_eq!((consumed, written), (compressed.len(), 0));
    }
}
