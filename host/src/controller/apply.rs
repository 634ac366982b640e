//! The applier: the only code that writes allocations to the API server.
//!
//! Every assignment is applied in an order that survives a crash at any
//! point:
//!
//! ```text
//!  1. GPUResource status ledger   (merge patch carrying metadata.resourceVersion:
//!                                  a concurrent change fails with 409, nothing lost)
//!  2. pod annotations             wasmgpu.io/devices, wasmgpu.io/node (UID-checked)
//!  3. pods/binding                the pod runs on the node
//! ```
//!
//! After (1) the GPUs are taken whatever happens next: a restarted
//! controller finds the entry, sees the pod unbound, and finishes (2) and
//! (3) ([`Applier::finish`]). Each write's result goes into the index at
//! once ([`Index::record_write`](crate::index::Index::record_write)), so the
//! next round never hands out a GPU the watch has not echoed back yet.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::events::{EventSink, gpuresource_ref, pod_ref};
use super::policies::ActivePolicy;
use super::watch::Shared;
use crate::api::{
    Allocation, DEVICES_ANNOTATION, Device, GPUResource, NODE_ANNOTATION, RELEASE_FINALIZER,
    Sharing,
};
use crate::engine::types::{Assignment, Sharing as WitSharing, Snapshot};
use crate::index::{ObjectKey, Release, ResourceView};

/// Pods annotated and bound at once.
const CONCURRENT_BINDINGS: usize = 16;
/// Field manager of the controller's writes.
pub const FIELD_MANAGER: &str = "wasmgpu-controller";

/// Writes allocations, releases and finalizers.
pub struct Applier {
    client: Client,
    shared: Arc<Shared>,
    events: EventSink,
    /// Pods this process bound, until the watch shows them bound: they are
    /// not bound again.
    recently_bound: Mutex<HashMap<ObjectKey, String>>,
}

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused or failed the request.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The pod is no longer the one the ledger entry is for.
    #[error("pod {0} was deleted or recreated")]
    PodGone(ObjectKey),
}

/// What [`Applier::assign`] did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Pods whose ledger entry was written (bound, or to be finished).
    pub recorded: usize,
    /// Pods bound.
    pub bound: usize,
}

// === impl Applier ===

impl Applier {
    /// An applier writing through `client`.
    pub fn new(client: Client, shared: Arc<Shared>, events: EventSink) -> Self {
        Self {
            client,
            shared,
            events,
            recently_bound: Mutex::new(HashMap::new()),
        }
    }

    /// Records `accepted` (all validated against `snapshot`, decided by
    /// `policy`) in the ledgers, then annotates and binds the pods.
    pub async fn assign(
        &self,
        policy: &ActivePolicy,
        snapshot: &Snapshot,
        accepted: Vec<Assignment>,
    ) -> Applied {
        let uuid_to_gpu: HashMap<&str, (u32, u64)> = snapshot
            .nodes
            .iter()
            .flat_map(|n| &n.gpus)
            .map(|g| (g.uuid.as_str(), (g.index, g.memory_mib)))
            .collect();
        let pod_to_request: HashMap<&str, _> = snapshot
            .pending
            .iter()
            .map(|r| (r.pod.as_str(), r))
            .collect();
        let mut resource_to_entries: BTreeMap<ObjectKey, Vec<(ObjectKey, Allocation)>> =
            BTreeMap::new();
        {
            let index = self.shared.index();
            for assignment in accepted {
                // Validated: the pod is pending in the snapshot, its GPUs
                // exist. A pod whose UID is gone since is skipped.
                let Some(request) = pod_to_request.get(assignment.pod.as_str()) else {
                    continue;
                };
                let (Some(pod), Some(resource)) = (
                    ObjectKey::parse(&request.pod),
                    ObjectKey::parse(&request.resource),
                ) else {
                    continue;
                };
                let Some(uid) = index.pod_uid(&pod) else {
                    continue;
                };
                let sharing = match request.sharing {
                    WitSharing::Exclusive => Sharing::Exclusive,
                    WitSharing::Shared => Sharing::Shared,
                };
                let devices = assignment
                    .gpus
                    .iter()
                    .map(|uuid| {
                        let (index, total_mib) =
                            uuid_to_gpu.get(uuid.as_str()).copied().unwrap_or_default();
                        Device {
                            uuid: uuid.clone(),
                            index,
                            memory_mib: match sharing {
                                Sharing::Exclusive => total_mib,
                                Sharing::Shared => request.memory_mib,
                            },
                        }
                    })
                    .collect();
                let allocation = Allocation {
                    pod: pod.name.clone(),
                    pod_uid: uid.to_string(),
                    node: assignment.node.clone(),
                    sharing,
                    devices,
                    policy: policy.reference(),
                };
                resource_to_entries
                    .entry(resource)
                    .or_default()
                    .push((pod, allocation));
            }
        }
        let mut applied = Applied::default();
        let mut to_place = Vec::new();
        for (resource, entries) in resource_to_entries {
            let Some(view) = self.shared.index().resource(&resource) else {
                continue;
            };
            let mut ledger = view.allocations.clone();
            ledger.extend(entries.iter().map(|(_, a)| a.clone()));
            match self.write_ledger(&view, ledger).await {
                Ok(()) => {
                    applied.recorded += entries.len();
                    to_place.extend(entries);
                }
                Err(error) => tracing::warn!(
                    %resource,
                    pods = entries.len(),
                    %error,
                    "Cannot record allocations; the pods wait for the next round"
                ),
            }
        }
        applied.bound = self.place_all(to_place).await;
        applied
    }

    /// Annotates and binds pods whose ledger entry exists but which are not
    /// bound (after a crash, or a failed binding).
    pub async fn finish(&self, holders: Vec<(ObjectKey, Allocation)>) -> usize {
        let holders: Vec<_> = {
            let index = self.shared.index();
            let mut recently_bound = self.recently_bound();
            // The watch has caught up with these: forget them.
            recently_bound.retain(|pod, _| index.pod_unplaced(pod));
            holders
                .into_iter()
                .filter(|(pod, allocation)| recently_bound.get(pod) != Some(&allocation.pod_uid))
                .collect()
        };
        if holders.is_empty() {
            return 0;
        }
        tracing::info!(
            pods = holders.len(),
            "Finishing allocations recorded but not bound"
        );
        self.place_all(holders).await
    }

    /// Removes stale ledger entries: their GPUs are free again.
    pub async fn release(&self, releases: Vec<Release>) {
        let mut resource_to_releases: BTreeMap<ObjectKey, Vec<Release>> = BTreeMap::new();
        for release in releases {
            resource_to_releases
                .entry(release.resource.clone())
                .or_default()
                .push(release);
        }
        for (resource, releases) in resource_to_releases {
            let Some(view) = self.shared.index().resource(&resource) else {
                continue;
            };
            let ledger: Vec<Allocation> = view
                .allocations
                .iter()
                .filter(|a| {
                    !releases
                        .iter()
                        .any(|r| r.pod == a.pod && r.pod_uid == a.pod_uid)
                })
                .cloned()
                .collect();
            match self.write_ledger(&view, ledger).await {
                Ok(()) => {
                    for release in &releases {
                        tracing::info!(%resource, pod = %release.pod, reason = %release.reason, "Released GPUs");
                    }
                }
                Err(error) => {
                    tracing::warn!(%resource, %error, "Cannot release GPUs; retrying next round")
                }
            }
        }
    }

    /// Puts the release finalizer on GPUResources that lack it, and lets
    /// deleted ones go once their ledger is released.
    pub async fn finalize(&self, views: &[ResourceView]) {
        for view in views {
            let ours = view.finalizers.iter().any(|f| f == RELEASE_FINALIZER);
            let result = match (view.deleting, ours) {
                (false, false) => {
                    let mut finalizers = view.finalizers.clone();
                    finalizers.push(RELEASE_FINALIZER.into());
                    self.write_finalizers(view, finalizers).await
                }
                (true, true) => self.release_deleted(view).await,
                _ => Ok(()),
            };
            if let Err(error) = result {
                tracing::warn!(resource = %view.key, %error, "Cannot update the finalizer; retrying next round");
            }
        }
    }

    async fn release_deleted(&self, view: &ResourceView) -> Result<(), ApplyError> {
        if !view.allocations.is_empty() {
            self.write_ledger(view, Vec::new()).await?;
            let reference = gpuresource_ref(&view.key, view.uid.as_deref());
            self.events.normal(
                reference,
                "Released",
                "Release",
                format!(
                    "GPUResource deleted: released the GPUs of {} pod(s): {}",
                    view.allocations.len(),
                    view.allocations
                        .iter()
                        .map(|a| a.pod.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        let Some(view) = self.shared.index().resource(&view.key) else {
            return Ok(());
        };
        let finalizers = view
            .finalizers
            .iter()
            .filter(|f| *f != RELEASE_FINALIZER)
            .cloned()
            .collect();
        self.write_finalizers(&view, finalizers).await
    }

    /// Replaces a GPUResource's ledger, if it is still at the version the
    /// index holds.
    async fn write_ledger(
        &self,
        view: &ResourceView,
        ledger: Vec<Allocation>,
    ) -> Result<(), ApplyError> {
        let patch = json!({
            "metadata": { "resourceVersion": view.resource_version },
            "status": { "allocations": ledger },
        });
        let api = self.gpuresources(&view.key);
        let result = api
            .patch_status(&view.key.name, &merge_params(), &Patch::Merge(&patch))
            .await;
        self.recorded(&view.key, result).await
    }

    async fn write_finalizers(
        &self,
        view: &ResourceView,
        finalizers: Vec<String>,
    ) -> Result<(), ApplyError> {
        let patch = json!({
            "metadata": {
                "resourceVersion": view.resource_version,
                "finalizers": finalizers,
            },
        });
        let api = self.gpuresources(&view.key);
        let result = api
            .patch(&view.key.name, &merge_params(), &Patch::Merge(&patch))
            .await;
        self.recorded(&view.key, result).await
    }

    /// Hands a write's outcome to the index. On failure the object is read
    /// again, so that the index holds what the server holds whatever became
    /// of the write (a timeout may still have applied it).
    pub async fn recorded(
        &self,
        key: &ObjectKey,
        result: Result<GPUResource, kube::Error>,
    ) -> Result<(), ApplyError> {
        match result {
            Ok(written) => {
                self.shared.index().record_write(&written);
                Ok(())
            }
            Err(error) => {
                match self.gpuresources(key).get_opt(&key.name).await {
                    Ok(Some(current)) => self.shared.index().record_write(&current),
                    Ok(None) => {}
                    Err(read_error) => {
                        tracing::warn!(resource = %key, %read_error, "Cannot read back after a failed write")
                    }
                }
                Err(error.into())
            }
        }
    }

    /// Annotates and binds `pods`, a few at a time; returns how many were
    /// bound.
    async fn place_all(&self, pods: Vec<(ObjectKey, Allocation)>) -> usize {
        futures::stream::iter(pods)
            .map(|(pod, allocation)| async move {
                match self.place(&pod, &allocation).await {
                    Ok(()) => true,
                    Err(error) => {
                        tracing::warn!(%pod, %error, "Cannot bind; retrying next round");
                        false
                    }
                }
            })
            .buffer_unordered(CONCURRENT_BINDINGS)
            .filter(|bound| futures::future::ready(*bound))
            .count()
            .await
    }

    /// Steps 2 and 3 for one pod.
    async fn place(&self, pod: &ObjectKey, allocation: &Allocation) -> Result<(), ApplyError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let devices = allocation
            .devices
            .iter()
            .map(|d| d.uuid.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let patch = json!({
            "metadata": {
                "uid": allocation.pod_uid,
                "annotations": {
                    DEVICES_ANNOTATION: devices,
                    NODE_ANNOTATION: allocation.node,
                },
            },
        });
        match pods
            .patch(&pod.name, &merge_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() || status.is_conflict() => {
                return Err(ApplyError::PodGone(pod.clone()));
            }
            Err(error) => return Err(error.into()),
        }
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                uid: Some(allocation.pod_uid.clone()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(allocation.node.clone()),
                ..Default::default()
            },
        };
        match pods
            .create_subresource::<Binding, serde_json::Value>(
                "binding",
                &pod.name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => {}
            // Bound already (by this controller before a crash): done.
            Err(kube::Error::Api(status))
                if status.is_conflict() && status.message.contains("already assigned") => {}
            Err(error) => return Err(error.into()),
        }
        self.recently_bound()
            .insert(pod.clone(), allocation.pod_uid.clone());
        tracing::info!(%pod, node = %allocation.node, %devices, policy = %allocation.policy.name, "Bound");
        self.events.normal(
            pod_ref(pod, Some(&allocation.pod_uid)),
            "Allocated",
            "Bind",
            format!(
                "Assigned to {} with GPUs {} (policy {} {})",
                allocation.node, devices, allocation.policy.name, allocation.policy.digest
            ),
        );
        Ok(())
    }

    fn gpuresources(&self, key: &ObjectKey) -> Api<GPUResource> {
        Api::namespaced(self.client.clone(), &key.namespace)
    }

    fn recently_bound(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, String>> {
        self.recently_bound
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

/// Parameters of the controller's merge patches.
pub fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}
