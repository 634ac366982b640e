//! Read-only questions about the round's current state: what is free on a
//! node, per GPU, per label value, and how the node's GPUs are linked. They
//! read the same state [`Cluster::commit`] updates, so after a placement
//! they answer for what is left (and inside [`Cluster::place_gang`]'s trial,
//! for the trial).

use std::collections::BTreeMap;

use super::state::Cluster;
use super::want::Want;
use crate::nvlink;
use wasmgpu_contract::glob_match;

/// One GPU (or MIG instance) of a node as the round stands: what the
/// snapshot said, less what placements committed in this round took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuNow {
    /// Reported healthy by the node's agent.
    pub healthy: bool,
    /// Held exclusively: by a running pod, or by a placement of this round.
    pub held: bool,
    /// Pods sharing it (running, and placed in this round).
    pub shares: u32,
    /// Memory not yet handed out, in MiB.
    pub free_mib: u64,
    /// Its memory, in MiB.
    pub memory_mib: u64,
    /// A whole GPU nobody holds any part of: not held, not shared, none of
    /// its MIG instances held. What an exclusive request can take.
    pub whole_free: bool,
    /// For a MIG instance: its parent's position in the node's GPU list.
    pub mig_parent: Option<u32>,
}

impl<'s> Cluster<'s> {
    /// How many GPUs (MIG instances included) the node lists.
    pub fn gpu_count(&self, node: u32) -> usize {
        self.nodes[node as usize].gpus.len()
    }

    /// GPU `gpu` (a position in the node's GPU list) as the round stands.
    ///
    /// ```
    /// use wasmgpu_policy_sdk::{Cluster, Fit, Sharing::Shared};
    /// use wasmgpu_policy_sdk::testing::{node, request, snapshot};
    ///
    /// let snap = snapshot(vec![node("a", 2, "NVIDIA L4", 23034)], vec![request("ns/s", 1, Shared, 8000)]);
    /// let mut cluster = Cluster::new(&snap);
    /// let want = cluster.want(&snap.pending[0]);
    /// cluster.place(0, &want, Fit::Tightest, true);
    /// let gpu = cluster.gpu_now(0, 0);
    /// assert_eq!((gpu.shares, gpu.free_mib, gpu.whole_free), (1, 23034 - 8000, false));
    /// assert!(cluster.gpu_now(0, 1).whole_free);
    /// ```
    pub fn gpu_now(&self, node: u32, gpu: usize) -> GpuNow {
        let g = &self.nodes[node as usize].gpus[gpu];
        GpuNow {
            healthy: g.healthy,
            held: g.exclusive,
            shares: g.shares,
            free_mib: g.free_mib,
            memory_mib: g.memory_mib,
            whole_free: g.whole_free(),
            mig_parent: g.mig.map(|(parent, _)| parent),
        }
    }

    /// Positions of the node's whole GPUs that nobody holds any part of
    /// (healthy, not held, not shared, no MIG instance held), optionally only
    /// those whose model matches the glob `model` (`"NVIDIA H100*"`). Their
    /// number without a glob is [`Cluster::free_whole`].
    ///
    /// ```
    /// use wasmgpu_policy_sdk::Cluster;
    /// use wasmgpu_policy_sdk::testing::{gpu, node, snapshot};
    ///
    /// let mut n = node("a", 3, "NVIDIA H100 80GB HBM3", 81559);
    /// n.gpus[0].held = true;
    /// n.gpus.push(gpu(3, "NVIDIA L4", 23034));
    /// let snap = snapshot(vec![n], vec![]);
    /// let cluster = Cluster::new(&snap);
    /// assert_eq!(cluster.free_gpus(0, None), [1, 2, 3]);
    /// assert_eq!(cluster.free_gpus(0, Some("NVIDIA H100*")), [1, 2]);
    /// ```
    pub fn free_gpus(&self, node: u32, model: Option<&str>) -> Vec<usize> {
        let gpus = &self.nodes[node as usize].gpus;
        (0..gpus.len())
            .filter(|&i| gpus[i].whole_free())
            .filter(|&i| {
                model.is_none_or(|pattern| {
                    self.models
                        .get(gpus[i].model)
                        .is_some_and(|name| glob_match(pattern, name))
                })
            })
            .collect()
    }

    /// Positions of the node's GPUs (or MIG instances) that could take
    /// `want` right now, one by one: what [`Cluster::pick_gpus`] chooses
    /// from. The node fits when there are at least `count` of them.
    pub fn fitting_gpus(&self, node: u32, want: &Want) -> Vec<usize> {
        let gpus = &self.nodes[node as usize].gpus;
        (0..gpus.len()).filter(|&i| gpus[i].fits(want)).collect()
    }

    /// The value of the node's label `key`, if it has it.
    ///
    /// Only labels the policy asked for in `describe()` (`info.label-keys`)
    /// reach it: any other key reads as missing.
    pub fn label(&self, node: u32, key: &str) -> Option<&'s str> {
        let at = self.snapshot.label_keys.iter().position(|k| k == key)?;
        self.snapshot.nodes[node as usize]
            .labels
            .get(at)?
            .as_deref()
    }

    /// For each value of node label `key` (a zone, a rack), how many GPUs
    /// on `want`'s eligible nodes with that value could take `want` right
    /// now, counted one by one as in [`Cluster::fitting_gpus`]: free whole
    /// GPUs of the model and memory for an exclusive request, GPUs with the
    /// memory left for a shared one, free instances for a MIG one. Eligible
    /// nodes without the label are left out; values whose nodes have
    /// nothing free are listed with 0.
    ///
    /// ```
    /// use wasmgpu_policy_sdk::{Cluster, Sharing::Exclusive};
    /// use wasmgpu_policy_sdk::testing::{node, request, snapshot, with_labels};
    ///
    /// const ZONE: &str = "topology.kubernetes.io/zone";
    /// let snap = snapshot(
    ///     vec![
    ///         with_labels(node("a", 4, "NVIDIA L4", 23034), &[(ZONE, "z1")]),
    ///         with_labels(node("b", 2, "NVIDIA L4", 23034), &[(ZONE, "z1")]),
    ///         with_labels(node("c", 8, "NVIDIA L4", 23034), &[(ZONE, "z2")]),
    ///     ],
    ///     vec![request("ns/p", 2, Exclusive, 0)],
    /// );
    /// let cluster = Cluster::new(&snap);
    /// let want = cluster.want(&snap.pending[0]);
    /// let per_zone = cluster.free_by_label(ZONE, &want);
    /// assert_eq!(per_zone.into_iter().collect::<Vec<_>>(), [("z1", 6), ("z2", 8)]);
    /// ```
    pub fn free_by_label(&self, key: &str, want: &Want) -> BTreeMap<&'s str, u32> {
        let mut per_value: BTreeMap<&'s str, u32> = BTreeMap::new();
        for node in self.eligible(want.request) {
            if (node as usize) >= self.nodes.len() {
                continue;
            }
            if let Some(value) = self.label(node, key) {
                let free = self.nodes[node as usize]
                    .gpus
                    .iter()
                    .filter(|g| g.fits(want))
                    .count() as u32;
                *per_value.entry(value).or_default() += free;
            }
        }
        per_value
    }

    /// The node's NVLink groups: its whole GPUs (MIG instances left out)
    /// split into connected components of the link graph — GPUs joined by
    /// NVLink directly or through other GPUs of the node. Every whole GPU is
    /// in exactly one group (a GPU without links alone); groups are ordered
    /// by their first GPU, GPUs by position. The GPUs of a group need not be
    /// peers of one another: see [`Cluster::nvlink_clique`].
    ///
    /// ```
    /// use wasmgpu_policy_sdk::Cluster;
    /// use wasmgpu_policy_sdk::testing::{node, snapshot, with_nvlink};
    ///
    /// let n = with_nvlink(node("a", 5, "NVIDIA A100", 40960), &[(0, 1), (1, 2), (3, 4)]);
    /// let snap = snapshot(vec![n], vec![]);
    /// let cluster = Cluster::new(&snap);
    /// assert_eq!(cluster.nvlink_groups(0), [vec![0, 1, 2], vec![3, 4]]);
    /// // 0 and 2 share a group but are not peers.
    /// assert!(!cluster.nvlink_peers(0, 0, 2));
    /// assert_eq!(cluster.nvlink_clique(0, &[0, 1, 2], 3), None);
    /// assert_eq!(cluster.nvlink_clique(0, &[0, 1, 2], 2), Some(vec![0, 1]));
    /// ```
    pub fn nvlink_groups(&self, node: u32) -> Vec<Vec<usize>> {
        let gpus = &self.nodes[node as usize].gpus;
        let mut groups: Vec<(u32, Vec<usize>)> = Vec::new();
        for (i, gpu) in gpus.iter().enumerate().filter(|(_, g)| g.mig.is_none()) {
            match groups.iter_mut().find(|(g, _)| *g == gpu.group) {
                Some((_, members)) => members.push(i),
                None => groups.push((gpu.group, vec![i])),
            }
        }
        groups.into_iter().map(|(_, members)| members).collect()
    }

    /// Whether GPUs `a` and `b` (positions) of the node are NVLink peers:
    /// linked directly (either lists the other in `nvlink_peers`).
    pub fn nvlink_peers(&self, node: u32, a: usize, b: usize) -> bool {
        nvlink::linked(&self.snapshot.nodes[node as usize], a, b)
    }

    /// Whether the GPUs at `gpus` are all NVLink peers of one another (an
    /// NVLink clique). One GPU, or none, is trivially one.
    pub fn is_nvlink_clique(&self, node: u32, gpus: &[usize]) -> bool {
        gpus.iter()
            .enumerate()
            .all(|(k, &a)| gpus[k + 1..].iter().all(|&b| self.nvlink_peers(node, a, b)))
    }

    /// `size` GPUs among `among` (positions of the node's GPUs) that are all
    /// NVLink peers of one another, or `None`: the first such set in
    /// `among`'s order (so pass the GPUs you prefer first), in that order.
    /// To find one among the free GPUs, pass [`Cluster::free_gpus`] or
    /// [`Cluster::fitting_gpus`]. At most the first 64 of `among` are
    /// considered.
    pub fn nvlink_clique(&self, node: u32, among: &[usize], size: usize) -> Option<Vec<usize>> {
        nvlink::clique(&self.snapshot.nodes[node as usize], among, size)
    }
}

impl<'s> Cluster<'s> {
    /// Number of nodes in the snapshot.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The node's name.
    pub fn node_name(&self, node: u32) -> &'s str {
        &self.snapshot.nodes[node as usize].name
    }

    /// GPUs on the node that nobody holds any part of.
    pub fn free_whole(&self, node: u32) -> u32 {
        self.nodes[node as usize].free_whole
    }

    /// Healthy GPUs on the node.
    pub fn healthy(&self, node: u32) -> u32 {
        self.nodes[node as usize].healthy
    }

    /// Room left on the node for requests like `want`: free whole GPUs for an
    /// exclusive request, free MiB on GPUs it could share for a shared one,
    /// free instances of its profile for a MIG request.
    pub fn headroom(&self, node: u32, want: &Want) -> u64 {
        let state = &self.nodes[node as usize];
        if want.is_mig() {
            state.gpus.iter().filter(|g| g.fits(want)).count() as u64
        } else if want.exclusive() {
            u64::from(state.free_whole)
        } else {
            state
                .gpus
                .iter()
                .filter(|g| g.fits(want))
                .map(|g| g.free_mib)
                .sum()
        }
    }

    /// True when the node has `count` GPUs that fit `want` right now.
    pub fn fits(&self, node: u32, want: &Want) -> bool {
        let state = &self.nodes[node as usize];
        let count = want.shape.count;
        if want.exclusive() && !want.is_mig() {
            if state.free_whole < count {
                return false;
            }
            if let Some((model, memory_mib)) = state.uniform {
                return want.model_ok[model] && memory_mib >= want.shape.memory_mib;
            }
        }
        state
            .gpus
            .iter()
            .filter(|g| g.fits(want))
            .take(count as usize)
            .count()
            == count as usize
    }

    /// Names of the GPUs at `positions` on `node`, for logs (a policy sees
    /// no UUIDs): `node/gpu<index>`, and `node/gpu<index>/mig<k>` for the
    /// k-th entry after its parent.
    pub fn gpu_names(&self, node: u32, positions: &[usize]) -> Vec<String> {
        let node = &self.snapshot.nodes[node as usize];
        positions
            .iter()
            .map(|&i| match node.gpus[i].mig {
                None => format!("{}/gpu{}", node.name, node.gpus[i].index),
                Some(m) => format!(
                    "{}/gpu{}/mig{}",
                    node.name,
                    node.gpus[i].index,
                    i - m.parent as usize - 1
                ),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Fit;
    use crate::testing::{
        node, request, restrict, shape, snapshot, with_labels, with_mig, with_nvlink,
    };
    use wasmgpu_contract::Sharing;

    const ZONE: &str = "topology.kubernetes.io/zone";

    #[test]
    fn queries_follow_the_commits_of_the_round() {
        let snap = snapshot(
            vec![
                with_labels(node("a", 4, "NVIDIA H100", 81920), &[(ZONE, "z1")]),
                with_labels(node("b", 4, "NVIDIA A100", 40960), &[(ZONE, "z2")]),
                node("c", 4, "NVIDIA H100", 81920),
            ],
            vec![
                request("ns/x", 3, Sharing::Exclusive, 0),
                request("ns/s", 1, Sharing::Shared, 10000),
                {
                    let mut r = request("ns/h", 1, Sharing::Exclusive, 0);
                    shape(&mut r).model = Some("NVIDIA H100*".into());
                    r
                },
            ],
        );
        let mut cluster = Cluster::new(&snap);
        let [x, s, h] = [0, 1, 2].map(|i| cluster.want(&snap.pending[i]));
        fn per_zone<'s>(c: &Cluster<'s>, w: &Want) -> BTreeMap<&'s str, u32> {
            c.free_by_label(ZONE, w)
        }
        assert_eq!(
            per_zone(&cluster, &h),
            BTreeMap::from([("z1", 4), ("z2", 0)])
        );
        assert_eq!(
            per_zone(&cluster, &x),
            BTreeMap::from([("z1", 4), ("z2", 4)])
        );

        cluster.place(0, &x, Fit::Tightest, true).unwrap();
        assert_eq!(cluster.free_gpus(0, None), [3]);
        assert_eq!(cluster.free_gpus(0, Some("*A100*")), Vec::<usize>::new());
        assert_eq!(cluster.free_gpus(1, Some("*A100*")), [0, 1, 2, 3]);
        assert!(cluster.gpu_now(0, 0).held && !cluster.gpu_now(0, 0).whole_free);
        assert_eq!(
            per_zone(&cluster, &h),
            BTreeMap::from([("z1", 1), ("z2", 0)])
        );

        cluster.place(0, &s, Fit::Tightest, true).unwrap();
        let shared = cluster.gpu_now(0, 3);
        assert_eq!((shared.shares, shared.free_mib), (1, 81920 - 10000));
        assert!(!shared.whole_free && !shared.held);
        assert_eq!(cluster.fitting_gpus(0, &s), [3], "room to share left");
        assert_eq!(cluster.fitting_gpus(0, &h), Vec::<usize>::new());
        assert_eq!(
            per_zone(&cluster, &h),
            BTreeMap::from([("z1", 0), ("z2", 0)])
        );
        assert_eq!(cluster.label(2, ZONE), None);
        assert_eq!(cluster.label(1, ZONE), Some("z2"));

        // Only eligible nodes count.
        let mut snap = snap.clone();
        restrict(&mut snap, 2, &[1, 2]);
        let cluster = Cluster::new(&snap);
        let h = cluster.want(&snap.pending[2]);
        assert_eq!(per_zone(&cluster, &h), BTreeMap::from([("z2", 0)]));
    }

    #[test]
    fn groups_cliques_and_mig_instances() {
        let n = with_mig(
            with_nvlink(
                node("a", 4, "NVIDIA A100", 81920),
                &[(0, 1), (1, 2), (0, 2)],
            ),
            3,
            &[("1g.10gb", 9856)],
        );
        let snap = snapshot(vec![n], vec![]);
        let cluster = Cluster::new(&snap);
        assert_eq!(cluster.gpu_count(0), 5);
        assert_eq!(cluster.nvlink_groups(0), [vec![0, 1, 2], vec![3]]);
        assert!(cluster.is_nvlink_clique(0, &[0, 1, 2]));
        assert!(!cluster.is_nvlink_clique(0, &[0, 1, 3]));
        assert!(cluster.is_nvlink_clique(0, &[3]));
        assert_eq!(
            cluster.nvlink_clique(0, &[3, 2, 1, 0], 3),
            Some(vec![2, 1, 0])
        );
        assert_eq!(cluster.gpu_now(0, 4).mig_parent, Some(3));
        assert_eq!(cluster.free_gpus(0, None), [0, 1, 2, 3]);
    }
}
