//! What bound pods hold, kept as the pod watch reports them.
//!
//! ```text
//!  apply_pod / delete_pod / reset_pods
//!        │  the pod's old facts out, its new facts in
//!        ▼
//!  BoundUse ── node ─▶ GPU uuid ─▶ exclusive holders, shared MiB and holders
//!                                  (counted)
//!           └─ pods waiting on a nomination
//! ```
//!
//! A bound pod's own allocation (`wasmgpu.io/allocation`, bound, not
//! finished) is what holds most GPUs of a full cluster. It changes only
//! when the pod does, so it is kept here and updated from each pod's old
//! and new facts instead of being read again from every pod each time the
//! holdings are read; [`crate::holdings`] lays the few other sources (claims,
//! nominations, bindings in flight, reservations, ledger entries) over it.

use std::collections::BTreeSet;

use crate::facts::pod::PodFacts;
use crate::fast_map::FastMap;
use crate::key::ObjectKey;
use wasmgpu_api::{PodAllocation, Sharing};

/// What bound pods keep on one GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BoundGpu {
    /// Exclusive holders, once per device entry naming the GPU (who they
    /// are is not kept: only whether there is one decides anything).
    exclusive: u32,
    /// Memory promised to shared holders, MiB, summed without saturating
    /// (read saturated, so that taking a holder away stays exact).
    shared_mib: u128,
    /// Shared holders, once per device entry naming the GPU.
    shared_owners: u32,
}

impl BoundGpu {
    /// Whether a pod holds it exclusively.
    pub fn held_exclusively(&self) -> bool {
        self.exclusive > 0
    }

    /// Memory promised to shared holders, MiB.
    pub fn shared_mib(&self) -> u64 {
        u64::try_from(self.shared_mib).unwrap_or(u64::MAX)
    }

    /// Shared holders.
    pub fn shared_owners(&self) -> u32 {
        self.shared_owners
    }

    fn is_empty(&self) -> bool {
        self.exclusive == 0 && self.shared_owners == 0
    }
}

/// What every bound pod holds, and which pods wait on a nomination.
#[derive(Clone, Debug, Default)]
pub(crate) struct BoundUse {
    /// Node → what bound pods keep on its GPUs (as their allocations name
    /// them, whether or not an inventory lists the GPU).
    node_to_gpus: FastMap<String, NodeUse>,
    /// Hashes the GPUs' uuids within a node's entries.
    hasher: ahash::RandomState,
    /// Pods whose nomination holds GPUs for them (see
    /// [`PodFacts::nomination`]).
    nominated: BTreeSet<ObjectKey>,
}

/// What bound pods keep on one node's GPUs. A node has a handful: a list
/// scanned by hash is read with fewer cache misses than a map, GPU by GPU,
/// as a snapshot reads every GPU of every node.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeUse {
    gpus: Vec<(u64, String, BoundGpu)>,
}

impl NodeUse {
    fn find(&self, hash: u64, uuid: &str) -> Option<usize> {
        self.gpus
            .iter()
            .position(|(h, u, _)| *h == hash && u == uuid)
    }
}

/// What bound pods keep on one node's GPUs, to look up by uuid.
#[derive(Clone, Copy)]
pub(crate) struct NodeBound<'b> {
    gpus: &'b NodeUse,
    hasher: &'b ahash::RandomState,
}

impl<'b> NodeBound<'b> {
    /// What bound pods keep on GPU `uuid`.
    pub fn gpu(&self, uuid: &str) -> Option<&'b BoundGpu> {
        let at = self.gpus.find(self.hasher.hash_one(uuid), uuid)?;
        Some(&self.gpus.gpus[at].2)
    }
}

impl BoundUse {
    /// What bound pods keep on the GPUs of `node`.
    pub fn on_node(&self, node: &str) -> Option<NodeBound<'_>> {
        let gpus = self.node_to_gpus.get(node)?;
        Some(NodeBound {
            gpus,
            hasher: &self.hasher,
        })
    }

    /// Every GPU bound pods keep something on, as `(node, uuid)`.
    #[cfg(test)]
    pub fn gpus(&self) -> impl Iterator<Item = ((&str, &str), &BoundGpu)> {
        self.node_to_gpus.iter().flat_map(|(node, gpus)| {
            gpus.gpus
                .iter()
                .map(move |(_, uuid, gpu)| ((node.as_str(), uuid.as_str()), gpu))
        })
    }

    /// Pods waiting on a nomination, by key.
    pub fn nominated(&self) -> &BTreeSet<ObjectKey> {
        &self.nominated
    }

    /// `pod` changes from `old` to `new` (either `None`: not known).
    pub fn replace(&mut self, pod: &ObjectKey, old: Option<&PodFacts>, new: Option<&PodFacts>) {
        if let Some(allocation) = old.and_then(held_by_itself) {
            self.take(allocation);
        }
        if let Some(allocation) = new.and_then(held_by_itself) {
            self.add(allocation);
        }
        if new.is_some_and(|p| p.nomination().is_some()) {
            if old.is_none_or(|p| p.nomination().is_none()) {
                self.nominated.insert(pod.clone());
            }
        } else if old.is_some_and(|p| p.nomination().is_some()) {
            self.nominated.remove(pod);
        }
    }

    /// Forgets every pod (before a relist).
    pub fn clear(&mut self) {
        self.node_to_gpus.clear();
        self.nominated.clear();
    }

    fn add(&mut self, allocation: &PodAllocation) {
        if !self.node_to_gpus.contains_key(allocation.node.as_str()) {
            self.node_to_gpus
                .insert(allocation.node.clone(), NodeUse::default());
        }
        let node = self
            .node_to_gpus
            .get_mut(allocation.node.as_str())
            .expect("inserted above");
        for device in &allocation.devices {
            let hash = self.hasher.hash_one(device.uuid.as_str());
            let at = node.find(hash, &device.uuid).unwrap_or_else(|| {
                node.gpus
                    .push((hash, device.uuid.clone(), BoundGpu::default()));
                node.gpus.len() - 1
            });
            let gpu = &mut node.gpus[at].2;
            match allocation.sharing {
                Sharing::Exclusive => gpu.exclusive += 1,
                Sharing::Shared => {
                    gpu.shared_mib += u128::from(device.memory_mib);
                    gpu.shared_owners += 1;
                }
            }
        }
    }

    fn take(&mut self, allocation: &PodAllocation) {
        let Some(node) = self.node_to_gpus.get_mut(allocation.node.as_str()) else {
            return;
        };
        for device in &allocation.devices {
            let hash = self.hasher.hash_one(device.uuid.as_str());
            let Some(at) = node.find(hash, &device.uuid) else {
                continue;
            };
            let gpu = &mut node.gpus[at].2;
            match allocation.sharing {
                Sharing::Exclusive => gpu.exclusive = gpu.exclusive.saturating_sub(1),
                Sharing::Shared => {
                    gpu.shared_mib = gpu.shared_mib.saturating_sub(device.memory_mib.into());
                    gpu.shared_owners = gpu.shared_owners.saturating_sub(1);
                }
            }
            if gpu.is_empty() {
                node.gpus.swap_remove(at);
            }
        }
        if node.gpus.is_empty() {
            self.node_to_gpus.remove(allocation.node.as_str());
        }
    }
}

/// The allocation a pod holds by itself: recorded on it, readable, while it
/// is bound and not finished.
pub(crate) fn held_by_itself(pod: &PodFacts) -> Option<&PodAllocation> {
    if pod.terminal || pod.node_name.is_none() {
        return None;
    }
    match &pod.allocation {
        Some(Ok(allocation)) => Some(allocation),
        _ => None,
    }
}
