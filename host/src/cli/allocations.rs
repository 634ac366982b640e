//! `wasmgpu allocations`: where each pod landed and why, from the pods'
//! own allocations; and why the others wait.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::table::Table;
use wasmgpu_api::{
    GPUNode, GPURESOURCE_ANNOTATION, GPUResource, PodAllocation, SCHEDULER_NAME, Sharing,
    conditions,
};

/// Show the pods wasmgpu placed (node, GPUs, the policy and digest that
/// decided, from each pod's `wasmgpu.io/allocation` annotation) and the pods
/// that wait, with the reason (from their GPUResource's `Ready` condition).
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
        super::stdout::print(&text)?;
        Ok(ExitCode::SUCCESS)
    }
}

/// The table for `namespace` (or all).
pub async fn render(client: Client, namespace: Option<&str>) -> anyhow::Result<String> {
    // Unhealthy GPUs, to mark the pods that hold one (nothing to mark when
    // GPUNodes cannot be read).
    let unhealthy: BTreeMap<(String, String), String> = Api::<GPUNode>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|node| {
            let name = node.name_any();
            node.status
                .into_iter()
                .flat_map(|s| s.gpus)
                .filter(|gpu| !gpu.healthy)
                .map(move |gpu| {
                    (
                        (name.clone(), gpu.uuid),
                        gpu.unhealthy_reason.unwrap_or_else(|| "unhealthy".into()),
                    )
                })
        })
        .collect();
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
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let finished = matches!(phase.as_str(), "Succeeded" | "Failed");
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        // Pods bound by an earlier version hold through its ledger until
        // the controller moves the entry onto the pod.
        let ledger_entry = || {
            resource
                .and_then(|r| r.status.as_ref())
                .and_then(|s| {
                    s.allocations
                        .iter()
                        .find(|a| a.pod == name && a.pod_uid == uid)
                })
                .map(|a| {
                    Ok(PodAllocation {
                        resource: resource_name.clone(),
                        node: a.node.clone(),
                        sharing: a.sharing,
                        devices: a.devices.clone(),
                        policy: a.policy.clone(),
                    })
                })
        };
        let allocation = PodAllocation::from_annotations(pod.metadata.annotations.as_ref())
            .filter(|_| bound)
            .or_else(ledger_entry);
        let row = match allocation {
            _ if finished => vec![
                "-".into(),
                "-".into(),
                "-".into(),
                format!("{phase}: GPUs released"),
            ],
            Some(Ok(held)) => vec![
                held.node.clone(),
                held.devices
                    .iter()
                    .map(|d| d.index.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                format!("{} {}", held.policy.name, short_digest(&held.policy.digest)),
                {
                    let mut note = match held.sharing {
                        Sharing::Exclusive => "exclusive".to_string(),
                        Sharing::Shared => format!(
                            "shared, {} MiB each",
                            held.devices.first().map(|d| d.memory_mib).unwrap_or(0)
                        ),
                    };
                    for device in &held.devices {
                        if let Some(reason) =
                            unhealthy.get(&(held.node.clone(), device.uuid.clone()))
                        {
                            note.push_str(&format!("; GPU {} unhealthy: {reason}", device.index));
                        }
                    }
                    note
                },
            ],
            Some(Err(error)) => vec!["-".into(), "-".into(), "-".into(), error.to_string()],
            None if bound => vec![
                "-".into(),
                "-".into(),
                "-".into(),
                "bound without an allocation".into(),
            ],
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

/// `sha256:` and the first 12 hex digits (whatever the digest holds).
fn short_digest(digest: &str) -> &str {
    match digest.char_indices().nth(19) {
        Some((end, _)) => &digest[..end],
        None => digest,
    }
}

#[cfg(test)]
mod tests {
    use super::short_digest;

    #[test]
    fn short_digest_never_splits_a_character() {
        assert_eq!(
            short_digest("sha256:0123456789abcdef"),
            "sha256:0123456789ab"
        );
        assert_eq!(short_digest("sha256:01"), "sha256:01");
        assert_eq!(short_digest("ééééééééééééééééééééé"), "ééééééééééééééééééé");
        assert_eq!(short_digest(""), "");
    }
}
