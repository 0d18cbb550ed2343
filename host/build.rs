//! Compiles Nereus' protobuf schemas (model configuration, Triton's gRPC protocol, gRPC health) with
//! protox (no `protoc` needed) into prost types and tonic services, and keeps the descriptor set so
//! the text-format parser and the JSON renderer can walk the schema by name. Also OpenTelemetry's
//! OTLP trace messages (`proto/opentelemetry`, the official definitions), for the trace exporter:
//! messages only, it speaks OTLP over HTTP.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/model_config.proto", "proto/grpc_service.proto", "proto/health.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("descriptors.bin"), prost::Message::encode_to_vec(&fds))?;
    tonic_prost_build::configure()
        // Tensor buffers (raw_input_contents, raw_output_contents) as `Bytes`: sliced, not copied.
        .bytes(".")
        .compile_fds(fds)?;
    let otlp = ["proto/opentelemetry/proto/collector/trace/v1/trace_service.proto"];
    println!("cargo:rerun-if-changed=proto/opentelemetry");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_fds(protox::compile(otlp, ["proto"])?)?;
    Ok(())
}
