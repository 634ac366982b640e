//! Reading the GPUResource ledgers: who holds which GPU, and which entries
//! are stale.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use super::{Index, ObjectKey};
use crate::api::{Allocation, Sharing};
use crate::engine::types::Usage;

/// A ledger entry the controller should remove from its GPUResource's
/// status: its pod no longer needs the GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// The GPUResource whose `status.allocations` holds the entry.
    pub resource: ObjectKey,
    /// The entry's `pod` (a name in the GPUResource's namespace).
    pub pod: String,
    /// The entry's `podUID`.
    pub pod_uid: String,
    /// Why the entry is stale.
    pub reason: ReleaseReason,
}

/// Why a ledger entry no longer holds its GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseReason {
    /// No pod of that name exists any more.
    PodDeleted,
    /// The pod finished (`Succeeded` or `Failed`).
    PodFinished,
    /// A pod of that name exists, but with another UID: it was recreated.
    PodReplaced,
}

impl fmt::Display for ReleaseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::PodDeleted => "pod deleted",
            Self::PodFinished => "pod finished",
            Self::PodReplaced => "pod recreated with another UID",
        })
    }
}

/// What live ledger entries hold on one GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GpuUse {
    /// The pod (`namespace/name`) holding the GPU exclusively.
    pub exclusive_owner: Option<String>,
    /// Memory promised to shared holders, MiB.
    pub shared_mib: u64,
    /// Number of shared holders.
    pub shared_owners: u32,
}

/// A ledger entry whose pod still holds its GPUs.
#[derive(Clone, Debug)]
pub(crate) struct LiveEntry {
    /// The GPUResource whose ledger holds it.
    pub resource: ObjectKey,
    /// The pod.
    pub pod: ObjectKey,
    pub allocation: Allocation,
}

/// All ledgers read together.
#[derive(Debug, Default)]
pub(crate) struct Ledgers {
    /// `(node, GPU uuid)` → what live entries hold on it.
    pub gpu_to_use: HashMap<(String, String), GpuUse>,
    /// Namespace → GPUs its live entries hold.
    pub namespace_to_usage: BTreeMap<String, Usage>,
    /// `(pod, pod UID)` of every live entry.
    pub holders: HashSet<(ObjectKey, String)>,
    /// Live entries.
    pub live: Vec<LiveEntry>,
    /// Stale entries.
    pub releases: Vec<Release>,
}

// === impl Index ===

impl Index {
    /// Reads every ledger. Until the pods have been listed once
    /// (`reset_pods`) every entry counts as live: GPUs are never handed out
    /// twice because the index had not seen a pod yet.
    pub(crate) fn ledgers(&self) -> Ledgers {
        let mut ledgers = Ledgers::default();
        for (resource, state) in &self.key_to_resource {
            for entry in &state.allocations {
                let pod = ObjectKey::new(&resource.namespace, &entry.pod);
                match self.staleness(&pod, entry) {
                    Some(reason) => ledgers.releases.push(Release {
                        resource: resource.clone(),
                        pod: entry.pod.clone(),
                        pod_uid: entry.pod_uid.clone(),
                        reason,
                    }),
                    None => ledgers.hold(resource, pod, entry),
                }
            }
        }
        ledgers
    }

    /// Why an entry is stale, or `None` while its pod still holds the GPUs.
    fn staleness(&self, pod: &ObjectKey, entry: &Allocation) -> Option<ReleaseReason> {
        if !self.pods_listed {
            return None;
        }
        match self.key_to_pod.get(pod) {
            None => Some(ReleaseReason::PodDeleted),
            Some(facts) if facts.uid != entry.pod_uid => Some(ReleaseReason::PodReplaced),
            Some(facts) if facts.terminal => Some(ReleaseReason::PodFinished),
            Some(_) => None,
        }
    }
}

// === impl Ledgers ===

impl Ledgers {
    fn hold(&mut self, resource: &ObjectKey, pod: ObjectKey, entry: &Allocation) {
        let usage = self
            .namespace_to_usage
            .entry(pod.namespace.clone())
            .or_insert_with(|| Usage {
                namespace: pod.namespace.clone(),
                exclusive_gpus: 0,
                shared_mib: 0,
            });
        for device in &entry.devices {
            let gpu = self
                .gpu_to_use
                .entry((entry.node.clone(), device.uuid.clone()))
                .or_default();
            match entry.sharing {
                Sharing::Exclusive => {
                    usage.exclusive_gpus += 1;
                    gpu.exclusive_owner.get_or_insert_with(|| pod.to_string());
                }
                Sharing::Shared => {
                    usage.shared_mib += device.memory_mib;
                    gpu.shared_mib += device.memory_mib;
                    gpu.shared_owners += 1;
                }
            }
        }
        self.holders.insert((pod.clone(), entry.pod_uid.clone()));
        self.live.push(LiveEntry {
            resource: resource.clone(),
            pod,
            allocation: entry.clone(),
        });
    }
}

/// One GPU and whether it is taken, for metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuState {
    /// The node.
    pub node: String,
    /// The GPU's model.
    pub model: String,
    /// `allocated` (a live ledger entry holds it, exclusively or a share),
    /// `free`, or `unhealthy`.
    pub state: &'static str,
}

impl Index {
    /// Every GPU of every inventory, with its state.
    pub fn gpu_states(&self) -> Vec<GpuState> {
        let ledgers = self.ledgers();
        self.node_to_inventory
            .iter()
            .flat_map(|(node, inventory)| {
                let ledgers = &ledgers;
                inventory.gpus.iter().map(move |gpu| GpuState {
                    node: node.clone(),
                    model: gpu.model.clone(),
                    state: if !gpu.healthy {
                        "unhealthy"
                    } else if ledgers
                        .gpu_to_use
                        .contains_key(&(node.clone(), gpu.uuid.clone()))
                    {
                        "allocated"
                    } else {
                        "free"
                    },
                })
            })
            .collect()
    }
}
