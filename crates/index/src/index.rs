//! The index's state: what it keeps of every object it watches, by key.
//! The files beside this one add to `Index` what it does: `feed` records
//! watched objects, `bound` keeps what bound pods hold as pods change,
//! `holdings` works out who holds which GPU, `snapshot` builds the
//! policies' snapshots, `views` answers the controller.

use std::collections::{BTreeMap, HashMap};

use wasmgpu_api::GPUResourceSpec;

use crate::backoff::Backoffs;
use crate::bound::BoundUse;
use crate::dra::DraInventory;
use crate::facts::binding::InFlight;
use crate::facts::budget::BudgetFacts;
use crate::facts::gang::GangFacts;
use crate::facts::node::NodeFacts;
use crate::facts::pod::PodFacts;
use crate::facts::resource::ResourceState;
use crate::facts::tenant::TenantFacts;
use crate::inventory::NodeInventory;
use crate::key::ObjectKey;
use crate::tally::PodTally;

/// All the cluster state allocation depends on. See the module docs.
#[derive(Debug)]
pub struct Index {
    /// Policy for GPUResources that name none.
    pub(crate) default_policy: String,
    pub(crate) name_to_node: BTreeMap<String, NodeFacts>,
    /// Node name → its GPUs: its GPUNode's merged with those DRA drivers
    /// publish on it (see [`crate::inventory::merge`]).
    pub(crate) node_to_inventory: BTreeMap<String, NodeInventory>,
    /// Node name → the GPUs its GPUNode lists.
    pub(crate) node_to_agent_inventory: BTreeMap<String, NodeInventory>,
    /// ResourceSlices and the ResourceClaims' allocations.
    pub(crate) dra: DraInventory,
    /// Node name → the GPUs its GPUNode listed before it was deleted: pods
    /// wait for the agent to publish it again instead of being told they can
    /// never be placed.
    pub(crate) node_to_lost_inventory: BTreeMap<String, NodeInventory>,
    pub(crate) key_to_resource: BTreeMap<ObjectKey, ResourceState>,
    /// Pods with `schedulerName: wasmgpu`. Changed only through
    /// [`Index::store_pod`], which keeps `bound_use` and `pod_tally` with it.
    pub(crate) key_to_pod: BTreeMap<ObjectKey, PodFacts>,
    /// What bound pods hold by their own allocations, and which pods wait
    /// on a nomination: kept as `key_to_pod` changes.
    pub(crate) bound_use: BoundUse,
    /// Pods counted per GPUResource: kept as `key_to_pod` changes.
    pub(crate) pod_tally: PodTally,
    /// Bindings sent whose pod the watch has not shown bound yet.
    pub(crate) key_to_in_flight: HashMap<ObjectKey, InFlight>,
    /// The pods have been listed once: a ledger entry whose pod is not
    /// known is stale, not merely unseen yet.
    pub(crate) pods_listed: bool,
    /// GPUResources the controller wrote, with the `resourceVersion` the
    /// write returned: older versions still in the watch are ignored until
    /// that one arrives, so the index never forgets a ledger entry it wrote.
    pub(crate) key_to_written_version: HashMap<ObjectKey, String>,
    /// PodGroups (gangs), when their CRD is installed.
    pub(crate) key_to_gang: BTreeMap<ObjectKey, GangFacts>,
    /// PodDisruptionBudgets: which running pods may be evicted now.
    pub(crate) key_to_budget: BTreeMap<ObjectKey, BudgetFacts>,
    /// GPUTenants by name: which namespaces share a quota.
    pub(crate) name_to_tenant: BTreeMap<String, TenantFacts>,
    /// Namespaces' labels, for tenants choosing namespaces by selector.
    pub(crate) namespace_to_labels: HashMap<String, BTreeMap<String, String>>,
    /// How long a bound pod keeps its GPUs before it may be preempted,
    /// unless its tenant sets `minRuntimeSeconds`; ms.
    pub(crate) min_runtime_ms: u64,
    /// Preemptors whose preemption was blocked, backing off.
    pub(crate) preemption_backoffs: Backoffs,
}

impl Index {
    /// An empty index; GPUResources without `spec.policy` use `default_policy`.
    pub fn new(default_policy: impl Into<String>) -> Self {
        Self {
            default_policy: default_policy.into(),
            name_to_node: BTreeMap::new(),
            node_to_inventory: BTreeMap::new(),
            node_to_agent_inventory: BTreeMap::new(),
            dra: DraInventory::default(),
            node_to_lost_inventory: BTreeMap::new(),
            key_to_resource: BTreeMap::new(),
            key_to_pod: BTreeMap::new(),
            bound_use: BoundUse::default(),
            pod_tally: PodTally::default(),
            key_to_in_flight: HashMap::new(),
            pods_listed: false,
            key_to_written_version: HashMap::new(),
            key_to_gang: BTreeMap::new(),
            key_to_budget: BTreeMap::new(),
            name_to_tenant: BTreeMap::new(),
            namespace_to_labels: HashMap::new(),
            min_runtime_ms: 0,
            preemption_backoffs: Backoffs::default(),
        }
    }

    /// How long a bound pod keeps its GPUs before it may be preempted or
    /// reclaimed (`running.protected-ms`), for pods whose tenant sets no
    /// `minRuntimeSeconds`. 0 (the default): no minimum.
    pub fn set_min_runtime(&mut self, min_runtime: std::time::Duration) {
        self.min_runtime_ms = u64::try_from(min_runtime.as_millis()).unwrap_or(u64::MAX);
    }

    /// The policy for GPUResources that name none.
    pub fn default_policy(&self) -> &str {
        &self.default_policy
    }

    /// The policy that places pods of a GPUResource with `spec`.
    pub(crate) fn policy_of<'a>(&'a self, spec: &'a GPUResourceSpec) -> &'a str {
        spec.policy.as_deref().unwrap_or(&self.default_policy)
    }
}
