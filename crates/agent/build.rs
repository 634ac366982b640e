//! Compiles the kubelet device plugin API (`proto/deviceplugin/v1beta1`)
//! with protox, so that no `protoc` binary is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/deviceplugin/v1beta1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let files = protox::compile([proto], ["proto/deviceplugin/v1beta1"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(files)?;
    Ok(())
}
