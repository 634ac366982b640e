//! What the index keeps of a `GPUNode`: the node's GPUs.

use std::collections::HashSet;
use std::sync::Arc;

use wasmgpu_api::{GPUNode, GpuInfo};
use wasmgpu_contract::types::Publisher;

use crate::dra::{DraNode, NodeCounters};
use crate::layout::NodeLayout;

/// A node's GPUs (whole GPUs sorted by index, each with its MIG instances),
/// UUIDs unique, and which inventory publishes each.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NodeInventory {
    /// Shared between the agent's inventory and the merged one while no
    /// DRA driver adds to it (most nodes): one copy of each GPU.
    pub gpus: Arc<Vec<GpuInfo>>,
    /// UUIDs only a DRA driver publishes (a claim may take them; a
    /// GPUResource may not: the agent does not hand them out).
    pub dra_only: HashSet<String>,
    /// UUIDs both the agent and a DRA driver publish.
    pub both: HashSet<String>,
    /// Parents of DRA-published MIG instances that are not published
    /// whole (static MIG): never allocatable whole.
    pub unpublished: HashSet<String>,
    /// The DRA shared counters its devices consume.
    pub counters: NodeCounters,
    /// Its GPUs as a snapshot lays them out: set by [`NodeInventory::laid_out`]
    /// for the merged inventories snapshots read, empty in the agent's.
    pub layout: NodeLayout,
}

impl NodeInventory {
    /// The inventory in a GPUNode's status; `None` until the agent has
    /// published one. GPUs without a UUID, or repeating one, are skipped.
    pub fn from_gpunode(gpunode: &GPUNode) -> Option<Self> {
        let status = gpunode.status.as_ref()?;
        let name = gpunode.metadata.name.as_deref().unwrap_or_default();
        let mut seen_uuids = HashSet::new();
        let mut gpus: Vec<GpuInfo> = status
            .gpus
            .iter()
            .filter(|gpu| {
                let fresh = !gpu.uuid.is_empty() && seen_uuids.insert(gpu.uuid.as_str());
                if !fresh {
                    tracing::info!(%name, uuid = %gpu.uuid, index = gpu.index, "Ignoring GPU with an empty or repeated UUID");
                }
                fresh
            })
            .cloned()
            .collect();
        gpus.sort_by_key(|gpu| gpu.index);
        Some(Self {
            gpus: Arc::new(gpus),
            ..Self::default()
        })
    }

    /// This inventory with its [`NodeLayout`] made for it.
    pub fn laid_out(mut self) -> Self {
        self.layout = self.layout();
        self
    }

    /// Its GPUs as a snapshot lays them out, made afresh.
    pub fn layout(&self) -> NodeLayout {
        NodeLayout::of(
            &self.gpus,
            |uuid| self.publisher(uuid),
            |uuid| self.unpublished.contains(uuid),
        )
    }

    /// Which inventory publishes the GPU or MIG instance `uuid`.
    pub fn publisher(&self, uuid: &str) -> Publisher {
        if self.both.contains(uuid) {
            Publisher::Both
        } else if self.dra_only.contains(uuid) || self.unpublished.contains(uuid) {
            Publisher::DraDriver
        } else {
            Publisher::Agent
        }
    }

    /// Whether the agent publishes `uuid` (a GPUResource may take it).
    pub fn agent_publishes(&self, uuid: &str) -> bool {
        self.publisher(uuid) != Publisher::DraDriver
    }
}

/// The GPUs a node has by both inventories: its GPUNode's (as the agent
/// lists them) and those DRA drivers publish on it. A UUID both list is one
/// GPU, described by the agent; DRA-only GPUs are numbered after the
/// agent's where their index is taken. `None` when neither lists any.
pub(crate) fn merge(agent: Option<&NodeInventory>, dra: Option<DraNode>) -> Option<NodeInventory> {
    let Some(dra) = dra else {
        return agent.cloned();
    };
    let mut merged = agent.cloned().unwrap_or_default();
    merged.counters = dra.counters;
    let mut known: HashSet<String> = merged
        .gpus
        .iter()
        .flat_map(|g| {
            std::iter::once(g.uuid.clone()).chain(g.mig_instances.iter().map(|m| m.uuid.clone()))
        })
        .collect();
    let mut used: HashSet<u32> = merged.gpus.iter().map(|g| g.index).collect();
    let gpus = Arc::make_mut(&mut merged.gpus);
    for mut gpu in dra.gpus {
        if let Some(whole) = gpus.iter_mut().find(|g| g.uuid == gpu.uuid) {
            if !dra.unpublished.contains(&gpu.uuid) {
                merged.both.insert(gpu.uuid.clone());
            }
            for instance in gpu.mig_instances {
                if known.contains(&instance.uuid) {
                    merged.both.insert(instance.uuid);
                } else {
                    known.insert(instance.uuid.clone());
                    merged.dra_only.insert(instance.uuid.clone());
                    whole.mig_instances.push(instance);
                }
            }
            continue;
        }
        if !used.insert(gpu.index) {
            gpu.index = (0..).find(|i| !used.contains(i)).unwrap_or(0);
            used.insert(gpu.index);
        }
        for instance in &gpu.mig_instances {
            known.insert(instance.uuid.clone());
            merged.dra_only.insert(instance.uuid.clone());
        }
        if dra.unpublished.contains(&gpu.uuid) {
            merged.unpublished.insert(gpu.uuid.clone());
        } else {
            merged.dra_only.insert(gpu.uuid.clone());
        }
        known.insert(gpu.uuid.clone());
        gpus.push(gpu);
    }
    gpus.sort_by_key(|g| g.index);
    Some(merged)
}
