//! The second inventory source: GPUs a DRA driver publishes as
//! `ResourceSlice`s, and the devices `ResourceClaim` allocations hold.
//!
//! ```text
//!  ResourceSlice ─▶ name_to_slice ─▶ pools (pool rules) ─▶ GPUs by node
//!                                     │  newest generation, complete,
//!                                     │  device names unique
//!                                     ▼
//!                   node(name): the node's GPUs as GpuInfo (MIG instances
//!                   under their parent), each with its DeviceId
//!  ResourceClaim ─▶ key_to_claim ─▶ allocated devices (adminAccess not
//!                                   counted) ─▶ held, whoever allocated them
//! ```
//!
//! The index merges a node's GPUs from here with its GPUNode's: the same
//! UUID is one GPU (published by both), so a node never over-admits when
//! both paths exist. Devices that consume shared counters (dynamic MIG)
//! are counted against them ([`counters`]), so overlapping ones are never
//! held together.

mod cel;
mod claims;
mod counters;
mod device;
mod pools;
pub(crate) mod quantity;
mod taint_rules;

#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaint, DeviceTaintRule, ResourceClaim, ResourceSlice, ResourceSliceSpec,
};
use wasmgpu_api::{GpuInfo, MigInstanceInfo};

use crate::key::ObjectKey;
pub(crate) use cel::{Evaluator, compile};
pub(crate) use claims::{ClaimFacts, ClassFacts};
pub(crate) use counters::NodeCounters;
pub(crate) use device::DraGpu;
pub use pools::PoolProblem;
pub(crate) use pools::{DeviceId, PoolKey};

/// What the index keeps of ResourceSlices and ResourceClaims.
#[derive(Debug, Default)]
pub(crate) struct DraInventory {
    /// Slice name → its pool and spec.
    name_to_slice: BTreeMap<String, (PoolKey, ResourceSliceSpec)>,
    /// Pool → the names of its slices.
    pool_to_slices: BTreeMap<PoolKey, BTreeSet<String>>,
    /// Pool → its GPUs by node, or why it is unusable.
    pool_to_view: BTreeMap<PoolKey, Result<Vec<(String, DraGpu)>, PoolProblem>>,
    /// Node → the pools with GPUs on it.
    node_to_pools: BTreeMap<String, BTreeSet<PoolKey>>,
    /// Device → its node and UUID.
    device_to_gpu: HashMap<DeviceId, (String, String)>,
    /// Claim → what it asks for and the devices its allocation holds.
    key_to_claim: BTreeMap<ObjectKey, ClaimFacts>,
    /// Device → the claims whose allocation holds it (one, unless two
    /// schedulers raced for it).
    device_to_claims: HashMap<DeviceId, Vec<ObjectKey>>,
    /// DeviceClass → its compiled selectors and configuration.
    name_to_class: BTreeMap<String, ClassFacts>,
    /// Taints DeviceTaintRules put on devices.
    taint_rules: taint_rules::TaintRules,
}

/// A node's GPUs from DRA, as the GPUNode path lists them.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DraNode {
    /// Whole GPUs sorted by index, MIG instances under their parent.
    pub gpus: Vec<GpuInfo>,
    /// UUID → the device (whole GPU or MIG instance).
    pub uuid_to_device: HashMap<String, DeviceId>,
    /// Parents of published MIG instances that are not published
    /// themselves (static MIG): never allocatable whole.
    pub unpublished: HashSet<String>,
    /// The shared counters its devices consume.
    pub counters: NodeCounters,
}

impl DraInventory {
    /// Records a ResourceSlice; returns the nodes whose GPUs may have changed.
    pub fn apply_slice(&mut self, slice: &ResourceSlice) -> BTreeSet<String> {
        let Some(name) = slice.metadata.name.clone() else {
            return BTreeSet::new();
        };
        let key = PoolKey {
            driver: slice.spec.driver.clone(),
            pool: slice.spec.pool.name.clone(),
        };
        let old = self.insert_slice(name, key.clone(), slice.spec.clone());
        let mut touched = self.recompute(&key);
        if let Some(old_key) = old
            && old_key != key
        {
            touched.extend(self.recompute(&old_key));
        }
        touched
    }

    /// Forgets a ResourceSlice; returns the nodes whose GPUs may have changed.
    pub fn delete_slice(&mut self, name: &str) -> BTreeSet<String> {
        match self.remove_slice(name) {
            Some(key) => self.recompute(&key),
            None => BTreeSet::new(),
        }
    }

    /// Stores a slice under its pool; returns the pool it was under before.
    fn insert_slice(
        &mut self,
        name: String,
        key: PoolKey,
        spec: ResourceSliceSpec,
    ) -> Option<PoolKey> {
        let old = self.remove_slice(&name);
        self.pool_to_slices
            .entry(key.clone())
            .or_default()
            .insert(name.clone());
        self.name_to_slice.insert(name, (key, spec));
        old
    }

    /// Forgets a slice; returns its pool.
    fn remove_slice(&mut self, name: &str) -> Option<PoolKey> {
        let (key, _) = self.name_to_slice.remove(name)?;
        if let Some(names) = self.pool_to_slices.get_mut(&key) {
            names.remove(name);
            if names.is_empty() {
                self.pool_to_slices.remove(&key);
            }
        }
        Some(key)
    }

    /// Replaces every ResourceSlice (after a relist); returns the nodes
    /// whose GPUs may have changed.
    pub fn reset_slices(&mut self, slices: &[ResourceSlice]) -> BTreeSet<String> {
        let mut touched: BTreeSet<String> = self.node_to_pools.keys().cloned().collect();
        self.name_to_slice.clear();
        self.pool_to_slices.clear();
        self.pool_to_view.clear();
        self.node_to_pools.clear();
        self.device_to_gpu.clear();
        for slice in slices {
            if let Some(name) = &slice.metadata.name {
                let key = PoolKey {
                    driver: slice.spec.driver.clone(),
                    pool: slice.spec.pool.name.clone(),
                };
                self.insert_slice(name.clone(), key, slice.spec.clone());
            }
        }
        let keys: Vec<PoolKey> = self.pool_to_slices.keys().cloned().collect();
        for key in keys {
            touched.extend(self.recompute(&key));
        }
        touched
    }

    /// Reads one pool again from its slices.
    fn recompute(&mut self, key: &PoolKey) -> BTreeSet<String> {
        let mut touched = BTreeSet::new();
        if let Some(Ok(old)) = self.pool_to_view.remove(key) {
            for (node, gpu) in old {
                self.device_to_gpu.remove(&gpu.id);
                if let Some(pools) = self.node_to_pools.get_mut(&node) {
                    pools.remove(key);
                    if pools.is_empty() {
                        self.node_to_pools.remove(&node);
                    }
                }
                touched.insert(node);
            }
        }
        let slices: Vec<&ResourceSliceSpec> = self
            .pool_to_slices
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|name| self.name_to_slice.get(name))
            .map(|(_, spec)| spec)
            .collect();
        if slices.is_empty() {
            return touched;
        }
        let view = pools::pool_of(slices).map(|pool| {
            let (gpus, skipped) = device::gpus_of(key, &pool);
            for skip in skipped {
                tracing::debug!(%key, ?skip, "Not a GPU");
            }
            gpus
        });
        match &view {
            Ok(gpus) => {
                for (node, gpu) in gpus {
                    self.node_to_pools
                        .entry(node.clone())
                        .or_default()
                        .insert(key.clone());
                    self.device_to_gpu
                        .insert(gpu.id.clone(), (node.clone(), gpu.uuid.clone()));
                    touched.insert(node.clone());
                }
            }
            Err(problem) => tracing::info!(%key, %problem, "ResourceSlice pool not used"),
        }
        self.pool_to_view.insert(key.clone(), view);
        touched
    }

    /// The pools that are not used, why, and a slice of each (the last by
    /// name) to report on.
    pub fn problems(&self) -> Vec<(&PoolKey, &PoolProblem, &str)> {
        self.pool_to_view
            .iter()
            .filter_map(|(key, view)| {
                let problem = view.as_ref().err()?;
                let slice = self.pool_to_slices.get(key)?.last()?;
                Some((key, problem, slice.as_str()))
            })
            .collect()
    }

    /// The GPUs DRA drivers publish on `node`; `None` when there are none.
    pub fn node(&self, node: &str) -> Option<DraNode> {
        let pools = self.node_to_pools.get(node)?;
        let gpus: Vec<&DraGpu> = pools
            .iter()
            .filter_map(|key| self.pool_to_view.get(key)?.as_ref().ok())
            .flatten()
            .filter(|(n, _)| n == node)
            .map(|(_, gpu)| gpu)
            .collect();
        Some(assemble(node, &gpus))
    }

    /// Where a device is: its node and UUID.
    pub fn locate(&self, id: &DeviceId) -> Option<(&str, &str)> {
        self.device_to_gpu
            .get(id)
            .map(|(node, uuid)| (node.as_str(), uuid.as_str()))
    }

    /// Records a ResourceClaim.
    pub fn apply_claim(&mut self, claim: &ResourceClaim) {
        let (Some(namespace), Some(name)) = (&claim.metadata.namespace, &claim.metadata.name)
        else {
            return;
        };
        let key = ObjectKey::new(namespace, name);
        self.forget_holder(&key);
        let facts = ClaimFacts::of(claim);
        for device in &facts.held {
            self.device_to_claims
                .entry(device.clone())
                .or_default()
                .push(key.clone());
        }
        self.key_to_claim.insert(key, facts);
    }

    /// Forgets a ResourceClaim: its devices are free.
    pub fn delete_claim(&mut self, namespace: &str, name: &str) {
        let key = ObjectKey::new(namespace, name);
        self.forget_holder(&key);
        self.key_to_claim.remove(&key);
    }

    /// Takes `key`'s devices out of `device_to_claims`.
    fn forget_holder(&mut self, key: &ObjectKey) {
        let Some(old) = self.key_to_claim.get(key) else {
            return;
        };
        for device in &old.held {
            if let Some(holders) = self.device_to_claims.get_mut(device) {
                holders.retain(|k| k != key);
                if holders.is_empty() {
                    self.device_to_claims.remove(device);
                }
            }
        }
    }

    /// Replaces every ResourceClaim (after a relist).
    pub fn reset_claims(&mut self, claims: &[ResourceClaim]) {
        self.key_to_claim.clear();
        self.device_to_claims.clear();
        claims.iter().for_each(|c| self.apply_claim(c));
    }

    /// The claims whose allocation holds `device`.
    pub fn holders_of(&self, device: &DeviceId) -> &[ObjectKey] {
        self.device_to_claims.get(device).map_or(&[], Vec::as_slice)
    }

    /// A ResourceClaim, as last watched.
    pub fn claim(&self, key: &ObjectKey) -> Option<&ClaimFacts> {
        self.key_to_claim.get(key)
    }

    /// The ResourceClaims of `namespace`.
    pub fn claims_in<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a ResourceClaim> {
        let first = ObjectKey::new(namespace, "");
        self.key_to_claim
            .range(first..)
            .take_while(move |(k, _)| k.namespace == namespace)
            .map(|(_, c)| &*c.claim)
    }

    /// Records a DeviceClass (compiling its selectors).
    pub fn apply_class(&mut self, class: &DeviceClass) {
        if let Some(name) = &class.metadata.name {
            self.name_to_class
                .insert(name.clone(), ClassFacts::of(class));
        }
    }

    /// The DeviceClass that serves extended resource `name`: the one whose
    /// `spec.extendedResourceName` it is (the first by name when several
    /// claim it), else the class `deviceclass.resource.kubernetes.io/<class>`
    /// names implicitly.
    pub fn class_for_extended(&self, name: &str) -> Option<&str> {
        let explicit = self
            .name_to_class
            .iter()
            .filter(|(_, c)| c.extended_resource_name.as_deref() == Some(name))
            .map(|(n, _)| n.as_str())
            .min();
        explicit.or_else(|| {
            let class = name.strip_prefix(crate::facts::containers::IMPLICIT_PREFIX)?;
            self.name_to_class
                .get_key_value(class)
                .map(|(n, _)| n.as_str())
        })
    }

    /// Forgets a DeviceClass.
    pub fn delete_class(&mut self, name: &str) {
        self.name_to_class.remove(name);
    }

    /// Replaces every DeviceClass (after a relist).
    pub fn reset_classes(&mut self, classes: &[DeviceClass]) {
        self.name_to_class.clear();
        classes.iter().for_each(|c| self.apply_class(c));
    }

    /// Records a DeviceTaintRule (added or changed).
    pub fn apply_taint_rule(&mut self, rule: &DeviceTaintRule) {
        self.taint_rules.apply(rule);
    }

    /// Forgets a DeviceTaintRule.
    pub fn delete_taint_rule(&mut self, name: &str) {
        self.taint_rules.delete(name);
    }

    /// Replaces every DeviceTaintRule (after a relist).
    pub fn reset_taint_rules(&mut self, rules: &[DeviceTaintRule]) {
        self.taint_rules.reset(rules);
    }

    /// Every taint of `gpu`: those its slice publishes, then those
    /// DeviceTaintRules put on it.
    pub fn taints_of<'a>(&'a self, gpu: &'a DraGpu) -> impl Iterator<Item = &'a DeviceTaint> {
        gpu.published
            .taints
            .iter()
            .flatten()
            .chain(self.taint_rules.taints_of(&gpu.id).map(|(_, taint)| taint))
    }

    /// A DeviceClass by name.
    pub fn class(&self, name: &str) -> Option<&ClassFacts> {
        self.name_to_class.get(name)
    }

    /// Every device of the usable pools, with its node.
    pub fn devices(&self) -> impl Iterator<Item = (&str, &DraGpu)> {
        self.pool_to_view
            .values()
            .filter_map(|view| view.as_ref().ok())
            .flatten()
            .map(|(node, gpu)| (node.as_str(), gpu))
    }

    /// The device with `uuid` on `node`, if a usable pool publishes it.
    pub fn device_on(&self, node: &str, uuid: &str) -> Option<&DraGpu> {
        self.node_to_pools
            .get(node)?
            .iter()
            .filter_map(|key| self.pool_to_view.get(key)?.as_ref().ok())
            .flatten()
            .find(|(n, gpu)| n == node && gpu.uuid == uuid)
            .map(|(_, gpu)| gpu)
    }

    /// Every allocated device with the claim holding it.
    pub fn allocated(&self) -> impl Iterator<Item = (&ObjectKey, &DeviceId)> {
        self.key_to_claim
            .iter()
            .flat_map(|(claim, facts)| facts.held.iter().map(move |d| (claim, d)))
    }
}

/// A node's DRA GPUs in the GPUNode shape: whole GPUs by index (those
/// without one numbered after the rest), each MIG instance under its
/// parent; a parent that is not published itself is listed, and marked
/// unpublished, so that its instances have a place.
fn assemble(node: &str, gpus: &[&DraGpu]) -> DraNode {
    let mut out = DraNode::default();
    let mut uuid_to_position: HashMap<String, usize> = HashMap::new();
    let mut wholes: Vec<&DraGpu> = gpus.iter().copied().filter(|g| g.mig.is_none()).collect();
    wholes.sort_by_key(|g| (g.index.is_none(), g.index, g.id.device.clone()));
    let mut used: HashSet<u32> = HashSet::new();
    let next_index = |wanted: Option<u32>, used: &mut HashSet<u32>| {
        if let Some(i) = wanted.filter(|i| used.insert(*i)) {
            return i;
        }
        let i = (0..).find(|i| !used.contains(i)).unwrap_or(0);
        used.insert(i);
        i
    };
    for gpu in wholes {
        if uuid_to_position.contains_key(&gpu.uuid) {
            tracing::info!(%node, uuid = %gpu.uuid, device = %gpu.id, "Ignoring a device repeating a UUID");
            continue;
        }
        uuid_to_position.insert(gpu.uuid.clone(), out.gpus.len());
        out.uuid_to_device.insert(gpu.uuid.clone(), gpu.id.clone());
        out.counters.add(&gpu.uuid, &gpu.consumes);
        out.gpus.push(GpuInfo {
            uuid: gpu.uuid.clone(),
            index: next_index(gpu.index, &mut used),
            model: gpu.model.clone(),
            memory_total_mib: gpu.memory_mib,
            pci_bus_id: gpu.pci_bus_id.clone(),
            numa_node: gpu.numa_node,
            healthy: true,
            ..GpuInfo::default()
        });
    }
    for gpu in gpus.iter().filter(|g| g.mig.is_some()) {
        let mig = gpu.mig.as_ref().expect("filtered");
        let Some(parent) = mig.parent_uuid.clone() else {
            tracing::info!(%node, device = %gpu.id, "Ignoring a MIG device whose parent GPU is unknown (no parentUUID, no shared counter set)");
            continue;
        };
        if out.uuid_to_device.contains_key(&gpu.uuid) {
            tracing::info!(%node, uuid = %gpu.uuid, device = %gpu.id, "Ignoring a device repeating a UUID");
            continue;
        }
        let position = *uuid_to_position.entry(parent.clone()).or_insert_with(|| {
            out.unpublished.insert(parent.clone());
            out.gpus.push(GpuInfo {
                uuid: parent.clone(),
                index: next_index(None, &mut used),
                model: gpu.model.clone(),
                numa_node: gpu.numa_node,
                healthy: true,
                ..GpuInfo::default()
            });
            out.gpus.len() - 1
        });
        out.uuid_to_device.insert(gpu.uuid.clone(), gpu.id.clone());
        out.counters.add(&gpu.uuid, &gpu.consumes);
        out.gpus[position].mig_instances.push(MigInstanceInfo {
            uuid: gpu.uuid.clone(),
            profile: mig.profile.clone(),
            memory_total_mib: gpu.memory_mib,
            ..MigInstanceInfo::default()
        });
    }
    for gpu in &mut out.gpus {
        if !gpu.mig_instances.is_empty() {
            gpu.mig_mode = Some(wasmgpu_api::MigMode::Enabled);
            gpu.mig_instances.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        }
    }
    out.gpus.sort_by_key(|g| g.index);
    out
}
