//! Triton's gRPC protocol from the server's own schema (host/proto), as prost types with `Bytes`
//! tensor buffers, and tonic's client and server.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = "../../host/proto";
    println!("cargo:rerun-if-changed={dir}/grpc_service.proto");
    println!("cargo:rerun-if-changed={dir}/model_config.proto");
    let fds = protox::compile(["grpc_service.proto"], [dir])?;
    // Unimplemented RPCs answer UNIMPLEMENTED (the ceiling serves inference and shared memory only).
    tonic_prost_build::configure().bytes(".").generate_default_stubs(true).compile_fds(fds)?;
    Ok(())
}
