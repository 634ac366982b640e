//! Finding the control-plane binary and kubectl.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Names the control-plane binary; `make` sets it.
pub const CONTROL_PLANE_ENV: &str = "WASMGPU_CONTROL_PLANE";
/// Names kubectl; by default the `kubectl` next to the control-plane binary.
pub const KUBECTL_ENV: &str = "WASMGPU_KUBECTL";

/// The script that builds the control plane and knows where its cache is.
fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../control-plane/build.sh")
}

/// The control-plane binary: `$WASMGPU_CONTROL_PLANE`, or else the cache
/// entry that `make control-plane` builds for the sources in this checkout.
pub fn control_plane_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(CONTROL_PLANE_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!(
                "{CONTROL_PLANE_ENV}={} does not exist: run `make control-plane` to build it",
                path.display()
            );
        }
        return Ok(path);
    }
    let script = build_script();
    let output = Command::new(&script)
        .arg("--path")
        .output()
        .with_context(|| format!("running {} --path", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} --path failed: {}",
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if !path.is_file() {
        bail!(
            "the control plane is not built for these sources (expected at {}): run \
             `make control-plane` (a cold build takes several minutes), or set {CONTROL_PLANE_ENV}",
            path.display()
        );
    }
    Ok(path)
}

/// kubectl built from the same Kubernetes modules: `$WASMGPU_KUBECTL`, or
/// else the `kubectl` link next to the control-plane binary.
pub fn kubectl_binary() -> Result<PathBuf> {
    let path = match std::env::var_os(KUBECTL_ENV).filter(|p| !p.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => control_plane_binary()?.with_file_name("kubectl"),
    };
    if !path.is_file() {
        bail!(
            "kubectl not found at {}: run `make kubectl` to build it, or set {KUBECTL_ENV}",
            path.display()
        );
    }
    Ok(path)
}
