//! Reading a request body whole, within the two bounds tritonserver puts on it: its size
//! (`--http-max-input-size`) and, for a chunked body, the number of its chunks. A body of a
//! million one-byte chunks is small, but each chunk costs a buffer of its own until the body is
//! joined; tritonserver refuses more than [`MAX_CHUNKS`] of them, and so does Nereus.
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// tritonserver's `kMaxChunkedChunks` (http_server.cc).
pub const MAX_CHUNKS: usize = 65536;

/// Why a body was not read.
#[derive(Debug)]
pub enum BodyError {
    /// Longer than the limit (the length read so far is not the body's).
    TooBig,
    /// More than [`MAX_CHUNKS`] non-empty chunks.
    TooManyChunks,
    /// The connection failed while the body was read.
    Read(hyper::Error),
}

impl BodyError {
    /// tritonserver's message for [`BodyError::TooManyChunks`].
    pub fn too_many_chunks_message() -> String {
        format!(
            "Chunked request body exceeds maximum of {MAX_CHUNKS} non-empty chunks. Send fewer or larger HTTP chunks."
        )
    }
}

/// The largest body copied out of hyper's read buffer (see [`collect`]): the size of hyper's first
/// read buffer (`INIT_BUFFER_SIZE` in hyper's `proto::h1::io`).
const SMALL_BODY: usize = 8 * 1024;

/// Reads `body` whole: at most `limit` bytes and, when `chunked`, at most [`MAX_CHUNKS`]
/// non-empty data frames (hyper hands a chunked body over a chunk at a time, or a chunk in
/// pieces when it spans reads, so a body within the cap in chunks may count a few more frames
/// only when its chunks are larger than a read). A larger body of one frame is returned without
/// a copy; one of several is joined into a buffer sized once from its `Content-Length` (within
/// `limit`): grown by doubling, a 64 MiB body was copied about twice over. In a joined body the
/// byte at `align_at` (where the binary tensors start, after the JSON header) lies on a 64-byte
/// boundary, so that a backend can read the tensors where they are (ONNX Runtime needs its
/// elements aligned).
///
/// A body of one frame up to [`SMALL_BODY`] bytes is copied (with the same padding). The frame
/// is a slice of hyper's read buffer, which hyper replaces (8 KiB) when it reads ahead for the
/// next request while this one's head and body still refer to it; the old buffer is freed by
/// whichever thread lets go of it last. A request run on another thread (the thread holding the
/// model's one instance, or its worker) freed it there, into the reading thread's malloc arena.
/// With the body copied and the head dropped before the request waits (`router::infer`), the I/O
/// thread that read the buffer frees it (bench/README.md: server CPU a request 5% lower at 256
/// connections).
pub async fn collect(mut body: Incoming, limit: usize, chunked: bool, align_at: usize) -> Result<Bytes, BodyError> {
    use hyper::body::Body as _;
    let announced = body.size_hint().exact().map_or(0, |n| n.min(limit as u64) as usize);
    // Bytes before the body in its buffer; dropped once it is whole.
    let pad = (64 - align_at % 64) % 64;
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    // A body of megabytes is joined with streaming stores (`bulk_copy`): it does not fit the caches.
    let stream = crate::bulk_copy::should_stream(announced);
    let (mut size, mut chunks) = (0usize, 0usize);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else { continue };
        if data.is_empty() {
            continue;
        }
        chunks += 1;
        if chunked && chunks > MAX_CHUNKS {
            return Err(BodyError::TooManyChunks);
        }
        size = size.checked_add(data.len()).filter(|s| *s <= limit).ok_or(BodyError::TooBig)?;
        match (&mut joined, first.take()) {
            (Some(buffer), _) => crate::bulk_copy::extend(buffer, &data, stream),
            (None, None) => first = Some(data),
            (None, Some(earlier)) => {
                let mut buffer = padded(pad, (earlier.len() + data.len()).max(announced));
                crate::bulk_copy::extend(&mut buffer, &earlier, stream);
                crate::bulk_copy::extend(&mut buffer, &data, stream);
                joined = Some(buffer);
            }
        }
    }
    Ok(match (joined, first) {
        (Some(buffer), _) => unpadded(buffer, pad),
        (None, Some(only)) => detach_small(only, pad),
        (None, None) => Bytes::new(),
    })
}

/// An empty buffer for a body of `capacity` bytes behind `pad` bytes of padding.
fn padded(pad: usize, capacity: usize) -> BytesMut {
    let mut buffer = BytesMut::with_capacity(pad + capacity);
    buffer.put_bytes(0, pad);
    buffer
}

/// The body in a [`padded`] buffer, its padding dropped.
fn unpadded(mut buffer: BytesMut, pad: usize) -> Bytes {
    buffer.advance(pad);
    buffer.freeze()
}

/// A body of one frame as [`collect`] returns it: up to [`SMALL_BODY`] bytes a copy of its own
/// (`pad` bytes ahead of it in its allocation, as a joined body has them), the frame itself when
/// larger.
fn detach_small(frame: Bytes, pad: usize) -> Bytes {
    if frame.len() > SMALL_BODY {
        return frame;
    }
    let mut buffer = padded(pad, frame.len());
    buffer.extend_from_slice(&frame);
    unpadded(buffer, pad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_body_is_copied_out_of_the_read_buffer_and_a_large_one_is_not() {
        // A stand-in for hyper's read buffer: the body is a slice of a larger allocation.
        let read_buffer = Bytes::from((0..3 * SMALL_BODY).map(|i| i as u8).collect::<Vec<_>>());
        let large = read_buffer.slice(0..SMALL_BODY + 1);
        let kept = detach_small(large.clone(), 20);
        assert_eq!(kept.as_ptr(), large.as_ptr(), "a large body is handed on as it is");

        let small = read_buffer.slice(100..100 + 300);
        let copied = detach_small(small.clone(), 20);
        assert_eq!(copied, small);
        assert!(
            !read_buffer.as_ptr_range().contains(&copied.as_ptr()),
            "the small body still points into the read buffer"
        );
        // With every slice of the read buffer gone, the copy is all that is left, intact.
        drop((read_buffer, large, kept, small));
        assert_eq!(copied.len(), 300);
        assert!(copied.iter().enumerate().all(|(i, b)| *b == (100 + i) as u8));
    }
}
