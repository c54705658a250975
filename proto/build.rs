//! Compiles `proto/` with protox (pure Rust), so building needs no `protoc` binary.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/drover/executor/v1/executor.proto"];
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    Ok(())
}
