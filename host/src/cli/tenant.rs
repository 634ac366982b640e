//! `wasmgpu tenant migrate`: the tenants of a fairshare `config.json` as
//! GPUTenant objects.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use serde::Deserialize;

use wasmgpu_api::{GPUTenant, GPUTenantSpec};

/// Tenants as Kubernetes objects (GPUTenant).
#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Print the `tenants` of a fairshare config.json as GPUTenant YAML, to
    /// apply with `kubectl apply -f -`. Once any GPUTenant exists, fairshare
    /// ignores config.json's tenants: remove them from it after applying.
    /// Weights are kept in proportion as whole numbers (0.5 and 1 become 1
    /// and 2).
    Migrate {
        /// The fairshare config.json.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

/// The part of fairshare's config.json this reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Config {
    #[serde(default)]
    tenants: Vec<ConfigTenant>,
}

#[derive(Deserialize)]
struct ConfigTenant {
    name: String,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    quota: Option<u32>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default = "one")]
    weight: f64,
}

fn one() -> f64 {
    1.0
}

impl TenantCommand {
    /// Prints the objects, or says what stands in the way.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let TenantCommand::Migrate { file } = self;
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let tenants = migrate(&text).with_context(|| format!("{}", file.display()))?;
        if tenants.is_empty() {
            bail!(
                "{}: no `tenants` to migrate (an empty list, or none at all)",
                file.display()
            );
        }
        let documents: Vec<String> = tenants
            .iter()
            .map(|t| serde_norway::to_string(t).context("a GPUTenant serializes"))
            .collect::<anyhow::Result<_>>()?;
        super::stdout::print(&format!("---\n{}", documents.join("---\n")))?;
        Ok(ExitCode::SUCCESS)
    }
}

/// The GPUTenants of a config.json's `tenants`, in its order.
fn migrate(text: &str) -> anyhow::Result<Vec<GPUTenant>> {
    let config: Config = serde_json::from_str(text).context("not a fairshare config.json")?;
    let scale = weight_scale(&config.tenants)?;
    config
        .tenants
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if !is_dns_label(&t.name) {
                bail!(
                    "tenants[{i}].name {:?} cannot name a GPUTenant: use lower-case letters, digits and '-' (at most 63)",
                    t.name
                );
            }
            let namespaces = if t.namespaces.is_empty() {
                vec![t.name.clone()]
            } else {
                t.namespaces.clone()
            };
            let spec = GPUTenantSpec {
                namespaces,
                namespace_selector: None,
                quota: t.quota.unwrap_or(0),
                limit: t.limit,
                weight: (t.weight * scale).round() as u32,
                min_runtime_seconds: None,
            };
            spec.check()
                .map_err(|e| anyhow::anyhow!("tenants[{i}] ({}): {e}", t.name))?;
            let mut tenant = GPUTenant::new(&t.name, spec);
            tenant.metadata.labels = Some([("app.kubernetes.io/managed-by".to_owned(), "wasmgpu-tenant-migrate".to_owned())].into());
            Ok(tenant)
        })
        .collect()
}

/// The factor that makes every weight a whole number from 1 to 1000.
fn weight_scale(tenants: &[ConfigTenant]) -> anyhow::Result<f64> {
    for scale in [1.0, 2.0, 4.0, 5.0, 10.0, 20.0, 100.0, 1000.0] {
        let whole = tenants.iter().all(|t| {
            let w = t.weight * scale;
            (w - w.round()).abs() < 1e-9 && (1.0..=1000.0).contains(&w)
        });
        if whole {
            return Ok(scale);
        }
    }
    bail!(
        "the tenants' weights ({}) cannot be written as whole numbers from 1 to 1000 in the same proportions; round them in config.json first",
        tenants
            .iter()
            .map(|t| format!("{}: {}", t.name, t.weight))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A Kubernetes object name of one label.
fn is_dns_label(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name.chars().all(|c| alnum(c) || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_become_objects_with_whole_weights_in_proportion() {
        let tenants = migrate(
            r#"{"tenants": [
                {"name": "research", "namespaces": ["research", "research-*"], "quota": 8, "limit": 32, "weight": 0.5},
                {"name": "inference", "weight": 1}],
                "defaultWeight": 1}"#,
        )
        .unwrap();
        let research = &tenants[0];
        assert_eq!(research.metadata.name.as_deref(), Some("research"));
        assert_eq!(research.spec.namespaces, ["research", "research-*"]);
        assert_eq!(
            (
                research.spec.quota,
                research.spec.limit,
                research.spec.weight
            ),
            (8, Some(32), 1)
        );
        let inference = &tenants[1];
        assert_eq!(
            inference.spec.namespaces,
            ["inference"],
            "no namespaces: its name"
        );
        assert_eq!((inference.spec.quota, inference.spec.weight), (0, 2));
    }

    #[test]
    fn what_cannot_move_is_named() {
        let bad_name = migrate(r#"{"tenants": [{"name": "Team_A"}]}"#).unwrap_err();
        assert!(
            format!("{bad_name:#}").contains("tenants[0].name \"Team_A\""),
            "{bad_name:#}"
        );
        let bad_weight = migrate(r#"{"tenants": [{"name": "a", "weight": 0.3333}]}"#).unwrap_err();
        assert!(
            format!("{bad_weight:#}").contains("whole numbers"),
            "{bad_weight:#}"
        );
        let over = migrate(r#"{"tenants": [{"name": "a", "quota": 9, "limit": 8}]}"#).unwrap_err();
        assert!(format!("{over:#}").contains("above limit 8"), "{over:#}");
    }
}
