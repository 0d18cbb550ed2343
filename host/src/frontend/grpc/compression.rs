//! Message compression on the gRPC endpoint, as tritonserver's gRPC core does it: compressed
//! requests (gzip or deflate) are always accepted, and `--grpc-infer-response-compression-level`
//! decides whether inference responses are compressed (with an encoding the client lists in its
//! `grpc-accept-encoding`).
use std::task::{Context, Poll};

use hyper::http::Request;
use tonic::codec::CompressionEncoding;

/// `--grpc-infer-response-compression-level`: tritonserver's four levels, `none` by default.
///
/// tonic compresses at one fixed level, so `low`, `medium` and `high` all mean "compress"; the
/// flag takes all four so that launch scripts written for tritonserver start unchanged. Only
/// inference responses are compressed ([`InferOnly`]), as in tritonserver.
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

/// The calls whose responses tritonserver compresses (its infer handlers set the level; the
/// others keep gRPC's default, none).
const COMPRESSED_CALLS: &[&str] =
    &["/inference.GRPCInferenceService/ModelInfer", "/inference.GRPCInferenceService/ModelStreamInfer"];

/// Keeps responses other than inference ones uncompressed. tonic enables response compression per
/// service, not per call, and picks the encoding from the request's `grpc-accept-encoding`: a call
/// of another RPC has that header removed before tonic reads it, so it is answered uncompressed.
#[derive(Clone)]
pub struct InferOnly<S>(pub S);

impl<S, B> tower_service::Service<Request<B>> for InferOnly<S>
where
    S: tower_service::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if !COMPRESSED_CALLS.contains(&request.uri().path()) {
            request.headers_mut().remove("grpc-accept-encoding");
        }
        self.0.call(request)
    }
}

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
