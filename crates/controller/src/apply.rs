//! The applier: the only code that writes allocations to the API server.
//!
//! A pod's allocation is recorded on the pod by the same write that binds
//! it: a `Binding` whose annotations the API server copies onto the pod
//! (`wasmgpu.io/allocation`, `wasmgpu.io/devices`, `wasmgpu.io/node`). A pod
//! is bound with its GPUs recorded, or neither; a crash at any point leaves
//! nothing half-applied.
//!
//! ```text
//!  round: validate ─▶ index.begin_binding (GPUs held from now on)
//!                     └─▶ binding task (bounded concurrency, timeout) ─┐
//!  next round starts at once; it sees the held GPUs                    │
//!                                                                      ▼
//!  answer: 201 ─▶ wait for the pod watch (the pod then holds the GPUs itself)
//!          404, refused and read back unbound ─▶ index.end_binding (free again)
//!          unknown (timeout, 5xx, no answer) ─▶ read back: bound ─▶ as 201;
//!              otherwise index.retry_binding: held, sent again by the next
//!              round (the next change or the resync starts it)
//! ```
//!
//! Bindings stream: each starts as soon as its decision is validated, and
//! the round loop does not wait for them. Ledger entries of earlier versions
//! (`status.allocations` of GPUResources) are moved onto their pods and
//! removed ([`Applier::move_allocations`], [`Applier::release`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::events::{EventSink, Reason, pod_ref};
use super::metrics::Metrics;
use super::policies::ActivePolicy;
use super::status::StatusTarget;
use super::wanted_status::WantedStatus;
use super::wanted_tenant_status::WantedTenantStatus;
use super::watch::WatchedIndex;
pub use super::write_error::ApplyError;
use wasmgpu_api::{
    Allocation, Device, GANG_RESERVATION_ANNOTATION, GPUResource, GPUTenant, GangReservation,
    PodAllocation, PodGroup, RELEASE_FINALIZER, ReservedMember, Sharing,
};
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::types::{Ask, Sharing as WitSharing};
use wasmgpu_contract::validate::Placement;
use wasmgpu_index::{ObjectKey, PendingBinding, Release, ResourceView};

mod claims;
mod extended;
mod preempt;

/// Field manager of the controller's writes.
pub const FIELD_MANAGER: &str = "wasmgpu-controller";

/// How the applier writes.
#[derive(Clone, Copy, Debug)]
pub struct WriteSettings {
    /// Bindings in flight at once.
    pub concurrency: usize,
    /// How long one API write may take before its outcome counts as
    /// unknown.
    pub timeout: Duration,
}

impl Default for WriteSettings {
    fn default() -> Self {
        Self {
            concurrency: 32,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Writes allocations, releases and finalizers.
pub struct Applier {
    writer: Arc<Writer>,
    /// Bindings in flight.
    bindings: Mutex<JoinSet<()>>,
    permits: Arc<Semaphore>,
}

/// Writes GPUResource status; cheap to clone (see [`Applier::status_api`]).
#[derive(Clone)]
pub struct StatusApi {
    writer: Arc<Writer>,
}

impl StatusTarget for StatusApi {
    type Key = ObjectKey;
    type Wanted = WantedStatus;
    const KIND: &'static str = "GPUResource";

    fn patch(wanted: &WantedStatus, conditions: &[Condition]) -> serde_json::Value {
        wanted.patch(conditions)
    }

    /// Writes a GPUResource's status (bounded by the write timeout, counted).
    async fn write(&self, key: &ObjectKey, patch: &serde_json::Value) -> Result<(), ApplyError> {
        self.writer.write_status(key, patch).await
    }
}

/// Writes GPUTenant status; cheap to clone (see [`Applier::tenant_status_api`]).
#[derive(Clone)]
pub struct TenantStatusApi {
    writer: Arc<Writer>,
}

impl StatusTarget for TenantStatusApi {
    type Key = String;
    type Wanted = WantedTenantStatus;
    const KIND: &'static str = "GPUTenant";

    fn patch(wanted: &WantedTenantStatus, conditions: &[Condition]) -> serde_json::Value {
        wanted.patch(conditions)
    }

    /// Writes a GPUTenant's status (bounded by the write timeout, counted).
    async fn write(&self, name: &String, patch: &serde_json::Value) -> Result<(), ApplyError> {
        let api: Api<GPUTenant> = Api::all(self.writer.client.clone());
        self.writer
            .timed(
                "status",
                api.patch_status(name, &merge_params(), &Patch::Merge(patch)),
            )
            .await
            .map(drop)
    }
}

/// What binding tasks share.
struct Writer {
    client: Client,
    /// For evictions: 429 (a PodDisruptionBudget refuses) comes back as
    /// the answer, where `client` would retry it.
    eviction_client: Client,
    shared: Arc<WatchedIndex>,
    events: EventSink,
    metrics: Metrics,
    timeout: Duration,
}

/// What became of one binding, as far as this controller can tell.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The pod is bound (by this write, or an earlier one of the same).
    Bound,
    /// The pod is bound with another allocation (another writer): the GPUs
    /// stay held until the pod watch shows what the pod holds.
    BoundElsewhere,
    /// Certainly not bound by us: the GPUs are free again.
    NotBound(String),
    /// Unknown: the GPUs stay held and the binding is sent again.
    Unknown(String),
}

// === impl Applier ===

impl Applier {
    /// An applier writing through `client`, and evicting through
    /// `eviction_client` (one that hands back 429 instead of retrying it).
    pub fn new(
        client: Client,
        eviction_client: Client,
        shared: Arc<WatchedIndex>,
        events: EventSink,
        metrics: Metrics,
        settings: WriteSettings,
    ) -> Self {
        Self {
            writer: Arc::new(Writer {
                client,
                eviction_client,
                shared,
                events,
                metrics,
                timeout: settings.timeout,
            }),
            bindings: Mutex::new(JoinSet::new()),
            permits: Arc::new(Semaphore::new(settings.concurrency.max(1))),
        }
    }

    /// Starts the bindings of `accepted` (all validated against `snapshot`,
    /// decided by `policy`); their GPUs are held in the index before this
    /// returns. Returns how many bindings started.
    pub fn assign(
        &self,
        policy: &ActivePolicy,
        snapshot: &HostSnapshot,
        accepted: Vec<Placement>,
    ) -> usize {
        let bindings = {
            let index = self.writer.shared.index();
            accepted
                .iter()
                .filter_map(|placement| binding_of(policy, snapshot, placement, &index))
                .collect::<Vec<_>>()
        };
        let started = bindings.len();
        let (gangs, singles) = by_gang(snapshot, bindings);
        self.start(singles);
        for (group, members) in gangs {
            self.start_gang(group, members);
        }
        started
    }

    /// Starts the bindings of one gang's members: their GPUs are held from
    /// now on; the bindings are recorded on the PodGroup first (so that a
    /// controller that stops half-way finishes them when it restarts) and
    /// sent once that write succeeded. If it fails, none is sent and the
    /// GPUs are free again: the members wait for a later round together.
    fn start_gang(&self, group: ObjectKey, members: Vec<PendingBinding>) {
        {
            let mut index = self.writer.shared.index();
            for member in &members {
                index.begin_binding(member);
            }
        }
        let reservation = GangReservation {
            members: members
                .iter()
                .map(|m| {
                    (
                        m.pod.name.clone(),
                        ReservedMember {
                            uid: m.uid.clone(),
                            allocation: m.allocation.clone(),
                        },
                    )
                })
                .collect(),
        };
        let writer = Arc::clone(&self.writer);
        let permits = Arc::clone(&self.permits);
        let decided = Instant::now();
        let mut tasks = self.tasks();
        tasks.spawn(async move {
            let text = match serde_json::to_string(&reservation) {
                Ok(text) => text,
                Err(error) => {
                    tracing::error!(gang = %group, %error, "Cannot encode the gang reservation");
                    return;
                }
            };
            let patch = json!({"metadata": {"annotations": {GANG_RESERVATION_ANNOTATION: text}}});
            let api: Api<PodGroup> = Api::namespaced(writer.client.clone(), &group.namespace);
            let written = writer
                .timed(
                    "reservation",
                    api.patch(&group.name, &merge_params(), &Patch::Merge(&patch)),
                )
                .await;
            if let Err(error) = written {
                tracing::warn!(kind = "PodGroup", gang = %group, error_kind = error.kind(), %error, "Cannot record the gang's bindings; its members wait for a later round");
                let mut index = writer.shared.index();
                for member in &members {
                    index.end_binding(&member.pod, &member.uid);
                }
                return;
            }
            tracing::info!(gang = %group, members = members.len(), "Binding a gang");
            let mut bindings = tokio::task::JoinSet::new();
            for member in members {
                let writer = Arc::clone(&writer);
                let permits = Arc::clone(&permits);
                bindings.spawn(async move {
                    let Ok(_permit) = permits.acquire_owned().await else {
                        return;
                    };
                    writer.bind(member, decided).await;
                });
            }
            while bindings.join_next().await.is_some() {}
        });
    }

    /// Removes the reservation of gangs whose bindings are all applied.
    pub async fn clear_reservations(&self, groups: Vec<ObjectKey>) {
        for group in groups {
            let patch = json!({"metadata": {"annotations": {GANG_RESERVATION_ANNOTATION: null}}});
            let api: Api<PodGroup> = Api::namespaced(self.writer.client.clone(), &group.namespace);
            match self
                .writer
                .timed(
                    "reservation",
                    api.patch(&group.name, &merge_params(), &Patch::Merge(&patch)),
                )
                .await
            {
                Ok(_) => tracing::debug!(gang = %group, "Cleared the gang reservation"),
                Err(ApplyError::Api(kube::Error::Api(status))) if status.is_not_found() => {}
                Err(error) => {
                    tracing::warn!(kind = "PodGroup", gang = %group, error_kind = error.kind(), %error, "Cannot clear the gang reservation; retrying next round")
                }
            }
        }
    }

    /// Sends again bindings whose outcome is unknown, and binds pods an
    /// earlier version recorded in a ledger but did not bind.
    pub fn finish(&self, bindings: Vec<PendingBinding>) {
        if !bindings.is_empty() {
            tracing::info!(pods = bindings.len(), "Finishing bindings");
        }
        self.start(bindings);
    }

    fn start(&self, bindings: Vec<PendingBinding>) {
        if bindings.is_empty() {
            return;
        }
        let decided = Instant::now();
        {
            let mut index = self.writer.shared.index();
            for binding in &bindings {
                index.begin_binding(binding);
            }
        }
        let mut tasks = self.tasks();
        while tasks.try_join_next().is_some() {}
        for binding in bindings {
            let writer = Arc::clone(&self.writer);
            let permits = Arc::clone(&self.permits);
            tasks.spawn(async move {
                let Ok(_permit) = permits.acquire_owned().await else {
                    return;
                };
                writer.bind(binding, decided).await;
            });
        }
    }

    /// Stops the bindings in flight (the lead was lost). Their outcome is
    /// unknown: the GPUs stay held until the pod watch tells.
    pub fn stop(&self) {
        let mut tasks = self.tasks();
        if !tasks.is_empty() {
            tracing::warn!(bindings = tasks.len(), "Stopping the bindings in flight");
        }
        tasks.abort_all();
        self.writer.shared.index().retry_all_bindings();
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, JoinSet<()>> {
        wasmgpu_support::lock(&self.bindings)
    }

    /// Records on each bound pod the allocation an earlier version kept in
    /// its GPUResource's ledger. The pod stays where it is; the entry goes
    /// once the pod carries it ([`Applier::release`]).
    pub async fn move_allocations(&self, moves: Vec<PendingBinding>) {
        for moved in moves {
            let pods: Api<Pod> = Api::namespaced(self.writer.client.clone(), &moved.pod.namespace);
            let patch = json!({
                "metadata": {
                    "uid": moved.uid,
                    "annotations": moved.allocation.annotations(),
                },
            });
            let result = self
                .writer
                .timed(
                    "annotation",
                    pods.patch(&moved.pod.name, &merge_params(), &Patch::Merge(&patch)),
                )
                .await;
            match result {
                Ok(_) => {
                    tracing::info!(pod = %moved.pod, node = %moved.allocation.node, "Moved the allocation onto the pod")
                }
                Err(error) => {
                    tracing::warn!(pod = %moved.pod, error_kind = error.kind(), %error, "Cannot record the allocation on the pod; retrying next round")
                }
            }
        }
    }

    /// Removes ledger entries of earlier versions: stale ones (their GPUs
    /// are free) and those whose pod carries the allocation now.
    pub async fn release(&self, releases: Vec<Release>) {
        let mut resource_to_releases: std::collections::BTreeMap<ObjectKey, Vec<Release>> =
            std::collections::BTreeMap::new();
        for release in releases {
            resource_to_releases
                .entry(release.resource.clone())
                .or_default()
                .push(release);
        }
        for (resource, releases) in resource_to_releases {
            let Some(view) = self.writer.shared.index().resource(&resource) else {
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
                        tracing::info!(%resource, pod = %release.pod, reason = %release.reason, "Removed a ledger entry");
                    }
                }
                Err(error) => {
                    tracing::warn!(kind = "GPUResource", %resource, error_kind = error.kind(), %error, "Cannot update the ledger; retrying next round")
                }
            }
        }
    }

    /// Removes the finalizer earlier versions put on GPUResources, once
    /// their ledger is empty: GPUs are held by pods, and a GPUResource may
    /// go whenever its owner deletes it.
    pub async fn finalize(&self, views: &[ResourceView]) {
        for view in views {
            let ours = view.finalizers.iter().any(|f| f == RELEASE_FINALIZER);
            if !ours || !view.allocations.is_empty() {
                continue;
            }
            let finalizers: Vec<String> = view
                .finalizers
                .iter()
                .filter(|f| *f != RELEASE_FINALIZER)
                .cloned()
                .collect();
            let patch = json!({
                "metadata": {
                    "resourceVersion": view.resource_version,
                    "finalizers": finalizers,
                },
            });
            let api = self.gpuresources(&view.key);
            let result = self
                .writer
                .timed(
                    "finalizer",
                    api.patch(&view.key.name, &merge_params(), &Patch::Merge(&patch)),
                )
                .await;
            if let Err(error) = self.recorded(&view.key, result).await {
                tracing::warn!(kind = "GPUResource", resource = %view.key, error_kind = error.kind(), %error, "Cannot remove the finalizer; retrying next round");
            }
        }
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
        let result = self
            .writer
            .timed(
                "ledger",
                api.patch_status(&view.key.name, &merge_params(), &Patch::Merge(&patch)),
            )
            .await;
        self.recorded(&view.key, result).await
    }

    /// A handle that writes GPUResource status, for the status writer.
    pub fn status_api(&self) -> StatusApi {
        StatusApi {
            writer: Arc::clone(&self.writer),
        }
    }

    /// A handle that writes GPUTenant status, for its status writer.
    pub fn tenant_status_api(&self) -> TenantStatusApi {
        TenantStatusApi {
            writer: Arc::clone(&self.writer),
        }
    }

    /// See [`Writer::recorded`].
    async fn recorded(
        &self,
        key: &ObjectKey,
        result: Result<GPUResource, ApplyError>,
    ) -> Result<(), ApplyError> {
        self.writer.recorded(key, result).await
    }

    fn gpuresources(&self, key: &ObjectKey) -> Api<GPUResource> {
        self.writer.gpuresources(key)
    }
}

// === impl Writer ===

impl Writer {
    /// Writes a GPUResource's status (bounded by the write timeout, counted).
    async fn write_status(
        &self,
        key: &ObjectKey,
        patch: &serde_json::Value,
    ) -> Result<(), ApplyError> {
        let api = self.gpuresources(key);
        let result = self
            .timed(
                "status",
                api.patch_status(&key.name, &merge_params(), &Patch::Merge(patch)),
            )
            .await;
        self.recorded(key, result).await
    }

    /// Hands a GPUResource write's outcome to the index. On failure the
    /// object is read again, so that the index holds what the server holds
    /// whatever became of the write (a timeout may still have applied it).
    async fn recorded(
        &self,
        key: &ObjectKey,
        result: Result<GPUResource, ApplyError>,
    ) -> Result<(), ApplyError> {
        match result {
            Ok(written) => {
                self.shared.index().record_write(&written);
                Ok(())
            }
            Err(error) => {
                let read =
                    tokio::time::timeout(self.timeout, self.gpuresources(key).get_opt(&key.name))
                        .await;
                match read {
                    Ok(Ok(Some(current))) => self.shared.index().record_write(&current),
                    Ok(Ok(None)) => {}
                    // The caller reports the failed write; this is detail.
                    Ok(Err(read_error)) => {
                        tracing::debug!(kind = "GPUResource", resource = %key, %read_error, "Cannot read the GPUResource back after a failed write")
                    }
                    Err(_) => {
                        tracing::debug!(kind = "GPUResource", resource = %key, "Cannot read the GPUResource back after a failed write: no answer")
                    }
                }
                Err(error)
            }
        }
    }

    fn gpuresources(&self, key: &ObjectKey) -> Api<GPUResource> {
        Api::namespaced(self.client.clone(), &key.namespace)
    }

    /// Runs one write of `kind` under the write timeout, and counts it.
    async fn timed<T>(
        &self,
        kind: &'static str,
        write: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ApplyError> {
        let result = match tokio::time::timeout(self.timeout, write).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(ApplyError::Api(error)),
            Err(_) => Err(ApplyError::Timeout(self.timeout)),
        };
        self.metrics.write(kind, result_label(&result));
        result
    }

    /// Binds one pod with its allocation, and tells the index what became
    /// of it.
    async fn bind(&self, binding: PendingBinding, decided: Instant) {
        let outcome = match self.write_claims(&binding).await {
            Err(outcome) => outcome,
            Ok(()) => match self.send_binding(&binding).await {
                Ok(()) => Outcome::Bound,
                Err(error) => self.read_back(&binding, &error).await,
            },
        };
        if matches!(outcome, Outcome::NotBound(_)) && !binding.claims.is_empty() {
            self.undo_claims(&binding).await;
        }
        self.metrics.binding(decided.elapsed());
        let PendingBinding {
            pod,
            uid,
            allocation,
            claims,
        } = &binding;
        match outcome {
            Outcome::Bound => {
                let devices = allocation.device_list();
                let claims: Vec<String> = claims.iter().map(|c| c.claim.to_string()).collect();
                let claims = claims.join(",");
                tracing::info!(%pod, node = %allocation.node, %devices, %claims, policy = %allocation.policy.name, "Bound");
                self.metrics.pods_bound(1);
                // Rate-limited: past the rate, the annotations say it.
                let _sent = self.events.per_pod(
                    pod_ref(pod, Some(uid)),
                    Reason::Allocated,
                    "Bind",
                    if claims.is_empty() {
                        format!(
                            "Assigned to {} with GPUs {} (policy {} {})",
                            allocation.node,
                            devices,
                            allocation.policy.name,
                            allocation.policy.digest
                        )
                    } else {
                        format!(
                            "Assigned to {} with ResourceClaims {claims} (devices {}; policy {} {})",
                            allocation.node,
                            if devices.is_empty() { "allocated already" } else { &devices },
                            allocation.policy.name,
                            allocation.policy.digest
                        )
                    },
                );
            }
            Outcome::BoundElsewhere => {
                tracing::warn!(kind = "Pod", %pod, "Bound by another writer with another allocation; waiting for the pod watch");
            }
            Outcome::NotBound(why) => {
                tracing::info!(kind = "Pod", %pod, %why, "Not bound; the pod is decided again");
                self.shared.index().end_binding(pod, uid);
                self.shared.changed.notify_one();
            }
            Outcome::Unknown(why) => {
                tracing::warn!(kind = "Pod", %pod, %why, "Binding outcome unknown; its GPUs stay held and it is sent again");
                // Sent again by the next round, which the next change or the
                // resync starts: not by one started now, which while the API
                // server is unreachable would fail at once and start the
                // next, one round after another.
                self.shared.index().retry_binding(pod, uid);
            }
        }
    }

    async fn send_binding(&self, binding: &PendingBinding) -> Result<(), ApplyError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &binding.pod.namespace);
        let body = Binding {
            metadata: ObjectMeta {
                name: Some(binding.pod.name.clone()),
                namespace: Some(binding.pod.namespace.clone()),
                uid: Some(binding.uid.clone()),
                // A DRA pod whose claims were all allocated already gets
                // no GPUs of its own to record.
                annotations: (!binding.allocation.devices.is_empty())
                    .then(|| binding.allocation.annotations()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(binding.allocation.node.clone()),
                ..Default::default()
            },
        };
        self.timed(
            "binding",
            pods.create_subresource::<Binding, serde_json::Value>(
                "binding",
                &binding.pod.name,
                &PostParams::default(),
                &body,
            ),
        )
        .await
        .map(|_| ())
    }

    /// What became of a binding that got no success: read the pod back.
    async fn read_back(&self, binding: &PendingBinding, error: &ApplyError) -> Outcome {
        // A refusal (4xx) was decided by the server: the binding did not
        // happen. Anything else may have been applied.
        let refused = matches!(error, ApplyError::Api(kube::Error::Api(status)) if (400..500).contains(&status.code));
        if let ApplyError::Api(kube::Error::Api(status)) = error
            && status.is_not_found()
        {
            return Outcome::NotBound(format!("pod not found: {}", status.message));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &binding.pod.namespace);
        let current = match tokio::time::timeout(self.timeout, pods.get_opt(&binding.pod.name))
            .await
        {
            Ok(Ok(current)) => current,
            Ok(Err(read_error)) => {
                return Outcome::Unknown(format!(
                    "{error}; reading the pod back failed: {read_error}"
                ));
            }
            Err(_) => {
                return Outcome::Unknown(format!("{error}; reading the pod back got no answer"));
            }
        };
        let Some(current) = current.filter(|p| p.metadata.uid.as_deref() == Some(&binding.uid))
        else {
            return Outcome::NotBound(format!("{error}; the pod was deleted or recreated"));
        };
        let bound = current
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if bound {
            // Bound already: by an earlier try of this binding (it timed
            // out, or this replica lost and regained the lead), or by
            // another writer. Either way the pod watch shows what it holds.
            let ours = binding.allocation.devices.is_empty()
                || PodAllocation::from_annotations(current.metadata.annotations.as_ref())
                    .and_then(Result::ok)
                    .is_some_and(|held| held == binding.allocation);
            return if ours {
                Outcome::Bound
            } else {
                Outcome::BoundElsewhere
            };
        }
        if refused || current.metadata.deletion_timestamp.is_some() {
            Outcome::NotBound(error.to_string())
        } else {
            Outcome::Unknown(error.to_string())
        }
    }
}

/// The `result` label of a write.
fn result_label<T>(result: &Result<T, ApplyError>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(ApplyError::Api(kube::Error::Api(status))) => status.code.to_string(),
        Err(ApplyError::Timeout(_)) => "timeout".into(),
        Err(ApplyError::Api(_)) => "error".into(),
    }
}

/// The binding of an accepted `placement` (validated against `snapshot`,
/// decided by `policy`): the pod, its UID and what it gets. `None` for a pod
/// gone since, or a DRA pod (not bound through a GPUResource).
fn binding_of(
    policy: &ActivePolicy,
    snapshot: &HostSnapshot,
    placement: &Placement,
    index: &wasmgpu_index::Index,
) -> Option<PendingBinding> {
    let request = snapshot.snapshot.pending.get(placement.request)?;
    let (n, ref positions) = placement.at;
    let node = snapshot.snapshot.nodes.get(n)?;
    let pod = ObjectKey::parse(&request.pod)?;
    let uid = index.pod_uid(&pod)?.to_string();
    let device = |g: u32, memory_mib: Option<u64>| {
        let gpu = node.gpus.get(g as usize)?;
        Some(Device {
            uuid: snapshot.uuid(n as u32, g)?.to_owned(),
            index: gpu.index,
            memory_mib: memory_mib.unwrap_or(gpu.memory_mib),
        })
    };
    let (resource, sharing, devices, claims) = match &request.ask {
        Ask::Gpus(shape) => {
            let resource = ObjectKey::parse(snapshot.resource(placement.request)?)?;
            let sharing = match shape.sharing {
                WitSharing::Exclusive => Sharing::Exclusive,
                WitSharing::Shared => Sharing::Shared,
            };
            let memory = (sharing == Sharing::Shared).then_some(shape.memory_mib);
            let devices = positions
                .iter()
                .filter_map(|&g| device(g, memory))
                .collect();
            (resource.name, sharing, devices, Vec::new())
        }
        Ask::Claims(pending) => {
            let writes = claim_writes(snapshot, placement, pending, &pod, index)?;
            let devices = positions.iter().filter_map(|&g| device(g, None)).collect();
            (String::new(), Sharing::Exclusive, devices, writes)
        }
    };
    Some(PendingBinding {
        pod,
        uid,
        allocation: PodAllocation {
            resource,
            node: placement.node.clone(),
            sharing,
            devices,
            policy: policy.reference(),
        },
        claims,
    })
}

/// The claim writes of a DRA pod's placement; `None` (logged) when a claim
/// or device changed since the snapshot: the pod is decided again.
fn claim_writes(
    snapshot: &HostSnapshot,
    placement: &Placement,
    pending: &[wasmgpu_contract::types::Claim],
    pod: &ObjectKey,
    index: &wasmgpu_index::Index,
) -> Option<Vec<wasmgpu_index::ClaimWrite>> {
    let n = placement.at.0 as u32;
    let mut chosen = Vec::new();
    for choice in &placement.claims {
        let request = pending
            .get(choice.claim as usize)?
            .requests
            .get(choice.request as usize)?;
        let name = match request
            .alternatives
            .get(choice.alternative as usize)
            .and_then(|a| a.subrequest.as_deref())
        {
            Some(sub) => format!("{}/{sub}", request.name),
            None => request.name.clone(),
        };
        for &g in &choice.gpus {
            chosen.push(wasmgpu_index::Chosen {
                claim: choice.claim as usize,
                request: name.clone(),
                uuid: snapshot.uuid(n, g)?,
            });
        }
    }
    let names: Vec<&str> = pending.iter().map(|c| c.name.as_str()).collect();
    match index.claim_writes(pod, &names, &chosen, &placement.node) {
        Ok(writes) => Some(writes),
        Err(why) => {
            tracing::info!(%pod, %why, "Not binding the DRA pod; it is decided again");
            None
        }
    }
}

/// Splits `bindings` into gangs (by PodGroup, from the snapshot's requests)
/// and the rest.
fn by_gang(
    snapshot: &HostSnapshot,
    bindings: Vec<PendingBinding>,
) -> (
    std::collections::BTreeMap<ObjectKey, Vec<PendingBinding>>,
    Vec<PendingBinding>,
) {
    let mut gangs: std::collections::BTreeMap<ObjectKey, Vec<PendingBinding>> =
        std::collections::BTreeMap::new();
    let snapshot = &snapshot.snapshot;
    if snapshot.gangs.is_empty() {
        return (gangs, bindings);
    }
    let pod_to_gang: std::collections::HashMap<&str, u32> = snapshot
        .pending
        .iter()
        .filter_map(|r| Some((r.pod.as_str(), r.gang?)))
        .collect();
    let mut singles = Vec::new();
    for binding in bindings {
        let group = pod_to_gang
            .get(binding.pod.to_string().as_str())
            .and_then(|&g| snapshot.gangs.get(g as usize))
            .and_then(|g| ObjectKey::parse(&g.name));
        match group {
            Some(group) => gangs.entry(group).or_default().push(binding),
            None => singles.push(binding),
        }
    }
    (gangs, singles)
}

/// Parameters of the controller's merge patches.
pub fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}
