//! What is left on each node and GPU as the round goes, and the classes of
//! uniform nodes bucketed by free count.

use std::collections::BTreeSet;

use super::want::Want;
use wasmgpu_contract::Node;

#[derive(Clone, Debug)]
pub(super) struct GpuState {
    pub(super) model: usize,
    pub(super) memory_mib: u64,
    pub(super) free_mib: u64,
    pub(super) exclusive: bool,
    pub(super) shares: u32,
    pub(super) healthy: bool,
    pub(super) group: u32,
    /// For a MIG instance: its parent's position and its profile.
    pub(super) mig: Option<(u32, u32)>,
    /// For a whole GPU: how many of its MIG instances are held.
    pub(super) mig_held: u32,
    /// For a MIG instance: its parent is held whole or shared.
    pub(super) parent_busy: bool,
}

impl GpuState {
    /// A whole GPU (not a MIG instance) nobody holds any part of.
    pub(super) fn whole_free(&self) -> bool {
        self.mig.is_none()
            && self.healthy
            && !self.exclusive
            && self.shares == 0
            && self.mig_held == 0
            && self.free_mib == self.memory_mib
    }

    pub(super) fn fits(&self, want: &Want) -> bool {
        if !self.healthy || self.exclusive || !want.model_ok[self.model] {
            return false;
        }
        match (want.mig, self.mig) {
            (Some(profile), Some((_, has))) => {
                profile == has && !self.parent_busy && self.memory_mib >= want.shape.memory_mib
            }
            (Some(_), None) | (None, Some(_)) => false,
            (None, None) if self.mig_held > 0 => false,
            (None, None) if want.exclusive() => {
                self.shares == 0
                    && self.free_mib == self.memory_mib
                    && self.memory_mib >= want.shape.memory_mib
            }
            (None, None) => self.free_mib >= want.shape.memory_mib,
        }
    }

    pub(super) fn could_ever_fit(&self, want: &Want) -> bool {
        self.healthy
            && want.model_ok[self.model]
            && match (want.mig, self.mig) {
                (Some(profile), Some((_, has))) => {
                    profile == has && self.memory_mib >= want.shape.memory_mib
                }
                (None, None) => self.memory_mib >= want.shape.memory_mib,
                _ => false,
            }
    }
}

#[derive(Clone, Debug)]
pub(super) struct NodeState {
    pub(super) gpus: Vec<GpuState>,
    /// Whole GPUs nobody holds any part of.
    pub(super) free_whole: u32,
    /// Healthy whole GPUs.
    pub(super) healthy: u32,
    /// The node lists MIG instances: such nodes are searched by a scan.
    pub(super) has_mig: bool,
    /// Set when every GPU has the same model and memory: exclusive fit checks
    /// are then O(1), and the node sits in a free-count bucket of its class.
    pub(super) uniform: Option<(usize, u64)>,
    /// Index into `Cluster::classes` when `uniform`.
    pub(super) class: Option<usize>,
}

/// Nodes whose GPUs are all of one model and memory size, bucketed by how many
/// whole GPUs they have free: finding the tightest or loosest node for an
/// exclusive request takes a few set look-ups instead of a scan of every node.
#[derive(Clone, Debug)]
pub(super) struct Class {
    pub(super) model: usize,
    pub(super) memory_mib: u64,
    /// `free_to_nodes[k]`: nodes of this class with exactly `k` whole GPUs free.
    pub(super) free_to_nodes: Vec<BTreeSet<u32>>,
}

impl NodeState {
    /// What is free on `node` as the snapshot has it; `groups` is a buffer
    /// for its NVLink groups, `unknown_model` the model index a GPU out of
    /// range reads as.
    pub(super) fn of(node: &Node, groups: &mut UnionFind, unknown_model: usize) -> NodeState {
        groups.reset(node.gpus.len());
        for (i, gpu) in node.gpus.iter().enumerate() {
            for peer in crate::nvlink::peer_positions(node, gpu) {
                groups.union(i, peer);
            }
        }
        let mut gpus: Vec<GpuState> = node
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| GpuState {
                model: (g.model as usize).min(unknown_model),
                memory_mib: g.memory_mib,
                free_mib: g.memory_mib.saturating_sub(g.allocated_mib),
                exclusive: g.held,
                shares: g.shared_owners,
                // A GPU only a DRA driver publishes is not for a
                // GPUResource request: these helpers never give it.
                healthy: g.healthy && g.published_by != wasmgpu_contract::Publisher::DraDriver,
                group: groups.find(i) as u32,
                mig: g
                    .mig
                    .as_ref()
                    .filter(|m| (m.parent as usize) < node.gpus.len())
                    .map(|m| (m.parent, m.profile)),
                mig_held: 0,
                parent_busy: false,
            })
            .collect();
        let has_mig = gpus.iter().any(|g| g.mig.is_some());
        if has_mig {
            for i in 0..gpus.len() {
                if let Some((parent, _)) = gpus[i].mig {
                    let p = &gpus[parent as usize];
                    let busy = p.exclusive || p.shares > 0 || p.free_mib < p.memory_mib;
                    let parent_healthy = p.healthy;
                    gpus[i].parent_busy = busy;
                    // An instance takes its parent's health.
                    gpus[i].healthy &= parent_healthy;
                    if gpus[i].exclusive {
                        gpus[parent as usize].mig_held += 1;
                    }
                }
            }
        }
        let uniform = match gpus.first() {
            Some(first)
                if !has_mig
                    && gpus
                        .iter()
                        .all(|g| g.model == first.model && g.memory_mib == first.memory_mib) =>
            {
                Some((first.model, first.memory_mib))
            }
            _ => None,
        };
        let free_whole = gpus.iter().filter(|g| g.whole_free()).count() as u32;
        let healthy = gpus.iter().filter(|g| g.healthy && g.mig.is_none()).count() as u32;
        NodeState {
            gpus,
            free_whole,
            healthy,
            has_mig,
            uniform,
            class: None,
        }
    }
}

/// Buckets the uniform nodes into classes (one model and memory size);
/// the rest are mixed nodes, searched by a scan.
pub(super) fn classes_of(nodes: &mut [NodeState]) -> (Vec<Class>, Vec<u32>) {
    let mut classes: Vec<Class> = Vec::new();
    let mut mixed_nodes = Vec::new();
    for (n, node) in nodes.iter_mut().enumerate() {
        let Some((model, memory_mib)) = node.uniform else {
            mixed_nodes.push(n as u32);
            continue;
        };
        let c = match classes
            .iter()
            .position(|c| c.model == model && c.memory_mib == memory_mib)
        {
            Some(c) => c,
            None => {
                classes.push(Class {
                    model,
                    memory_mib,
                    free_to_nodes: Vec::new(),
                });
                classes.len() - 1
            }
        };
        let buckets = &mut classes[c].free_to_nodes;
        if buckets.len() <= node.gpus.len() {
            buckets.resize_with(node.gpus.len() + 1, BTreeSet::new);
        }
        buckets[node.free_whole as usize].insert(n as u32);
        node.class = Some(c);
    }
    (classes, mixed_nodes)
}

/// Union-find over GPU positions, for NVLink groups.
pub(super) struct UnionFind(pub(super) Vec<usize>);

impl UnionFind {
    /// Every position its own group, reusing the buffer.
    pub(super) fn reset(&mut self, n: usize) {
        self.0.clear();
        self.0.extend(0..n);
    }

    pub(super) fn find(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            self.0[i] = self.0[self.0[i]];
            i = self.0[i];
        }
        i
    }

    pub(super) fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[ra.max(rb)] = ra.min(rb);
        }
    }
}
