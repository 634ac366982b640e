//! What the index keeps of a `GPUNode`: the node's GPUs.

use std::collections::HashSet;

use wasmgpu_api::{GPUNode, GpuInfo};

/// The GPUs a node's agent published, sorted by index, UUIDs unique.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NodeInventory {
    pub gpus: Vec<GpuInfo>,
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
        Some(Self { gpus })
    }
}
