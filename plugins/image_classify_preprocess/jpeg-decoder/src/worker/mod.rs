mod immediate;
#[rustfmt::skip] // nereus: unchanged from upstream, kept as upstream formatted it (README.md)
mod multithreaded;

use crate::decoder::{choose_color_convert_func, ColorTransform, Region};
use crate::error::Result;
use crate::parser::{Component, Dimensions};
use crate::upsampler::Upsampler;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::RefCell;

pub struct RowData {
    pub index: usize,
    pub component: Component,
    pub quantization_table: Arc<[u16; 64]>,
    /// nereus: the component's sample columns to compute (all when None): blocks wholly outside
    /// skip their inverse DCT.
    pub columns: Option<core::ops::Range<usize>>,
}

pub trait Worker {
    fn start(&mut self, row_data: RowData) -> Result<()>;
    fn append_row(&mut self, row: (usize, Vec<i16>)) -> Result<()>;
    fn get_result(&mut self, index: usize) -> Result<Vec<u8>>;
    /// Default implementation for spawning multiple tasks.
    fn append_rows(&mut self, row: &mut dyn Iterator<Item = (usize, Vec<i16>)>) -> Result<()> {
        for item in row {
            self.append_row(item)?;
        }
        Ok(())
    }
}

#[allow(dead_code)]
pub enum PreferWorkerKind {
    Immediate,
    Multithreaded,
}

#[derive(Default)]
pub struct WorkerScope {
    inner: core::cell::RefCell<Option<WorkerScopeInner>>,
}

enum WorkerScopeInner {
    #[cfg(not(any(target_arch = "asmjs", target_arch = "wasm32")))]
    Multithreaded(multithreaded::MpscWorker),
    Immediate(immediate::ImmediateWorker),
}

impl WorkerScope {
    pub fn with<T>(with: impl FnOnce(&Self) -> T) -> T {
        with(&WorkerScope { inner: RefCell::default() })
    }

    pub fn get_or_init_worker<T>(&self, prefer: PreferWorkerKind, f: impl FnOnce(&mut dyn Worker) -> T) -> T {
        let mut inner = self.inner.borrow_mut();
        let inner = inner.get_or_insert_with(move || match prefer {
            #[allow(unreachable_patterns)]
            #[cfg(not(any(target_arch = "asmjs", target_arch = "wasm32")))]
            PreferWorkerKind::Multithreaded => WorkerScopeInner::Multithreaded(Default::default()),
            _ => WorkerScopeInner::Immediate(Default::default()),
        });

        f(match &mut *inner {
            #[cfg(not(any(target_arch = "asmjs", target_arch = "wasm32")))]
            WorkerScopeInner::Multithreaded(worker) => worker,
            WorkerScopeInner::Immediate(worker) => worker,
        })
    }
}

pub fn compute_image_parallel(
    components: &[Component],
    data: Vec<Vec<u8>>,
    output_size: Dimensions,
    color_transform: ColorTransform,
    region: Option<&Region>,
) -> Result<Vec<u8>> {
    #[allow(unreachable_code)]
    {
        let color_convert_func = choose_color_convert_func(components.len(), color_transform)?;
        let upsampler = Upsampler::new(components, output_size.width, output_size.height)?;
        let width = output_size.width as usize;
        let line_size = width * components.len();
        let mut image = vec![0u8; line_size * output_size.height as usize];
        // nereus: one set of line buffers for the whole image, and only the region's rows and
        // columns (all columns where the conversion is not pixel by pixel: no transform).
        let mut line_buffers = upsampler.line_buffers(components.len());
        let (columns, rows) = match region {
            Some(r) if color_transform != ColorTransform::None => (simd_aligned(&r.columns, width), r.rows.clone()),
            Some(r) => (0..width, r.rows.clone()),
            None => (0..width, 0..output_size.height as usize),
        };

        for (row, line) in image.chunks_mut(line_size).enumerate() {
            if !rows.contains(&row) || columns.is_empty() {
                continue;
            }
            upsampler.upsample_and_interleave_row(
                &data,
                row,
                width,
                line,
                color_convert_func,
                &mut line_buffers,
                columns.clone(),
            );
        }

        Ok(image)
    }
}

/// nereus: the columns to upsample and convert for a region's `columns` in a row of `width`, such
/// that each pixel of the region is converted by the same code as in a whole row: the SIMD colour
/// conversions (`arch`) take 8 pixels at a time from the start of the slice they are given and leave
/// the rest, up to 15 pixels, to the scalar code, whose rounding differs by a level. Starting on a
/// multiple of 8 keeps the chunks where a whole row has them, and ending 16 pixels past the region
/// (or at the row's end) keeps the region's pixels in them.
fn simd_aligned(columns: &core::ops::Range<usize>, width: usize) -> core::ops::Range<usize> {
    let start = columns.start.min(width) / 8 * 8;
    let end = (columns.end + 7) / 8 * 8 + 16;
    start..if end + 16 >= width { width } else { end }
}
