//! Finding the binaries built from the Kubernetes Go modules: the control
//! plane, kubectl and kube-scheduler.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Names the control-plane binary; `make` sets it.
pub const CONTROL_PLANE_ENV: &str = "WASMGPU_CONTROL_PLANE";
/// Names kubectl; by default the `kubectl` next to the control-plane binary.
pub const KUBECTL_ENV: &str = "WASMGPU_KUBECTL";
/// Names the end-to-end benchmark's binary (`tests/bench`), whose
/// `kube-scheduler` command is kube-scheduler; `make` sets it.
pub const KUBE_SCHEDULER_ENV: &str = "WASMGPU_BENCH_E2E";

/// The control-plane binary: `$WASMGPU_CONTROL_PLANE`, or else the cache
/// entry that `make control-plane` builds for the sources in this checkout.
pub fn control_plane_binary() -> Result<PathBuf> {
    built("control-plane", CONTROL_PLANE_ENV, "control-plane")
}

/// The binary whose first argument `kube-scheduler` runs kube-scheduler
/// (v1.37, from the same modules as the control plane; the one `make
/// bench-e2e` compares with): `$WASMGPU_BENCH_E2E`, or else the cache entry
/// that `make kube-scheduler` builds for the sources in this checkout.
pub fn kube_scheduler_binary() -> Result<PathBuf> {
    built("bench", KUBE_SCHEDULER_ENV, "kube-scheduler")
}

/// The binary `tests/<dir>/build.sh` builds: the path `env` names, or else
/// the cache entry the script names for these sources (`make <target>`
/// builds it).
fn built(dir: &str, env: &str, target: &str) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!(
                "{env}={} does not exist: run `make {target}` to build it",
                path.display()
            );
        }
        return Ok(path);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../{dir}/build.sh"));
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
            "tests/{dir} is not built for these sources (expected at {}): run \
             `make {target}` (a cold build takes several minutes), or set {env}",
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
