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

    /// The coding for a response to a request with this `Accept-Encoding`, chosen as tritonserver
    /// chooses: the highest weight among `identity`, `gzip` and `deflate` (the first listed on a tie;
    /// `q=0` never chosen); `None` means identity.
    pub fn from_accept_encoding(value: &str) -> Option<Self> {
        let mut best: (Option<Self>, f64) = (None, 0.0);
        for part in value.split(',') {
            let mut it = part.split(';');
            let coding = it.next().unwrap_or_default().trim().to_ascii_lowercase();
            let mut weight = 1.0;
            for p in it {
                if let Some(q) = p.trim().strip_prefix("q=") {
                    weight = q.trim().parse::<f64>().ok().filter(|w| w.is_finite()).unwrap_or(0.0);
                }
            }
            let encoding = match coding.as_str() {
                "identity" => None,
                "gzip" => Some(Encoding::Gzip),
                "deflate" => Some(Encoding::Deflate),
                _ => continue,
            };
            if weight > best.1 {
                best = (encoding, weight);
            }
        }
        best.0
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
        return Err(InferError::invalid(format!(
            "Decompressed data size exceeds the maximum allowed value of {limit} bytes. \
             Use --http-max-input-size to increase the limit."
        )));
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
        // tritonserver's choice: the highest weight, the first on a tie, identity competing too
        assert_eq!(Encoding::from_accept_encoding("gzip, deflate"), Some(Encoding::Gzip));
        assert_eq!(Encoding::from_accept_encoding("deflate;q=0.5, gzip"), Some(Encoding::Gzip));
        assert_eq!(Encoding::from_accept_encoding("gzip;q=0.2, deflate;q=0.9"), Some(Encoding::Deflate));
        assert_eq!(Encoding::from_accept_encoding("identity, gzip"), None);
        assert_eq!(Encoding::from_accept_encoding("gzip;q=0"), None);
        assert_eq!(Encoding::from_accept_encoding("gzip;q=nonsense"), None);
    }
}
