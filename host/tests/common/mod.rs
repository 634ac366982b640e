//! Shared helpers for the host's integration tests.
#![allow(dead_code)]

pub mod json_schema;
pub mod rbac;

use std::path::PathBuf;

/// Where `make policies` puts the compiled policy components.
pub fn policy_dir() -> PathBuf {
    match std::env::var_os("WASMGPU_POLICY_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasm32-wasip2/policy"),
    }
}

/// The bytes of a compiled policy, e.g. `policy_bytes("binpack")`.
pub fn policy_bytes(name: &str) -> Vec<u8> {
    let file = format!("wasmgpu_{}.wasm", name.replace('-', "_"));
    let path = policy_dir().join(&file);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}): build the policies first with `make policies`",
            path.display()
        )
    })
}

/// Installs the checked-in CRDs (`deploy/crds`) once per test process, as an
/// operator would, and waits until the API server serves them.
pub async fn install_crds(ctx: &wasmgpu_test_harness::TestContext) -> anyhow::Result<()> {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_try_init(|| async {
            let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
            let cluster = ctx.cluster();
            cluster
                .run_kubectl(root, &["apply", "--server-side", "-k", "deploy/crds"])
                .await?;
            cluster
                .run_kubectl(
                    root,
                    &[
                        "wait",
                        "--for=condition=Established",
                        "--timeout=60s",
                        "crd/gpuresources.wasmgpu.io",
                        "crd/gpunodes.wasmgpu.io",
                    ],
                )
                .await?;
            anyhow::Ok(())
        })
        .await?;
    Ok(())
}

/// `wasm` with a custom section of `pad` zero bytes appended: the same
/// component, loading and deciding as before, `pad` bytes bigger (over
/// 900 KiB `publish` gzips it; components of other languages are
/// megabytes).
pub fn padded(wasm: &[u8], pad: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"wasmgpu-test-padding";
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.resize(body.len() + pad, 0);
    let mut out = wasm.to_vec();
    out.push(0); // custom section
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}
