//! `wasmgpu policy push`: a component to an OCI registry, as a Wasm OCI
//! artifact; prints the digest reference a policy ConfigMap names.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use wasmgpu_engine::Limits;
use wasmgpu_oci::{self as oci, Access, ComponentRef};

/// How to reach a registry.
#[derive(Debug, Args)]
pub(crate) struct RegistryArgs {
    /// User for the registry's basic authentication.
    #[arg(long, value_name = "USER", env = "WASMGPU_REGISTRY_USERNAME")]
    username: Option<String>,
    /// Password (or token) for --username; prefer the environment variable.
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "WASMGPU_REGISTRY_PASSWORD",
        hide_env_values = true
    )]
    password: Option<String>,
    /// A PEM bundle of CAs to trust for the registry, besides the system's
    /// (a registry with a private CA). Repeat for several.
    #[arg(long = "ca", value_name = "FILE")]
    cas: Vec<PathBuf>,
    /// Plain HTTP instead of HTTPS (a local registry without TLS).
    #[arg(long)]
    insecure: bool,
}

impl RegistryArgs {
    fn access(&self) -> anyhow::Result<Access> {
        let credentials = match (&self.username, &self.password) {
            (Some(user), Some(password)) => Some((user.clone(), password.clone())),
            (Some(_), None) => anyhow::bail!(
                "--username needs a password: set WASMGPU_REGISTRY_PASSWORD (or --password)"
            ),
            (None, Some(_)) => anyhow::bail!("a password without --username"),
            (None, None) => None,
        };
        let mut ca_pem = Vec::new();
        for path in &self.cas {
            let pem = std::fs::read(path)
                .with_context(|| format!("--ca {}: cannot read it", path.display()))?;
            oci::check_pem(&pem, &format!("--ca {}", path.display()))?;
            ca_pem.push(pem);
        }
        Ok(Access {
            credentials,
            ca_pem,
            plain_http: self.insecure,
            timeout: None,
        })
    }
}

/// `wasmgpu policy push FILE oci://REGISTRY/REPOSITORY:TAG`.
pub(crate) fn push(file: &Path, target: &str, registry: &RegistryArgs) -> anyhow::Result<ExitCode> {
    let target = ComponentRef::parse_tagged(target)?;
    let wasm = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    // What the controller would refuse is not worth publishing.
    let engine = super::engine::cli_engine(Limits::default())?;
    let policy = engine
        .load(&wasm)
        .with_context(|| format!("{} is not a usable policy", file.display()))?;
    let access = registry.access()?;
    let pinned = tokio::runtime::Runtime::new()
        .context("cannot start the async runtime")?
        .block_on(oci::push(&wasm, &target, &access))?;
    let info = policy.info();
    super::stdout::println(&pinned.to_string())?;
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "pushed {} {} ({} bytes, component {}) to {target}; name it in a policy ConfigMap's data \"component.ref\"",
        info.name,
        info.version,
        wasm.len(),
        policy.digest()
    );
    Ok(ExitCode::SUCCESS)
}
