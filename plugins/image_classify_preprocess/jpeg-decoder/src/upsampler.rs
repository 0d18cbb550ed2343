use crate::decoder::ColorConvertFunc;
use crate::error::{Error, Result, UnsupportedFeature};
use crate::parser::Component;
use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

pub struct Upsampler {
    components: Vec<UpsamplerComponent>,
    line_buffer_size: usize,
}

struct UpsamplerComponent {
    upsampler: Box<dyn Upsample + Sync>,
    width: usize,
    height: usize,
    row_stride: usize,
}

impl Upsampler {
    pub fn new(components: &[Component], output_width: u16, output_height: u16) -> Result<Upsampler> {
        let h_max = components.iter().map(|c| c.horizontal_sampling_factor).max().unwrap();
        let v_max = components.iter().map(|c| c.vertical_sampling_factor).max().unwrap();
        let mut upsampler_components = Vec::with_capacity(components.len());

        for component in components {
            let upsampler = choose_upsampler(
                (component.horizontal_sampling_factor, component.vertical_sampling_factor),
                (h_max, v_max),
                output_width,
                output_height,
            )?;
            upsampler_components.push(UpsamplerComponent {
                upsampler,
                width: component.size.width as usize,
                height: component.size.height as usize,
                row_stride: component.block_size.width as usize * component.dct_scale,
            });
        }

        let buffer_size = components.iter().map(|c| c.size.width).max().unwrap() as usize * h_max as usize;

        Ok(Upsampler { components: upsampler_components, line_buffer_size: buffer_size })
    }

    /// nereus: the line buffers `upsample_and_interleave_row` fills, made once per image.
    pub fn line_buffers(&self, component_count: usize) -> Vec<Vec<u8>> {
        vec![vec![0u8; self.line_buffer_size]; component_count]
    }

    /// Upsamples and converts the output columns `columns` of one row (nereus: only those; the
    /// rest of `output` is left as it is).
    #[allow(clippy::too_many_arguments)]
    pub fn upsample_and_interleave_row(
        &self,
        component_data: &[Vec<u8>],
        row: usize,
        output_width: usize,
        output: &mut [u8],
        color_convert: ColorConvertFunc,
        line_buffers: &mut [Vec<u8>],
        columns: Range<usize>,
    ) {
        let component_count = component_data.len();

        debug_assert_eq!(component_count, self.components.len());

        for (i, component) in self.components.iter().enumerate() {
            component.upsampler.upsample_row(
                &component_data[i],
                component.width,
                component.height,
                component.row_stride,
                row,
                output_width,
                &mut line_buffers[i],
                columns.clone(),
            );
        }
        let mut lines: [&[u8]; crate::decoder::MAX_COMPONENTS] = [&[]; crate::decoder::MAX_COMPONENTS];
        for (line, buffer) in lines.iter_mut().zip(line_buffers.iter()) {
            *line = &buffer[columns.clone()];
        }
        color_convert(
            &lines[..component_count],
            &mut output[columns.start * component_count..columns.end * component_count],
        );
    }
}

struct UpsamplerH1V1;
struct UpsamplerH2V1;
struct UpsamplerH1V2;
struct UpsamplerH2V2;

struct UpsamplerGeneric {
    horizontal_scaling_factor: u8,
    vertical_scaling_factor: u8,
}

fn choose_upsampler(
    sampling_factors: (u8, u8),
    max_sampling_factors: (u8, u8),
    output_width: u16,
    output_height: u16,
) -> Result<Box<dyn Upsample + Sync>> {
    let h1 = sampling_factors.0 == max_sampling_factors.0 || output_width == 1;
    let v1 = sampling_factors.1 == max_sampling_factors.1 || output_height == 1;
    let h2 = sampling_factors.0 * 2 == max_sampling_factors.0;
    let v2 = sampling_factors.1 * 2 == max_sampling_factors.1;

    if h1 && v1 {
        Ok(Box::new(UpsamplerH1V1))
    } else if h2 && v1 {
        Ok(Box::new(UpsamplerH2V1))
    } else if h1 && v2 {
        Ok(Box::new(UpsamplerH1V2))
    } else if h2 && v2 {
        Ok(Box::new(UpsamplerH2V2))
    } else if max_sampling_factors.0 % sampling_factors.0 != 0 || max_sampling_factors.1 % sampling_factors.1 != 0 {
        Err(Error::Unsupported(UnsupportedFeature::NonIntegerSubsamplingRatio))
    } else {
        Ok(Box::new(UpsamplerGeneric {
            horizontal_scaling_factor: max_sampling_factors.0 / sampling_factors.0,
            vertical_scaling_factor: max_sampling_factors.1 / sampling_factors.1,
        }))
    }
}

#[allow(clippy::too_many_arguments)]
trait Upsample {
    /// nereus: `columns` are the output columns wanted (within `0..output_width`); an upsampler
    /// may compute more, or all of the row.
    fn upsample_row(
        &self,
        input: &[u8],
        input_width: usize,
        input_height: usize,
        row_stride: usize,
        row: usize,
        output_width: usize,
        output: &mut [u8],
        columns: Range<usize>,
    );
}

impl Upsample for UpsamplerH1V1 {
    fn upsample_row(
        &self,
        input: &[u8],
        _input_width: usize,
        _input_height: usize,
        row_stride: usize,
        row: usize,
        _output_width: usize,
        output: &mut [u8],
        columns: Range<usize>,
    ) {
        let input = &input[row * row_stride..];

        output[columns.clone()].copy_from_slice(&input[columns]);
    }
}

impl Upsample for UpsamplerH2V1 {
    fn upsample_row(
        &self,
        input: &[u8],
        input_width: usize,
        _input_height: usize,
        row_stride: usize,
        row: usize,
        _output_width: usize,
        output: &mut [u8],
        columns: Range<usize>,
    ) {
        let input = &input[row * row_stride..];

        if input_width == 1 {
            output[0] = input[0];
            output[1] = input[0];
            return;
        }

        // nereus: output columns 2i and 2i + 1 come from input i; only the inputs the columns need,
        // unless they reach the first or last pair, edge cases computed with the whole row.
        let (first, end) = (columns.start / 2, (columns.end + 1) / 2);
        let whole = first < 1 || end >= input_width;
        let interior = if whole { 1..input_width - 1 } else { first..end };

        if whole {
            output[0] = input[0];
            output[1] = ((input[0] as u32 * 3 + input[1] as u32 + 2) >> 2) as u8;
        }

        for i in interior {
            let sample = 3 * input[i] as u32 + 2;
            output[i * 2] = ((sample + input[i - 1] as u32) >> 2) as u8;
            output[i * 2 + 1] = ((sample + input[i + 1] as u32) >> 2) as u8;
        }

        if whole {
            output[(input_width - 1) * 2] =
                ((input[input_width - 1] as u32 * 3 + input[input_width - 2] as u32 + 2) >> 2) as u8;
            output[(input_width - 1) * 2 + 1] = input[input_width - 1];
        }
    }
}

impl Upsample for UpsamplerH1V2 {
    fn upsample_row(
        &self,
        input: &[u8],
        _input_width: usize,
        input_height: usize,
        row_stride: usize,
        row: usize,
        output_width: usize,
        output: &mut [u8],
        columns: Range<usize>,
    ) {
        let row_near = row as f32 / 2.0;
        // If row_near's fractional is 0.0 we want row_far to be the previous row and if it's 0.5 we
        // want it to be the next row.
        let row_far = (row_near + row_near.fract() * 3.0 - 0.25).min((input_height - 1) as f32);

        let input_near = &input[row_near as usize * row_stride..];
        let input_far = &input[row_far as usize * row_stride..];

        let output = &mut output[..output_width];
        let input_near = &input_near[..output_width];
        let input_far = &input_far[..output_width];
        for i in columns {
            output[i] = ((3 * input_near[i] as u32 + input_far[i] as u32 + 2) >> 2) as u8;
        }
    }
}

impl Upsample for UpsamplerH2V2 {
    fn upsample_row(
        &self,
        input: &[u8],
        input_width: usize,
        input_height: usize,
        row_stride: usize,
        row: usize,
        _output_width: usize,
        output: &mut [u8],
        columns: Range<usize>,
    ) {
        let row_near = row as f32 / 2.0;
        // If row_near's fractional is 0.0 we want row_far to be the previous row and if it's 0.5 we
        // want it to be the next row.
        let row_far = (row_near + row_near.fract() * 3.0 - 0.25).min((input_height - 1) as f32);

        let input_near = &input[row_near as usize * row_stride..];
        let input_far = &input[row_far as usize * row_stride..];

        if input_width == 1 {
            let value = ((3 * input_near[0] as u32 + input_far[0] as u32 + 2) >> 2) as u8;
            output[0] = value;
            output[1] = value;
            return;
        }

        // nereus: output columns 2i - 1 and 2i come from inputs i - 1 and i; only the inputs the
        // columns need, unless they reach the first or last column, edge cases computed with the
        // whole row.
        let (first, end) = ((columns.start + 1) / 2, columns.end / 2 + 1);
        let whole = columns.start < 1 || end > input_width || first >= end;
        let interior = if whole { 1..input_width } else { first..end };

        let mut t1 = 3 * input_near[interior.start - 1] as u32 + input_far[interior.start - 1] as u32;
        if whole {
            output[0] = ((t1 + 2) >> 2) as u8;
        }

        // nereus: SIMD for as many columns as it can take, this loop for the rest.
        let rest = h2v2_simd::interior(input_near, input_far, interior.clone(), output);
        if rest > interior.start {
            t1 = 3 * input_near[rest - 1] as u32 + input_far[rest - 1] as u32;
        }
        for i in rest..interior.end {
            let t0 = t1;
            t1 = 3 * input_near[i] as u32 + input_far[i] as u32;

            output[i * 2 - 1] = ((3 * t0 + t1 + 8) >> 4) as u8;
            output[i * 2] = ((3 * t1 + t0 + 8) >> 4) as u8;
        }

        if whole {
            output[input_width * 2 - 1] = ((t1 + 2) >> 2) as u8;
        }
    }
}

/// nereus: the H2V2 upsampler's interior loop 8 input columns (16 output bytes) a step, with Wasm SIMD
/// or SSE2: the scalar loop's arithmetic exactly, in 16-bit lanes (at most 3 × 1,020 + 1,020 + 8).
/// For input columns `columns.start..` (at least 1) it writes output bytes `2i - 1` and `2i` as the
/// scalar loop does, and returns the first column left to it.
mod h2v2_simd {
    #![allow(unsafe_code)]
    use core::ops::Range;

    /// Whether the step at input column `i` stays inside the columns and the slices: it reads
    /// `near` and `far` at `i - 1..i + 8` and writes `output` at `2i - 1..2i + 15`.
    fn fits(i: usize, columns: &Range<usize>, near: &[u8], far: &[u8], output: &[u8]) -> bool {
        i >= 1 && i + 8 <= columns.end && i + 8 <= near.len() && i + 8 <= far.len() && 2 * i + 15 <= output.len()
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub fn interior(near: &[u8], far: &[u8], columns: Range<usize>, output: &mut [u8]) -> usize {
        use core::arch::wasm32::*;
        let mut i = columns.start;
        let (three, eight) = (u16x8_splat(3), u16x8_splat(8));
        while fits(i, &columns, near, far, output) {
            // SAFETY: `fits` keeps the 8-byte loads at i - 1 and i inside `near` and `far`, and the
            // 16-byte store at 2i - 1 inside `output`; Wasm loads and stores need no alignment.
            unsafe {
                let near_prev = u16x8_load_extend_u8x8(near.as_ptr().add(i - 1));
                let near_here = u16x8_load_extend_u8x8(near.as_ptr().add(i));
                let far_prev = u16x8_load_extend_u8x8(far.as_ptr().add(i - 1));
                let far_here = u16x8_load_extend_u8x8(far.as_ptr().add(i));
                let t0 = u16x8_add(u16x8_mul(near_prev, three), far_prev);
                let t1 = u16x8_add(u16x8_mul(near_here, three), far_here);
                let odd = u16x8_shr(u16x8_add(u16x8_add(u16x8_mul(t0, three), t1), eight), 4);
                let even = u16x8_shr(u16x8_add(u16x8_add(u16x8_mul(t1, three), t0), eight), 4);
                // Bytes odd 0-7, even 0-7, interleaved to odd 0, even 0, odd 1, ...
                let bytes = u8x16_narrow_i16x8(odd, even);
                let out = i8x16_shuffle::<0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15>(bytes, bytes);
                v128_store(output.as_mut_ptr().add(2 * i - 1).cast::<v128>(), out);
            }
            i += 8;
        }
        i
    }

    #[cfg(target_arch = "x86_64")]
    pub fn interior(near: &[u8], far: &[u8], columns: Range<usize>, output: &mut [u8]) -> usize {
        use core::arch::x86_64::*;
        let mut i = columns.start;
        while fits(i, &columns, near, far, output) {
            // SAFETY: as for Wasm; SSE2 is part of x86-64, and these loads and stores are unaligned.
            unsafe {
                let (three, eight, zero) = (_mm_set1_epi16(3), _mm_set1_epi16(8), _mm_setzero_si128());
                let load = |row: &[u8], at: usize| {
                    _mm_unpacklo_epi8(_mm_loadl_epi64(row.as_ptr().add(at).cast::<__m128i>()), zero)
                };
                let t0 = _mm_add_epi16(_mm_mullo_epi16(load(near, i - 1), three), load(far, i - 1));
                let t1 = _mm_add_epi16(_mm_mullo_epi16(load(near, i), three), load(far, i));
                let odd = _mm_srli_epi16(_mm_add_epi16(_mm_add_epi16(_mm_mullo_epi16(t0, three), t1), eight), 4);
                let even = _mm_srli_epi16(_mm_add_epi16(_mm_add_epi16(_mm_mullo_epi16(t1, three), t0), eight), 4);
                let out = _mm_unpacklo_epi8(_mm_packus_epi16(odd, odd), _mm_packus_epi16(even, even));
                _mm_storeu_si128(output.as_mut_ptr().add(2 * i - 1).cast::<__m128i>(), out);
            }
            i += 8;
        }
        i
    }

    #[cfg(not(any(all(target_arch = "wasm32", target_feature = "simd128"), target_arch = "x86_64")))]
    pub fn interior(_near: &[u8], _far: &[u8], columns: Range<usize>, _output: &mut [u8]) -> usize {
        columns.start
    }
}

impl Upsample for UpsamplerGeneric {
    // Uses nearest neighbor sampling
    fn upsample_row(
        &self,
        input: &[u8],
        input_width: usize,
        _input_height: usize,
        row_stride: usize,
        row: usize,
        _output_width: usize,
        output: &mut [u8],
        _columns: Range<usize>,
    ) {
        let mut index = 0;
        let start = (row / self.vertical_scaling_factor as usize) * row_stride;
        let input = &input[start..(start + input_width)];
        for val in input {
            for _ in 0..self.horizontal_scaling_factor {
                output[index] = *val;
                index += 1;
            }
        }
    }
}
