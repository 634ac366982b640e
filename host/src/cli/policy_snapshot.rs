//! `wasmgpu policy snapshot`: the snapshot the controller would hand a
//! policy in its next round, from a live cluster.
//!
//! ```text
//!  list Node, GPUNode, GPUResource, Pod (schedulerName=wasmgpu), GPUTenant,
//!       PodGroup, PodDisruptionBudget, ResourceSlice, ResourceClaim,
//!       DeviceClass, DeviceTaintRule (those the server serves) ─────▶ Index::reset_*
//!  get the policy ConfigMap (config.json)                             │
//!                                                 Index::snapshot(policy) ──▶ FILE
//! ```
//!
//! The same objects the controller watches, fed to the controller's own
//! index and snapshot builder: not a re-implementation.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use kube::api::ListParams;
use kube::{Api, Client};
use serde::de::DeserializeOwned;

use super::kube_client::{block_on, client};
use super::stdout;
use wasmgpu_api::policy::CONFIG_KEY;
use wasmgpu_api::{GPUNode, GPUResource, GPUTenant, PodGroup, SCHEDULER_NAME};
use wasmgpu_contract::HostSnapshot;
use wasmgpu_index::Index;

/// `wasmgpu policy snapshot --recorded URL`: a round the controller at
/// `url` recorded for `policy` (the latest, or `round`), or the list.
pub(crate) fn recorded(
    url: &str,
    policy: &str,
    round: Option<u64>,
    list: bool,
    file: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let base = url.trim_end_matches('/');
    // reqwest is built without a crypto provider of its own: use ring, as
    // the Kubernetes client does (a second install is a no-op).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let get = |path: String| {
        block_on(async move {
            let response = reqwest::get(&path)
                .await
                .with_context(|| format!("cannot reach the controller at {path}"))?;
            let status = response.status();
            let body = response.text().await?;
            anyhow::ensure!(status.is_success(), "{path}: {status}: {}", body.trim());
            Ok(body)
        })
    };
    if list {
        let all: std::collections::BTreeMap<String, Vec<serde_json::Value>> =
            serde_json::from_str(&get(format!("{base}/debug/rounds"))?)
                .context("the controller's /debug/rounds is not a list of rounds")?;
        let Some(rounds) = all.get(policy) else {
            anyhow::bail!(
                "the controller records no rounds of policy {policy} (recorded: {}); annotate its \
                 ConfigMap with {}: \"N\"",
                all.keys().cloned().collect::<Vec<_>>().join(", "),
                wasmgpu_api::policy::RECORD_ROUNDS_ANNOTATION
            );
        };
        let mut table =
            super::table::Table::new(&["ROUND", "RECORDED", "PENDING", "NODES", "BYTES"]);
        for r in rounds {
            let field = |k: &str| r[k].to_string().trim_matches('"').to_string();
            table.row(vec![
                field("round"),
                field("at"),
                field("pending"),
                field("nodes"),
                field("bytes"),
            ]);
        }
        stdout::print(&table.render())?;
        return Ok(ExitCode::SUCCESS);
    }
    let path = match round {
        Some(round) => format!("{base}/debug/rounds/{policy}/{round}"),
        None => format!("{base}/debug/rounds/{policy}"),
    };
    let json = get(path)?;
    wasmgpu_contract::snapshot_file::check(&json)?;
    match file {
        Some(path) => {
            std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "wrote {}: a round of policy {policy} the controller recorded",
                path.display()
            );
        }
        None => stdout::println(&json)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// What the cluster holds that a round depends on.
struct Objects {
    nodes: Vec<Node>,
    gpunodes: Vec<GPUNode>,
    resources: Vec<GPUResource>,
    pods: Vec<Pod>,
    tenants: Vec<GPUTenant>,
    groups: Vec<PodGroup>,
    budgets: Vec<PodDisruptionBudget>,
    slices: Vec<ResourceSlice>,
    claims: Vec<ResourceClaim>,
    classes: Vec<DeviceClass>,
    taint_rules: Vec<DeviceTaintRule>,
    policy: Option<ConfigMap>,
}

/// `wasmgpu policy snapshot`.
pub(crate) fn export(
    policy: &str,
    namespace: &str,
    default_policy: &str,
    file: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let objects = block_on(async { list(client().await?, policy, namespace).await })?;
    let mut notes = Vec::new();
    if objects.policy.is_none() {
        notes.push(format!(
            "no policy ConfigMap {namespace}/{policy}: config is empty (a policy loaded from \
             a file takes its config from the controller's --policy-config)"
        ));
    }
    let host = build(&objects, policy, default_policy);
    let snapshot = &host.snapshot;
    if snapshot.pending.is_empty() {
        notes.push(format!(
            "no pod waits for policy {policy} now: the snapshot has no pending requests"
        ));
    }
    let summary = format!(
        "{} pending pod(s), {} node(s), {} GPU(s)",
        snapshot.pending.len(),
        snapshot.nodes.len(),
        snapshot.nodes.iter().map(|n| n.gpus.len()).sum::<usize>()
    );
    let json = wasmgpu_contract::snapshot_file::to_json(&host)?;
    match file {
        Some(path) => {
            std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
            notes.insert(
                0,
                format!("wrote {}: policy {policy}, {summary}", path.display()),
            );
        }
        None => stdout::println(&json)?,
    }
    for note in notes {
        eprintln!("{note}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The snapshot the controller's index builds from `objects` for `policy`
/// (round 0: no round of the controller's), with the ConfigMap's config.
fn build(objects: &Objects, policy: &str, default_policy: &str) -> HostSnapshot {
    let mut index = Index::new(default_policy);
    index.reset_nodes(&objects.nodes);
    index.reset_gpunodes(&objects.gpunodes);
    index.reset_gpuresources(&objects.resources);
    index.reset_gputenants(&objects.tenants);
    index.reset_podgroups(&objects.groups);
    index.reset_budgets(&objects.budgets);
    index.reset_resourceslices(&objects.slices);
    index.reset_resourceclaims(&objects.claims);
    index.reset_deviceclasses(&objects.classes);
    index.reset_devicetaintrules(&objects.taint_rules);
    index.reset_pods(&objects.pods);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut snapshot = index.snapshot(policy, 0, now_ms);
    snapshot.snapshot.config = objects
        .policy
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .and_then(|d| d.get(CONFIG_KEY))
        .cloned()
        .unwrap_or_default();
    snapshot
}

/// Lists what the controller watches, as it lists it.
async fn list(client: Client, policy: &str, namespace: &str) -> anyhow::Result<Objects> {
    let pods = ListParams::default().fields(&format!("spec.schedulerName={SCHEDULER_NAME}"));
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let (nodes, gpunodes, resources, pods, policy) = tokio::try_join!(
        all::<Node>(&client, ListParams::default()),
        all::<GPUNode>(&client, ListParams::default()),
        all::<GPUResource>(&client, ListParams::default()),
        all::<Pod>(&client, pods),
        async {
            configmaps
                .get_opt(policy)
                .await
                .with_context(|| format!("reading ConfigMap {namespace}/{policy}"))
        },
    )?;
    let (tenants, groups, budgets, slices, claims, classes, taint_rules) = tokio::try_join!(
        served::<GPUTenant>(&client),
        served::<PodGroup>(&client),
        served::<PodDisruptionBudget>(&client),
        served::<ResourceSlice>(&client),
        served::<ResourceClaim>(&client),
        served::<DeviceClass>(&client),
        served::<DeviceTaintRule>(&client),
    )?;
    Ok(Objects {
        nodes,
        gpunodes,
        resources,
        pods,
        tenants,
        groups,
        budgets,
        slices,
        claims,
        classes,
        taint_rules,
        policy,
    })
}

/// Every object of kind `K`, or none when the server does not serve the
/// kind (an older cluster, a CRD not installed), as the controller reads
/// them only when served.
async fn served<K>(client: &Client) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    match Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(list.items),
        // A kind not served answers a bare `404 page not found`, not a
        // Status with reason NotFound.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(error) => Err(error).with_context(|| format!("listing {}s", K::kind(&()))),
    }
}

/// Every object of kind `K` in all namespaces.
async fn all<K>(client: &Client, params: ListParams) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let kind = K::kind(&());
    Api::<K>::all(client.clone())
        .list(&params)
        .await
        .map(|list| list.items)
        .with_context(|| match kind.as_ref() {
            "GPUNode" | "GPUResource" => format!(
                "listing {kind}s (are wasmgpu's CRDs installed? `kubectl apply --server-side -k deploy/`)"
            ),
            _ => format!("listing {kind}s"),
        })
}
