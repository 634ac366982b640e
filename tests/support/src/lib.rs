//! # What the host's integration tests share
//!
//! Test-only. The policy components, the checked-in CRDs, identities with
//! exactly the permissions of `deploy/rbac/`, a JSON Schema checker and, in
//! [`controller`], the controller process and the objects its tests make.
//! Paths of the repository are found from this crate's own directory, and
//! the `wasmgpu` binary and the tests' scratch directory from the running
//! test binary, so every test target of `host/` uses it as a dependency.

pub mod controller;
pub mod json_schema;
pub mod rbac;

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The target directory's profile directory the running test binary is in
/// (a test binary lives in `<target>/<profile>/deps/`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("a test binary in <target>/<profile>/deps")
        .to_path_buf()
}

/// The `wasmgpu` binary cargo built with the running tests.
pub fn wasmgpu_bin() -> PathBuf {
    profile_dir().join(format!("wasmgpu{}", std::env::consts::EXE_SUFFIX))
}

/// A scratch directory for the tests' files (cargo's `CARGO_TARGET_TMPDIR`,
/// `<target>/tmp`).
pub fn scratch_dir() -> PathBuf {
    let dir = profile_dir()
        .parent()
        .expect("a profile directory in <target>")
        .join("tmp");
    std::fs::create_dir_all(&dir).expect("creating <target>/tmp");
    dir
}

/// Where `make policies` puts the compiled policy components.
pub fn policy_dir() -> PathBuf {
    match std::env::var_os("WASMGPU_POLICY_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => repo().join("target/wasm32-wasip2/policy"),
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
            let root = repo();
            let root = root.as_path();
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
