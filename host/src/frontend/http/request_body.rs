//! Reading a request body whole, within the two bounds tritonserver puts on it: its size
//! (`--http-max-input-size`) and, for a chunked body, the number of its chunks. A body of a
//! million one-byte chunks is small, but each chunk costs a buffer of its own until the body is
//! joined; tritonserver refuses more than [`MAX_CHUNKS`] of them, and so does Nereus.
use bytes::{Bytes, BytesMut};
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

/// Reads `body` whole: at most `limit` bytes and, when `chunked`, at most [`MAX_CHUNKS`]
/// non-empty data frames (hyper hands a chunked body over a chunk at a time, or a chunk in
/// pieces when it spans reads, so a body within the cap in chunks may count a few more frames
/// only when its chunks are larger than a read). A body of one frame is returned without a copy;
/// one of several is joined into a buffer sized once from its `Content-Length` (within `limit`):
/// grown by doubling, a 64 MiB body was copied about twice over. In a joined body the byte at
/// `align_at` (where the binary tensors start, after the JSON header) lies on a 64-byte boundary, so
/// that a backend can read the tensors where they are (ONNX Runtime needs its elements aligned).
pub async fn collect(mut body: Incoming, limit: usize, chunked: bool, align_at: usize) -> Result<Bytes, BodyError> {
    use bytes::{Buf, BufMut};
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
                let mut buffer = BytesMut::with_capacity(pad + (earlier.len() + data.len()).max(announced));
                buffer.put_bytes(0, pad);
                crate::bulk_copy::extend(&mut buffer, &earlier, stream);
                crate::bulk_copy::extend(&mut buffer, &data, stream);
                joined = Some(buffer);
            }
        }
    }
    Ok(match joined {
        Some(mut buffer) => {
            buffer.advance(pad);
            buffer.freeze()
        }
        None => first.unwrap_or_default(),
    })
}
