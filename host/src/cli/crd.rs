//! `wasmgpu crd`: print or write the CRD YAML generated from the API types.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use wasmgpu_api as api;

/// Print the CRDs (GPUResource, GPUNode, GPUTenant) as one multi-document YAML stream.
#[derive(Debug, Args)]
pub struct CrdCommand {
    /// Write one file per CRD and a kustomization.yaml into DIR instead
    /// (e.g. `deploy/crds`).
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
}

impl CrdCommand {
    /// Prints the CRDs, or writes them under `--write DIR`.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.write {
            Some(dir) => {
                for path in api::write_dir(&dir)? {
                    super::stdout::println(&format!("wrote {}", path.display()))?;
                }
            }
            None => {
                let documents: Vec<String> = api::crds().iter().map(api::to_yaml).collect();
                super::stdout::print(&format!("---\n{}", documents.join("---\n")))?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
