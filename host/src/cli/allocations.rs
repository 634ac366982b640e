//! `wasmgpu allocations`: where each pod landed and why, from the ledgers;
//! and why the others wait.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::table::Table;
use crate::api::{GPURESOURCE_ANNOTATION, GPUResource, SCHEDULER_NAME, conditions};

/// Show the pods wasmgpu placed (node, GPUs, the policy and digest that
/// decided, from the GPUResource ledgers) and the pods that wait, with the
/// reason (from their GPUResource's `Ready` condition).
#[derive(Debug, Args)]
pub struct AllocationsCommand {
    /// Only this namespace (default: all namespaces).
    #[arg(long, short)]
    namespace: Option<String>,
}

impl AllocationsCommand {
    /// Prints the table.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
        let text = runtime.block_on(async {
            let client = Client::try_default()
                .await
                .context("cannot reach the Kubernetes API (set KUBECONFIG)")?;
            render(client, self.namespace.as_deref()).await
        })?;
        super::out::print(&text)?;
        Ok(ExitCode::SUCCESS)
    }
}

/// The table for `namespace` (or all).
pub async fn render(client: Client, namespace: Option<&str>) -> anyhow::Result<String> {
    let (resources, pods): (Api<GPUResource>, Api<Pod>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client, ns),
        ),
        None => (Api::all(client.clone()), Api::all(client)),
    };
    let resources = resources.list(&ListParams::default()).await?.items;
    let pods = pods
        .list(&ListParams::default().fields(&format!("spec.schedulerName={SCHEDULER_NAME}")))
        .await?
        .items;
    let key = |ns: Option<String>, name: String| (ns.unwrap_or_default(), name);
    let resource_by_key: BTreeMap<_, _> = resources
        .iter()
        .map(|r| (key(r.namespace(), r.name_any()), r))
        .collect();
    let mut table = Table::new(&[
        "NAMESPACE",
        "POD",
        "GPURESOURCE",
        "NODE",
        "GPUS",
        "POLICY",
        "NOTE",
    ]);
    for pod in &pods {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let uid = pod.uid().unwrap_or_default();
        let resource_name = pod
            .annotations()
            .get(GPURESOURCE_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        let resource = resource_by_key.get(&(namespace.clone(), resource_name.clone()));
        let entry = resource.and_then(|r| r.status.as_ref()).and_then(|s| {
            s.allocations
                .iter()
                .find(|a| a.pod == name && a.pod_uid == uid)
        });
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let row = match entry {
            Some(entry) => vec![
                entry.node.clone(),
                entry
                    .devices
                    .iter()
                    .map(|d| format!("{}", d.index))
                    .collect::<Vec<_>>()
                    .join(","),
                format!(
                    "{} {}",
                    entry.policy.name,
                    short_digest(&entry.policy.digest)
                ),
                match entry.sharing {
                    crate::api::Sharing::Exclusive => "exclusive".into(),
                    crate::api::Sharing::Shared => format!(
                        "shared, {} MiB each",
                        entry.devices.first().map(|d| d.memory_mib).unwrap_or(0)
                    ),
                },
            ],
            None if matches!(phase.as_str(), "Succeeded" | "Failed") => {
                vec![
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    format!("{phase}: GPUs released"),
                ]
            }
            None => {
                let why = match resource {
                    None => format!("waiting: GPUResource {resource_name:?} does not exist"),
                    Some(r) => r
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY))
                        .map(|c| format!("waiting: {}", c.message))
                        .unwrap_or_else(|| "waiting for the controller".into()),
                };
                vec!["-".into(), "-".into(), "-".into(), why]
            }
        };
        let mut cells = vec![namespace, name, resource_name];
        cells.extend(row);
        table.row(cells);
    }
    Ok(table.render())
}

/// `sha256:` and the first 12 hex digits.
fn short_digest(digest: &str) -> &str {
    &digest[..digest.len().min(19)]
}
