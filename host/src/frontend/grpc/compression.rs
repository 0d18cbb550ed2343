//! Message compression on the gRPC endpoint, as tritonserver's gRPC core does it: compressed
//! requests (gzip or deflate) are always accepted, and `--grpc-infer-response-compression-level`
//! decides whether responses are compressed (with an encoding the client lists in its
//! `grpc-accept-encoding`).
use tonic::codec::CompressionEncoding;

/// `--grpc-infer-response-compression-level`: tritonserver's four levels, `none` by default.
///
/// tonic compresses at one fixed level, so `low`, `medium` and `high` all mean "compress"; the
/// flag takes all four so that launch scripts written for tritonserver start unchanged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResponseCompression {
    #[default]
    None,
    Low,
    Medium,
    High,
}

impl ResponseCompression {
    /// The flag's value, case-insensitive as tritonserver reads it; otherwise tritonserver's
    /// message (which names the flag with underscores, as it does).
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.to_ascii_lowercase().as_str() {
            "none" => Ok(Self::None),
            "low" => Ok(Self::Low),
            "medium" => Ok(Self::Medium),
            "high" => Ok(Self::High),
            _ => Err("invalid argument for --grpc_infer_response_compression_level".into()),
        }
    }

    /// The encodings responses may be compressed with; none at level `none`.
    pub fn response_encodings(self) -> &'static [CompressionEncoding] {
        match self {
            Self::None => &[],
            Self::Low | Self::Medium | Self::High => ACCEPTED,
        }
    }
}

/// What gRPC core accepts besides identity, and so what clients of tritonserver may send.
pub const ACCEPTED: &[CompressionEncoding] = &[CompressionEncoding::Gzip, CompressionEncoding::Deflate];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_as_tritonserver_reads_them() {
        assert_eq!(ResponseCompression::parse("HIGH"), Ok(ResponseCompression::High));
        assert_eq!(ResponseCompression::parse("none"), Ok(ResponseCompression::None));
        assert!(ResponseCompression::default().response_encodings().is_empty());
        assert_eq!(
            ResponseCompression::parse("max"),
            Err("invalid argument for --grpc_infer_response_compression_level".to_string())
        );
    }
}
