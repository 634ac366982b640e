//! What changed under running pods: a GPU a pod holds turned unhealthy, or
//! the pod's GPUResource changed shape after the pod got its GPUs. Neither
//! frees anything (the pod keeps what it holds until it finishes); both are
//! told to users.

use std::collections::BTreeMap;

use super::fast_map::FastMap;
use super::holdings::Holdings;
use crate::index::Index;
use crate::inventory::NodeInventory;
use crate::key::ObjectKey;
use wasmgpu_api::{PodAllocation, Sharing};

/// A pod holding a GPU its agent reports unhealthy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnhealthyHolding {
    /// The pod.
    pub pod: ObjectKey,
    /// The pod's UID.
    pub uid: String,
    /// Its GPUResource.
    pub resource: ObjectKey,
    /// The node.
    pub node: String,
    /// The GPU's UUID.
    pub gpu: String,
    /// The GPU's index on the node.
    pub index: u32,
    /// Why the agent says so.
    pub reason: String,
}

/// Pods of one GPUResource holding GPUs allocated for an earlier spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutdatedHoldings {
    /// The pods, by name, with the shape they hold (`2 exclusive GPUs`).
    pub pod_to_shape: BTreeMap<String, String>,
    /// The shape the spec asks for now.
    pub now: String,
}

// === impl Index ===

impl Index {
    /// Pods holding GPUs that are unhealthy now.
    pub fn unhealthy_holdings(&self) -> Vec<UnhealthyHolding> {
        self.unhealthy_holdings_in(&self.holdings())
    }

    pub(super) fn unhealthy_holdings_in(&self, holdings: &Holdings) -> Vec<UnhealthyHolding> {
        let mut found = Vec::new();
        // Only nodes with an unhealthy GPU are looked at: usually none.
        let unhealthy: FastMap<&str, &NodeInventory> = self
            .node_to_inventory
            .iter()
            .filter(|(_, inventory)| inventory.gpus.iter().any(|g| !g.healthy))
            .map(|(node, inventory)| (node.as_str(), inventory))
            .collect();
        if unhealthy.is_empty() {
            return found;
        }
        for holding in holdings.live() {
            let Some(inventory) = unhealthy.get(holding.allocation.node.as_str()) else {
                continue;
            };
            for device in &holding.allocation.devices {
                if let Some(gpu) = inventory
                    .gpus
                    .iter()
                    .find(|g| !g.healthy && g.uuid == device.uuid)
                {
                    found.push(UnhealthyHolding {
                        pod: holding.pod.clone(),
                        uid: holding.uid.to_string(),
                        resource: holding.resource(),
                        node: holding.allocation.node.clone(),
                        gpu: gpu.uuid.clone(),
                        index: gpu.index,
                        reason: gpu
                            .unhealthy_reason
                            .clone()
                            .unwrap_or_else(|| "reported unhealthy by its agent".into()),
                    });
                }
            }
        }
        found
    }

    /// Per GPUResource, the pods that hold GPUs of another shape than its
    /// spec asks for now (count, sharing, or a shared pod's memory).
    pub fn outdated_holdings(&self) -> BTreeMap<ObjectKey, OutdatedHoldings> {
        self.outdated_holdings_in(&self.holdings())
    }

    pub(super) fn outdated_holdings_in(
        &self,
        holdings: &Holdings,
    ) -> BTreeMap<ObjectKey, OutdatedHoldings> {
        let mut found: BTreeMap<ObjectKey, OutdatedHoldings> = BTreeMap::new();
        // Looked up by borrowed names: no key is built per holding.
        let name_to_resource: FastMap<(&str, &str), _> = self
            .key_to_resource
            .iter()
            .map(|(key, state)| ((key.namespace.as_str(), key.name.as_str()), state))
            .collect();
        for holding in holdings.live() {
            let name = (holding.pod.namespace.as_str(), holding.resource_name);
            let Some(state) = name_to_resource.get(&name) else {
                continue;
            };
            let spec = &state.spec;
            let held = holding.allocation;
            let held_mib = held.devices.first().map_or(0, |d| d.memory_mib);
            let same = held.devices.len() == spec.count as usize
                && held.sharing == spec.sharing
                && (spec.sharing == Sharing::Exclusive || held_mib == spec.memory_mib);
            if same {
                continue;
            }
            found
                .entry(holding.resource())
                .or_insert_with(|| OutdatedHoldings {
                    pod_to_shape: BTreeMap::new(),
                    now: describe(spec.count as usize, spec.sharing, spec.memory_mib),
                })
                .pod_to_shape
                .insert(holding.pod.name.clone(), shape(held));
        }
        found
    }
}

fn shape(allocation: &PodAllocation) -> String {
    describe(
        allocation.devices.len(),
        allocation.sharing,
        allocation.devices.first().map_or(0, |d| d.memory_mib),
    )
}

fn describe(count: usize, sharing: Sharing, mib: u64) -> String {
    match sharing {
        Sharing::Exclusive => format!("{count} exclusive GPU(s)"),
        Sharing::Shared => format!("{count} shared GPU(s), {mib} MiB each"),
    }
}
