//! What a node's snapshot record is before anything holds its GPUs: each
//! position's UUID, model, memory, NUMA node, NVLink peers, health, MIG
//! parent and publisher. It changes only with the node's inventory, so it
//! is laid out once, when the inventory changes, instead of every round;
//! a round copies it and fills in what holders keep (see
//! `snapshot::node_record`).
//!
//! ```text
//!   inventory ──(on change)──▶ NodeLayout { uuids, gpus (use: none), names }
//!   round:  layout.gpus ── copy, names interned, use filled in ──▶ Node
//! ```

use std::sync::Arc;

use wasmgpu_api::GpuInfo;
use wasmgpu_contract::bits;
use wasmgpu_contract::types::{Gpu, MigInstance, Publisher};

use crate::fast_map::FastMap;

/// A node's GPUs in snapshot order (each whole GPU followed by its MIG
/// instances), as a policy would see them with nothing held.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NodeLayout {
    /// The UUID of each position.
    pub uuids: Arc<[String]>,
    /// Each position's record with nothing held: `model` and a MIG
    /// instance's `profile` index this layout's own `models` and
    /// `mig_profiles`, not the snapshot's.
    pub gpus: Vec<Gpu>,
    /// Whether the position is a whole GPU a DRA driver publishes only
    /// as MIG instances (static MIG): never given whole, always held.
    pub unpublished: Vec<bool>,
    /// The models on the node, each once, in order of first position.
    pub models: Vec<String>,
    /// The MIG profiles on the node, each once.
    pub mig_profiles: Vec<String>,
}

impl NodeLayout {
    /// Lays out a node's `gpus` (whole GPUs sorted by index, each with its
    /// MIG instances); `publisher` says who publishes a UUID, `unpublished`
    /// whether it is a whole GPU never given whole. NVLink peers become a
    /// bit set of their indices (peers `gpus` does not list are dropped);
    /// MIG instances inherit their parent's model and health.
    pub fn of(
        gpus: &[GpuInfo],
        publisher: impl Fn(&str) -> Publisher,
        unpublished: impl Fn(&str) -> bool,
    ) -> NodeLayout {
        let len = gpus.iter().map(|g| 1 + g.mig_instances.len()).sum();
        let uuid_to_index: FastMap<&str, u32> =
            gpus.iter().map(|g| (g.uuid.as_str(), g.index)).collect();
        let mut layout = NodeLayout {
            gpus: Vec::with_capacity(len),
            unpublished: Vec::with_capacity(len),
            ..NodeLayout::default()
        };
        let mut uuids = Vec::with_capacity(len);
        for gpu in gpus.iter() {
            let position = layout.gpus.len() as u32;
            let model = intern(&mut layout.models, &gpu.model);
            uuids.push(gpu.uuid.clone());
            layout.unpublished.push(unpublished(&gpu.uuid));
            layout.gpus.push(Gpu {
                index: gpu.index,
                model,
                memory_mib: gpu.memory_total_mib,
                allocated_mib: 0,
                held: false,
                shared_owners: 0,
                numa_node: gpu.numa_node,
                nvlink: bits::nvlink_of(
                    gpu.nvlink_peers
                        .iter()
                        .filter_map(|peer| uuid_to_index.get(peer.as_str()).copied()),
                ),
                healthy: gpu.healthy,
                mig: None,
                published_by: publisher(&gpu.uuid),
            });
            for instance in &gpu.mig_instances {
                uuids.push(instance.uuid.clone());
                layout.unpublished.push(false);
                layout.gpus.push(Gpu {
                    index: gpu.index,
                    model,
                    memory_mib: instance.memory_total_mib,
                    allocated_mib: 0,
                    held: false,
                    shared_owners: 0,
                    numa_node: gpu.numa_node,
                    nvlink: 0,
                    healthy: gpu.healthy,
                    mig: Some(MigInstance {
                        parent: position,
                        profile: intern(&mut layout.mig_profiles, &instance.profile),
                    }),
                    published_by: publisher(&instance.uuid),
                });
            }
        }
        layout.uuids = uuids.into();
        layout
    }
}

/// The position of `name` in `names`, added when missing. Tables hold a
/// handful of names: a scan beats hashing.
pub(crate) fn intern(names: &mut Vec<String>, name: &str) -> u32 {
    match names.iter().position(|n| n == name) {
        Some(i) => i as u32,
        None => {
            names.push(name.to_owned());
            (names.len() - 1) as u32
        }
    }
}
