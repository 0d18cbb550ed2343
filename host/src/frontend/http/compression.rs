//! gzip/deflate for request and response bodies (`Content-Encoding`, `Accept-Encoding`), as
//! tritonserver supports. Decompression is bounded so a small bomb cannot exhaust memory.
use std::io::{Read, Write};

use bytes::Bytes;
use flate2::Compression;
use flate2::read::{GzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};

use crate::error::InferError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Gzip,
    Deflate,
}

impl Encoding {
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Gzip => "gzip",
            Encoding::Deflate => "deflate",
        }
    }

    /// From a `Content-Encoding` value; `Ok(None)` for identity, `Err` for anything unsupported.
    pub fn from_content_encoding(value: &str) -> Result<Option<Self>, InferError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "identity" => Ok(None),
            "gzip" => Ok(Some(Encoding::Gzip)),
            "deflate" => Ok(Some(Encoding::Deflate)),
            // The client's fault, so a 4xx: 415 as HTTP prescribes for an unsupported content coding.
            other => Err(InferError::new(
                crate::error::ErrorKind::UnsupportedEncoding,
                format!("unsupported Content-Encoding '{other}'"),
            )),
        }
    }

    /// The first supported coding an `Accept-Encoding` header allows (q=0 excluded).
    pub fn from_accept_encoding(value: &str) -> Option<Self> {
        value.split(',').find_map(|part| {
            let mut it = part.split(';');
            let coding = it.next()?.trim().to_ascii_lowercase();
            let refused = it.any(|p| p.trim().replace(' ', "").starts_with("q=0") && !p.contains("q=0."));
            match (coding.as_str(), refused) {
                ("gzip", false) => Some(Encoding::Gzip),
                ("deflate", false) => Some(Encoding::Deflate),
                _ => None,
            }
        })
    }
}

/// Decompresses `body`, refusing output larger than `limit` bytes.
pub fn decompress(encoding: Encoding, body: &[u8], limit: usize) -> Result<Bytes, InferError> {
    let mut out = Vec::new();
    let reader: Box<dyn Read> = match encoding {
        Encoding::Gzip => Box::new(GzDecoder::new(body)),
        Encoding::Deflate => Box::new(ZlibDecoder::new(body)),
    };
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| InferError::invalid(format!("malformed {} request body: {e}", encoding.name())))?;
    if out.len() > limit {
        return Err(InferError::invalid(format!("decompressed request body exceeds the limit of {limit} bytes")));
    }
    Ok(out.into())
}

pub fn compress(encoding: Encoding, body: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(body.len() / 2 + 64);
    match encoding {
        Encoding::Gzip => {
            let mut e = GzEncoder::new(&mut out, Compression::fast());
            let _ = e.write_all(body);
            let _ = e.finish();
        }
        Encoding::Deflate => {
            let mut e = ZlibEncoder::new(&mut out, Compression::fast());
            let _ = e.write_all(body);
            let _ = e.finish();
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_limits() {
        for enc in [Encoding::Gzip, Encoding::Deflate] {
            let data = vec![7u8; 10_000];
            let packed = compress(enc, &data);
            assert_eq!(&decompress(enc, &packed, 10_000).unwrap()[..], &data[..]);
            assert!(decompress(enc, &packed, 9_999).is_err());
            assert!(decompress(enc, b"garbage", 100).is_err());
        }
        assert_eq!(Encoding::from_accept_encoding("br, gzip;q=1"), Some(Encoding::Gzip));
        assert_eq!(Encoding::from_accept_encoding("gzip;q=0, deflate"), Some(Encoding::Deflate));
        assert_eq!(Encoding::from_accept_encoding("br"), None);
    }
}
