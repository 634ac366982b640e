//! # The index: cluster state in memory, snapshots out
//!
//! Watches feed the index through small synchronous calls (`apply_*`,
//! `delete_*`, and `reset_*` after a relist; or generically through
//! [`IndexResource`]); it does no I/O and holds no API client. Out come the
//! [`Snapshot`](wasmgpu_contract::types::Snapshot)s the policies decide on, the
//! [`Problem`]s users must fix, and the bindings to finish.
//!
//! ```text
//!  Node ──────────▶ name_to_node        (Ready? cordoned? labels, taints)
//!  GPUNode ───────▶ node_to_inventory   (GPUs from the agent's status,
//!  ResourceSlice ─▶                      merged with a DRA driver's by UUID)
//!  ResourceClaim ─▶ dra                 (allocated devices: held; the
//!  DeviceClass ───▶                      claims DRA pods ask through)
//!  GPUResource ───▶ key_to_resource     (spec, spec error, old ledger)
//!  Pod ───────────▶ key_to_pod          (schedulerName wasmgpu only;
//!                                        node, wasmgpu.io/allocation)
//!  bindings sent ─▶ key_to_in_flight    (until the pod watch shows them)
//!  GPUTenant ─────▶ name_to_tenant      (namespace globs, quota, limit)
//!                          │
//!                          ▼
//!   holdings: bound pods' allocations + in flight (+ old ledgers)
//!             → GPU use, usage per namespace
//!   survey:  unbound pods not holding GPUs → requests (by policy) | problems
//!   build:   candidate nodes (Ready, schedulable, inventory), eligible nodes
//!            per request (nodeSelector, required affinity, taints)
//!                          │
//!                          ▼
//!            snapshots(round) ─ one Snapshot per policy
//! ```
//!
//! `apply` never fails: an object without a name, or another scheduler's
//! pod, is skipped; a GPUResource whose spec is unusable is kept (its ledger
//! still holds GPUs), logged, and reported through [`Index::problems`].
//!
//! Pods are `namespace/name`; a ledger entry belongs to a pod only while the
//! UIDs match, so a pod recreated under the same name is another pod.
//!
//! Crate `wasmgpu-index`: below it `wasmgpu-api` and `wasmgpu-contract`; no API
//! client, no tokio. The controller feeds it; the CLI's `allocations` reads it.
#![forbid(unsafe_code)]

mod backoff;
mod budgets;
mod claim_asks;
mod claim_records;
mod claim_writes;
mod dra;
mod drift;
mod eligibility;
mod gangs;
mod holdings;
mod inventory;
mod key;
mod node;
mod pod;
mod problem;
mod snapshot;
mod tenants;
mod watch;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};

pub use claim_writes::{Chosen, ClaimWrite};
pub use dra::PoolProblem;
pub use drift::{OutdatedHoldings, UnhealthyHolding};
pub use eligibility::Ineligible;
pub use holdings::{Eviction, GpuState, PendingBinding, Release, ReleaseReason};
pub use key::ObjectKey;
pub use problem::{Problem, Subject};
pub use tenants::TenantView;
pub use watch::IndexResource;

use holdings::InFlight;
use inventory::NodeInventory;
use node::NodeFacts;
use pod::PodFacts;
use wasmgpu_api::{Allocation, GPUNode, GPUResource, GPUResourceSpec, InvalidSpec};

/// All the cluster state allocation depends on. See the module docs.
#[derive(Debug)]
pub struct Index {
    /// Policy for GPUResources that name none.
    default_policy: String,
    name_to_node: BTreeMap<String, NodeFacts>,
    /// Node name → its GPUs: its GPUNode's merged with those DRA drivers
    /// publish on it (see [`inventory::merge`]).
    node_to_inventory: BTreeMap<String, NodeInventory>,
    /// Node name → the GPUs its GPUNode lists.
    node_to_agent_inventory: BTreeMap<String, NodeInventory>,
    /// ResourceSlices and the ResourceClaims' allocations.
    dra: dra::DraInventory,
    /// Node name → the GPUs its GPUNode listed before it was deleted: pods
    /// wait for the agent to publish it again instead of being told they can
    /// never be placed.
    node_to_lost_inventory: BTreeMap<String, NodeInventory>,
    key_to_resource: BTreeMap<ObjectKey, ResourceState>,
    /// Pods with `schedulerName: wasmgpu`.
    key_to_pod: BTreeMap<ObjectKey, PodFacts>,
    /// Bindings sent whose pod the watch has not shown bound yet.
    key_to_in_flight: HashMap<ObjectKey, InFlight>,
    /// The pods have been listed once: a ledger entry whose pod is not
    /// known is stale, not merely unseen yet.
    pods_listed: bool,
    /// GPUResources the controller wrote, with the `resourceVersion` the
    /// write returned: older versions still in the watch are ignored until
    /// that one arrives, so the index never forgets a ledger entry it wrote.
    key_to_written_version: HashMap<ObjectKey, String>,
    /// PodGroups (gangs), when their CRD is installed.
    key_to_gang: BTreeMap<ObjectKey, GangFacts>,
    /// PodDisruptionBudgets: which running pods may be evicted now.
    key_to_budget: BTreeMap<ObjectKey, budgets::BudgetFacts>,
    /// GPUTenants by name: which namespaces share a quota.
    name_to_tenant: BTreeMap<String, tenants::TenantFacts>,
    /// How long a bound pod keeps its GPUs before it may be preempted,
    /// unless its tenant sets `minRuntimeSeconds`; ms.
    min_runtime_ms: u64,
    /// Preemptors whose preemption was blocked, backing off.
    preemption_backoffs: backoff::Backoffs,
}

/// What the index keeps of a PodGroup.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct GangFacts {
    pub min_member: u32,
    pub schedule_timeout_seconds: Option<u32>,
    /// Bindings of a round being applied (see [`wasmgpu_api::GangReservation`]).
    pub reservation: Option<wasmgpu_api::GangReservation>,
}

/// What the index keeps of a GPUResource.
#[derive(Clone, Debug)]
struct ResourceState {
    spec: GPUResourceSpec,
    /// Why the spec is unusable, if it is.
    spec_error: Option<InvalidSpec>,
    /// The ledger earlier versions kept (`status.allocations`).
    allocations: Vec<Allocation>,
    /// `metadata.uid`.
    uid: Option<String>,
    /// `metadata.generation`.
    generation: Option<i64>,
    /// `metadata.resourceVersion`.
    resource_version: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    deleting: bool,
    /// `metadata.finalizers`.
    finalizers: Vec<String>,
}

/// What the controller needs to know of a GPUResource to report on it.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceView {
    /// The GPUResource.
    pub key: ObjectKey,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.resourceVersion` of the copy the index holds.
    pub resource_version: Option<String>,
    /// The policy that places its pods.
    pub policy: String,
    /// Why the spec is unusable, if it is.
    pub spec_error: Option<InvalidSpec>,
    /// Being deleted.
    pub deleting: bool,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// The ledger earlier versions kept (emptied as it is moved onto pods).
    pub allocations: Vec<Allocation>,
}

/// How many pods of a GPUResource hold GPUs, and how many reference it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodCounts {
    /// Pods holding GPUs of its shape.
    pub holding: usize,
    /// Pods naming the GPUResource that have not finished.
    pub referencing: usize,
}

// === impl Index ===

impl Index {
    /// An empty index; GPUResources without `spec.policy` use `default_policy`.
    pub fn new(default_policy: impl Into<String>) -> Self {
        Self {
            default_policy: default_policy.into(),
            name_to_node: BTreeMap::new(),
            node_to_inventory: BTreeMap::new(),
            node_to_agent_inventory: BTreeMap::new(),
            dra: dra::DraInventory::default(),
            node_to_lost_inventory: BTreeMap::new(),
            key_to_resource: BTreeMap::new(),
            key_to_pod: BTreeMap::new(),
            key_to_in_flight: HashMap::new(),
            pods_listed: false,
            key_to_written_version: HashMap::new(),
            key_to_gang: BTreeMap::new(),
            key_to_budget: BTreeMap::new(),
            name_to_tenant: BTreeMap::new(),
            min_runtime_ms: 0,
            preemption_backoffs: backoff::Backoffs::default(),
        }
    }

    /// How long a bound pod keeps its GPUs before it may be preempted or
    /// reclaimed (`running.protected-ms`), for pods whose tenant sets no
    /// `minRuntimeSeconds`. 0 (the default): no minimum.
    pub fn set_min_runtime(&mut self, min_runtime: std::time::Duration) {
        self.min_runtime_ms = u64::try_from(min_runtime.as_millis()).unwrap_or(u64::MAX);
    }

    /// Records a PodGroup (added or changed).
    pub fn apply_podgroup(&mut self, group: &wasmgpu_api::PodGroup) {
        let meta = &group.metadata;
        let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
            return;
        };
        self.key_to_gang.insert(
            ObjectKey::new(namespace, name),
            GangFacts {
                min_member: u32::try_from(group.spec.min_member).unwrap_or(0).max(1),
                schedule_timeout_seconds: group
                    .spec
                    .schedule_timeout_seconds
                    .and_then(|s| u32::try_from(s).ok()),
                reservation: wasmgpu_api::GangReservation::from_annotations(
                    meta.annotations.as_ref(),
                ),
            },
        );
    }

    /// Forgets a PodGroup.
    pub fn delete_podgroup(&mut self, namespace: &str, name: &str) {
        self.key_to_gang.remove(&ObjectKey::new(namespace, name));
    }

    /// Replaces every PodGroup (after a relist).
    pub fn reset_podgroups(&mut self, groups: &[wasmgpu_api::PodGroup]) {
        self.key_to_gang.clear();
        groups.iter().for_each(|g| self.apply_podgroup(g));
    }

    /// Gangs whose reservation can go: every reserved member is bound (it
    /// carries its allocation), gone, finished or recreated.
    pub fn reservations_to_clear(&self) -> Vec<ObjectKey> {
        self.key_to_gang
            .iter()
            .filter_map(|(key, gang)| {
                let reservation = gang.reservation.as_ref()?;
                let done = reservation.members.iter().all(|(pod, member)| {
                    let pod = ObjectKey::new(&key.namespace, pod);
                    self.key_to_pod
                        .get(&pod)
                        .is_none_or(|p| p.uid != member.uid || !p.unplaced())
                });
                (done && self.pods_listed).then(|| key.clone())
            })
            .collect()
    }

    /// The policy for GPUResources that name none.
    pub fn default_policy(&self) -> &str {
        &self.default_policy
    }

    /// Records a Node (added or changed).
    pub fn apply_node(&mut self, node: &Node) {
        let Some(name) = node.metadata.name.clone() else {
            tracing::info!("Ignoring Node without a name");
            return;
        };
        self.name_to_node.insert(name, NodeFacts::from_node(node));
    }

    /// Forgets a Node (and what its GPUNode listed).
    pub fn delete_node(&mut self, name: &str) {
        self.name_to_node.remove(name);
        self.node_to_lost_inventory.remove(name);
    }

    /// Replaces every Node (after a relist).
    pub fn reset_nodes(&mut self, nodes: &[Node]) {
        self.name_to_node.clear();
        nodes.iter().for_each(|node| self.apply_node(node));
        let nodes = &self.name_to_node;
        self.node_to_lost_inventory
            .retain(|name, _| nodes.contains_key(name));
    }

    /// Records a GPUNode's inventory; one without status has none yet.
    pub fn apply_gpunode(&mut self, gpunode: &GPUNode) {
        let Some(name) = gpunode.metadata.name.clone() else {
            tracing::info!("Ignoring GPUNode without a name");
            return;
        };
        match NodeInventory::from_gpunode(gpunode) {
            Some(inventory) => {
                self.node_to_agent_inventory.insert(name.clone(), inventory);
            }
            None => {
                self.node_to_agent_inventory.remove(&name);
            }
        };
        self.refresh_inventory(&name);
    }

    /// Forgets a GPUNode's inventory. Until the agent publishes it again,
    /// the node takes no pods, its GPUs held by pods stay held, and pods
    /// that only it could hold wait.
    pub fn delete_gpunode(&mut self, name: &str) {
        self.node_to_agent_inventory.remove(name);
        self.refresh_inventory(name);
    }

    /// Merges a node's inventories again after one of them changed. A node
    /// left with none keeps what it listed as lost (see
    /// `node_to_lost_inventory`).
    fn refresh_inventory(&mut self, name: &str) {
        let agent = self.node_to_agent_inventory.get(name);
        match inventory::merge(agent, self.dra.node(name)) {
            Some(inventory) => {
                self.node_to_lost_inventory.remove(name);
                self.node_to_inventory.insert(name.to_string(), inventory);
            }
            None => {
                if let Some(inventory) = self.node_to_inventory.remove(name)
                    && self.name_to_node.contains_key(name)
                {
                    self.node_to_lost_inventory
                        .insert(name.to_string(), inventory);
                }
            }
        }
    }

    /// Replaces every GPUNode (after a relist).
    pub fn reset_gpunodes(&mut self, gpunodes: &[GPUNode]) {
        let names: Vec<String> = self.node_to_agent_inventory.keys().cloned().collect();
        let listed: std::collections::HashSet<&str> = gpunodes
            .iter()
            .filter_map(|g| g.metadata.name.as_deref())
            .collect();
        for name in names.iter().filter(|n| !listed.contains(n.as_str())) {
            self.delete_gpunode(name);
        }
        gpunodes
            .iter()
            .for_each(|gpunode| self.apply_gpunode(gpunode));
    }

    /// Records a ResourceSlice (added or changed): the GPUs a DRA driver
    /// publishes, by the pool rules (see the `dra` module).
    pub fn apply_resourceslice(&mut self, slice: &ResourceSlice) {
        for node in self.dra.apply_slice(slice) {
            self.refresh_inventory(&node);
        }
    }

    /// Forgets a ResourceSlice.
    pub fn delete_resourceslice(&mut self, name: &str) {
        for node in self.dra.delete_slice(name) {
            self.refresh_inventory(&node);
        }
    }

    /// Replaces every ResourceSlice (after a relist).
    pub fn reset_resourceslices(&mut self, slices: &[ResourceSlice]) {
        for node in self.dra.reset_slices(slices) {
            self.refresh_inventory(&node);
        }
    }

    /// Pools of ResourceSlices whose devices are not used, and why.
    pub fn resourceslice_problems(&self) -> Vec<Problem> {
        self.dra
            .problems()
            .into_iter()
            .map(|(key, problem, slice)| Problem::UnusableResourcePool {
                slice: slice.to_string(),
                pool: key.to_string(),
                problem: problem.clone(),
            })
            .collect()
    }

    /// Records a ResourceClaim: the devices its allocation holds are held,
    /// whoever allocated them (kube-scheduler's claims too).
    pub fn apply_resourceclaim(&mut self, claim: &ResourceClaim) {
        self.dra.apply_claim(claim);
    }

    /// Forgets a ResourceClaim: its devices are free.
    pub fn delete_resourceclaim(&mut self, namespace: &str, name: &str) {
        self.dra.delete_claim(namespace, name);
    }

    /// Replaces every ResourceClaim (after a relist).
    pub fn reset_resourceclaims(&mut self, claims: &[ResourceClaim]) {
        self.dra.reset_claims(claims);
    }

    /// Records a DeviceClass: the selectors DRA requests naming it apply
    /// (compiled once here) and the configuration allocations copy.
    pub fn apply_deviceclass(&mut self, class: &DeviceClass) {
        self.dra.apply_class(class);
    }

    /// Forgets a DeviceClass.
    pub fn delete_deviceclass(&mut self, name: &str) {
        self.dra.delete_class(name);
    }

    /// Replaces every DeviceClass (after a relist).
    pub fn reset_deviceclasses(&mut self, classes: &[DeviceClass]) {
        self.dra.reset_classes(classes);
    }

    /// Records a DeviceTaintRule: the taint it puts on the devices it
    /// selects keeps them from claims that do not tolerate it.
    pub fn apply_devicetaintrule(&mut self, rule: &DeviceTaintRule) {
        self.dra.apply_taint_rule(rule);
    }

    /// Forgets a DeviceTaintRule.
    pub fn delete_devicetaintrule(&mut self, name: &str) {
        self.dra.delete_taint_rule(name);
    }

    /// Replaces every DeviceTaintRule (after a relist).
    pub fn reset_devicetaintrules(&mut self, rules: &[DeviceTaintRule]) {
        self.dra.reset_taint_rules(rules);
    }

    /// Records a GPUResource as a watch delivers it: its spec (checked) and
    /// its ledger. A version older than one the controller wrote (see
    /// [`Index::record_write`]) is ignored.
    pub fn apply_gpuresource(&mut self, resource: &GPUResource) {
        let Some(key) = resource_key(resource) else {
            tracing::info!("Ignoring GPUResource without a namespace or name");
            return;
        };
        if let Some(written) = self.key_to_written_version.get(&key) {
            if is_older(resource.metadata.resource_version.as_deref(), written) {
                tracing::debug!(resource = %key, "Ignoring a version older than the one written");
                return;
            }
            self.key_to_written_version.remove(&key);
        }
        self.store_gpuresource(key, resource);
    }

    /// Records a GPUResource the controller has just written (the object
    /// the API server returned), ahead of the watch.
    pub fn record_write(&mut self, resource: &GPUResource) {
        let Some(key) = resource_key(resource) else {
            return;
        };
        match &resource.metadata.resource_version {
            Some(version) => self
                .key_to_written_version
                .insert(key.clone(), version.clone()),
            None => self.key_to_written_version.remove(&key),
        };
        self.store_gpuresource(key, resource);
    }

    fn store_gpuresource(&mut self, key: ObjectKey, resource: &GPUResource) {
        let meta = &resource.metadata;
        let spec_error = resource.spec.check().err();
        if let Some(error) = &spec_error {
            tracing::info!(resource = %key, %error, "Ignoring GPUResource spec");
        }
        let state = ResourceState {
            spec: resource.spec.clone(),
            spec_error,
            allocations: resource
                .status
                .as_ref()
                .map(|status| status.allocations.clone())
                .unwrap_or_default(),
            uid: meta.uid.clone(),
            generation: meta.generation,
            resource_version: meta.resource_version.clone(),
            deleting: meta.deletion_timestamp.is_some(),
            finalizers: meta.finalizers.clone().unwrap_or_default(),
        };
        self.key_to_resource.insert(key, state);
    }

    /// Every GPUResource, as the controller reports on it.
    pub fn resources(&self) -> Vec<ResourceView> {
        self.key_to_resource
            .iter()
            .map(|(key, state)| self.view(key, state))
            .collect()
    }

    /// One GPUResource, as the controller reports on it.
    pub fn resource(&self, key: &ObjectKey) -> Option<ResourceView> {
        self.key_to_resource
            .get(key)
            .map(|state| self.view(key, state))
    }

    fn view(&self, key: &ObjectKey, state: &ResourceState) -> ResourceView {
        ResourceView {
            key: key.clone(),
            uid: state.uid.clone(),
            generation: state.generation,
            resource_version: state.resource_version.clone(),
            policy: self.policy_of(&state.spec).to_string(),
            spec_error: state.spec_error.clone(),
            deleting: state.deleting,
            finalizers: state.finalizers.clone(),
            allocations: state.allocations.clone(),
        }
    }

    /// The policy that places pods of a GPUResource with `spec`.
    fn policy_of<'a>(&'a self, spec: &'a GPUResourceSpec) -> &'a str {
        spec.policy.as_deref().unwrap_or(&self.default_policy)
    }

    /// Forgets a GPUResource (its pods keep the GPUs they hold).
    pub fn delete_gpuresource(&mut self, namespace: &str, name: &str) {
        let key = ObjectKey::new(namespace, name);
        self.key_to_written_version.remove(&key);
        self.key_to_resource.remove(&key);
    }

    /// Replaces every GPUResource (after a relist).
    pub fn reset_gpuresources(&mut self, resources: &[GPUResource]) {
        self.key_to_resource.clear();
        self.key_to_written_version.clear();
        resources.iter().for_each(|r| self.apply_gpuresource(r));
    }

    /// Records a pod; pods of other schedulers are not kept.
    pub fn apply_pod(&mut self, pod: &Pod) {
        let meta = &pod.metadata;
        let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
            tracing::info!("Ignoring Pod without a namespace or name");
            return;
        };
        let key = ObjectKey::new(ns, name);
        match PodFacts::from_pod(pod) {
            Some(facts) => self.key_to_pod.insert(key.clone(), facts),
            None => self.key_to_pod.remove(&key),
        };
        self.resolve_in_flight(&key);
    }

    /// Forgets a pod; the GPUs it held are free.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        let key = ObjectKey::new(namespace, name);
        self.key_to_pod.remove(&key);
        self.preemption_backoffs.forget(&key);
        self.resolve_in_flight(&key);
    }

    /// Replaces every pod (after a relist). From the first call on, ledger
    /// entries of unknown pods are stale (see [`Index::releases`]).
    pub fn reset_pods(&mut self, pods: &[Pod]) {
        self.key_to_pod.clear();
        pods.iter().for_each(|pod| self.apply_pod(pod));
        let in_flight: Vec<ObjectKey> = self.key_to_in_flight.keys().cloned().collect();
        in_flight.iter().for_each(|pod| self.resolve_in_flight(pod));
        self.pods_listed = true;
    }

    /// Ledger entries of earlier versions to remove: their pod is gone,
    /// finished or recreated (the GPUs are free), or carries the allocation
    /// itself now. Stale entries wait until the pods have been listed once
    /// ([`Index::reset_pods`]).
    pub fn releases(&self) -> Vec<Release> {
        self.holdings().releases
    }

    /// The UID of a pod the index knows.
    pub fn pod_uid(&self, pod: &ObjectKey) -> Option<&str> {
        self.key_to_pod.get(pod).map(|facts| facts.uid.as_str())
    }

    /// Records that `pod`'s preemption was blocked at `now_ms` (a victim's
    /// eviction refused): it may not preempt again for the returned time,
    /// doubling with each blocked attempt (see [`backoff`]).
    pub fn preemption_blocked(&mut self, pod: &ObjectKey, now_ms: u64) -> std::time::Duration {
        std::time::Duration::from_millis(self.preemption_backoffs.block(pod, now_ms))
    }

    /// The priority of a pod the index knows (`spec.priority`, 0 unset).
    pub fn pod_priority(&self, pod: &ObjectKey) -> Option<i32> {
        self.key_to_pod.get(pod).map(|facts| facts.priority)
    }

    /// Whether a pod still needs a node: known, not bound, not finished,
    /// not being deleted, no binding in flight.
    pub fn pod_unplaced(&self, pod: &ObjectKey) -> bool {
        self.key_to_pod.get(pod).is_some_and(PodFacts::unplaced)
            && !self.key_to_in_flight.contains_key(pod)
    }

    /// Pods of a GPUResource that still need a node, with their UIDs.
    pub fn unplaced_pods_of(&self, resource: &ObjectKey) -> Vec<(ObjectKey, String)> {
        self.key_to_pod
            .iter()
            .filter(|(key, pod)| {
                key.namespace == resource.namespace
                    && pod.resource.as_deref() == Some(resource.name.as_str())
                    && pod.unplaced()
                    && !self.key_to_in_flight.contains_key(key)
            })
            .map(|(key, pod)| (key.clone(), pod.uid.clone()))
            .collect()
    }

    /// Per GPUResource: pods holding GPUs of its shape and pods referencing
    /// it, for its status (`2/3`). Read once per round.
    pub fn pod_counts(&self) -> HashMap<ObjectKey, PodCounts> {
        self.pod_counts_in(&self.holdings())
    }

    fn pod_counts_in(&self, holdings: &holdings::Holdings) -> HashMap<ObjectKey, PodCounts> {
        // Counted by borrowed names, keyed once per GPUResource at the end.
        let mut counts: holdings::FastMap<(&str, &str), PodCounts> = Default::default();
        for holding in &holdings.live {
            let name = (holding.pod.namespace.as_str(), holding.resource_name);
            counts.entry(name).or_default().holding += 1;
        }
        for (key, pod) in &self.key_to_pod {
            if let Some(resource) = pod.resource.as_deref()
                && !pod.terminal
            {
                counts
                    .entry((key.namespace.as_str(), resource))
                    .or_default()
                    .referencing += 1;
            }
        }
        counts
            .into_iter()
            .map(|((namespace, name), counts)| (ObjectKey::new(namespace, name), counts))
            .collect()
    }
}

/// What a round starts with, read from one view of the holdings.
#[derive(Debug)]
pub struct RoundStart {
    /// Ledger entries of earlier versions to remove.
    pub releases: Vec<Release>,
    /// Earlier versions' allocations to record on their bound pods.
    pub moves: Vec<PendingBinding>,
    /// Bindings to send (again).
    pub unfinished: Vec<PendingBinding>,
    /// Policies with pods waiting for them.
    pub policies: Vec<String>,
    /// Every GPUResource.
    pub resources: Vec<ResourceView>,
    /// PodGroups whose gang reservation is fully applied (or moot).
    pub reservations_done: Vec<ObjectKey>,
    /// Victims of nominations still to evict.
    pub evictions: Vec<Eviction>,
}

/// What a round reports, read from one view of the holdings.
#[derive(Debug)]
pub struct RoundReport {
    /// Every GPUResource.
    pub resources: Vec<ResourceView>,
    /// Per GPUResource, pods holding and asking.
    pub counts: HashMap<ObjectKey, PodCounts>,
    /// Problems users can fix.
    pub problems: Vec<Problem>,
    /// Pods holding unhealthy GPUs.
    pub unhealthy: Vec<UnhealthyHolding>,
    /// Per GPUResource, pods holding an earlier shape.
    pub outdated: BTreeMap<ObjectKey, OutdatedHoldings>,
    /// GPUs by node, model and state, for metrics.
    pub gpus: Vec<GpuState>,
    /// Every GPUTenant with what it holds and waits for.
    pub tenants: Vec<TenantView>,
}

impl Index {
    /// Everything a round starts with, from one reading of the holdings.
    pub fn round_start(&self) -> RoundStart {
        let holdings = self.holdings();
        RoundStart {
            moves: self.allocations_to_move_in(&holdings),
            unfinished: self.bindings_to_finish_in(&holdings),
            policies: self.policies_with_pending_in(&holdings),
            resources: self.resources(),
            releases: holdings.releases,
            reservations_done: self.reservations_to_clear(),
            evictions: self.evictions(),
        }
    }

    /// Everything a round reports, from one reading of the holdings, at
    /// `now_ms` (milliseconds since the Unix epoch: gang timeouts).
    pub fn round_report(&self, now_ms: u64) -> RoundReport {
        let holdings = self.holdings();
        RoundReport {
            resources: self.resources(),
            counts: self.pod_counts_in(&holdings),
            problems: self.problems_in(&holdings, now_ms),
            unhealthy: self.unhealthy_holdings_in(&holdings),
            outdated: self.outdated_holdings_in(&holdings),
            gpus: self.gpu_states_in(&holdings),
            tenants: self.tenant_views_in(&holdings),
        }
    }
}

/// `namespace/name` of a GPUResource, when it has both.
fn resource_key(resource: &GPUResource) -> Option<ObjectKey> {
    let meta = &resource.metadata;
    Some(ObjectKey::new(
        meta.namespace.as_deref()?,
        meta.name.as_deref()?,
    ))
}

/// Whether a delivered version comes before the `written` one. Versions are
/// opaque to clients, but the API server's are increasing integers: compared
/// as such, a newer version (e.g. the delete after a write that changed
/// nothing, whose version the watch never delivers again) ends the wait.
/// Versions that are not integers end the wait only when equal.
fn is_older(delivered: Option<&str>, written: &str) -> bool {
    match (delivered.map(str::parse::<u64>), written.parse::<u64>()) {
        (Some(Ok(delivered)), Ok(written)) => delivered < written,
        _ => delivered != Some(written),
    }
}
