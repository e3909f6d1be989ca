//! Compiles `proto/*.proto` with `protox` (a pure-Rust protobuf compiler, so no
//! system `protoc` is needed) and generates prost messages plus tonic clients
//! and servers. `bytes` fields become `bytes::Bytes` for zero-copy reads.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/datanode.proto",
        "proto/om.proto",
        "proto/admin.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    Ok(())
}
