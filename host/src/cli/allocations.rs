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
    GPUNode, GPURESOURCE_ANNOTATION, GPUResource, Nomination, PodAllocation, SCHEDULER_NAME,
    Sharing, conditions,
};

/// Show the pods wasmgpu placed (node, GPUs, the policy and digest that
/// decided, from each pod's `wasmgpu.io/allocation` annotation), the
/// preemptors holding nominated GPUs while their victims go (with the
/// victims), and the pods that wait, with the reason (from their
/// GPUResource's `Ready` condition).
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

/// The table for `namespace` (or all), from the cluster's objects.
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
    Ok(table(&unhealthy, &resources, &pods))
}

/// Unhealthy GPUs by (node, UUID), with the reason.
type Unhealthy = BTreeMap<(String, String), String>;

/// The table of `pods`, with their GPUResources and the unhealthy GPUs.
fn table(unhealthy: &Unhealthy, resources: &[GPUResource], pods: &[Pod]) -> String {
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
    for pod in pods {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let resource_name = pod
            .annotations()
            .get(GPURESOURCE_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        let resource = resource_by_key.get(&(namespace.clone(), resource_name.clone()));
        let claims = claims_of(pod);
        let shown = match (&resource_name, &claims) {
            (r, Some(claims)) if r.is_empty() => format!("claims: {claims}"),
            _ => resource_name.clone(),
        };
        let mut cells = vec![namespace, name, shown];
        let mut rest = row(pod, &resource_name, resource.copied(), unhealthy);
        if resource_name.is_empty() && claims.is_some() {
            dra_note(pod, &mut rest);
        }
        cells.extend(rest);
        table.row(cells);
    }
    table.render()
}

/// NODE, GPUS, POLICY and NOTE of `pod`, which names GPUResource
/// `resource_name` (`resource` when it exists).
fn row(
    pod: &Pod,
    resource_name: &str,
    resource: Option<&GPUResource>,
    unhealthy: &Unhealthy,
) -> Vec<String> {
    let name = pod.name_any();
    let uid = pod.uid().unwrap_or_default();
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
                    resource: resource_name.to_string(),
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
    if allocation.is_none()
        && !bound
        && !finished
        && let Some(nomination) = nominated(pod)
    {
        return nomination_row(&nomination);
    }
    match allocation {
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
                    if let Some(reason) = unhealthy.get(&(held.node.clone(), device.uuid.clone())) {
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
    }
}

/// The claims of a DRA pod (`spec.resourceClaims` entries), comma-separated.
fn claims_of(pod: &Pod) -> Option<String> {
    let claims = pod.spec.as_ref()?.resource_claims.as_ref()?;
    (!claims.is_empty()).then(|| {
        claims
            .iter()
            .map(|c| {
                c.resource_claim_name.clone().unwrap_or_else(|| {
                    format!(
                        "{} (template {})",
                        c.name,
                        c.resource_claim_template_name.as_deref().unwrap_or("-")
                    )
                })
            })
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// The NOTE of a DRA pod: its devices are its claims' (`status.allocation`).
fn dra_note(pod: &Pod, cells: &mut [String]) {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let Some(note) = cells.last_mut() else {
        return;
    };
    if note.starts_with("waiting") {
        *note = "waiting: see the pod's Events (UnusableClaim, Waiting)".into();
    } else if bound && note == "bound without an allocation" {
        *note = "DRA: devices of claims allocated before".into();
    } else if !note.contains(':') {
        note.push_str("; DRA: recorded in its claims' status.allocation");
    }
}

/// The nomination a preemptor carries (`wasmgpu.io/nomination`), when it
/// is readable and for this pod (same UID).
fn nominated(pod: &Pod) -> Option<Nomination> {
    let nomination = Nomination::from_annotations(pod.metadata.annotations.as_ref())?.ok()?;
    (Some(nomination.uid.as_str()) == pod.metadata.uid.as_deref()).then_some(nomination)
}

/// NODE, GPUS, POLICY and NOTE of a preemptor waiting for its victims.
fn nomination_row(nomination: &Nomination) -> Vec<String> {
    let allocation = &nomination.allocation;
    let victims: Vec<String> = nomination
        .victims
        .iter()
        .map(|v| format!("{}/{}", v.namespace, v.name))
        .collect();
    vec![
        allocation.node.clone(),
        allocation
            .devices
            .iter()
            .map(|d| d.index.to_string())
            .collect::<Vec<_>>()
            .join(","),
        format!(
            "{} {}",
            allocation.policy.name,
            short_digest(&allocation.policy.digest)
        ),
        format!(
            "nominated: these GPUs wait for it while its victims go ({})",
            victims.join(", ")
        ),
    ]
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
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>, phase: &str, allocation: Option<&PodAllocation>) -> Pod {
        let mut annotations =
            BTreeMap::from([(GPURESOURCE_ANNOTATION.to_string(), "r".to_string())]);
        if let Some(allocation) = allocation {
            annotations.extend(allocation.annotations());
        }
        serde_json::from_value(json!({
            "metadata": {"namespace": "ml", "name": name, "uid": format!("uid-{name}"), "annotations": annotations},
            "spec": {"schedulerName": "wasmgpu", "nodeName": node, "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn each_pod_shows_where_it_landed_or_why_it_waits() {
        let held = PodAllocation {
            resource: "r".into(),
            node: "n1".into(),
            sharing: Sharing::Exclusive,
            devices: vec![
                wasmgpu_api::Device {
                    uuid: "GPU-a".into(),
                    index: 0,
                    memory_mib: 81559,
                },
                wasmgpu_api::Device {
                    uuid: "GPU-b".into(),
                    index: 3,
                    memory_mib: 81559,
                },
            ],
            policy: wasmgpu_api::PolicyRef {
                name: "binpack".into(),
                digest: "sha256:0123456789abcdef0123".into(),
            },
        };
        let resource: GPUResource = serde_json::from_value(json!({
            "apiVersion": "wasmgpu.io/v1alpha1", "kind": "GPUResource",
            "metadata": {"namespace": "ml", "name": "r"},
            "spec": {"count": 2},
            "status": {"conditions": [{
                "type": "Ready", "status": "False", "reason": "Waiting",
                "message": "1 of 2 pod(s) hold GPUs", "lastTransitionTime": "2026-12-01T00:00:00Z",
            }]},
        }))
        .unwrap();
        let unhealthy = Unhealthy::from([(("n1".into(), "GPU-b".into()), "XID 79".into())]);
        let mut other = pod("lost", None, "Pending", None);
        other
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(GPURESOURCE_ANNOTATION.into(), "gone".into());
        let mut urgent = pod("urgent", None, "Pending", None);
        let (key, value) = Nomination {
            uid: "uid-urgent".into(),
            allocation: held.clone(),
            victims: vec![wasmgpu_api::Victim {
                namespace: "batch".into(),
                name: "low-0".into(),
                uid: "uid-low-0".into(),
            }],
            claims: Vec::new(),
        }
        .annotation();
        urgent
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(key, value);
        let pods = [
            pod("train", Some("n1"), "Running", Some(&held)),
            pod("done", Some("n1"), "Succeeded", Some(&held)),
            pod("wait", None, "Pending", None),
            other,
            urgent,
        ];
        let text = table(&unhealthy, &[resource], &pods);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        let urgent = lines.iter().find(|l| l.contains("urgent")).unwrap();
        assert!(
            urgent.contains("n1")
                && urgent.contains("0,3")
                && urgent.contains(
                    "nominated: these GPUs wait for it while its victims go (batch/low-0)"
                ),
            "{text}"
        );
        let line = |pod: &str| {
            *lines
                .iter()
                .find(|l| l.split_whitespace().nth(1) == Some(pod))
                .unwrap_or_else(|| panic!("{pod}: {text}"))
        };
        let train = line("train");
        assert!(
            train.contains("n1")
                && train.contains("0,3")
                && train.contains("binpack sha256:0123456789ab")
                && train.contains("exclusive; GPU 3 unhealthy: XID 79"),
            "{train}"
        );
        assert!(line("done").contains("Succeeded: GPUs released"), "{text}");
        assert!(
            line("wait").contains("waiting: 1 of 2 pod(s) hold GPUs"),
            "{text}"
        );
        assert!(
            line("lost").contains("waiting: GPUResource \"gone\" does not exist"),
            "{text}"
        );
    }

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
